"""The one registry of traversal backends (SPEC section 4).

A backend turns (networks, iteration, traverser) into fixed-slot `Samples` and a dict of
statistics; the trainer does the rest. `traversal.backend` picks one by name.
"""

from __future__ import annotations

from typing import Protocol

import jax

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import lockstep


class Backend(Protocol):
    def traverse(
        self, networks: lockstep.Networks, *, seed: int, iteration: int, traverser: int
    ) -> tuple[lockstep.Samples, dict]: ...


def stats_to_metrics(stats: lockstep.TraversalStats) -> dict:
    """The per-call totals as plain ints (summable over calls; the trainer derives means)."""
    stats = jax.device_get(stats)._asdict()
    stats.pop("dropped_samples")  # run_traversals has already checked it is 0
    return {name: int(value) for name, value in stats.items()}


class JaxBackend:
    """Option C: the lockstep traversal of `lc_cfr.traversal.lockstep`."""

    def __init__(self, rules: Rules, spec: mlp.NetworkSpec, options: lockstep.TraversalOptions):
        lockstep.validate_options(options, rules)
        lockstep.check_devices(options, jax.local_device_count())  # checked at start-up
        self.rules, self.spec, self.options = rules, spec, options

    def traverse(self, networks, *, seed, iteration, traverser):
        samples, stats = lockstep.run_traversals(
            self.rules,
            self.spec,
            self.options,
            networks,
            seed=seed,
            iteration=iteration,
            traverser=traverser,
        )
        return samples, stats_to_metrics(stats)


BACKENDS = {"jax": JaxBackend}


def make_backend(name: str, **kwargs) -> Backend:
    """The backend registered as `name`; an unknown name lists the valid ones."""
    if name not in BACKENDS:
        raise ValueError(f"traversal.backend must be one of {sorted(BACKENDS)}, got {name!r}")
    return BACKENDS[name](**kwargs)
