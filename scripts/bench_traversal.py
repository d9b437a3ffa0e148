"""Traversal throughput of the `jax` backend vs the forward-only limit, at several lanes.

Builds the rules, network shape and traversal options from the config exactly as the
trainer does (lc_cfr.train.setup.*_from_config; only `lanes`, the traversal quota and
optionally the sampling mode are overridden), gives the two advantage networks and the
strategy network random parameters (league: one copy of the strategy network; or a
run's trained networks, below), and
times calls of the `jax` backend (lc_cfr.traversal.lockstep.run_traversals). Its figure
is nodes per second: traversal decisions (stats.nodes) per wall-clock second.

The FORWARD-ONLY LIMIT is timed in the same run, at the same batch: back-to-back
`mlp.apply` forwards of the config's network on a [lanes, E] float32 batch inside one
jitted `lax.fori_loop`, which is how the traversal runs them (one jitted while_loop, no
Python between steps). Its rate, lanes / seconds per forward, is the node rate the
traversal would reach if every lane decided at every step and nothing but the forward
took time. It includes no regret matching and no engine work; two context figures come
with it: the same loop with the masked regret-matching head the traversal applies
(`fwd+RM`), and one jitted forward per Python call (`percall`).

Each repeat times one traversal call and then one forward-only loop, back to back, so
that both see the same load from anything else on the machine; the ratio is the median
nodes/s over the median limit (the table's own columns), stored with the per-repeat
ratios and their spread and judged unrounded against `--goal-ratio` (0.7) and
`--goal-nodes-per-second` (60,000; scripts/bench_common.py). It splits into two factors
(medians over the repeats, so these hold only roughly):
    occupancy      = policy_calls / (forward_batches * lanes): forward rows that were nodes
    forward share  = forward_batches * seconds per forward / seconds per call
    ratio          = occupancy * forward share / (policy_calls / nodes)
(policy_calls / nodes is 1 for outcome sampling with a `network` opponent, 2 for
external sampling, which evaluates both advantage networks at every decision.)

    .venv/bin/python scripts/bench_traversal.py [--lanes 64,280,1024] [--repeats 3] \
        [--sampling-mode outcome|external] [--traversals N] [--json out.json] \
        [--config path[:preset] | --workdir RUN [--checkpoint N]]

BACKENDS SIDE BY SIDE (`--backends jax,recursive,interleaved,server --workers N`): every
named backend runs the same config (the trainer's options and worker settings, with
`traversal.num_workers` = N), the same networks and the same iterations, one backend
after the other; each gets one untimed warm-up call (compilation, process start-up,
weight sync) and then `--repeats` timed calls. It prints nodes/s, the realised batch
(network rows per forward; for `server` the server's batches) and each backend's ratio
to `jax` and to `recursive` (the median call's nodes/s over the other's, both measured
in this run, one backend after the other, with the spread over calls paired by index). A name
may carry `+amp` (run.use_amp) and/or `+compile` (run.torch_compile), e.g.
`interleaved+amp`, to measure those options against the plain backend; `jax` may carry
`+one_mover` or `+all_lanes` (traversal.lockstep_schedule, else the config's) and
`+lanes<N>` (traversal.lanes), e.g. `jax+one_mover+lanes1024`; any backend may carry
`+<field>=<value>` for a `TraversalOptions` field, e.g. `jax+one_mover+expand_at=path`, to
hold two estimators side by side. Each backend's advantage samples per second (valid
advantage slots of the median call over its seconds) come with its nodes/s, and their
ratio to the first backend's (`samples_ratio_to_first`: the figure that compares
estimators, whose trees differ).

TRAINED NETWORKS (`--workdir RUN [--checkpoint N]`): the run's config (config.json, with
--set overrides) and the advantage, strategy, league and value networks of one of its
checkpoints (the latest by default) instead of random ones. Random networks do not play
a run's games (with any pile draw allowed their paths run to the turn cap); a trained
run's are the ones its training plays, so estimators compared side by side on its
networks are compared on the work a run does (`jax+expand_at=sampled+...` replays an
older estimator on them). The forward-only limit then times the trained advantage
network (a forward's cost does not depend on its weights).

Traversals per call default to max(config traversals_per_player, lanes): lanes beyond the
quota would never run (the trainer refuses them), so a larger lanes value is benchmarked
with a larger quota. The work per call grows with it; nodes/s stays comparable. With
lanes below the quota the last wave of traversals runs part-empty, which `occup` shows.

JSON schema 2 (since issue 21): per lanes value `ratio_to_limit` (a bench_common ratio
record; `ratio` is its value) and `nodes_per_second_goal`; per backend
`ratio_to_jax_record` and `ratio_to_recursive_record`, `nodes_per_second` the median
call's. Schema 1 files (no `schema` field) held `ratio` as the median of the per-repeat
ratios and a backend's `nodes_per_second` over all its timed calls.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from lc_cfr.nets import mlp
from lc_cfr.train.setup import (
    options_from_config,
    rules_from_config,
    spec_from_config,
    worker_settings_from_config,
)
from lc_cfr.traversal import api
from lc_cfr.traversal import policy as pol
from lc_cfr.traversal.registry import make_backend

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# the modes every backend implements (and the ones docs/performance.md measured)
DEFAULT_CONFIG = f"{ROOT / 'configs' / 'default.py'}:wide,classic"
LIMIT_DEFINITION = (
    "forward-only limit = lanes / seconds per forward; a forward is one mlp.apply of "
    "the config's network (player 0's advantage parameters, random or trained) on a "
    "[lanes, E] float32 batch, timed as "
    "back-to-back forwards inside one jitted lax.fori_loop (no Python dispatch, no "
    "regret matching, no engine work). ratio = traversal nodes/s / limit, each the median "
    "over the repeats (the lower median for an even count), each repeat timing one "
    "traversal call and one forward loop back to back; ratio_to_limit holds the "
    "per-repeat ratios and their spread."
)
# issue 8's goals for the jax backend (docs/performance.md): 60k nodes/s, 0.7 of the limit
RATIO_GOAL = 0.7
NODES_PER_SECOND_GOAL = 60_000.0


# ----- set-up from the config ------------------------------------------------------


def options_for(config, traversals: int, sampling_mode: str):
    """The trainer's TraversalOptions with the quota and sampling mode overridden."""
    config = config.copy_and_resolve_references()
    config.traversal.traversals_per_player = traversals
    config.traversal.sampling_mode = sampling_mode
    return options_from_config(config)


