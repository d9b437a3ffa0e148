"""Tests of the Cython engine alone, against docs/game.md and lc_cfr.game.rng."""

from __future__ import annotations

import copy
import pickle
import types

import numpy as np
import pytest

from lc_cfr.game import rng
from lc_cfr.game.rules import Rules

cy = pytest.importorskip("lc_cfr.game.cy_engine")

# Small variant: colour 0 holds cards 0 (wager) and 1..4 (values 2..5), colour 1 holds
# 5 (wager) and 6..9. H = 3, N = 10, actions: 0-2 play, 3-5 discard, 6 deck, 7-8 piles.
SMALL = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=20)
PLAY = (0, 1, 2)
DISCARD = (3, 4, 5)
DECK = 6
PILE = (7, 8)

STATE_SPEC = {
    "deck": (np.int8, lambda r: (r.n_cards,)),
    "deck_pos": (np.int32, lambda r: ()),
    "hands": (np.int8, lambda r: (2, r.hand_size)),
    "discards": (np.int8, lambda r: (r.n_colors, r.cards_per_color)),
    "pile_sizes": (np.int32, lambda r: (r.n_colors,)),
    "expedition_cards": (np.bool_, lambda r: (2, r.n_cards)),
    "expedition_wagers": (np.int32, lambda r: (2, r.n_colors)),
    "expedition_numbered": (np.int32, lambda r: (2, r.n_colors)),
    "expedition_sum": (np.int32, lambda r: (2, r.n_colors)),
    "expedition_top": (np.int32, lambda r: (2, r.n_colors)),
    "known_cards": (np.bool_, lambda r: (2, r.n_cards)),
    "scores": (np.int32, lambda r: (2,)),
    "current_player": (np.int32, lambda r: ()),
    "phase": (np.int32, lambda r: ()),
    "forbidden_pile": (np.int32, lambda r: ()),
    "turn": (np.int32, lambda r: ()),
    "terminal": (np.bool_, lambda r: ()),
    "truncated": (np.bool_, lambda r: ()),
}


# --------------------------------------------------------------------------------------
# A plain-Python reference of docs/game.md, working on state dicts.
# --------------------------------------------------------------------------------------


def ref_color_score(rules, cards):
    """Score of one expedition from the list of its cards."""
    if not cards:
        return 0
    wagers = sum(rules.card_is_wager(x) for x in cards)
    total = sum(rules.card_value(x) for x in cards if not rules.card_is_wager(x))
    score = (total + rules.expedition_penalty) * (1 + wagers)
    if len(cards) >= rules.bonus_threshold:
        score += rules.bonus_amount
    return score


def ref_color_scores(rules, st, p):
    return [
        ref_color_score(
            rules,
            [
                x
                for x in range(rules.n_cards)
                if st["expedition_cards"][p, x] and rules.card_color(x) == c
            ],
        )
        for c in range(rules.n_colors)
    ]


def ref_can_play(rules, st, p, x):
    c = rules.card_color(x)
    if rules.card_is_wager(x):
        return st["expedition_numbered"][p, c] == 0
    return rules.card_rank(x) > st["expedition_top"][p, c]


def ref_legal(rules, st):
    mask = np.zeros(rules.num_actions, dtype=bool)
    if st["terminal"]:
        return mask
    n, h, p = rules.n_cards, rules.hand_size, int(st["current_player"])
    if st["phase"] == 0:
        for i, x in enumerate(st["hands"][p]):
            if x < n:
                mask[h + i] = True
                mask[i] = ref_can_play(rules, st, p, int(x))
    else:
        mask[2 * h] = st["deck_pos"] < n
        for c in range(rules.n_colors):
            mask[2 * h + 1 + c] = st["pile_sizes"][c] > 0 and c != st["forbidden_pile"]
    return mask


def _sorted_hand(cards, rules):
    cards = sorted(cards)
    return np.array(cards + [rules.n_cards] * (rules.hand_size - len(cards)), dtype=np.int8)


