"""The external-sampling estimator (the default) against exact regrets from the game tree.

The variant and the fixed regret-matching policies of tests/game_tree.py, read through the
card-indexed head of the default config. The tree side (game_tree.enumerate_tree) has its
own regret matching and takes nothing from lc_cfr/traversal/policy.py, so a wrong target
formula, node value or expansion point in the traversal cannot cancel against itself.

At an expanded node h every legal action is played and valued by the sampled game below
it; whatever is sampled below, E[target(a) | h] = r(h, a) = v(h, a) - sum_b sigma(b) v(h, b)
with v the exact values under the policies. Which nodes get expanded is chance too, and the
tree gives its probabilities:

- `root` (max_depth 2): the traverser's first two decisions, below every root action and
  the opponent's sampled replies;
- `sampled` (max_depth 1, the default): the first traverser decision at or after the
  decision index s with two or more legal actions, on a path where the traverser plays
  sigma mixed with PATH_EPSILON of uniform and the opponent plays its sigma; s is uniform
  over the 2(N - 2H) decisions of a game without pile draws, drawn per traversal at
  (seed, iteration, game, 0, EXPLORE) (docs/design.md 2.2, 3.4).

The samples are summed per decision index d = 2 turn + phase (read off their encodings),
so traversal j gives Y_j[d, a], the sum of its targets at d. Given j's deal (and s), the
tree gives E[Y_j[d, a]] = sum over expanded nodes h at d of P(h expanded) r(h, a). Over
many traversals the mean of Y_j - E[Y_j] must be within Z_AGREE standard errors of zero in
every cell, and so must the count of samples per d. With v(h, a) in place of the regret
the cells miss by many standard errors: the check has the power to see a wrong target.
"""

import jax
import numpy as np
import pytest
from game_tree import RULES, decision_of, enumerate_tree, explore, regrets, traversal_decks
from game_tree import fixed_advantage_networks as fixed_advantage
from traversal_helpers import options

from lc_cfr.game import rng
from lc_cfr.nets import mlp
from lc_cfr.traversal import api, lockstep

SPEC = mlp.NetworkSpec(
    input_size=RULES.encoding_size,
    num_actions=RULES.num_actions,
    hidden_size=16,
    num_layers=1,
    activation="relu",
    head="card",
    n_cards=RULES.n_cards,
    hand_size=RULES.hand_size,
    own_known_input=False,  # as in test_estimator.py: the root policy mixes
)
SEED, ITERATION, TRAVERSER = 11, 3, 0
NUM_TRAVERSALS = 20_000
LANES = 500
UTILITY_SCALE = 16.0
NETWORK_KEY = 3
PATH_EPSILON = 0.2  # the default config's traversal.path_epsilon
SPAN = 2 * (RULES.n_cards - 2 * RULES.hand_size)  # decisions of a game without pile draws
DECISIONS = 2 * RULES.max_turns  # decision indices 0 .. 2 max_turns - 1
Z_AGREE = 4.0  # |mean difference| allowed, in standard errors, in every cell
Z_BIAS = 6.0  # v(h, a) in place of the regret must miss by more, in some cell
# Standard errors are floored here: a cell that is constant over traversals (a forced draw,
# regret 0) still differs by float32 rounding from the float64 tree
ROUNDING = 1e-5

CASES = {
    "root": dict(expand_at="root", max_depth=2),
    "sampled": dict(expand_at="sampled", max_depth=1, path_epsilon=PATH_EPSILON),
}


def _options(case: str) -> api.TraversalOptions:
    return options(
        traversals_per_player=NUM_TRAVERSALS,
        sampling_mode="external",
        all_negative_fallback="uniform",  # the tree's regret matching
        utility_scale=UTILITY_SCALE,
        **CASES[case],
    )


# ----- the tree side: which nodes are expanded, and with what probability -------------


def _root_expansion(levels, max_depth: int) -> list[np.ndarray]:
    """Per level, [M]: the probability that the node is expanded, given the deal.

    Every action of an expanded node is played (weight 1); elsewhere the mover samples
    from sigma. A traverser node is expanded while fewer than max_depth traverser nodes lie
    above it.
    """
    reach, above = np.ones(len(levels[0].deck)), np.zeros(len(levels[0].deck), int)
    out = []
    for level in levels:
        traverser = level.mover == TRAVERSER
        expanded = traverser & (above < max_depth)
        out.append(np.where(expanded, reach, 0.0))
        weight = np.where(expanded[:, None], 1.0, level.sigma)
        reach, above = _down(
            level,
            reach[level.parent] * weight[level.parent, level.action],
            (above + traverser)[level.parent],
        )
    return out


