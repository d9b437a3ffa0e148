"""The steps of one Deep CFR iteration (`Trainer.iteration` chains them).

For each player p: `traverse` (p's traversals, their statistics and target anatomy),
`remember` (the samples into p's advantage memory, the strategy memory and the value
window), `train_advantage` (p's advantage network on its memory). Then `train_network`
for the average-strategy network (on its schedule) and the value network, and
`traversal_columns` for the metrics row. Every step takes what it needs as arguments
(the trainer's learners, keys and settings) and records into the iteration's `Work`;
none reads the config. Nothing non-finite is learnt from or kept (`lc_cfr.train.health`):
a `Guard` says what happens to it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from lc_cfr.game.rules import Rules
from lc_cfr.learn import api as learn_api
from lc_cfr.learn.learner import advantage_loss
from lc_cfr.memory import reservoir
from lc_cfr.nets import mlp
from lc_cfr.train import anatomy, health
from lc_cfr.train.run_format import TrainState
from lc_cfr.traversal import api

# the seconds of the players' halves, summed over both
PLAYER_TIMINGS = ("traversal_seconds", "memory_add_seconds", "advantage_train_seconds")


class Guard(NamedTuple):
    """What a step does with something non-finite (`optimization.non_finite`)."""

    mode: str  # stop | skip
    note: Callable[[], str]  # names the latest checkpoint, for a stopped run's message


@dataclasses.dataclass
class Work:
    """An iteration's state while its steps run: the new networks and memories (lists
    indexed by player), and the metrics row with the sums it is built from."""

    t: int  # the iteration being run (state.iteration + 1)
    row: dict
    totals: dict  # traversal statistics, summed over both players' traversals
    targets: dict  # target-anatomy sums (anatomy.merge)
    advantage_params: list
    advantage_opt: list
    advantage_memory: list
    strategy_memory: Any
    value_memory: Any

    @classmethod
    def start(cls, state: TrainState) -> Work:
        t = state.iteration + 1
        row = {"iteration": t, "health/skipped_updates": 0, "health/non_finite_samples": 0}
        row.update(dict.fromkeys(PLAYER_TIMINGS, 0.0))
        return cls(
            t=t,
            row=row,
            totals={},
            targets={},
            advantage_params=list(state.advantage_params),
            advantage_opt=list(state.advantage_opt),
            advantage_memory=list(state.advantage_memory),
            strategy_memory=state.strategy_memory,
            value_memory=state.value_memory,
        )


@contextlib.contextmanager
def timed(row: dict, name: str):
    """Adds the seconds of the block to row[name]."""
    start = time.perf_counter()
    yield
    row[name] = row.get(name, 0.0) + time.perf_counter() - start


def growing_add(add, codec):
    """`add` (reservoir_add or window_add) jitted for `codec`, with the memory first
    grown to hold the batch (`reservoir.reserve`); the old buffers are donated."""
    jitted = jax.jit(functools.partial(add, codec=codec), donate_argnums=0)

    def grow_and_add(memory, *args):
        return jitted(reservoir.reserve(memory, args[-1].shape[0]), *args)

    return grow_and_add


def traverse(
    backend,
    networks: api.Networks,
    work: Work,
    p: int,
    *,
    seed,
    epsilon,
    rules: Rules,
    guard: Guard,
) -> api.Samples:
    """Player p's traversals, non-finite targets dropped or refused, their statistics
    and target anatomy summed into `work`."""
    with timed(work.row, "traversal_seconds"):
        samples, stats = backend.traverse(
            networks, seed=seed, iteration=work.t, traverser=p, epsilon=epsilon
        )
        jax.block_until_ready(samples)

    def refusal(bad, kind):
        return (
            f"iteration {work.t}: {bad} {kind} samples of player {p}'s traversals have "
            f"non-finite targets; stopped before saving ({guard.note()}); set "
            "optimization.non_finite='skip' to drop such samples"
        )

    samples, dropped = health.finite_samples(samples, guard.mode, refusal)
    work.row["health/non_finite_samples"] += dropped
    stats["advantage_samples"] = int(jnp.sum(samples.advantage_valid))
    for name, value in stats.items():
        merge = max if name.endswith("_max") else lambda a, b: a + b
        work.totals[name] = merge(work.totals.get(name, 0), value)
    column = anatomy.turn_column(rules)
    rows = (samples.advantage_info[:, column], samples.advantage_mask)
    rows += (samples.advantage_target, samples.advantage_valid)
    rows += (samples.strategy_info[:, column], samples.strategy_valid)
    *advantage_rows, strategy_turns, strategy_valid = jax.device_get(rows)
    sums = anatomy.target_anatomy(rules, *advantage_rows)
    sums["strategy_turn_counts"] = anatomy.turn_counts(rules, strategy_turns, strategy_valid)
    for name, value in sums.items():
        work.targets[name] = work.targets.get(name, 0.0) + value
    return samples


def remember(work: Work, p: int, s: api.Samples, *, add, window_add, advantage_key, strategy_key):
    """Player p's samples `s` into its advantage memory, the strategy memory and (with
    a value network) the value window; `add`, `window_add` from `growing_add`."""
    t = work.t
    with timed(work.row, "memory_add_seconds"):
        work.advantage_memory[p] = add(
            work.advantage_memory[p],
            advantage_key,
            *(s.advantage_info, s.advantage_mask, s.advantage_target, t, s.advantage_valid),
        )
        work.strategy_memory = add(
            work.strategy_memory,
            strategy_key,
            *(s.strategy_info, s.strategy_mask, s.strategy_policy, t, s.strategy_valid),
        )
        if work.value_memory is not None:
            work.value_memory = window_add(
                work.value_memory, *(s.value_info, s.value_mask, s.value_target, t, s.value_valid)
            )
        jax.block_until_ready((work.advantage_memory[p], work.strategy_memory))


def checked(what: str, work: Work, result, previous, guard: Guard):
    """`result` = (params, opt_state, losses) of a training call if all finite; else
    the run stops (`stop`) or the update is dropped for `previous` (`skip`, counted)."""

    def refusal(loss):
        return (
            f"iteration {work.t}: the {what} went non-finite in training (last loss "
            f"{loss}); stopped before saving ({guard.note()}); lower optimization.learning_rate, "
            "or set optimization.non_finite='skip' to drop such updates"
        )

    result, dropped = health.checked(result, previous, guard.mode, refusal)
    work.row["health/skipped_updates"] += int(dropped)
    return result


def train_advantage(
    work: Work,
    p: int,
    previous: tuple,
    *,
    learner,
    epochs: float,
    reinit_key,
    train_key,
    guard: Guard,
) -> None:
    """Player p's advantage network on its memory, in `learn_api.updates_for` updates;
    re-drawn first from `reinit_key` unless it is None (advantage_init='scratch').
    `previous`: the (params, opt_state) kept when the update is dropped."""
    row, memory = work.row, work.advantage_memory[p]
    with timed(row, "advantage_train_seconds"):
        if reinit_key is not None:
            work.advantage_params[p], work.advantage_opt[p] = learner.init(reinit_key)
        updates = learn_api.updates_for(
            int(memory.size),
            floor=learner.num_updates,
            epochs=epochs,
            batch_size=learner.batch_size,
        )
        row[f"optimization/advantage_updates_p{p}"] = updates
        params, opt = work.advantage_params[p], work.advantage_opt[p]
        trained = learn_api.train_in_chunks(learner, params, opt, memory, train_key, updates)
        what = f"advantage network of player {p}"
        params, opt, losses = checked(what, work, trained, previous, guard)
        work.advantage_params[p], work.advantage_opt[p] = params, opt
        jax.block_until_ready(params)
    row[f"loss/advantage_p{p}"] = float(losses["loss_last"])
    row[f"loss/advantage_p{p}_first"] = float(losses["loss_first"])
    row[f"memory/advantage_p{p}_fill"] = int(memory.size) / reservoir.capacity_of(memory)
    row[f"memory/advantage_p{p}_seen"] = int(memory.seen)


class HeldOut(NamedTuple):
    """Advantage samples of one traversal call kept out of the memory (S rows)."""

    info: jax.Array  # [S, E] float32
    mask: jax.Array  # [S, A] bool
    target: jax.Array  # [S, A] float32
    valid: jax.Array  # [S] bool the row is held out


def hold_out(samples: api.Samples, share: float, key) -> tuple[api.Samples, HeldOut]:
    """(the samples the memory gets, the held-out ones): each valid advantage sample is
    held out with probability `share`, drawn from `key`."""
    out = jax.random.uniform(key, samples.advantage_valid.shape) < share
    held = HeldOut(
        samples.advantage_info,
        samples.advantage_mask,
        samples.advantage_target,
        samples.advantage_valid & out,
    )
    return samples._replace(advantage_valid=samples.advantage_valid & ~out), held


@functools.partial(jax.jit, static_argnums=0)
def _held_out_loss(spec, params, held: HeldOut):
    raw = mlp.apply(spec, params, held.info)
    return advantage_loss(raw, held.mask, held.target, held.valid.astype(jnp.float32))


def held_out_loss(work: Work, p: int, held: HeldOut, *, spec) -> None:
    """Player p's trained advantage network on its held-out samples, unweighted (all of
    one iteration): loss/advantage_heldout_p{p}, and their count."""
    count = int(jnp.sum(held.valid))
    work.row[f"memory/advantage_heldout_p{p}"] = count
    if count:
        loss = _held_out_loss(spec, work.advantage_params[p], held)
        work.row[f"loss/advantage_heldout_p{p}"] = float(loss)


# what an error message calls the networks that `train_network` trains
NETWORK_NAMES = {"strategy": "average-strategy network", "value": "value network"}


def train_network(
    work: Work, name: str, params, opt, memory, *, learner, key, guard: Guard, reinit_key=None
):
    """(params, opt_state) of the `name` network (of NETWORK_NAMES) after one training
    call on `memory` (key None: not this iteration), from a network re-drawn from
    `reinit_key` unless it is None (strategy_init='scratch'); `loss/<name>` recorded.
    A dropped update keeps the network as it was, not the re-drawn one."""
    if key is None:
        return params, opt
    start = (params, opt) if reinit_key is None else learner.init(reinit_key)
    trained = learner.train(*start, memory, key)
    params, opt, losses = checked(NETWORK_NAMES[name], work, trained, (params, opt), guard)
    jax.block_until_ready(params)
    work.row[f"loss/{name}"] = float(losses["loss_last"])
    work.row[f"loss/{name}_first"] = float(losses["loss_first"])
    return params, opt


def memory_columns(work: Work) -> None:
    """The strategy and value memories' fill and the bytes all memories hold."""
    row = work.row
    strategy, value = work.strategy_memory, work.value_memory
    row["memory/strategy_fill"] = int(strategy.size) / reservoir.capacity_of(strategy)
    row["memory/strategy_seen"] = int(strategy.seen)
    memories = (*work.advantage_memory, strategy, value)
    row["memory/bytes"] = sum(x.nbytes for m in memories if m is not None for x in m)
    if value is not None:
        row["memory/value_fill"] = int(value.size) / reservoir.capacity_of(value)


