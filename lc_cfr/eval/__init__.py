"""Evaluation: policy views and bots against bots, every deal mirrored, in lockstep.

`evaluate` (the trainer's entry point) and `evaluate_bots` return flat
`eval/<view>/<opponent>/<metric>` dicts; `games.play` gives the per-game records.
`sequential` plays pairs with a player that cannot run in lockstep (OpenSpiel's search
bots) one game at a time, with the same deals and metrics.
The game, randomness and lockstep layout are documented in `lc_cfr.eval.games`, the
metrics in `lc_cfr.eval.metrics`.
"""

from lc_cfr.eval.api import (
    POLICY_VIEWS,
    SD_CFR,
    SEARCH,
    Snapshots,
    evaluate,
    evaluate_bots,
    evaluate_search,
    metric_key,
)
from lc_cfr.eval.games import (
    DEFAULT_LANES,
    DRAWS,
    MODES,
    VIEWS,
    Agent,
    GameRecords,
    PlayResult,
    bot_agent,
    network_agent,
    play,
    trace_count,
)
from lc_cfr.eval.metrics import METRICS, TIMING_METRICS, summarize

__all__ = [
    "DEFAULT_LANES",
    "DRAWS",
    "METRICS",
    "MODES",
    "TIMING_METRICS",
    "VIEWS",
    "Agent",
    "GameRecords",
    "POLICY_VIEWS",
    "PlayResult",
    "SD_CFR",
    "SEARCH",
    "Snapshots",
    "bot_agent",
    "evaluate",
    "evaluate_bots",
    "evaluate_search",
    "metric_key",
    "network_agent",
    "play",
    "summarize",
    "trace_count",
]
