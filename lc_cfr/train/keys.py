"""The trainer's random streams: every key a pure function of (seed, iteration, owner, use).

`key(base, iteration, owner, use)` folds the iteration, then the owner, then the use into
the run's base key (`jax.random.PRNGKey(config.seed)`), so a resumed run draws exactly
the keys of the uninterrupted one and the only RNG state a checkpoint holds is the base
key. The numbers of `Owner` and `Use` are part of the run format: changing one changes
every run's bits (the traversals' own streams are `lc_cfr.game.rng.Purpose`).
"""

from __future__ import annotations

import enum

import jax


class Owner(enum.IntEnum):
    """Whose stream a key belongs to; the players' own advantage networks and memories
    are 0 and 1."""

    PLAYER_0 = 0
    PLAYER_1 = 1
    STRATEGY = 2  # the average-strategy network
    VALUE = 3  # the history value network
    SD_CFR = 4  # the SD-CFR snapshot reservoir


class Use(enum.IntEnum):
    """What a key is drawn for, within its owner's stream."""

    INIT = 0  # network initialisation (iteration 0)
    ADVANTAGE_ADD = 1  # reservoir slots of a player's advantage samples
    STRATEGY_ADD = 2  # reservoir slots of the strategy samples a player's traversal made
    REINIT = 3  # *_init='scratch': the network re-drawn before each of its trainings
    TRAIN = 4  # the learner's batches
    HOLDOUT = 5  # optimization.advantage_holdout: which advantage samples are held out
    # the SD_CFR stream's own uses (their numbers repeat INIT's and ADVANTAGE_ADD's, as
    # aliases, in a stream that has neither)
    SNAPSHOT_DRAW = 0  # whether this iteration's networks enter the reservoir
    SNAPSHOT_PICK = 1  # which slot they replace


def key(base: jax.Array, iteration: int, owner: int, use: Use) -> jax.Array:
    """The key of `owner`'s stream (an Owner, or a player) for `use` at `iteration`."""
    k = jax.random.fold_in(base, iteration)
    return jax.random.fold_in(jax.random.fold_in(k, Owner(owner)), use)
