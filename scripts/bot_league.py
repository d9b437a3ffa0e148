"""Plays pairs of bots on mirrored deals with the JAX bots vmapped in lockstep.

Each deal g in [0, deals) (dealt by `engine.init(rules, seed, g, iteration=0)`) is played
twice: bot A as player 0, then bot A as player 1. The bots' randomness is keyed by
(seed, iteration = A's seat, game index = g, decision = the game's decision index), so the
two games of a deal draw different noise. All games of a pair advance together in one
jitted `lax.while_loop` until every game is over.

For each pair A:B it prints A's win rate (ties apart), the mean margin score_A - score_B
with its standard error (over deals: the two mirrored games of a deal are averaged
first), both mean scores, the truncation rate and the mean number of turns.

    .venv/bin/python scripts/bot_league.py --deals 2000 --json league.json
    .venv/bin/python scripts/bot_league.py --pairs safe_heuristic:random noisy_safe:random
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from lc_cfr.bots import BOT_NAMES, check_bot_name  # noqa: E402
from lc_cfr.bots.jax_bots import bot_action  # noqa: E402
from lc_cfr.eval.metrics import per_deal_stderr  # noqa: E402
from lc_cfr.game import engine, rng  # noqa: E402
from lc_cfr.game.rules import Rules  # noqa: E402

DEFAULT_PAIRS = (
    "safe_heuristic:random",
    "safe_heuristic:passive_discard",
    "safe_heuristic:safe_heuristic_loose",
    "safe_heuristic:safe_heuristic_strict",
    "safe_heuristic:noisy_safe",
    "safe_heuristic:safe_heuristic",
    "safe_heuristic_loose:random",
    "safe_heuristic_strict:random",
    "noisy_safe:random",
    "passive_discard:random",
    "random:random",
)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _play(rules: Rules, bot_a: str, bot_b: str, seed, deals):
    """Plays deals [D] twice (A as player 0, then as player 1); returns final states [2D]."""
    deal_index = jnp.concatenate([deals, deals])
    a_seat = jnp.concatenate([jnp.zeros_like(deals), jnp.ones_like(deals)]).astype(jnp.int32)
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, seed, deal_index, 0)
    act = jax.vmap(bot_action, in_axes=(None, None, 0, None, 0, 0, None))

    def not_done(carry):
        return ~jnp.all(carry[0].terminal)

    def one_decision(carry):
        states, decision = carry
        action_a = act(rules, bot_a, states, seed, a_seat, deal_index, decision)
        if bot_b == bot_a:
            action_b = action_a
        else:
            action_b = act(rules, bot_b, states, seed, a_seat, deal_index, decision)
        actions = jnp.where(states.current_player == a_seat, action_a, action_b)
        states = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, actions)
        return states, decision + 1

    states, _ = jax.lax.while_loop(not_done, one_decision, (states, jnp.int32(0)))
    return states, a_seat


def play_pair(rules: Rules, bot_a: str, bot_b: str, seed: int, deals: int) -> dict:
    """Plays A against B on `deals` mirrored deals; returns the statistics as a dict."""
    check_bot_name(bot_a, "bot A")
    check_bot_name(bot_b, "bot B")
    start = time.perf_counter()
    states, a_seat = _play(
        rules, bot_a, bot_b, rng.as_word(seed), jnp.arange(deals, dtype=jnp.int32)
    )
    scores = np.asarray(states.scores)
    a_seat = np.asarray(a_seat)
    illegal = int(np.sum(np.asarray(states.illegal_player) >= 0))
    rows = np.arange(2 * deals)
    score_a = scores[rows, a_seat].astype(np.float64)
    score_b = scores[rows, 1 - a_seat].astype(np.float64)
    margin = score_a - score_b
    per_deal = 0.5 * (margin[:deals] + margin[deals:])
    se = per_deal_stderr(per_deal)
    return {
        "bot_a": bot_a,
        "bot_b": bot_b,
        "deals": deals,
        "games": 2 * deals,
        "win_rate": float(np.mean(margin > 0)),
        "tie_rate": float(np.mean(margin == 0)),
        "loss_rate": float(np.mean(margin < 0)),
        "mean_margin": float(np.mean(margin)),
        "margin_se": se,
        "mean_score_a": float(np.mean(score_a)),
        "mean_score_b": float(np.mean(score_b)),
        "truncation_rate": float(np.mean(np.asarray(states.truncated))),
        "mean_turns": float(np.mean(np.asarray(states.turn))),
        "illegal_games": illegal,
        "seconds": time.perf_counter() - start,
    }


def format_table(results: list[dict]) -> str:
    head = (
        "| A | B | A wins | ties | margin A-B (± s.e.) | score A | score B | truncated | turns |\n"
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    lines = [head]
    for r in results:
        lines.append(
            f"| `{r['bot_a']}` | `{r['bot_b']}` | {100 * r['win_rate']:.2f}% "
            f"| {100 * r['tie_rate']:.2f}% | {r['mean_margin']:+.2f} ± {r['margin_se']:.2f} "
            f"| {r['mean_score_a']:.2f} | {r['mean_score_b']:.2f} "
            f"| {100 * r['truncation_rate']:.2f}% | {r['mean_turns']:.1f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deals", type=int, default=2000, help="mirrored deals per pair")
    parser.add_argument("--seed", type=int, default=0, help="seed of the deals and the noise")
    parser.add_argument(
        "--pairs",
        nargs="+",
        default=list(DEFAULT_PAIRS),
        help=f"A:B bot pairs; bots: {', '.join(BOT_NAMES)}",
    )
    parser.add_argument(
        "--rules", default="{}", help="JSON object of Rules fields, e.g. '{\"max_turns\": 200}'"
    )
    parser.add_argument("--json", type=pathlib.Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.deals < 1:
        parser.error("--deals must be >= 1")
    rules = Rules.from_mapping(json.loads(args.rules))
    pairs = []
    for text in args.pairs:
        if text.count(":") != 1:
            parser.error(f"--pairs entries look like A:B, got {text!r}")
        bot_a, bot_b = text.split(":")
        try:
            check_bot_name(bot_a, "--pairs bot A")
            check_bot_name(bot_b, "--pairs bot B")
        except ValueError as error:
            parser.error(str(error))
        pairs.append((bot_a, bot_b))

    results = []
    for bot_a, bot_b in pairs:
        result = play_pair(rules, bot_a, bot_b, args.seed, args.deals)
        results.append(result)
        print(
            f"{bot_a} vs {bot_b}: win {100 * result['win_rate']:.2f}%, margin "
            f"{result['mean_margin']:+.2f} ± {result['margin_se']:.2f}, scores "
            f"{result['mean_score_a']:.2f} / {result['mean_score_b']:.2f}, truncated "
            f"{100 * result['truncation_rate']:.2f}% ({result['seconds']:.1f}s)",
            flush=True,
        )
    print()
    print(format_table(results))
    if args.json:
        payload = {
            "rules": rules.to_dict(),
            "seed": args.seed,
            "deals": args.deals,
            "command": " ".join(["scripts/bot_league.py"] + (argv or sys.argv[1:])),
            "results": results,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
