"""The terminal game: scripted games through the CLI, input checks, errors, compile-once."""

import io
import os
import pathlib
import subprocess
import sys
import tarfile

import chex
import jax
import numpy as np
import pytest
from config_helpers import default_config

from lc_cfr import search, terminal_game
from lc_cfr.game import engine
from lc_cfr.train import Trainer
from lc_cfr.train.saved_networks import load_saved_networks

ROOT = pathlib.Path(__file__).resolve().parent.parent

ENV = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))


def _smoke_config():
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.run.max_iterations = 1
    return config


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny run: one iteration of the smoke preset, trained in-process."""
    workdir = tmp_path_factory.mktemp("run")
    Trainer(_smoke_config(), workdir).run()
    return workdir


@pytest.fixture(scope="module")
def game(run_dir):
    return terminal_game.Game(terminal_game.load_agent(run_dir))


def _play(*args, stdin=""):
    return subprocess.run(
        [sys.executable, "-m", "lc_cfr.play", *args],
        cwd=ROOT,
        env=ENV,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_scripted_game_rejects_bad_input_and_plays_to_the_end(run_dir):
    script = [
        "garbage",  # not a command
        "0",  # out of range
        "99",  # out of range
        "",  # empty line
        "help",
        "d1",  # discard slot 1: always legal; the deck is then the only draw (forced)
        "pile purple",  # no such pile in a two-colour game
    ] + ["1"] * 200  # move 1 is always legal: play or discard, then draw from the deck
    # (the draw-phase explanations are test_parse_explains_illegal_moves')
    result = _play(f"--workdir={run_dir}", "--deal=3", stdin="\n".join(script) + "\n")
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "Deal 3, seed 0: replay this game with --deal=3" in out
    for section in ("Expeditions", "Discard piles", "Scores: you", "Your hand: [1]", "Your moves"):
        assert section in out, section
    assert "deck: 6 cards left" in out  # 12 cards, two hands of 3
    assert "1. play " in out and "discard " in out and "draw from the deck" in out
    assert "Unrecognised input 'garbage'" in out
    assert "No move 0: choose a number from 1 to" in out
    assert "No move 99: choose a number from 1 to" in out
    assert "Empty input" in out
    assert "Commands:" in out and "pile C" in out
    assert "(your only move)." in out  # the forced draw, made without asking
    assert "Unknown pile 'purple'" in out
    assert "Unable to initialize backend" not in result.stderr  # JAX's probing stays quiet
    assert "You draw " in out and "The agent " in out  # both sides' moves are announced
    assert "Game over:" in out and "Final scores" in out and "  total" in out
    assert "wins by" in out or "The game is a draw." in out


def test_seat_one_sampled_quit_and_end_of_input(run_dir):
    quit_game = _play(f"--workdir={run_dir}", "--deal=5", "--seat=1", "--mode=sampled", stdin="q\n")
    assert quit_game.returncode == 0, quit_game.stderr
    out = quit_game.stdout
    assert "you (player 1)" in out and "(sampled agent)" in out
    assert out.index("The agent ") < out.index("Your move")  # the agent moved first
    assert "You quit: the game is abandoned" in out
    eof = _play(f"--workdir={run_dir}", stdin="")  # deal from the clock
    assert eof.returncode == 0, eof.stderr
    assert "replay this game with --deal=" in eof.stdout
    assert "End of input: leaving the game" in eof.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--workdir={missing}"], "does not exist"),
        ([], "--workdir is required"),
        (["--workdir={run}", "--seat=2"], "flag --seat=2"),
        (["--workdir={run}", "--mode=best"], "flag --mode=best"),
        (["--workdir={run}", "--checkpoint=9"], "no checkpoint of iteration 9"),
        (["--workdir={empty}"], "config.json is missing"),
    ],
)
def test_errors_are_one_line(run_dir, tmp_path, args, message):
    names = {"missing": tmp_path / "no_such_run", "run": run_dir, "empty": tmp_path}
    result = _play(*[a.format(**names) for a in args])
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lc_cfr.play: "), result.stderr
    assert message in lines[0]
    assert result.stdout == ""


def test_missing_checkpoint_is_named(tmp_path):
    (tmp_path / "config.json").write_text(_smoke_config().to_json())
    with pytest.raises(terminal_game.PlayError, match="no checkpoint in"):
        terminal_game.load_agent(tmp_path)


def test_agent_is_the_checkpointed_strategy_network(run_dir):
    agent = terminal_game.load_agent(run_dir)
    state, _ = Trainer(_smoke_config(), run_dir).restore()
    assert agent.iteration == state.iteration == 1
    for a, b in zip(
        jax.tree.leaves(agent.params), jax.tree.leaves(state.strategy_params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_saved_networks_are_the_trainers(run_dir):
    saved = load_saved_networks(run_dir)
    trainer = Trainer(_smoke_config(), run_dir)
    state, _ = trainer.restore()  # the trainer's whole state, memories included
    assert saved.iteration == state.iteration == 1 and saved.snapshots is None
    assert saved.rules == trainer.rules and saved.spec == trainer.spec
    chex.assert_trees_all_equal(saved.advantage, tuple(state.advantage_params))
    chex.assert_trees_all_equal(saved.strategy, state.strategy_params)


def test_parse_explains_illegal_moves(game):
    rules = game.rules  # 2 colours of W 2 3 4 5 6: yellow ids 0..5, blue ids 6..11
    h = rules.hand_size
    deck = [0, 3, 5, 6, 7, 8, 1, 2, 4, 9, 10, 11]  # you: yW y4 y6; agent: bW b2 b3
    step, view = game.jitted()["step"], game.jitted()["view"]
    state = engine.init_from_deck(rules, np.array(deck))
    state = step(state, np.int32(2))  # play y6: both piles are empty, the deck is forced
    s = jax.device_get(state)
    assert "pile is empty" in game.parse("pile blue", s, np.asarray(view(state)[0]))[1]
    assert np.flatnonzero(view(state)[0]).tolist() == [rules.draw_deck_action]
    for action in (rules.draw_deck_action, h, rules.draw_deck_action):
        state = step(state, np.int32(action))  # draw y2; agent discards bW, draws
    s = jax.device_get(state)
    mask = np.asarray(view(state)[0])
    assert game.render_hand(s, 0) == "[1] yellow W  [2] yellow 2  [3] yellow 4"

    def message(text):
        action, note = game.parse(text, s, mask)
        assert action is None, text
        return note

    assert "wagers must come first" in message("p1")
    assert "is already at 6 (cards must go up)" in message("play 2")
    assert "no slot 4" in message("p4")
    assert "First play or discard" in message("deck")
    assert "First play or discard" in message("pile 2")
    assert "No move 4: choose a number from 1 to 3" in message("4")  # only the 3 discards
    assert game.parse("1", s, mask) == (h, None)  # discard slot 1
    assert game.parse(" D 2 ", s, mask) == (h + 1, None)
    assert game.parse("QUIT", s, mask) == (terminal_game.QUIT, None)

    state = step(state, np.int32(h))  # discard yellow W
    s = jax.device_get(state)
    mask = np.asarray(view(state)[0])
    assert "can't take back the yellow card" in message("pile yellow")
    assert "now draw" in message("p1")
    assert game.parse("pile blue", s, mask) == (rules.first_pile_action + 1, None)
    assert game.parse("deck", s, mask) == (rules.draw_deck_action, None)
    moves = [game.describe(s, a) for a in np.flatnonzero(mask)]
    assert moves == ["draw from the deck (4 cards left)", "draw blue W from the blue pile"]


def test_games_compile_once_and_replay_exactly(game):
    def transcript(**kwargs):
        out = io.StringIO()
        assert game.play(infile=io.StringIO("1\n" * 200), outfile=out, **kwargs) == 0
        return out.getvalue()

    game.mode = "sampled"
    try:
        first = transcript(human=1, deal=7, seed=11)
        assert transcript(human=1, deal=7, seed=11) == first
        assert "Game over:" in first
        transcript(human=0, deal=8, seed=0)
    finally:
        game.mode = "greedy"
    transcript(human=0, deal=9, seed=3)
    for name, function in game.jitted().items():
        assert function._cache_size() == 1, name


def test_search_agent_plays_its_blueprint_with_one_candidate_and_refuses_bad_flags(run_dir):
    """--search: with one candidate the searching agent makes the network's greedy moves
    (the transcripts differ in the header only); a second game reuses the compiled search;
    a bad search flag is one line naming it."""
    agent = terminal_game.load_agent(run_dir)
    plain = terminal_game.Game(agent)
    one = search.SearchOptions(determinizations=2, candidates=1)
    searching = terminal_game.Game(agent, search=one)

    def moves(game, **kwargs):
        out = io.StringIO()
        assert game.play(infile=io.StringIO("1\n" * 200), outfile=out, **kwargs) == 0
        text = out.getvalue()
        assert "Game over:" in text
        return [line for line in text.splitlines() if "(p=" in line]

    for deal in (4, 6):
        assert moves(searching, human=1, deal=deal, seed=2) == moves(
            plain, human=1, deal=deal, seed=2
        )
    assert searching.jitted()["search"]._cache_size() == 1
    with pytest.raises(terminal_game.PlayError, match="--search_candidates"):
        terminal_game.Game(agent, search=search.SearchOptions(candidates=999))
    bad = _play(f"--workdir={run_dir}", "--search", "--search_determinizations=0", stdin="q\n")
    assert bad.returncode == 1 and "--search_determinizations" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1, bad.stderr


def test_search_cut_at_the_value_network_plays_and_needs_one(run_dir, tmp_path):
    """--search_leaf_decisions: the agent of a run with a value network (a checkpoint of
    the older layout, its value network in the state item) plays a whole game with cut
    rollouts; a run without one is refused with one line naming the flag."""
    fixture = ROOT / "tests" / "fixtures" / "run_ca193c0_value_sd.tar.gz"
    with tarfile.open(fixture) as archive:
        archive.extractall(tmp_path, filter="data")
    cut = search.SearchOptions(determinizations=2, candidates=2, leaf_decisions=2)
    game = terminal_game.Game(terminal_game.load_agent(tmp_path), search=cut)
    out = io.StringIO()
    assert game.play(infile=io.StringIO("1\n" * 200), outfile=out, human=1, deal=4, seed=2) == 0
    assert "Game over:" in out.getvalue()
    with pytest.raises(terminal_game.PlayError, match="--search_leaf_decisions"):
        terminal_game.Game(terminal_game.load_agent(run_dir), search=cut)
