"""The opponent bots (docs/bots.md): hand-checked choices, JAX vs Cython parity, legality,
and games that always end.

Every hand-built position asks both implementations and checks that they agree with each
other and with the choice worked out by hand from the rules in docs/bots.md.
"""

from __future__ import annotations

import functools
import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lc_cfr.bots import BOT_NAMES, BOT_PARAMS, NOISE_THRESHOLD, check_bot_name, jax_bots, py_bots
from lc_cfr.game import cy_engine, engine, rng
from lc_cfr.game.rules import Rules

DEFAULT = Rules()
SAFE_FAMILY = ("safe_heuristic", "safe_heuristic_loose", "safe_heuristic_strict")
SEED = 20261130
BOT_ITERATION = 3  # the `iteration` word of the bots' randomness in these tests


# ---- helpers -------------------------------------------------------------------------


def card(rules: Rules, color: int, value: int) -> int:
    """Id of the numbered card of face value `value` in `color`."""
    return color * rules.cards_per_color + rules.n_wagers + value - rules.min_rank


def wager(rules: Rules, color: int, j: int = 0) -> int:
    return color * rules.cards_per_color + j


def deck_with(rules: Rules, hand0, hand1, draws=()) -> np.ndarray:
    """A deck dealing these hands, then `draws` in order, then every other card ascending."""
    head = list(hand0) + list(hand1) + list(draws)
    assert len(set(head)) == len(head)
    rest = [x for x in range(rules.n_cards) if x not in set(head)]
    return np.array(head + rest, dtype=np.int8)


_jax_step = jax.jit(engine.step, static_argnums=0)
_jax_action = jax.jit(jax_bots.bot_action, static_argnums=(0, 1))


class Position:
    """The same game on both engines, advanced together."""

    def __init__(self, rules: Rules, deck):
        self.rules = rules
        self.state = engine.init_from_deck(rules, jnp.asarray(deck))
        self.game = cy_engine.CyGame(rules)
        self.game.deal_from_order(np.asarray(deck))

    def apply(self, *actions):
        for action in actions:
            assert self.game.legal_mask_array()[action], action
            self.game.apply(action)
            self.state = _jax_step(self.rules, self.state, action)
        return self

    def hand(self, player=None) -> list[int]:
        player = self.game.current_player if player is None else player
        return [int(x) for x in self.game.state_dict()["hands"][player]]

    def choose(self, name: str, decision: int = 0) -> int:
        """Both implementations' choice; they must agree."""
        cy = py_bots.bot_action(self.rules, name, self.game, SEED, BOT_ITERATION, 7, decision)
        jx = int(_jax_action(self.rules, name, self.state, SEED, BOT_ITERATION, 7, decision))
        assert cy == jx, (name, cy, jx)
        assert self.game.legal_mask_array()[cy]
        return cy


# ---- names ---------------------------------------------------------------------------


def test_names_and_check():
    assert BOT_NAMES == (
        "random",
        "passive_discard",
        "safe_heuristic",
        "safe_heuristic_loose",
        "safe_heuristic_strict",
        "noisy_safe",
    )
    assert set(BOT_PARAMS) == set(BOT_NAMES)
    for name in BOT_NAMES:
        assert check_bot_name(name, "evaluation.opponents") == name
    with pytest.raises(ValueError, match="traversal.opponent_policy") as info:
        check_bot_name("safe", "traversal.opponent_policy")
    for name in BOT_NAMES:
        assert name in str(info.value)
    with pytest.raises(ValueError, match="name"):
        jax_bots.bot_action(DEFAULT, "nobody", None, 0, 0, 0, 0)


def test_cython_entry_point_refuses_bad_calls():
    game = cy_engine.CyGame(DEFAULT)
    with pytest.raises(ValueError, match="undealt"):
        py_bots.bot_action(DEFAULT, "random", game, 0, 0, 0, 0)
    game.deal(SEED, 0)
    with pytest.raises(ValueError, match="name"):
        py_bots.bot_action(DEFAULT, "nobody", game, 0, 0, 0, 0)
    with pytest.raises(ValueError, match="rules"):
        py_bots.bot_action(Rules(max_turns=7), "random", game, 0, 0, 0, 0)


