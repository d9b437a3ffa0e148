"""The advantage/strategy MLP in torch, interchangeable with the flax one.

`TorchMLP(spec)` has Linear layers layer_0..layer_{L-1} and `output`, so its
`state_dict()` keys are exactly the canonical layout keys of `lc_cfr.nets.mlp`
("layer_{i}.weight" [out, in], "layer_{i}.bias", "output.weight", "output.bias").
`to_layout` / `from_layout` convert losslessly between a TorchMLP and that layout, so
parameters move between flax and torch with `mlp.to_layout` / `mlp.from_layout`.

With `spec.own_known_input=False` the forward drops the encoding's `own_known` columns
before layer_0, as `lc_cfr.nets.mlp.apply` does, so layer_0 is E - N wide in both; with
`spec.strategic_features=True` it appends `lc_cfr.nets.features.strategic_features`, the
same function the flax MLP calls, on torch tensors (and `blocking_features` with
`spec.blocking_features=True`).

With `spec.compute_dtype='bfloat16'` the forward runs its layers under bfloat16 autocast
(the Linear layers cast input, weight and bias to bfloat16, as the flax Dense layers do)
and returns float32 outputs; the parameters stay float32. `run.use_amp` wraps the
callers' forwards in the same autocast (weights.NetSet, torch_adapter), which is how a
float32 spec computes in bfloat16 on the torch path only.

The masked heads have the semantics of the flax ones: illegal actions are exactly 0 and
a row without legal actions is all zeros, with no NaN in values or gradients.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from lc_cfr.nets import features
from lc_cfr.nets.mlp import NetworkSpec, check_layout, layout_shapes

# gelu is the exact (erf) form, as flax's nn.gelu(approximate=False) in lc_cfr.nets.mlp.
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "tanh": torch.tanh,
    "silu": F.silu,
}


class TorchMLP(nn.Module):
    """Hidden Linear layers layer_0..layer_{L-1} with an activation, then `output`.

    Fresh parameters follow flax's default initialisers (kernel: LeCun normal, i.e. a
    normal truncated at 2 standard deviations with variance 1/fan_in; bias: zeros), so a
    fresh torch network is distributed like a fresh flax one (not identical values).
    """

    def __init__(self, spec: NetworkSpec, *, generator: torch.Generator | None = None):
        """Builds the network of shape `spec` on the CPU in float32.

        Args:
            spec: the network shape.
            generator: optional torch generator for the initial parameters.
        """
        super().__init__()
        self.spec = spec
        self._act = ACTIVATIONS[spec.activation]
        # Where the columns layer_0 does not read lie (see `forward`); None keeps them all.
        self._dropped = None if spec.own_known_input else spec.own_known_columns
        self._bfloat16 = spec.compute_dtype == "bfloat16"
        # features.tables(spec.rules) as tensors, by device (the recursive backend forwards
        # one state at a time: converting them in every forward would cost more than they)
        self._feature_constants: dict[torch.device, features.Tables] = {}
        for name, fan_in, fan_out in spec.layer_sizes():
            setattr(self, name, nn.Linear(fan_in, fan_out, dtype=torch.float32))
        self.reset_parameters(generator=generator)

    @torch.no_grad()
    def reset_parameters(self, *, generator: torch.Generator | None = None) -> None:
        """Re-draws the parameters with flax's default initialisers (see the class doc)."""
        # flax variance_scaling(1, fan_in, truncated_normal): std of the untruncated
        # normal is sqrt(1 / fan_in) / 0.8796..., truncated to [-2, 2] stds.
        for name, fan_in, _ in self.spec.layer_sizes():
            layer = getattr(self, name)
            std = math.sqrt(1.0 / fan_in) / 0.87962566103423978
            nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std, generator=generator)
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Raw outputs [B, A] float32 from encodings [B, E] (any float dtype), computed
        in `spec.compute_dtype` (float32 outputs either way, also under a caller's
        autocast)."""
        x = x.to(torch.float32)
        parts = [x]
        if self._dropped is not None:
            start, stop = self._dropped
            parts = [x[..., :start], x[..., stop:]]
        for wanted, derive in (
            (self.spec.strategic_features, features.strategic_features),
            (self.spec.blocking_features, features.blocking_features),
        ):
            if wanted:
                parts.append(
                    derive(
                        self.spec.rules,
                        x,
                        constants=self._constants_on(x.device),
                        concatenate=lambda xs: torch.cat(xs, dim=-1),
                    )
                )
        x = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
        if not self._bfloat16:
            return self._layers(x).to(torch.float32)
        # Entered only for bfloat16: even a disabled autocast costs microseconds per call.
        # No cast cache: inside a caller's autocast region (even a disabled one) the cache
        # would outlive this forward and serve the next forward the bfloat16 copies of
        # weights an optimizer step has changed since (each weight is cast once here anyway).
        with torch.autocast(x.device.type, dtype=torch.bfloat16, cache_enabled=False):
            out = self._layers(x)
        return out.to(torch.float32)

    def _constants_on(self, device: torch.device) -> features.Tables:
        if device not in self._feature_constants:
            self._feature_constants[device] = features.tables(self.spec.rules).converted(
                lambda a: torch.as_tensor(a, device=device)
            )
        return self._feature_constants[device]

    def _layers(self, x: torch.Tensor) -> torch.Tensor:
        for i in range(self.spec.num_layers):
            x = self._act(getattr(self, f"layer_{i}")(x))
        return self.output(x)


def to_layout(model: TorchMLP) -> dict[str, np.ndarray]:
    """Parameters in the canonical layout: fresh float32 numpy arrays, weights [out, in].

    Keys are in layer order and equal `model.state_dict()` keys.
    """
    layout = {
        key: value.detach().cpu().numpy().astype(np.float32, copy=True)
        for key, value in model.state_dict().items()
    }
    check_layout(model.spec, layout)
    return layout


def from_layout(
    spec: NetworkSpec, layout: Mapping[str, np.ndarray], *, device: torch.device | str = "cpu"
) -> TorchMLP:
    """A TorchMLP holding exactly the parameters of `layout` (inverse of `to_layout`).

    Raises:
        ValueError: naming the key, when a key is missing or unexpected or an array has
            the wrong shape.
    """
    check_layout(spec, layout)
    model = TorchMLP(spec)
    state = {
        key: torch.from_numpy(np.array(layout[key], dtype=np.float32, copy=True))
        for key in layout_shapes(spec)
    }
    model.load_state_dict(state, strict=True)
    return model.to(device)


def masked_advantages(raw: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The advantage head: raw outputs [..., A] with illegal actions set to 0."""
    mask = mask.to(torch.bool)
    return torch.where(mask, raw, torch.zeros_like(raw))