def _sampled_expansion(levels) -> list[np.ndarray]:
    """Per level, [M, SPAN]: the probability that the node is expanded, given the deal and
    the drawn start s (one column per s)."""
    reach = np.ones((len(levels[0].deck), SPAN))
    out = []
    for level in levels:
        traverser = level.mover == TRAVERSER
        eligible = (traverser & (level.mask.sum(axis=1) >= 2))[:, None] & (
            level.decision[:, None] >= np.arange(SPAN)[None, :]
        )
        out.append(np.where(eligible, reach, 0.0))  # the path stops where it expands
        passing = np.where(eligible, 0.0, reach)
        behaviour = np.where(
            traverser[:, None], explore(level.sigma, level.mask, PATH_EPSILON), level.sigma
        )
        edge = passing[level.parent] * behaviour[level.parent, level.action][:, None]
        (reach,) = _down(level, edge)
    return out


def _down(level, *edge_arrays):
    """Edge arrays as arrays over the next level's nodes (its nodes are the non-terminal
    edges, in edge order: game_tree.Level.child)."""
    return tuple(x[~level.terminal] for x in edge_arrays)


def _expected(levels, expansion, num_decks: int, per_node) -> np.ndarray:
    """sum over nodes of P(expanded) * per_node(level) [M, A], per deal and decision (and
    start s, for the sampled expansion): [D, DECISIONS, (SPAN,) A]."""
    extra = expansion[0].shape[1:]
    total = np.zeros((num_decks, DECISIONS, *extra, RULES.num_actions))
    for level, p in zip(levels, expansion, strict=True):
        values = per_node(level)[:, *([None] * len(extra)), :]  # [M, (1,) A]
        np.add.at(total, (level.deck, level.decision), p[..., None] * values)
    return total


# ----- the sampled side and the comparison --------------------------------------------


class Run:
    """One case: per traversal, the sums of its targets and its sample counts per decision
    index, beside their expectations given the traversal's deal (and start)."""

    def __init__(self, case: str, levels, decks, deal, networks):
        opts = _options(case)
        samples, self.stats = jax.device_get(
            lockstep.run_traversals(
                RULES,
                SPEC,
                opts,
                networks,
                lanes=LANES,
                seed=SEED,
                iteration=ITERATION,
                traverser=TRAVERSER,
            )
        )
        per_traversal, _ = api.slots_per_traversal(RULES, opts)
        shape = (NUM_TRAVERSALS, per_traversal)
        valid = samples.advantage_valid.reshape(shape)
        decision = decision_of(samples.advantage_info).reshape(shape)
        target = samples.advantage_target.astype(np.float64).reshape(*shape, -1)
        self.root_info = samples.advantage_info.reshape(*shape, -1)[:, 0]
        self.root_valid, self.root_target = valid[:, 0], target[:, 0]
        traversal = np.repeat(np.arange(NUM_TRAVERSALS), per_traversal).reshape(shape)
        observed = np.zeros((NUM_TRAVERSALS, DECISIONS, RULES.num_actions))
        counts = np.zeros((NUM_TRAVERSALS, DECISIONS))
        np.add.at(observed, (traversal[valid], decision[valid]), target[valid])
        np.add.at(counts, (traversal[valid], decision[valid]), 1.0)
        self.observed, self.counts = observed, counts

        if case == "root":
            expansion = _root_expansion(levels, opts.max_depth)
            pick = (deal,)
        else:
            expansion = _sampled_expansion(levels)
            games = TRAVERSER * NUM_TRAVERSALS + np.arange(NUM_TRAVERSALS)
            bits = jax.vmap(lambda g: rng.random_bits(SEED, ITERATION, g, 0, rng.Purpose.EXPLORE))(
                games
            )
            start = np.asarray(rng.below(bits, SPAN))
            pick = (deal, slice(None), start)
        self.expected = {
            name: _expected(levels, expansion, len(decks), fn)[pick]
            for name, fn in (("regret", regrets), ("value", lambda lv: lv.values))
        }
        # [D, DECISIONS, (SPAN,) A][pick] is [T, DECISIONS, A]
        once = _expected(levels, expansion, len(decks), lambda lv: np.ones(lv.mask.shape))
        self.expected_counts = once[pick][..., 0]

    @staticmethod
    def z(observed: np.ndarray, expected: np.ndarray):
        """(mean difference, its standard error, z) per cell of [T, ...] arrays."""
        difference = observed - expected
        mean = difference.mean(axis=0)
        se = difference.std(axis=0, ddof=1) / np.sqrt(len(difference))
        return mean, se, mean / np.maximum(se, ROUNDING)