def ref_apply(rules, st, a):
    """The successor state dict of a legal action (docs/game.md, Transitions)."""
    st = copy.deepcopy(st)
    n, h, p = rules.n_cards, rules.hand_size, int(st["current_player"])
    hand = [int(x) for x in st["hands"][p] if x < n]
    if st["phase"] == 0:
        x = int(st["hands"][p][a % h])
        c = rules.card_color(x)
        hand.remove(x)
        if a < h:
            st["expedition_cards"][p, x] = True
            if rules.card_is_wager(x):
                st["expedition_wagers"][p, c] += 1
            else:
                st["expedition_numbered"][p, c] += 1
                st["expedition_sum"][p, c] += rules.card_value(x)
                st["expedition_top"][p, c] = rules.card_rank(x)
        else:
            st["discards"][c, st["pile_sizes"][c]] = x
            st["pile_sizes"][c] += 1
            st["forbidden_pile"] = np.int32(c)
        st["known_cards"][p, x] = False
        st["scores"][p] = sum(ref_color_scores(rules, st, p))
        st["phase"] = np.int32(1)
    else:
        if a == 2 * h:
            x = int(st["deck"][st["deck_pos"]])
            st["deck_pos"] = np.int32(st["deck_pos"] + 1)
        else:
            c = a - 2 * h - 1
            st["pile_sizes"][c] -= 1
            x = int(st["discards"][c, st["pile_sizes"][c]])
            st["discards"][c, st["pile_sizes"][c]] = n
            st["known_cards"][p, x] = True
        hand.append(x)
        st["forbidden_pile"] = np.int32(-1)
        st["phase"] = np.int32(0)
        st["turn"] = np.int32(st["turn"] + 1)
        st["current_player"] = np.int32(1 - p)
        if st["deck_pos"] == n:
            st["terminal"] = np.bool_(True)
        elif st["turn"] >= rules.max_turns:
            st["terminal"] = np.bool_(True)
            st["truncated"] = np.bool_(True)
    st["hands"][p] = _sorted_hand(hand, rules)
    return st


def ref_encoding(rules, st, p):
    """observe(state, p) from the docs' table, in float64."""
    n, c_count = rules.n_cards, rules.n_colors
    o = 1 - p
    out = np.zeros(rules.encoding_size)
    for x in st["hands"][p].tolist():
        if x < n:
            out[x] = 1
            out[6 * n + x] = float(ref_can_play(rules, st, p, x))
    out[n : 2 * n] = st["expedition_cards"][p]
    out[2 * n : 3 * n] = st["expedition_cards"][o]
    for c in range(c_count):
        pile = st["discards"][c, : st["pile_sizes"][c]].tolist()
        for x in pile:
            out[3 * n + x] = 1
        if pile:
            out[4 * n + pile[-1]] = 1
    out[5 * n : 6 * n] = st["known_cards"][o]
    out[7 * n : 8 * n] = st["known_cards"][p]
    b = 8 * n
    out[b] = (n - st["deck_pos"]) * rules.deck_scale
    out[b + 1 + st["phase"]] = 1
    if st["forbidden_pile"] >= 0:
        out[b + 3 + st["forbidden_pile"]] = 1
    count = st["expedition_wagers"] + st["expedition_numbered"]
    tail = b + 3 + c_count
    out[tail : tail + c_count] = st["expedition_wagers"][p] / 4
    out[tail + c_count : tail + 2 * c_count] = st["expedition_wagers"][o] / 4
    out[tail + 2 * c_count : tail + 3 * c_count] = count[p] / 16
    out[tail + 3 * c_count : tail + 4 * c_count] = count[o] / 16
    out[tail + 4 * c_count : tail + 5 * c_count] = np.array(ref_color_scores(rules, st, p)) / 128
    out[tail + 5 * c_count : tail + 6 * c_count] = np.array(ref_color_scores(rules, st, o)) / 128
    out[b + 3 + 7 * c_count] = (int(st["scores"][p]) - int(st["scores"][o])) / 256
    out[b + 4 + 7 * c_count] = st["turn"] * rules.turn_scale
    return out


def check_invariants(rules, st):
    n, h = rules.n_cards, rules.hand_size
    places = np.zeros(n, dtype=int)
    places[st["deck"][st["deck_pos"] :]] += 1
    for p in range(2):
        hand = st["hands"][p]
        assert np.all(np.diff(hand.astype(int)) >= 0), hand
        live = hand[hand < n]
        expected = h - int(st["phase"] == 1 and st["current_player"] == p)
        assert len(live) == expected
        places[live] += 1
        places += st["expedition_cards"][p]
        assert not np.any(st["known_cards"][p] & ~np.isin(np.arange(n), live))
        assert st["scores"][p] == sum(ref_color_scores(rules, st, p))
    for c in range(rules.n_colors):
        pile = st["discards"][c]
        size = st["pile_sizes"][c]
        assert np.all(pile[size:] == n)
        assert all(rules.card_color(int(x)) == c for x in pile[:size])
        places[pile[:size]] += 1
    assert np.all(places == 1), places


