"""Health checks: non-finite samples, losses and parameters never reach a checkpoint.

A learning rate too high or a bad estimator setting can make a loss infinite or the
parameters NaN. Left alone, the run goes on, checkpoints NaN networks over good ones and
evaluates them as if they played (a NaN logit is masked like an illegal action). The
trainer checks every iteration's new samples and every network after training, and
`optimization.non_finite` says what happens then:

* `stop`: the run stops with a one-line `NonFiniteError` naming what went non-finite and
  the iteration; nothing of that iteration is saved, so the latest checkpoint stays the
  last finite state.
* `skip`: the update is dropped and counted (`health/skipped_updates`): the network keeps
  its parameters of the iteration before; non-finite samples are dropped and counted
  (`health/non_finite_samples`) instead of entering a memory.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from lc_cfr.nets.mlp import all_finite

NON_FINITE_MODES = ("stop", "skip")
__all__ = ["NON_FINITE_MODES", "NonFiniteError", "all_finite", "check_mode", "finite_rows"]


class NonFiniteError(RuntimeError):
    """A loss, sample or parameter that should be a number is inf or NaN."""


def check_mode(mode: str) -> str:
    if mode not in NON_FINITE_MODES:
        raise ValueError(f"optimization.non_finite must be one of {NON_FINITE_MODES}, got {mode!r}")
    return mode


@jax.jit
def finite_rows(rows: jax.Array) -> jax.Array:
    """[S] bool: the rows of [S, ...] `rows` whose entries are all finite."""
    return jnp.all(jnp.isfinite(rows.reshape(rows.shape[0], -1)), axis=1)
