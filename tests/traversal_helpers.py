"""Shared fixtures of the traversal tests: a tiny game, exact networks, options, the
parity table of traversal cases, and sample records as one pytree for chex.

`TRAVERSAL_CASES` is the one table of traversal modes: tests/test_traversal.py holds the
`jax` lockstep backend to the reference recursion on every case, and
tests/test_torch_backends.py holds the torch backends to `jax` on the cases flagged
`torch` (modes the C core has; `test_torch_cases_are_modes_the_torch_backends_run`
checks the flags against the backends' own `check_modes`).
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal.api import Networks, TraversalOptions, value_spec

TINY = Rules(
    n_colors=2, n_ranks=4, min_rank=2, n_wagers=1, hand_size=2, bonus_threshold=4, max_turns=10
)
SPEC = mlp.NetworkSpec(
    input_size=TINY.encoding_size,
    num_actions=TINY.num_actions,
    hidden_size=16,
    num_layers=2,
    activation="relu",
)
VALUE_SPEC = value_spec(TINY, SPEC)
LANES = 4  # traversals in flight in the jax backend unless a case says otherwise


def dyadic_params(key, scale=0.25, spec=SPEC):
    """Network parameters on a coarse dyadic grid.

    With the encoding's dyadic inputs, every product and sum of the forward pass is then
    exact in float32, so a batch-1 forward and a batch-L forward give the same bits
    whatever the summation order: tests can demand exact equality of samples.
    """
    params = mlp.init_params(spec, key)
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    new = [
        jax.random.randint(k, x.shape, -2, 3).astype(jnp.float32) * scale
        for k, x in zip(keys, leaves, strict=True)
    ]
    return jax.tree.unflatten(treedef, new)


def networks(seed=0, league=3, league_count=2):
    keys = jax.random.split(jax.random.PRNGKey(seed), 4 + league)
    snapshots = [dyadic_params(k) for k in keys[4:]]
    stacked = jax.tree.map(lambda *x: jnp.stack(x), *snapshots)
    return Networks(
        advantage=(dyadic_params(keys[0]), dyadic_params(keys[1])),
        strategy=dyadic_params(keys[2]),
        league=stacked,
        league_count=jnp.int32(league_count),
        value=dyadic_params(keys[3], spec=VALUE_SPEC),
    )


def options(**overrides):
    base = dict(
        traversals_per_player=6,
        sampling_mode="outcome",
        outcome_sampling_epsilon=0.5,
        outcome_sampling_value_clip=8.0,
        outcome_unsampled_regret="negative_node_value",
        max_depth=2,
        cutoff_turns=0,
        cutoff_value_mode="score_diff",
        cutoff_rollouts=2,
        cutoff_rollout_policy="random",
        opponent_policy="network",
        strategy_samples="opponent",
        all_negative_fallback="argmax_tiebreak",
        utility_scale=20.0,
    )
    base.update(overrides)
    return TraversalOptions(**base)


@dataclasses.dataclass(frozen=True)
class TraversalCase:
    """One row of the parity table."""

    overrides: dict  # TraversalOptions fields over the base of `options()`
    lanes: int = LANES  # the jax backend's lanes in the lockstep-vs-reference test
    traverser: int = 1  # the traverser of the lockstep-vs-reference test
    # held to `jax` in tests/test_torch_backends.py (which runs both traversers, 5 lanes);
    # only modes the torch backends have; a torch case costs seconds, so a row that only
    # recombines modes of other torch rows may stay off
    torch: bool = False
    # the jax backend's traversal.lockstep_schedule (never changes the samples)
    schedule: str = "all_lanes"

    def options(self, **extra) -> TraversalOptions:
        return options(**{**self.overrides, **extra})


_C = TraversalCase
_EXTERNAL = dict(sampling_mode="external")
# name -> case. Every case runs lockstep vs reference; the torch-vs-jax cases say torch=True.
# A case costs seconds (mostly XLA compiling its static configuration), so a row combines
# several options that do not interact and that other rows leave at their defaults: what
# the table must keep is every value of every option in some row, and each torch-run mode
# in a torch row, not each value in a row of its own.
TRAVERSAL_CASES = {
    # ---- outcome sampling
    "outcome_lanes4": _C({}, lanes=4, torch=True, schedule="one_mover"),  # inert here
    "outcome_lanes1_zero_tight_clip": _C(
        dict(outcome_unsampled_regret="zero", outcome_sampling_value_clip=0.5),
        lanes=1,
        torch=True,
    ),
    # more lanes than the 6 traversals
    "outcome_lanes7_no_clip_uniform_fallback": _C(
        dict(outcome_sampling_value_clip=0.0, all_negative_fallback="uniform"),
        lanes=7,
        traverser=0,
        torch=True,
    ),
    "outcome_average_strategy_both": _C(
        dict(opponent_policy="average_strategy", strategy_samples="both"), torch=True
    ),
    "outcome_league": _C(dict(opponent_policy="league"), lanes=3, torch=True),
    "outcome_bot_safe_cutoff4_score": _C(
        dict(opponent_policy="safe_heuristic", cutoff_turns=4), torch=True
    ),
    "outcome_bot_noisy_cutoff4_safe_rollouts": _C(
        dict(
            opponent_policy="noisy_safe",
            strategy_samples="traverser",
            cutoff_turns=4,
            cutoff_value_mode="rollouts",
            cutoff_rollout_policy="safe_heuristic",
        ),
        torch=True,
    ),
    "outcome_bot_random_cutoff3_rollouts": _C(
        dict(opponent_policy="random", cutoff_turns=3, cutoff_value_mode="rollouts"),
        lanes=5,
        torch=True,
    ),
    # ---- outcome sampling, modes of the jax backend only
    "outcome_baseline_no_clip_bootstrap_bot": _C(
        dict(
            outcome_estimator="baseline",
            outcome_sampling_value_clip=0.0,
            value_lambda=0.0,
            opponent_policy="safe_heuristic",
            strategy_samples="traverser",
        ),
        lanes=3,
    ),
    # clips its sampled values (the baseline row does not)
    "outcome_history_value_half_lambda_cutoff": _C(
        dict(
            outcome_estimator="history_value",
            value_lambda=0.5,
            cutoff_turns=4,
            floor=0.05,
        ),
        traverser=0,
    ),
    # ---- external sampling
    "external_depth1_cutoff3": _C(
        dict(_EXTERNAL, max_depth=1, cutoff_turns=3), lanes=3, torch=True
    ),
    "external_depth2": _C(dict(_EXTERNAL, max_depth=2), torch=True, schedule="one_mover"),
    "external_depth2_avg_both": _C(
        dict(_EXTERNAL, opponent_policy="average_strategy", strategy_samples="both"),
        traverser=0,
        torch=True,
        schedule="one_mover",
    ),
    "external_league_rollouts": _C(
        dict(_EXTERNAL, opponent_policy="league", cutoff_turns=4, cutoff_value_mode="rollouts"),
        lanes=2,
        torch=True,
        schedule="one_mover",
    ),
    "external_bot_cutoff4_lanes1": _C(
        dict(_EXTERNAL, opponent_policy="passive_discard", cutoff_turns=4), lanes=1, torch=True
    ),
    # ---- external sampling expanded at a sampled decision (jax backend only)
    "external_sampled_depth2_eps_floor_bot_cutoff_rollouts": _C(
        dict(
            _EXTERNAL,
            expand_at="sampled",
            path_epsilon=0.3,
            floor=0.05,
            opponent_policy="safe_heuristic_loose",
            strategy_samples="traverser",
            cutoff_turns=6,
            cutoff_value_mode="rollouts",
        ),
        traverser=0,
        lanes=2,
        schedule="one_mover",
    ),
    # ---- external sampling expanded at some of a scouted path's choices (jax only)
    # three of the path's choices (fewer on the tiny variant's short paths)
    "external_path_depth1_expansions3_eps_bot_cutoff_rollouts": _C(
        dict(
            _EXTERNAL,
            expand_at="path",
            max_depth=1,
            path_expansions=3,
            path_epsilon=0.3,
            opponent_policy="safe_heuristic",
            cutoff_turns=6,
            cutoff_value_mode="rollouts",
        ),
        lanes=3,
    ),
    # ---- sampled expansions whose children are valued by the value network (jax only)
    "external_sampled_leaves_playable_draws_both": _C(
        dict(
            _EXTERNAL,
            expand_at="sampled",
            max_depth=1,
            leaf_decisions=2,
            leaf_check_share=0.5,
            draws="playable",
            strategy_samples="both",
        ),
        lanes=3,
    ),
    "external_path_leaves_depth2_expansions2_eps_leaf_targets": _C(
        dict(
            _EXTERNAL,
            expand_at="path",
            max_depth=2,
            path_epsilon=0.3,
            path_expansions=2,
            leaf_decisions=1,
            leaf_check_share=0.4,
            leaf_targets="leaves",
        ),
        traverser=0,
        lanes=2,
        schedule="one_mover",
    ),
}
del _C


def lockstep_records(samples, slots_adv, slots_strat, slots_value=None):
    """The valid slots of Samples as one pytree for chex:
    {kind: {(traversal, node): {"info", "mask", "target"}}}, kind in advantage, strategy
    and (when the samples have it) value; a chex failure names the leaf, e.g.
    'strategy/(4, 1)/target'."""
    out = {}
    kinds = [
        (
            "advantage",
            samples.advantage_info,
            samples.advantage_mask,
            samples.advantage_target,
            samples.advantage_valid,
            slots_adv,
        ),
        (
            "strategy",
            samples.strategy_info,
            samples.strategy_mask,
            samples.strategy_policy,
            samples.strategy_valid,
            slots_strat,
        ),
    ]
    if samples.value_info is not None:
        kinds.append(
            (
                "value",
                samples.value_info,
                samples.value_mask,
                samples.value_target,
                samples.value_valid,
                slots_value or slots_adv,
            )
        )
    for kind, info, mask, target, valid, per in kinds:
        records = {}
        for slot in np.flatnonzero(np.asarray(valid)):
            records[(int(slot) // per, int(slot) % per)] = {
                "info": np.asarray(info[slot]),
                "mask": np.asarray(mask[slot]),
                "target": np.asarray(target[slot]),
            }
        out[kind] = records
    return out


def reference_records(records):
    """Reference `Record`s in the layout of `lockstep_records`: {(traversal, node): {...}}."""
    out = {}
    for record in records:
        key = (record.traversal, record.node)
        assert key not in out, f"two reference samples at {key}"
        out[key] = {"info": record.info, "mask": record.mask, "target": record.target}
    return out
