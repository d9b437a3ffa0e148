"""Yardstick: how often does a trained policy stall against each bot, and what does it
gain or lose by it? (issue 23 item 3, docs/experiments.md)

Drawing from a discard pile leaves the deck as it was, so a game whose players keep
doing it runs to `rules.max_turns` (docs/game.md). This script plays a checkpoint's
policy views against bots, every deal mirrored, three times on the same deals: as
trained (`draws=any`), with the view's pile draws masked out (`draws=deck`,
lc_cfr.eval.games: the policy renormalised over the draws kept) and with only the pile
draws of a card it can play at once kept (`draws=playable`). It prints, per view and bot,
the share of the agent's draws taken from a pile, the decisions per game, the share of
games cut at the cap, the margins, and the paired differences (per deal, same deals and
seats) with their standard errors: what the pile draws are worth to the agent, and what
those of cards it cannot play are. A positive difference means the draws earn points; a
negative one, that the agent would score more without them.

    .venv/bin/python scripts/stalling.py --workdir RUN [--checkpoint N]
        [--views average_strategy,current] [--opponents random,passive_discard,...]
        [--games 2000] [--json out.json]

Greedy play on the run's evaluation seed, as `lc_cfr.evaluate` plays it.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lc_cfr.bots import BOT_NAMES  # noqa: E402
from lc_cfr.eval import games as eval_games  # noqa: E402
from lc_cfr.eval.api import parse_names  # noqa: E402
from lc_cfr.eval.metrics import per_deal_stderr, summarize  # noqa: E402
from lc_cfr.train.saved_networks import load_saved_networks  # noqa: E402


def _per_deal(records: eval_games.GameRecords) -> np.ndarray:
    """[D] the mean margin of each deal's two mirrored games."""
    return np.asarray(records.margin, np.float64).mean(axis=0)


# this script's names for the evaluation metrics it prints (lc_cfr.eval.metrics)
PLAY_STATS = {
    "margin": "margin_mean",
    "margin_stderr": "margin_stderr",
    "agent_score": "score_mean",
    "pile_draw_share": "draw_pile_rate",
    "decisions": "length_mean",
    "truncated": "truncation_rate",
    "opened": "expeditions_opened",
}


def _play_stats(records: eval_games.GameRecords) -> dict:
    metrics = summarize(records)
    return {name: metrics[metric] for name, metric in PLAY_STATS.items()}


def compare(saved, view: str, opponent: str, games: int, seed: int, fallback: str) -> dict:
    """The view against `opponent` as trained and with pile draws masked, same deals."""
    params = saved.policy_views()[view]
    records = {
        draws: eval_games.play(
            saved.rules,
            saved.spec,
            eval_games.network_agent(view, "greedy", fallback, draws),
            opponent,
            params,
            games=games,
            seed=seed,
        ).records
        for draws in eval_games.DRAWS
    }
    gain = _per_deal(records["any"]) - _per_deal(records["deck"])
    unplayable = _per_deal(records["any"]) - _per_deal(records["playable"])
    return {
        "view": view,
        "opponent": opponent,
        **{draws: _play_stats(r) for draws, r in records.items()},
        "pile_draw_gain": float(gain.mean()),
        "pile_draw_gain_stderr": per_deal_stderr(gain),
        "unplayable_pile_draw_gain": float(unplayable.mean()),
        "unplayable_pile_draw_gain_stderr": per_deal_stderr(unplayable),
    }


def print_row(row: dict) -> None:
    played, deck, playable = row["any"], row["deck"], row["playable"]
    print(
        f"  {row['opponent']:<22} pile draws {played['pile_draw_share']:5.1%}, "
        f"{played['decisions']:5.1f} decisions, truncated {played['truncated']:5.1%}, "
        f"margin {played['margin']:+7.2f} (deck only {deck['margin']:+7.2f}, "
        f"{deck['decisions']:5.1f} decisions; playable piles {playable['margin']:+7.2f}, "
        f"{playable['pile_draw_share']:5.1%} pile draws); pile draws gain "
        f"{row['pile_draw_gain']:+.2f} +- {row['pile_draw_gain_stderr']:.2f}, "
        f"unplayable ones {row['unplayable_pile_draw_gain']:+.2f} +- "
        f"{row['unplayable_pile_draw_gain_stderr']:.2f}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, help="the run directory")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--views", default="average_strategy,current")
    parser.add_argument("--opponents", default=",".join(BOT_NAMES))
    parser.add_argument("--games", type=int, default=2000, help="per view and bot (even)")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    if args.games < 2 or args.games % 2:
        parser.error(f"--games must be even and >= 2 (mirrored deals), got {args.games}")
    try:
        views = parse_names(args.views, "--views", eval_games.VIEWS)
        opponents = parse_names(args.opponents, "--opponents", BOT_NAMES)
        saved = load_saved_networks(args.workdir, args.checkpoint)
    except (OSError, ValueError) as error:
        parser.error(str(error))
    if saved.strategy_note():
        print(f"note: {saved.strategy_note()}", file=sys.stderr)
    config = saved.config
    fallback = config.regret_matching.all_negative_fallback
    rows = []
    print(f"{args.workdir} checkpoint {saved.iteration}, {args.games} games each", flush=True)
    for view in views:
        print(f"{view}:", flush=True)
        for opponent in opponents:
            rows.append(
                compare(saved, view, opponent, args.games, config.evaluation.seed, fallback)
            )
            print_row(rows[-1])
    if args.json:
        out = {"workdir": args.workdir, "checkpoint": saved.iteration, "rows": rows}
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
