"""Reservoir memories: filling, exact Algorithm R semantics, uniformity, checkpoints."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lc_cfr.game.random_play import record_random_games
from lc_cfr.game.rules import Rules
from lc_cfr.memory import reservoir as rv

add = jax.jit(rv.reservoir_add)


def _rows(batch, encoding_size, num_actions, start):
    """A batch whose row r carries the number start + r in every field."""
    ids = np.arange(start, start + batch)
    info = np.repeat(ids[:, None], encoding_size, axis=1).astype(np.float32)
    mask = (np.arange(num_actions)[None, :] <= ids[:, None] % num_actions).astype(bool)
    target = np.repeat(ids[:, None], num_actions, axis=1).astype(np.float32)
    return info, mask, target


def test_fills_in_order_below_capacity():
    memory = rv.reservoir_init(capacity=10, encoding_size=3, num_actions=2)
    info, mask, target = _rows(4, 3, 2, start=0)
    memory = add(memory, jax.random.key(0), info, mask, target, 1, jnp.array([1, 0, 1, 1], bool))
    info, mask, target = _rows(4, 3, 2, start=4)
    memory = add(memory, jax.random.key(1), info, mask, target, 2, jnp.ones(4, bool))
    chex.assert_trees_all_equal((memory.size, memory.seen), (jnp.int32(7), jnp.int32(7)))
    kept = [0, 2, 3, 4, 5, 6, 7]
    np.testing.assert_array_equal(memory.target[:7, 0], kept)
    np.testing.assert_array_equal(memory.info[:7, 2], kept)
    np.testing.assert_array_equal(memory.mask[:7, 1], np.array(kept) % 2 == 1)
    np.testing.assert_array_equal(memory.iteration[:7], [1, 1, 1, 2, 2, 2, 2])
    for name in ("info", "mask", "target", "iteration"):
        assert not np.any(np.asarray(getattr(memory, name))[7:])  # unfilled rows stay zero
    assert memory.info.dtype == jnp.float16 and memory.target.dtype == jnp.float32


def test_candidate_slots_fill_phase():
    valid = jnp.array([1, 0, 1, 1, 1, 1, 1, 1, 1], bool)
    slots = rv.candidate_slots(jnp.int32(3), jax.random.key(0), valid, capacity=8)
    assert slots[:6].tolist() == [3, 8, 4, 5, 6, 7]  # offers 3..7 fill slots 3..7 in order
    assert np.all((np.asarray(slots[6:]) >= 0) & (np.asarray(slots[6:]) <= 8))  # 8 = dropped


def test_last_writers_keeps_the_later_row():
    slots = jnp.array([2, 0, 2, 5, 0, 1, 5, 2], jnp.int32)
    winners = rv.last_writers(slots, capacity=5)
    assert winners.tolist() == [False, False, False, False, True, True, False, True]


def _sequential_reference(memory, slots, target):
    """Algorithm R done row by row with the given slots: later rows overwrite."""
    stored = np.array(memory.target[:, 0])
    for row, slot in enumerate(np.asarray(slots)):
        if slot < stored.shape[0]:
            stored[slot] = target[row, 0]
    return stored


@pytest.mark.parametrize("seen", [0, 3, 40])
def test_duplicate_slots_match_the_sequential_order(seen):
    capacity, batch = 4, 32
    memory = rv.reservoir_init(capacity=capacity, encoding_size=1, num_actions=1)
    memory = memory._replace(
        target=jnp.full((capacity, 1), -1.0),
        seen=jnp.int32(seen),
        size=jnp.int32(min(seen, capacity)),
    )
    _, mask, target = _rows(batch, 1, 1, start=100)
    valid_rng = np.random.default_rng(seen)
    collisions = 0
    for trial in range(20):
        key = jax.random.key(trial)
        valid = jnp.asarray(valid_rng.random(batch) < 0.8)
        slots = rv.candidate_slots(memory.seen, key, valid, capacity=capacity)
        taken = np.asarray(slots)[np.asarray(slots) < capacity]
        collisions += len(taken) - len(set(taken.tolist()))
        result = add(memory, key, np.zeros((batch, 1)), mask, target, 1, valid)
        np.testing.assert_array_equal(
            result.target[:, 0], _sequential_reference(memory, slots, target)
        )
        again = add(memory, key, np.zeros((batch, 1)), mask, target, 1, valid)
        chex.assert_trees_all_equal(again, result)
        assert int(result.seen) == seen + int(valid.sum())
        assert int(result.size) == min(int(result.seen), capacity)
    assert collisions > 0  # the case under test really happened


CAPACITY, BATCH, NUM_BATCHES, OFFERED, TRIALS = 100, 50, 128, 5000, 1000


@jax.jit
def _survivors(keys, ids, valid):
    """For each trial key, the ids and iterations left after offering every batch."""

    def trial(key):
        memory = rv.reservoir_init(capacity=CAPACITY, encoding_size=1, num_actions=1)

        def offer(memory, xs):
            step_key, batch_ids, batch_valid, iteration = xs
            info = jnp.zeros((BATCH, 1), jnp.float32)
            mask = jnp.ones((BATCH, 1), jnp.bool_)
            memory = rv.reservoir_add(
                memory, step_key, info, mask, batch_ids[:, None], iteration, batch_valid
            )
            return memory, None

        xs = (jax.random.split(key, NUM_BATCHES), ids, valid, jnp.arange(NUM_BATCHES))
        memory, _ = jax.lax.scan(offer, memory, xs)
        return memory.target[:, 0].astype(jnp.int32), memory.iteration, memory.size, memory.seen

    return jax.vmap(trial)(keys)


def test_every_offered_item_survives_with_equal_probability():
    rng = np.random.default_rng(1234)
    valid = np.zeros(NUM_BATCHES * BATCH, bool)
    valid[rng.choice(valid.size, OFFERED, replace=False)] = True
    valid = valid.reshape(NUM_BATCHES, BATCH)  # ~22% invalid rows, scattered
    ids = np.where(valid, np.cumsum(valid).reshape(valid.shape) - 1, -1).astype(np.float32)
    keys = jax.random.split(jax.random.key(2024), TRIALS)
    kept, iterations, size, seen = jax.device_get(_survivors(keys, ids, valid))

    assert np.all(size == CAPACITY) and np.all(seen == OFFERED)
    assert kept.min() >= 0  # invalid rows never enter
    assert all(len(set(row.tolist())) == CAPACITY for row in kept)  # no item twice
    batch_of_id = np.nonzero(valid)[0]  # ids are numbered in offer order
    np.testing.assert_array_equal(iterations, batch_of_id[kept])

    counts = np.bincount(kept.ravel(), minlength=OFFERED)
    expected = TRIALS * CAPACITY / OFFERED  # 20 per item
    chi2_items = np.sum((counts - expected) ** 2 / expected)
    # df = 4999: mean ~4999 (a little less without replacement), sd ~100.
    assert 4999 - 500 < chi2_items < 4999 + 500, chi2_items
    bins = counts.reshape(50, OFFERED // 50).sum(1)  # 100 consecutive items per bin
    chi2_bins = np.sum((bins - 100 * expected) ** 2 / (100 * expected))
    assert chi2_bins < 85.35, chi2_bins  # chi-square(49) at p = 0.001
    for part in (counts[:CAPACITY], counts[OFFERED // 2 :][:CAPACITY], counts[-CAPACITY:]):
        rate = part.sum() / (CAPACITY * TRIALS)  # early, middle and late items
        assert abs(rate - CAPACITY / OFFERED) < 0.002, rate  # 0.02 +- ~0.0004 sd


def test_sample_is_uniform_over_filled_rows():
    memory = rv.reservoir_init(capacity=10, encoding_size=2, num_actions=3)
    info, mask, target = _rows(5, 2, 3, start=0)
    memory = add(memory, jax.random.key(0), info, mask, target, 7, jnp.ones(5, bool))
    batch = jax.jit(rv.reservoir_sample, static_argnums=2)(memory, jax.random.key(1), 20000)
    chex.assert_shape(batch.info, (20000, 2))
    chex.assert_type([batch.info, batch.target, batch.iteration], [jnp.float32, jnp.float32, int])
    np.testing.assert_array_equal(batch.info[:, 0], batch.target[:, 0])
    counts = np.bincount(np.asarray(batch.target[:, 0], int), minlength=10)
    assert counts[5:].sum() == 0
    np.testing.assert_allclose(counts[:5] / 20000, 0.2, atol=0.015)
    assert np.all(np.asarray(batch.iteration) == 7)


def test_numpy_round_trip_is_exact():
    memory = rv.reservoir_init(capacity=6, encoding_size=2, num_actions=3)
    for step in range(4):  # 4 x 3 = 12 offers: fills, then replaces
        arrays = rv.to_numpy(memory)
        assert arrays["info"].shape == (int(memory.size), 2)
        assert arrays["info"].dtype == np.float16
        restored = rv.from_numpy(arrays)
        chex.assert_trees_all_equal(restored, memory)
        chex.assert_trees_all_equal_dtypes(restored, memory)
        info, mask, target = _rows(3, 2, 3, start=3 * step)
        valid = jnp.ones(3, bool)
        memory = add(memory, jax.random.key(step), info * 0.25, mask, target, step + 1, valid)
    arrays = rv.to_numpy(memory)
    assert int(arrays["seen"]) == 12 and int(arrays["size"]) == 6 and int(arrays["capacity"]) == 6
    chex.assert_trees_all_equal(rv.from_numpy(arrays), memory)


def test_from_numpy_errors_name_the_field():
    arrays = rv.to_numpy(rv.reservoir_init(capacity=4, encoding_size=2, num_actions=3))
    with pytest.raises(ValueError, match="'seen'"):
        rv.from_numpy({k: v for k, v in arrays.items() if k != "seen"})
    with pytest.raises(ValueError, match="'iteration'"):
        rv.from_numpy(arrays | {"iteration": np.zeros(3, np.int32)})
    with pytest.raises(ValueError, match="size"):
        rv.from_numpy(arrays | {"size": np.int32(5)})


def test_float16_holds_real_encodings_exactly():
    rules = Rules()
    trajectory = record_random_games(rules, 7, 0, jnp.arange(128))
    live = np.asarray(trajectory.actions) >= 0  # [T, B]
    encodings = np.asarray(trajectory.observations)[live].reshape(-1, rules.encoding_size)
    assert encodings.shape[0] > 10_000
    np.testing.assert_array_equal(encodings.astype(np.float16).astype(np.float32), encodings)
    # and through the reservoir itself
    rows = encodings[:64]
    memory = rv.reservoir_init(
        capacity=64, encoding_size=rules.encoding_size, num_actions=rules.num_actions
    )
    memory = add(
        memory,
        jax.random.key(0),
        rows,
        np.ones((64, rules.num_actions), bool),
        np.zeros((64, rules.num_actions), np.float32),
        1,
        np.ones(64, bool),
    )
    np.testing.assert_array_equal(np.asarray(memory.info, np.float32), rows)


def test_window_keeps_the_most_recent_rows_in_order():
    memory = rv.reservoir_init(capacity=5, encoding_size=2, num_actions=3)
    add = jax.jit(rv.window_add)
    offered = []
    for batch in range(3):  # 3 batches of 4 rows, one invalid per batch: 9 rows offered
        ids = np.arange(4, dtype=np.float32) + 10 * batch
        valid = np.array([True, True, False, True])
        info = np.stack([ids, ids], axis=1)
        memory = add(memory, info, np.ones((4, 3), bool), np.zeros((4, 3)), batch, valid)
        offered += ids[valid].tolist()
    assert int(memory.seen) == 9 and int(memory.size) == 5
    # rows 5..8 overwrote slots 0..3: the window holds the last 5 rows offered
    kept = sorted(np.asarray(memory.info[:, 0], np.float32).tolist())
    assert kept == sorted(offered[-5:])
    assert np.asarray(memory.info[:, 0]).tolist() == [offered[i] for i in (5, 6, 7, 8, 4)]
    # a batch larger than the window keeps its own last rows
    big = np.arange(8, dtype=np.float32) + 100
    memory = add(
        memory,
        np.stack([big, big], 1),
        np.ones((8, 3), bool),
        np.zeros((8, 3)),
        3,
        np.ones(8, bool),
    )
    assert sorted(np.asarray(memory.info[:, 0]).tolist()) == big[-5:].tolist()
