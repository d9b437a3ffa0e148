"""Training the advantage and strategy networks in torch, matching the optax learner.

`TorchLearner` is the counterpart of `lc_cfr.learn.learner.Learner` with the optimizer of
`lc_cfr.learn.learner.make_optimizer` written out explicitly, so the two agree step by
step to float32 rounding:

* gradient clipping as `optax.clip_by_global_norm(c)`: with n the global L2 norm of all
  gradients, g <- g if n < c else g / n * c (no epsilon; torch's `clip_grad_norm_` uses
  c / (n + 1e-6) instead);
* then `optax.adamw(lr, weight_decay=wd)` (b1=0.9, b2=0.999, eps=1e-8 added outside the
  square root, eps_root=0): mu <- b1 mu + (1-b1) g, nu <- b2 nu + (1-b2) g^2,
  u = (mu / (1-b1^t)) / (sqrt(nu / (1-b2^t)) + eps) + wd * p, p <- p - lr * u, the decay
  using the parameters before the step (decoupled weight decay, the same update as
  torch.optim.AdamW's p *= 1 - lr*wd followed by the Adam step, up to rounding);
* `lr_schedule='cosine'`: the k-th update of a fit of T updates (`FitSpan`) at rate
  `lr * cosine_scale(k, T)`, the optax learner's factor.

Unlike the JAX Learner, which samples its own batches, `train` takes the batch indices
[num_updates, batch_size] from the caller, so both learners can be fed the same batches
in the same order. Batches are index gathers from contiguous tensors of the memory (info
float16 -> float32 after the gather); there are no per-sample Python objects.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import torch

from lc_cfr.learn.learner import (
    KINDS,
    FitSpan,
    check_lr_schedule,
    check_weighting,
    cosine_scale,
)
from lc_cfr.memory.codec import PackedCodec
from lc_cfr.nets.mlp import NetworkSpec
from lc_cfr.nets.torch_mlp import TorchMLP, from_layout, masked_advantages, masked_log_policy

_ROW_FIELDS = ("info", "mask", "target", "iteration")


class MemoryTensors(NamedTuple):
    """The rows of a reservoir memory as contiguous torch tensors on one device."""

    info: torch.Tensor  # [C, W] stored encodings: uint8 packed, float16 or float32
    mask: torch.Tensor  # [C, A] bool
    target: torch.Tensor  # [C, A] float32
    iteration: torch.Tensor  # [C] int32

    @property
    def num_rows(self) -> int:
        return int(self.iteration.shape[0])


def packed_decoder(codec: PackedCodec, device: torch.device | str = "cpu"):
    """`codec.decode` in torch: [B, W] uint8 stored rows -> [B, E] float32, bit for bit
    the optax learner's batches (tests/test_torch_parity.py)."""
    shifts = torch.arange(8, dtype=torch.uint8, device=device)
    scales = torch.tensor(codec.int_scales, dtype=torch.float32, device=device)
    order = torch.as_tensor(codec.order, dtype=torch.long, device=device)
    bit_bytes, bit_count = codec.bit_bytes, len(codec.bit_columns)

    def decode(stored: torch.Tensor) -> torch.Tensor:
        rows = stored.shape[0]
        bits = (stored[:, :bit_bytes, None] >> shifts) & 1
        bits = bits.reshape(rows, 8 * bit_bytes)[:, :bit_count].to(torch.float32)
        codes = stored[:, bit_bytes:].contiguous().view(torch.int16)
        values = codes.to(torch.float32) * scales
        return torch.cat([bits, values], dim=1)[:, order]

    return decode


