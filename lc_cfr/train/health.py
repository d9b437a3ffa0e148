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
__all__ = [
    "NON_FINITE_MODES",
    "NonFiniteError",
    "all_finite",
    "check_mode",
    "checked",
    "finite_rows",
    "finite_samples",
]


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


def finite_samples(samples, mode: str, refusal) -> tuple[object, int]:
    """(samples with non-finite targets marked invalid, how many were dropped); under
    `stop` a `NonFiniteError` with `refusal(count, kind)` instead. `samples` is a
    traversal's `Samples` (advantage, strategy and, when present, value rows)."""
    kinds = [
        ("advantage", samples.advantage_target, samples.advantage_valid),
        ("strategy", samples.strategy_policy, samples.strategy_valid),
    ]
    if samples.value_target is not None:
        kinds.append(("value", samples.value_target, samples.value_valid))
    kept, dropped = {}, 0
    for kind, rows, valid in kinds:
        ok = finite_rows(rows)
        bad = int(jnp.sum(valid & ~ok))
        if bad and mode == "stop":
            raise NonFiniteError(refusal(bad, kind))
        dropped += bad
        kept[f"{kind}_valid"] = valid & ok
    return samples._replace(**kept), dropped


def checked(result, previous, mode: str, refusal) -> tuple[tuple, bool]:
    """(the training call's (params, opt_state, losses) if all finite, else `previous`
    with its losses; whether it was dropped); under `stop` a `NonFiniteError` with
    `refusal(last_loss)` instead of dropping."""
    params, _, losses = result
    if all_finite((params, losses)):
        return result, False
    if mode == "stop":
        raise NonFiniteError(refusal(float(losses["loss_last"])))
    return (*previous, losses), True
