"""Training the advantage and strategy networks from reservoir memories (optax).

A `Learner` is built once per network kind. Its `train` runs the whole update loop of
one Deep CFR iteration as a single jitted `lax.scan`: each step samples a batch from the
reservoir and takes one optimizer step, so a training call is one dispatch and the
function compiles once (the memory, parameters and key are arguments, never constants).

Samples are weighted by `training_weighting.mode`: 'lcfr' weighs a sample by the
iteration t that produced it (Linear CFR, as in Deep CFR; iterations count from 1) and
'uniform' weighs every sample 1.

The forwards compute in the spec's `compute_dtype` (`lc_cfr.nets.mlp.apply`): with
'bfloat16' the layers' matmuls run in bfloat16 while the parameters, gradients, optimizer
state and losses stay float32 (mixed precision; the gradients flow back through the casts
to float32 parameters).

A learner's `lr_schedule` is the learning rate over one fit (`optimization.<kind>_lr_schedule`):
'constant', or 'cosine', from the optimizer's rate at a fit's first update down to 0 at
its last (SGDR's half cosine without restarts, Loshchilov and Hutter 2017). A fit may
take several `train` calls (the advantage networks' chunks); each call is told where its
updates lie in the fit (`FitSpan`, traced: a fit of any length compiles once).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from lc_cfr.memory.codec import Codec
from lc_cfr.memory.reservoir import Reservoir, reservoir_sample
from lc_cfr.nets.mlp import NetworkSpec, apply, init_params, masked_advantages, masked_log_policy

WEIGHTING_MODES = ("lcfr", "quadratic", "uniform")
LR_SCHEDULES = ("constant", "cosine")
KINDS = ("advantage", "strategy")


class FitSpan(NamedTuple):
    """Where one training call's updates lie in their fit."""

    start: int | jax.Array  # [] int32, updates of the fit before this call
    total: int | jax.Array  # [] int32, updates of the whole fit


def cosine_scale(update: jax.Array, total: jax.Array) -> jax.Array:
    """[] float32 factor of the learning rate at update `update` (from 0) of a fit of
    `total` updates: (1 + cos(pi * update / total)) / 2, 1 at the first update, 0 from
    `total` on. Scaling AdamW's whole update scales its rate (the decoupled decay is
    inside it)."""
    done = jnp.minimum(update, total).astype(jnp.float32) / jnp.maximum(total, 1)
    return 0.5 * (1.0 + jnp.cos(jnp.pi * done))


def check_lr_schedule(schedule: str, kind: str, init: str | None = None) -> str:
    """Returns `schedule` if known (and usable with `optimization.<kind>_init` `init`,
    when given), else raises a ValueError naming the field: a cosine decays over one fit
    from a fresh network."""
    field = f"optimization.{kind}_lr_schedule"
    if schedule not in LR_SCHEDULES:
        raise ValueError(f"{field} must be one of {list(LR_SCHEDULES)}, got {schedule!r}")
    if schedule == "cosine" and init not in (None, "scratch"):
        raise ValueError(
            f"{field}='cosine' decays over one fit from a fresh network and needs "
            f"optimization.{kind}_init='scratch', got {init!r}"
        )
    return schedule


def make_optimizer(
    *, learning_rate: float, weight_decay: float, grad_clip: float
) -> optax.GradientTransformation:
    """AdamW after clipping gradients to a global norm of `grad_clip` (<= 0: no clipping).

    Raises:
        ValueError: naming the field, for a learning rate <= 0 or a weight decay < 0.
    """
    if not learning_rate > 0:
        raise ValueError(f"optimization.learning_rate must be > 0, got {learning_rate!r}")
    if not weight_decay >= 0:
        raise ValueError(f"optimization.weight_decay must be >= 0, got {weight_decay!r}")
    adamw = optax.adamw(learning_rate, weight_decay=weight_decay)
    if grad_clip > 0:
        return optax.chain(optax.clip_by_global_norm(grad_clip), adamw)
    return adamw


# training_weighting.average_mode's value for "the regrets' weighting"
SAME_WEIGHTING = "same"


def check_weighting(mode: str, field: str = "training_weighting.mode") -> str:
    """Returns `mode` if it is a known weighting, else raises a ValueError naming `field`."""
    if mode not in WEIGHTING_MODES:
        raise ValueError(f"{field} must be one of {list(WEIGHTING_MODES)}, got {mode!r}")
    return mode