# ---- hand-built positions ------------------------------------------------------------


def _strong_colour_position():
    """Player 0 holds a wager with 5, 7, 8, 9, 10 of colour 0, and colour-1 2, colour-2 3."""
    r = DEFAULT
    hand0 = [wager(r, 0)] + [card(r, 0, v) for v in (5, 7, 8, 9, 10)]
    hand0 += [card(r, 1, 2), card(r, 2, 3)]
    hand1 = [card(r, 0, 2), card(r, 1, 9), card(r, 2, 9), card(r, 3, 2), card(r, 3, 5)]
    hand1 += [card(r, 4, v) for v in (2, 3, 4)]
    draws = [card(r, 1, 10), card(r, 2, 10), card(r, 4, 10), card(r, 4, 9)]
    return Position(r, deck_with(r, hand0, hand1, draws))


def test_safe_bots_wager_on_a_strong_colour_and_passive_discards():
    pos = _strong_colour_position()
    hand = pos.hand()
    assert hand[0] == wager(DEFAULT, 0)
    # projection of colour 0: 39 - 20 = 19 points in hand, above every wager margin
    for name in SAFE_FAMILY:
        assert pos.choose(name) == 0, name  # play slot 0, the wager
    # passive: keep(colour 1's 2) = 2 + help 1 = 3 is the cheapest discard (slot 6)
    assert hand[6] == card(DEFAULT, 1, 2)
    assert pos.choose("passive_discard") == DEFAULT.hand_size + 6


def test_safe_bots_do_not_open_weak_colours_and_discard_the_least_useful_card():
    r = DEFAULT
    hand0 = [card(r, 0, 2), card(r, 0, 3), card(r, 1, 4), card(r, 2, 6), card(r, 2, 7)]
    hand0 += [card(r, 3, 8), card(r, 4, 9), card(r, 4, 10)]
    hand1 = [card(r, 0, v) for v in (4, 5, 6, 7)] + [card(r, 1, v) for v in (5, 6, 7, 8)]
    pos = Position(r, deck_with(r, hand0, hand1))
    # No colour projects to its open margin (colour 0: 5 - 20 + 49 * 44 / 104 = 5.7 < 8 for
    # the loose bot), so every safe bot discards. Costs keep + help: colour-0 2 and 3 and
    # colour-1 4 cost 5 + 1, 5 + 1 and 4 + 2; the lowest slot wins the tie.
    for name in SAFE_FAMILY + ("passive_discard",):
        assert pos.choose(name) == r.hand_size + 0, name


def test_draws_a_useful_discard_then_plays_it_and_ignores_useless_piles():
    r = DEFAULT
    h = r.hand_size
    pos = _strong_colour_position()
    pos.apply(0)  # player 0 plays the colour-0 wager
    assert pos.choose("safe_heuristic") == r.draw_deck_action  # no pile to draw from
    pos.apply(r.draw_deck_action)  # draws colour-1 10
    hand1 = pos.hand()
    pos.apply(h + hand1.index(card(r, 0, 2)), r.draw_deck_action)  # player 1 throws colour-0 2

    # Player 0: colour 0's lowest live card is the 5 with the 3 and 4 unseen below it
    # (gap 2 > 1 allowed while the deck holds more than 24 cards): no play. Colour 1 (2, 10)
    # projects to 12 - 20 + 42 * 42 / (2 * 50) = 9.6 points: below the open margin of
    # safe_heuristic (20) and strict (30), above loose's (8), which opens with the 2.
    # The others discard the cheapest card: colour-2 3 (keep 3 + help 1).
    hand0 = pos.hand()
    assert hand0[5] == card(r, 1, 2) and hand0[7] == card(r, 2, 3)
    assert pos.choose("safe_heuristic") == h + 7
    assert pos.choose("safe_heuristic_strict") == h + 7
    assert pos.choose("safe_heuristic_loose") == 5
    pos.apply(h + 7)
    # Draw: pile 0's 2 is playable, below every live colour-0 card in hand, and skips
    # nothing: draw it (pile 2 is the one just discarded to, hence not legal anyway).
    for name in SAFE_FAMILY:
        assert pos.choose(name) == r.first_pile_action + 0, name
    assert pos.choose("passive_discard") == r.draw_deck_action
    pos.apply(r.first_pile_action + 0)

    hand1 = pos.hand()
    pos.apply(h + hand1.index(card(r, 3, 2)), r.draw_deck_action)  # player 1 throws colour-3 2
    # Player 0 plays the card it drew from the pile first (it is known to the opponent).
    hand0 = pos.hand()
    assert hand0[0] == card(r, 0, 2)
    assert pos.game.state_dict()["known_cards"][0][card(r, 0, 2)]
    for name in SAFE_FAMILY:
        assert pos.choose(name) == 0, name
    pos.apply(0)
    # Pile 3 holds colour-3 2 (colour 3 cannot be opened) and pile 2 colour-2 3 (same):
    # neither is useful, so the deck.
    for name in SAFE_FAMILY:
        assert pos.choose(name) == r.draw_deck_action, name