def memory_tensors(memory: Any, *, device: torch.device | str = "cpu") -> MemoryTensors:
    """Contiguous tensors of a memory's rows, one copy per field (no per-sample objects).

    Args:
        memory: a `MemoryTensors`, a `lc_cfr.memory.reservoir.Reservoir` (jax arrays), or a
            mapping with "info", "mask", "target", "iteration" (e.g. from
            `reservoir.to_numpy`); numpy, jax or torch arrays (host JAX arrays are shared
            through DLPack, not copied).
        device: where the tensors live.

    Raises:
        ValueError: naming the field, when a field is missing or the shapes disagree.
    """
    if isinstance(memory, MemoryTensors):
        fields = memory._asdict()
    elif isinstance(memory, Mapping):
        missing = [name for name in _ROW_FIELDS if name not in memory]
        if missing:
            raise ValueError(f"memory is missing field(s) {missing}")
        fields = {name: memory[name] for name in _ROW_FIELDS}
    else:
        fields = {name: getattr(memory, name) for name in _ROW_FIELDS}

    def tensor(value, dtype):
        if isinstance(value, torch.Tensor):
            return value.to(device=device, dtype=dtype).contiguous()
        if hasattr(value, "__dlpack__") and torch.device(device).type == "cpu":
            try:  # a JAX array on the host: share its buffer, no copy
                return torch.from_dlpack(value).to(dtype=dtype).contiguous()
            except (RuntimeError, TypeError, BufferError):
                pass
        array = np.ascontiguousarray(np.asarray(value))
        if not array.flags.writeable:  # e.g. a view of a jax array: torch wants a copy
            array = array.copy()
        return torch.from_numpy(array).to(device=device, dtype=dtype).contiguous()

    info = fields["info"]
    # stored encodings keep their storage dtype (float16 rows, or packed uint8 bytes that
    # the learner's `decode` turns into floats per batch); anything else becomes float32
    info_dtype = {"float16": torch.float16, "uint8": torch.uint8}.get(
        str(getattr(info, "dtype", "")).rsplit(".", 1)[-1]
    )
    tensors = MemoryTensors(
        info=tensor(info, info_dtype or torch.float32),
        mask=tensor(fields["mask"], torch.bool),
        target=tensor(fields["target"], torch.float32),
        iteration=tensor(fields["iteration"], torch.int32),
    )
    rows = tensors.num_rows
    if (
        tensors.info.ndim != 2
        or tensors.mask.ndim != 2
        or tensors.target.shape != tensors.mask.shape
    ):
        raise ValueError(
            f"memory fields have shapes info {tuple(tensors.info.shape)}, mask "
            f"{tuple(tensors.mask.shape)}, target {tuple(tensors.target.shape)}; "
            "expected [C, E], [C, A], [C, A]"
        )
    for name in ("info", "mask", "target"):
        if getattr(tensors, name).shape[0] != rows:
            raise ValueError(
                f"memory field {name!r} has {getattr(tensors, name).shape[0]} rows, "
                f"iteration has {rows}"
            )
    return tensors


def sample_weights(iteration: torch.Tensor, *, mode: str) -> torch.Tensor:
    """[B] float32 loss weights: 'lcfr' w = t (the sample's iteration), 'quadratic' t^2,
    'uniform' w = 1 (as `lc_cfr.learn.learner.sample_weights`)."""
    check_weighting(mode)
    if mode == "lcfr":
        return iteration.to(torch.float32)
    if mode == "quadratic":
        return torch.square(iteration.to(torch.float32))
    return torch.ones(iteration.shape, dtype=torch.float32, device=iteration.device)


