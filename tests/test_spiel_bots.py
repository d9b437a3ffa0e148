"""OpenSpiel's bots as opponents (lc_cfr.spiel.bots): the sequential mirrored loop plays
lc_cfr's deals and agrees with `lc_cfr.eval` game for game, ISMCTS's worlds are the exact
posterior of the searcher's information, and `lc_cfr.evaluate` runs and refuses them."""

from __future__ import annotations

import collections
import itertools
import math
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel", reason="OpenSpiel is optional: pip install .[openspiel]")

from absl import app  # noqa: E402

from lc_cfr import evaluate  # noqa: E402
from lc_cfr.eval import games as eval_games  # noqa: E402
from lc_cfr.eval import metrics as eval_metrics  # noqa: E402
from lc_cfr.game import engine, rng  # noqa: E402
from lc_cfr.game.rules import Rules  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.spiel import TINY_RULES, bots  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
# 10 cards, hands of 2: ~14 decisions a game; an MCTS game of 8 simulations a decision
# takes ~0.1 s, ISMCTS's ~0.3 s on a busy 2-core CPU.
RULES = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=2, max_turns=10)
RULES_FLAG = "n_colors=2,n_ranks=4,n_wagers=1,hand_size=2,max_turns=10"
SEED = 5
GAMES = 12  # 6 deals
SIMULATIONS = 8


class _Recorder(bots.Player):
    """Wraps a player; keeps the chance outcomes each game had reached at its decisions."""

    def __init__(self, inner: bots.Player):
        self.inner, self.name, self.chance = inner, inner.name, {}

    def start(self, rules, **kwargs):
        self.inner.start(rules, **kwargs)

    def action(self, state, *, deal, game_id, decision):
        outcomes = [a.action for a in state.full_history() if a.player == pyspiel.PlayerId.CHANCE]
        self.chance[game_id] = outcomes
        return self.inner.action(state, deal=deal, game_id=game_id, decision=decision)


def test_the_loop_plays_lc_cfrs_deals_in_both_seats():
    agent = _Recorder(bots.LcBot("safe_heuristic", SEED))
    result = bots.play_mirrored(
        RULES, agent, bots.LcBot("random", SEED), deals=[0, 3, 4], seed=SEED
    )
    for deal in (0, 3, 4):
        deck = np.asarray(engine.deal_order(RULES, SEED, deal, 0))
        np.testing.assert_array_equal(rng.deal_order(RULES.n_cards, SEED, deal), deck)
        for seat in (0, 1):
            seen = agent.chance[2 * deal + seat]  # the deal, then every deck draw so far
            assert len(seen) > 2 * RULES.hand_size
            np.testing.assert_array_equal(seen, deck[: len(seen)])
    assert [(g.deal, g.seat) for g in result.games] == [(d, s) for d in (0, 3, 4) for s in (0, 1)]
    for g in result.games:
        assert g.margin == g.agent_score - g.opponent_score
        assert g.winner == ("agent" if g.margin > 0 else "opponent" if g.margin < 0 else "tie")


def _assert_same_records(lockstep: eval_games.GameRecords, sequential: bots.MirroredResult):
    assert bots.RECORD_FIELDS == eval_games.GameRecords._fields
    for field in bots.RECORD_FIELDS:
        np.testing.assert_array_equal(
            getattr(lockstep, field), sequential.records[field], err_msg=field
        )
    full = eval_metrics.summarize(lockstep)
    summary = eval_metrics.summarize(eval_games.GameRecords(**sequential.records))
    for name, value in summary.items():
        assert value == full[name] or (math.isnan(value) and math.isnan(full[name])), name


def test_bot_games_equal_lc_cfr_eval():
    """Same deals, same bot noise counters: every game ends as in the lockstep loop."""
    lockstep = eval_games.play(
        RULES, None, eval_games.bot_agent("noisy_safe"), "random", None, games=GAMES, seed=SEED
    )
    sequential = bots.play_mirrored(
        RULES,
        bots.LcBot("noisy_safe", SEED),
        bots.LcBot("random", SEED),
        deals=GAMES // 2,
        seed=SEED,
    )
    _assert_same_records(lockstep.records, sequential)


