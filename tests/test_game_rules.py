"""Hand-checked rules on hand-built deals, run against both engines.

The small variant below has 2 colours of [wager, 2, 3, 4, 5]: card ids 0..4 are colour 0
(0 is its wager), 5..9 colour 1. Hands hold 3 cards, so actions are: play slot 0..2,
discard slot 3..5, draw deck 6, draw pile c 7 + c.
"""

import dataclasses

import jax
import numpy as np
import pytest

from lc_cfr.game import cy_engine, engine
from lc_cfr.game.rules import ILLEGAL_ACTION_PENALTY, Rules

RULES = Rules(
    n_colors=2,
    n_ranks=4,
    min_rank=2,
    n_wagers=1,
    hand_size=3,
    expedition_penalty=-20,
    bonus_threshold=4,
    bonus_amount=20,
    max_turns=50,
)
PLAY, DISCARD, DECK, PILE = 0, 3, 6, 7

_step = jax.jit(engine.step, static_argnums=0)
_mask = jax.jit(engine.legal_action_mask, static_argnums=0)


class JaxGame:
    """The JAX engine behind the same small interface as CyGame."""

    def __init__(self, rules, deck):
        self.rules = rules
        self.state = engine.init_from_deck(rules, np.asarray(deck))

    def apply(self, action):
        before = self.state
        self.state = _step(self.rules, self.state, action)
        if int(self.state.illegal_player) >= 0:
            self.state = before
            raise ValueError(f"illegal action {action}")

    def legal_mask_array(self):
        return np.asarray(_mask(self.rules, self.state))

    def state_dict(self):
        return {f.name: np.asarray(getattr(self.state, f.name)) for f in dataclasses.fields(State)}


State = engine.State


def make_game(kind, deck, rules=RULES):
    if kind == "jax":
        return JaxGame(rules, deck)
    game = cy_engine.CyGame(rules)
    game.deal_from_order(np.asarray(deck, dtype=np.int64))
    return game


ENGINES = ["jax", "cython"]


def play(game, actions):
    for action in actions:
        game.apply(action)


@pytest.mark.parametrize("kind", ENGINES)
def test_deal_and_first_mask(kind):
    game = make_game(kind, [0, 1, 2, 5, 6, 7, 3, 4, 8, 9])
    state = game.state_dict()
    np.testing.assert_array_equal(state["hands"], [[0, 1, 2], [5, 6, 7]])
    assert state["deck_pos"] == 6 and state["phase"] == 0 and state["current_player"] == 0
    # every card is playable on an empty expedition; every discard legal; no draws
    np.testing.assert_array_equal(game.legal_mask_array(), [1, 1, 1, 1, 1, 1, 0, 0, 0])


@pytest.mark.parametrize("kind", ENGINES)
def test_wager_refused_after_numbered_and_numbers_strictly_ascend(kind):
    game = make_game(kind, [0, 1, 3, 5, 6, 7, 2, 4, 8, 9])
    play(game, [PLAY + 2, DECK])  # p0 plays the 4 (card 3), draws card 2 (the 3)
    play(game, [DISCARD + 0, DECK])  # p1 discards its wager, draws card 4
    state = game.state_dict()
    np.testing.assert_array_equal(state["hands"][0], [0, 1, 2])
    mask = game.legal_mask_array()
    assert not mask[PLAY + 0], "wager after a numbered card"
    assert not mask[PLAY + 1] and not mask[PLAY + 2], "2 and 3 are below the 4"
    assert mask[DISCARD : DISCARD + 3].all()
    with pytest.raises(ValueError):
        game.apply(PLAY + 0)
    with pytest.raises(ValueError):
        game.apply(PLAY + 1)
    assert game.state_dict()["phase"] == 0  # refused actions changed nothing


@pytest.mark.parametrize("kind", ENGINES)
def test_pile_just_discarded_to_is_closed_this_turn_only(kind):
    game = make_game(kind, [0, 1, 2, 5, 6, 7, 3, 4, 8, 9])
    play(game, [PLAY + 1, DECK])  # p0 plays the 2 of colour 0
    game.apply(DISCARD + 0)  # p1 discards card 5 onto pile 1
    mask = game.legal_mask_array()
    assert mask[DECK] and not mask[PILE + 1] and not mask[PILE + 0]
    with pytest.raises(ValueError):
        game.apply(PILE + 1)
    game.apply(DECK)
    game.apply(DISCARD + 0)  # p0 discards its wager (card 0) onto pile 0
    mask = game.legal_mask_array()
    assert mask[PILE + 1] and not mask[PILE + 0]
    game.apply(PILE + 1)  # p0 takes card 5 back from pile 1
    state = game.state_dict()
    assert 5 in state["hands"][0] and state["known_cards"][0, 5]
    assert state["pile_sizes"].tolist() == [1, 0]
    game.apply(DISCARD + 0)  # p1 discards onto pile 0 ...
    assert not game.legal_mask_array()[PILE + 0]