def average_weighting(mode: str, average_mode: str) -> str:
    """The weighting of the average strategy: `average_mode`, or the regrets' `mode` for
    'same'; raises a ValueError naming the field of an unknown one.

    Discounted CFR (Brown & Sandholm 2019, arXiv:1809.04040) weighs the regrets and the
    average strategy separately (its alpha, beta and gamma): the average's weights t^gamma
    decide which iterations' policies the played strategy is made of, not how fast the
    regrets forget."""
    check_weighting(mode)
    if average_mode == SAME_WEIGHTING:
        return mode
    return check_weighting(average_mode, "training_weighting.average_mode")


def sample_weights(iteration: jax.Array, *, mode: str) -> jax.Array:
    """[B] float32 loss weights of samples from iterations [B] int32.

    'lcfr': w = t, the iteration that produced the sample (Linear CFR weighting).
    'quadratic': w = t^2, recent iterations count more: the gamma = 2 averaging of
      Discounted CFR (Brown & Sandholm 2019, arXiv:1809.04040), so the policy read off the
      networks follows the latest regrets sooner.
    'uniform': w = 1.
    """
    check_weighting(mode)
    iteration = jnp.asarray(iteration)
    if mode == "lcfr":
        return iteration.astype(jnp.float32)
    if mode == "quadratic":
        return jnp.square(iteration.astype(jnp.float32))
    return jnp.ones(iteration.shape, jnp.float32)


def _weighted_mean(per_sample: jax.Array, weight: jax.Array) -> jax.Array:
    """sum(w * x) / sum(w); 0 when every weight is 0."""
    total = jnp.sum(weight)
    return jnp.sum(weight * per_sample) / jnp.where(total > 0, total, 1.0)


def advantage_loss(
    raw: jax.Array, mask: jax.Array, target: jax.Array, weight: jax.Array
) -> jax.Array:
    """Weighted masked MSE of the advantage network, [] float32.

    Per sample, the mean over legal actions of (masked_advantages(raw) - target)^2; the
    samples are averaged with weights w normalised by their sum in the batch. A sample
    without legal actions contributes 0.

    Args:
        raw: [B, A] network outputs.
        mask: [B, A] bool legal actions.
        target: [B, A] regret targets (illegal entries ignored).
        weight: [B] sample weights (see `sample_weights`).
    """
    error = jnp.where(mask, masked_advantages(raw, mask) - target, 0.0)
    legal = jnp.maximum(jnp.sum(mask, axis=-1), 1)
    per_sample = jnp.sum(error * error, axis=-1) / legal
    return _weighted_mean(per_sample, weight)


def strategy_loss(
    raw: jax.Array, mask: jax.Array, target: jax.Array, weight: jax.Array
) -> jax.Array:
    """Weighted cross-entropy of the strategy network, [] float32.

    Per sample, -sum over legal a of target(a) * log masked_policy(raw)(a), with a
    log-softmax restricted to the legal actions (`masked_log_policy`, finite everywhere);
    the samples are averaged with weights w normalised by their sum in the batch.

    Why cross-entropy rather than the paper's MSE: for the samples (w_k, sigma_k) of one
    information state, sum_k w_k CE(sigma_k, p) = -sum_a (sum_k w_k sigma_k(a)) log p(a),
    which over distributions p is minimised (Gibbs' inequality) exactly at
    p = sum_k w_k sigma_k / sum_k w_k: the w-weighted average of the target policies.
    With lcfr weights w = t that is the linear-averaged strategy Deep CFR wants, the
    same minimiser as the paper's MSE. But the cross-entropy gradient with respect to
    the logits, w * (p - sigma), does not vanish when a probability is small (the MSE
    gradient through a softmax is scaled by p), and the network's output is always a
    distribution over the legal actions (no clipping or renormalising of regressed
    values).

    Args:
        raw: [B, A] network logits.
        mask: [B, A] bool legal actions.
        target: [B, A] target policies (illegal entries ignored).
        weight: [B] sample weights (see `sample_weights`).
    """
    log_policy = masked_log_policy(raw, mask)
    per_sample = -jnp.sum(jnp.where(mask, target * log_policy, 0.0), axis=-1)
    return _weighted_mean(per_sample, weight)


