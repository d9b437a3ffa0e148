"""The traversal contract: what every backend computes, whatever runs it.

A traversal backend turns (networks, seed, iteration, traverser) into fixed-slot
`Samples` and a dict of statistics; the trainer does the rest. This module holds what the
backends share and nothing about how one runs: the options that decide the samples (how a
backend runs them, lanes, workers, widths, belongs to the backend), their validation,
the parameters a traversal reads, the sample layout, the one list of statistic names,
and the `Backend` protocol. `lc_cfr.traversal.registry` picks a backend by name.

Semantics are docs/design.md section 3 (Deep CFR, Brown et al. 2019, arXiv:1811.00164;
outcome sampling after Lanctot et al. 2009); section 4 states the backend protocol.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp

from lc_cfr.bots import BOT_NAMES
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol

SAMPLING_MODES = ("outcome", "external")
OPPONENT_POLICIES = ("network", "average_strategy", "league") + BOT_NAMES
CUTOFF_VALUE_MODES = ("score_diff", "rollouts")
ROLLOUT_POLICIES = BOT_NAMES  # both players play the bot in a cut-off playout
STRATEGY_SAMPLE_NODES = ("opponent", "traverser", "both")
EXPANSION_POINTS = ("root", "sampled", "path")  # external: where the expanded subtree hangs
# expand_at="path" draws one of a path's traverser choices (at most max_turns + 1) with
# rng.below, which takes at most this many outcomes
MAX_PATH_CHOICES = 256
# traversal.path_expansions: the most choices one path expands (each a frame of the lanes)
MAX_PATH_EXPANSIONS = 8
# traversal.lockstep_schedule, how external sampling's steps forward (outcome sampling's
# lanes share the mover by construction): `all_lanes` decides in every lane each step,
# evaluating both players' networks on all of them; `one_mover` decides in at most half
# the lanes each step, those of the player to move in most of them, with that player's
# network only. The samples are the same (every traversal owns its random stream and its
# slots); `one_mover` runs one forward per decision instead of two.
LOCKSTEP_SCHEDULES = ("all_lanes", "one_mover")
# Value leaves (`leaf_point`): the advantage target of an unchecked traversal's expanded
# node reads the child sigma picks, which plays out to the end (it carries the on-policy
# trajectory and trains the value network), by that full playout (`mixed`: one
# single-playout value among the leaf values, whose noise enters every action's regret
# through the node value) or by its leaf value like its siblings (`leaves`: every regret
# from the value network, as ESCHER's are; checked traversals keep the full playouts).
LEAF_TARGETS = ("mixed", "leaves")


class TraversalOptions(NamedTuple):
    """Static settings of a traversal (hashable: jitted code is specialised on them)."""

    traversals_per_player: int  # traversals per call (the per-player quota)
    sampling_mode: str
    outcome_sampling_epsilon: float  # outcome: exploration mix of the traverser
    outcome_sampling_value_clip: float  # outcome: clip of importance-weighted values; 0 = off
    outcome_unsampled_regret: str  # outcome: negative_node_value | zero
    max_depth: int  # external: traverser decisions expanded in full
    cutoff_turns: int  # cut a path off at this turn; 0 = never
    cutoff_value_mode: str
    cutoff_rollouts: int
    cutoff_rollout_policy: str
    opponent_policy: str
    strategy_samples: str
    all_negative_fallback: str  # regret matching with no positive advantage
    utility_scale: float
    # external: `root` expands the traverser's first max_depth decisions; `sampled` plays
    # one on-policy path to a decision drawn per traversal and expands there
    expand_at: str = "root"
    path_epsilon: float = 0.0  # sampled: uniform mix of the traverser's path policy
    floor: float = 0.0  # regret_matching.floor: uniform share of every RM policy
    # outcome: importance (W u / q) | baseline (VR-MCCFR) | history_value (ESCHER-style);
    # the last two read the value network (policy.baseline_path_targets)
    outcome_estimator: str = "importance"
    value_lambda: float = 1.0  # value targets: sampled return (1) .. bootstrap (0)
    # sampled expansions: a child of an expanded node is valued by the value network at
    # the traverser's first decision this many decisions past the node (`leaf_point`);
    # 0 = every child is played out to the end
    leaf_decisions: int = 0
    leaf_check_share: float = 0.1  # traversals whose children all play out (`leaf_check`)
    # LEAF_TARGETS: what values the child sigma picks in the advantage target
    leaf_targets: str = "mixed"
    draws: str = "any"  # policy.DRAWS: the pile draws the agent's policies may take
    # expand_at='path': distinct choices of the path expanded per traversal (`path_choices`)
    path_expansions: int = 1


def validate_options(options: TraversalOptions, rules: Rules) -> None:
    """Raises ValueError naming the config field of any unsupported setting."""
    checks = [
        ("sampling_mode", options.sampling_mode, SAMPLING_MODES),
        ("opponent_policy", options.opponent_policy, OPPONENT_POLICIES),
        ("cutoff_value_mode", options.cutoff_value_mode, CUTOFF_VALUE_MODES),
        ("cutoff_rollout_policy", options.cutoff_rollout_policy, ROLLOUT_POLICIES),
        ("strategy_samples", options.strategy_samples, STRATEGY_SAMPLE_NODES),
        ("outcome_unsampled_regret", options.outcome_unsampled_regret, pol.UNSAMPLED_REGRET_MODES),
        ("expand_at", options.expand_at, EXPANSION_POINTS),
        ("outcome_estimator", options.outcome_estimator, pol.OUTCOME_ESTIMATORS),
    ]
    for field, value, valid in checks:
        if value not in valid:
            raise ValueError(f"traversal.{field} must be one of {valid}, got {value!r}")
    if options.all_negative_fallback not in pol.FALLBACKS:
        raise ValueError(
            "regret_matching.all_negative_fallback must be one of "
            f"{pol.FALLBACKS}, got {options.all_negative_fallback!r}"
        )
    if options.traversals_per_player < 1:
        raise ValueError(
            f"traversal.traversals_per_player must be >= 1, got {options.traversals_per_player}"
        )
    if not 0.0 <= options.outcome_sampling_epsilon <= 1.0:
        raise ValueError(
            "traversal.outcome_sampling_epsilon must be in [0, 1], got "
            f"{options.outcome_sampling_epsilon}"
        )
    if options.sampling_mode == "outcome" and options.outcome_sampling_epsilon <= 0.0:
        raise ValueError("traversal.outcome_sampling_epsilon must be > 0 for outcome sampling")
    if options.sampling_mode == "external" and not 1 <= options.max_depth <= 4:
        raise ValueError(f"traversal.max_depth must be in 1..4, got {options.max_depth}")
    if not 0.0 <= options.path_epsilon <= 1.0:
        raise ValueError(f"traversal.path_epsilon must be in [0, 1], got {options.path_epsilon}")
    pol.check_floor(options.floor)
    pol.check_draws(options.draws)
    _check_leaves(options, rules)
    if options.outcome_estimator != "importance" and options.sampling_mode != "outcome":
        raise ValueError(
            f"traversal.outcome_estimator={options.outcome_estimator!r} needs "
            "traversal.sampling_mode='outcome'"
        )
    if not 0.0 <= options.value_lambda <= 1.0:
        raise ValueError(f"traversal.value_lambda must be in [0, 1], got {options.value_lambda}")
    if options.cutoff_turns < 0 or options.cutoff_turns >= rules.max_turns:
        raise ValueError(
            f"traversal.cutoff_turns must be in [0, rules.max_turns={rules.max_turns}), "
            f"got {options.cutoff_turns}"
        )
    if options.cutoff_value_mode == "rollouts" and options.cutoff_rollouts < 1:
        raise ValueError("traversal.cutoff_rollouts must be >= 1 in rollouts mode")
    if options.utility_scale <= 0:
        raise ValueError(f"utility_scale must be > 0, got {options.utility_scale}")
    e = options.path_expansions
    if not isinstance(e, int) or isinstance(e, bool) or not 1 <= e <= MAX_PATH_EXPANSIONS:
        raise ValueError(
            f"traversal.path_expansions must be an int in 1..{MAX_PATH_EXPANSIONS}, got {e!r}"
        )
    if e > 1 and (options.sampling_mode != "external" or options.expand_at != "path"):
        raise ValueError(
            f"traversal.path_expansions={e} needs traversal.sampling_mode='external' and "
            f"traversal.expand_at='path', got {options.sampling_mode!r}, {options.expand_at!r}"
        )
    if options.expand_at == "path" and rules.max_turns + 1 > MAX_PATH_CHOICES:
        raise ValueError(
            f"traversal.expand_at='path' draws among at most {MAX_PATH_CHOICES} choices a "
            f"path: rules.max_turns must be < {MAX_PATH_CHOICES}, got {rules.max_turns}"
        )


def _check_leaves(options: TraversalOptions, rules: Rules) -> None:
    if options.leaf_targets not in LEAF_TARGETS:
        raise ValueError(
            f"traversal.leaf_targets must be one of {LEAF_TARGETS}, got {options.leaf_targets!r}"
        )
    if not 0 <= options.leaf_decisions <= 2 * rules.max_turns:
        raise ValueError(
            f"traversal.leaf_decisions must be in [0, 2 * rules.max_turns="
            f"{2 * rules.max_turns}], got {options.leaf_decisions}"
        )
    if options.leaf_decisions == 0:
        return
    if not is_sampled_expansion(options):
        raise ValueError(
            "traversal.leaf_decisions > 0 needs traversal.sampling_mode='external' with "
            f"expand_at 'sampled' or 'path', got {options.sampling_mode!r}, "
            f"{options.expand_at!r}"
        )
    if options.cutoff_turns > 0:
        raise ValueError(
            "traversal.leaf_decisions > 0 values children by the value network: set "
            f"traversal.cutoff_turns=0 (got {options.cutoff_turns})"
        )
    if not 0.0 < options.leaf_check_share <= 1.0:
        raise ValueError(
            "traversal.leaf_check_share must be in (0, 1] (checked traversals train the "
            f"value network), got {options.leaf_check_share}"
        )


def is_sampled_expansion(options: TraversalOptions) -> bool:
    """External sampling expanded at a decision drawn per traversal on one on-policy path
    (`expand_at` 'sampled' or 'path'; it means nothing to outcome sampling, which never
    expands)."""
    return options.sampling_mode == "external" and options.expand_at != "root"


def uses_value_network(options: TraversalOptions) -> bool:
    """Whether the traversal reads (and feeds) the history value network."""
    return options.outcome_estimator != "importance" or has_leaves(options)


def has_leaves(options: TraversalOptions) -> bool:
    """Sampled expansions whose children are valued by the value network (`leaf_point`)."""
    return options.leaf_decisions > 0


def value_spec(rules: Rules, spec: mlp.NetworkSpec) -> mlp.NetworkSpec:
    """The value network: the shape of `spec` over the history features (E + N)."""
    return dataclasses.replace(spec, input_size=engine.history_size(rules))


class Networks(NamedTuple):
    """Parameters a traversal reads (pytrees of the flax MLP of `spec`)."""

    advantage: Any  # (params of player 0, params of player 1)
    strategy: Any  # the average-strategy network
    league: Any  # snapshots of the strategy network, every leaf [K, ...]
    league_count: jax.Array  # [] int32, valid snapshots (1..K); the first K are used
    value: Any = None  # the history value network (outcome estimators that read it)


class Samples(NamedTuple):
    """Samples of one call, in fixed slots: slot = traversal * slots_per_traversal + node."""

    advantage_info: jax.Array  # [S, E] float32
    advantage_mask: jax.Array  # [S, A] bool
    advantage_target: jax.Array  # [S, A] float32 regret targets
    advantage_valid: jax.Array  # [S] bool
    strategy_info: jax.Array  # [S2, E] float32
    strategy_mask: jax.Array  # [S2, A] bool
    strategy_policy: jax.Array  # [S2, A] float32
    strategy_valid: jax.Array  # [S2] bool
    # value network samples at the traverser's decisions (None unless it is used):
    # history features, the sampled action as a one-hot mask, its target at that action
    value_info: Any = None  # [S, E + N] float32
    value_mask: Any = None  # [S, A] bool
    value_target: Any = None  # [S, A] float32
    value_valid: Any = None  # [S] bool


class TraversalStats(NamedTuple):
    """Totals of one call (int32 scalars unless noted)."""

    nodes: jax.Array  # decisions taken by traversals (rollout playouts excluded)
    policy_calls: jax.Array  # states evaluated by a network
    forward_batches: jax.Array  # batched forwards run
    terminals: jax.Array  # paths ending at a natural game end
    truncations: jax.Array  # paths ending at max_turns
    cutoffs: jax.Array  # paths ending at cutoff_turns
    endpoint_depth_sum: jax.Array  # decisions from the deal to each path's end
    path_ends: jax.Array  # [PATH_END_BINS] int32 paths by the turn they end at (`path_end_bin`)
    rollout_decisions: jax.Array  # decisions inside cut-off playouts
    clipped_values: jax.Array  # outcome: advantage samples whose |W u / q| > value_clip
    steps: jax.Array  # lockstep iterations
    dropped_samples: jax.Array  # samples beyond a traversal's slots (always 0; checked)
    # leaf_decisions > 0 only (None otherwise):
    leaves: Any = None  # children valued by the value network (not paths: not in path_ends)
    # [LEAF_CHECK_PHASES, len(LEAF_CHECK_SUMS)] float32 sums comparing, at the expanded
    # nodes of checked traversals, the regrets from leaf values with the full playouts'
    leaf_checks: Any = None


STAT_NAMES = TraversalStats._fields
# The game-length histogram of traversal paths: paths counted by the tenth of max_turns
# in which they end (natural end, cut-off or truncation), one metric per bin.
PATH_END_BINS = 10
PATH_END_NAMES = tuple(f"path_ends_d{k}" for k in range(PATH_END_BINS))
# The statistics a traversal core counts per decision; the rest are counted by the loop
# around it (forward_batches, steps) or are checks (dropped_samples). The C core of the
# torch backends fills these, in this order.
CORE_STAT_NAMES = (
    "nodes",
    "policy_calls",
    "terminals",
    "truncations",
    "cutoffs",
    "endpoint_depth_sum",
    "rollout_decisions",
    "clipped_values",
    *PATH_END_NAMES,
)


# The leaf guard's comparison, by the phase of the game (quarters of max_turns) of the
# expanded node: sums over its legal actions a of r_full(a), r_leaf(a) and their products,
# from which the trainer derives their correlation and root mean square difference.
LEAF_CHECK_PHASES = 4
LEAF_CHECK_SUMS = ("count", "leaf", "full", "leaf_sq", "full_sq", "product")


def leaf_check_phase(rules: Rules, turn):
    """The `leaf_checks` row of an expanded node at `turn`."""
    return jnp.minimum(turn * LEAF_CHECK_PHASES // rules.max_turns, LEAF_CHECK_PHASES - 1)


def leaf_check_sums(leaf_regrets, full_regrets, mask) -> jax.Array:
    """[len(LEAF_CHECK_SUMS)] float32 of one expanded node: its legal actions' regrets
    from leaf values and from full playouts, summed as LEAF_CHECK_SUMS names."""
    x = jnp.where(mask, leaf_regrets, 0.0)
    y = jnp.where(mask, full_regrets, 0.0)
    columns = (mask.astype(jnp.float32), x, y, x * x, y * y, x * y)
    return jnp.stack([pol.sequential_sum(c) for c in columns]).astype(jnp.float32)


def leaf_check(seed, iteration, game_index, share: float):
    """Whether a traversal of `leaf_decisions` > 0 is checked: all its children are played
    out to the end beside their leaf values (purpose LEAF_CHECK, counter 0), with
    probability `share`. Checked traversals' targets are the full playouts' regrets and
    they give the value network samples (`leaf_point`)."""
    bits = rng.random_bits(seed, iteration, game_index, 0, rng.Purpose.LEAF_CHECK)
    return rng.uniform(bits) < jnp.float32(share)


def leaf_point(options: TraversalOptions, decisions_past_node):
    """Whether a traverser decision in the subtree of an expanded node (and not expanded
    itself), `decisions_past_node` decisions below it, is its child's leaf point.

    ESCHER (McAleer et al. 2022, arXiv:2206.04122) values the children of its expanded
    nodes with a learned history value network instead of playing them out; here a child
    is played `leaf_decisions` decisions on-policy (the common random numbers keep the
    children's opponents and decks alike, as in a full playout) and valued at the
    traverser's next decision by v(h) = sum_a sigma(a) Q(h, a), the value network read at
    sigma, the policy the playout would go on with. Two kinds of child go on to the end
    instead, recording a value sample (h, the action sigma takes, and the return) at the
    leaf point: the child sigma itself picks at the node (it continues the on-policy
    trajectory, so the strategy samples along it and the value network's targets are
    on-policy, DREAM's history baseline, Steinberger et al. 2020) and every child of a
    checked traversal (`leaf_check`), whose advantage targets are then the full
    playouts' regrets and whose leaf regrets are compared with them (`leaf_checks`).
    """
    return decisions_past_node >= options.leaf_decisions


def value_slots_per_traversal(rules: Rules, options: TraversalOptions) -> int:
    """Value network sample slots one traversal may fill: one per traverser decision of
    its path (outcome estimators) or one per child subtree below its expanded nodes
    (`leaf_decisions`)."""
    if options.sampling_mode == "outcome":
        return slots_per_traversal(rules, options)[0]
    return _expanded_tree(rules, options)[1]


def path_end_bin(rules: Rules, turn):
    """The `path_ends` bin of a path ending at `turn` (0 to max_turns; a truncated game,
    at max_turns, in the last bin)."""
    return jnp.minimum(turn * PATH_END_BINS // rules.max_turns, PATH_END_BINS - 1)


def stats_to_metrics(stats: TraversalStats) -> dict:
    """The per-call totals as plain ints (summable over calls; the trainer derives means),
    `path_ends` as one metric per bin (PATH_END_NAMES)."""
    stats = jax.device_get(stats)._asdict()
    stats.pop("dropped_samples")  # the backend has already checked it is 0
    path_ends = stats.pop("path_ends")
    leaf_checks = stats.pop("leaf_checks")
    metrics = {name: int(value) for name, value in stats.items() if value is not None}
    metrics.update({name: int(n) for name, n in zip(PATH_END_NAMES, path_ends, strict=True)})
    if leaf_checks is not None:
        metrics.update(leaf_check_metrics(leaf_checks))
    return metrics


def leaf_check_metrics(sums) -> dict:
    """`leaf_check_p{phase}_{sum}` floats of a [LEAF_CHECK_PHASES, 6] array of sums."""
    return {
        f"leaf_check_p{phase}_{name}": float(sums[phase][k])
        for phase in range(LEAF_CHECK_PHASES)
        for k, name in enumerate(LEAF_CHECK_SUMS)
    }


def slots_per_traversal(rules: Rules, options: TraversalOptions) -> tuple[int, int]:
    """(advantage, strategy) sample slots one traversal may fill."""
    if options.sampling_mode == "outcome":
        per_path = rules.max_turns + 1  # decisions of one player on one path
        return per_path, per_path * (2 if options.strategy_samples == "both" else 1)
    expanded, _ = _expanded_tree(rules, options)
    expanded *= options.path_expansions  # one expanded tree per expanded choice
    if options.expand_at != "root":
        # strategy samples along one on-policy trajectory (at most one player's
        # decisions of a whole game, both players' with `both`)
        per_path = rules.max_turns + 1
        return expanded, per_path * (2 if options.strategy_samples == "both" else 1)
    # strategy samples above the expanded depth: the expanded (traverser) nodes and at
    # most two opponent decisions in each gap between traverser turns
    return expanded, 3 * expanded


def _expanded_tree(rules: Rules, options: TraversalOptions) -> tuple[int, int]:
    """External sampling: (expanded nodes, subtrees hanging below the deepest ones) of one
    traversal at most."""
    card, draw = 2 * rules.hand_size, 1 + rules.n_colors
    expanded, width = 0, 1  # width: subtrees hanging below `depth` expanded nodes
    for depth in range(options.max_depth):
        expanded += width
        # a sampled expansion may start at a draw decision: bound both orders
        width *= card if depth % 2 == 0 and options.expand_at == "root" else max(card, draw)
    return expanded, width


def utility_factor(scale: float) -> jax.Array:
    """float32(1 / utility_scale): utilities are points times this factor.

    One multiplication by a rounded constant, rather than a division that a compiler may
    or may not turn into a multiplication, gives every backend the same bits.
    """
    return jnp.float32(1.0 / scale)


def expansion_start(rules: Rules, seed, iteration, game_index):
    """The decision index from which a sampled expansion may happen, per game.

    Uniform over the 2 * (N - 2H) decisions of a game without pile draws, drawn with
    purpose EXPLORE at counter 0 of the traversal's game: every phase of the game gets
    expanded nodes, in proportion to its length.
    """
    span = 2 * (rules.n_cards - 2 * rules.hand_size)
    bits = rng.random_bits(seed, iteration, game_index, 0, rng.Purpose.EXPLORE)
    return rng.below(bits, min(span, 256)).astype(jnp.int32)


def path_choice(seed, iteration, game_index, choices):
    """expand_at='path': which of a path's `choices` (1 to MAX_PATH_CHOICES) traverser
    decisions with two or more legal actions is expanded, uniform, drawn with purpose
    EXPLORE at counter 0 of the traversal's game (the path's own draws are SAMPLE ones and
    an expanded node's follow draw is one past its counter, so at least 1).

    Given the path, every one of the traverser's choices on it is expanded with
    probability 1 / choices, however long the game runs: a traversal yields one advantage
    sample, and a decision gets samples in proportion to how often the played games reach
    it (weighted by 1 / choices of its game), not by its index. 'sampled' draws an index
    from the first 2 * (N - 2H) decisions instead, which never reaches the later
    decisions of games that draw from the discard piles.
    """
    bits = rng.random_bits(seed, iteration, game_index, 0, rng.Purpose.EXPLORE)
    return rng.below(bits, choices)


def path_choices(seed, iteration, game_index, choices, count: int):
    """expand_at='path' with `path_expansions` = count: which of a path's `choices` (0 to
    MAX_PATH_CHOICES) traverser choices are expanded: min(count, choices) distinct ones,
    uniform among the subsets of that size, [count] int32 in increasing order (the order
    the path meets them), -1 past them (all -1 without a choice).

    The first is `path_choice`'s draw (so count = 1 expands what it always did); the i-th
    further one draws a rank r in [0, choices - i) with purpose PATH_CHOICE at counter i
    and takes the r-th choice not yet drawn (a partial Fisher-Yates shuffle: every
    ordered draw, hence every subset, is equally likely). A choice is therefore expanded
    with probability min(count, choices) / choices: given the path, its choices get
    samples alike, as with one expansion, and a traversal yields up to `count` advantage
    samples for one scouting pass and one pass down the path.
    """
    choices = jnp.asarray(choices, jnp.int32)
    n = jnp.maximum(choices, 1)
    first = path_choice(seed, iteration, game_index, n).astype(jnp.int32)
    drawn = [first]
    for i in range(1, count):
        bits = rng.random_bits(seed, iteration, game_index, i, rng.Purpose.PATH_CHOICE)
        pick = rng.below(bits, jnp.maximum(n - i, 1)).astype(jnp.int32)
        # the pick-th choice not drawn yet: step past each drawn one at or below it, in
        # increasing order (each step can only move it past later drawn ones)
        ordered = jnp.sort(jnp.stack(drawn, axis=-1), axis=-1)
        for j in range(i):
            pick = pick + (pick >= ordered[..., j])
        drawn.append(pick)
    picks = jnp.sort(jnp.stack(drawn, axis=-1), axis=-1)
    valid = jnp.arange(count) < jnp.minimum(choices, count)[..., None]
    return jnp.where(valid, picks, -1).astype(jnp.int32)


class Backend(Protocol):
    """What the trainer asks of a traversal backend (docs/design.md section 4)."""

    def traverse(
        self,
        networks: Networks,
        *,
        seed: int,
        iteration: int,
        traverser: int,
        epsilon: float | None = None,
    ) -> tuple[Samples, dict]:
        """Samples and statistics; `epsilon` overrides options.outcome_sampling_epsilon
        (its schedule)."""
        ...

    def close(self) -> None:
        """Releases processes and shared memory (a no-op where there are none)."""
        ...
