"""The worker side of the Cython + torch backends: one chunk of traversals at a time.

A chunk is `count` consecutive traversals of the iteration's quota. `run_chunk` drives a
`TraversalCore` (lc_cfr/traversal/cy_traversal.pyx) with an `evaluate(net_ids, obs)`
function: a `NetSet` of torch networks in this process (`recursive`, `interleaved`) or a
`ServerClient` of the inference server (`server`). Only the filled sample rows leave the
worker, as contiguous numpy arrays tagged with their slots.

The functions prefixed `worker_` run in the pool's processes (spawned, so this module is
imported there); they keep the process's core and evaluator in a module global.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import torch

from lc_cfr.traversal.cy_traversal import STAT_NAMES, RecursiveTraversal, TraversalCore
from lc_cfr.traversal.torch.lifeline import exit_with_parent

KINDS = ("advantage", "strategy")
ROW_FIELDS = {"advantage": ("info", "mask", "target"), "strategy": ("info", "mask", "policy")}


class CoreSettings(NamedTuple):
    """Everything a worker needs to build its `TraversalCore` (picklable)."""

    rules: Any  # lc_cfr.game.rules.Rules
    options: Any  # lc_cfr.traversal.api.TraversalOptions (validated)
    width: int  # contexts advanced together; 0 = RecursiveTraversal (recursive, server)
    max_batch: int  # rows per evaluate call at most (interleave_max_batch)


class Chunk(NamedTuple):
    """What one chunk sends back: filled rows with their chunk-local slots."""

    start: int  # first traversal of the quota in the chunk
    rows: dict  # "advantage"/"strategy" -> {"slot" [n] int64, "info", "mask", "target"}
    stats: dict  # STAT_NAMES totals plus forward_batches, steps and seconds


def make_core(settings: CoreSettings) -> TraversalCore:
    """The suspendable core of `settings.width` contexts, or the recursion (width 0)."""
    if settings.width == 0:
        return RecursiveTraversal(settings.rules, settings.options)
    return TraversalCore(settings.rules, settings.options, width=settings.width)


def run_chunk(
    core: TraversalCore,
    evaluate: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    max_batch: int,
    seed: int,
    iteration: int,
    traverser: int,
    game_base: int,
    start: int,
    count: int,
    league_count: int,
) -> Chunk:
    """Runs traversals start .. start + count - 1 and returns their samples.

    A `RecursiveTraversal` calls `evaluate` itself at every decision; a `TraversalCore`
    is stepped here, its posed rows evaluated in batches of at most `max_batch`.

    Args:
        core: the process's traversal core.
        evaluate: raw network outputs [R, A] float32 for rows (net_ids [R], obs [R, E]).
        max_batch: rows per `evaluate` call at most; more posed rows are split.
        seed, iteration, traverser: the call's counters (docs/design.md section 2.2).
        game_base: game index of traversal 0 of the quota (traverser * quota).
        start, count: the chunk within the quota.
        league_count: valid league snapshots.
    """
    began = time.perf_counter()
    forward_seconds, forward_batches, steps = 0.0, 0, 0
    core.begin(
        seed=seed,
        iteration=iteration,
        traverser=traverser,
        game_base=game_base,
        start=start,
        count=count,
        league_count=league_count,
    )
    if isinstance(core, RecursiveTraversal):
        timing = [0.0, 0]

        def timed_evaluate(nets, obs):
            tick = time.perf_counter()
            out = evaluate(nets, obs)
            timing[0] += time.perf_counter() - tick
            timing[1] += 1
            return out

        core.run(timed_evaluate)
        forward_seconds, forward_batches = timing
        steps = forward_batches
    else:
        rows = core.step()
        while rows:
            steps += 1
            nets, obs = core.request_net[:rows], core.request_obs[:rows]
            tick = time.perf_counter()
            parts = [
                evaluate(nets[i : i + max_batch], obs[i : i + max_batch])
                for i in range(0, rows, max_batch)
            ]
            forward_seconds += time.perf_counter() - tick
            forward_batches += len(parts)
            outputs = parts[0] if len(parts) == 1 else np.concatenate(parts)
            rows = core.step(np.ascontiguousarray(outputs, dtype=np.float32))
    stats = core.stats()
    total = time.perf_counter() - began
    stats.update(
        forward_batches=forward_batches,
        steps=steps,
        forward_seconds=forward_seconds,
        scheduler_seconds=total - forward_seconds,
    )
    return Chunk(start=start, rows=_filled_rows(core.samples()), stats=stats)


def _filled_rows(arrays: dict) -> dict:
    out = {}
    for kind in KINDS:
        slot = np.flatnonzero(arrays[f"{kind}_valid"])
        fields = {"slot": slot.astype(np.int64)}
        for field in ROW_FIELDS[kind]:
            fields[field] = arrays[f"{kind}_{field}"][slot]
        out[kind] = fields
    return out


def sum_stats(chunks) -> dict:
    """Totals of several chunks (every stat is a sum)."""
    total: dict = {}
    for chunk in chunks:
        for name, value in chunk.stats.items():
            total[name] = total.get(name, 0) + value
    return total


# ----- pool processes ---------------------------------------------------------------

_PROCESS: dict = {}


def worker_init(core_settings: CoreSettings, evaluator: tuple) -> None:
    """Pool initializer: one torch thread, the core, and the evaluator.

    Args:
        core_settings: see `CoreSettings`.
        evaluator: ("netset", board_handle, spec, device, use_amp, compile) or
            ("server", client_handle).
    """
    exit_with_parent()  # a trainer killed outright must not leave its pool behind
    torch.set_num_threads(1)
    _PROCESS["core"] = make_core(core_settings)
    _PROCESS["max_batch"] = core_settings.max_batch
    _PROCESS["evaluate"] = make_evaluator(evaluator)


def make_evaluator(evaluator: tuple):
    """An evaluate(net_ids, obs) function from an evaluator description (see worker_init)."""
    from lc_cfr.traversal.torch import server, weights

    if evaluator[0] == "server":
        return server.ServerClient(evaluator[1]).evaluate
    _, board_handle, spec, device, use_amp, compile_ = evaluator
    board = weights.WeightBoard.attach(board_handle)
    nets = weights.NetSet(spec, board, device=device, use_amp=use_amp, compile=compile_)
    _PROCESS.setdefault("boards", []).append(board)  # keeps the mapping alive

    def evaluate(net_ids, obs):
        nets.sync()
        return nets.forward(net_ids, obs)

    return evaluate


def worker_chunk(task: dict) -> Chunk:
    """Pool task: one chunk with the process's core and evaluator."""
    return run_chunk(
        _PROCESS["core"], _PROCESS["evaluate"], max_batch=_PROCESS["max_batch"], **task
    )


__all__ = [
    "STAT_NAMES",
    "Chunk",
    "CoreSettings",
    "make_core",
    "make_evaluator",
    "run_chunk",
    "sum_stats",
    "worker_chunk",
    "worker_init",
]
