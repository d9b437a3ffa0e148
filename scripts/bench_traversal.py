"""Traversal throughput of the `jax` backend vs the forward-only limit, at several lanes.

Runs the lockstep Deep CFR traversal (lc_cfr.traversal.lockstep.run_traversals) on the
config's rules, traversal options and network shape (randomly initialised parameters:
two advantage networks, the strategy network, a league of one snapshot), and reports
nodes (traversal decisions) per second at each `lanes` value.

In the same run it times the network alone: `count` back-to-back forwards of
`mlp.apply` on a [lanes, E] batch inside one jitted `lax.fori_loop`, which is how the
traversal runs them (one jitted while_loop, no Python between steps). Its rate,
lanes / seconds per forward, is the FORWARD-ONLY LIMIT: the node rate the traversal
would reach if every lane decided at every step and nothing but the forward took time.
The ratio printed is traversal nodes/s / that limit. Two context figures come with it:
the same forward dispatched from Python one call at a time, and the forward plus the
masked regret-matching head the traversal applies to it (also in a loop).

The ratio splits into two factors (outcome sampling with a `network` opponent runs one
forward of all `lanes` rows per step):
    occupancy      = policy_calls / (forward_batches * lanes)   rows that were real nodes
    forward share  = forward_batches * t_forward / t_call        time spent in forwards
    ratio          = occupancy * forward share * nodes / policy_calls

    .venv/bin/python scripts/bench_traversal.py [--lanes 64,280,1024] [--repeats 3] \
        [--sampling-mode outcome|external] [--traversals N] [--json out.json]

Traversals per call default to max(config traversals_per_player, lanes): lanes beyond the
quota would sit idle, so a larger lanes value is benchmarked with a larger quota (the
work per call grows with it; nodes/s stays comparable).
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol
from lc_cfr.traversal.lockstep import Networks, TraversalOptions, run_traversals

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = ROOT / "configs" / "default.py"
LIMIT_DEFINITION = (
    "forward-only limit = lanes / seconds per forward, where a forward is one "
    "mlp.apply of the config's network on a [lanes, E] float32 batch, timed as "
    "back-to-back forwards inside one jitted lax.fori_loop (no Python dispatch, no "
    "regret matching, no engine work); ratio = traversal nodes/s / limit"
)


# ----- set-up from the config ------------------------------------------------------


def load_config(arg: str):
    """The ConfigDict of a config file, `path` or `path:preset` (as lc_cfr.main takes)."""
    path, _, preset = arg.partition(":")
    module_spec = importlib.util.spec_from_file_location("_bench_config", path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"cannot load config file {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(preset)


def build_options(config, lanes: int, traversals: int, sampling_mode: str) -> TraversalOptions:
    t = config.traversal
    return TraversalOptions(
        num_traversals=traversals,
        lanes=lanes,
        sampling_mode=sampling_mode,
        epsilon=float(t.outcome_sampling_epsilon),
        value_clip=float(t.outcome_sampling_value_clip),
        unsampled_regret=t.outcome_unsampled_regret,
        max_depth=int(t.max_depth),
        cutoff_turns=int(t.cutoff_turns),
        cutoff_value_mode=t.cutoff_value_mode,
        cutoff_rollouts=int(t.cutoff_rollouts),
        rollout_policy=t.cutoff_rollout_policy,
        opponent_policy=t.opponent_policy,
        strategy_samples=t.strategy_samples,
        fallback=config.regret_matching.all_negative_fallback,
        utility_scale=float(config.utility_scale),
    )


def build_networks(spec: mlp.NetworkSpec, seed: int) -> Networks:
    """Random parameters: advantage (player 0, player 1), strategy, league of 1 copy."""
    keys = jax.random.split(jax.random.PRNGKey(seed), 3)
    adv0, adv1, strategy = (mlp.init_params(spec, k) for k in keys)
    return Networks(
        advantage=(adv0, adv1),
        strategy=strategy,
        league=jax.tree.map(lambda x: x[None], strategy),
        league_count=jnp.int32(1),
    )


# ----- the traversal ---------------------------------------------------------------


def bench_traversal(rules, spec, options, networks, seed: int, repeats: int) -> dict:
    """First call (compile + run) timed apart, then `repeats` calls on fresh iterations."""

    def call(iteration: int, traverser: int):
        start = time.perf_counter()
        samples, stats = run_traversals(
            rules, spec, options, networks, seed=seed, iteration=iteration, traverser=traverser
        )
        jax.block_until_ready((samples, stats))
        seconds = time.perf_counter() - start
        return seconds, {k: int(v) for k, v in stats._asdict().items()}

    first_seconds, _ = call(1, 0)
    runs = []
    for i in range(repeats):  # distinct iterations (different games), same compiled code
        seconds, stats = call(2 + i, i % 2)
        runs.append(
            {
                "iteration": 2 + i,
                "traverser": i % 2,
                "seconds": seconds,
                **stats,
                "nodes_per_second": stats["nodes"] / seconds,
            }
        )
    rates = [r["nodes_per_second"] for r in runs]
    by_rate = sorted(runs, key=lambda r: r["nodes_per_second"])
    median = by_rate[len(by_rate) // 2]  # the median run (repeats odd; upper middle if even)
    return {
        "first_call_seconds": first_seconds,
        "compile_seconds_estimate": first_seconds - median["seconds"],
        "median_seconds": median["seconds"],
        "nodes_per_second": statistics.median(rates),
        "nodes": median["nodes"],
        "policy_calls": median["policy_calls"],
        "forward_batches": median["forward_batches"],
        "steps": median["steps"],
        "realised_batch": median["policy_calls"] / max(median["forward_batches"], 1),
        "runs": runs,
    }


# ----- the forward-only limit ------------------------------------------------------


def _timed(fn, *args, repeats: int) -> float:
    """Median seconds of fn(*args) (blocked), after one warm-up call that compiles."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bench_forward(rules, spec, options, params, batch: int, count: int, repeats: int) -> dict:
    """Seconds per forward of `batch` rows: in a loop, per Python call, and with the head."""
    kx, km = jax.random.split(jax.random.PRNGKey(7))
    x = jax.random.uniform(kx, (batch, spec.input_size), jnp.float32)
    mask = jax.random.bernoulli(km, 0.5, (batch, spec.num_actions))
    mask = mask.at[:, -1].set(True)  # at least one legal action per row
    rm = functools.partial(pol.regret_matching, fallback=options.fallback)

    def forward(p, x, mask):
        return mlp.apply(spec, p, x)

    def forward_policy(p, x, mask):  # what the traversal's _regret_policy computes
        return jax.vmap(rm)(mlp.masked_advantages(mlp.apply(spec, p, x), mask), mask)

    def looped(body):
        @jax.jit
        def run(p, x, mask):
            def step(_, carry):
                x, total = carry
                out = body(p, x, mask)
                # the next input depends on the carry, so XLA cannot hoist the forward
                # out of the loop; the output feeds `total`, so it cannot drop it
                return jnp.roll(x, 1, axis=0), total + out[:, 0]

            return jax.lax.fori_loop(0, count, step, (x, jnp.zeros((batch,), jnp.float32)))

        return run

    loop_seconds = _timed(looped(forward), params, x, mask, repeats=repeats) / count
    head_seconds = _timed(looped(forward_policy), params, x, mask, repeats=repeats) / count
    call_seconds = _timed(jax.jit(forward), params, x, mask, repeats=repeats * count // 4)
    return {
        "batch": batch,
        "forwards_per_timing": count,
        "seconds_per_forward": loop_seconds,
        "limit_nodes_per_second": batch / loop_seconds,
        "seconds_per_forward_python_call": call_seconds,
        "per_call_rows_per_second": batch / call_seconds,
        "seconds_per_forward_with_regret_matching": head_seconds,
        "with_regret_matching_rows_per_second": batch / head_seconds,
    }


# ----- main --------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="path[:preset]")
    parser.add_argument("--lanes", default="64,280,1024", help="comma list")
    parser.add_argument(
        "--traversals",
        type=int,
        default=0,
        help="traversals per call; 0 = max(config traversals_per_player, lanes)",
    )
    parser.add_argument(
        "--sampling-mode",
        choices=("outcome", "external"),
        default=None,
        help="default: the config's",
    )
    parser.add_argument("--repeats", type=int, default=3, help="timed traversal calls")
    parser.add_argument(
        "--forward-count",
        type=int,
        default=100,
        help="forwards per forward-only timing (one jitted loop)",
    )
    parser.add_argument("--json", help="write the figures to this path")
    args = parser.parse_args()

    config = load_config(args.config)
    rules = Rules(**config.rules.to_dict())
    spec = mlp.NetworkSpec(
        input_size=rules.encoding_size,
        num_actions=rules.num_actions,
        hidden_size=int(config.network.hidden_size),
        num_layers=int(config.network.num_layers),
        activation=config.network.activation,
    )
    networks = build_networks(spec, int(config.seed))
    mode = args.sampling_mode or config.traversal.sampling_mode
    quota = int(config.traversal.traversals_per_player)
    print(
        f"rules: E={rules.encoding_size} A={rules.num_actions}; network "
        f"{spec.hidden_size}x{spec.num_layers} {spec.activation}; sampling {mode}; "
        f"opponent {config.traversal.opponent_policy}; jax {jax.__version__} "
        f"({jax.default_backend()}), {os.cpu_count()} CPUs",
        flush=True,
    )

    results = []
    for lanes in (int(v) for v in args.lanes.split(",")):
        traversals = args.traversals or max(quota, lanes)
        options = build_options(config, lanes, traversals, mode)
        trav = bench_traversal(rules, spec, options, networks, int(config.seed), args.repeats)
        fwd = bench_forward(
            rules,
            spec,
            options,
            networks.advantage[0],
            lanes,
            args.forward_count,
            args.repeats,
        )
        row = {"lanes": lanes, "traversals": traversals, **trav, "forward": fwd}
        limit = fwd["limit_nodes_per_second"]
        row["ratio"] = trav["nodes_per_second"] / limit
        row["occupancy"] = trav["policy_calls"] / max(trav["forward_batches"] * lanes, 1)
        row["forward_share"] = (
            trav["forward_batches"] * fwd["seconds_per_forward"] / trav["median_seconds"]
        )
        row["forwards_per_node"] = trav["policy_calls"] / max(trav["nodes"], 1)
        row["ratio_to_regret_matching_limit"] = (
            trav["nodes_per_second"] / fwd["with_regret_matching_rows_per_second"]
        )
        results.append(row)
        print(
            f"  lanes {lanes}: compile ~{trav['compile_seconds_estimate']:.1f}s, "
            f"{trav['nodes_per_second']:,.0f} nodes/s, ratio {row['ratio']:.2f}",
            flush=True,
        )

    header = (
        f"{'lanes':>6}{'trav':>6}{'steps':>7}{'batch':>8}{'occup':>7}{'call s':>8}"
        f"{'nodes/s':>10}{'fwd limit':>11}{'ratio':>7}{'fwd share':>10}"
        f"{'fwd+RM':>10}{'percall':>10}{'compile s':>10}"
    )
    print()
    print(header)
    for r in results:
        f = r["forward"]
        print(
            f"{r['lanes']:>6}{r['traversals']:>6}{r['steps']:>7}{r['realised_batch']:>8.1f}"
            f"{r['occupancy']:>7.2f}{r['median_seconds']:>8.2f}{r['nodes_per_second']:>10,.0f}"
            f"{f['limit_nodes_per_second']:>11,.0f}{r['ratio']:>7.2f}{r['forward_share']:>10.2f}"
            f"{f['with_regret_matching_rows_per_second']:>10,.0f}"
            f"{f['per_call_rows_per_second']:>10,.0f}{r['compile_seconds_estimate']:>10.1f}"
        )
    print(
        "\nbatch = realised batch (policy_calls / forward_batches); occup = batch / lanes;"
        " call s = median seconds per run_traversals call;\nfwd limit = "
        + LIMIT_DEFINITION.split("; ratio")[0].removeprefix("forward-only limit = ")
        + ";\nratio = nodes/s / fwd limit; fwd share = forward_batches x seconds per forward"
        " / call s;\nfwd+RM = same loop with masked regret matching (rows/s); percall = one"
        " jitted forward per Python call (rows/s)."
    )
    best = max(results, key=lambda r: r["ratio"])
    fastest = max(results, key=lambda r: r["nodes_per_second"])
    print(
        f"best ratio {best['ratio']:.2f} at lanes {best['lanes']}; "
        f"fastest {fastest['nodes_per_second']:,.0f} nodes/s at lanes {fastest['lanes']}"
    )

    if args.json:
        summary = {
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "processor": platform.processor(),
                "python": sys.version.split()[0],
            },
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "config": args.config,
            "rules": config.rules.to_dict(),
            "network": {
                "input_size": spec.input_size,
                "num_actions": spec.num_actions,
                "hidden_size": spec.hidden_size,
                "num_layers": spec.num_layers,
                "activation": spec.activation,
            },
            "options": build_options(config, 0, 0, mode)._asdict()
            | {"lanes": "per result", "num_traversals": "per result"},
            "repeats": args.repeats,
            "limit_definition": LIMIT_DEFINITION,
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
