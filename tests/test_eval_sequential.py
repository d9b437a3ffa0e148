"""`lc_cfr.eval.sequential` on a stand-in loop: which players play which deals (the
sd_cfr view by the blocks of `api.sd_cfr_blocks`, as in lockstep), and records joined
in deal order under the metric keys of `lc_cfr.eval`. No game is played: the loop
records its calls and returns each deal's index as its margin."""

import types

import numpy as np

from lc_cfr.eval import api, sequential
from lc_cfr.eval.games import GameRecords
from lc_cfr.eval.metrics import METRICS, TIMING_METRICS
from lc_cfr.game.rules import Rules


class _Loop:
    OPENSPIEL_BOTS = ("search",)

    def __init__(self):
        self.played = []  # (agent, deals)

    def bot_player(self, name, *, seed, simulations):
        return types.SimpleNamespace(name=name, seed=seed, simulations=simulations)

    def NetworkPlayer(self, spec, params, *, view, mode, fallback, seed, name=None, draws):  # noqa: N802
        return types.SimpleNamespace(
            name=name or view, view=view, params=params, mode=mode, draws=draws
        )

    def play_mirrored(self, rules, agent, opponent, *, deals, seed):
        deals = list(range(deals)) if isinstance(deals, int) else list(deals)
        self.played.append((agent, deals))
        records = {f: np.zeros((2, len(deals)), np.int64) for f in GameRecords._fields}
        records["margin"] = np.tile(np.asarray(deals), (2, 1))
        records["truncated"] = records["illegal"] = np.zeros((2, len(deals)), bool)
        return types.SimpleNamespace(records=records)


def test_sd_cfr_plays_the_blocks_of_the_lockstep_path():
    loop = _Loop()
    snapshots = api.Snapshots(advantage=(np.arange(4.0), 10 + np.arange(4.0)), count=3)
    views = {"average_strategy": "strategy", "sd_cfr": snapshots}
    metrics = sequential.evaluate(
        loop, Rules(), None, views, opponents=["search"], games=12, seed=3, simulations=2
    )
    blocks = list(api.sd_cfr_blocks(snapshots, 6, 3))
    assert [(b.snapshot, b.first_deal, b.deals) for b in blocks] == [
        (0, 0, 2),
        (1, 2, 2),
        (2, 4, 2),
    ]
    (strategy, all_deals), *sd_cfr = loop.played
    assert strategy.view == "average_strategy" and all_deals == list(range(6))
    assert [deals for _, deals in sd_cfr] == [list(b.deal_range) for b in blocks]
    for (player, _), block in zip(sd_cfr, blocks, strict=True):
        assert player.name == "sd_cfr" and player.view == "current"
        assert player.params == (block.snapshot, 10 + block.snapshot)
    for view in views:
        for name in METRICS + TIMING_METRICS:
            assert api.metric_key(view, "search", name) in metrics
        assert metrics[api.metric_key(view, "search", "games")] == 12
        assert metrics[api.metric_key(view, "search", "margin_mean")] == 2.5  # deals 0..5


def test_bots_against_the_loop_one_block_each():
    loop = _Loop()
    metrics = sequential.evaluate_bots(
        loop, Rules(), agent="search", opponents=["search"], games=4, seed=0, simulations=2
    )
    ((agent, deals),) = loop.played
    assert agent.name == "search" and agent.simulations == 2 and deals == [0, 1]
    assert metrics["eval/search/search/games"] == 4
    assert sequential.is_sequential(loop, "random", "search")
    assert not sequential.is_sequential(loop, "random")


def test_a_draw_restriction_reaches_every_network_player_of_the_loop():
    # the loop's players apply the run's `draws` (lc_cfr.spiel.bots.NetworkPlayer)
    loop = _Loop()
    snapshots = api.Snapshots(advantage=(np.arange(4.0), 10 + np.arange(4.0)), count=3)
    sequential.evaluate(
        loop,
        Rules(),
        None,
        {"average_strategy": "strategy", "sd_cfr": snapshots},
        opponents=("search",),
        games=12,
        simulations=1,
        draws="playable",
    )
    assert len(loop.played) == 4  # the strategy's block and one per SD-CFR snapshot
    assert {player.draws for player, _ in loop.played} == {"playable"}
