"""Pure-functional Lost Cities in JAX (the engine of the `jax` backend).

In the style of pgx: a frozen pytree `State` with fixed shapes set by the `Rules`, and
pure functions `init`, `step`, `legal_action_mask`, `observe`, `returns`. There is no
Python branching on traced values, so every function is jittable and vmappable; write
per-game code and `jax.vmap` it outside. The rules are static (hashable) arguments.

The Cython engine (`cy_engine.pyx`) implements the same contract, docs/game.md, and
tests/test_engine_parity.py holds the two to it bit for bit.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from lc_cfr.game import rng
from lc_cfr.game.rules import (
    CARD_PHASE,
    COUNT_SCALE,
    DIFF_SCALE,
    DRAW_PHASE,
    ILLEGAL_ACTION_PENALTY,
    SCORE_SCALE,
    WAGER_SCALE,
    Rules,
)


@struct.dataclass
class State:
    """One game. N cards, C colours, H hand size, K = cards per colour."""

    deck: jax.Array  # [N] int8, the shuffled order fixed at the deal
    deck_pos: jax.Array  # [] int32, next deck card
    hands: jax.Array  # [2, H] int8, sorted, empty slots = N
    discards: jax.Array  # [C, K] int8, bottom first, unused = N
    pile_sizes: jax.Array  # [C] int32
    expedition_cards: jax.Array  # [2, N] bool
    expedition_wagers: jax.Array  # [2, C] int32
    expedition_numbered: jax.Array  # [2, C] int32
    expedition_sum: jax.Array  # [2, C] int32, sum of face values
    expedition_top: jax.Array  # [2, C] int32, highest rank index, -1 if none
    known_cards: jax.Array  # [2, N] bool, held cards the opponent saw drawn from a pile
    scores: jax.Array  # [2] int32
    current_player: jax.Array  # [] int32
    phase: jax.Array  # [] int32, CARD_PHASE or DRAW_PHASE
    forbidden_pile: jax.Array  # [] int32, colour discarded to this turn, -1 if none
    turn: jax.Array  # [] int32, completed turns
    terminal: jax.Array  # [] bool
    truncated: jax.Array  # [] bool, ended at max_turns
    illegal_player: jax.Array  # [] int32, who chose an illegal action, -1 if none


class _Tables:
    """Per-card constants of a rules variant, padded with the "no card" sentinel N."""

    def __init__(self, rules: Rules):
        n, k = rules.n_cards, rules.cards_per_color
        cards = np.arange(n + 1)
        within = cards % k
        self.color = np.where(cards < n, cards // k, 0).astype(np.int32)  # [N+1]
        self.is_wager = (within < rules.n_wagers) & (cards < n)  # [N+1]
        self.rank = np.where(self.is_wager | (cards == n), -1, within - rules.n_wagers)
        self.rank = self.rank.astype(np.int32)  # [N+1]
        self.value = np.where(self.rank >= 0, rules.min_rank + self.rank, 0).astype(np.int32)


@functools.cache
def _tables(rules: Rules) -> _Tables:
    return _Tables(rules)


def init_from_deck(rules: Rules, deck: jax.Array) -> State:
    """Deals from an explicit deck order (a permutation of 0..N-1)."""
    n, h, c, k = rules.n_cards, rules.hand_size, rules.n_colors, rules.cards_per_color
    deck = jnp.asarray(deck).astype(jnp.int8)
    hands = jnp.sort(deck[: 2 * h].reshape(2, h), axis=1)
    zeros_pc = jnp.zeros((2, c), jnp.int32)
    return State(
        deck=deck,
        deck_pos=jnp.int32(2 * h),
        hands=hands,
        discards=jnp.full((c, k), n, jnp.int8),
        pile_sizes=jnp.zeros((c,), jnp.int32),
        expedition_cards=jnp.zeros((2, n), jnp.bool_),
        expedition_wagers=zeros_pc,
        expedition_numbered=zeros_pc,
        expedition_sum=zeros_pc,
        expedition_top=jnp.full((2, c), -1, jnp.int32),
        known_cards=jnp.zeros((2, n), jnp.bool_),
        scores=jnp.zeros((2,), jnp.int32),
        current_player=jnp.int32(0),
        phase=jnp.int32(CARD_PHASE),
        forbidden_pile=jnp.int32(-1),
        turn=jnp.int32(0),
        terminal=jnp.bool_(False),
        truncated=jnp.bool_(False),
        illegal_player=jnp.int32(-1),
    )


def deal_order(rules: Rules, seed, game_index, iteration=0) -> jax.Array:
    """The shuffled deck of (seed, game index, iteration): cards sorted by (bits, card)."""
    cards = jnp.arange(rules.n_cards, dtype=jnp.int32)
    keys = rng.random_bits(seed, iteration, game_index, cards, rng.Purpose.DEAL)
    _, order = jax.lax.sort((keys, cards), num_keys=2)
    return order


def init(rules: Rules, seed, game_index, iteration=0) -> State:
    """Deals game `game_index` of (seed, iteration) with the shared generator."""
    return init_from_deck(rules, deal_order(rules, seed, game_index, iteration))


def expedition_scores(rules: Rules, state: State) -> jax.Array:
    """Per-colour expedition scores, [2, C] int32; an empty expedition scores 0."""
    cards = state.expedition_wagers + state.expedition_numbered
    score = (state.expedition_sum + rules.expedition_penalty) * (1 + state.expedition_wagers)
    score = score + jnp.where(cards >= rules.bonus_threshold, rules.bonus_amount, 0)
    return jnp.where(cards > 0, score, 0)


def _playable_cards(rules: Rules, state: State, player) -> jax.Array:
    """[N] bool: the card may legally be played onto `player`'s expedition now."""
    t = _tables(rules)
    k = rules.cards_per_color
    numbered, _ = _mine_theirs(state.expedition_numbered, player)
    top, _ = _mine_theirs(state.expedition_top, player)
    numbered = jnp.broadcast_to(numbered[:, None], (rules.n_colors, k)).reshape(-1)  # [N]
    top = jnp.broadcast_to(top[:, None], (rules.n_colors, k)).reshape(-1)  # [N]
    return jnp.where(t.is_wager[:-1], numbered == 0, t.rank[:-1] > top)


