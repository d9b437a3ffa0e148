"""The outcome-sampling estimator against exact regrets from the enumerated game tree.

The tiny variant of tests/game_tree.py (one colour, ranks 2..8, hands of two). Both players
follow fixed regret-matching policies from fixed advantage networks. For every deal the
traversals meet, the whole tree is enumerated in float64 with the tree's own regret
matching: v(a) is the traverser's expected utility after root action a when both players
then follow their policies, and the exact regret is r(a) = v(a) - sum_b sigma(b) v(b)
(what lc_cfr/traversal/policy.py's `outcome_targets` must estimate).

Given the deal, the rest of the game is deterministic but for the players' choices (the
deck order is fixed at the deal), so the expectation of a root target given the deal is
r(a) for `negative_node_value` and v(a)(1 - sigma(a)) for `zero`. Over many traversals,
the mean of the sampled root targets minus the mean of these per-deal expectations must be
within a few standard errors of zero (the error of the paired differences, so the spread
of the deals does not enter it). `zero` must also miss the exact regret by many standard
errors: that is its bias. `value_clip` is 0 (clipping would bias the estimator) and no
cut-off is used.

The later policies are peaked (far from the explored behaviour policy), so the importance
weights W of the traverser's later decisions matter: with W forced to 1 the
`negative_node_value` means move by more than 5 standard errors.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from game_tree import RULES, enumerate_tree, fixed_advantage_networks, traversal_decks
from traversal_helpers import options

from lc_cfr.game import engine
from lc_cfr.nets import mlp
from lc_cfr.traversal import api, lockstep
from lc_cfr.traversal import policy as pol

# Blind to the own_known block: layer_0 then reads the 7-block encoding that NETWORK_KEY,
# game_tree.OUTPUT_GAIN and FIRST_TURN_SHIFT were chosen on, so the root policy still mixes.
SPEC = mlp.NetworkSpec(
    input_size=RULES.encoding_size,
    num_actions=RULES.num_actions,
    hidden_size=16,
    num_layers=1,
    activation="relu",
    n_cards=RULES.n_cards,
    own_known_input=False,
)
VALUE_SPEC = api.value_spec(RULES, SPEC)
SEED, ITERATION, TRAVERSER = 7, 2, 0
NUM_TRAVERSALS = 20_000
LANES = 500
EPSILON = 0.5
UTILITY_SCALE = 16.0
FALLBACK = "uniform"  # the tree's regret matching
NETWORK_KEY = 3
Z_AGREE = 4.0  # |mean difference| allowed, in standard errors
Z_BIAS = 6.0  # `zero` must miss the exact regret by more, for some action


def _fixed_networks() -> api.Networks:
    """game_tree's advantage networks and an untrained history value network."""
    advantage = fixed_advantage_networks(SPEC, NETWORK_KEY)
    # an arbitrary (untrained) history value network: VR-MCCFR is unbiased whatever the
    # baseline, so its root targets must still average to the exact regret
    value = mlp.init_params(VALUE_SPEC, jax.random.PRNGKey(NETWORK_KEY + 1))
    value["output"]["bias"] = value["output"]["bias"] + 0.3
    return api.Networks(
        advantage=advantage,
        strategy=advantage[0],  # unused: opponent_policy is 'network'
        league=jax.tree.map(lambda x: x[None], advantage[0]),
        league_count=jnp.int32(1),
        value=value,
    )


def _options(unsampled_regret: str, estimator: str = "importance") -> api.TraversalOptions:
    return options(
        traversals_per_player=NUM_TRAVERSALS,
        outcome_sampling_epsilon=EPSILON,
        outcome_sampling_value_clip=0.0,
        outcome_unsampled_regret=unsampled_regret,
        all_negative_fallback=FALLBACK,
        utility_scale=UTILITY_SCALE,
        outcome_estimator=estimator,
    )


# ----- the sampled side and the comparison --------------------------------------------


