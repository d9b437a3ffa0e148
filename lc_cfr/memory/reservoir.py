"""Fixed-capacity reservoir memories held as contiguous device arrays (docs/design.md section 3.7).

Deep CFR keeps its advantage and strategy samples in reservoir buffers: after n samples
have been offered, every one of them is in the buffer with the same probability
capacity / n. A `Reservoir` is a pytree of arrays; `reservoir_add` writes a fixed-shape
batch with scatters, so adding never stacks Python objects and never changes a shape
(jit it once per allocation; donate the memory to update in place).

Encodings are stored by a codec (`lc_cfr.memory.codec`): packed bits and int16 codes by
default, 127 bytes a row for the default encoding where float16 took 1040, decoded
exactly inside the jitted sampling. A reservoir of capacity C may allocate fewer rows
R <= C and grow (`reserve`, doubling) before an add could reach row R: Algorithm R's
slots depend on C only, and no slot >= seen is ever written, so a grown memory holds
exactly what a preallocated one holds. Memory is then paid as it fills.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.memory.codec import Codec, Float16Codec

_ROW_FIELDS = ("info", "mask", "target", "iteration")


class Reservoir(NamedTuple):
    """A reservoir memory of capacity C with R <= C rows allocated; rows [size, R) are
    unfilled (all zero)."""

    info: jax.Array  # [R, W] stored encodings (codec.dtype: uint8 packed, or float16)
    mask: jax.Array  # [R, A] bool, legal actions
    target: jax.Array  # [R, A] float32, regret targets or policies
    iteration: jax.Array  # [R] int32, CFR iteration that produced the row
    size: jax.Array  # [] int32, filled rows: min(seen, C)
    seen: jax.Array  # [] int32, valid rows offered so far
    capacity: jax.Array  # [] int32, C


class Batch(NamedTuple):
    """Rows drawn from a reservoir."""

    info: jax.Array  # [B, E] float32
    mask: jax.Array  # [B, A] bool
    target: jax.Array  # [B, A] float32
    iteration: jax.Array  # [B] int32


def reservoir_init(
    *,
    capacity: int,
    num_actions: int,
    encoding_size: int | None = None,
    codec: Codec | None = None,
    rows: int | None = None,
) -> Reservoir:
    """An empty reservoir of `capacity` rows, all zero.

    Args:
        capacity: C.
        num_actions: A.
        encoding_size: E, for the default float16 codec (omit when `codec` is given).
        codec: how encodings are stored; default `Float16Codec(encoding_size)`.
        rows: rows allocated now (R, at most C; `reserve` grows them); default C.

    Raises:
        ValueError: if a size is below 1.
    """
    if codec is None:
        if encoding_size is None:
            raise ValueError("reservoir_init needs encoding_size or codec")
        codec = Float16Codec(int(encoding_size))
    rows = capacity if rows is None else min(int(rows), int(capacity))
    for name, value in (
        ("capacity", capacity),
        ("encoding_size", codec.size),
        ("num_actions", num_actions),
        ("rows", rows),
    ):
        if int(value) < 1:
            raise ValueError(f"reservoir {name} must be >= 1, got {value!r}")
    return Reservoir(
        info=jnp.zeros((rows, codec.width), codec.dtype),
        mask=jnp.zeros((rows, num_actions), jnp.bool_),
        target=jnp.zeros((rows, num_actions), jnp.float32),
        iteration=jnp.zeros((rows,), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        seen=jnp.zeros((), jnp.int32),
        capacity=jnp.asarray(capacity, jnp.int32),
    )


def codec_of(memory: Reservoir, codec: Codec | None) -> Codec:
    """`codec`, or the float16 codec a float16 memory implies; raises for packed rows
    without their codec (they cannot be read without it)."""
    if codec is not None:
        if memory.info.shape[-1] != codec.width or memory.info.dtype != codec.dtype:
            raise ValueError(
                f"memory stores info as {memory.info.dtype}[{memory.info.shape[-1]}], but "
                f"the codec writes {codec.dtype}[{codec.width}]"
            )
        return codec
    if memory.info.dtype != jnp.float16:
        raise ValueError(f"a memory storing {memory.info.dtype} info needs its codec")
    return Float16Codec(memory.info.shape[-1])


def allocated_rows(memory: Reservoir) -> int:
    """R, the rows allocated now (static)."""
    return memory.iteration.shape[0]


def doubled_rows(rows: int, needed: int, capacity: int) -> int:
    """`rows` doubled until it holds `needed` rows, at most `capacity` (at least 1): the
    allocations a growing memory passes through."""
    while rows < needed:
        rows *= 2
    return max(1, min(rows, capacity))


def reserve(memory: Reservoir, incoming: int) -> Reservoir:
    """`memory` with room for `incoming` more offered rows: when the filled rows plus
    `incoming` could pass the allocation, the rows double (at least to that many, at
    most to C) and the filled ones are copied. Host-side: call it before a jitted add.

    Growth is by doubling so that a run meets only log2(C / R) shapes (one compile of
    the add and the training step each).
    """
    rows, capacity = allocated_rows(memory), int(memory.capacity)
    # a memory allocated to its capacity never grows, however many rows are offered
    needed = min(int(memory.seen) + int(incoming), capacity)
    if needed <= rows:
        return memory
    grown = doubled_rows(rows, needed, capacity)

    def widen(store):
        bigger = jnp.zeros((grown,) + store.shape[1:], store.dtype)
        return jax.lax.dynamic_update_slice(bigger, store, (0,) * store.ndim)

    return memory._replace(**{name: widen(getattr(memory, name)) for name in _ROW_FIELDS})


def capacity_of(memory: Reservoir) -> int:
    """C, the reservoir's capacity (a host read)."""
    return int(memory.capacity)