@pytest.mark.parametrize(
    "view, mode, draws",
    [
        ("average_strategy", "greedy", "any"),
        ("current", "sampled", "any"),
        ("current", "sampled", "playable"),
    ],
    ids=["avg", "cur", "cur_playable"],
)
def test_network_games_equal_lc_cfr_eval(view, mode, draws):
    """The information-state tensor is lc_cfr's encoding, the counters are eval's, and a
    run's `draws` restriction masks the same pile draws in both loops."""
    spec = mlp.NetworkSpec(RULES.encoding_size, RULES.num_actions, hidden_size=16, num_layers=1)
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    params = mlp.init_params(spec, keys[0])
    if view == "current":
        params = (params, mlp.init_params(spec, keys[1]))
    agent = eval_games.network_agent(view, mode, "uniform", draws)
    lockstep = eval_games.play(RULES, spec, agent, "noisy_safe", params, games=GAMES, seed=SEED)
    player = bots.NetworkPlayer(
        spec, params, view=view, mode=mode, fallback="uniform", seed=SEED, draws=draws
    )
    sequential = bots.play_mirrored(
        RULES, player, bots.LcBot("noisy_safe", SEED), deals=GAMES // 2, seed=SEED
    )
    _assert_same_records(lockstep.records, sequential)
    if draws != "any":  # the mask removed some of the pile draws unrestricted play takes
        agent = eval_games.network_agent(view, mode, "uniform")
        free = eval_games.play(RULES, spec, agent, "noisy_safe", params, games=GAMES, seed=SEED)
        assert lockstep.records.pile_draws.sum() < free.records.pile_draws.sum()


# ----- ISMCTS's worlds ----------------------------------------------------------------


def _world_key(state) -> tuple:
    """The hidden part of a world: the chance outcomes, each dealt hand as a set."""
    h = state.get_game().rules.hand_size
    chance = [a.action for a in state.full_history() if a.player == pyspiel.PlayerId.CHANCE]
    return (tuple(sorted(chance[:h])), tuple(sorted(chance[h : 2 * h])), *chance[2 * h :])


def _posterior(game, info: str) -> collections.Counter:
    """Every deck order replayed against the player's events: the consistent worlds."""
    rules = game.rules
    h = rules.hand_size
    player, _, events = bots.parse_info_string(info)
    worlds = collections.Counter()
    for deck in itertools.permutations(range(rules.n_cards)):
        state = game.new_initial_state()
        for card in deck[: 2 * h]:
            state.apply_action(card)
        drawn = 2 * h
        for event in events:
            hand = state.engine.state_dict()["hands"][event.player].tolist()
            if event.kind in ("play", "discard"):
                if event.card not in hand:
                    break
                slot = hand.index(event.card)
                action = slot if event.kind == "play" else h + slot
            elif event.kind == "pile":
                action = rules.first_pile_action + event.color
            else:
                action = rules.draw_deck_action
            if action not in state.legal_actions():
                break
            state.apply_action(action)
            if event.kind == "deck":
                state.apply_action(deck[drawn])
                drawn += 1
        else:
            if state.information_state_string(player) == info:
                worlds[_world_key(state)] += 1
    return worlds


def test_ismcts_worlds_are_the_posterior_of_the_information():
    """On TINY_RULES every deck order is enumerated; the resampler's worlds follow the
    uniform posterior over those consistent with the searcher's information string."""
    game = bots.load_search_game(TINY_RULES)
    play = np.random.RandomState(0)
    resampler = bots.InfostateResampler(game, np.random.RandomState(1))
    checked = 0
    for _ in range(8):
        state = game.new_initial_state()
        while checked < 5 and not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(play.choice([c for c, _ in state.chance_outcomes()]))
                continue
            player = state.current_player()
            info = state.information_state_string(player)
            exact = _posterior(game, info)
            if len(exact) > 2:
                n = 600
                drawn = collections.Counter(_world_key(resampler(state, player)) for _ in range(n))
                assert set(drawn) <= set(exact), info
                total = sum(exact.values())
                tv = 0.5 * sum(abs(drawn[w] / n - exact[w] / total) for w in exact)
                assert tv < 0.08, (info, tv, drawn, exact)
                checked += 1
            state.apply_action(play.choice(state.legal_actions()))
    assert checked == 5