def test_continues_an_expedition_with_the_next_card():
    r = DEFAULT
    h = r.hand_size
    hand0 = [card(r, 0, v) for v in (2, 3, 4, 9)] + [card(r, 1, 2), card(r, 2, 2)]
    hand0 += [card(r, 3, 2), card(r, 4, 2)]
    hand1 = [card(r, 0, v) for v in (5, 6, 7, 8)] + [card(r, 1, v) for v in (5, 6, 7, 8)]
    pos = Position(r, deck_with(r, hand0, hand1, [card(r, 1, 10), card(r, 2, 10)]))
    pos.apply(0, r.draw_deck_action)  # player 0 opens colour 0 with its 2
    pos.apply(h + 0, r.draw_deck_action)  # player 1 throws colour-0 5
    hand0 = pos.hand()
    assert hand0[0] == card(r, 0, 3)
    for name in SAFE_FAMILY:
        assert pos.choose(name) == 0, name  # the 3 follows the 2 (gap 0)


def test_late_in_the_game_the_bot_plays_out_its_expedition():
    """With the deck nearly gone, skipping ranks is allowed: cards in hand score nothing."""
    r = Rules(n_colors=2, n_ranks=9, n_wagers=0, hand_size=4, max_turns=200)
    h = r.hand_size
    hand0 = [card(r, 0, 2), card(r, 0, 9), card(r, 1, 2), card(r, 1, 3)]
    hand1 = [card(r, 0, v) for v in (3, 4, 5, 6)]
    draws = [card(r, 1, 4), card(r, 0, 10)] + [card(r, 1, v) for v in (5, 6, 7, 8, 9, 10)]
    draws += [card(r, 0, 7), card(r, 0, 8)]
    pos = Position(r, deck_with(r, hand0, hand1, draws))
    pos.apply(0, r.draw_deck_action)  # player 0 opens colour 0 with its 2
    nine = card(r, 0, 9)
    # Player 1 keeps its colour-0 3..6 (it throws its highest card), player 0 keeps the 9
    # (it throws its lowest other card), both draw from the deck.
    while True:
        hand = pos.hand()
        if pos.game.current_player == 0:
            if r.n_cards - pos.game.deck_pos <= 2:
                break
            assert pos.choose("safe_heuristic") != hand.index(nine)  # too early to skip 3..8
            slot = next(i for i, x in enumerate(hand) if x != nine)
        else:
            slot = max(i for i, x in enumerate(hand) if x < r.n_cards)
        pos.apply(h + slot, r.draw_deck_action)
    # Six ranks between the 2 and the 9 are unseen (3..6 in player 1's hand, 7 and 8 in the
    # deck), but this is player 0's last turn: it plays the 9.
    hand0 = pos.hand()
    for name in SAFE_FAMILY:
        assert pos.choose(name) == hand0.index(nine), name


# ---- randomness ----------------------------------------------------------------------