def traversal_columns(work: Work) -> None:
    """The `traversal/*` and anatomy columns of the row, from the summed statistics."""
    row, totals = work.row, work.totals
    for name, value in totals.items():
        row[f"traversal/{name}"] = value
    batches = max(totals["forward_batches"], 1)
    row["traversal/realised_batch_size"] = totals["policy_calls"] / batches
    # outcome sampling: the share of advantage targets whose value hit value_clip
    samples = max(totals["advantage_samples"], 1)
    row["traversal/clipped_value_fraction"] = totals["clipped_values"] / samples
    row.update(anatomy.merge(work.targets))
    paths = max(totals["terminals"] + totals["truncations"] + totals["cutoffs"], 1)
    row["traversal/mean_endpoint_depth"] = totals["endpoint_depth_sum"] / paths
    row["traversal/truncated_share"] = totals["truncations"] / paths
    seconds = max(row["traversal_seconds"], 1e-9)
    row["traversal/nodes_per_second"] = totals["nodes"] / seconds
    if "leaf_check_p0_count" in totals:
        row.update(leaf_check_columns(totals))


def leaf_check_columns(totals: dict) -> dict:
    """traversal.leaf_decisions: per phase p of the game (quarters of max_turns) where
    checked traversals expanded nodes, the correlation of the leaf regrets with the full
    playouts' (`traversal/leaf_corr_p{p}`) and their root mean square difference in
    utility units (`traversal/leaf_rmse_p{p}`), over every legal action of those nodes;
    a phase with fewer than two such actions has neither."""
    columns = {}
    for phase in range(api.LEAF_CHECK_PHASES):
        n, x, y, xx, yy, xy = (
            totals[f"leaf_check_p{phase}_{name}"] for name in api.LEAF_CHECK_SUMS
        )
        if n < 2:
            continue
        spread = (n * xx - x * x) * (n * yy - y * y)
        columns[f"traversal/leaf_corr_p{phase}"] = (
            (n * xy - x * y) / spread**0.5 if spread > 0 else 0.0
        )
        columns[f"traversal/leaf_rmse_p{phase}"] = (max(xx - 2 * xy + yy, 0.0) / n) ** 0.5
    return columns
