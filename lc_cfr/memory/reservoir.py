"""Fixed-capacity reservoir memories held as contiguous device arrays (docs/design.md section 3.7).

Deep CFR keeps its advantage and strategy samples in reservoir buffers: after n samples
have been offered, every one of them is in the buffer with the same probability
capacity / n. A `Reservoir` is a pytree of preallocated arrays; `reservoir_add` writes a
fixed-shape batch with scatters, so adding never stacks Python objects and never changes
a shape (jit it once; donate the memory to update in place).

Encodings are stored as float16: every value of the encoding is a small integer times a
power of two (docs/game.md), which float16 holds exactly, so storage halves at no loss.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

_ROW_FIELDS = ("info", "mask", "target", "iteration")


class Reservoir(NamedTuple):
    """A reservoir memory of capacity C; rows [size, C) are unfilled (all zero)."""

    info: jax.Array  # [C, E] float16, information-state encodings
    mask: jax.Array  # [C, A] bool, legal actions
    target: jax.Array  # [C, A] float32, regret targets or policies
    iteration: jax.Array  # [C] int32, CFR iteration that produced the row
    size: jax.Array  # [] int32, filled rows: min(seen, C)
    seen: jax.Array  # [] int32, valid rows offered so far


class Batch(NamedTuple):
    """Rows drawn from a reservoir."""

    info: jax.Array  # [B, E] float32
    mask: jax.Array  # [B, A] bool
    target: jax.Array  # [B, A] float32
    iteration: jax.Array  # [B] int32


def reservoir_init(*, capacity: int, encoding_size: int, num_actions: int) -> Reservoir:
    """An empty reservoir of `capacity` rows, all zero.

    Raises:
        ValueError: if a size is below 1.
    """
    for name, value in (
        ("capacity", capacity),
        ("encoding_size", encoding_size),
        ("num_actions", num_actions),
    ):
        if int(value) < 1:
            raise ValueError(f"reservoir {name} must be >= 1, got {value!r}")
    return Reservoir(
        info=jnp.zeros((capacity, encoding_size), jnp.float16),
        mask=jnp.zeros((capacity, num_actions), jnp.bool_),
        target=jnp.zeros((capacity, num_actions), jnp.float32),
        iteration=jnp.zeros((capacity,), jnp.int32),
        size=jnp.zeros((), jnp.int32),
        seen=jnp.zeros((), jnp.int32),
    )


def capacity_of(memory: Reservoir) -> int:
    """C, the number of rows (static)."""
    return memory.iteration.shape[0]


def candidate_slots(seen: jax.Array, key: jax.Array, valid: jax.Array, *, capacity: int):
    """Algorithm R's slot for each row of a batch, as if the rows came one at a time.

    The n-th offered row (0-based, counting only valid rows, in order) takes slot n while
    n < capacity; otherwise it draws j uniform in [0, n] and takes slot j if j < capacity.

    Args:
        seen: [] int32, rows offered before this batch.
        key: PRNG key for the draws.
        valid: [B] bool, rows to offer.
        capacity: C (static).

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
) -> Reservoir:
    """Offers a fixed-shape batch of rows in order, skipping rows with valid=False.

    Exactly Vitter's Algorithm R applied to the valid rows one at a time (see
    `candidate_slots`); when rows of the batch pick the same slot the later one wins.
    Jittable; shapes never change, so one compilation serves every batch of size B.

    Args:
        memory: the reservoir.
        key: PRNG key for the replacement draws.
        info: [B, E] encodings (stored as float16).
        mask: [B, A] bool legal actions.
        target: [B, A] float32 targets.
        iteration: [] int, CFR iteration stamped on every row.
        valid: [B] bool, rows to offer.

    Returns:
        The updated reservoir.
    """
    capacity = capacity_of(memory)
    valid = jnp.asarray(valid, jnp.bool_)
    slots = candidate_slots(memory.seen, key, valid, capacity=capacity)
    slots = jnp.where(last_writers(slots, capacity=capacity), slots, capacity)
    return _write_rows(memory, slots, info, mask, target, iteration, valid)