def test_random_and_noisy_draws_follow_the_documented_counters():
    pos = _strong_colour_position()
    mask = pos.game.legal_mask_array()
    legal = np.flatnonzero(mask)
    noisy_seen = 0
    for decision in range(60):
        pick = rng.random_bits_py(SEED, BOT_ITERATION, 7, 2 * decision + 1, rng.Purpose.BOT_NOISE)
        expected_random = int(legal[((pick >> 8) * len(legal)) >> 24])
        assert pos.choose("random", decision) == expected_random
        coin = rng.random_bits_py(SEED, BOT_ITERATION, 7, 2 * decision, rng.Purpose.BOT_NOISE)
        noisy = (coin >> 8) < NOISE_THRESHOLD
        noisy_seen += noisy
        expected = expected_random if noisy else 0  # safe_heuristic plays the wager
        assert pos.choose("noisy_safe", decision) == expected
    assert noisy_seen > 0


def test_noise_rate_is_the_documented_probability():
    bits = np.array(
        [rng.random_bits_py(1, 2, 3, 2 * d, rng.Purpose.BOT_NOISE) for d in range(20000)],
        dtype=np.uint64,
    )
    rate = np.mean((bits >> 8) < NOISE_THRESHOLD)
    assert abs(rate - 0.1) < 0.01


# ---- parity on many states -----------------------------------------------------------

PARITY_VARIANTS = {
    "default": (DEFAULT, 28),
    "two_colors": (Rules(n_colors=2, n_ranks=5, n_wagers=1, hand_size=3, max_turns=40), 60),
    "six_colors": (Rules(n_colors=6, max_turns=120), 10),
}


def _cython_games(rules: Rules, n_games: int, random_share: float = 0.3):
    """Games mixing random play and every bot; every bot's choice at every decision."""
    actions, choices = [], []
    threshold = int(random_share * 2**24)
    for g in range(n_games):
        game = cy_engine.CyGame(rules)
        game.deal(SEED, g, 0)
        seats = (BOT_NAMES[g % 6], BOT_NAMES[(g // 6 + g) % 6])
        taken, seen, d = [], [], 0
        while not game.terminal:
            row = [
                py_bots.bot_action(rules, name, game, SEED, BOT_ITERATION, g, d)
                for name in BOT_NAMES
            ]
            mask = game.legal_mask_array()
            assert all(mask[a] for a in row)
            seen.append(row)
            coin = rng.random_bits_py(SEED, 0, g, d, rng.Purpose.RANDOM_PLAY)
            if (coin >> 8) < threshold:
                legal = np.flatnonzero(mask)
                bits = rng.random_bits_py(SEED, 1, g, d, rng.Purpose.RANDOM_PLAY)
                action = int(legal[((bits >> 8) * len(legal)) >> 24])
            else:
                action = row[BOT_NAMES.index(seats[game.current_player])]
            taken.append(action)
            game.apply(action)
            d += 1
        actions.append(taken)
        choices.append(np.array(seen, dtype=np.int32))
    return actions, choices


@functools.partial(jax.jit, static_argnums=0)
def _replay(rules: Rules, seed, games, actions):
    """States before each decision [T, B] of the given action sequences [B, T] (-1 = over)."""
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, seed, games, 0)

    def one(states, action):
        after = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, jnp.maximum(action, 0))
        return after, states

    _, seen = jax.lax.scan(one, states, actions.T)
    return seen


@functools.partial(jax.jit, static_argnums=0)
def _all_bots(rules: Rules, states, seed, games, decisions):
    """[len(BOT_NAMES), M] actions of every bot on a flat batch of states, and the masks."""
    rows = [
        jax_bots.batch_bot_action(rules, name, states, seed, BOT_ITERATION, games, decisions)
        for name in BOT_NAMES
    ]
    masks = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, states)
    return jnp.stack(rows), masks