def assert_state_equal(a, b):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)
        assert a[key].dtype == b[key].dtype, key


def small_game(p0, p1, rest, rules=SMALL):
    """A game dealt from hand-built hands (p0 then p1) and deck remainder."""
    game = cy.CyGame(rules)
    game.deal_from_order(np.array(list(p0) + list(p1) + list(rest)))
    return game


def play(game, actions):
    for a in actions:
        game.apply(a)


# --------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------

EDGE_WORDS = [0, 1, 2, 0x7FFFFFFF, 0x80000000, 0x9747B28C, 2**32 - 2, 2**32 - 1]


def test_random_bits_matches_python_reference():
    gen = np.random.default_rng(0)
    cases = [(w, w, w, w, w) for w in EDGE_WORDS]
    cases += [tuple(gen.choice(EDGE_WORDS, 5)) for _ in range(50)]
    cases += [tuple(int(v) for v in gen.integers(0, 2**32, 5)) for _ in range(300)]
    for words in cases:
        words = tuple(int(w) for w in words)
        assert cy.random_bits(*words) == rng.random_bits_py(*words), words


def test_random_bits_takes_words_modulo_2_32():
    assert cy.random_bits(2**32 + 5, -1, 0, 0, 1) == rng.random_bits_py(5, 2**32 - 1, 0, 0, 1)


def test_random_bits_array_matches_python_reference():
    gen = np.random.default_rng(1)
    words = gen.integers(0, 2**32, size=(5, 500), dtype=np.uint32)
    words[:, :8] = np.array(EDGE_WORDS, dtype=np.uint32)
    out = cy.random_bits_array(*words)
    assert out.dtype == np.uint32 and out.shape == (500,)
    expected = [rng.random_bits_py(*(int(w) for w in words[:, i])) for i in range(500)]
    np.testing.assert_array_equal(out, np.array(expected, dtype=np.uint32))
    with pytest.raises(ValueError, match="equal-length"):
        cy.random_bits_array(words[0], words[1], words[2], words[3], words[4][:-1])


def test_uniform_and_below():
    for bits in [0, 255, 256, 0x12345678, 2**32 - 1]:
        assert cy.uniform(bits) == (bits >> 8) * 2.0**-24
        for n in [1, 2, 3, 7, 22, 256]:
            assert cy.below(bits, n) == ((bits >> 8) * n) >> 24
            assert 0 <= cy.below(bits, n) < n
    assert cy.uniform(2**32 - 1) < 1.0


# --------------------------------------------------------------------------------------
# Deal
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rules",
    [Rules(), SMALL, Rules(n_colors=1, n_ranks=3, n_wagers=0, hand_size=1), Rules(n_colors=6)],
)
def test_deal_matches_reference_order(rules):
    game = cy.CyGame(rules)
    n, h = rules.n_cards, rules.hand_size
    for seed, index, iteration in [(0, 0, 0), (1, 2, 3), (2**32 - 1, 7, 0), (42, 2**32 - 1, 9)]:
        game.deal(seed, index, iteration)
        st = game.state_dict()
        expected = rng.deal_order(n, seed, index, iteration)
        np.testing.assert_array_equal(st["deck"], expected)
        np.testing.assert_array_equal(st["hands"][0], np.sort(expected[:h]))
        np.testing.assert_array_equal(st["hands"][1], np.sort(expected[h : 2 * h]))
        assert st["deck_pos"] == 2 * h and st["turn"] == 0 and st["phase"] == 0
        assert st["current_player"] == 0 and st["forbidden_pile"] == -1
        assert not st["terminal"] and not st["truncated"]
        np.testing.assert_array_equal(st["expedition_top"], -1)
        np.testing.assert_array_equal(st["discards"], n)
        assert game.scores() == (0, 0)
        check_invariants(rules, st)


def test_deal_default_iteration_is_zero():
    a, b = cy.CyGame(Rules()), cy.CyGame(Rules())
    a.deal(5, 6)
    b.deal(5, 6, 0)
    assert_state_equal(a.state_dict(), b.state_dict())


def test_state_dict_names_shapes_dtypes():
    for rules in (Rules(), SMALL):
        game = cy.CyGame(rules)
        game.deal(3, 4)
        st = game.state_dict()
        assert set(st) == set(STATE_SPEC)
        for key, (dtype, shape) in STATE_SPEC.items():
            assert st[key].dtype == dtype, key
            assert st[key].shape == shape(rules), key