def candidate_slots(seen: jax.Array, key: jax.Array, valid: jax.Array, *, capacity: int):
    """Algorithm R's slot for each row of a batch, as if the rows came one at a time.

    The n-th offered row (0-based, counting only valid rows, in order) takes slot n while
    n < capacity; otherwise it draws j uniform in [0, n] and takes slot j if j < capacity.

    Args:
        seen: [] int32, rows offered before this batch.
        key: PRNG key for the draws.
        valid: [B] bool, rows to offer.
        capacity: C (static or traced).

    Returns:
        [B] int32 slots; `capacity` marks a row that is invalid or dropped. Two rows may
        share a slot (the later one must win, see `last_writers`).
    """
    valid = jnp.asarray(valid, jnp.bool_)
    valid_i = valid.astype(jnp.int32)
    offered = seen + jnp.cumsum(valid_i) - valid_i  # [B] n of each row
    draw = jax.random.randint(key, valid.shape, 0, offered + 1, dtype=jnp.int32)
    slot = jnp.where(offered < capacity, offered, draw)
    return jnp.where(valid & (slot < capacity), slot, capacity).astype(jnp.int32)


def last_writers(slots: jax.Array, *, capacity: int) -> jax.Array:
    """[B] bool: the row is the last of the batch to take its slot (and slot < capacity).

    Sorting (slot, row) pairs puts the rows of a slot together in row order, so the last
    of each run wins. The winners' slots are distinct, which makes the scatter that
    writes them deterministic (XLA leaves the order of duplicate scatters unspecified).
    """
    rows = jnp.arange(slots.shape[0], dtype=jnp.int32)
    sorted_slots, sorted_rows = jax.lax.sort((slots, rows), num_keys=2)
    next_slots = jnp.append(sorted_slots[1:], jnp.int32(capacity))
    is_last = (sorted_slots != next_slots) & (sorted_slots < capacity)
    return jnp.zeros(slots.shape, jnp.bool_).at[sorted_rows].set(is_last, unique_indices=True)


def reservoir_add(
    memory: Reservoir,
    key: jax.Array,
    info: jax.Array,
    mask: jax.Array,
    target: jax.Array,
    iteration,
    valid: jax.Array,
    *,
    codec: Codec | None = None,
) -> Reservoir:
    """Offers a fixed-shape batch of rows in order, skipping rows with valid=False.

    Exactly Vitter's Algorithm R applied to the valid rows one at a time (see
    `candidate_slots`); when rows of the batch pick the same slot the later one wins.
    Jittable; shapes never change, so one compilation serves every batch of size B.

    Args:
        memory: the reservoir.
        key: PRNG key for the replacement draws.
        info: [B, E] encodings (stored by the codec).
        mask: [B, A] bool legal actions.
        target: [B, A] float32 targets.
        iteration: [] int, CFR iteration stamped on every row.
        valid: [B] bool, rows to offer.
        codec: the memory's codec (static; default: float16 rows).

    Returns:
        The updated reservoir. Rows must be allocated for every slot below
        min(seen + B, C): call `reserve(memory, B)` first on a growing memory.
    """
    capacity = memory.capacity
    valid = jnp.asarray(valid, jnp.bool_)
    slots = candidate_slots(memory.seen, key, valid, capacity=capacity)
    slots = jnp.where(last_writers(slots, capacity=capacity), slots, capacity)
    return _write_rows(memory, slots, info, mask, target, iteration, valid, codec)


def _write_rows(memory, slots, info, mask, target, iteration, valid, codec) -> Reservoir:
    """Writes every row to its slot (`capacity` drops it) and counts the valid rows."""
    iteration = jnp.broadcast_to(jnp.asarray(iteration, jnp.int32), valid.shape)
    info = codec_of(memory, codec).encode(info)

    def write(store, rows):
        return store.at[slots].set(rows.astype(store.dtype), mode="drop")

    seen = memory.seen + jnp.sum(valid, dtype=jnp.int32)
    return Reservoir(
        info=write(memory.info, info),
        mask=write(memory.mask, mask),
        target=write(memory.target, target),
        iteration=write(memory.iteration, iteration),
        size=jnp.minimum(seen, memory.capacity).astype(jnp.int32),
        seen=seen,
        capacity=memory.capacity,
    )


