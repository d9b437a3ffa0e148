"""The evaluation entry points: policy views against bots, and bot against bot.

Both take explicit arguments (no config). The trainer calls `evaluate` every
`eval_every` iterations with new parameters of the same shapes: the compiled loop of each
(rules, network shape, view, mode, opponent, games, lanes) is reused, so only the first
call compiles.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import jax
import numpy as np

from lc_cfr import search as search_lib
from lc_cfr.bots import check_bot_name
from lc_cfr.eval import games as eval_games
from lc_cfr.eval.metrics import summarize
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp

SD_CFR = "sd_cfr"
POLICY_VIEWS = eval_games.VIEWS + (SD_CFR,)
# The metrics' view name of search at play time over a view or a bot (`evaluate_search`).
SEARCH = "search"


class Snapshots(NamedTuple):
    """The `sd_cfr` view: advantage networks of past iterations (Steinberger 2019).

    SD-CFR ("Single Deep CFR", arXiv:1901.07621) plays the average strategy without an
    average-strategy network: at the start of each game it draws one iteration t with
    probability proportional to its weight and plays that iteration's regret-matching
    policy for the whole game. The trainer keeps snapshots whose inclusion probability
    is already proportional to the weight (`lc_cfr.train.snapshots`), so a game draws one
    of them uniformly.
    """

    advantage: tuple  # (player 0's, player 1's) params, every leaf [K, ...]
    count: int  # valid snapshots: the first `count` of the K


def snapshot_blocks(count: int, deals: int, seed: int) -> tuple[np.ndarray, int]:
    """(snapshot of each block, deals per block): the deals split evenly among snapshots.

    Stratified rather than drawn per game: every kept snapshot plays the same number of
    deals (a uniform draw in expectation, with less variance). With more snapshots than
    deals, `deals` of them are picked at random (from `seed`), one deal each.
    """
    if count < 1:
        raise ValueError("the sd_cfr view needs at least one snapshot")
    blocks = min(count, deals)
    chosen = np.arange(count)
    if blocks < count:
        chosen = np.sort(np.random.default_rng(seed).choice(count, blocks, replace=False))
    return chosen, deals // blocks


class SnapshotBlock(NamedTuple):
    """One block of the sd_cfr view's deals: snapshot `snapshot` plays deals
    `first_deal .. first_deal + deals - 1` (each twice, seats swapped)."""

    snapshot: int  # index among the K snapshots
    first_deal: int
    deals: int  # deals per block, the same for every block
    params: tuple  # that snapshot's (player 0's, player 1's) advantage params

    @property
    def deal_range(self) -> range:
        return range(self.first_deal, self.first_deal + self.deals)


def sd_cfr_blocks(snapshots: Snapshots, deals: int, seed: int) -> Iterator[SnapshotBlock]:
    """The blocks of `deals` deals that the sd_cfr view plays, one per chosen snapshot
    (`snapshot_blocks`), in deal order; every evaluation loop plays these."""
    chosen, per_block = snapshot_blocks(snapshots.count, deals, seed)
    for block, k in enumerate(chosen):
        params = tuple(jax.tree.map(lambda x, k=k: x[k], p) for p in snapshots.advantage)
        yield SnapshotBlock(int(k), block * per_block, per_block, params)


def join_records(parts: Sequence) -> eval_games.GameRecords:
    """Blocks' records joined along the deal axis: each part a GameRecords or a mapping
    field -> [2, D] array (`lc_cfr.spiel.bots.MirroredResult.records`)."""

    def field(part, name):
        return part[name] if isinstance(part, Mapping) else getattr(part, name)

    return eval_games.GameRecords(
        **{
            name: np.concatenate([field(part, name) for part in parts], axis=1)
            for name in eval_games.GameRecords._fields
        }
    )


def _play_snapshots(
    rules, spec, agent, opponent, snapshots: Snapshots, *, games, seed, lanes, devices
):
    """The sd_cfr view against one bot: each block of deals by one snapshot's RM policy."""
    results = [
        eval_games.play(
            rules,
            spec,
            agent,
            opponent,
            block.params,
            games=2 * block.deals,
            seed=seed,
            lanes=lanes,
            first_deal=block.first_deal,
            devices=devices,
        )
        for block in sd_cfr_blocks(snapshots, games // 2, seed)
    ]
    return eval_games.PlayResult(
        join_records([r.records for r in results]),
        sum(r.steps for r in results),
        sum(r.rows for r in results),
        results[0].half_lanes,
        sum(r.compile_seconds for r in results),
        sum(r.run_seconds for r in results),
        tuple(sum(rows) for rows in zip(*(r.device_rows for r in results), strict=True)),
    )


def _keyed_metrics(
    name: str, rules, spec, agent, opponent: str, params, rivals, blocks: bool, play: dict
) -> dict[str, float]:
    """`eval/<name>/<opponent>/<metric>` of `agent` against one opponent: played in the
    sd_cfr view's snapshot blocks (`blocks`), or once against a bot or a rival; `play`
    holds games, seed, lanes and devices."""
    start = time.perf_counter()
    if blocks:
        result = _play_snapshots(rules, spec, agent, opponent, params, **play)
    else:
        result = _play_against(rules, spec, agent, opponent, params, rivals, **play)
    metrics = _timed_metrics(result, time.perf_counter() - start)
    return {metric_key(name, opponent, k): v for k, v in metrics.items()}


def metric_key(view: str, opponent: str, metric: str) -> str:
    return f"eval/{view}/{opponent}/{metric}"


def parse_names(
    text: str | None, field: str, valid: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The comma-separated names of a config field or flag (`field` names it in errors):
    at least one, none twice, and each in `valid` when given."""
    names = tuple(part.strip() for part in (text or "").split(",") if part.strip())
    if not names:
        raise ValueError(f"{field} must name at least one entry, got {text!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{field} names an entry twice: {text!r}")
    bad = [name for name in names if valid is not None and name not in valid]
    if bad:
        raise ValueError(f"{field}: unknown names {bad}; valid: {list(valid)}")
    return names


# Head to head: opponents that are agents, by the name their metrics carry ->
# (the Agent, its parameters).
Rivals = Mapping[str, tuple[eval_games.Agent, Any]]


def _check_opponents(
    opponents: Sequence[str], field: str, rivals: Rivals | None = None
) -> tuple[str, ...]:
    if isinstance(opponents, str) or not opponents:
        raise ValueError(f"{field} must be a non-empty sequence of bot names, got {opponents!r}")
    rivals = rivals or {}
    return tuple(name if name in rivals else check_bot_name(name, field) for name in opponents)


def _play_against(rules, spec, agent, opponent: str, params, rivals: Rivals | None, **kwargs):
    """`games.play` against a bot, or head to head against the rival of that name."""
    if rivals and opponent in rivals:
        rival, rival_params = rivals[opponent]
        return eval_games.play(
            rules, spec, agent, rival, params, opponent_params=rival_params, **kwargs
        )
    return eval_games.play(rules, spec, agent, opponent, params, **kwargs)


def _timed_metrics(result: eval_games.PlayResult, seconds: float) -> dict[str, float]:
    metrics = summarize(result.records)
    decisions = float(result.records.decisions.sum())
    metrics.update(
        seconds=seconds,
        compile_seconds=result.compile_seconds,
        run_seconds=result.run_seconds,
        games_per_second=metrics["games"] / max(result.run_seconds, 1e-9),
        lane_utilisation=decisions / max(2 * result.rows, 1),
    )
    return metrics


def evaluate(
    rules: Rules,
    spec: mlp.NetworkSpec,
    params_views: Mapping[str, Any],
    *,
    opponents: Sequence[str],
    games: int,
    view_modes: str | Mapping[str, str] = "greedy",
    seed: int = 0,
    fallback: str = "argmax_tiebreak",
    lanes: int | None = None,
    devices: int | None = None,
    draws: str = "any",
    rivals: Rivals | None = None,
) -> dict[str, float]:
    """Evaluates policy views against bots; every deal is played twice, seats swapped.

    Args:
      rules: the game variant.
      spec: the shape of every network.
      params_views: view name -> parameters, views among `average_strategy` (the strategy
        network's params), `current` (the pair (player 0's, player 1's) advantage
        networks' params) and `sd_cfr` (`Snapshots`: a block of the deals per snapshot).
      opponents: bot names.
      games: even number of games per (view, opponent): games / 2 deals.
      view_modes: `greedy` or `sampled` for every view, or a mapping view -> mode.
      seed: the evaluation seed (deals and sampled actions; see `lc_cfr.eval.games`).
      fallback: regret matching's all-negative fallback for `current`
        (`regret_matching.all_negative_fallback` of the run).
      lanes: games in flight at once (even; `games.DEFAULT_LANES` when None), on all
        devices together.
      devices: devices the deals are split over (`games.play`; default: every device of
        every process, each of which must then make the same call).
      draws: the pile draws the views may take (`games.DRAWS`, `games.Agent`).
      rivals: head to head: opponents that are agents (`Rivals`), named in `opponents`
        by their keys (not with the sd_cfr view).

    Returns:
      {`eval/<view>/<opponent>/<metric>`: float} for the metrics of `lc_cfr.eval.metrics`.
    """
    if not params_views:
        raise ValueError("params_views must name at least one view")
    for view in params_views:
        if view not in POLICY_VIEWS:
            raise ValueError(f"params_views: unknown view {view!r}; valid: {list(POLICY_VIEWS)}")
    for view, params in params_views.items():
        if not mlp.all_finite(params):
            raise ValueError(
                f"the {view} view's networks hold non-finite parameters: a diverged run "
                "cannot be evaluated (see optimization.non_finite)"
            )
    if isinstance(view_modes, str):
        view_modes = dict.fromkeys(params_views, view_modes)
    missing = sorted(set(params_views) - set(view_modes))
    if missing:
        raise ValueError(f"view_modes has no mode for view(s) {missing}")
    opponents = _check_opponents(opponents, "opponents", rivals)
    if rivals and SD_CFR in params_views and set(opponents) & set(rivals):
        raise ValueError("the sd_cfr view plays bots only, not head to head")
    eval_games.check_games(games, lanes)
    agents = {
        view: eval_games.network_agent(
            "current" if view == SD_CFR else view, view_modes[view], fallback, draws
        )
        for view in params_views
    }
    out: dict[str, float] = {}
    play = dict(games=games, seed=seed, lanes=lanes, devices=devices)
    for view, params in params_views.items():
        for opponent in opponents:
            blocks = view == SD_CFR
            out.update(
                _keyed_metrics(
                    view, rules, spec, agents[view], opponent, params, rivals, blocks, play
                )
            )
    return out


def evaluate_bots(
    rules: Rules,
    *,
    agent: str,
    opponents: Sequence[str],
    games: int,
    seed: int = 0,
    lanes: int | None = None,
    devices: int | None = None,
) -> dict[str, float]:
    """Evaluates bot `agent` against bots: `eval/<agent>/<opponent>/<metric>` (`devices`
    as in `evaluate`)."""
    bot = eval_games.bot_agent(agent, "agent")
    opponents = _check_opponents(opponents, "opponents")
    eval_games.check_games(games, lanes)
    out: dict[str, float] = {}
    for opponent in opponents:
        start = time.perf_counter()
        result = eval_games.play(
            rules, None, bot, opponent, None, games=games, seed=seed, lanes=lanes, devices=devices
        )
        metrics = _timed_metrics(result, time.perf_counter() - start)
        out.update({metric_key(agent, opponent, k): v for k, v in metrics.items()})
    return out


def evaluate_search(
    rules: Rules,
    spec: mlp.NetworkSpec | None,
    blueprint: str,
    params: Any,
    options: search_lib.SearchOptions,
    *,
    opponents: Sequence[str],
    games: int,
    seed: int = 0,
    fallback: str = "argmax_tiebreak",
    lanes: int | None = None,
    devices: int | None = None,
    draws: str = "any",
    rivals: Rivals | None = None,
) -> dict[str, float]:
    """Evaluates search at play time (`lc_cfr.search`) over a blueprint against bots:
    `eval/search/<opponent>/<metric>`, on the deals and seats of every other view.

    Args:
      blueprint: a network view (`search.BLUEPRINT_VIEWS` or `sd_cfr`, `params` its
        parameters as in `evaluate`: for sd_cfr the `Snapshots`, each block of deals
        searching over its snapshot's regret matching) or a bot name (`params` None).
      options: the search's `SearchOptions` (checked here; errors name the --search_ flag).
      The rest as in `evaluate` (`rivals`: head to head, e.g. the blueprint itself).
    """
    search_lib.check_options(options, rules)
    opponents = _check_opponents(opponents, "opponents", rivals)
    eval_games.check_games(games, lanes)
    if blueprint in search_lib.BLUEPRINT_VIEWS:
        if not mlp.all_finite(params):
            raise ValueError(
                f"the {blueprint} view's networks hold non-finite parameters: a diverged run "
                "cannot be searched over"
            )
        agent = eval_games.network_agent(blueprint, "greedy", fallback, draws, search=options)
    elif blueprint == SD_CFR:
        # SD-CFR's games each play one snapshot's regret matching: the search stands on
        # that snapshot's `current` policy, block by block of the view's deals.
        if rivals and set(opponents) & set(rivals):
            raise ValueError("search over the sd_cfr view plays bots only, not head to head")
        agent = eval_games.network_agent("current", "greedy", fallback, draws, search=options)
    else:
        agent = eval_games.bot_agent(blueprint, "--search_blueprint", search=options)
        params = None  # a bot; `spec` stays for a rival network
    out: dict[str, float] = {}
    play = dict(games=games, seed=seed, lanes=lanes, devices=devices)
    for opponent in opponents:
        blocks = blueprint == SD_CFR
        out.update(
            _keyed_metrics(SEARCH, rules, spec, agent, opponent, params, rivals, blocks, play)
        )
    return out