def test_deal_from_order_validates():
    game = cy.CyGame(SMALL)
    with pytest.raises(ValueError, match="10"):
        game.deal_from_order(np.arange(9))
    with pytest.raises(ValueError, match="permutation"):
        game.deal_from_order(np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 8]))
    with pytest.raises(ValueError, match="outside"):
        game.deal_from_order(np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, 10]))
    with pytest.raises(ValueError, match="undealt|no game dealt"):
        game.apply(0)
    game.deal_from_order(np.arange(10)[::-1])
    np.testing.assert_array_equal(game.state_dict()["hands"], [[7, 8, 9], [4, 5, 6]])


def test_rules_that_do_not_fit_are_refused():
    with pytest.raises(ValueError, match="min_rank"):
        cy.CyGame(Rules(min_rank=10**8))
    fake = types.SimpleNamespace(**{**Rules().to_dict(), "n_colors": 7})
    with pytest.raises(ValueError, match="n_colors"):
        cy.CyGame(fake)
    fake = types.SimpleNamespace(**{**Rules().to_dict(), "hand_size": 30})
    with pytest.raises(ValueError, match="hand_size"):
        cy.CyGame(fake)


# --------------------------------------------------------------------------------------
# Hand-checked rules on the small variant
# --------------------------------------------------------------------------------------


def test_wager_after_numbered_card_refused_and_ranks_strictly_ascend():
    # p0 holds 0 (wager), 1 (rank 0), 3 (rank 2); the deck gives p0 card 2 (rank 1).
    game = small_game([0, 1, 3], [5, 6, 7], [2, 8, 4, 9])
    play(game, [PLAY[1], DECK])  # p0 plays card 1 (rank 0); draws 2: hand [0, 2, 3]
    play(game, [DISCARD[0], DECK])  # p1 discards 5, draws 8
    before = game.state_dict()
    with pytest.raises(ValueError, match="wager after a numbered card") as err:
        game.apply(PLAY[0])
    assert "action 0" in str(err.value) and "CARD" in str(err.value)
    assert_state_equal(before, game.state_dict())
    game.apply(PLAY[2])  # card 3 (rank 2) over top 0
    st = game.state_dict()
    assert st["expedition_top"][0, 0] == 2 and st["expedition_numbered"][0, 0] == 2
    assert st["expedition_sum"][0, 0] == 2 + 4
    game.apply(DECK)  # p0 draws 4: hand [0, 2, 4]
    play(game, [PLAY[0], PILE[1]])  # p1 plays 6, takes 5 back from pile 1
    before = game.state_dict()
    assert list(before["hands"][0]) == [0, 2, 4]
    with pytest.raises(ValueError, match="rank not above the expedition's top"):
        game.apply(PLAY[1])  # card 2 is rank 1 <= top 2
    assert_state_equal(before, game.state_dict())
    mask = game.legal_mask_array()
    np.testing.assert_array_equal(mask, [False, False, True, True, True, True, False, False, False])
    game.apply(PLAY[2])  # card 4 is rank 3 > 2
    assert game.state_dict()["expedition_top"][0, 0] == 3


def test_wagers_stack_before_numbers():
    rules = Rules(n_colors=2, n_ranks=4, n_wagers=2, hand_size=3, max_turns=20)
    # colour 0: 0, 1 wagers, 2..5 ranks; colour 1: 6, 7 wagers, 8..11 ranks
    game = small_game([0, 1, 2], [6, 7, 8], [3, 9, 4, 10, 5, 11], rules)
    play(game, [0, 6, 0, 6, 0, 6])  # p0 wager 0, p1 wager 6, p0 wager 1
    st = game.state_dict()
    assert st["expedition_wagers"][0, 0] == 2 and st["expedition_wagers"][1, 1] == 1
    assert game.scores() == ((0 - 20) * 3, (0 - 20) * 2)


