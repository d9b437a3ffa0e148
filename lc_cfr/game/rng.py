"""The shared counter-based generator (docs/design.md section 2).

Every random choice in lc_cfr is `random_bits(seed, iteration, index, counter, purpose)`:
MurmurHash3 x86_32 (Austin Appleby, public domain) of the five uint32 words, hash seed
0x9747B28C. Being a pure function of its counters, it gives every game its own stream
whatever order games are advanced in, and the C twin in `lc_rng.h` returns the same bits.
The algorithm is written out in docs/game.md.
"""

from __future__ import annotations

import enum

import jax.numpy as jnp
import numpy as np

HASH_SEED = 0x9747B28C
_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


class Purpose(enum.IntEnum):
    """The fifth word of every draw: what the draw is for, so streams never collide."""

    DEAL = 0
    RANDOM_PLAY = 1
    EXPLORE = 2
    SAMPLE = 3
    ROLLOUT = 4
    BOT_NOISE = 5
    OPPONENT = 6
    LEAF_CHECK = 7
    DETERMINIZE = 8  # search: the worlds a searching player imagines
    SEARCH_ROLLOUT = 9  # search: the blueprint's sampled moves in its rollouts
    SEARCH_NOISE = 10  # search: the words a bot blueprint keys its noise with
    PATH_CHOICE = 11  # traversal: the further choices of a path that are expanded
    SEARCH_EVIDENCE = 12  # search: a bot blueprint's noise replaying the opponent's moves
    SEARCH_RESAMPLE = 13  # search: the draw that keeps D of the weighted worlds
    SEARCH_REDRAW = 14  # search: the kept worlds' undealt decks, reshuffled
    LEAF_NOISE = 15  # scripts/leaf_noise.py: its self-play, positions, playouts and decks


def _rotl(x, r):
    return (x << r) | (x >> (32 - r))


def _as_u32(word):
    if isinstance(word, int):  # Python ints may exceed int32: wrap them explicitly
        return jnp.uint32(word & _MASK)
    return jnp.asarray(word).astype(jnp.uint32)


def as_word(value, name: str = "seed") -> np.uint32:
    """Checks that a counter fits the generator's 32-bit words and returns it as uint32."""
    if not 0 <= int(value) <= _MASK:
        raise ValueError(f"{name} must be in [0, 2**32), got {value}")
    return np.uint32(value)


def random_bits(seed, iteration, index, counter, purpose):
    """32 random bits for the given counters; JAX, broadcasting over its arguments.

    Args:
      seed, iteration, index, counter, purpose: integers or integer arrays; each is
        taken modulo 2^32.

    Returns:
      A uint32 array of the broadcast shape.
    """
    u32 = jnp.uint32
    h = jnp.asarray(HASH_SEED, u32)
    for word in (seed, iteration, index, counter, purpose):
        k = _as_u32(word) * u32(_C1)
        k = _rotl(k, u32(15)) * u32(_C2)
        h = h ^ k
        h = _rotl(h, u32(13)) * u32(5) + u32(0xE6546B64)
    h = h ^ u32(20)
    h = h ^ (h >> u32(16))
    h = h * u32(0x85EBCA6B)
    h = h ^ (h >> u32(13))
    h = h * u32(0xC2B2AE35)
    return h ^ (h >> u32(16))


def uniform(bits):
    """A float32 in [0, 1) from 32 random bits: the top 24 bits times 2^-24 (exact)."""
    return (bits >> jnp.uint32(8)).astype(jnp.float32) * jnp.float32(2.0**-24)


def below(bits, n):
    """An integer in [0, n) from 32 random bits, for 1 <= n <= 256 (int32)."""
    top = bits >> jnp.uint32(8)
    return ((top * jnp.asarray(n).astype(jnp.uint32)) >> jnp.uint32(24)).astype(jnp.int32)


def random_bits_py(seed: int, iteration: int, index: int, counter: int, purpose: int) -> int:
    """Plain-Python reference of `random_bits`, written from the algorithm description."""
    h = HASH_SEED
    for word in (seed, iteration, index, counter, purpose):
        k = (word & _MASK) * _C1 & _MASK
        k = ((k << 15) | (k >> 17)) & _MASK
        k = k * _C2 & _MASK
        h ^= k
        h = ((h << 13) | (h >> 19)) & _MASK
        h = (h * 5 + 0xE6546B64) & _MASK
    h ^= 20
    h ^= h >> 16
    h = h * 0x85EBCA6B & _MASK
    h ^= h >> 13
    h = h * 0xC2B2AE35 & _MASK
    return h ^ (h >> 16)


def deal_order(n_cards: int, seed: int, game_index: int, iteration: int = 0) -> np.ndarray:
    """The shuffled deck for (seed, game index, iteration), computed in plain Python.

    Cards are sorted by (random_bits(seed, iteration, game_index, card, DEAL), card).
    """
    keys = [
        (random_bits_py(seed, iteration, game_index, card, Purpose.DEAL), card)
        for card in range(n_cards)
    ]
    return np.array([card for _, card in sorted(keys)], dtype=np.int8)