class Estimates:
    """Root targets of both modes with the exact quantities of each traversal's deal."""

    def __init__(self):
        nets = _fixed_networks()
        per_traversal, _ = api.slots_per_traversal(RULES, _options("zero"))
        roots = np.arange(NUM_TRAVERSALS) * per_traversal  # node 0 of every traversal
        self.targets, self.info, self.sample_mask, self.stats = {}, {}, {}, {}
        runs = [(mode, _options(mode)) for mode in pol.UNSAMPLED_REGRET_MODES]
        runs += [(e, _options("zero", e)) for e in pol.OUTCOME_ESTIMATORS[1:]]
        for mode, opts in runs:
            samples, stats = lockstep.run_traversals(
                RULES,
                SPEC,
                opts,
                nets,
                lanes=LANES,
                seed=SEED,
                iteration=ITERATION,
                traverser=TRAVERSER,
            )
            samples, self.stats[mode] = jax.device_get((samples, stats))
            assert samples.advantage_valid[roots].all()
            self.targets[mode] = samples.advantage_target[roots].astype(np.float64)
            self.info[mode] = samples.advantage_info[roots]
            self.sample_mask[mode] = samples.advantage_mask[roots]
            if mode == "history_value":
                self.root_history = samples.value_info[roots]
        self.networks = nets

        self.decks, self.deal = traversal_decks(SEED, ITERATION, TRAVERSER, NUM_TRAVERSALS)
        roots_obs = jax.vmap(
            lambda d: engine.observe(RULES, engine.init_from_deck(RULES, d), TRAVERSER)
        )(jnp.asarray(self.decks))
        self.root_obs = np.asarray(roots_obs)[self.deal]
        root = enumerate_tree(
            RULES,
            SPEC,
            nets.advantage,
            self.decks,
            traverser=TRAVERSER,
            utility_scale=UTILITY_SCALE,
        )[0]
        self.deck_sigma = root.sigma
        self.sigma, self.values, self.mask = (
            x[self.deal] for x in (root.sigma, root.values, root.mask)
        )
        node_value = np.sum(self.sigma * self.values, axis=1, keepdims=True)
        self.expected = {
            "negative_node_value": np.where(self.mask, self.values - node_value, 0.0),
            "zero": np.where(self.mask, self.values * (1.0 - self.sigma), 0.0),
        }

    def agreement(self, mode: str, expected: np.ndarray):
        """(mean target, mean expected, standard error of the paired difference, z)."""
        difference = self.targets[mode] - expected
        se = difference.std(axis=0, ddof=1) / np.sqrt(NUM_TRAVERSALS)
        mean = difference.mean(axis=0)
        z = np.where(se > 0, mean / np.where(se > 0, se, 1.0), 0.0)
        return self.targets[mode].mean(axis=0), expected.mean(axis=0), se, z


@pytest.fixture(scope="module")
def estimates():
    return Estimates()


def _report(title, mean_target, mean_expected, se, z):
    return (
        f"{title}\n  mean target   {np.round(mean_target, 4)}\n"
        f"  mean expected {np.round(mean_expected, 4)}\n  se {np.round(se, 4)}\n"
        f"  z  {np.round(z, 2)}"
    )