def test_forbidden_pile_this_turn_but_not_next():
    game = small_game([0, 1, 3], [5, 6, 7], [2, 8, 4, 9])
    game.apply(DISCARD[2])  # p0 discards card 3 onto pile 0
    st = game.state_dict()
    assert st["forbidden_pile"] == 0 and st["pile_sizes"][0] == 1 and st["discards"][0, 0] == 3
    before = game.state_dict()
    with pytest.raises(ValueError, match="pile 0 is the one just discarded to") as err:
        game.apply(PILE[0])
    assert "DRAW" in str(err.value) and "action 7" in str(err.value)
    with pytest.raises(ValueError, match="pile 1 is empty"):
        game.apply(PILE[1])
    assert_state_equal(before, game.state_dict())
    assert list(np.flatnonzero(game.legal_mask_array())) == [DECK]
    game.apply(DECK)  # p0 draws 2
    assert game.state_dict()["forbidden_pile"] == -1
    play(game, [PLAY[0], DECK])  # p1 plays wager 5, draws 8
    play(game, [PLAY[0], PILE[0]])  # p0 plays wager 0, takes card 3 back from pile 0
    st = game.state_dict()
    assert st["pile_sizes"][0] == 0 and st["discards"][0, 0] == SMALL.n_cards
    assert st["known_cards"][0, 3] and st["known_cards"].sum() == 1
    assert list(st["hands"][0]) == [1, 2, 3]
    assert st["deck_pos"] == 8  # the pile draw left the deck alone
    # Player 1 sees card 3 as known in p0's hand, and p0 sees that it was shown; playing it
    # clears the flag.
    enc = game.encode_array(1)
    assert enc[5 * SMALL.n_cards + 3] == 1.0
    shown = game.encode_array(0)[7 * SMALL.n_cards : 8 * SMALL.n_cards]  # own_known of p0
    assert np.flatnonzero(shown).tolist() == [3]
    play(game, [DISCARD[0], DECK])  # p1
    game.apply(PLAY[2])  # p0 plays card 3 (rank 2)
    assert not game.state_dict()["known_cards"][0, 3]


def test_bonus_after_multiplier_with_wagers_counting():
    rules = Rules(
        n_colors=2,
        n_ranks=4,
        n_wagers=1,
        hand_size=3,
        bonus_threshold=3,
        bonus_amount=20,
        expedition_penalty=-20,
        max_turns=20,
    )
    game = small_game([0, 1, 4], [5, 6, 7], [2, 3, 8, 9], rules)
    assert game.scores() == (0, 0)  # empty expeditions score 0
    play(game, [PLAY[0], DECK])  # p0 wager: (0 - 20) * 2 = -40; draws 2 -> [1, 2, 4]
    assert game.scores() == (-40, 0)
    play(game, [DISCARD[0], DECK])  # p1 discards 5 to pile 1, draws 3 -> [3, 6, 7]
    play(game, [PLAY[0], DECK])  # p0 plays 1 (value 2): (2 - 20) * 2 = -36; draws 8
    assert game.scores() == (-36, 0)
    play(game, [PLAY[1], PILE[1]])  # p1 plays 6 (value 2): -18; takes 5 back
    assert game.scores() == (-36, -18)
    play(game, [PLAY[1]])  # p0 plays 4 (value 5): (7 - 20) * 2 + 20 = -6, colour 1 empty
    assert game.scores() == (-6, -18)
    st = game.state_dict()
    assert st["expedition_sum"][0, 0] == 7 and st["expedition_wagers"][0, 0] == 1
    assert st["expedition_numbered"][0, 0] == 2
    np.testing.assert_array_equal(game.returns(), np.array([12, -12], dtype=np.float32))
    assert game.returns().dtype == np.float32


def test_game_ends_on_last_deck_draw():
    game = small_game([0, 1, 2], [5, 6, 7], [3, 4, 8, 9])
    for turn in range(4):
        assert not game.terminal
        play(game, [DISCARD[0], DECK])
        assert game.turn == turn + 1
    assert game.terminal and not game.truncated
    st = game.state_dict()
    assert st["deck_pos"] == SMALL.n_cards and st["terminal"] and not st["truncated"]
    assert not game.legal_mask_array().any()
    before = game.state_dict()
    for action in (0, DISCARD[0], DECK, PILE[0], -1, 99):
        with pytest.raises(ValueError, match="game is over"):
            game.apply(action)
    assert_state_equal(before, game.state_dict())


def test_truncation_at_max_turns():
    rules = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=2)
    game = small_game([0, 1, 2], [5, 6, 7], [3, 4, 8, 9], rules)
    play(game, [DISCARD[0], DECK, DISCARD[0], DECK])
    assert game.terminal and game.truncated and game.turn == 2
    assert game.state_dict()["deck_pos"] == 8
    # The deck running out on the max_turns-th turn is a natural end, not a truncation.
    rules = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=4)
    game = small_game([0, 1, 2], [5, 6, 7], [3, 4, 8, 9], rules)
    play(game, [DISCARD[0], DECK] * 4)
    assert game.terminal and not game.truncated