def _weighted_mean(per_sample: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """sum(w * x) / sum(w); 0 when every weight is 0."""
    total = weight.sum()
    return (weight * per_sample).sum() / torch.where(total > 0, total, torch.ones_like(total))


def advantage_loss(
    raw: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """Weighted masked MSE, as `lc_cfr.learn.learner.advantage_loss`, [] float32."""
    mask = mask.to(torch.bool)
    error = torch.where(mask, masked_advantages(raw, mask) - target, torch.zeros_like(raw))
    legal = mask.sum(dim=-1).clamp(min=1)
    per_sample = (error * error).sum(dim=-1) / legal
    return _weighted_mean(per_sample, weight)


def strategy_loss(
    raw: torch.Tensor, mask: torch.Tensor, target: torch.Tensor, weight: torch.Tensor
) -> torch.Tensor:
    """Weighted cross-entropy over legal actions, as `learner.strategy_loss`, [] float32."""
    mask = mask.to(torch.bool)
    log_policy = masked_log_policy(raw, mask)
    per_sample = -torch.where(mask, target * log_policy, torch.zeros_like(raw)).sum(dim=-1)
    return _weighted_mean(per_sample, weight)


LOSSES = {"advantage": advantage_loss, "strategy": strategy_loss}


@dataclasses.dataclass
class AdamWState:
    """AdamW state: the step count and first/second moments per parameter name."""

    count: int
    mu: dict[str, torch.Tensor]
    nu: dict[str, torch.Tensor]


class TorchLearner:
    """Trains one kind of network ('advantage' or 'strategy') from a memory, in torch."""

    def __init__(
        self,
        spec: NetworkSpec,
        *,
        kind: str,
        learning_rate: float,
        weight_decay: float,
        grad_clip: float,
        batch_size: int,
        num_updates: int,
        weighting: str,
        lr_schedule: str = "constant",
        b1: float = 0.9,
        b2: float = 0.999,
        eps: float = 1e-8,
    ):
        """Builds the learner (the hyper-parameters of `make_optimizer` and `Learner`).

        Args:
            spec: the network shape.
            kind: 'advantage' or 'strategy'.
            learning_rate: AdamW learning rate, > 0.
            weight_decay: decoupled weight decay, >= 0.
            grad_clip: global-norm clip; <= 0 disables clipping.
            batch_size: samples per update.
            num_updates: updates per `train` call.
            weighting: 'lcfr' or 'uniform'.
            lr_schedule: 'constant' or 'cosine' (over each fit, `FitSpan`).
            b1, b2, eps: Adam constants (optax.adamw defaults).

        Raises:
            ValueError: naming the field, for an unknown kind or weighting, a size < 1, a
                learning rate <= 0 or a weight decay < 0.
        """
        if kind not in KINDS:
            raise ValueError(f"learner kind must be one of {list(KINDS)}, got {kind!r}")
        for name, value in (("batch_size", batch_size), ("updates", num_updates)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"optimization.{kind}_{name} must be an int >= 1, got {value!r}")
        if not learning_rate > 0:
            raise ValueError(f"optimization.learning_rate must be > 0, got {learning_rate!r}")
        if not weight_decay >= 0:
            raise ValueError(f"optimization.weight_decay must be >= 0, got {weight_decay!r}")
        self.spec = spec
        self.kind = kind
        self.learning_rate = float(learning_rate)
        self.lr_schedule = check_lr_schedule(lr_schedule, kind)
        self.weight_decay = float(weight_decay)
        self.grad_clip = float(grad_clip)
        self.batch_size = batch_size
        self.num_updates = num_updates
        self.weighting = check_weighting(weighting)
        self.b1, self.b2, self.eps = float(b1), float(b2), float(eps)
        self._loss = LOSSES[kind]

    # ------------------------------------------------------------------ optimizer
    def init_state(self, model: torch.nn.Module) -> AdamWState:
        """Fresh AdamW state (zero moments) for the parameters of `model`."""
        return AdamWState(
            count=0,
            mu={name: torch.zeros_like(p) for name, p in model.named_parameters()},
            nu={name: torch.zeros_like(p) for name, p in model.named_parameters()},
        )

    def rate_scales(self, span: FitSpan) -> np.ndarray:
        """[num_updates] float32 factors of the learning rate for the updates `span` of a
        fit: 1, or the optax learner's `cosine_scale`, all computed at once."""
        if self.lr_schedule == "constant":
            return np.ones(self.num_updates, np.float32)
        updates = int(span.start) + np.arange(self.num_updates, dtype=np.int32)
        return np.asarray(cosine_scale(updates, np.int32(span.total)))

    @torch.no_grad()
    def apply_gradients(
        self,
        model: torch.nn.Module,
        grads: Mapping[str, torch.Tensor],
        state: AdamWState,
        scale: float = 1.0,
    ) -> AdamWState:
        """One optimizer step in place: clip_by_global_norm (if enabled), then AdamW at
        `scale` times the learning rate.

        Returns the new state (its moment tensors are updated in place).
        """
        params = dict(model.named_parameters())
        grads = {name: grads[name] for name in params}
        if self.grad_clip > 0:
            norm = torch.sqrt(sum(torch.sum(g * g) for g in grads.values()))
            keep = norm < self.grad_clip
            grads = {
                name: torch.where(keep, g, g / norm * self.grad_clip) for name, g in grads.items()
            }
        count = state.count + 1
        device = next(iter(params.values())).device
        b1 = torch.tensor(self.b1, dtype=torch.float32, device=device)
        b2 = torch.tensor(self.b2, dtype=torch.float32, device=device)
        correction1 = 1 - b1**count
        correction2 = 1 - b2**count
        for name, p in params.items():
            g = grads[name]
            mu = state.mu[name]
            nu = state.nu[name]
            mu.copy_((1 - self.b1) * g + self.b1 * mu)
            nu.copy_((1 - self.b2) * (g * g) + self.b2 * nu)
            update = (mu / correction1) / (torch.sqrt(nu / correction2) + self.eps)
            if self.weight_decay > 0:
                update = update + self.weight_decay * p
            p.add_(-(self.learning_rate * scale) * update)
        return AdamWState(count=count, mu=state.mu, nu=state.nu)

    # ------------------------------------------------------------------ training
    def loss(self, model: Any, batch: MemoryTensors) -> torch.Tensor:
        """The weighted loss of `model` (any callable network) on a batch (info, mask,
        target, iteration)."""
        raw = model(batch.info.to(torch.float32))
        weight = sample_weights(batch.iteration, mode=self.weighting)
        return self._loss(raw, batch.mask, batch.target, weight)

    def train(
        self,
        model_or_layout: torch.nn.Module | Mapping[str, np.ndarray],
        memory: Any,
        indices: Any,
        opt_state: AdamWState | None = None,
        span: FitSpan | None = None,
        *,
        forward: Any = None,
        decode: Any = None,
    ) -> tuple[torch.nn.Module, AdamWState, dict[str, float]]:
        """Runs `num_updates` steps, step k on the rows `indices[k]` of `memory`.

        Args:
            model_or_layout: a TorchMLP (trained in place) or a canonical layout (a new
                TorchMLP is built on the CPU).
            memory: anything `memory_tensors` accepts; converted once per call (pass a
                `MemoryTensors` on the model's device to skip the copy).
            indices: [num_updates, batch_size] integer rows into the memory.
            opt_state: AdamW state to continue from; None starts fresh (as
                `Learner.init`).
            span: where these updates lie in their fit, for `lr_schedule`; None: the
                whole fit.
            forward: what computes the outputs (e.g. `torch.compile(model)`); default
                the model itself. The parameters trained are always the model's.
            decode: turns a batch's stored encodings into float32 ones (packed memories,
                `packed_decoder`); default: a plain cast.

        Returns:
            (model, opt_state, metrics) with metrics {"loss_first", "loss_last",
            "loss_mean"} (floats): the batch losses of the first and last steps, each
            computed before its update, and their mean over all steps.

        Raises:
            ValueError: for indices of the wrong shape or out of range.
        """
        if isinstance(model_or_layout, torch.nn.Module):
            model = model_or_layout
            if isinstance(model, TorchMLP) and model.spec != self.spec:
                raise ValueError(f"model spec {model.spec} differs from learner spec {self.spec}")
        else:
            model = from_layout(self.spec, model_or_layout)
        device = next(model.parameters()).device
        data = memory_tensors(memory, device=device)
        index = torch.as_tensor(
            np.asarray(indices) if not isinstance(indices, torch.Tensor) else indices
        )
        expected = (self.num_updates, self.batch_size)
        if tuple(index.shape) != expected:
            raise ValueError(f"indices have shape {tuple(index.shape)}, expected {expected}")
        index = index.to(device=device, dtype=torch.long)
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= data.num_rows):
            raise ValueError(
                f"indices must lie in [0, {data.num_rows}), got "
                f"[{int(index.min())}, {int(index.max())}]"
            )
        if opt_state is None:
            opt_state = self.init_state(model)
        params = [p for _, p in model.named_parameters()]
        names = [name for name, _ in model.named_parameters()]
        losses = []
        scales = self.rate_scales(FitSpan(0, self.num_updates) if span is None else span)
        for rows, scale in zip(index, scales.tolist(), strict=True):
            batch = MemoryTensors(*(field[rows] for field in data))
            if decode is not None:
                batch = batch._replace(info=decode(batch.info))
            loss = self.loss(model if forward is None else forward, batch)
            grads = torch.autograd.grad(loss, params)
            grads = dict(zip(names, grads, strict=True))
            opt_state = self.apply_gradients(model, grads, opt_state, scale)
            losses.append(loss.detach())
        stacked = torch.stack(losses)
        metrics = {
            "loss_first": float(stacked[0]),
            "loss_last": float(stacked[-1]),
            "loss_mean": float(stacked.mean()),
        }
        return model, opt_state, metrics
