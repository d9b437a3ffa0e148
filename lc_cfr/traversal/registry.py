"""The one registry of traversal backends (docs/design.md section 4).

`traversal.backend` picks one by name; an unknown name lists the valid ones. What every
backend computes is `lc_cfr.traversal.api`; how each one runs is its own settings:
`lanes` and `schedule` for `jax`, `lc_cfr.traversal.torch.WorkerSettings` for the torch
backends.
"""

from __future__ import annotations

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal.api import Backend, TraversalOptions
from lc_cfr.traversal.torch import WorkerSettings


def _jax(*, rules, spec, options, lanes, schedule, workers):
    del workers  # how the torch backends run does not apply
    from lc_cfr.traversal.lockstep import JaxBackend

    return JaxBackend(rules=rules, spec=spec, options=options, lanes=lanes, schedule=schedule)


def _torch(name: str):
    def build(*, rules, spec, options, lanes, schedule, workers):
        del lanes, schedule  # the jax backend's settings
        # torch is imported only when a torch backend is chosen
        from lc_cfr.traversal.torch.backends import TorchBackend

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
    schedule: str = "all_lanes",
) -> Backend:
    """The backend registered as `name`.

    Args:
        name: traversal.backend.
        rules, spec, options: the game, network shape and what the traversal computes.
        lanes: traversals in flight at once (`jax` only).
        schedule: traversal.lockstep_schedule (`jax` only, `lockstep.LOCKSTEP_SCHEDULES`).
        workers: how the torch backends run (ignored by `jax`).
    """
    if name not in BACKENDS:
        raise ValueError(f"traversal.backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name](
        rules=rules, spec=spec, options=options, lanes=lanes, schedule=schedule, workers=workers
    )
