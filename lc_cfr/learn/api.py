"""The protocol every learner keeps, whatever trains the networks.

The trainer holds flax parameters, reservoir memories and JAX keys, and asks a learner
for fresh parameters and for `num_updates` updates on batches drawn from a memory. The
optax learner (`learner.Learner`) computes them with JAX, the torch one
(`torch_adapter.TrainerTorchLearner`) with torch on `run.device`; both draw the same
batches from the same keys, so they agree to float32 rounding
(tests/test_torch_parity.py).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import jax

from lc_cfr.memory.reservoir import Reservoir
from lc_cfr.nets.mlp import NetworkSpec


@runtime_checkable
class NetworkLearner(Protocol):
    """Trains one kind of network ('advantage' or 'strategy') from a reservoir."""

    spec: NetworkSpec
    kind: str
    batch_size: int  # samples per update
    num_updates: int  # updates per `train` call
    trace_count: int  # traces of the training step (JAX); a recompile raises it

    def init(self, key: jax.Array) -> tuple[Any, Any]:
        """Fresh (flax params, optimizer state)."""
        ...

    def train(
        self, params: Any, opt_state: Any, memory: Reservoir, key: jax.Array
    ) -> tuple[Any, Any, dict]:
        """(params, opt_state, {"loss_first", "loss_last", "loss_mean"}) after
        `num_updates` updates, each on a batch drawn from `memory` with `key`."""
        ...
