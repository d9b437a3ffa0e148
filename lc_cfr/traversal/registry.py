"""The one registry of traversal backends (docs/design.md section 4).

`traversal.backend` picks one by name; an unknown name lists the valid ones. What every
backend computes is `lc_cfr.traversal.api`; how each one runs is its own settings:
`lanes` for `jax`, `WorkerSettings` for the torch backends.
"""

from __future__ import annotations

from typing import NamedTuple

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal.api import Backend, TraversalOptions


class WorkerSettings(NamedTuple):
    """How the torch backends run (`traversal.torch`); never changes the samples."""

    num_workers: int  # traversal.num_workers: processes; 0 = the trainer's process
    chunk_size: int  # traversal.worker_chunk_size: traversals per task
    interleave_width: int  # traversal.interleave_width (interleaved)
    interleave_max_batch: int  # traversal.interleave_max_batch (interleaved)
    league_size: int  # self_play.league_size: league snapshots published
    device: str = "cpu"  # run.device: where the torch networks run
    use_amp: bool = False  # run.use_amp: bfloat16 autocast of the forwards
    compile: bool = False  # run.torch_compile: torch.compile the networks


def _jax(*, rules, spec, options, lanes, workers):
    del workers  # how the torch backends run does not apply
    from lc_cfr.traversal.lockstep import JaxBackend

    return JaxBackend(rules=rules, spec=spec, options=options, lanes=lanes)


def _torch(name: str):
    def build(*, rules, spec, options, lanes, workers):
        del lanes  # the jax backend's setting
        # torch is imported only when a torch backend is chosen
        from lc_cfr.torch_path.backends import TorchBackend

        return TorchBackend(name, rules=rules, spec=spec, options=options, settings=workers)

    return build


BACKENDS = {
    "jax": _jax,
    "recursive": _torch("recursive"),
    "interleaved": _torch("interleaved"),
    "server": _torch("server"),
}


def make_backend(
    name: str,
    *,
    rules: Rules,
    spec: mlp.NetworkSpec,
    options: TraversalOptions,
    lanes: int,
    workers: WorkerSettings,
) -> Backend:
    """The backend registered as `name`.

    Args:
        name: traversal.backend.
        rules, spec, options: the game, network shape and what the traversal computes.
        lanes: traversals in flight at once (`jax` only).
        workers: how the torch backends run (ignored by `jax`).
    """
    if name not in BACKENDS:
        raise ValueError(f"traversal.backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name](rules=rules, spec=spec, options=options, lanes=lanes, workers=workers)