def test_pile_draws_do_not_shorten_the_deck_and_truncate():
    rules = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=6)
    game = small_game([0, 1, 2], [5, 6, 7], [3, 4, 8, 9], rules)
    play(game, [DISCARD[0], DECK])  # p0: 0 to pile 0, draws 3 -> [1, 2, 3]
    play(game, [DISCARD[0], PILE[0]])  # p1: 5 to pile 1, takes 0 -> [0, 6, 7]
    play(game, [DISCARD[0], PILE[1]])  # p0: 1 to pile 0, takes 5 -> [2, 3, 5]
    play(game, [DISCARD[1], PILE[0]])  # p1: 6 to pile 1, takes 1 -> [0, 1, 7]
    play(game, [DISCARD[0], PILE[1]])  # p0: 2 to pile 0, takes 6 -> [3, 5, 6]
    assert not game.terminal
    play(game, [DISCARD[2], PILE[0]])  # p1: 7 to pile 1, takes 2 -> [0, 1, 2]
    assert game.terminal and game.truncated and game.turn == 6
    st = game.state_dict()
    assert st["deck_pos"] == 7
    np.testing.assert_array_equal(st["hands"], [[3, 5, 6], [0, 1, 2]])
    np.testing.assert_array_equal(st["known_cards"][1], np.isin(np.arange(10), [0, 1, 2]))
    np.testing.assert_array_equal(st["known_cards"][0], np.isin(np.arange(10), [5, 6]))


def test_illegal_actions_messages_and_state_untouched():
    game = small_game([0, 1, 3], [5, 6, 7], [2, 8, 4, 9])
    before = game.state_dict()
    cases = [
        (-1, "action out of range"),
        (SMALL.num_actions, "action out of range"),
        (DECK, "draw action in the CARD phase"),
        (PILE[1], "draw action in the CARD phase"),
    ]
    for action, reason in cases:
        with pytest.raises(ValueError, match=reason) as err:
            game.apply(action)
        assert f"action {action}" in str(err.value) and "CARD" in str(err.value)
        assert_state_equal(before, game.state_dict())
    with pytest.raises(ValueError, match="not an integer"):
        game.apply("x")
    game.apply(PLAY[1])
    before = game.state_dict()
    with pytest.raises(ValueError, match="card action in the DRAW phase") as err:
        game.apply(PLAY[0])
    assert "DRAW" in str(err.value)
    assert_state_equal(before, game.state_dict())


def test_empty_expedition_scores_zero():
    rules = Rules(
        n_colors=2,
        n_ranks=4,
        n_wagers=1,
        hand_size=3,
        expedition_penalty=-20,
        bonus_threshold=1,
        bonus_amount=50,
    )
    game = small_game([0, 1, 3], [5, 6, 7], [2, 8, 4, 9], rules)
    assert game.scores() == (0, 0)
    play(game, [DISCARD[0], DECK])
    assert game.scores() == (0, 0)
    game.apply(PLAY[0])  # p1 wager 5: (0 - 20) * 2 + 50 (threshold 1)
    assert game.scores() == (0, 10)


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------


