"""The one registry of traversal backends (docs/design.md section 4).

A backend turns (networks, iteration, traverser) into fixed-slot `Samples` and a dict of
statistics; the trainer does the rest. `traversal.backend` picks one by name.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import jax

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import lockstep


class WorkerSettings(NamedTuple):
    """Settings of the torch backends (`lc_cfr.torch_path.backends`), from the config."""

    num_workers: int  # traversal.num_workers: processes; 0 = the trainer's process
    chunk_size: int  # traversal.worker_chunk_size: traversals per task
    interleave_width: int  # traversal.interleave_width (interleaved)
    interleave_max_batch: int  # traversal.interleave_max_batch (interleaved)
    league_size: int  # self_play.league_size: league snapshots published
    device: str = "cpu"  # run.device: where the torch networks run
    use_amp: bool = False  # run.use_amp: bfloat16 autocast of the forwards
    compile: bool = False  # run.torch_compile: torch.compile the networks


class Backend(Protocol):
    def traverse(
        self,
        networks: lockstep.Networks,
        *,
        seed: int,
        iteration: int,
        traverser: int,
        epsilon: float | None = None,
    ) -> tuple[lockstep.Samples, dict]:
        """Samples and statistics; `epsilon` overrides options.epsilon (its schedule)."""
        ...

    def close(self) -> None: ...


def stats_to_metrics(stats: lockstep.TraversalStats) -> dict:
    """The per-call totals as plain ints (summable over calls; the trainer derives means)."""
    stats = jax.device_get(stats)._asdict()
    stats.pop("dropped_samples")  # run_traversals has already checked it is 0
    return {name: int(value) for name, value in stats.items()}


class JaxBackend:
    """Option C: the lockstep traversal of `lc_cfr.traversal.lockstep`."""

    def __init__(
        self, *, rules: Rules, spec: mlp.NetworkSpec, options: lockstep.TraversalOptions, settings
    ):
        del settings  # the worker settings of the torch backends do not apply
        lockstep.validate_options(options, rules)
        lockstep.check_devices(options, jax.local_device_count())  # checked at start-up
        self.rules, self.spec, self.options = rules, spec, options

    def traverse(self, networks, *, seed, iteration, traverser, epsilon=None):
        options = self.options
        if epsilon is not None:  # one compiled loop per value: schedules take few values
            options = options._replace(epsilon=float(epsilon))
        samples, stats = lockstep.run_traversals(
            self.rules,
            self.spec,
            options,
            networks,
            seed=seed,
            iteration=iteration,
            traverser=traverser,
        )
        return samples, stats_to_metrics(stats)

    def close(self) -> None:
        """Nothing to release (the torch backends stop processes here)."""


def _torch_backend(name: str):
    def build(**kwargs):
        # torch is imported only when a torch backend is chosen
        from lc_cfr.torch_path.backends import TorchBackend

        return TorchBackend(name, **kwargs)

    return build


BACKENDS = {
    "jax": JaxBackend,
    "recursive": _torch_backend("recursive"),
    "interleaved": _torch_backend("interleaved"),
    "server": _torch_backend("server"),
}


def make_backend(name: str, *, rules, spec, options, settings) -> Backend:
    """The backend registered as `name`; an unknown name lists the valid ones.

    Args:
        name: traversal.backend.
        rules, spec, options: the game, network shape and traversal options.
        settings: `WorkerSettings` above (read by the torch
            backends only).
    """
    if name not in BACKENDS:
        raise ValueError(f"traversal.backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name](rules=rules, spec=spec, options=options, settings=settings)
