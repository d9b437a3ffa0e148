"""The torch learner behind the optax learner's interface, for the trainer.

`TrainerTorchLearner` has the `init` / `train` of `lc_cfr.learn.learner.Learner` (flax
parameters in, flax parameters out; a `Reservoir` memory; a JAX key), and trains with
`TorchLearner` on `run.device`, optionally under bfloat16 autocast and `torch.compile`
(`run.torch_compile`). The forwards compute in bfloat16 when the spec says so
(`network.compute_dtype`, inside `TorchMLP.forward`) or when `run.use_amp` (the deprecated
alias: bfloat16 on the torch path only) wraps the whole update in autocast. It draws its
batches with the same keys as the optax learner (`reservoir_sample` row draws), so with
the same memory both learners see the same batches in the same order and, in float32,
end within float32 rounding of each other (tests/test_torch_parity.py bounds it); in
bfloat16 within the looser bounds of tests/test_compute_dtype.py.

The optimizer state is a pytree of numpy arrays ({"count", "mu", "nu"}, moments in the
canonical layout), so the trainer checkpoints it like the optax state. The memory rows
reach torch without a copy where JAX and torch share the host (DLPack), else in one
contiguous copy per call; nothing is stacked per step.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import torch

from lc_cfr.learn.torch_learner import AdamWState, TorchLearner, memory_tensors, packed_decoder
from lc_cfr.memory.codec import Codec, PackedCodec
from lc_cfr.memory.reservoir import Reservoir
from lc_cfr.nets import mlp
from lc_cfr.nets.torch_mlp import from_layout, resolve_device, to_layout


@functools.partial(jax.jit, static_argnums=(2, 3))
def batch_rows(size: jax.Array, key: jax.Array, num_updates: int, batch_size: int) -> jax.Array:
    """[num_updates, batch_size] rows: the draws of the optax learner's scan, step by step."""
    keys = jax.random.split(key, num_updates)
    high = jnp.maximum(size, 1)
    return jax.vmap(lambda k: jax.random.randint(k, (batch_size,), 0, high))(keys)


class TrainerTorchLearner:
    """`Learner.init` / `Learner.train` computed by `TorchLearner` (see the module doc)."""

    def __init__(
        self,
        learner: TorchLearner,
        *,
        device: str = "cpu",
        use_amp: bool = False,
        compile: bool = False,
        codec: Codec | None = None,
    ):
        """Wraps `learner` (its spec, kind and hyper-parameters); device, use_amp and
        compile as `run.device`, `run.use_amp`, `run.torch_compile`. use_amp=False does
        not undo a bfloat16 `spec.compute_dtype` (the model computes in its spec's dtype)."""
        self.learner = learner
        self.codec = codec
        self.spec, self.kind = learner.spec, learner.kind
        self.batch_size, self.num_updates = learner.batch_size, learner.num_updates
        self.device = resolve_device(device)
        self.use_amp = bool(use_amp)
        self.compile = bool(compile)
        self.trace_count = 0  # the optax Learner's recompile counter; nothing traces here
        self._model = None
        self._runner = None
        self._decode = (
            packed_decoder(codec, self.device) if isinstance(codec, PackedCodec) else None
        )

    def init(self, key: jax.Array):
        """Fresh (flax params, optimizer state): the optax learner's initial parameters."""
        params = mlp.init_params(self.spec, key)
        zeros = {k: np.zeros(s, np.float32) for k, s in mlp.layout_shapes(self.spec).items()}
        state = {
            "count": np.zeros((), np.int32),
            "mu": zeros,
            "nu": {k: v.copy() for k, v in zeros.items()},
        }
        return params, state

    def train(self, params, opt_state, memory: Reservoir, key: jax.Array, span=None):
        """`num_updates` AdamW steps on batches drawn as the optax learner draws them, the
        updates `span` of their fit (None: the whole fit)."""
        rows = np.array(batch_rows(memory.size, key, self.num_updates, self.batch_size))
        data = memory_tensors(memory, device=self.device)
        model = self._load(params)
        state = AdamWState(
            count=int(opt_state["count"]),
            mu={k: self._tensor(v) for k, v in opt_state["mu"].items()},
            nu={k: self._tensor(v) for k, v in opt_state["nu"].items()},
        )
        # No cast cache: this region spans every update of the call, and a cached bfloat16
        # copy of a weight would be served to every later forward after the optimizer
        # changed the weight in place (the forwards would all see the first step's weights).
        with torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.use_amp, cache_enabled=False
        ):
            model, state, metrics = self.learner.train(
                model, data, rows, state, span, forward=self._runner, decode=self._decode
            )
        layout = to_layout(self._model)
        new_state = {
            "count": np.asarray(state.count, np.int32),
            "mu": {k: v.detach().cpu().numpy().copy() for k, v in state.mu.items()},
            "nu": {k: v.detach().cpu().numpy().copy() for k, v in state.nu.items()},
        }
        metrics = {name: jnp.float32(value) for name, value in metrics.items()}
        return mlp.from_layout(self.spec, layout), new_state, metrics

    # ----- helpers -----------------------------------------------------------------

    def _tensor(self, array) -> torch.Tensor:
        return torch.from_numpy(np.array(array, np.float32)).to(self.device)

    def _load(self, params) -> torch.nn.Module:
        """The learner's one torch model holding `params` (built once, then copied into,
        so a compiled model keeps its compiled code)."""
        layout = mlp.to_layout(self.spec, jax.device_get(params))
        if self._model is None:
            self._model = from_layout(self.spec, layout, device=self.device)
            if self.compile:
                self._runner = torch.compile(self._model)
        else:
            with torch.no_grad():
                for name, value in self._model.state_dict().items():
                    value.copy_(torch.from_numpy(np.asarray(layout[name])))
        return self._model
