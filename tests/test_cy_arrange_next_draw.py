"""CyGame.arrange_next_draw: choosing the next deck card (for per-draw chance nodes)."""

from __future__ import annotations

import numpy as np
import pytest

from lc_cfr.game.rules import Rules

cy = pytest.importorskip("lc_cfr.game.cy_engine")

RULES = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=20)
DRAW_DECK = RULES.draw_deck_action


def _dealt(order=None):
    game = cy.CyGame(RULES)
    game.deal_from_order(np.arange(RULES.n_cards) if order is None else np.asarray(order))
    return game


def _same_except_deck(a: dict, b: dict) -> None:
    for key in a:
        if key != "deck":
            np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.mark.parametrize("card", range(2 * RULES.hand_size, RULES.n_cards))
def test_any_deck_card_comes_next(card):
    game = _dealt()
    before = game.state_dict()
    game.arrange_next_draw(card)
    after = game.state_dict()
    pos = int(before["deck_pos"])
    assert after["deck"][pos] == card
    # only the undrawn part is permuted, and only by one swap
    np.testing.assert_array_equal(after["deck"][:pos], before["deck"][:pos])
    assert sorted(after["deck"][pos:]) == sorted(before["deck"][pos:])
    assert np.sum(after["deck"] != before["deck"]) in (0, 2)
    _same_except_deck(before, after)
    game.apply(0 + RULES.hand_size)  # discard slot 0
    game.apply(DRAW_DECK)
    assert card in game.state_dict()["hands"][0]


def test_arranging_the_card_already_next_changes_nothing():
    game = _dealt()
    before = game.state_dict()
    game.arrange_next_draw(int(before["deck"][before["deck_pos"]]))
    np.testing.assert_array_equal(game.state_dict()["deck"], before["deck"])


def test_later_draws_follow_the_arranged_order():
    rng = np.random.default_rng(3)
    game = _dealt(rng.permutation(RULES.n_cards))
    drawn = []
    while not game.terminal:
        left = game.state_dict()["deck"][game.deck_pos :]
        card = int(rng.choice(left))
        game.arrange_next_draw(card)
        drawn.append(card)
        game.apply(RULES.hand_size)  # discard slot 0
        game.apply(DRAW_DECK)
    assert game.state_dict()["deck"][2 * RULES.hand_size :].tolist() == drawn


@pytest.mark.parametrize("card", [0, 5, -1, RULES.n_cards, 1000])
def test_a_card_outside_the_deck_is_refused(card):
    game = _dealt()  # cards 0..5 are in the hands
    before = game.state_dict()
    with pytest.raises(ValueError, match=f"card {card} is not among"):
        game.arrange_next_draw(card)
    np.testing.assert_array_equal(game.state_dict()["deck"], before["deck"])


def test_a_drawn_card_is_refused():
    game = _dealt()
    game.apply(RULES.hand_size)
    game.apply(DRAW_DECK)  # draws card 6
    with pytest.raises(ValueError, match="card 6 is not among"):
        game.arrange_next_draw(6)


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="card 'x' is not an integer"):
        _dealt().arrange_next_draw("x")
    with pytest.raises(ValueError, match="no game dealt"):
        cy.CyGame(RULES).arrange_next_draw(7)