def test_the_comparison_is_meaningful(estimates):
    e = estimates
    # node 0 of traversal j is the traverser's root decision of the deal we enumerated
    for mode in pol.UNSAMPLED_REGRET_MODES:
        np.testing.assert_array_equal(e.info[mode], e.root_obs)
        np.testing.assert_array_equal(e.sample_mask[mode], e.mask)
        assert not np.any(e.targets[mode][~e.mask]), "targets on illegal actions"
        stats = e.stats[mode]
        assert int(stats.cutoffs) == 0
        assert int(stats.terminals) + int(stats.truncations) == NUM_TRAVERSALS
    assert len(e.decks) > 1000  # most of the 1260 deals
    # the policies mix at the root: every legal action has probability in (0, 1)
    legal = e.mask.any(axis=0)
    assert legal.sum() >= 3
    assert np.all(e.mask == legal), "the root actions should not depend on the deal"
    root_sigma = e.deck_sigma[:, legal]
    assert root_sigma.min() > 0.01 and root_sigma.max() < 0.99, (root_sigma.min(), root_sigma.max())
    # the traversal's sigma is ours: sum_a sigma(a) r(a) = 0 for every sampled target
    targets = e.targets["negative_node_value"]
    residual = np.abs(np.sum(e.sigma * targets, axis=1))
    assert np.all(residual <= 1e-5 * (1.0 + np.abs(targets).max(axis=1))), residual.max()
    # both modes sampled the same paths: `zero` is `negative_node_value` at a* and 0 elsewhere
    zero = e.targets["zero"]
    assert np.all(np.count_nonzero(zero, axis=1) <= 1)
    nonzero = zero != 0
    np.testing.assert_array_equal(zero[nonzero], targets[nonzero])
    # the actions differ in value, so the regrets and the `zero` bias are far from 0
    assert np.ptp(e.values[:, legal].mean(axis=0)) > 0.3


def test_negative_node_value_targets_average_to_the_exact_regret(estimates):
    mode = "negative_node_value"
    mean_target, mean_expected, se, z = estimates.agreement(mode, estimates.expected[mode])
    report = _report(f"{mode} vs exact regret", mean_target, mean_expected, se, z)
    print(report)
    legal = estimates.mask.any(axis=0)
    assert np.all(se[legal] > 0) and np.all(se[legal] < 0.03), report
    assert np.all(np.abs(z) < Z_AGREE), report


def test_zero_targets_average_to_the_biased_value(estimates):
    mode = "zero"
    mean_target, mean_expected, se, z = estimates.agreement(mode, estimates.expected[mode])
    report = _report(f"{mode} vs v(a)(1 - sigma(a))", mean_target, mean_expected, se, z)
    print(report)
    legal = estimates.mask.any(axis=0)
    assert np.all(se[legal] > 0) and np.all(se[legal] < 0.03), report
    assert np.all(np.abs(z) < Z_AGREE), report

    exact = estimates.expected["negative_node_value"]
    mean_target, mean_exact, se, z = estimates.agreement(mode, exact)
    report = _report(f"{mode} vs exact regret (its bias)", mean_target, mean_exact, se, z)
    print(report)
    assert np.max(np.abs(z)) > Z_BIAS, report


def test_baseline_targets_average_to_the_exact_regret(estimates):
    """VR-MCCFR with an arbitrary baseline is unbiased (an untrained baseline like this one
    may well add variance: only a good one removes it)."""
    exact = estimates.expected["negative_node_value"]
    mean_target, mean_expected, se, z = estimates.agreement("baseline", exact)
    report = _report("baseline vs exact regret", mean_target, mean_expected, se, z)
    print(report)
    legal = estimates.mask.any(axis=0)
    assert np.all(se[legal] > 0), report
    assert np.all(np.abs(z) < Z_AGREE), report


def test_history_value_targets_are_the_value_networks_regrets(estimates):
    """ESCHER-style targets: b(h, a) - sum_b sigma(b) b(h, b), no sampled term at all."""
    e = estimates
    raw = mlp.apply(VALUE_SPEC, e.networks.value, jnp.asarray(e.root_history))
    b = np.asarray(mlp.masked_advantages(raw, jnp.asarray(e.mask)), np.float64)
    expected = np.where(e.mask, b - np.sum(e.sigma * b, axis=1, keepdims=True), 0.0)
    np.testing.assert_allclose(e.targets["history_value"], expected, atol=1e-5)
    assert np.ptp(expected[:, e.mask.any(axis=0)]) > 0.1  # the check is not vacuous