def _write_rows(memory, slots, info, mask, target, iteration, valid) -> Reservoir:
    """Writes every row to its slot (`capacity` drops it) and counts the valid rows."""
    iteration = jnp.broadcast_to(jnp.asarray(iteration, jnp.int32), valid.shape)

    def write(store, rows):
        return store.at[slots].set(rows.astype(store.dtype), mode="drop")

    seen = memory.seen + jnp.sum(valid, dtype=jnp.int32)
    return Reservoir(
        info=write(memory.info, info),
        mask=write(memory.mask, mask),
        target=write(memory.target, target),
        iteration=write(memory.iteration, iteration),
        size=jnp.minimum(seen, capacity_of(memory)).astype(jnp.int32),
        seen=seen,
    )


def window_add(
    memory: Reservoir, info: jax.Array, mask: jax.Array, target: jax.Array, iteration, valid
) -> Reservoir:
    """Writes the valid rows of a batch over the oldest rows: a sliding window of the
    last C rows offered, for targets that go stale (the value network's follow the
    current policy). Same arguments as `reservoir_add`, no key: nothing is random."""
    capacity = capacity_of(memory)
    valid = jnp.asarray(valid, jnp.bool_)
    valid_i = valid.astype(jnp.int32)
    offered = memory.seen + jnp.cumsum(valid_i) - valid_i
    slots = jnp.where(valid, offered % capacity, capacity).astype(jnp.int32)
    slots = jnp.where(last_writers(slots, capacity=capacity), slots, capacity)
    return _write_rows(memory, slots, info, mask, target, iteration, valid)


def reservoir_sample(memory: Reservoir, key: jax.Array, batch_size: int) -> Batch:
    """Draws `batch_size` rows uniformly from the filled rows, with replacement.

    An empty reservoir yields its (all-zero) row 0. `batch_size` is static under jit.

    Returns:
        Batch(info [B, E] float32, mask [B, A] bool, target [B, A] float32,
        iteration [B] int32).
    """
    rows = jax.random.randint(key, (batch_size,), 0, jnp.maximum(memory.size, 1))
    return Batch(
        info=memory.info[rows].astype(jnp.float32),
        mask=memory.mask[rows],
        target=memory.target[rows],
        iteration=memory.iteration[rows],
    )


def to_numpy(memory: Reservoir) -> dict[str, np.ndarray]:
    """The filled rows and counters as numpy arrays, for a checkpoint.

    Returns:
        {"info" [S, E] float16, "mask" [S, A] bool, "target" [S, A] float32,
        "iteration" [S] int32, "size" [] int32, "seen" [] int32, "capacity" [] int64},
        S = size.
    """
    size = int(memory.size)
    arrays = {name: np.asarray(getattr(memory, name)[:size]) for name in _ROW_FIELDS}
    arrays["size"] = np.asarray(size, np.int32)
    arrays["seen"] = np.asarray(memory.seen, np.int32)
    arrays["capacity"] = np.asarray(capacity_of(memory), np.int64)
    return arrays


def from_numpy(arrays: Mapping[str, np.ndarray]) -> Reservoir:
    """Restores the exact reservoir that `to_numpy` saved (unfilled rows are zero).

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
    memory = reservoir_init(
        capacity=capacity, encoding_size=info.shape[1], num_actions=mask.shape[1]
    )
    rows = {}
    for name in _ROW_FIELDS:
        store = getattr(memory, name)
        value = np.asarray(arrays[name])
        if value.shape != (size,) + store.shape[1:]:
            raise ValueError(
                f"reservoir field {name!r} has shape {value.shape}, "
                f"expected {(size,) + store.shape[1:]}"
            )
        rows[name] = store.at[:size].set(jnp.asarray(value, store.dtype))
    return memory._replace(
        **rows, size=jnp.asarray(size, jnp.int32), seen=jnp.asarray(seen, jnp.int32)
    )
