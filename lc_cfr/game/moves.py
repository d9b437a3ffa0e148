"""Public moves: what both players see of a decision, and a game replayed from them.

An engine action names a hand slot (`engine.step`: play or discard slot i of the sorted
hand), so the same action is another card in another world. A public move names what
everyone saw instead: the card played or discarded, or where the draw came from. A game's
public moves and its deal pin down every state of it, so any world a player imagines
(`determinize`: the same public cards at the same deck positions, the hidden ones
permuted) can be replayed from its own deal with the real game's moves; the replay ends
in that world, and on the way it shows what the opponent held at each of its decisions,
which is what an opponent model weighs (`lc_cfr.search`).

Codes, for N cards: c (play card c), N + c (discard card c), 2N + j (draw with the j-th
draw action: the deck, then the piles by colour); NO_MOVE pads a history.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.game import engine
from lc_cfr.game.rules import CARD_PHASE, Rules

NO_MOVE = -1


def history_length(rules: Rules) -> int:
    """T: entries of a history array, more than the decisions of any game."""
    return 2 * rules.max_turns + 2


def card_move(rules: Rules, card, discard):
    """The code of playing (discard false) or discarding `card`."""
    return card + rules.n_cards * discard


def draw_move(rules: Rules, source):
    """The code of a draw from `source`: 0 the deck, 1 + c the discard pile of colour c
    (the order of the engine's draw actions)."""
    return 2 * rules.n_cards + source


def public_move(rules: Rules, state: engine.State, action) -> jax.Array:
    """[] int32 the public code of `action` taken in `state` (see the module docstring)."""
    h = rules.hand_size
    action = jnp.asarray(action, jnp.int32)
    discard = action >= h
    slot = jnp.clip(jnp.where(discard, action - h, action), 0, h - 1)
    card = state.hands[state.current_player, slot].astype(jnp.int32)
    played = card_move(rules, card, discard.astype(jnp.int32))
    drawn = draw_move(rules, action - rules.draw_deck_action)
    return jnp.where(state.phase == CARD_PHASE, played, drawn).astype(jnp.int32)


def empty_history(rules: Rules) -> np.ndarray:
    """[T] int32, a game's history before its first move."""
    return np.full((history_length(rules),), NO_MOVE, np.int32)


def move_action(rules: Rules, state: engine.State, move) -> jax.Array:
    """[] int32 the engine action of public `move` in `state`: the inverse of
    `public_move` (a card the mover does not hold gives an illegal action, which
    `engine.step` turns into a terminal state)."""
    n, h = rules.n_cards, rules.hand_size
    move = jnp.asarray(move, jnp.int32)
    card = jnp.where(move < n, move, move - n)
    held = state.hands[state.current_player].astype(jnp.int32) == card  # [H]
    slot = jnp.where(jnp.any(held), jnp.argmax(held), 2 * h)  # 2H: past every card action
    card_action = jnp.where(move < n, slot, slot + h)
    draw_action = rules.draw_deck_action + move - 2 * n
    return jnp.where(state.phase == CARD_PHASE, card_action, draw_action).astype(jnp.int32)


def record(rules: Rules, history: jax.Array, state: engine.State, action) -> jax.Array:
    """`history` [T] int32 with `action`'s public move written at `state`'s decision
    index (a terminal state's action is not a move: nothing is written)."""
    index = jnp.where(state.terminal, history.shape[0], engine.decision_index(state))
    return history.at[index].set(public_move(rules, state, action), mode="drop")


def replay(rules: Rules, deck: jax.Array, history: jax.Array, count) -> engine.State:
    """The game dealt from `deck` [N] after the first `count` moves of `history` [T]."""

    def one(t, state):
        return engine.step(rules, state, move_action(rules, state, history[t]))

    return jax.lax.fori_loop(0, count, one, engine.init_from_deck(rules, deck))
