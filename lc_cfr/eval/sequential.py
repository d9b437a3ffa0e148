"""Evaluation with players that cannot run in lockstep: one game at a time.

OpenSpiel's search bots (`lc_cfr.spiel.bots`) choose one action at a time outside JAX,
so a pair with one of them is played by a sequential mirrored loop on the same deals
(`rng.deal_order(N, seed, g)`) and the same seats as `lc_cfr.eval.games`, and reported
with the same metrics (`metrics.summarize` of the joined records) under the same
`eval/<view or agent>/<opponent>/<metric>` keys; every other pair still runs in lockstep
(`api.evaluate`, `api.evaluate_bots`). The sd_cfr view plays the blocks of
`api.sd_cfr_blocks`, as the lockstep path does.

`eval` and `spiel` are sibling layers (docs/architecture.md): this module takes the loop
as an argument (`SequentialLoop`, which the module `lc_cfr.spiel.bots` is) rather than
importing it; `lc_cfr.evaluate` passes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from lc_cfr.eval import api
from lc_cfr.eval.metrics import summarize
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp


class SequentialLoop(Protocol):
    """What the sequential path needs of a mirrored one-game-at-a-time loop (the module
    `lc_cfr.spiel.bots` has each of these)."""

    OPENSPIEL_BOTS: Sequence[str]  # the bot names only this loop can play

    def bot_player(self, name: str, *, seed: int, simulations: int) -> Any:
        """A new player for a bot name (one per seat)."""

    def NetworkPlayer(  # the class of lc_cfr.spiel.bots
        self, spec: mlp.NetworkSpec, params, *, view, mode, fallback, seed, name=None, draws
    ) -> Any:
        """A player of a policy view (`average_strategy` or `current`) of networks, its
        pile draws restricted by `draws` (lc_cfr.traversal.policy.DRAWS)."""

    def SearchPlayer(  # the class of lc_cfr.spiel.bots
        self, rules: Rules, options, *, blueprint, spec, params, fallback, seed, draws
    ) -> Any:
        """A player that searches over a policy view or an lc_cfr bot (`lc_cfr.search`)."""

    def play_mirrored(self, rules: Rules, agent, opponent, *, deals, seed: int) -> Any:
        """Every deal twice, seats swapped; `.records` {GameRecords field: [2, D] array}."""


def is_sequential(loop: SequentialLoop, *names: str) -> bool:
    """Whether a pair with these players is played by the sequential loop."""
    return any(name in loop.OPENSPIEL_BOTS for name in names)


def play_blocks(
    loop: SequentialLoop,
    rules: Rules,
    blocks: Iterable[tuple[Any, int | range]],
    name: str,
    opponent: str,
    *,
    seed: int,
    simulations: int,
) -> dict[str, float]:
    """`eval/<name>/<opponent>/<metric>` of (player, deals) blocks played against bot
    `opponent` by the sequential loop, their records joined (one block, or one per SD-CFR
    snapshot); the metrics of `lc_cfr.eval`, the timings all run time (nothing is
    compiled)."""
    start = time.perf_counter()
    results = [
        loop.play_mirrored(
            rules,
            player,
            loop.bot_player(opponent, seed=seed, simulations=simulations),
            deals=deals,
            seed=seed,
        )
        for player, deals in blocks
    ]
    metrics = summarize(api.join_records([r.records for r in results]))
    seconds = time.perf_counter() - start
    metrics.update(
        seconds=seconds,
        compile_seconds=0.0,
        run_seconds=seconds,
        games_per_second=metrics["games"] / max(seconds, 1e-9),
    )
    return {api.metric_key(name, opponent, metric): value for metric, value in metrics.items()}


def view_blocks(
    loop: SequentialLoop,
    spec: mlp.NetworkSpec,
    view: str,
    params,
    *,
    deals: int,
    mode: str,
    fallback: str,
    seed: int,
    draws: str = "any",
) -> list[tuple[Any, int | range]]:
    """The (player, deals) blocks of one policy view: one block of `deals` deals, or for
    sd_cfr one per block of `api.sd_cfr_blocks`, played by that snapshot's RM policy."""
    if view != api.SD_CFR:
        player = loop.NetworkPlayer(
            spec, params, view=view, mode=mode, fallback=fallback, seed=seed, draws=draws
        )
        return [(player, deals)]
    return [
        (
            loop.NetworkPlayer(
                spec,
                block.params,
                view="current",
                mode=mode,
                fallback=fallback,
                seed=seed,
                name=api.SD_CFR,
                draws=draws,
            ),
            block.deal_range,
        )
        for block in api.sd_cfr_blocks(params, deals, seed)
    ]