def playable_pile_tops(rules: Rules, state: State) -> jax.Array:
    """[C] bool: colour c's discard pile is not empty and its top card may be played onto
    the mover's expedition now (a pile draw that the mover can use at once; the others
    only take a card from the opponent or keep the deck as it is)."""
    top = jnp.take_along_axis(
        state.discards, jnp.maximum(state.pile_sizes - 1, 0)[:, None], axis=1
    )[:, 0].astype(jnp.int32)
    playable = _playable_cards(rules, state, state.current_player)[top]
    return (state.pile_sizes > 0) & playable


def legal_action_mask(rules: Rules, state: State) -> jax.Array:
    """[A] bool mask of legal actions; all false once the game is over."""
    h = rules.hand_size
    p = state.current_player
    hand = state.hands[p]  # [H]
    playable = jnp.append(_playable_cards(rules, state, p), False)[hand]  # [H]
    card_mask = jnp.concatenate(
        [playable, jnp.ones((h,), jnp.bool_), jnp.zeros((1 + rules.n_colors,), jnp.bool_)]
    )
    piles = (state.pile_sizes > 0) & (jnp.arange(rules.n_colors) != state.forbidden_pile)
    draw_mask = jnp.concatenate([jnp.zeros((2 * h,), jnp.bool_), jnp.ones((1,), jnp.bool_), piles])
    mask = jnp.where(state.phase == CARD_PHASE, card_mask, draw_mask)
    return mask & ~state.terminal


def _remove_slot(hand: jax.Array, slot, sentinel: int) -> jax.Array:
    """Removes hand[slot] from a sorted hand, keeping it sorted (sentinel fills the end)."""
    shifted = jnp.append(hand[1:], jnp.int8(sentinel))
    return jnp.where(jnp.arange(hand.shape[0]) < slot, hand, shifted)


def _insert_card(hand: jax.Array, card) -> jax.Array:
    """Inserts a card into a sorted hand whose last slot is empty."""
    position = jnp.sum(hand < card)
    shifted = jnp.concatenate([hand[:1], hand[:-1]])
    slots = jnp.arange(hand.shape[0])
    return jnp.where(slots < position, hand, jnp.where(slots == position, card, shifted))