def test_encoding_offsets_hand_built_position():
    rules = SMALL  # N = 10, C = 2, size 8N + 7C + 5 = 99; deck scale 1/4, turn scale 1/32
    n, c_count = 10, 2
    assert rules.encoding_size == 99
    game = small_game([0, 1, 4], [5, 6, 7], [2, 3, 8, 9])
    play(game, [PLAY[0], DECK])  # p0 wager 0; draws 2 -> [1, 2, 4]
    play(game, [DISCARD[0], DECK])  # p1 discards 5 to pile 1; draws 3 -> [3, 6, 7]
    play(game, [PLAY[0], DECK])  # p0 plays 1; draws 8 -> [2, 4, 8]
    play(game, [PLAY[1], PILE[1]])  # p1 plays 6; takes 5 back (known) -> [3, 5, 7]
    game.apply(DISCARD[2])  # p0 discards 8 to pile 1; DRAW phase, forbidden 1
    # p0: hand [2, 4], expedition {0, 1} in colour 0 (wager + value 2, top rank 0),
    # p1: hand [3, 5, 7], expedition {6} in colour 1, known {5}. Pile 1 = [8].
    assert game.scores() == (-36, -18)
    enc = game.encode_array(0)
    assert enc.dtype == np.float32 and enc.shape == (99,)
    hot = {
        "hand": [2, 4],
        "own_expedition": [0, 1],
        "opp_expedition": [6],
        "discards": [8],
        "discard_tops": [8],
        "opp_known": [5],
        "playable": [2, 4],  # rank 1 and rank 3 over top 0
        "own_known": [],  # p0 drew from the deck only
    }
    for block, (name, cards) in enumerate(hot.items()):
        expected = np.zeros(n, dtype=np.float32)
        expected[cards] = 1
        np.testing.assert_array_equal(enc[block * n : (block + 1) * n], expected, err_msg=name)
    b = 8 * n
    assert enc[b] == (10 - 9) / 4  # deck_remaining: three deck draws
    assert list(enc[b + 1 : b + 3]) == [0, 1]  # DRAW phase
    assert list(enc[b + 3 : b + 5]) == [0, 1]  # forbidden pile 1
    assert list(enc[b + 3 + c_count : b + 3 + 2 * c_count]) == [0.25, 0]  # own wagers
    assert list(enc[b + 3 + 2 * c_count : b + 3 + 3 * c_count]) == [0, 0]  # opp wagers
    assert list(enc[b + 3 + 3 * c_count : b + 3 + 4 * c_count]) == [2 / 16, 0]  # own count
    assert list(enc[b + 3 + 4 * c_count : b + 3 + 5 * c_count]) == [0, 1 / 16]  # opp count
    assert list(enc[b + 3 + 5 * c_count : b + 3 + 6 * c_count]) == [-36 / 128, 0]
    assert list(enc[b + 3 + 6 * c_count : b + 3 + 7 * c_count]) == [0, -18 / 128]
    assert enc[b + 3 + 7 * c_count] == (-36 + 18) / 256
    assert enc[b + 4 + 7 * c_count] == 4 / 32  # turn 4, max_turns 20 -> 2^-5
    # Player 1's view of the same state.
    enc1 = game.encode_array(1)
    assert np.flatnonzero(enc1[:n]).tolist() == [3, 5, 7]
    assert np.flatnonzero(enc1[n : 2 * n]).tolist() == [6]
    assert np.flatnonzero(enc1[5 * n : 6 * n]).tolist() == []  # p0 holds no known card
    assert np.flatnonzero(enc1[6 * n : 7 * n]).tolist() == [3, 7]  # wager 5 after number
    assert np.flatnonzero(enc1[7 * n : 8 * n]).tolist() == [5]  # p0 saw p1 take 5 back
    assert enc1[b + 3 + 7 * c_count] == 18 / 256
    # encode() writes the same into a caller's buffer.
    buf = np.full(99, 7.0, dtype=np.float32)
    game.encode(0, buf)
    np.testing.assert_array_equal(buf, enc)
    with pytest.raises(ValueError, match="length"):
        game.encode(0, np.zeros(98, dtype=np.float32))
    with pytest.raises(ValueError, match="player"):
        game.encode_array(2)


def test_legal_mask_into_buffer():
    game = cy.CyGame(Rules())
    game.deal(0, 0)
    buf = np.full(game.num_actions, 9, dtype=np.uint8)
    count = game.legal_mask(buf)
    np.testing.assert_array_equal(buf.astype(bool), game.legal_mask_array())
    assert set(np.unique(buf)) <= {0, 1} and count == buf.sum()
    assert game.legal_mask_array().dtype == np.bool_
    as_bool = np.zeros(game.num_actions, dtype=np.bool_)
    game.legal_mask(as_bool)
    np.testing.assert_array_equal(as_bool, game.legal_mask_array())
    with pytest.raises(ValueError, match="length"):
        game.legal_mask(np.zeros(game.num_actions + 1, dtype=np.uint8))


def test_properties():
    rules = Rules()
    game = cy.CyGame(rules)
    assert game.num_actions == rules.num_actions == 22
    assert game.encoding_size == rules.encoding_size == 520
    game.deal(1, 1)
    assert (game.current_player, game.phase, game.turn) == (0, 0, 0)
    assert game.terminal is False and game.truncated is False


# --------------------------------------------------------------------------------------
# Random play against the reference
# --------------------------------------------------------------------------------------


def random_action(game, seed, iteration, g, d):
    legal = np.flatnonzero(game.legal_mask_array())
    bits = rng.random_bits_py(seed, iteration, g, d, rng.Purpose.RANDOM_PLAY)
    return int(legal[((bits >> 8) * len(legal)) >> 24])