@pytest.mark.parametrize("kind", ENGINES)
def test_bonus_added_after_multiplier_with_wagers_counting(kind):
    # Six ranks per colour (ids 0..6 = colour 0, 0 its wager), so the deck lasts long enough.
    rules = dataclasses.replace(RULES, n_ranks=6)
    game = make_game(kind, [0, 1, 2, 7, 8, 9, 3, 10, 11, 12, 13, 4, 5, 6], rules)
    play(game, [PLAY + 0, DECK, DISCARD + 0, DECK])  # p0: wager; p1 discards
    assert game.state_dict()["scores"][0] == (0 - 20) * 2
    play(game, [PLAY + 0, DECK, DISCARD + 0, DECK])  # p0: the 2
    play(game, [PLAY + 0, DECK, DISCARD + 0, DECK])  # p0: the 3
    state = game.state_dict()
    assert state["expedition_wagers"][0, 0] == 1 and state["expedition_numbered"][0, 0] == 2
    assert state["scores"][0] == (2 + 3 - 20) * 2  # 3 cards: below the bonus threshold
    np.testing.assert_array_equal(state["hands"][0], [3, 11, 13])
    game.apply(PLAY + 0)  # p0: the 4, the expedition's fourth card
    # wagers count toward the 4-card threshold; the bonus is not multiplied
    assert game.state_dict()["scores"][0] == (2 + 3 + 4 - 20) * 2 + 20
    assert game.state_dict()["scores"][1] == 0


@pytest.mark.parametrize("kind", ENGINES)
def test_game_ends_on_last_deck_draw_and_empty_expedition_scores_zero(kind):
    game = make_game(kind, [0, 1, 2, 5, 6, 7, 3, 4, 8, 9])
    assert game.state_dict()["scores"].tolist() == [0, 0]
    for turn in range(4):
        state = game.state_dict()
        assert not state["terminal"], f"over after {turn} draws of 4"
        play(game, [DISCARD + 0, DECK])
    state = game.state_dict()
    assert state["terminal"] and not state["truncated"] and state["deck_pos"] == 10
    assert state["scores"].tolist() == [0, 0]  # nothing played: all expeditions empty
    assert not game.legal_mask_array().any()


@pytest.mark.parametrize("kind", ENGINES)
def test_truncation_at_max_turns_but_natural_end_wins(kind):
    rules = dataclasses.replace(RULES, max_turns=4)
    game = make_game(kind, [0, 1, 2, 5, 6, 7, 3, 4, 8, 9], rules)
    play(game, [PLAY + 1, DECK, DISCARD + 0, DECK])
    play(game, [DISCARD + 0, PILE + 1])  # a discard draw: the deck does not shrink
    assert not game.state_dict()["terminal"]
    play(game, [DISCARD + 0, DECK])  # turn 4 of 4, one card still in the deck
    state = game.state_dict()
    assert state["terminal"] and state["truncated"] and state["turn"] == 4
    assert state["scores"][0] == 2 - 20  # scored as it stands

    rules = dataclasses.replace(RULES, max_turns=4)
    game = make_game(kind, [0, 1, 2, 5, 6, 7, 3, 4, 8, 9], rules)
    for _ in range(4):
        play(game, [DISCARD + 0, DECK])
    state = game.state_dict()
    assert state["terminal"] and not state["truncated"]


def test_jax_illegal_action_is_data_and_terminal_is_absorbing():
    state = engine.init_from_deck(RULES, np.array([0, 1, 3, 5, 6, 7, 2, 4, 8, 9]))
    state = _step(RULES, state, PLAY + 2)
    illegal = _step(RULES, state, PILE + 0)  # pile 0 is empty
    assert bool(illegal.terminal) and int(illegal.illegal_player) == 0
    np.testing.assert_array_equal(illegal.hands, state.hands)
    assert engine.returns(RULES, illegal).tolist() == [
        -ILLEGAL_ACTION_PENALTY,
        ILLEGAL_ACTION_PENALTY,
    ]
    assert not _mask(RULES, illegal).any()
    again = _step(RULES, illegal, DECK)
    for field in dataclasses.fields(State):
        np.testing.assert_array_equal(getattr(again, field.name), getattr(illegal, field.name))
    out_of_range = _step(RULES, state, 99)
    assert int(out_of_range.illegal_player) == 0


def test_nth_legal_is_the_chosen_legal_action_in_ascending_order():
    """nth_legal counts prefix sums by a matrix product (no cumsum): same choice as the
    definition, on arbitrary masks of any length, all-false (gives 0) and all-true ones."""
    rng = np.random.default_rng(0)
    for size in (1, 2, 5, 22, 40):
        masks = rng.random((64, size)) < rng.random((64, 1))
        masks[0], masks[1] = False, True
        bits = rng.integers(0, 2**32, size=64, dtype=np.uint32)
        got = jax.jit(jax.vmap(engine.nth_legal))(masks, bits)
        for mask, word, action in zip(masks, bits, np.asarray(got), strict=True):
            chosen = ((int(word) >> 8) * max(int(mask.sum()), 1)) >> 24
            expected = int(np.argmax(np.cumsum(mask) > chosen))
            assert action == expected, (mask, word)
