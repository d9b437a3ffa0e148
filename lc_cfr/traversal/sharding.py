"""The device mesh that the lockstep traversal and the evaluation games are sharded over.

One axis, `lanes` (AXIS): device d of the mesh runs the d-th contiguous block of the
work (traversals of the quota, deals of an evaluation). The mesh spans every device of
every process (`jax.devices()`, process 0's devices first), so a run started with
`jax.distributed.initialize` on several hosts shares one mesh. Inputs are replicated on
it (`replicate`), each block runs on its device inside `jax.shard_map`, and the blocks'
results are gathered on every device, so that every process can read the whole result
on its own first device (`local_copy`) and carry on alone, the same on every process.
Besides the summed statistics, every device's own counts are gathered too
(`per_device`), and reported as one metric per device (`device_metrics`), so that a run
shows that every device of every process did its share.

docs/scaling.md describes the design and how to run it on a cluster.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

AXIS = "lanes"


def device_count(devices: int | None, field: str = "devices") -> int:
    """The devices to shard over: `devices`, or every device of every process.

    Raises:
      ValueError: naming `field`, when `devices` is not between 1 and the devices there
        are, or, with several processes, not all of them (a process left out of the
        mesh could not take part in its programs).
    """
    available = jax.device_count()
    if devices is None:
        return available
    if not 1 <= devices <= available:
        raise ValueError(
            f"{field} must be between 1 and the {available} JAX devices, got {devices}"
        )
    if jax.process_count() > 1 and devices != available:
        raise ValueError(
            f"{field}={devices}: with {jax.process_count()} processes the mesh must span all "
            f"{available} devices"
        )
    return devices


def sharded(devices: int) -> bool:
    """Whether work for `devices` devices goes through the mesh (else: one plain jit)."""
    return devices > 1 or jax.process_count() > 1


@functools.cache
def lanes_mesh(devices: int) -> Mesh:
    """A one-axis mesh of the first `devices` global devices (cached: one per size)."""
    return Mesh(np.asarray(jax.devices()[:devices]), (AXIS,))


def replicate(tree, mesh: Mesh):
    """`tree` (the same values on every process) replicated on every device of `mesh`."""
    if jax.process_count() == 1:
        return jax.device_put(tree, NamedSharding(mesh, P()))
    # Each process contributes its own copy: no cross-host transfer, no equality check
    # (the trainer keeps the processes' states equal by construction).
    return multihost_utils.host_local_array_to_global_array(tree, mesh, P())


def local_copy(tree):
    """The copy of a replicated result on this process's first device of its mesh."""
    return jax.tree.map(lambda x: x.addressable_data(0), tree)


def per_device(tree):
    """Inside a `jax.shard_map` over `AXIS`: every device's `tree`, stacked along a new
    leading axis in mesh order (leaves [D, ...]), on every device."""
    return jax.tree.map(lambda x: jax.lax.all_gather(x, AXIS), tree)


DEVICE_SUFFIX = "_device"  # metric `<name>_device<d>`: device d's share of `<name>`


def device_metrics(counts: dict) -> dict[str, int]:
    """{`<name>_device<d>`: device d's count} of {name: [D] counts in mesh order}.

    Device d of the mesh is `jax.devices()[d]`: process d // local devices' (d mod
    local devices)-th device when every process has as many.
    """
    return {
        f"{name}{DEVICE_SUFFIX}{d}": int(value)
        for name, vector in counts.items()
        for d, value in enumerate(np.asarray(vector).reshape(-1))
    }


def broadcast_from_first(tree):
    """Process 0's `tree` on every process (each passes a tree of the same shapes).

    Exact to the bit (a gather of process 0's rows, where a psum-based broadcast would
    turn -0.0 into 0.0); numpy leaves come back.
    """
    if jax.process_count() == 1:
        return jax.tree.map(np.asarray, tree)
    devices = np.asarray(jax.devices()).reshape(jax.process_count(), jax.local_device_count())
    mesh = Mesh(devices, ("processes", "local"))

    def rows(x):
        x = np.asarray(x)
        if jax.process_index() != 0:
            x = np.zeros_like(x)
        return x[None]

    # [processes, ...]: row p is process p's tree, replicated on its local devices
    stacked = multihost_utils.host_local_array_to_global_array(
        jax.tree.map(rows, tree), mesh, P("processes")
    )
    first = jax.jit(
        lambda t: jax.tree.map(lambda x: x[0], t), out_shardings=NamedSharding(mesh, P())
    )(stacked)
    return jax.tree.map(lambda x: np.asarray(x.addressable_data(0)), first)