def evaluate(
    loop: SequentialLoop,
    rules: Rules,
    spec: mlp.NetworkSpec,
    params_views: Mapping[str, Any],
    *,
    opponents: Sequence[str],
    games: int,
    mode: str = "greedy",
    seed: int = 0,
    fallback: str = "argmax_tiebreak",
    lanes: int | None = None,
    simulations: int,
    draws: str = "any",
    rivals: api.Rivals | None = None,
) -> dict[str, float]:
    """`api.evaluate` (one `mode` for every view) against opponents that may include the
    loop's bots: the lc_cfr bots and the `rivals` (head to head) in lockstep, the loop's
    one game at a time; both apply the views' `draws` restriction."""
    lockstep = [o for o in opponents if not is_sequential(loop, o)]
    metrics: dict[str, float] = {}
    if lockstep:
        metrics = api.evaluate(
            rules,
            spec,
            params_views,
            opponents=lockstep,
            games=games,
            view_modes=mode,
            seed=seed,
            fallback=fallback,
            lanes=lanes,
            draws=draws,
            rivals=rivals,
        )
    for opponent in opponents:
        if opponent in lockstep:
            continue
        for view, params in params_views.items():
            blocks = view_blocks(
                loop,
                spec,
                view,
                params,
                deals=games // 2,
                mode=mode,
                fallback=fallback,
                seed=seed,
                draws=draws,
            )
            metrics.update(
                play_blocks(loop, rules, blocks, view, opponent, seed=seed, simulations=simulations)
            )
    return metrics


def evaluate_bots(
    loop: SequentialLoop,
    rules: Rules,
    *,
    agent: str,
    opponents: Sequence[str],
    games: int,
    seed: int = 0,
    lanes: int | None = None,
    simulations: int,
) -> dict[str, float]:
    """`api.evaluate_bots` for an agent and opponents that may be the loop's bots: lc_cfr
    pairs in lockstep, pairs with one of the loop's bots one game at a time."""
    lockstep = [o for o in opponents if not is_sequential(loop, agent, o)]
    metrics: dict[str, float] = {}
    if lockstep:
        metrics.update(
            api.evaluate_bots(
                rules, agent=agent, opponents=lockstep, games=games, seed=seed, lanes=lanes
            )
        )
    for opponent in opponents:
        if opponent in lockstep:
            continue
        player = loop.bot_player(agent, seed=seed, simulations=simulations)
        metrics.update(
            play_blocks(
                loop,
                rules,
                [(player, games // 2)],
                agent,
                opponent,
                seed=seed,
                simulations=simulations,
            )
        )
    return metrics


def evaluate_search(
    loop: SequentialLoop,
    rules: Rules,
    spec: mlp.NetworkSpec | None,
    blueprint: str,
    params,
    options,
    *,
    opponents: Sequence[str],
    games: int,
    seed: int = 0,
    fallback: str = "argmax_tiebreak",
    lanes: int | None = None,
    simulations: int,
    draws: str = "any",
    rivals: api.Rivals | None = None,
) -> dict[str, float]:
    """`api.evaluate_search` against opponents that may include the loop's bots: lc_cfr's
    bots in lockstep, the loop's one game at a time by the loop's search player."""
    lockstep = [o for o in opponents if not is_sequential(loop, o)]
    metrics: dict[str, float] = {}
    if lockstep:
        metrics = api.evaluate_search(
            rules,
            spec,
            blueprint,
            params,
            options,
            opponents=lockstep,
            games=games,
            seed=seed,
            fallback=fallback,
            lanes=lanes,
            draws=draws,
            rivals=rivals,
        )
    for opponent in opponents:
        if opponent in lockstep:
            continue

        def searcher(view, view_params):
            return loop.SearchPlayer(
                rules,
                options,
                blueprint=view,
                spec=spec,
                params=view_params,
                fallback=fallback,
                seed=seed,
                draws=draws,
            )

        if blueprint == api.SD_CFR:  # each block searches over its snapshot's policy
            blocks = [
                (searcher("current", block.params), block.deal_range)
                for block in api.sd_cfr_blocks(params, games // 2, seed)
            ]
        else:
            blocks = [(searcher(blueprint, params), games // 2)]
        metrics.update(
            play_blocks(
                loop,
                rules,
                blocks,
                api.SEARCH,
                opponent,
                seed=seed,
                simulations=simulations,
            )
        )
    return metrics