def _card_phase(rules: Rules, state: State, action):
    """Plays or discards; returns (next state, legal)."""
    t = _tables(rules)
    n, h = rules.n_cards, rules.hand_size
    p = state.current_player
    is_play = action < h
    slot = jnp.where(is_play, action, action - h)
    slot = jnp.clip(slot, 0, h - 1)
    card = state.hands[p, slot].astype(jnp.int32)
    color, rank = jnp.take(t.color, card), jnp.take(t.rank, card)
    is_wager = jnp.take(t.is_wager, card)
    can_play = jnp.where(
        is_wager,
        state.expedition_numbered[p, color] == 0,
        rank > state.expedition_top[p, color],
    )
    legal = (action >= 0) & (action < 2 * h) & (~is_play | can_play)

    players = jnp.arange(2)[:, None]
    at_pc = (players == p) & (jnp.arange(rules.n_colors)[None, :] == color)  # [2, C]
    played = at_pc & is_play
    at_card = (players == p) & (jnp.arange(n)[None, :] == card)  # [2, N]
    wagers = state.expedition_wagers + (played & is_wager)
    numbered = state.expedition_numbered + (played & ~is_wager)
    total = state.expedition_sum + jnp.where(played & ~is_wager, jnp.take(t.value, card), 0)
    top = jnp.where(played & ~is_wager, rank, state.expedition_top)

    pile_slot = jnp.arange(rules.cards_per_color)[None, :] == state.pile_sizes[:, None]
    at_pile = (jnp.arange(rules.n_colors) == color) & ~is_play  # [C]
    discards = jnp.where(at_pile[:, None] & pile_slot, card.astype(jnp.int8), state.discards)

    hand = _remove_slot(state.hands[p], slot, n)
    next_state = state.replace(
        hands=jnp.where(players == p, hand[None, :], state.hands),
        discards=discards,
        pile_sizes=state.pile_sizes + at_pile,
        expedition_cards=state.expedition_cards | (at_card & is_play),
        expedition_wagers=wagers,
        expedition_numbered=numbered,
        expedition_sum=total,
        expedition_top=top,
        known_cards=state.known_cards & ~at_card,
        phase=jnp.int32(DRAW_PHASE),
        forbidden_pile=jnp.where(is_play, -1, color).astype(jnp.int32),
    )
    return next_state, legal


def _draw_phase(rules: Rules, state: State, action):
    """Draws from the deck or a pile and ends the turn; returns (next state, legal)."""
    n, c = rules.n_cards, rules.n_colors
    p = state.current_player
    from_deck = action == rules.draw_deck_action
    pile = action - rules.first_pile_action
    pile_ok = (pile >= 0) & (pile < c)
    pile = jnp.clip(pile, 0, c - 1)
    size = state.pile_sizes[pile]
    legal = from_deck | (pile_ok & (size > 0) & (pile != state.forbidden_pile))

    deck_card = state.deck[jnp.minimum(state.deck_pos, n - 1)]
    pile_card = state.discards[pile, jnp.maximum(size - 1, 0)]
    card = jnp.where(from_deck, deck_card, pile_card)

    players = jnp.arange(2)[:, None]
    taken = (jnp.arange(c)[:, None] == pile) & (
        jnp.arange(rules.cards_per_color)[None, :] == size - 1
    )
    taken = taken & ~from_deck
    at_card = (players == p) & (jnp.arange(n)[None, :] == card.astype(jnp.int32))
    hand = _insert_card(state.hands[p], card)
    deck_pos = state.deck_pos + from_deck
    turn = state.turn + 1
    deck_empty = deck_pos >= n
    truncated = ~deck_empty & (turn >= rules.max_turns)
    next_state = state.replace(
        deck_pos=deck_pos.astype(jnp.int32),
        hands=jnp.where(players == p, hand[None, :], state.hands),
        discards=jnp.where(taken, jnp.int8(n), state.discards),
        pile_sizes=state.pile_sizes - ((jnp.arange(c) == pile) & ~from_deck),
        known_cards=state.known_cards | (at_card & ~from_deck),
        current_player=1 - p,
        phase=jnp.int32(CARD_PHASE),
        forbidden_pile=jnp.int32(-1),
        turn=turn,
        terminal=deck_empty | truncated,
        truncated=truncated,
    )
    return next_state, legal


