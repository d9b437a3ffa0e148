"""Property tests (hypothesis): invariants that hold in every state of every game.

Whole batches of random JAX games are checked at once (vectorised over decisions and
games), and hypothesis also drives the Cython engine with its own choice of moves.
"""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lc_cfr.game import cy_engine
from lc_cfr.game.random_play import record_random_games
from lc_cfr.game.rules import Rules

VARIANTS = [
    Rules(),
    Rules(n_colors=1, n_ranks=6, n_wagers=1, hand_size=2, max_turns=30),
    Rules(n_colors=2, n_ranks=5, n_wagers=0, hand_size=3, bonus_threshold=4, max_turns=40),
    Rules(n_colors=6, max_turns=60),
]
GAMES_PER_EXAMPLE = 128


def _card_tables(rules):
    cards = np.arange(rules.n_cards)
    within = cards % rules.cards_per_color
    is_wager = within < rules.n_wagers
    rank = np.where(is_wager, -1, within - rules.n_wagers)
    value = np.where(is_wager, 0, rules.min_rank + rank)
    return cards // rules.cards_per_color, is_wager, rank, value


def _recomputed_scores(rules, expedition_cards):
    """Scores from the sets of played cards alone: [..., 2]."""
    color, is_wager, _, value = _card_tables(rules)
    onehot = np.eye(rules.n_colors, dtype=np.int64)[color]  # [N, C]
    cards = expedition_cards.astype(np.int64)
    wagers = cards @ (onehot * is_wager[:, None])
    count = cards @ onehot
    total = cards @ (onehot * value[:, None])
    score = (total + rules.expedition_penalty) * (1 + wagers)
    score = score + np.where(count >= rules.bonus_threshold, rules.bonus_amount, 0)
    return np.where(count > 0, score, 0).sum(-1)


def _check_trajectory(rules, trajectory):
    s = jax.device_get(trajectory.states)
    n, h = rules.n_cards, rules.hand_size
    live = trajectory.actions >= 0  # [T, B]
    # card conservation: every card is in exactly one place
    counts = np.zeros(live.shape + (n + 1,), np.int64)
    positions = np.arange(n)
    in_deck = positions >= s.deck_pos[..., None]  # [T, B, N]: deck slots still to draw
    np.put_along_axis(counts, s.deck.astype(np.int64), in_deck.astype(np.int64), axis=-1)
    for held in (s.hands.reshape(live.shape + (-1,)), s.discards.reshape(live.shape + (-1,))):
        for k in range(held.shape[-1]):
            idx = held[..., k].astype(np.int64)
            counts += np.eye(n + 1, dtype=np.int64)[idx]
    counts[..., :n] += s.expedition_cards.sum(axis=2)
    assert (counts[..., :n] == 1).all(), "a card is missing or duplicated"
    # hands stay sorted, full in the CARD phase and one short in the DRAW phase
    assert (np.diff(s.hands.astype(np.int64), axis=-1) >= 0).all()
    held = (s.hands < n).sum(-1)  # [T, B, 2]
    mover_held = np.take_along_axis(held, s.current_player[..., None], axis=-1)[..., 0]
    assert (mover_held[live] == np.where(s.phase[live] == 0, h, h - 1)).all()
    # known cards are held cards
    in_hand = np.zeros(s.known_cards.shape, bool)
    for k in range(h):
        in_hand |= s.hands[..., k, None] == positions
    assert not (s.known_cards & ~in_hand).any()
    # expeditions only grow, strictly ascending, wagers only before numbers
    _, is_wager, rank, value = _card_tables(rules)
    grew = s.expedition_cards[1:] & ~s.expedition_cards[:-1]
    assert not (s.expedition_cards[:-1] & ~s.expedition_cards[1:]).any()
    assert (np.diff(s.expedition_top, axis=0) >= 0).all()
    color = positions // rules.cards_per_color
    top_before = s.expedition_top[:-1][..., color]  # [T-1, B, 2, N]
    numbered_before = s.expedition_numbered[:-1][..., color]
    assert not (grew & ~is_wager & (rank <= top_before)).any(), "rank not above the top"
    assert not (grew & is_wager & (numbered_before > 0)).any(), "wager after a number"
    # cached statistics and scores equal those recomputed from the cards
    np.testing.assert_array_equal(s.scores, _recomputed_scores(rules, s.expedition_cards))
    total = (s.expedition_cards * value).reshape(live.shape + (2, rules.n_colors, -1)).sum(-1)
    np.testing.assert_array_equal(s.expedition_sum, total)
    final = jax.device_get(trajectory.final)
    assert final.terminal.all()
    np.testing.assert_array_equal(final.scores, _recomputed_scores(rules, final.expedition_cards))


@settings(max_examples=16, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(variant=st.sampled_from(range(len(VARIANTS))), seed=st.integers(0, 2**32 - 1))
def test_invariants_hold_over_batches_of_random_games(variant, seed):
    rules = VARIANTS[variant]
    games = jnp.arange(GAMES_PER_EXAMPLE, dtype=jnp.int32)
    _check_trajectory(rules, record_random_games(rules, seed, 0, games))


@settings(max_examples=60, deadline=None)
@given(
    variant=st.sampled_from(range(len(VARIANTS))),
    seed=st.integers(0, 2**32 - 1),
    choices=st.lists(st.integers(0, 2**16), min_size=1, max_size=400),
)
def test_cython_invariants_under_hypothesis_chosen_moves(variant, seed, choices):
    rules = VARIANTS[variant]
    game = cy_engine.CyGame(rules)
    game.deal(seed, 0, 0)
    previous = game.state_dict()
    for choice in choices:
        if game.terminal:
            break
        legal = np.flatnonzero(game.legal_mask_array())
        game.apply(int(legal[choice % len(legal)]))
        state = game.state_dict()
        assert (previous["expedition_cards"] <= state["expedition_cards"]).all()
        assert (previous["expedition_top"] <= state["expedition_top"]).all()
        assert (
            state["scores"].tolist()
            == _recomputed_scores(rules, state["expedition_cards"]).tolist()
        )
        held = state["hands"][state["hands"] < rules.n_cards]
        placed = np.concatenate(
            [
                state["deck"][state["deck_pos"] :],
                held,
                state["discards"][state["discards"] < rules.n_cards],
                np.flatnonzero(state["expedition_cards"].any(0)),
            ]
        )
        assert sorted(placed.tolist()) == list(range(rules.n_cards))
        previous = state
