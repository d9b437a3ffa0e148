"""Engine throughput: random legal play, JAX vmapped at several batch sizes vs Cython.

Every decision computes the legal mask and the encoding of the player to move, then
takes the shared generator's random legal action; both engines play the very same games
(the totals are checked against each other). Prints decisions per second side by side
and the JAX-to-Cython ratio.

    .venv/bin/python scripts/bench_engine.py [--batches 1,64,1024,8192] [--json out.json]
        [--clock cpu] [--profile] [--goal 0.5]

JSON schema 2 (since issue 21): per row `rates` (per round), `ratio_to_cython_record`
(a bench_common ratio record; `ratio_to_cython` is its value) and
`best_jax_to_cython_record`. Schema 1 files (no `schema` field) timed each engine's
repeats one engine after the other and held the medians' quotient only.

`--clock cpu` times with the process's CPU time instead of the wall clock: on a shared
machine the wall clock also counts the time other processes hold the cores, which hurts
the multi-threaded XLA loops far more than the single-threaded C loop. The timings go
round-robin (each round times every engine once), and every ratio to Cython is stored
with its parts, the per-round ratios and their spread; the best batch's is judged
unrounded against `--goal` (0.5; scripts/bench_common.py). `--profile` adds,
the JAX engine's parts timed alone (mask, encoding, action, step; at --profile-batch,
1024 by default) and, at the best JAX batch, the XLA operations of traced random-play
loops, in ns per decision.
"""

from __future__ import annotations

import argparse
import collections
import functools
import glob
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from lc_cfr.game import cy_engine, engine
from lc_cfr.game.random_play import play_random_games
from lc_cfr.game.rules import Rules

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402

SEED = 1
CLOCK = time.perf_counter  # --clock cpu: time.process_time
# issue 13's goal: the JAX engine at its best batch at half the Cython engine's rate
JAX_TO_CYTHON_GOAL = 0.5


class JaxTimer:
    """Random play of the JAX engine at one batch: `info` and one timed round (`rate`)."""

    def __init__(self, rules: Rules, batch: int, min_games: int, with_encoding: bool = True):
        self.rules, self.batch = rules, batch
        self.calls = max(1, -(-min_games // batch))
        self.first = jnp.arange(batch, dtype=jnp.int32)
        self.play = functools.partial(play_random_games, with_encoding=with_encoding)
        compile_start = time.perf_counter()
        jax.block_until_ready(self.play(rules, SEED, 0, self.first + 10**6))
        self.info = {
            "engine": f"jax_vmap_b{batch}" + ("" if with_encoding else "_noenc"),
            "batch": batch,
            "games": self.calls * batch,
            "first_call_seconds": time.perf_counter() - compile_start,
        }

    def rate(self) -> float:
        decisions = truncated = 0
        start = CLOCK()
        for call in range(self.calls):
            stats = self.play(self.rules, SEED, 0, self.first + call * self.batch)
            decisions += int(stats.decisions)
            truncated += int(stats.truncated)
        seconds = CLOCK() - start
        self.info.update(decisions=decisions, truncated_games=truncated)
        return decisions / seconds


class CythonTimer:
    """Random play of the Cython engine in this process: `info` and one timed round."""

    def __init__(self, rules: Rules, games: int, with_encoding: bool = True):
        self.rules, self.games, self.with_encoding = rules, games, with_encoding
        self.info = {
            "engine": "cython_1proc" + ("" if with_encoding else "_noenc"),
            "batch": 1,
            "games": games,
        }

    def rate(self) -> float:
        start = CLOCK()
        stats = cy_engine.play_random_games(
            self.rules, SEED, 0, 0, self.games, with_encoding=self.with_encoding
        )
        seconds = CLOCK() - start
        self.info.update(decisions=stats["decisions"], truncated_games=stats["truncated"])
        return stats["decisions"] / seconds


def round_robin(timers: list, repeats: int) -> list[dict]:
    """Every timer once per round, `repeats` rounds: its rows with the per-round rates and
    their median (the lower median for an even count, as bench_common's ratios)."""
    rates = [[] for _ in timers]
    for _ in range(repeats):
        for timer, own in zip(timers, rates, strict=True):
            own.append(timer.rate())
    rows = []
    for timer, own in zip(timers, rates, strict=True):
        rows.append(
            {**timer.info, "rates": own, "decisions_per_second": bench_common.median_of(own)}
        )
    return rows


def ratio_to(row: dict, base: dict, goal: float | None = None) -> dict:
    """`row`'s decisions/s over `base`'s, round by round (bench_common.ratio)."""
    return bench_common.ratio(
        row["rates"],
        base["rates"],
        numerator_is=f"{row['engine']} decisions/s",
        denominator_is=f"{base['engine']} decisions/s",
        goal=goal,
        rounds_are="round-robin: every engine once per round, one after the other",
    )


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


def _mid_game_states(rules: Rules, batch: int, decisions: int = 41):
    """A batch of random-play states after `decisions` decisions (mid-game, any phase)."""
    games = jnp.arange(batch, dtype=jnp.int32)
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, SEED, games, 0)
    act = jax.vmap(engine.random_legal_action, in_axes=(None, 0, None, None, 0, None))
    advance = jax.jit(
        lambda s, d: jax.vmap(engine.step, in_axes=(None, 0, 0))(
            rules, s, act(rules, s, SEED, 0, games, d)
        )
    )
    for decision in range(decisions):
        states = advance(states, jnp.int32(decision))
    return states, games


def profile_jax_parts(rules: Rules, batch: int, repeats: int) -> dict:
    """ns per state of each part of a JAX decision, each jitted and timed alone.

    The parts overlap (the action computes its own mask) and each call carries a fixed
    dispatch cost (`dispatch`, an empty call), so they do not add up to a decision of the
    random-play loop; they say which part dominates.
    """
    states, games = _mid_game_states(rules, batch)
    act = jax.vmap(engine.random_legal_action, in_axes=(None, 0, None, None, 0, None))
    actions = jax.jit(lambda s: act(rules, s, SEED, 0, games, 41))(states)
    parts = {
        "mask": (lambda s: jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, s),),
        "encoding": (
            lambda s: jax.vmap(engine.observe, in_axes=(None, 0, 0))(rules, s, s.current_player),
        ),
        "action": (lambda s: act(rules, s, SEED, 0, games, 41),),
        "step": (lambda s, a: jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, s, a), actions),
        "dispatch": (lambda s: s.turn + 1,),
    }
    result = {}
    for name, (fn, *extra) in parts.items():
        fn = jax.jit(fn)
        jax.block_until_ready(fn(states, *extra))
        times = []
        for _ in range(20 * repeats):
            start = CLOCK()
            jax.block_until_ready(fn(states, *extra))
            times.append(CLOCK() - start)
        result[name] = 1e9 * statistics.median(times) / batch
    return result