def random_networks(spec: mlp.NetworkSpec, seed: int, rules) -> api.Networks:
    """Random parameters: advantage (player 0, player 1), strategy, league of 1 copy, and
    the history value network (read by the estimators and leaves that use one)."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 4)
    adv0, adv1, strategy = (mlp.init_params(spec, k) for k in keys[:3])
    return api.Networks(
        advantage=(adv0, adv1),
        strategy=strategy,
        league=jax.tree.map(lambda x: x[None], strategy),
        league_count=jnp.int32(1),
        value=mlp.init_params(api.value_spec(rules, spec), keys[3]),
    )


def trained_networks(config, workdir: Path, checkpoint: int | None) -> tuple[api.Networks, int]:
    """(networks, iteration) of checkpoint `checkpoint` (None: the latest) of the run in
    `workdir` (`bench_common.restored_run`): the value network comes with the advantage
    and strategy networks, which `load_saved_networks` leaves on disk. `config` is
    `bench_common.run_config`'s, overrides applied."""
    trainer, state = bench_common.restored_run(config, workdir, checkpoint)
    return trainer.networks(state), int(state.iteration)


# ----- timing helpers --------------------------------------------------------------


def timed(fn, *args):
    """(result, wall seconds, process CPU seconds) of fn(*args), blocked until ready."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = jax.block_until_ready(fn(*args))
    return result, time.perf_counter() - wall, time.process_time() - cpu


class ForwardTimer:
    """Compiled forward-only loops at one batch size; `time` gives seconds per forward."""

    def __init__(self, spec: mlp.NetworkSpec, params, fallback: str, batch: int, count: int):
        self.params, self.batch, self.count = params, batch, count
        kx, km = jax.random.split(jax.random.PRNGKey(7))
        self.x = jax.random.uniform(kx, (batch, spec.input_size), jnp.float32)
        mask = jax.random.bernoulli(km, 0.5, (batch, spec.num_actions))
        self.mask = mask.at[:, -1].set(True)  # at least one legal action per row
        rm = functools.partial(pol.regret_matching, fallback=fallback)

        def forward(p, x, mask):
            del mask
            return mlp.apply(spec, p, x)

        def forward_rm(p, x, mask):  # what the traversal's _regret_policy computes
            return jax.vmap(rm)(mlp.masked_advantages(mlp.apply(spec, p, x), mask), mask)

        def looped(body):
            def run(p, x, mask):
                def step(_, carry):
                    x, total = carry
                    out = body(p, x, mask)
                    # the next input depends on the carry, so XLA cannot hoist the forward
                    # out of the loop; the output feeds `total`, so it cannot drop it
                    return jnp.roll(x, 1, axis=0), total + out[:, 0]

                zero = jnp.zeros((batch,), jnp.float32)
                return jax.lax.fori_loop(0, count, step, (x, zero))[1]

            return jax.jit(run)

        self.loops = {"forward": looped(forward), "forward_rm": looped(forward_rm)}
        self.single = jax.jit(forward)
        for fn in (*self.loops.values(), self.single):  # compile outside the timings
            jax.block_until_ready(fn(self.params, self.x, self.mask))

    def time(self, kind: str) -> tuple[float, float]:
        """(wall, CPU) seconds per forward of `kind`: forward | forward_rm | percall."""
        args = (self.params, self.x, self.mask)
        if kind == "percall":
            wall = cpu = 0.0
            for _ in range(self.count):
                _, w, c = timed(self.single, *args)
                wall, cpu = wall + w, cpu + c
        else:
            _, wall, cpu = timed(self.loops[kind], *args)
        return wall / self.count, cpu / self.count


# ----- one lanes value -------------------------------------------------------------


def bench_lanes(config, rules, spec, networks, lanes, traversals, mode, args) -> dict:
    options = options_for(config, traversals, mode)
    backend = make_backend(
        "jax", rules=rules, spec=spec, options=options, lanes=lanes, workers=None
    )
    seed = int(config.seed)

    def traverse(iteration, traverser):
        return backend.traverse(networks, seed=seed, iteration=iteration, traverser=traverser)

    _, first_seconds, _ = timed(traverse, 1, 0)  # compiles, then runs iteration 1
    count = max(args.min_forwards, -(-args.forward_rows // lanes))
    forwards = ForwardTimer(
        spec, networks.advantage[0], options.all_negative_fallback, lanes, count
    )

    runs = []
    for i in range(args.repeats):  # distinct iterations (other games), same compiled code
        (_, stats), wall, cpu = timed(traverse, 2 + i, i % 2)
        fwd_wall, fwd_cpu = forwards.time("forward")
        rm_wall, _ = forwards.time("forward_rm")
        call_wall, _ = forwards.time("percall")
        rate, limit = stats["nodes"] / wall, lanes / fwd_wall
        runs.append(
            {
                "iteration": 2 + i,
                "traverser": i % 2,
                **stats,
                "seconds": wall,
                "cpu_seconds": cpu,
                "nodes_per_second": rate,
                "seconds_per_forward": fwd_wall,
                "cpu_seconds_per_forward": fwd_cpu,
                "limit_nodes_per_second": limit,
                "ratio": rate / limit,
                "forward_share": stats["forward_batches"] * fwd_wall / wall,
                "seconds_per_forward_with_regret_matching": rm_wall,
                "seconds_per_forward_python_call": call_wall,
            }
        )

    def median(key):
        return statistics.median(r[key] for r in runs)

    ratio = bench_common.ratio(
        [r["nodes_per_second"] for r in runs],
        [r["limit_nodes_per_second"] for r in runs],
        numerator_is="traversal nodes/s",
        denominator_is="forward-only limit nodes/s",
        goal=args.goal_ratio,
        rounds_are="each repeat: one traversal call, then one forward-only loop, back to back",
    )
    totals = {k: sum(r[k] for r in runs) for k in ("nodes", "policy_calls", "forward_batches")}
    seconds, fwd = median("seconds"), lanes / ratio["denominator"]
    return {
        "lanes": lanes,
        "traversals": traversals,
        "options": options._asdict(),
        "first_call_seconds": first_seconds,
        "compile_seconds_estimate": first_seconds - seconds,
        "median_seconds": seconds,
        "nodes_per_call": median("nodes"),
        "steps": median("steps"),
        "nodes_per_second": ratio["numerator"],
        "nodes_per_second_goal": bench_common.goal_record(
            ratio["numerator"], args.goal_nodes_per_second
        ),
        "cpu_per_wall": median("cpu_seconds") / seconds,
        "realised_batch": totals["policy_calls"] / max(totals["forward_batches"], 1),
        "occupancy": totals["policy_calls"] / max(totals["forward_batches"] * lanes, 1),
        "forwards_per_node": totals["policy_calls"] / max(totals["nodes"], 1),
        "forward_share": median("forward_share"),
        "forward": {
            "batch": lanes,
            "forwards_per_timing": count,
            "seconds_per_forward": fwd,
            "cpu_per_wall": median("cpu_seconds_per_forward") / fwd,
            "limit_nodes_per_second": ratio["denominator"],
            "with_regret_matching_rows_per_second": lanes
            / median("seconds_per_forward_with_regret_matching"),
            "python_call_rows_per_second": lanes / median("seconds_per_forward_python_call"),
        },
        "ratio": ratio["value"],
        "ratio_to_limit": ratio,
        "runs": runs,
    }


# ----- backends side by side --------------------------------------------------------


def bench_backends(config, rules, spec, networks, names, mode, args) -> list[dict]:
    """Every backend of `names` on the same options, networks and iterations."""
    quota = args.traversals or int(config.traversal.traversals_per_player)
    options = options_for(config, quota, mode)
    lanes = min(int(config.traversal.lanes), quota)
    settings = worker_settings_from_config(config)._replace(num_workers=args.workers)
    seed = int(config.seed)
    rows = []
    for label in names:
        name, *extras = label.split("+")
        schedules = [e for e in extras if e in api.LOCKSTEP_SCHEDULES]
        lane_counts = [e for e in extras if e.startswith("lanes") and e[5:].isdigit()]
        fields = dict(e.split("=", 1) for e in extras if "=" in e)
        if set(fields) - set(api.TraversalOptions._fields):
            raise SystemExit(f"{label!r}: not TraversalOptions fields: {sorted(fields)}")
        chosen = options._replace(**{k: type(getattr(options, k))(v) for k, v in fields.items()})
        unknown = set(extras) - {"amp", "compile", *schedules, *lane_counts}
        unknown -= {e for e in extras if "=" in e}
        if unknown or len(schedules) > 1 or len(lane_counts) > 1:
            raise SystemExit(f"unknown or repeated backend option(s) {extras} in {label!r}")
        variant = settings._replace(use_amp="amp" in extras, compile="compile" in extras)
        schedule = schedules[0] if schedules else str(config.traversal.lockstep_schedule)
        started = time.perf_counter()
        backend = make_backend(
            name,
            rules=rules,
            spec=spec,
            options=chosen,
            lanes=int(lane_counts[0][5:]) if lane_counts else lanes,
            workers=variant,
            schedule=schedule,
        )
        try:
            call = functools.partial(backend.traverse, networks, seed=seed)
            _, warm_seconds, _ = timed(functools.partial(call, iteration=1, traverser=0))
            runs = []
            for i in range(args.repeats):
                (samples, stats), wall, cpu = timed(
                    functools.partial(call, iteration=2 + i, traverser=i % 2)
                )
                kept = int(jnp.sum(samples.advantage_valid))
                runs.append(
                    {**stats, "seconds": wall, "cpu_seconds": cpu, "advantage_samples": kept}
                )
        finally:
            backend.close()
        total = functools.partial(_total, runs)
        seconds = total("seconds")
        for run in runs:
            run["nodes_per_second"] = run["nodes"] / run["seconds"]
            run["advantage_samples_per_second"] = run["advantage_samples"] / run["seconds"]
        row = {
            "backend": label,
            "set_up_and_warm_up_seconds": time.perf_counter() - started - seconds,
            "warm_up_call_seconds": warm_seconds,
            "nodes": total("nodes"),
            "seconds": seconds,
            # the median call's (the lower median for an even count), as the ratios' parts
            "nodes_per_second": bench_common.median_of(r["nodes_per_second"] for r in runs),
            "advantage_samples_per_second": bench_common.median_of(
                r["advantage_samples_per_second"] for r in runs
            ),
            "nodes_per_second_over_all_calls": total("nodes") / seconds,
            "cpu_per_wall": total("cpu_seconds") / seconds,
            "policy_calls": total("policy_calls"),
            "forward_batches": total("forward_batches"),
            "realised_batch": total("policy_calls") / max(total("forward_batches"), 1),
            "batch_max": max(r.get("server_batch_max", 0) for r in runs),
            "forward_seconds": total("forward_seconds"),
            "runs": runs,
        }
        rows.append(row)
        print(
            f"  {label}: {row['nodes_per_second']:,.0f} nodes/s, realised batch "
            f"{row['realised_batch']:.1f} ({row['set_up_and_warm_up_seconds']:.1f}s set-up)",
            flush=True,
        )
    by_name = {r["backend"]: r for r in rows}
    for row in rows:
        for base in ("jax", "recursive"):
            if base in by_name:
                record = bench_common.ratio(
                    [r["nodes_per_second"] for r in row["runs"]],
                    [r["nodes_per_second"] for r in by_name[base]["runs"]],
                    numerator_is=f"{row['backend']} nodes/s",
                    denominator_is=f"{base} nodes/s",
                    rounds_are="call i of each backend; the backends run one after the other",
                )
                row[f"ratio_to_{base}_record"] = record
                row[f"ratio_to_{base}"] = record["value"]
        record = bench_common.ratio(
            [r["advantage_samples_per_second"] for r in row["runs"]],
            [r["advantage_samples_per_second"] for r in rows[0]["runs"]],
            numerator_is=f"{row['backend']} advantage samples/s",
            denominator_is=f"{rows[0]['backend']} advantage samples/s",
            rounds_are="call i of each backend; the backends run one after the other",
        )
        row["samples_ratio_to_first_record"] = record
        row["samples_ratio_to_first"] = record["value"]
    return rows


def print_columns(columns, rows: list[dict]) -> None:
    """A right-aligned table: columns are (header, width, cell function of a row)."""
    print("".join(f"{name:>{width}}" for name, width, _ in columns))
    for r in rows:
        print("".join(f"{cell(r):>{width}}" for _, width, cell in columns))


def _total(runs: list[dict], key: str):
    return sum(r.get(key, 0) for r in runs)


def print_backend_table(rows: list[dict]) -> None:
    columns = [
        ("backend", 20, lambda r: r["backend"]),
        ("nodes", 9, lambda r: f"{r['nodes']}"),
        ("seconds", 9, lambda r: f"{r['seconds']:.2f}"),
        ("nodes/s", 10, lambda r: f"{r['nodes_per_second']:,.0f}"),
        ("samples/s", 10, lambda r: f"{r['advantage_samples_per_second']:,.1f}"),
        ("batch", 8, lambda r: f"{r['realised_batch']:.1f}"),
        ("max", 5, lambda r: f"{r['batch_max'] or '-'}"),
        ("fwd s", 8, lambda r: f"{r['forward_seconds']:.2f}" if r["backend"] != "jax" else "-"),
        ("cpu/wall", 9, lambda r: f"{r['cpu_per_wall']:.2f}"),
        ("vs jax", 8, lambda r: f"{r.get('ratio_to_jax', float('nan')):.4f}"),
        ("samples vs 1st", 15, lambda r: f"{r['samples_ratio_to_first']:.4f}"),
        ("vs recursive", 13, lambda r: f"{r.get('ratio_to_recursive', float('nan')):.4f}"),
    ]
    print_columns(columns, rows)
    print(
        "nodes/s: traversal decisions per wall second of the median timed call; samples/s:\n"
        "advantage samples per wall second (median call); batch: network\n"
        "rows per forward (server: per server batch); max: largest server batch; fwd s:\n"
        "seconds the workers spent waiting for forwards (summed over workers); cpu/wall:\n"
        "CPU seconds of the trainer's process per wall second (workers not included)."
    )


# ----- main --------------------------------------------------------------------------


def print_table(results: list[dict]) -> None:
    columns = [
        ("lanes", 6, lambda r: f"{r['lanes']}"),
        ("trav", 6, lambda r: f"{r['traversals']}"),
        ("steps", 7, lambda r: f"{r['steps']:.0f}"),
        ("batch", 8, lambda r: f"{r['realised_batch']:.1f}"),
        ("occup", 7, lambda r: f"{r['occupancy']:.2f}"),
        ("fwd/node", 9, lambda r: f"{r['forwards_per_node']:.0f}"),
        ("call s", 8, lambda r: f"{r['median_seconds']:.2f}"),
        ("cpu/wall", 9, lambda r: f"{r['cpu_per_wall']:.2f}"),
        ("nodes/s", 10, lambda r: f"{r['nodes_per_second']:,.0f}"),
        ("fwd limit", 11, lambda r: f"{r['forward']['limit_nodes_per_second']:,.0f}"),
        ("ratio", 8, lambda r: f"{r['ratio']:.4f}"),
        ("fwd share", 10, lambda r: f"{r['forward_share']:.2f}"),
        ("fwd+RM", 10, lambda r: f"{r['forward']['with_regret_matching_rows_per_second']:,.0f}"),
        ("percall", 10, lambda r: f"{r['forward']['python_call_rows_per_second']:,.0f}"),
        ("compile s", 10, lambda r: f"{r['compile_seconds_estimate']:.1f}"),
    ]
    print_columns(columns, results)
    print(
        "batch: realised batch = policy_calls / forward_batches; occup: batch / lanes;\n"
        "fwd/node: policy_calls / nodes (network rows evaluated per node); call s: median "
        "seconds per traversal call;\ncpu/wall: process CPU seconds per wall second of a "
        "call (above 1: more than one core busy);\nfwd limit: lanes / seconds per forward "
        "in a jitted loop (network only), nodes/s; ratio: nodes/s / fwd limit\n"
        "(both the medians over the repeats); fwd share: forward_batches x seconds per forward / "
        "call s;\nfwd+RM: the same loop with the masked regret-matching head, rows/s; "
        "percall: one jitted forward per\nPython call, rows/s; compile s: first call - "
        "call s (compilation, roughly)."
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", help=f"path[:preset]; default {DEFAULT_CONFIG}")
    parser.add_argument(
        "--workdir", help="a training run: its config and a checkpoint's trained networks"
    )
    parser.add_argument(
        "--checkpoint", type=int, help="with --workdir: the checkpoint's iteration (latest)"
    )
    parser.add_argument("--lanes", default="64,280,1024", help="comma list")
    parser.add_argument(
        "--traversals",
        type=int,
        default=0,
        help="traversals per call; 0 = max(config traversals_per_player, lanes)",
    )
    parser.add_argument("--sampling-mode", choices=api.SAMPLING_MODES, help="default: the config's")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per lanes value")
    parser.add_argument(
        "--forward-rows",
        type=int,
        default=60_000,
        help="rows per forward-only timing (forwards = rows / lanes, at least --min-forwards)",
    )
    parser.add_argument("--min-forwards", type=int, default=20)
    parser.add_argument(
        "--goal-ratio", type=float, default=RATIO_GOAL, help="ratio to the limit at least"
    )
    parser.add_argument(
        "--goal-nodes-per-second", type=float, default=NODES_PER_SECOND_GOAL, help="at least"
    )
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument(
        "--backends",
        default="",
        help="comma list, e.g. jax,recursive,interleaved,server: compare them side by side "
        "(instead of the lanes sweep)",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="traversal.num_workers of the torch backends"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="config override, e.g. traversal.interleave_width=128 (repeatable)",
    )
    args = parser.parse_args()
    lanes_values = [int(v) for v in args.lanes.split(",")]
    if args.repeats < 1 or min(lanes_values) < 1:
        parser.error("--repeats and every --lanes value must be >= 1")
    if args.traversals and max(lanes_values) > args.traversals:
        parser.error(f"--lanes {max(lanes_values)} exceeds --traversals {args.traversals}")

    if args.workdir and args.config:
        parser.error("--config and --workdir exclude each other (a run brings its config)")
    if args.checkpoint is not None and not args.workdir:
        parser.error("--checkpoint needs --workdir")
    if args.workdir:
        config = bench_common.run_config(Path(args.workdir))
        args.config = str(Path(args.workdir) / "config.json")
    else:
        args.config = args.config or DEFAULT_CONFIG
        config = bench_common.load_config(args.config)
    bench_common.apply_overrides(config, args.set)
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    if args.workdir:
        networks, iteration = trained_networks(config, Path(args.workdir), args.checkpoint)
        source = {"kind": "trained", "workdir": str(args.workdir), "checkpoint": iteration}
    else:
        networks = random_networks(spec, int(config.seed), rules)
        source = {"kind": "random", "seed": int(config.seed)}
    mode = args.sampling_mode or config.traversal.sampling_mode
    quota = int(config.traversal.traversals_per_player)
    print(
        f"{args.config}: E={rules.encoding_size} A={rules.num_actions}, network "
        f"{spec.hidden_size}x{spec.num_layers} {spec.activation}, {mode} sampling, "
        f"opponent {config.traversal.opponent_policy}, {source['kind']} networks"
        + (f" (checkpoint {source['checkpoint']})" if args.workdir else "")
        + f"; jax {jax.__version__} "
        f"({jax.default_backend()}), {os.cpu_count()} CPUs",
        flush=True,
    )

    if args.backends:
        names = [n.strip() for n in args.backends.split(",") if n.strip()]
        print(f"backends side by side, {args.workers} workers, {args.repeats} timed calls each")
        rows = bench_backends(config, rules, spec, networks, names, mode, args)
        print()
        print_backend_table(rows)
        if args.json:
            summary = {
                "schema": 2,
                "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                "torch_threads_per_worker": 1,
                "config": args.config,
                "overrides": args.set,
                "networks": source,
                "sampling_mode": mode,
                "workers": args.workers,
                "repeats": args.repeats,
                "results": rows,
            }
            with open(args.json, "w") as f:
                json.dump(summary, f, indent=2)
        return

    results = []
    for lanes in lanes_values:
        traversals = args.traversals or max(quota, lanes)
        row = bench_lanes(config, rules, spec, networks, lanes, traversals, mode, args)
        results.append(row)
        print(
            f"  lanes {lanes}: first call {row['first_call_seconds']:.1f}s, "
            f"{row['nodes_per_second']:,.0f} nodes/s, ratio {row['ratio']:.2f}",
            flush=True,
        )

    print()
    print_table(results)
    best = max(results, key=lambda r: r["ratio"])
    fastest = max(results, key=lambda r: r["nodes_per_second"])
    for r in results:
        goal = r["nodes_per_second_goal"]
        print(
            f"lanes {r['lanes']}: "
            + bench_common.describe(r["ratio_to_limit"])
            + f"; {r['nodes_per_second']:,.0f} nodes/s against {goal['goal']:,.0f}: "
            + ("met" if goal["goal_met"] else "NOT met")
        )
    print(
        f"best ratio {best['ratio']:.4f} at lanes {best['lanes']}; "
        f"fastest {fastest['nodes_per_second']:,.0f} nodes/s at lanes {fastest['lanes']}"
    )

    if args.json:
        summary = {
            "schema": 2,
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "processor": platform.processor(),
                "python": sys.version.split()[0],
            },
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "config": args.config,
            "networks": source,
            "rules": config.rules.to_dict(),
            "network": {
                "input_size": spec.input_size,
                "num_actions": spec.num_actions,
                "hidden_size": spec.hidden_size,
                "num_layers": spec.num_layers,
                "activation": spec.activation,
            },
            "sampling_mode": mode,
            "repeats": args.repeats,
            "limit_definition": LIMIT_DEFINITION,
            "goals": {"ratio": args.goal_ratio, "nodes_per_second": args.goal_nodes_per_second},
            "results": results,
            "best_ratio": best["ratio"],
            "best_ratio_lanes": best["lanes"],
            "best_nodes_per_second": fastest["nodes_per_second"],
            "best_nodes_per_second_lanes": fastest["lanes"],
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