@pytest.mark.parametrize(
    "rules",
    [SMALL, Rules(n_colors=3, n_ranks=5, n_wagers=2, hand_size=4, bonus_threshold=4, max_turns=30)],
)
def test_random_games_follow_reference(rules):
    game = cy.CyGame(rules)
    for g in range(6):
        game.deal(11, g, 2)
        st = game.state_dict()
        d = 0
        while not game.terminal:
            check_invariants(rules, st)
            mask = game.legal_mask_array()
            np.testing.assert_array_equal(mask, ref_legal(rules, st))
            for p in (0, 1):
                np.testing.assert_array_equal(
                    game.encode_array(p), ref_encoding(rules, st, p).astype(np.float32)
                )
            for a in np.flatnonzero(~mask)[:3]:
                with pytest.raises(ValueError):
                    game.apply(int(a))
            assert_state_equal(st, game.state_dict())
            action = random_action(game, 11, 2, g, d)
            game.apply(action)
            st_next = game.state_dict()
            assert_state_equal(ref_apply(rules, st, action), st_next)
            st = st_next
            d += 1
        check_invariants(rules, st)
        assert not game.legal_mask_array().any()


def test_play_random_games_matches_python_replay():
    rules = Rules()
    seed, iteration, first, n_games = 9, 4, 3, 3
    result = cy.play_random_games(rules, seed, iteration, first, n_games, with_encoding_sum=True)
    decisions = truncated = diff = checksum = 0
    encoding_sum = 0.0
    game = cy.CyGame(rules)
    for g in range(first, first + n_games):
        game.deal(seed, g, iteration)
        d = 0
        while not game.terminal:
            encoding_sum += float(game.encode_array(game.current_player).astype(np.float64).sum())
            action = random_action(game, seed, iteration, g, d)
            game.apply(action)
            d += 1
            checksum = (checksum + d * action) % 2**32
        decisions += d
        truncated += game.truncated
        s0, s1 = game.scores()
        diff += s0 - s1
    assert result == {
        "decisions": decisions,
        "games": n_games,
        "truncated": truncated,
        "score_diff_sum": diff,
        "checksum": checksum,
        "encoding_sum": encoding_sum,
    }


def test_play_random_games_is_deterministic():
    a = cy.play_random_games(Rules(), 1, 0, 0, 50)
    b = cy.play_random_games(Rules(), 1, 0, 0, 50)
    c = cy.play_random_games(Rules(), 2, 0, 0, 50)
    assert a == b and a != c
    assert set(a) == {"decisions", "games", "truncated", "score_diff_sum", "checksum"}
    assert a["games"] == 50 and a["decisions"] >= 50 * 2 * 44
    # Game g's stream does not depend on which batch plays it.
    halves = [
        cy.play_random_games(Rules(), 1, 0, 0, 25),
        cy.play_random_games(Rules(), 1, 0, 25, 25),
    ]
    for key in ("decisions", "truncated", "score_diff_sum"):
        assert a[key] == halves[0][key] + halves[1][key]
    assert a["checksum"] == (halves[0]["checksum"] + halves[1]["checksum"]) % 2**32
    small = cy.play_random_games(SMALL, 0, 0, 0, 100)
    assert small["games"] == 100 and small["decisions"] > 0


# --------------------------------------------------------------------------------------
# Copies
# --------------------------------------------------------------------------------------


def test_clone_and_copy_from_are_independent():
    game = cy.CyGame(Rules())
    game.deal(3, 3)
    start = game.state_dict()
    twin = game.clone()
    twin.apply(int(np.flatnonzero(twin.legal_mask_array())[0]))
    assert_state_equal(start, game.state_dict())
    assert twin.phase == 1 and game.phase == 0
    saved = game.clone()
    for d in range(10):
        game.apply(random_action(game, 0, 0, 0, d))
    after = game.state_dict()
    game.copy_from(saved)  # undo
    assert_state_equal(start, game.state_dict())
    saved.apply(int(np.flatnonzero(saved.legal_mask_array())[0]))
    assert_state_equal(start, game.state_dict())  # the source stays separate
    assert not np.array_equal(after["hands"], start["hands"]) or after["turn"] != 0
    with pytest.raises(ValueError, match="same rules"):
        game.copy_from(cy.CyGame(SMALL))
    assert cy.CyGame(Rules()).clone().terminal  # an undealt game clones undealt


def test_pickle_round_trip():
    game = cy.CyGame(Rules())
    game.deal(4, 5)
    for d in range(7):
        game.apply(random_action(game, 4, 0, 5, d))
    restored = pickle.loads(pickle.dumps(game))
    assert restored.rules == game.rules
    assert_state_equal(game.state_dict(), restored.state_dict())
    np.testing.assert_array_equal(restored.encode_array(1), game.encode_array(1))
    restored.apply(int(np.flatnonzero(restored.legal_mask_array())[0]))
    assert restored.turn != game.turn or restored.phase != game.phase