def test_ismcts_worlds_depend_on_the_information_only():
    """Two states the searcher cannot tell apart give the same worlds (same random draws),
    and every world keeps its information string and legal actions."""
    game = bots.load_search_game(RULES)
    play = np.random.RandomState(2)
    for _ in range(5):
        state = game.new_initial_state()
        while not state.is_terminal():
            if state.is_chance_node():
                state.apply_action(play.choice([c for c, _ in state.chance_outcomes()]))
                continue
            player = state.current_player()
            twin = bots.InfostateResampler(game, np.random.RandomState(9))(state, player)
            worlds = [
                bots.InfostateResampler(game, np.random.RandomState(4))(s, player)
                for s in (state, twin)
            ]
            assert worlds[0].history() == worlds[1].history()
            for world in (twin, *worlds):
                assert world.information_state_string(player) == state.information_state_string(
                    player
                )
                assert world.legal_actions() == state.legal_actions()
            state.apply_action(play.choice(state.legal_actions()))


# ----- through lc_cfr.evaluate -------------------------------------------------------


def _run(**flags) -> dict:
    request = evaluate.parse_request(
        rules=RULES_FLAG, games=GAMES, seed=SEED, openspiel_simulations=SIMULATIONS, **flags
    )
    document = evaluate.run_request(request)
    assert evaluate.format_table(document["metrics"])  # every row has the table's metrics
    return document


def test_evaluate_plays_ismcts_and_mcts_to_the_end():
    document = _run(agent="openspiel_ismcts", opponents="random,openspiel_mcts")
    assert document["openspiel_simulations"] == SIMULATIONS
    metrics = document["metrics"]
    for opponent in ("random", "openspiel_mcts"):
        for name in eval_metrics.METRICS + eval_metrics.TIMING_METRICS:
            assert f"eval/openspiel_ismcts/{opponent}/{name}" in metrics, (opponent, name)
        assert metrics[f"eval/openspiel_ismcts/{opponent}/games"] == GAMES
        assert 0 < metrics[f"eval/openspiel_ismcts/{opponent}/length_mean"]


def test_evaluate_mixes_lockstep_and_sequential_pairs():
    """An lc_cfr pair still runs in lockstep (the same figures as evaluate_bots); a bot
    mirrored against itself replays each deal with the seats exchanged: margin 0."""
    metrics = _run(agent="noisy_safe", opponents="random,openspiel_mcts")["metrics"]
    lockstep = eval_metrics.summarize(
        eval_games.play(
            RULES, None, eval_games.bot_agent("noisy_safe"), "random", None, games=GAMES, seed=SEED
        ).records
    )
    assert metrics["eval/noisy_safe/random/margin_mean"] == lockstep["margin_mean"]
    assert "eval/noisy_safe/openspiel_mcts/margin_stderr" in metrics
    metrics = _run(agent="openspiel_mcts", opponents="openspiel_mcts")["metrics"]
    assert metrics["eval/openspiel_mcts/openspiel_mcts/margin_mean"] == 0.0
    assert metrics["eval/openspiel_mcts/openspiel_mcts/win_rate"] == 0.5


@pytest.mark.parametrize(
    "flags, field",
    [
        ({"agent": "openspiel_ismcts", "openspiel_simulations": 0}, "--openspiel_simulations"),
        ({"agent": "random", "opponents": "openspiel_nope"}, "--opponents"),
        ({"agent": "openspiel_alphazero"}, "--agent"),
    ],
)
def test_bad_flags_are_usage_errors(flags, field):
    with pytest.raises(app.UsageError, match=field):
        evaluate.parse_request(**{"games": 4, **flags})


def test_without_openspiel_the_bots_are_refused(monkeypatch):
    monkeypatch.setattr(bots, "openspiel_available", lambda: False)
    with pytest.raises(app.UsageError, match=r"--opponents openspiel_mcts: .*\[openspiel\]"):
        evaluate.parse_request(agent="random", opponents="openspiel_mcts", games=4)
    evaluate.parse_request(agent="random", opponents="safe_heuristic", games=4)


def test_a_bad_flag_is_one_line_on_the_command_line():
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    env.pop("LC_CFR_TRACEBACK", None)
    command = [
        sys.executable,
        "-m",
        "lc_cfr.evaluate",
        "--agent=openspiel_ismcts",
        "--openspiel_simulations=-3",
        "--games=4",
    ]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "--openspiel_simulations" in lines[0], lines