@pytest.mark.parametrize("variant", sorted(PARITY_VARIANTS))
def test_jax_and_cython_bots_agree_on_many_states(variant):
    rules, n_games = PARITY_VARIANTS[variant]
    actions, choices = _cython_games(rules, n_games)
    horizon = max(len(a) for a in actions)
    padded = np.full((n_games, horizon), -1, np.int32)
    for g, taken in enumerate(actions):
        padded[g, : len(taken)] = taken
    seen = _replay(rules, rng.as_word(SEED), jnp.arange(n_games), jnp.asarray(padded))
    flat = jax.tree.map(lambda x: x.reshape((-1,) + x.shape[2:]), seen)
    games = jnp.tile(jnp.arange(n_games), horizon)
    decisions = jnp.repeat(jnp.arange(horizon), n_games)
    jax_rows, masks = _all_bots(rules, flat, rng.as_word(SEED), games, decisions)
    jax_rows = np.asarray(jax_rows).reshape(len(BOT_NAMES), horizon, n_games)
    masks = np.asarray(masks).reshape(horizon, n_games, -1)
    terminal = np.asarray(seen.terminal)

    states = 0
    for g, taken in enumerate(actions):
        n = len(taken)
        states += n
        assert not terminal[:n, g].any()
        assert terminal[n:, g].all() if n < horizon else True
        for b, name in enumerate(BOT_NAMES):
            ours = jax_rows[b, :n, g]
            np.testing.assert_array_equal(ours, choices[g][:, b], err_msg=f"{name}, game {g}")
            assert masks[np.arange(n), g, ours].all(), name
    assert states >= {"default": 2500, "two_colors": 600, "six_colors": 1000}[variant]


# ---- games end -----------------------------------------------------------------------


def _match_stats(rules: Rules, a: str, b: str, deals: int):
    turns, truncated, margins = [], 0, []
    for g in range(deals):
        for seat_a in (0, 1):
            names = (a, b) if seat_a == 0 else (b, a)
            game = py_bots.play_match(rules, names[0], names[1], SEED, g, 0, bot_iteration=seat_a)
            assert game.terminal
            turns.append(game.turn)
            truncated += game.truncated
            scores = game.scores()
            margins.append(scores[seat_a] - scores[1 - seat_a])
    return np.array(turns), truncated / (2 * deals), np.array(margins)


def test_every_pair_of_bots_finishes_its_games():
    for a in BOT_NAMES:
        for b in BOT_NAMES:
            turns, truncation, _ = _match_stats(DEFAULT, a, b, 100)
            assert (turns <= DEFAULT.max_turns).all()
            if "random" not in (a, b):
                assert truncation <= 0.01, (a, b, truncation)


def test_bots_never_stall_even_without_the_turn_cap():
    """With a turn cap far away, games without `random` end on their own, close to the 44
    turns of a game without pile draws (each pile draw of a safe bot is followed by a play
    of that card, so pile draws are few)."""
    rules = Rules(max_turns=10_000)
    dealt_deck = rules.n_cards - 2 * rules.hand_size
    for a in BOT_NAMES[1:]:
        for b in BOT_NAMES[1:]:
            turns, truncation, _ = _match_stats(rules, a, b, 100)
            assert truncation == 0
            assert turns.max() < 2 * dealt_deck, (a, b, turns.max())


def test_safe_heuristic_beats_random_and_passive_on_the_cython_engine():
    _, _, vs_random = _match_stats(DEFAULT, "safe_heuristic", "random", 500)
    assert np.mean(vs_random > 0) >= 0.99
    _, _, vs_passive = _match_stats(DEFAULT, "safe_heuristic", "passive_discard", 500)
    assert vs_passive.mean() > 20


def _load_league():
    path = pathlib.Path(__file__).resolve().parent.parent / "scripts" / "bot_league.py"
    spec = importlib.util.spec_from_file_location("bot_league", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_league_script_plays_the_same_games_as_the_cython_bots():
    league = _load_league()
    deals = 12
    result = league.play_pair(DEFAULT, "noisy_safe", "safe_heuristic_loose", SEED, deals)
    _, truncation, margins = _match_stats(DEFAULT, "noisy_safe", "safe_heuristic_loose", deals)
    # _match_stats orders games (deal, seat); the league orders them (seat, deal)
    by_seat = margins.reshape(deals, 2).T.reshape(-1)
    assert result["games"] == 2 * deals
    assert result["illegal_games"] == 0
    assert result["mean_margin"] == pytest.approx(by_seat.mean())
    assert result["win_rate"] == pytest.approx(np.mean(by_seat > 0))
    assert result["truncation_rate"] == pytest.approx(truncation)
