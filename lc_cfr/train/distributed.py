"""Several processes training one run: `jax.distributed` from the `distributed` config block.

With `distributed.coordinator_address` set, `initialize` joins this process to the run's
others before any JAX computation. From then on `jax.devices()` lists every process's
devices and the lockstep traversal and the evaluation games are sharded over all of them
(`lc_cfr.traversal.sharding`): every process runs its devices' blocks, and every process
receives the gathered samples and records. Each process then adds the same samples to its
own memories and trains the same networks with the same keys, so the processes stay equal
without exchanging parameters (that needs identical hosts: the same jaxlib and device
kind, since XLA programs are deterministic only per build and device).

Process 0 alone writes the run directory (config.json, metrics, TensorBoard, checkpoints);
on a resume it reads the checkpoint and hands the state to the others
(`share_restored`), so only process 0 needs the run directory at all.

docs/scaling.md has the design and how to run it on a cluster.
"""

from __future__ import annotations

import json
import pathlib
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from lc_cfr.train import checkpoint
from lc_cfr.traversal import sharding

AUTO = "auto"  # coordinator_address: JAX reads the cluster (SLURM, Open MPI, ...)


class DistributedSettings(NamedTuple):
    """The `distributed` block, checked."""

    coordinator_address: str  # host:port of process 0's coordinator, or AUTO
    num_processes: int  # processes in the run (0 with AUTO: JAX decides)
    process_id: int  # this process (0 with AUTO: JAX decides)
    initialization_timeout: int  # seconds to wait for every process to join


def settings_from_config(config) -> DistributedSettings | None:
    """The run's distributed settings, or None for one process (the default).

    Raises:
      ValueError: naming the `distributed.*` (or `traversal.backend`) field at fault.
    """
    block = config.get("distributed")
    if block is None:  # a config written before the block existed
        return None
    address = str(block.coordinator_address).strip()
    if not address:
        if block.num_processes != 1:
            raise ValueError(
                f"distributed.num_processes={block.num_processes} needs "
                "distributed.coordinator_address (host:port of process 0, or 'auto')"
            )
        return None
    if block.initialization_timeout < 1:
        raise ValueError(
            "distributed.initialization_timeout must be >= 1 second, got "
            f"{block.initialization_timeout}"
        )
    if config.traversal.backend != "jax":
        raise ValueError(
            f"distributed.coordinator_address is set, but traversal.backend="
            f"{config.traversal.backend!r} runs in one process; use traversal.backend='jax'"
        )
    if address == AUTO:
        return DistributedSettings(AUTO, 0, 0, int(block.initialization_timeout))
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(
            f"distributed.coordinator_address must be host:port or 'auto', got {address!r}"
        )
    if block.num_processes < 1:
        raise ValueError(f"distributed.num_processes must be >= 1, got {block.num_processes}")
    if not 0 <= block.process_id < block.num_processes:
        raise ValueError(
            f"distributed.process_id must be in [0, distributed.num_processes="
            f"{block.num_processes}), got {block.process_id}"
        )
    return DistributedSettings(
        address, int(block.num_processes), int(block.process_id), int(block.initialization_timeout)
    )


def initialize(config) -> bool:
    """Joins this process to the run's others (`jax.distributed.initialize`) when the
    config asks for several; call it before any JAX computation. Returns whether the run
    is distributed."""
    settings = settings_from_config(config)
    if settings is None:
        return False
    if not jax.distributed.is_initialized():
        options = dict(initialization_timeout=settings.initialization_timeout)
        if settings.coordinator_address != AUTO:
            options.update(
                coordinator_address=settings.coordinator_address,
                num_processes=settings.num_processes,
                process_id=settings.process_id,
            )
        jax.distributed.initialize(**options)
    logging.info(
        "process %d of %d: %d local devices, %d in all",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.device_count(),
    )
    return True


def is_writer() -> bool:
    """Whether this process writes the run directory (process 0 only)."""
    return jax.process_index() == 0


class NullMetrics:
    """The metrics writer of the processes that write nothing."""

    path = None

    def write(self, row: dict) -> None:
        """Drops the row (process 0 writes the same one)."""

    def close(self) -> None:
        """Nothing to close."""


def checkpoint_store(
    directory: pathlib.Path, *, keep_every: int, asynchronous: bool
) -> checkpoint.CheckpointStore:
    """The trainer's writable checkpoint store; with several processes, process 0 writes
    it alone (`CheckpointStore(primary_only=True)`)."""
    return checkpoint.CheckpointStore(
        directory,
        keep_every=keep_every,
        asynchronous=asynchronous,
        primary_only=jax.process_count() > 1,
    )


def share_restored(restored, template):
    """Process 0's restored (state, metrics row) on every process, or None.

    Args:
      restored: on process 0 what `Trainer.restore` gave (None when there is no
        checkpoint); ignored elsewhere.
      template: a callable giving a state of the restored state's structure (the initial
        state), for the processes that receive it.

    Returns:
      restored itself on process 0; elsewhere (state, None) with process 0's state, or
      None when process 0 has none. With one process: `restored`.
    """
    if jax.process_count() == 1:
        return restored
    writer = is_writer()
    found = int(sharding.broadcast_from_first(np.int32(writer and restored is not None)))
    if not found:
        return None
    mine = restored[0] if writer else template()
    leaves, treedef = jax.tree.flatten(mine)
    # Python scalars (iteration, counters, SD-CFR's total weight) go as JSON text: an
    # array broadcast would narrow them to 32 bits. The arrays' shapes go with them: a
    # restored memory may have grown past the template's rows (reservoir.reserve).
    scalar = [isinstance(x, (bool, int, float)) for x in leaves]
    shapes = [list(np.shape(x)) for x, s in zip(leaves, scalar, strict=True) if not s]
    scalars, shapes = _broadcast_json(
        [[x for x, s in zip(leaves, scalar, strict=True) if s], shapes]
    )
    arrays = [x for x, s in zip(leaves, scalar, strict=True) if not s]
    if not writer:
        arrays = [
            np.zeros(shape, np.asarray(x).dtype) for x, shape in zip(arrays, shapes, strict=True)
        ]
    arrays = sharding.broadcast_from_first(arrays)
    if writer:
        return restored
    scalars, arrays = iter(scalars), iter(arrays)
    shared = [next(scalars) if s else jnp.asarray(next(arrays)) for s in scalar]
    return jax.tree.unflatten(treedef, shared), None


_JSON_BYTES = 1 << 16  # room for the state's Python scalars as JSON text


def _broadcast_json(values: list) -> list:
    """Process 0's JSON-able `values` on every process."""
    text = json.dumps(values).encode() if is_writer() else b""
    if len(text) > _JSON_BYTES:
        raise ValueError(f"{len(text)} bytes of scalars exceed the {_JSON_BYTES} broadcast")
    buffer = np.zeros(_JSON_BYTES, np.uint8)
    buffer[: len(text)] = np.frombuffer(text, np.uint8)
    received = bytes(sharding.broadcast_from_first(buffer)).rstrip(b"\0")
    return json.loads(received.decode())
