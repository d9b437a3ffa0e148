"""The multilayer perceptron of the advantage and strategy networks (flax linen).

One network shape serves both Deep CFR networks: it maps an information-state encoding
[B, E] to one raw output per action [B, A]. The heads differ only in how the raw outputs
are read: `masked_advantages` (regret estimates, illegal actions 0) and `masked_policy`
(a softmax over the legal actions).

`to_layout` / `from_layout` convert the parameters to and from one canonical layout that
a torch MLP shares: keys "layer_{i}.weight" [out, in], "layer_{i}.bias" [out],
"output.weight" [A, H] and "output.bias" [A] (the nn.Linear convention, so the flax
kernels [in, out] are transposed).

`NetworkSpec.own_known_input=False` makes the network blind to the encoding's `own_known`
block: `network_input` drops its columns before layer_0, so layer_0 is E - N wide (the
torch MLP drops the same columns).

`NetworkSpec.strategic_features=True` appends `lc_cfr.nets.features.strategic_features`
of the encoding (per-colour live cards, projected scores, the danger of a discard, the
turns left) to what layer_0 reads; the torch MLP computes the same features bit for bit.

`NetworkSpec.compute_dtype='bfloat16'` (config `network.compute_dtype`) is the usual mixed
precision: the parameters stay float32 (optimizer, checkpoints and layouts unchanged), each
Dense layer casts its input, kernel and bias to bfloat16 and computes in bfloat16, and
`apply` casts the raw outputs back to float32, so heads, losses and gradients
accumulate in float32. The torch MLP computes the same under bfloat16 autocast.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.game.rules import CARD_BLOCKS, Rules
from lc_cfr.nets import features

# gelu is the exact (erf) form, as torch.nn.GELU() computes by default.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "relu": nn.relu,
    "gelu": functools.partial(nn.gelu, approximate=False),
    "tanh": jnp.tanh,
    "silu": nn.silu,
}

Params = dict  # {"layer_0": {"kernel": [E, H], "bias": [H]}, ..., "output": {...}}
HEADS = ("slot", "card")
# network.compute_dtype: the dtype of the matmuls and activations (parameters stay float32).
COMPUTE_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
# Position of the `own_known` card block in the encoding, in blocks of N (docs/game.md).
OWN_KNOWN_BLOCK = CARD_BLOCKS.index("own_known")


@dataclasses.dataclass(frozen=True)
class NetworkSpec:
    """The shape of an MLP: static, hashable data that jitted functions close over.

    Attributes:
        input_size: E, the length of the information-state encoding.
        num_actions: A, one output per action.
        hidden_size: width of every hidden layer.
        num_layers: number of hidden layers (each Dense + activation).
        activation: one of ACTIVATIONS ('relu', 'gelu', 'tanh', 'silu').
        head: `slot` (one output per action: play / discard hand slot i, draws) or `card`
            (play / discard card c for every card id, draws), read back into the slot
            actions through the hand held: the hand's cards are the first `n_cards`
            entries of the input (the encoding's `hand` block, docs/game.md), slot i the
            i-th card in id order. Why: "play the red 7" means the same whatever slot the
            card sits in, so what is learnt of a card carries over between hands.
        n_cards: N, the card ids (`card` head, and `own_known_input=False`).
        hand_size: H, the hand slots (`card` head only).
        own_known_input: whether the first layer reads the encoding's `own_known` block
            (the N columns from OWN_KNOWN_BLOCK * N on: which of the player's cards the
            opponent saw it draw from a pile). False drops those columns before the first
            layer, which then has `input_size - n_cards` inputs in the encoding's layout
            from before the block existed: networks with and without the feature can be
            compared on the same data, and parameters saved before it still load. The
            input `x` keeps its full width `input_size` either way.
        strategic_features: whether layer_0 also reads the features of
            `lc_cfr.nets.features` (computed from x, appended after it): `feature_size(rules)`
            more inputs. They need `rules`.
        blocking_features: whether layer_0 also reads `features.blocking_features` of x
            (appended after the strategic features, if any): what playing each hand card
            would block, `blocking_feature_size(rules)` more inputs. They need `rules`.
        rules: the variant whose encoding x holds (strategic and blocking features only).
        compute_dtype: one of COMPUTE_DTYPES, what the forward computes in: 'float32', or
            'bfloat16' (mixed precision: float32 parameters cast to bfloat16 for each
            layer, float32 raw outputs; see the module doc). It changes no parameter or
            shape, so parameters move freely between the two.
    """

    input_size: int
    num_actions: int
    hidden_size: int
    num_layers: int
    activation: str = "relu"
    head: str = "slot"
    n_cards: int = 0
    hand_size: int = 0
    own_known_input: bool = True
    compute_dtype: str = "float32"
    strategic_features: bool = False
    rules: Rules | None = None
    blocking_features: bool = False

    def __post_init__(self):
        for name in ("input_size", "num_actions", "hidden_size", "num_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"network.{name} must be an int >= 1, got {value!r}")
        if self.activation not in ACTIVATIONS:
            raise ValueError(
                f"network.activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}"
            )
        if self.head not in HEADS:
            raise ValueError(f"network.head must be one of {HEADS}, got {self.head!r}")
        if self.head == "card" and not (
            1 <= self.hand_size < self.n_cards <= self.input_size
            and self.num_actions - 2 * self.hand_size >= 2
        ):
            raise ValueError(
                f"network.head='card' needs the rules' n_cards and hand_size, got "
                f"n_cards={self.n_cards}, hand_size={self.hand_size}"
            )
        if not isinstance(self.own_known_input, bool):
            raise ValueError(
                f"network.own_known_input must be a bool, got {self.own_known_input!r}"
            )
        # The dropped block must lie inside the input: without N the spec cannot find it.
        if not self.own_known_input and not (
            isinstance(self.n_cards, int)
            and 1 <= self.n_cards
            and (OWN_KNOWN_BLOCK + 1) * self.n_cards <= self.input_size
        ):
            raise ValueError(
                f"network.own_known_input=False needs the rules' n_cards (> 0, with the "
                f"own_known block at {OWN_KNOWN_BLOCK} * n_cards inside input_size="
                f"{self.input_size}), got n_cards={self.n_cards}"
            )
        for name in ("strategic_features", "blocking_features"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ValueError(f"network.{name} must be a bool, got {value!r}")
            if value and not (
                isinstance(self.rules, Rules) and self.rules.encoding_size <= self.input_size
            ):
                raise ValueError(
                    f"network.{name}=True needs the rules whose encoding the input "
                    f"holds (encoding_size <= input_size={self.input_size}), got {self.rules!r}"
                )
        if not isinstance(self.compute_dtype, str) or self.compute_dtype not in COMPUTE_DTYPES:
            raise ValueError(
                f"network.compute_dtype must be one of {sorted(COMPUTE_DTYPES)}, got "
                f"{self.compute_dtype!r}"
            )

    @property
    def output_size(self) -> int:
        """Raw outputs of the last layer: A (slot head) or 2N + 1 + C (card head)."""
        if self.head == "slot":
            return self.num_actions
        return self.num_actions + 2 * (self.n_cards - self.hand_size)

    @property
    def own_known_columns(self) -> tuple[int, int]:
        """[start, stop) of the `own_known` block in the input (needs `n_cards`)."""
        start = OWN_KNOWN_BLOCK * self.n_cards
        return start, start + self.n_cards

    @property
    def first_layer_inputs(self) -> int:
        """Inputs of layer_0: E, less N when the `own_known` block is dropped, plus the
        strategic and the blocking features when they are read."""
        size = self.input_size if self.own_known_input else self.input_size - self.n_cards
        if self.strategic_features:
            size += features.feature_size(self.rules)
        if self.blocking_features:
            size += features.blocking_feature_size(self.rules)
        return size

    @property
    def layer_names(self) -> tuple[str, ...]:
        """Names of the Dense layers in order: layer_0..layer_{L-1}, output."""
        return tuple(f"layer_{i}" for i in range(self.num_layers)) + ("output",)

    def layer_sizes(self) -> tuple[tuple[str, int, int], ...]:
        """(name, in_features, out_features) of every Dense layer in order."""
        ins = (self.first_layer_inputs,) + (self.hidden_size,) * self.num_layers
        outs = (self.hidden_size,) * self.num_layers + (self.output_size,)
        return tuple(zip(self.layer_names, ins, outs, strict=True))


class _MLP(nn.Module):
    """Hidden Dense layers layer_0..layer_{L-1} with an activation, then `output`."""

    spec: NetworkSpec

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = ACTIVATIONS[self.spec.activation]
        # dtype: what Dense casts its input and parameters to and computes in;
        # param_dtype keeps the stored parameters float32 whatever the compute dtype.
        dense = functools.partial(
            nn.Dense, dtype=COMPUTE_DTYPES[self.spec.compute_dtype], param_dtype=jnp.float32
        )
        for i in range(self.spec.num_layers):
            x = act(dense(self.spec.hidden_size, name=f"layer_{i}")(x))
        return dense(self.spec.output_size, name="output")(x)


def network_input(spec: NetworkSpec, x: jax.Array) -> jax.Array:
    """What layer_0 reads of encodings [..., E]: x, less the `own_known` block when
    `spec.own_known_input` is False ([..., E - N], the rest in order), then the strategic
    features of x when `spec.strategic_features` is True, then the blocking features when
    `spec.blocking_features` is."""
    parts = [x]
    if not spec.own_known_input:
        start, stop = spec.own_known_columns
        parts = [x[..., :start], x[..., stop:]]
    if spec.strategic_features or spec.blocking_features:
        constants = features.tables(spec.rules).converted(jnp.asarray)
    if spec.strategic_features:
        parts.append(
            features.strategic_features(spec.rules, x, constants=constants, concatenate=_join_last)
        )
    if spec.blocking_features:
        parts.append(
            features.blocking_features(spec.rules, x, constants=constants, concatenate=_join_last)
        )
    return parts[0] if len(parts) == 1 else _join_last(parts)


def _join_last(parts) -> jax.Array:
    return jnp.concatenate(parts, axis=-1)


def card_outputs_to_slots(spec: NetworkSpec, x: jax.Array, raw: jax.Array) -> jax.Array:
    """[B, A] slot-action outputs from card-head outputs [B, 2N + 1 + C].

    Slot i reads the outputs of the i-th card of the hand (cards in id order, the hand's
    bits being x[:, :N]); an empty slot reads 0 (it is never legal).
    """
    n, h = spec.n_cards, spec.hand_size
    hand = x[:, :n] > 0.5  # [B, N]
    rank_in_hand = jnp.cumsum(hand, axis=1) - 1  # [B, N]
    in_slot = hand[:, None, :] & (rank_in_hand[:, None, :] == jnp.arange(h)[None, :, None])
    card = jnp.argmax(in_slot, axis=2)  # [B, H], the card in each slot
    filled = jnp.any(in_slot, axis=2)  # [B, H]

    def read(block):
        return jnp.where(filled, jnp.take_along_axis(block, card, axis=1), 0.0)

    return jnp.concatenate([read(raw[:, :n]), read(raw[:, n : 2 * n]), raw[:, 2 * n :]], axis=1)


def init_params(spec: NetworkSpec, key: jax.Array) -> Params:
    """Fresh parameters (flax default initialisers).

    Args:
        spec: the network shape.
        key: a PRNG key.

    Returns:
        A dict {layer name: {"kernel": [in, out] float32, "bias": [out] float32}}; layer_0
        has `spec.first_layer_inputs` inputs.
    """
    x = jnp.zeros((1, spec.first_layer_inputs), jnp.float32)
    return _MLP(spec).init(key, x)["params"]


def apply(spec: NetworkSpec, params: Params, x: jax.Array) -> jax.Array:
    """Raw outputs of the network.

    Args:
        spec: the network shape.
        params: parameters from `init_params` or `from_layout`.
        x: [B, E] encodings (any float dtype; computed in `spec.compute_dtype`), E =
            `spec.input_size` whether or not the network reads the `own_known` block.

    Returns:
        [B, A] float32 raw outputs (advantages or logits, read by the masked heads), also
        when the layers compute in bfloat16.
    """
    x = jnp.asarray(x, jnp.float32)
    # float32 from here on: the heads' softmax and the losses must not run in bfloat16.
    raw = _MLP(spec).apply({"params": params}, network_input(spec, x)).astype(jnp.float32)
    if spec.head == "card":  # the hand block is block 0, never dropped
        return card_outputs_to_slots(spec, x, raw)
    return raw


def masked_advantages(raw: jax.Array, mask: jax.Array) -> jax.Array:
    """The advantage head: raw outputs [..., A] with illegal actions set to 0."""
    return jnp.where(mask, raw, 0.0)


def masked_log_policy(raw_logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Log-softmax over the legal actions only, [..., A] float32; illegal entries are 0.

    Safe everywhere: no infinities enter the computation, so a row without legal actions
    gives all zeros and finite (zero) gradients.
    """
    low = jnp.where(mask, raw_logits, -jnp.inf)
    top = jax.lax.stop_gradient(jnp.max(low, axis=-1, keepdims=True))
    top = jnp.where(jnp.isfinite(top), top, 0.0)
    shifted = jnp.where(mask, raw_logits - top, 0.0)
    total = jnp.sum(jnp.where(mask, jnp.exp(shifted), 0.0), axis=-1, keepdims=True)
    log_total = jnp.log(jnp.where(total > 0, total, 1.0))
    return jnp.where(mask, shifted - log_total, 0.0)


def masked_policy(raw_logits: jax.Array, mask: jax.Array) -> jax.Array:
    """The strategy head: softmax over legal actions, [..., A] float32.

    Illegal actions get exactly 0; a row without legal actions is all zeros (no NaN).
    """
    return jnp.where(mask, jnp.exp(masked_log_policy(raw_logits, mask)), 0.0)


def layout_shapes(spec: NetworkSpec) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of the canonical (torch nn.Linear) layout, in layer order."""
    shapes = {}
    for name, fan_in, fan_out in spec.layer_sizes():
        shapes[f"{name}.weight"] = (fan_out, fan_in)
        shapes[f"{name}.bias"] = (fan_out,)
    return shapes


def to_layout(spec: NetworkSpec, params: Params) -> dict[str, np.ndarray]:
    """Parameters in the canonical layout: float32 numpy arrays, weights [out, in].

    Args:
        spec: the network shape.
        params: flax parameters of that shape.

    Returns:
        {"layer_{i}.weight": [out, in], "layer_{i}.bias": [out], "output.weight",
        "output.bias"}, each a fresh float32 array.
    """
    layout = {}
    for name in spec.layer_names:
        layer = params[name]
        layout[f"{name}.weight"] = np.array(layer["kernel"], np.float32).T.copy()
        layout[f"{name}.bias"] = np.array(layer["bias"], np.float32)
    check_layout(spec, layout)
    return layout


def from_layout(spec: NetworkSpec, layout: Mapping[str, np.ndarray]) -> Params:
    """Flax parameters from the canonical layout (the inverse of `to_layout`).

    Raises:
        ValueError: naming the key, when a key is missing or unexpected or an array has
            the wrong shape.
    """
    check_layout(spec, layout)
    params = {}
    for name in spec.layer_names:
        weight = np.asarray(layout[f"{name}.weight"], np.float32)
        params[name] = {
            "kernel": jnp.asarray(weight.T),
            "bias": jnp.asarray(np.asarray(layout[f"{name}.bias"], np.float32)),
        }
    return params


def check_layout(spec: NetworkSpec, layout: Mapping[str, np.ndarray]) -> None:
    """Raises a ValueError naming the first missing, unexpected or misshapen key."""
    expected = layout_shapes(spec)
    for key, shape in expected.items():
        if key not in layout:
            raise ValueError(f"parameter layout is missing key {key!r} (shape {shape})")
        actual = tuple(np.shape(layout[key]))
        if actual != shape:
            raise ValueError(f"parameter layout key {key!r} has shape {actual}, expected {shape}")
    unexpected = sorted(set(layout) - set(expected))
    if unexpected:
        raise ValueError(f"parameter layout has unexpected key(s) {unexpected}")


@jax.jit
def _all_finite(tree) -> jax.Array:
    leaves = [
        jnp.all(jnp.isfinite(leaf))
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.asarray(leaf).dtype, jnp.floating)
    ]
    return jnp.all(jnp.stack(leaves)) if leaves else jnp.bool_(True)


def all_finite(tree) -> bool:
    """Whether every floating-point leaf of `tree` (parameters, losses) is finite; the
    network masks a NaN logit like an illegal action, so NaN parameters must be caught
    before they are played or saved."""
    return bool(_all_finite(tree))
