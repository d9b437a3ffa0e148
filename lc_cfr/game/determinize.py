"""Determinizations: the hidden part of a game redrawn from the mover's point of view.

What the player to move cannot see is the opponent's hand (less the cards it saw the
opponent take from a pile) and the order of the cards left in the deck. Every such card
sits at a deck position (an unseen card in the opponent's hand was dealt or drawn from
one), so a determinization permutes the cards among those hidden positions and rebuilds
the opponent's hand from its positions: the deck stays a permutation, the mover's
observation and legal actions are unchanged.

The posterior it samples. Every deal is equally likely and the cards the mover saw
(its hand, the expeditions, the piles, the opponent's known cards) pin down everything
but the hidden positions, so given those cards every assignment of the hidden cards to
the hidden positions is equally likely: a uniform permutation samples the chance
posterior exactly. It is not the Bayesian posterior of a player who also reasons about
the opponent's choices (an opponent that kept a card rather than play it probably could
not play it); like OpenSpiel's information-state resamplers, it ignores them.

The permutation is a Fisher-Yates shuffle over the m hidden positions, driven by one
offset per position (`shuffle_hidden`): every sequence of offsets with offset i in
[0, m - i) gives a different permutation and every permutation has one, which is what
lets the tests enumerate the sampler's whole distribution. `determinize` draws the
offsets from random words (`rng.below`: within 2^-24 of uniform).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules


def hidden_positions(rules: Rules, state: engine.State) -> tuple[jax.Array, jax.Array]:
    """The deck positions whose cards the player to move cannot see.

    Returns:
      slots: [N] int32 the hidden positions in increasing order, then the others.
      count: [] int32 m, how many are hidden.
    """
    n = rules.n_cards
    opponent = 1 - state.current_player
    cards = jnp.arange(n)
    their_hand = state.hands[opponent].astype(jnp.int32)  # [H], empty slots = N
    in_their_hand = jnp.zeros((n + 1,), jnp.bool_).at[their_hand].set(True)[:n]  # [N]
    unseen_in_hand = in_their_hand & ~state.known_cards[opponent]  # [N] by card
    deck = state.deck.astype(jnp.int32)
    hidden = unseen_in_hand[deck] | (cards >= state.deck_pos)  # [N] by deck position
    slots = jnp.argsort(jnp.where(hidden, cards, n + cards)).astype(jnp.int32)
    return slots, jnp.sum(hidden, dtype=jnp.int32)


def shuffle_hidden(rules: Rules, state: engine.State, offsets: jax.Array) -> engine.State:
    """The world whose hidden positions hold the cards of `state`'s, permuted.

    Args:
      rules: static rules.
      state: one game, seen from `state.current_player`.
      offsets: [N] int32; offset i (for i < m) must lie in [0, m - i): the Fisher-Yates
        swap of the i-th hidden position with the (i + offset)-th. Those past m are unused.

    Returns:
      The state whose hidden positions hold the hidden cards, taken in ascending order and
      permuted by the offsets, with the opponent's hand rebuilt (sorted, padded with N)
      from its positions; everything else unchanged.
    """
    n = rules.n_cards
    opponent = 1 - state.current_player
    slots, count = hidden_positions(rules, state)

    def swap(i, order):
        j = jnp.where(i < count, i + offsets[i], i)
        a, b = order[i], order[j]
        return order.at[i].set(b).at[j].set(a)

    order = jax.lax.fori_loop(0, n, swap, jnp.arange(n, dtype=jnp.int32))
    deck = state.deck.astype(jnp.int32)
    # The shuffle permutes the hidden cards in ascending order, not in the order they
    # happen to lie in: a world then depends on what the mover saw and the offsets only,
    # so every engine that holds the same information state (the OpenSpiel game keeps its
    # unseen deck in another order) imagines the same worlds.
    held = deck[slots]  # [N] the hidden cards first
    first = jnp.arange(n) < count
    ascending = jnp.sort(jnp.where(first, held, n))
    held = jnp.where(first, ascending, held)
    deck = deck.at[slots].set(held[order])

    # The opponent's unseen cards were at deck positions below deck_pos: the hidden ones
    # there now hold its new cards; the known ones stay in its hand.
    cards = jnp.arange(n)
    hidden = jnp.zeros((n,), jnp.bool_).at[slots].set(cards < count)  # by position
    theirs = hidden & (cards < state.deck_pos)
    dealt = jnp.zeros((n + 1,), jnp.bool_).at[jnp.where(theirs, deck, n)].set(True)[:n]
    their_hand = state.hands[opponent].astype(jnp.int32)
    in_their_hand = jnp.zeros((n + 1,), jnp.bool_).at[their_hand].set(True)[:n]
    holding = (in_their_hand & state.known_cards[opponent]) | dealt  # [N] by card
    # Sorting the held ids with N for the rest gives the engine's sorted, padded hand.
    hand = jnp.sort(jnp.where(holding, cards, n))[: rules.hand_size]
    hands = jnp.where(jnp.arange(2)[:, None] == opponent, hand[None, :], state.hands)
    return state.replace(hands=hands.astype(jnp.int8), deck=deck.astype(jnp.int8))


def determinize(rules: Rules, state: engine.State, words: jax.Array) -> engine.State:
    """A uniform draw of the worlds the player to move cannot tell from `state`.

    Args:
      rules: static rules.
      state: one game.
      words: [N] uint32 random words (the shared generator's, or jax.random.bits).

    Returns:
      `shuffle_hidden` with offset i = below(words[i], m - i).
    """
    _, count = hidden_positions(rules, state)
    spans = jnp.maximum(count - jnp.arange(rules.n_cards, dtype=jnp.int32), 1)
    return shuffle_hidden(rules, state, rng.below(words, spans))