def step(rules: Rules, state: State, action) -> State:
    """Applies one action.

    An illegal action ends the game as data: `terminal` is set and `illegal_player`
    names the mover, who `returns` charges ILLEGAL_ACTION_PENALTY. A terminal state is
    returned unchanged.
    """
    action = jnp.asarray(action, jnp.int32)
    after_card, card_legal = _card_phase(rules, state, action)
    after_draw, draw_legal = _draw_phase(rules, state, action)
    is_card = state.phase == CARD_PHASE
    stepped = jax.tree.map(lambda a, b: jnp.where(is_card, a, b), after_card, after_draw)
    legal = jnp.where(is_card, card_legal, draw_legal)
    scores = jnp.sum(expedition_scores(rules, stepped), axis=1).astype(jnp.int32)
    stepped = stepped.replace(scores=scores)
    refused = state.replace(terminal=jnp.bool_(True), illegal_player=state.current_player)
    refused = jax.tree.map(lambda a, b: jnp.where(state.terminal, a, b), state, refused)
    return jax.tree.map(lambda a, b: jnp.where(legal & ~state.terminal, a, b), stepped, refused)


def decision_index(state: State) -> jax.Array:
    """[] int32 decisions taken since the deal: two per completed turn (the card, then the
    draw) and one more in the draw phase (CARD_PHASE = 0, DRAW_PHASE = 1).

    The depth of a position in the game tree, counted the same way by every backend: a
    sampled expansion is drawn on it (`traversal.api.expansion_start`) and the traversal
    statistics sum it at each path's end. Elementwise, so a batch of states gives [L].
    """
    return 2 * state.turn + state.phase


def tree_where(condition: jax.Array, a, b):
    """Selects between two batched pytrees (e.g. States) per leading index of `condition`."""

    def pick(x, y):
        c = condition.reshape(condition.shape + (1,) * (x.ndim - condition.ndim))
        return jnp.where(c, x, y)

    return jax.tree.map(pick, a, b)


def returns(rules: Rules, state: State) -> jax.Array:
    """[2] float32 utility in points: score differences, or the illegal-action penalty."""
    del rules
    diff = (state.scores[0] - state.scores[1]).astype(jnp.float32)
    by_score = jnp.stack([diff, -diff])
    penalty = jnp.where(
        jnp.arange(2) == state.illegal_player, -ILLEGAL_ACTION_PENALTY, ILLEGAL_ACTION_PENALTY
    ).astype(jnp.float32)
    return jnp.where(state.illegal_player >= 0, penalty, by_score)


def _mine_theirs(x: jax.Array, player) -> tuple[jax.Array, jax.Array]:
    """(x[player], x[1 - player]) for x of leading size 2, as selects (no gathers)."""
    first = player == 0
    return jnp.where(first, x[0], x[1]), jnp.where(first, x[1], x[0])