LOSSES = {"advantage": advantage_loss, "strategy": strategy_loss}


class Learner:
    """Trains one kind of network ('advantage' or 'strategy') from a reservoir.

    Build it once per kind; `init` and `train` are jitted in the constructor and compile
    once for a given memory shape. `trace_count` counts traces of the training loop
    (a recompilation would raise it).
    """

    def __init__(
        self,
        spec: NetworkSpec,
        *,
        kind: str,
        optimizer: optax.GradientTransformation,
        batch_size: int,
        num_updates: int,
        weighting: str,
        codec: Codec | None = None,
        lr_schedule: str = "constant",
    ):
        """Builds the learner.

        Args:
            spec: the network shape.
            kind: 'advantage' (advantage_loss) or 'strategy' (strategy_loss).
            optimizer: e.g. from `make_optimizer`.
            batch_size: samples per update.
            num_updates: updates per `train` call.
            weighting: training_weighting.mode, 'lcfr' or 'uniform'.
            codec: how the memories store encodings (lc_cfr.memory.codec); default
                float16 rows. Batches are decoded inside the training step.
            lr_schedule: 'constant' or 'cosine' (over each fit; see the module).

        Raises:
            ValueError: naming the field, for an unknown kind or weighting or a size < 1.
        """
        if kind not in KINDS:
            raise ValueError(f"learner kind must be one of {list(KINDS)}, got {kind!r}")
        for name, value in (("batch_size", batch_size), ("updates", num_updates)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"optimization.{kind}_{name} must be an int >= 1, got {value!r}")
        self.spec = spec
        self.kind = kind
        self.optimizer = optimizer
        self.batch_size = batch_size
        self.num_updates = num_updates
        self.weighting = check_weighting(weighting)
        self.lr_schedule = check_lr_schedule(lr_schedule, kind)
        self.codec = codec
        self.trace_count = 0
        self._loss = LOSSES[kind]
        self._init = jax.jit(self._init_impl)
        self._train = jax.jit(self._train_impl)

    def init(self, key: jax.Array):
        """Fresh (params, opt_state)."""
        return self._init(key)

    def train(
        self, params, opt_state, memory: Reservoir, key: jax.Array, span: FitSpan | None = None
    ):
        """Runs `num_updates` steps, each on a fresh batch sampled from `memory`, as the
        updates `span` of their fit (default: the whole fit, `FitSpan(0, num_updates)`).

        Returns:
            (params, opt_state, metrics) with metrics {"loss_first", "loss_last",
            "loss_mean"}: [] float32 batch losses of the first and last steps (each
            computed before its update) and their mean over all steps.
        """
        if span is None:
            span = FitSpan(0, self.num_updates)
        span = FitSpan(*(jnp.asarray(x, jnp.int32) for x in span))
        return self._train(params, opt_state, memory, key, span)

    def loss(self, params, batch) -> jax.Array:
        """The weighted loss of `params` on a batch (info, mask, target, iteration)."""
        info, mask, target, iteration = batch
        raw = apply(self.spec, params, info)
        return self._loss(raw, mask, target, sample_weights(iteration, mode=self.weighting))

    def _init_impl(self, key):
        params = init_params(self.spec, key)
        return params, self.optimizer.init(params)

    def _train_impl(self, params, opt_state, memory, key, span):
        self.trace_count += 1  # runs only while tracing

        def step(carry, xs):
            params, opt_state = carry
            step_key, update = xs
            batch = reservoir_sample(memory, step_key, self.batch_size, codec=self.codec)
            loss, grads = jax.value_and_grad(self.loss)(params, batch)
            updates, opt_state = self.optimizer.update(grads, opt_state, params)
            if self.lr_schedule == "cosine":
                scale = cosine_scale(span.start + update, span.total)
                updates = jax.tree.map(lambda u: u * scale.astype(u.dtype), updates)
            return (optax.apply_updates(params, updates), opt_state), loss

        keys = jax.random.split(key, self.num_updates)
        steps = jnp.arange(self.num_updates, dtype=jnp.int32)
        (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), (keys, steps))
        metrics = {"loss_first": losses[0], "loss_last": losses[-1], "loss_mean": losses.mean()}
        return params, opt_state, metrics
