"""Compact memories: packed encodings decode bit for bit, and growing memories hold
exactly what preallocated ones hold (lc_cfr.memory.codec, reservoir.reserve)."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lc_cfr.game import engine
from lc_cfr.game.random_play import record_random_games
from lc_cfr.game.rules import Rules
from lc_cfr.learn.learner import Learner
from lc_cfr.memory import codec as cd
from lc_cfr.memory import reservoir as rv
from lc_cfr.nets.mlp import NetworkSpec

SMALL = Rules(n_colors=3, hand_size=6, max_turns=60)
CLASSIC = Rules()


def _observations(rules, games=64):
    """Both players' encodings at every decision of random games, [rows, E] float32."""
    trajectory = record_random_games(rules, 3, 1, jnp.arange(games))
    return np.asarray(trajectory.observations).reshape(-1, rules.encoding_size)


@pytest.mark.parametrize("rules", [SMALL, CLASSIC], ids=["small", "classic"])
def test_packed_encodings_decode_bit_for_bit(rules):
    codec = cd.for_rules(rules)
    info = _observations(rules)
    assert np.unique(info[:, -1]).size > 10  # many turns, scores and piles were seen
    stored = jax.jit(codec.encode)(info)
    assert stored.dtype == jnp.uint8 and stored.shape == (info.shape[0], codec.width)
    np.testing.assert_array_equal(np.asarray(jax.jit(codec.decode)(stored)), info)
    # the numpy path (old checkpoints, the torch learner's reference) writes the same bytes
    np.testing.assert_array_equal(codec.encode_numpy(info), np.asarray(stored))
    np.testing.assert_array_equal(codec.decode_numpy(np.asarray(stored)), info)


@pytest.mark.parametrize("rules", [SMALL, CLASSIC], ids=["small", "classic"])
def test_the_decode_permutes_columns_by_a_few_slices_not_a_gather(rules):
    codec = cd.for_rules(rules)
    runs = codec.order_runs
    assert np.concatenate([np.arange(a, b) for a, b in runs]).tolist() == codec.order.tolist()
    assert len(runs) <= 8  # the integer columns sit in a few blocks of the encoding
    # a gather's output is laid out transposed by XLA:CPU (docs/performance.md, Learner)
    hlo = jax.jit(codec.decode).lower(jnp.zeros((4, codec.width), jnp.uint8)).as_text()
    assert "gather" not in hlo


def test_the_default_encoding_takes_127_bytes_a_row_instead_of_1040():
    codec = cd.for_rules(CLASSIC)
    assert CLASSIC.encoding_size == 520
    assert codec.width == 61 + 66  # 487 bits, 33 int16 codes
    assert cd.bytes_per_row(codec, CLASSIC.num_actions) == 127 + 22 * 5 + 4
    assert cd.for_rules(CLASSIC, kind="float16").width * 2 == 1040


def test_integer_columns_keep_their_whole_int16_range_and_sign():
    codec = cd.for_rules(SMALL)
    rows = np.zeros((4, SMALL.encoding_size), np.float32)
    scales = np.asarray(codec.int_scales, np.float32)
    for row, k in enumerate((-32768, -1, 1, 32767)):
        rows[row, list(codec.int_columns)] = k * scales
    rows[:, list(codec.bit_columns)] = np.arange(len(codec.bit_columns)) % 3 == 0
    np.testing.assert_array_equal(np.asarray(codec.decode(codec.encode(rows))), rows)


def test_history_encodings_pack_the_opponent_hand_as_extra_bits():
    rules = SMALL
    codec = cd.for_rules(rules, extra_bits=rules.n_cards)
    assert codec.size == engine.history_size(rules)
    states = jax.vmap(lambda g: engine.init(rules, 1, g))(jnp.arange(8))
    info = jax.vmap(lambda s: engine.observe_history(rules, s, 1))(states)
    np.testing.assert_array_equal(np.asarray(codec.decode(codec.encode(info))), info)


def test_unknown_storage_and_mismatched_memories_are_named():
    with pytest.raises(ValueError, match="memory.info_storage"):
        cd.for_rules(SMALL, kind="int4")
    packed = cd.for_rules(SMALL)
    memory = rv.reservoir_init(capacity=4, num_actions=SMALL.num_actions, codec=packed)
    with pytest.raises(ValueError, match="needs its codec"):
        rv.reservoir_sample(memory, jax.random.key(0), 2)
    arrays = rv.to_numpy(memory)
    with pytest.raises(ValueError, match="'info' holds uint8"):
        rv.from_numpy(arrays)


def _batches(rules, count, batch, seed):
    info = _observations(rules, games=8)
    rng = np.random.default_rng(seed)
    for i in range(count):
        rows = rng.integers(0, info.shape[0], batch)
        mask = rng.random((batch, rules.num_actions)) < 0.5
        target = np.where(mask, rng.normal(size=mask.shape), 0).astype(np.float32)
        yield info[rows], mask, target, i + 1, rng.random(batch) < 0.9


