"""The Cython + torch backends `recursive`, `interleaved` and `server`.

`backends.py` is the backend the registry builds, `workers.py` the worker side of its
process pool, `weights.py` the shared-memory weight board the parent publishes the
networks on, and `server.py` the inference server of `server` (Option A). The networks
are `lc_cfr.nets.torch_mlp`.

This package's `__init__` imports no torch, so the registry and the trainer can name
`WorkerSettings` without loading torch; torch is imported with `backends`, which the
registry imports only when a torch backend is chosen.
"""

from __future__ import annotations

from typing import NamedTuple


class WorkerSettings(NamedTuple):
    """How the torch backends run; never changes the samples."""

    num_workers: int  # traversal.num_workers: processes; 0 = the trainer's process
    chunk_size: int  # traversal.worker_chunk_size: traversals per task
    interleave_width: int  # traversal.interleave_width (interleaved)
    interleave_max_batch: int  # traversal.interleave_max_batch (interleaved)
    league_size: int  # self_play.league_size: league snapshots published
    device: str = "cpu"  # run.device: where the torch networks run
    # run.use_amp: bfloat16 autocast of the forwards (a bfloat16 network.compute_dtype
    # computes in bfloat16 without it, inside TorchMLP.forward)
    use_amp: bool = False
    compile: bool = False  # run.torch_compile: torch.compile the networks
