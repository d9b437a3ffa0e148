"""Engine throughput: random legal play, JAX vmapped at several batch sizes vs Cython.

Every decision computes the legal mask and the encoding of the player to move, then
takes the shared generator's random legal action; both engines play the very same games
(the totals are checked against each other). Prints decisions per second side by side
and the JAX-to-Cython ratio.

    .venv/bin/python scripts/bench_engine.py [--batches 1,64,1024,8192] [--json out.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp

from lc_cfr.game import cy_engine
from lc_cfr.game.random_play import play_random_games
from lc_cfr.game.rules import Rules

SEED = 1


def bench_jax(
    rules: Rules, batch: int, min_games: int, repeats: int, with_encoding: bool = True
) -> dict:
    calls = max(1, -(-min_games // batch))
    first = jnp.arange(batch, dtype=jnp.int32)
    play = functools.partial(play_random_games, with_encoding=with_encoding)
    compile_start = time.perf_counter()
    jax.block_until_ready(play(rules, SEED, 0, first + 10**6))
    compile_seconds = time.perf_counter() - compile_start
    rates, decisions, truncated = [], 0, 0
    for _ in range(repeats):
        decisions = truncated = 0
        start = time.perf_counter()
        for call in range(calls):
            stats = play(rules, SEED, 0, first + call * batch)
            decisions += int(stats.decisions)
            truncated += int(stats.truncated)
        rates.append(decisions / (time.perf_counter() - start))
    return {
        "engine": f"jax_vmap_b{batch}" + ("" if with_encoding else "_noenc"),
        "batch": batch,
        "games": calls * batch,
        "decisions": decisions,
        "truncated_games": truncated,
        "decisions_per_second": statistics.median(rates),
        "first_call_seconds": compile_seconds,
    }


def bench_cython(rules: Rules, games: int, repeats: int, with_encoding: bool = True) -> dict:
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        stats = cy_engine.play_random_games(rules, SEED, 0, 0, games, with_encoding=with_encoding)
        rates.append(stats["decisions"] / (time.perf_counter() - start))
    return {
        "engine": "cython_1proc" + ("" if with_encoding else "_noenc"),
        "batch": 1,
        "games": games,
        "decisions": stats["decisions"],
        "truncated_games": stats["truncated"],
        "decisions_per_second": statistics.median(rates),
    }


def bench_forward(rules: Rules, batch: int, repeats: int, hidden: int = 512, layers: int = 3):
    """Context for the engine figures: one dense ReLU MLP forward of the default size."""
    sizes = [rules.encoding_size] + [hidden] * layers + [rules.num_actions]
    keys = jax.random.split(jax.random.PRNGKey(0), len(sizes))
    weights = [
        jax.random.normal(k, (a, b), jnp.float32) / a**0.5
        for k, a, b in zip(keys, sizes[:-1], sizes[1:], strict=False)
    ]

    @jax.jit
    def forward(x):
        for w in weights[:-1]:
            x = jax.nn.relu(x @ w)
        return x @ weights[-1]

    x = jax.random.uniform(keys[-1], (batch, rules.encoding_size))
    jax.block_until_ready(forward(x))
    times = []
    for _ in range(repeats * 5):
        start = time.perf_counter()
        jax.block_until_ready(forward(x))
        times.append(time.perf_counter() - start)
    return {
        "engine": f"forward_{hidden}x{layers}_b{batch}",
        "ns_per_state": 1e9 * min(times) / batch,
    }


def check_same_games(rules: Rules) -> None:
    """Both engines must have played the same games: compare totals on 64 of them."""
    jax_stats = play_random_games(rules, SEED, 0, jnp.arange(64, dtype=jnp.int32))
    cy_stats = cy_engine.play_random_games(rules, SEED, 0, 0, 64)
    if int(jax_stats.checksum) != cy_stats["checksum"] % 2**32:
        raise SystemExit("engines disagree on the benchmark games: run the parity tests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,64,1024,8192")
    parser.add_argument("--min-games", type=int, default=2048, help="games per JAX timing")
    parser.add_argument("--cython-games", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this path")
    args = parser.parse_args()

    rules = Rules()
    check_same_games(rules)
    results = [bench_cython(rules, args.cython_games, args.repeats)]
    for batch in (int(b) for b in args.batches.split(",")):
        min_games = args.min_games if batch > 1 else min(args.min_games, 64)
        results.append(bench_jax(rules, batch, min_games, args.repeats))

    cython_rate = results[0]["decisions_per_second"]
    best = max(results[1:], key=lambda r: r["decisions_per_second"])
    # Breakdown: the same loops without the encoding, at the best JAX batch.
    results.append(bench_cython(rules, args.cython_games, args.repeats, with_encoding=False))
    results.append(
        bench_jax(rules, best["batch"], args.min_games, args.repeats, with_encoding=False)
    )
    print(f"{'engine':<18}{'games':>8}{'decisions':>12}{'decisions/s':>14}{'vs cython':>11}")
    for r in results:
        r["ratio_to_cython"] = r["decisions_per_second"] / cython_rate
        print(
            f"{r['engine']:<18}{r['games']:>8}{r['decisions']:>12}"
            f"{r['decisions_per_second']:>14,.0f}{r['ratio_to_cython']:>10.2f}x"
        )
    print(f"best JAX ({best['engine']}) / Cython = {best['ratio_to_cython']:.2f}")
    for r in results:
        r["ns_per_decision"] = 1e9 / r["decisions_per_second"]
    by_name = {r["engine"]: r["ns_per_decision"] for r in results}
    for engine, noenc in [("cython_1proc", "cython_1proc_noenc"), (best["engine"], None)]:
        noenc = noenc or f"{engine}_noenc"
        share = 1 - by_name[noenc] / by_name[engine]
        print(f"{engine}: {by_name[engine]:.0f} ns/decision, encoding share {share:.0%}")
    forward = bench_forward(rules, best["batch"], args.repeats)
    print(
        f"context: {forward['engine']} forward {forward['ns_per_state']:.0f} ns/state; "
        f"JAX engine decision = {by_name[best['engine']] / forward['ns_per_state']:.2f} forwards"
    )
    if args.json:
        summary = {
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "results": results,
            "best_jax_to_cython": best["ratio_to_cython"],
            "forward": forward,
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