def window_add(
    memory: Reservoir,
    info: jax.Array,
    mask: jax.Array,
    target: jax.Array,
    iteration,
    valid,
    *,
    codec: Codec | None = None,
) -> Reservoir:
    """Writes the valid rows of a batch over the oldest rows: a sliding window of the
    last C rows offered, for targets that go stale (the value network's follow the
    current policy). Same arguments as `reservoir_add`, no key: nothing is random."""
    capacity = memory.capacity
    valid = jnp.asarray(valid, jnp.bool_)
    valid_i = valid.astype(jnp.int32)
    offered = memory.seen + jnp.cumsum(valid_i) - valid_i
    slots = jnp.where(valid, offered % capacity, capacity).astype(jnp.int32)
    slots = jnp.where(last_writers(slots, capacity=capacity), slots, capacity)
    return _write_rows(memory, slots, info, mask, target, iteration, valid, codec)


def reservoir_sample(
    memory: Reservoir, key: jax.Array, batch_size: int, *, codec: Codec | None = None
) -> Batch:
    """Draws `batch_size` rows uniformly from the filled rows, with replacement, and
    decodes their encodings.

    An empty reservoir yields its (all-zero) row 0. `batch_size` and `codec` are static
    under jit.

    Returns:
        Batch(info [B, E] float32, mask [B, A] bool, target [B, A] float32,
        iteration [B] int32).
    """
    rows = jax.random.randint(key, (batch_size,), 0, jnp.maximum(memory.size, 1))
    return Batch(
        info=codec_of(memory, codec).decode(memory.info[rows]),
        mask=memory.mask[rows],
        target=memory.target[rows],
        iteration=memory.iteration[rows],
    )


def to_numpy(memory: Reservoir) -> dict[str, np.ndarray]:
    """The filled rows and counters as numpy arrays, for a checkpoint.

    Returns:
        {"info" [S, W] stored encodings, "mask" [S, A] bool, "target" [S, A] float32,
        "iteration" [S] int32, "size" [] int32, "seen" [] int32, "capacity" [] int64},
        S = size.
    """
    size = int(memory.size)
    arrays = {name: np.asarray(getattr(memory, name)[:size]) for name in _ROW_FIELDS}
    arrays["size"] = np.asarray(size, np.int32)
    arrays["seen"] = np.asarray(memory.seen, np.int32)
    arrays["capacity"] = np.asarray(capacity_of(memory), np.int64)
    return arrays


def from_numpy(
    arrays: Mapping[str, np.ndarray], *, codec: Codec | None = None, rows: int | None = None
) -> Reservoir:
    """Restores the exact reservoir that `to_numpy` saved (unfilled rows are zero).

    Args:
        arrays: what `to_numpy` returned.
        codec: the codec the rows were stored with (default: float16 rows).
        rows: rows to allocate (at least the saved size, at most the capacity); default
            the capacity.

    Raises:
        ValueError: naming the field, when a key is missing or the arrays disagree.
    """
    for name in _ROW_FIELDS + ("size", "seen", "capacity"):
        if name not in arrays:
            raise ValueError(f"reservoir arrays are missing key {name!r}")
    capacity, size, seen = (int(arrays[n]) for n in ("capacity", "size", "seen"))
    if not 0 <= size <= capacity or size != min(seen, capacity):
        raise ValueError(f"reservoir size={size} disagrees with seen={seen}, capacity={capacity}")
    info, mask, target = (np.asarray(arrays[n]) for n in ("info", "mask", "target"))
    if info.ndim != 2 or mask.ndim != 2 or mask.shape != target.shape:
        raise ValueError(
            f"reservoir arrays have shapes info {info.shape}, mask {mask.shape}, "
            f"target {target.shape}; expected [S, E], [S, A], [S, A]"
        )
    if codec is None:
        codec = Float16Codec(info.shape[1])
    if info.dtype != codec.dtype or info.shape[1] != codec.width:
        raise ValueError(
            f"reservoir field 'info' holds {info.dtype}[{info.shape[1]}], the codec "
            f"stores {codec.dtype}[{codec.width}]"
        )
    memory = reservoir_init(
        capacity=capacity,
        num_actions=mask.shape[1],
        codec=codec,
        rows=capacity if rows is None else max(int(rows), size, 1),
    )
    restored = {}
    for name in _ROW_FIELDS:
        store = getattr(memory, name)
        value = np.asarray(arrays[name])
        if value.shape != (size,) + store.shape[1:]:
            raise ValueError(
                f"reservoir field {name!r} has shape {value.shape}, "
                f"expected {(size,) + store.shape[1:]}"
            )
        restored[name] = store.at[:size].set(jnp.asarray(value, store.dtype))
    return memory._replace(
        **restored, size=jnp.asarray(size, jnp.int32), seen=jnp.asarray(seen, jnp.int32)
    )
