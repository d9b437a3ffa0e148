"""Random legal play on the vmapped JAX engine, for parity tests and the engine benchmark.

Game g of (seed, iteration) is dealt by the shared generator and, at its decision d,
takes `engine.random_legal_action(..., g, d)`, so the Cython engine's
`play_random_games` plays exactly the same games.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules


class Trajectory(NamedTuple):
    """Everything seen at each decision of a batch of games (T = 2 * max_turns)."""

    states: engine.State  # fields [T, B, ...], the state before each decision
    masks: jax.Array  # [T, B, A] bool, legal actions of the player to move
    observations: jax.Array  # [T, B, 2, E] float32, both players' encodings
    actions: jax.Array  # [T, B] int32, -1 once the game is over
    final: engine.State  # fields [B, ...], the states after the last decision


class PlayoutStats(NamedTuple):
    """Totals of a batch of random games."""

    decisions: jax.Array  # [] int32, decisions taken over all games
    truncated: jax.Array  # [] int32, games cut at max_turns
    score_diff_sum: jax.Array  # [] int32, sum over games of score0 - score1
    checksum: jax.Array  # [] uint32, sum over games and decisions of (d + 1) * action
    encoding_sum: jax.Array  # [] float32, keeps the encodings live (and checks them)


def _decide(rules: Rules, states, seed, iteration, games, decision, with_encoding=True):
    """Legal mask, mover's encoding and random action for every game in the batch."""
    masks = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, states)
    observations = None
    if with_encoding:
        observations = jax.vmap(engine.observe, in_axes=(None, 0, 0))(
            rules, states, states.current_player
        )
    actions = jax.vmap(engine.random_legal_action, in_axes=(None, 0, None, None, 0, None))(
        rules, states, seed, iteration, games, decision
    )
    return masks, observations, actions


def record_random_games(rules: Rules, seed, iteration, games) -> Trajectory:
    """Plays games [B] to the end and records every decision (for parity tests)."""
    return _record(rules, rng.as_word(seed), rng.as_word(iteration, "iteration"), games)


def play_random_games(
    rules: Rules, seed, iteration, games, *, with_encoding: bool = True
) -> PlayoutStats:
    """Plays games [B] in lockstep until all are over; only totals come back.

    `with_encoding=False` skips the encoding (the benchmark's breakdown of its cost).
    """
    seed, iteration = rng.as_word(seed), rng.as_word(iteration, "iteration")
    return _play(rules, with_encoding, seed, iteration, games)


@functools.partial(jax.jit, static_argnums=0)
def _record(rules: Rules, seed, iteration, games) -> Trajectory:
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, seed, games, iteration)
    both = jnp.arange(2)

    def one_decision(states, decision):
        masks, _, actions = _decide(rules, states, seed, iteration, games, decision)
        observations = jax.vmap(
            lambda s: jax.vmap(engine.observe, in_axes=(None, None, 0))(rules, s, both)
        )(states)
        live = ~states.terminal
        actions = jnp.where(live, actions, -1)
        next_states = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, actions)
        return next_states, (states, masks, observations, actions)

    final, (seen, masks, observations, actions) = jax.lax.scan(
        one_decision, states, jnp.arange(2 * rules.max_turns)
    )
    return Trajectory(seen, masks, observations, actions, final)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _play(rules: Rules, with_encoding: bool, seed, iteration, games) -> PlayoutStats:
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, seed, games, iteration)
    zero = PlayoutStats(jnp.int32(0), jnp.int32(0), jnp.int32(0), jnp.uint32(0), jnp.float32(0))

    def not_done(carry):
        states, _, _ = carry
        return ~jnp.all(states.terminal)

    def one_decision(carry):
        states, decision, stats = carry
        _, observations, actions = _decide(
            rules, states, seed, iteration, games, decision, with_encoding
        )
        live = ~states.terminal
        weighted = jnp.where(live, (decision + 1) * actions, 0).astype(jnp.uint32)
        stats = stats._replace(
            decisions=stats.decisions + jnp.sum(live),
            checksum=stats.checksum + jnp.sum(weighted, dtype=jnp.uint32),
            encoding_sum=stats.encoding_sum
            + (jnp.sum(jnp.where(live[:, None], observations, 0)) if with_encoding else 0),
        )
        states = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, actions)
        return states, decision + 1, stats

    states, _, stats = jax.lax.while_loop(not_done, one_decision, (states, jnp.int32(0), zero))
    return stats._replace(
        truncated=jnp.sum(states.truncated, dtype=jnp.int32),
        score_diff_sum=jnp.sum(states.scores[:, 0] - states.scores[:, 1]),
    )