def profile_xla_ops(rules: Rules, batch: int, top: int = 15, calls: int = 3) -> list[dict]:
    """The XLA operations of the random-play loop at `batch`, by ns per decision.

    Traces `calls` runs of the loop with jax.profiler and takes, per operation, the median
    event time times its number of events (the median discards the events that another
    process preempted on a shared machine), over the decisions played.
    """
    games = jnp.arange(batch, dtype=jnp.int32)
    play = jax.jit(lambda g: play_random_games(rules, SEED, 0, g))
    hlo = play.lower(games).compile().as_text()
    jax.block_until_ready(play(games))
    events, decisions = collections.defaultdict(list), 0
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(calls):
            decisions += int(play(games).decisions)
        jax.profiler.stop_trace()
        (path,) = glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True)
        data = jax.profiler.ProfileData.from_file(path)
    for plane in data.planes:
        for line in plane.lines:
            if "XLAEigen" not in line.name:  # the threads that run the compiled ops
                continue
            for event in line.events:
                if not event.name.startswith(("ThunkExecutor", "end: ")):
                    events[event.name].append(event.duration_ns)
    ops = []
    for name, times in events.items():
        line = re.search(r"%" + re.escape(name) + r" = (\S+) .*", hlo)
        source = re.search(r'op_name="([^"]*)"', line.group(0)) if line else None
        ops.append(
            {
                "op": name,
                "shape": line.group(1) if line else "",
                "source": source.group(1) if source else "",
                "ns_per_decision": statistics.median(times) * len(times) / decisions,
            }
        )
    ops.sort(key=lambda op: -op["ns_per_decision"])
    total = sum(op["ns_per_decision"] for op in ops)
    return [{"op": "all", "ns_per_decision": total, "count": len(ops)}] + ops[:top]


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
    parser.add_argument(
        "--goal", type=float, default=JAX_TO_CYTHON_GOAL, help="best JAX / Cython at least"
    )
    parser.add_argument("--json", help="write the figures to this path")
    parser.add_argument(
        "--clock", choices=("wall", "cpu"), default="wall", help="wall clock or process CPU time"
    )
    parser.add_argument("--profile", action="store_true", help="per-part and per-op breakdown")
    parser.add_argument("--profile-batch", type=int, default=1024, help="batch of the parts")
    args = parser.parse_args()
    global CLOCK
    CLOCK = time.process_time if args.clock == "cpu" else time.perf_counter

    rules = Rules()
    check_same_games(rules)
    timers = [CythonTimer(rules, args.cython_games)]
    for batch in (int(b) for b in args.batches.split(",")):
        min_games = args.min_games if batch > 1 else min(args.min_games, 64)
        timers.append(JaxTimer(rules, batch, min_games))
    results = round_robin(timers, args.repeats)
    cython = results[0]
    best = max(results[1:], key=lambda r: r["decisions_per_second"])
    # Breakdown: the same loops without the encoding, at the best JAX batch (a second
    # round-robin: Cython and JAX without the encoding).
    results += round_robin(
        [
            CythonTimer(rules, args.cython_games, with_encoding=False),
            JaxTimer(rules, best["batch"], args.min_games, with_encoding=False),
        ],
        args.repeats,
    )
    print(f"{'engine':<18}{'games':>8}{'decisions':>12}{'decisions/s':>14}{'vs cython':>11}")
    for r in results:
        # the noenc rows against Cython with the encoding too, as the table always had it
        # (their rounds are those of the second round-robin, paired by index)
        record = ratio_to(r, cython, args.goal if r is best else None)
        if r["engine"].endswith("_noenc"):
            record["rounds_are"] = "a later round-robin than Cython's: rounds paired by index"
        r["ratio_to_cython_record"] = record
        r["ratio_to_cython"] = record["value"]
        print(
            f"{r['engine']:<18}{r['games']:>8}{r['decisions']:>12}"
            f"{r['decisions_per_second']:>14,.0f}{r['ratio_to_cython']:>10.4f}x"
        )
    print(
        f"best JAX ({best['engine']}) / Cython: "
        + bench_common.describe(best["ratio_to_cython_record"])
    )
    for r in results:
        r["ns_per_decision"] = 1e9 / r["decisions_per_second"]
    by_name = {r["engine"]: r["ns_per_decision"] for r in results}
    for name, noenc in [("cython_1proc", "cython_1proc_noenc"), (best["engine"], None)]:
        noenc = noenc or f"{name}_noenc"
        share = 1 - by_name[noenc] / by_name[name]
        print(f"{name}: {by_name[name]:.0f} ns/decision, encoding share {share:.0%}")
    forward = bench_forward(rules, best["batch"], args.repeats)
    print(
        f"context: {forward['engine']} forward {forward['ns_per_state']:.0f} ns/state; "
        f"JAX engine decision = {by_name[best['engine']] / forward['ns_per_state']:.2f} forwards"
    )
    profile = None
    if args.profile:
        parts = profile_jax_parts(rules, args.profile_batch, args.repeats)
        cy_enc = by_name["cython_1proc"] - by_name["cython_1proc_noenc"]
        print(
            f"parts, ns per decision; JAX parts jitted alone at batch {args.profile_batch} "
            "(Cython's run inside one C loop: only the encoding can be split off):"
        )
        print(f"{'part':<12}{'jax':>10}{'cython':>10}")
        print(f"{'decision':<12}{by_name[best['engine']]:>10.0f}{by_name['cython_1proc']:>10.0f}")
        print(
            f"{'no encoding':<12}{by_name[best['engine'] + '_noenc']:>10.0f}"
            f"{by_name['cython_1proc_noenc']:>10.0f}"
        )
        for name, ns in parts.items():
            cython = f"{cy_enc:.0f}" if name == "encoding" else ""
            print(f"{name:<12}{ns:>10.0f}{cython:>10}")
        ops = profile_xla_ops(rules, best["batch"])
        print(
            f"XLA ops of the loop at batch {best['batch']}, ns per decision "
            f"(sum of all {ops[0]['count']} ops: {ops[0]['ns_per_decision']:.0f}):"
        )
        for op in ops[1:]:
            print(
                f"{op['ns_per_decision']:8.1f}  {op['op']:<34}{op['shape']:<26}{op['source'][-48:]}"
            )
        profile = {"jax_parts_ns_per_state": parts, "cython_encoding_ns": cy_enc, "xla_ops": ops}
    if args.json:
        summary = {
            "schema": 2,
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "jax": jax.__version__,
            "backend": jax.default_backend(),
            "clock": args.clock,
            "results": results,
            "best_jax_to_cython": best["ratio_to_cython"],
            "best_jax_to_cython_record": best["ratio_to_cython_record"],
            "goal_best_jax_to_cython": args.goal,
            "forward": forward,
            "profile": profile,
        }
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=2)


if __name__ == "__main__":
    main()