def masked_log_policy(raw_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Log-softmax over the legal actions only, [..., A] float32; illegal entries are 0.

    Safe everywhere: no infinities enter the differentiated computation, so a row without
    legal actions gives all zeros and finite (zero) gradients.
    """
    mask = mask.to(torch.bool)
    zero = torch.zeros_like(raw_logits)
    with torch.no_grad():
        low = raw_logits.masked_fill(~mask, -math.inf)
        top = low.max(dim=-1, keepdim=True).values
        top = torch.where(torch.isfinite(top), top, torch.zeros_like(top))
    shifted = torch.where(mask, raw_logits - top, zero)
    total = torch.where(mask, torch.exp(shifted), zero).sum(dim=-1, keepdim=True)
    log_total = torch.log(torch.where(total > 0, total, torch.ones_like(total)))
    return torch.where(mask, shifted - log_total, zero)


def masked_policy(raw_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The strategy head: softmax over legal actions, [..., A] float32.

    Illegal actions get exactly 0; a row without legal actions is all zeros (no NaN).
    """
    mask = mask.to(torch.bool)
    log_policy = masked_log_policy(raw_logits, mask)
    return torch.where(mask, torch.exp(log_policy), torch.zeros_like(log_policy))


def resolve_device(device: str | torch.device) -> torch.device:
    """The torch device for a `run.device` setting: "cpu", "cuda" or "cuda:N".

    Raises:
        ValueError: naming `run.device`, for another device type, a CUDA device when
            `torch.cuda.is_available()` is False, or a CUDA index that does not exist.
    """
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"run.device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}") from err
    if resolved.type == "cpu":
        return resolved
    if resolved.type != "cuda":
        raise ValueError(f"run.device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    if not torch.cuda.is_available():
        raise ValueError(
            f"run.device is {device!r} but torch.cuda.is_available() is False (CPU-only torch "
            "build or no visible GPU); set run.device='cpu'"
        )
    if resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(
            f"run.device is {device!r} but only {torch.cuda.device_count()} CUDA device(s) exist"
        )
    return resolved