def test_a_growing_packed_memory_equals_a_preallocated_float16_one():
    """Slots, sizes and sampled batches agree across growth and codecs, past the
    capacity (replacement draws) too; the learner trains to the same parameters."""
    rules, capacity, batch = SMALL, 300, 64
    packed = cd.for_rules(rules)
    grown = rv.reservoir_init(
        capacity=capacity, num_actions=rules.num_actions, codec=packed, rows=16
    )
    full = rv.reservoir_init(
        capacity=capacity, num_actions=rules.num_actions, encoding_size=rules.encoding_size
    )
    add_packed = jax.jit(rv.reservoir_add, static_argnames="codec")
    add_plain = jax.jit(rv.reservoir_add)
    shapes = []
    for i, (info, mask, target, t, valid) in enumerate(_batches(rules, 9, batch, seed=4)):
        key = jax.random.key(i)
        grown = rv.reserve(grown, batch)
        shapes.append(rv.allocated_rows(grown))
        grown = add_packed(grown, key, info, mask, target, t, valid, codec=packed)
        full = add_plain(full, key, info, mask, target, t, valid)
        assert int(grown.seen) == int(full.seen) and int(grown.size) == int(full.size)
    assert shapes[0] == 64 and shapes[-1] == capacity and sorted(shapes) == shapes
    assert int(full.seen) > capacity  # Algorithm R's replacement draws were exercised
    # at its capacity the memory is left as it is, not copied into the same shape again
    assert rv.reserve(grown, batch) is grown
    np.testing.assert_array_equal(packed.decode_numpy(np.asarray(grown.info)), full.info)
    for name in ("mask", "target", "iteration"):
        np.testing.assert_array_equal(getattr(grown, name), getattr(full, name))

    spec = NetworkSpec(
        input_size=rules.encoding_size, num_actions=rules.num_actions, hidden_size=16, num_layers=1
    )
    make = lambda codec: Learner(  # noqa: E731
        spec,
        kind="advantage",
        optimizer=optax.adam(1e-3),
        batch_size=32,
        num_updates=5,
        weighting="lcfr",
        codec=codec,
    )
    key = jax.random.key(2)
    jax.tree.map(
        np.testing.assert_array_equal,
        rv.reservoir_sample(grown, key, 256, codec=packed),
        rv.reservoir_sample(full, key, 256),
    )
    # the same batches; the two compiled steps may round in a different order
    params, opt = make(None).init(jax.random.key(1))
    a = make(packed).train(params, opt, grown, key)
    b = make(None).train(params, opt, full, key)
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-8), a, b)


def test_a_checkpointed_growing_memory_restores_with_its_codec():
    rules = SMALL
    packed = cd.for_rules(rules)
    memory = rv.reservoir_init(capacity=100, num_actions=rules.num_actions, codec=packed, rows=8)
    info, mask, target, t, valid = next(_batches(rules, 1, 40, seed=1))
    memory = rv.reservoir_add(
        rv.reserve(memory, 40), jax.random.key(0), info, mask, target, t, valid, codec=packed
    )
    arrays = rv.to_numpy(memory)
    assert arrays["info"].dtype == np.uint8 and int(arrays["capacity"]) == 100
    restored = rv.from_numpy(arrays, codec=packed, rows=rv.allocated_rows(memory))
    jax.tree.map(np.testing.assert_array_equal, restored, memory)


def test_the_torch_learner_decodes_packed_rows_as_the_optax_learner_does():
    from lc_cfr.learn import torch_learner as tl
    from lc_cfr.learn.torch_adapter import TrainerTorchLearner

    rules = SMALL
    packed = cd.for_rules(rules)
    info = _observations(rules, games=8)[:500]
    decoded = tl.packed_decoder(packed)(
        tl.memory_tensors(
            {
                "info": packed.encode_numpy(info),
                "mask": np.ones((500, 1), bool),
                "target": np.zeros((500, 1), np.float32),
                "iteration": np.ones(500, np.int32),
            }
        ).info
    )
    np.testing.assert_array_equal(decoded.numpy(), info)

    memories = {}
    for name, codec in (("packed", packed), ("float16", None)):
        memory = rv.reservoir_init(
            capacity=200,
            num_actions=rules.num_actions,
            encoding_size=rules.encoding_size,
            codec=codec,
        )
        for i, (x, mask, target, t, valid) in enumerate(_batches(rules, 3, 64, seed=2)):
            memory = rv.reservoir_add(
                memory, jax.random.key(i), x, mask, target, t, valid, codec=codec
            )
        memories[name] = (memory, codec)
    spec = NetworkSpec(
        input_size=rules.encoding_size, num_actions=rules.num_actions, hidden_size=16, num_layers=1
    )
    sizes = dict(kind="advantage", batch_size=32, num_updates=3, weighting="lcfr")
    hyper = dict(learning_rate=1e-3, weight_decay=0.0, grad_clip=1.0)
    results = []
    for memory, codec in memories.values():
        learner = TrainerTorchLearner(tl.TorchLearner(spec, **hyper, **sizes), codec=codec)
        params, opt = learner.init(jax.random.key(0))
        results.append(learner.train(params, opt, memory, jax.random.key(1))[0])
    jax.tree.map(np.testing.assert_array_equal, *results)
