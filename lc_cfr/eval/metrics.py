"""Evaluation metrics from per-game records (plain numpy, host side).

Every metric is a float, reported as `eval/<view>/<opponent>/<metric>`:

- `games`: games played (2 per deal).
- `win_rate`: (wins + ties / 2) / games; a tie counts half a win.
- `margin_mean`: mean over games of the agent's score minus the opponent's.
- `margin_stderr`: its standard error over deals. The mean margin of a deal's two
  mirrored games is one observation: stderr = std(ddof=1) / sqrt(deals); NaN for 1 deal.
- `score_mean`, `opponent_score_mean`: mean scores of the agent and the opponent.
- `length_mean`: decisions per game, both players counted.
- `truncation_rate`: fraction of games cut at `max_turns`.
- `illegal_rate`: fraction of games ended by an illegal action (0 for these players).
- `play_rate`, `discard_rate`: fractions of the agent's CARD decisions that played /
  discarded a card.
- `draw_deck_rate`, `draw_pile_rate`: fractions of the agent's DRAW decisions from the
  deck / from a discard pile.
- `expeditions_opened`: the agent's expeditions holding at least one card, per game.
- `score_per_expedition`: the agent's total score over its opened expeditions (an
  unopened expedition scores 0).
- `negative_expedition_rate`: fraction of the agent's opened expeditions scoring < 0.
- `bonus_expedition_rate`: fraction of the agent's opened expeditions earning the bonus.
- `agent_decisions`: decisions the agent took, over all games.

Rates over the agent's decisions or expeditions are pooled over all games; a rate with
nothing to count (no opened expedition, say) is 0. `evaluate` adds the timings
(`seconds`, `compile_seconds`, `run_seconds`, `games_per_second`) and the lockstep
utilisation (`lane_utilisation`: decisions taken / (steps x lanes)).
"""

from __future__ import annotations

import math

import numpy as np

from lc_cfr.eval.games import GameRecords

METRICS = (
    "games",
    "win_rate",
    "margin_mean",
    "margin_stderr",
    "score_mean",
    "opponent_score_mean",
    "length_mean",
    "truncation_rate",
    "illegal_rate",
    "play_rate",
    "discard_rate",
    "draw_deck_rate",
    "draw_pile_rate",
    "expeditions_opened",
    "score_per_expedition",
    "negative_expedition_rate",
    "bonus_expedition_rate",
    "agent_decisions",
)
TIMING_METRICS = ("seconds", "compile_seconds", "run_seconds", "games_per_second")


def _ratio(num, den) -> float:
    return float(num) / float(den) if den else 0.0


def per_deal_stderr(per_deal) -> float:
    """Standard error of the mean of [D] per-deal values (a deal's mirrored games are one
    observation): std(ddof=1) / sqrt(D); NaN for a single deal."""
    deals = len(per_deal)
    return float(np.std(per_deal, ddof=1) / math.sqrt(deals)) if deals > 1 else math.nan


def summarize(records: GameRecords) -> dict[str, float]:
    """The METRICS of one (agent, opponent) evaluation, from its [2, D] records."""
    r = {name: np.asarray(value, np.int64) for name, value in records._asdict().items()}
    margin = r["margin"]
    games = margin.size
    stderr = per_deal_stderr(margin.mean(axis=0))
    card = r["plays"].sum() + r["discards"].sum()
    draw = r["deck_draws"].sum() + r["pile_draws"].sum()
    opened = r["opened"].sum()
    return {
        "games": float(games),
        "win_rate": float(np.sum(margin > 0) + 0.5 * np.sum(margin == 0)) / games,
        "margin_mean": float(margin.mean()),
        "margin_stderr": stderr,
        "score_mean": float(r["agent_score"].mean()),
        "opponent_score_mean": float(r["opponent_score"].mean()),
        "length_mean": float(r["decisions"].mean()),
        "truncation_rate": float(r["truncated"].mean()),
        "illegal_rate": float(r["illegal"].mean()),
        "play_rate": _ratio(r["plays"].sum(), card),
        "discard_rate": _ratio(r["discards"].sum(), card),
        "draw_deck_rate": _ratio(r["deck_draws"].sum(), draw),
        "draw_pile_rate": _ratio(r["pile_draws"].sum(), draw),
        "expeditions_opened": float(r["opened"].mean()),
        "score_per_expedition": _ratio(r["agent_score"].sum(), opened),
        "negative_expedition_rate": _ratio(r["negative"].sum(), opened),
        "bonus_expedition_rate": _ratio(r["bonus"].sum(), opened),
        "agent_decisions": float(card + draw),
    }
