"""Evaluation throughput against every bot, side by side with its forward-only limit.

The agent is a network of the predecessor's size (512x3 ReLU, the `wide` preset's,
random initialisation) on the default rules, playing one policy view (`average_strategy`
greedy unless told otherwise) against each bot in `lc_cfr.eval.play`'s lockstep loop.
For each bot the script reports games per second in steady state (the compiled loop's
second call; the first call's compile time is reported apart) and the forward-only limit
of the same workload: one bare `mlp.apply` on a [H, E] batch (H = the loop's agent rows
per step) run back to back in a jitted `lax.fori_loop` as many times as it takes to
cover the agent decisions those games needed, no engine, no bot, no policy head.
Each of `--repeats` rounds times the evaluation, then the limit, then the bot, back to
back. games/s and limit are the medians over the rounds (the lower median for an even
count), ratio = games/s / limit exactly (the table's own columns), stored with the
per-round ratios and their spread (scripts/bench_common.py), and judged unrounded
against `--goal` (0.75 of the limit against every bot) and `--goal-games-per-second`
(1000). `bot us` is the bot's own decision timed alone: its vmapped `bot_action` on a
[H] batch of states from random play (both phases, all stages of the game), per state.

    .venv/bin/python scripts/bench_eval.py [--games 1024] [--lanes 512] [--json out.json]

JSON schema 2 (since issue 21): per opponent `ratio_to_limit` (a bench_common ratio
record) and `games_per_second_goal`; `ratio` is its value. Schema 1 files (no `schema`
field) held `ratio` as the median of the per-round ratios and those in `ratios`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from lc_cfr import compile_cache
from lc_cfr import eval as lc_eval
from lc_cfr.bots import BOT_NAMES, jax_bots
from lc_cfr.game import random_play
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402

# Goals of issue 13 (docs/performance.md): 0.75 of the forward-only limit against every
# bot, and about 1000 games/s (set against safe_heuristic; judged for every bot here).
RATIO_GOAL = 0.75
GAMES_PER_SECOND_GOAL = 1000.0


class ForwardLimit:
    """`count` back-to-back forwards of a [batch, E] input in one jitted fori_loop."""

    def __init__(self, spec: mlp.NetworkSpec, params, batch: int, count: int):
        self.params = params
        self.x = jax.random.uniform(jax.random.PRNGKey(7), (batch, spec.input_size), jnp.float32)

        def run(p, x):
            def step(_, carry):
                x, total = carry
                # the next input depends on the carry, so XLA cannot hoist the forward out
                # of the loop; the output feeds `total`, so it cannot drop it
                return jnp.roll(x, 1, axis=0), total + mlp.apply(spec, p, x)[:, 0]

            zero = jnp.zeros((batch,), jnp.float32)
            return jax.lax.fori_loop(0, count, step, (x, zero))[1]

        self.run = jax.jit(run)
        jax.block_until_ready(self.run(params, self.x))  # compile outside the timings

    def seconds(self) -> float:
        start = time.perf_counter()
        jax.block_until_ready(self.run(self.params, self.x))
        return time.perf_counter() - start


class BotAlone:
    """`repeats` calls of the vmapped bot on a fixed [batch] of recorded states."""

    def __init__(self, rules: Rules, name: str, batch: int, repeats: int = 20):
        trajectory = random_play.record_random_games(rules, 0, 0, jnp.arange(8))
        live = ~trajectory.states.terminal.reshape(-1)
        states = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:])[live], trajectory.states)
        take = jnp.arange(batch) % states.deck.shape[0]
        self.states = jax.tree.map(lambda x: x[take], states)
        self.batch, self.repeats = batch, repeats
        games = jnp.arange(batch, dtype=jnp.int32)

        def run(states):
            def step(i, total):
                actions = jax_bots.batch_bot_action(rules, name, states, 0, i, games, games)
                return total + jnp.sum(actions)

            return jax.lax.fori_loop(0, repeats, step, jnp.int32(0))

        self.run = jax.jit(run)
        jax.block_until_ready(self.run(self.states))

    def us_per_state(self) -> float:
        start = time.perf_counter()
        jax.block_until_ready(self.run(self.states))
        return 1e6 * (time.perf_counter() - start) / (self.repeats * self.batch)


def bench_opponent(rules, spec, agent, params, opponent, args) -> dict:
    def play():
        return lc_eval.play(
            rules, spec, agent, opponent, params, games=args.games, seed=args.seed, lanes=args.lanes
        )

    first = play()
    metrics = lc_eval.summarize(first.records)
    agent_decisions = int(metrics["agent_decisions"])
    forwards = math.ceil(agent_decisions / first.half_lanes)
    # one network per forward: `current` runs the mover's advantage network each step
    one_network = params[0] if isinstance(params, tuple) else params
    limit = ForwardLimit(spec, one_network, first.half_lanes, forwards)
    bot = BotAlone(rules, opponent, first.half_lanes)
    # evaluation, limit and bot timed alternately, so that all see the same machine load
    evals, limits, bot_us = [], [], []
    for _ in range(args.repeats):
        evals.append(play().run_seconds)
        limits.append(limit.seconds())
        bot_us.append(bot.us_per_state())
    ratio = bench_common.ratio(
        [args.games / s for s in evals],
        [args.games / s for s in limits],
        numerator_is="games/s",
        denominator_is="forward-only limit games/s",
        goal=args.goal,
        rounds_are="each round: the evaluation, then the limit, back to back",
    )
    rate, limit_rate = ratio["numerator"], ratio["denominator"]
    return {
        "opponent": opponent,
        "games": args.games,
        "half_lanes": first.half_lanes,
        "steps": first.steps,
        "agent_decisions": agent_decisions,
        "agent_decisions_per_game": agent_decisions / args.games,
        "length_mean": metrics["length_mean"],
        "truncation_rate": metrics["truncation_rate"],
        "forward_rows_used": agent_decisions / first.rows,
        "first_call_seconds": first.compile_seconds + first.run_seconds,
        "compile_seconds": first.compile_seconds,
        "seconds": evals,
        "forward_only_seconds_per_round": limits,
        "steady_seconds": args.games / rate,
        "games_per_second": rate,
        "forward_only_seconds": args.games / limit_rate,
        "forward_us_per_state": 1e6 * (args.games / limit_rate) / (forwards * first.half_lanes),
        "bot_us_per_state": bench_common.median_of(bot_us),
        "limit_games_per_second": limit_rate,
        "ratio": ratio["value"],
        "ratio_to_limit": ratio,
        "games_per_second_goal": bench_common.goal_record(rate, args.goal_games_per_second),
        "win_rate": metrics["win_rate"],
        "margin_mean": metrics["margin_mean"],
    }


def print_table(rows: list[dict]) -> None:
    header = (
        f"{'opponent':<22} {'games/s':>9} {'limit':>9} {'ratio':>7} {'agent dec/game':>14} "
        f"{'rows used':>9} {'fwd us':>7} {'bot us':>7} {'compile s':>9} {'length':>7} {'trunc':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{r['opponent']:<22} {r['games_per_second']:>9.1f} "
            f"{r['limit_games_per_second']:>9.1f} {r['ratio']:>7.4f} "
            f"{r['agent_decisions_per_game']:>14.1f} {r['forward_rows_used']:>9.2f} "
            f"{r['forward_us_per_state']:>7.2f} {r['bot_us_per_state']:>7.3f} "
            f"{r['compile_seconds']:>9.1f} "
            f"{r['length_mean']:>7.1f} {r['truncation_rate']:>6.2f}"
        )
    print("games/s, limit: medians over the rounds; ratio = games/s / limit")
    for r in rows:
        games_goal = r["games_per_second_goal"]
        verdict = "met" if games_goal["goal_met"] else "NOT met"
        print(
            f"{r['opponent']}: "
            + bench_common.describe(r["ratio_to_limit"])
            + f"; games/s {r['games_per_second']:.1f} against {games_goal['goal']:g}: {verdict}"
        )
    ratio_met = all(r["ratio_to_limit"]["goal_met"] for r in rows)
    print(f"ratio goal against every bot: {'met' if ratio_met else 'NOT met'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--games", type=int, default=1024, help="games per bot (even)")
    parser.add_argument("--lanes", type=int, default=lc_eval.DEFAULT_LANES)
    parser.add_argument("--opponents", default=",".join(BOT_NAMES))
    parser.add_argument("--view", default="average_strategy", choices=lc_eval.VIEWS)
    parser.add_argument("--mode", default="greedy", choices=lc_eval.MODES)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="steady-state timings (median)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--goal", type=float, default=RATIO_GOAL, help="ratio at least")
    parser.add_argument(
        "--goal-games-per-second", type=float, default=GAMES_PER_SECOND_GOAL, help="at least"
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()

    compile_cache.enable(compile_cache.directory(default=None))
    rules = Rules()
    spec = mlp.NetworkSpec(rules.encoding_size, rules.num_actions, args.hidden, args.layers)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    if args.view == "average_strategy":
        params = mlp.init_params(spec, keys[0])
    else:
        params = (mlp.init_params(spec, keys[1]), mlp.init_params(spec, keys[2]))
    agent = lc_eval.network_agent(args.view, args.mode)
    rows = []
    for opponent in args.opponents.split(","):
        rows.append(bench_opponent(rules, spec, agent, params, opponent, args))
        print(
            f"{opponent}: {rows[-1]['games_per_second']:.1f} games/s, "
            f"ratio {rows[-1]['ratio']:.4f}",
            flush=True,
        )
    print_table(rows)
    if args.json:
        document = {
            "schema": 2,
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor(),
                "cpus": os.cpu_count(),
                "devices": [str(d) for d in jax.devices()],
                "jax": jax.__version__,
            },
            "settings": {
                k: getattr(args, k)
                for k in ("games", "lanes", "view", "mode", "hidden", "layers", "seed", "repeats")
            },
            "goals": {"ratio": args.goal, "games_per_second": args.goal_games_per_second},
            "ratio_goal_met_against_every_bot": all(r["ratio_to_limit"]["goal_met"] for r in rows),
            "results": rows,
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