def _card_words(cards: jax.Array, n: int) -> jax.Array:
    """The set of card ids in `cards` (any shape; ids >= N ignored) as [ceil(N / 32)] uint32.

    Card x is bit x % 32 of word x // 32. An OR-reduction over the slots into a few words,
    then a shift per card, is cheaper under XLA:CPU than the [slots, N] comparison and
    reduction a one-hot needs (the discard piles' one-hot was the costliest card block).
    """
    flat = cards.reshape(-1).astype(jnp.int32)
    bit = jnp.left_shift(jnp.uint32(1), (flat % 32).astype(jnp.uint32))
    hit = ((flat // 32)[None, :] == jnp.arange(-(-n // 32))[:, None]) & (flat < n)[None, :]
    words = jnp.where(hit, bit[None, :], jnp.uint32(0))  # [W, slots]: reduce the minor axis
    return jax.lax.reduce(words, jnp.uint32(0), jax.lax.bitwise_or, (1,))


def _word_bits(words: jax.Array, n: int) -> jax.Array:
    """[N] bool: the card bits of `_card_words`."""
    bits = (words[:, None] >> jnp.arange(32, dtype=jnp.uint32)[None, :]) & 1
    return bits.reshape(-1)[:n].astype(jnp.bool_)


def card_set(cards: jax.Array, n: int) -> jax.Array:
    """[N] bool: which card ids occur in `cards` (any shape; ids >= N ignored)."""
    return _word_bits(_card_words(cards, n), n)


def observe(rules: Rules, state: State, player) -> jax.Array:
    """The information-state encoding of `player`, [8N + 7C + 5] float32 (docs/game.md)."""
    n, c, k = rules.n_cards, rules.n_colors, rules.cards_per_color
    player = jnp.asarray(player, jnp.int32)
    my_hand, _ = _mine_theirs(state.hands, player)
    my_cards, their_cards = _mine_theirs(state.expedition_cards, player)
    my_known, their_known = _mine_theirs(state.known_cards, player)
    hand = card_set(my_hand, n)
    in_pile = card_set(state.discards, n)
    pile_cards = (jnp.arange(c) * k)[:, None] + jnp.arange(k)[None, :]  # [C, K]
    top_slot = jnp.maximum(state.pile_sizes - 1, 0)[:, None]
    top_card = jnp.take_along_axis(state.discards, top_slot, axis=1)  # [C, 1]
    tops = (state.pile_sizes > 0)[:, None] & (pile_cards == top_card)
    playable = hand & _playable_cards(rules, state, player)
    # Eight [N] pieces joined by one concatenate, not stacked to [8, N]: under vmap XLA
    # builds that stack batch-minor and transposes it, a scalar loop over every float of
    # the block that was about 3/4 of the encoding's time.
    card_blocks = [
        hand,
        my_cards,
        their_cards,
        in_pile,
        tops.reshape(n),
        their_known,
        playable,
        my_known,
    ]

    f32 = jnp.float32
    my_wagers, their_wagers = _mine_theirs(state.expedition_wagers, player)
    my_count, their_count = _mine_theirs(
        state.expedition_wagers + state.expedition_numbered, player
    )
    my_score, their_score = _mine_theirs(expedition_scores(rules, state), player)
    my_total, their_total = _mine_theirs(state.scores, player)
    scalars = [
        ((n - state.deck_pos) * f32(rules.deck_scale))[None],
        jnp.arange(2) == state.phase,
        jnp.arange(c) == state.forbidden_pile,
        my_wagers * f32(WAGER_SCALE),
        their_wagers * f32(WAGER_SCALE),
        my_count * f32(COUNT_SCALE),
        their_count * f32(COUNT_SCALE),
        my_score * f32(SCORE_SCALE),
        their_score * f32(SCORE_SCALE),
        ((my_total - their_total) * f32(DIFF_SCALE))[None],
        (state.turn * f32(rules.turn_scale))[None],
    ]
    return jnp.concatenate([x.astype(f32) for x in card_blocks + scalars])


def history_size(rules: Rules) -> int:
    """Length of `observe_history`: the encoding and the opponent's hand, E + N."""
    return rules.encoding_size + rules.n_cards


def observe_history(rules: Rules, state: State, player) -> jax.Array:
    """`player`'s encoding followed by the opponent's hand as N card bits, [E + N] float32.

    Everything that has happened is in it except the order of the cards still in the
    deck, which is future chance: the input of a history value network (the value of the
    position for `player`, averaged over the deck). JAX only: it feeds the value network
    of the jax backend's outcome estimators, not the shared encoding contract.
    """
    player = jnp.asarray(player, jnp.int32)
    _, their_hand = _mine_theirs(state.hands, player)
    hand = jnp.any(their_hand[:, None] == jnp.arange(rules.n_cards, dtype=jnp.int8)[None, :], 0)
    return jnp.concatenate([observe(rules, state, player), hand.astype(jnp.float32)])


def nth_legal(mask: jax.Array, bits: jax.Array) -> jax.Array:
    """The below(bits, k)-th legal action of a mask with k legal actions (ascending)."""
    count = jnp.sum(mask, dtype=jnp.int32)
    chosen = rng.below(bits, jnp.maximum(count, 1))
    return jnp.where(count > 0, _nth_true(mask, chosen), 0).astype(jnp.int32)


def _nth_true(flags: jax.Array, m) -> jax.Array:
    """Index of the (m + 1)-th true entry of a 1-D bool array; its length if there is none.

    It is the number of positions whose inclusive prefix count is at most m. The prefix
    counts come from a product with a lower-triangular matrix (exact in float32 far beyond
    any action count): `jnp.cumsum` lowers to a reduce-window, which XLA:CPU runs as a
    slow scalar loop (it was the largest single cost of a random-play decision without
    the encoding).
    """
    size = flags.shape[0]
    lower = jnp.asarray(np.tril(np.ones((size, size), np.float32)))
    prefix = jnp.matmul(lower, flags.astype(jnp.float32), precision=jax.lax.Precision.HIGHEST)
    return jnp.sum(prefix <= jnp.asarray(m, jnp.float32), dtype=jnp.int32)


def random_legal_action(rules: Rules, state: State, seed, iteration, game_index, decision):
    """The shared random-play choice: the below(bits, k)-th legal action, k legal actions."""
    bits = rng.random_bits(seed, iteration, game_index, decision, rng.Purpose.RANDOM_PLAY)
    return nth_legal(legal_action_mask(rules, state), bits)
