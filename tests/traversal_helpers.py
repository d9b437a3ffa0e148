"""Shared fixtures of the traversal tests: a tiny game, exact networks, options."""

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
        num_traversals=6,
        sampling_mode="outcome",
        epsilon=0.5,
        value_clip=8.0,
        unsampled_regret="negative_node_value",
        max_depth=2,
        cutoff_turns=0,
        cutoff_value_mode="score_diff",
        cutoff_rollouts=2,
        rollout_policy="random",
        opponent_policy="network",
        strategy_samples="opponent",
        fallback="argmax_tiebreak",
        utility_scale=20.0,
    )
    base.update(overrides)
    return TraversalOptions(**base)


def lockstep_records(samples, slots_adv, slots_strat):
    """{(traversal, node): (info, mask, target)} of the valid slots of Samples."""
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
                slots_adv,
            )
        )
    for kind, info, mask, target, valid, per in kinds:
        records = {}
        for slot in np.flatnonzero(np.asarray(valid)):
            records[(int(slot) // per, int(slot) % per)] = (
                np.asarray(info[slot]),
                np.asarray(mask[slot]),
                np.asarray(target[slot]),
            )
        out[kind] = records
    return out
