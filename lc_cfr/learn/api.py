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

from lc_cfr.learn.learner import FitSpan
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
        self,
        params: Any,
        opt_state: Any,
        memory: Reservoir,
        key: jax.Array,
        span: FitSpan | None = None,
    ) -> tuple[Any, Any, dict]:
        """(params, opt_state, {"loss_first", "loss_last", "loss_mean"}) after
        `num_updates` updates, each on a batch drawn from `memory` with `key`, the
        updates `span` of their fit (None: the whole fit) for the learning rate's
        schedule."""
        ...


def updates_for(rows: int, *, floor: int, epochs: float, batch_size: int) -> int:
    """Updates of one training call: `epochs` passes over `rows` samples in batches of
    `batch_size`, rounded up to a whole number of `floor`-update chunks, at least one
    chunk. `epochs` 0 is the fixed schedule: always `floor`.

    A fixed number of updates fits a memory that grows every iteration less and less
    (docs/experiments.md, section 7, found the `:small` advantage networks underfit);
    whole chunks keep the compiled training step one shape.
    """
    if epochs <= 0:
        return floor
    wanted = int(-(-epochs * rows // batch_size))  # ceil without float surprises
    return floor * max(1, -(-wanted // floor))


def train_in_chunks(learner: NetworkLearner, params, opt_state, memory: Reservoir, key, updates):
    """`learner.train` called `updates // learner.num_updates` times in a row: the first
    call with `key` (so one chunk is exactly one `train` call), chunk c with
    `fold_in(key, c)`. Returns (params, opt_state, losses) with the first chunk's first
    loss, the last chunk's last loss and the mean over every update."""
    chunks, rest = divmod(updates, learner.num_updates)
    if chunks < 1 or rest:
        raise ValueError(
            f"updates must be a positive multiple of {learner.num_updates}, got {updates}"
        )
    span = FitSpan(0, updates)  # one fit: the rate's schedule runs over every chunk
    params, opt_state, losses = learner.train(params, opt_state, memory, key, span)
    first, means = losses["loss_first"], [losses["loss_mean"]]
    for c in range(1, chunks):
        span = FitSpan(c * learner.num_updates, updates)
        params, opt_state, losses = learner.train(
            params, opt_state, memory, jax.random.fold_in(key, c), span
        )
        means.append(losses["loss_mean"])
    summary = {"loss_first": first, "loss_last": losses["loss_last"]}
    return params, opt_state, {**summary, "loss_mean": sum(means) / len(means)}