@pytest.fixture(scope="module")
def tree():
    advantage = fixed_advantage(SPEC, NETWORK_KEY)
    networks = api.Networks(
        advantage=advantage,
        strategy=advantage[0],  # unused: opponent_policy is 'network'
        league=jax.tree.map(lambda x: x[None], advantage[0]),
        league_count=np.int32(1),
    )
    decks, deal = traversal_decks(SEED, ITERATION, TRAVERSER, NUM_TRAVERSALS)
    levels = enumerate_tree(
        RULES, SPEC, advantage, decks, traverser=TRAVERSER, utility_scale=UTILITY_SCALE
    )
    return levels, decks, deal, networks


@pytest.fixture(scope="module", params=list(CASES))
def run(request, tree):
    return request.param, Run(request.param, *tree)


def _report(title, mean, se, z):
    legal = se > ROUNDING
    worst = np.unravel_index(np.argmax(np.abs(z)), z.shape)
    return (
        f"{title}: {int(legal.sum())} cells, max |z| {np.abs(z).max():.2f} at {worst} "
        f"(mean {mean[worst]:.4f}, se {se[worst]:.4f})"
    )


def test_the_comparison_is_meaningful(run, tree):
    case, r = run
    levels, decks, deal, _ = tree
    assert int(r.stats.cutoffs) == 0
    assert int(r.stats.terminals) + int(r.stats.truncations) >= NUM_TRAVERSALS
    root = levels[0]
    assert len(decks) > 1000  # most of the 1260 deals
    if case == "root":
        # slot 0 of traversal j is the traverser's root decision of the deal we enumerated
        assert r.root_valid.all()
        legal = root.mask[deal]
        np.testing.assert_array_equal(decision_of(r.root_info), 0)
        assert not np.any(r.root_target[~legal]), "targets on illegal actions"
        # the traversal's sigma is the tree's: sum_a sigma(a) r(a) = 0 for every target
        residual = np.abs(np.sum(root.sigma[deal] * r.root_target, axis=1))
        assert np.all(residual <= 1e-5 * (1.0 + np.abs(r.root_target).max(axis=1)))
        sigma = root.sigma[:, root.mask.any(axis=0)]
        assert sigma.min() > 0.01 and sigma.max() < 0.99, (sigma.min(), sigma.max())
        assert r.counts[:, 1].sum() > 0, "the second traverser decision is expanded too"
    else:
        # most traversals expand somewhere (no sample if the game ends first), on turns 0
        # and 2, at card decisions and at draw decisions with a pile to draw from
        per_decision = r.counts.sum(axis=0)
        assert r.counts.sum() > 0.8 * NUM_TRAVERSALS, per_decision
        assert np.count_nonzero(per_decision > 100) >= 3, per_decision
        assert per_decision[1::2].max() > 100, per_decision
    # the actions differ in value where they are expanded
    assert np.abs(r.expected["regret"]).mean(axis=0).max() > 0.1


def test_sample_counts_follow_the_expansion_probabilities(run):
    case, r = run
    mean, se, z = Run.z(r.counts, r.expected_counts)
    report = _report(f"{case}: samples per decision index", mean, se, z)
    print(report)
    assert np.all(np.abs(z) < Z_AGREE), report
    # where the tree says no node is expanded, no sample is there
    never = r.expected_counts.max(axis=0) == 0
    assert not r.counts[:, never].any(), report


def test_targets_average_to_the_exact_regrets(run):
    case, r = run
    mean, se, z = Run.z(r.observed, r.expected["regret"])
    report = _report(f"{case}: targets vs exact regrets", mean, se, z)
    print(report)
    assert np.all(np.abs(z) < Z_AGREE), report
    assert np.max(se) < 0.05, report
    # power: the child values themselves (no node value subtracted) are far off
    _, _, z_value = Run.z(r.observed, r.expected["value"])
    assert np.max(np.abs(z_value)) > Z_BIAS, _report(f"{case}: targets vs v(a)", mean, se, z)
