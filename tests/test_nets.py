"""The MLP: shapes, masked heads, the canonical (torch) layout, and config errors."""

import dataclasses

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lc_cfr.nets import mlp

SPEC = mlp.NetworkSpec(input_size=12, num_actions=5, hidden_size=16, num_layers=2)


def _torch_convention_forward(spec, layout, x):
    """Forward pass in numpy from the layout alone: y = x W^T + b (nn.Linear)."""
    act = {"relu": lambda v: np.maximum(v, 0), "tanh": np.tanh}[spec.activation]
    for i in range(spec.num_layers):
        x = act(x @ layout[f"layer_{i}.weight"].T + layout[f"layer_{i}.bias"])
    return x @ layout["output.weight"].T + layout["output.bias"]


def test_shapes_and_layer_names():
    params = mlp.init_params(SPEC, jax.random.key(0))
    assert list(params) == ["layer_0", "layer_1", "output"]
    chex.assert_shape(params["layer_0"]["kernel"], (12, 16))
    chex.assert_shape(params["layer_1"]["kernel"], (16, 16))
    chex.assert_shape(params["output"]["kernel"], (16, 5))
    x = jax.random.normal(jax.random.key(1), (7, 12)).astype(jnp.float16)
    out = jax.jit(mlp.apply, static_argnums=0)(SPEC, params, x)
    chex.assert_shape(out, (7, 5))
    chex.assert_type(out, jnp.float32)


@pytest.mark.parametrize("activation", sorted(mlp.ACTIVATIONS))
def test_every_activation_runs(activation):
    spec = mlp.NetworkSpec(
        input_size=3, num_actions=2, hidden_size=4, num_layers=1, activation=activation
    )
    out = mlp.apply(spec, mlp.init_params(spec, jax.random.key(0)), jnp.ones((2, 3)))
    chex.assert_shape(out, (2, 2))
    chex.assert_tree_all_finite(out)


def test_masked_advantages():
    raw = jnp.array([[1.0, -2.0, 3.0], [4.0, 5.0, -6.0]])
    mask = jnp.array([[True, False, True], [False, False, False]])
    np.testing.assert_array_equal(
        mlp.masked_advantages(raw, mask), [[1.0, 0.0, 3.0], [0.0, 0.0, 0.0]]
    )


def test_masked_policy():
    raw = jnp.array([[0.0, 50.0, 0.0, 1e4], [3.0, -1.0, 2.0, 0.5], [1.0, 2.0, 3.0, 4.0]])
    mask = jnp.array([[True, False, True, True], [True, True, False, False], [False] * 4])
    policy = mlp.masked_policy(raw, mask)
    chex.assert_tree_all_finite(policy)
    np.testing.assert_array_equal(np.asarray(policy)[~np.asarray(mask)], 0.0)
    np.testing.assert_allclose(policy[:2].sum(-1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(policy[2], 0.0)  # no legal action: all zeros
    np.testing.assert_allclose(policy[0], [0.0, 0.0, 0.0, 1.0], atol=1e-6)
    expected = np.exp([3.0, -1.0]) / np.exp([3.0, -1.0]).sum()
    np.testing.assert_allclose(policy[1, :2], expected, rtol=1e-6)
    log_policy = mlp.masked_log_policy(raw, mask)
    chex.assert_tree_all_finite(log_policy)
    np.testing.assert_allclose(log_policy[1, :2], np.log(expected), atol=1e-6)
    grads = jax.grad(lambda r: jnp.sum(mlp.masked_log_policy(r, mask) ** 2))(raw)
    chex.assert_tree_all_finite(grads)
    np.testing.assert_array_equal(grads[2], 0.0)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_layout_round_trip_is_exact(activation):
    spec = mlp.NetworkSpec(
        input_size=6, num_actions=3, hidden_size=8, num_layers=3, activation=activation
    )
    params = mlp.init_params(spec, jax.random.key(2))
    layout = mlp.to_layout(spec, params)
    assert list(layout) == list(mlp.layout_shapes(spec))
    assert {k: v.shape for k, v in layout.items()} == mlp.layout_shapes(spec)
    assert layout["layer_0.weight"].shape == (8, 6)  # [out, in]
    assert layout["output.weight"].shape == (3, 8)
    assert all(v.dtype == np.float32 for v in layout.values())
    restored = mlp.from_layout(spec, layout)
    chex.assert_trees_all_equal(restored, params)
    chex.assert_trees_all_equal(mlp.to_layout(spec, restored), layout)
    x = np.asarray(jax.random.normal(jax.random.key(3), (4, 6)))
    np.testing.assert_allclose(
        mlp.apply(spec, params, x),
        _torch_convention_forward(spec, layout, x),
        rtol=1e-5,
        atol=1e-5,
    )


def test_bad_layouts_name_the_key():
    layout = mlp.to_layout(SPEC, mlp.init_params(SPEC, jax.random.key(0)))
    missing = dict(layout)
    del missing["layer_1.bias"]
    with pytest.raises(ValueError, match=r"missing key 'layer_1\.bias'"):
        mlp.from_layout(SPEC, missing)
    transposed = dict(layout, **{"layer_0.weight": layout["layer_0.weight"].T})
    with pytest.raises(ValueError, match=r"'layer_0\.weight' has shape \(12, 16\)"):
        mlp.from_layout(SPEC, transposed)
    extra = dict(layout, **{"layer_2.weight": np.zeros((16, 16), np.float32)})
    with pytest.raises(ValueError, match=r"unexpected key.*layer_2\.weight"):
        mlp.from_layout(SPEC, extra)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"activation": "swish"}, "network.activation"),
        ({"hidden_size": 0}, "network.hidden_size"),
        ({"num_layers": 0}, "network.num_layers"),
        ({"input_size": 0}, "network.input_size"),
        ({"compute_dtype": "float16"}, "network.compute_dtype"),
        ({"compute_dtype": None}, "network.compute_dtype"),
    ],
)
def test_spec_errors_name_the_field(overrides, field):
    kwargs = dict(input_size=4, num_actions=2, hidden_size=8, num_layers=1) | overrides
    with pytest.raises(ValueError, match=field):
        mlp.NetworkSpec(**kwargs)


def test_spec_is_hashable():
    assert hash(SPEC) == hash(mlp.NetworkSpec(12, 5, 16, 2))


def test_card_head_reads_each_slot_from_its_card():
    from lc_cfr.game import engine
    from lc_cfr.game.rules import Rules

    rules = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=10)
    n, h = rules.n_cards, rules.hand_size
    spec = mlp.NetworkSpec(
        rules.encoding_size, rules.num_actions, 8, 1, head="card", n_cards=n, hand_size=h
    )
    assert spec.output_size == 2 * n + 1 + rules.n_colors
    params = mlp.init_params(spec, jax.random.key(0))
    chex.assert_shape(params["output"]["kernel"], (8, spec.output_size))
    state = engine.init(rules, 3, 5)
    x = engine.observe(rules, state, 0)[None]
    played = engine.step(rules, state, 1)  # a card leaves: slot h-1 is empty while drawing
    x = jnp.concatenate([x, engine.observe(rules, played, 0)[None]])
    raw = mlp._MLP(spec).apply({"params": params}, x)  # [2, 2N + 1 + C]
    out = mlp.apply(spec, params, x)
    chex.assert_shape(out, (2, rules.num_actions))
    for row, game in enumerate([state, played]):
        hand = np.asarray(game.hands[0])
        for slot in range(h):
            card = int(hand[slot])
            if card == n:  # empty slot
                assert out[row, slot] == out[row, h + slot] == 0.0
            else:
                assert out[row, slot] == raw[row, card]
                assert out[row, h + slot] == raw[row, n + card]
        np.testing.assert_array_equal(out[row, 2 * h :], raw[row, 2 * n :])
    assert int(np.sum(np.asarray(played.hands[0]) == n)) == 1
    # the layout (torch convention) holds the card-sized output layer
    layout = mlp.to_layout(spec, params)
    assert layout["output.weight"].shape == (spec.output_size, 8)
    with pytest.raises(ValueError, match="network.head"):
        mlp.NetworkSpec(12, 5, 8, 1, head="cards")
    with pytest.raises(ValueError, match="network.head='card'"):
        mlp.NetworkSpec(12, 5, 8, 1, head="card")


# ---------------------------------------------------------------- own_known_input
OWN_RULES_N, OWN_RULES_H = 10, 3  # Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3)


def _own_known_specs(head="slot", activation="tanh"):
    """(spec reading own_known, spec dropping it) over that variant's encoding."""
    from lc_cfr.game.rules import Rules

    rules = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3)
    assert (rules.n_cards, rules.hand_size) == (OWN_RULES_N, OWN_RULES_H)
    on = mlp.NetworkSpec(
        rules.encoding_size,
        rules.num_actions,
        16,
        2,
        activation,
        head=head,
        n_cards=rules.n_cards,
        hand_size=rules.hand_size,
    )
    return on, dataclasses.replace(on, own_known_input=False)


def _encodings(spec, rows=32, seed=0):
    """Random 0/1 card bits with the hand block holding H cards, and small scalars."""
    rng = np.random.default_rng(seed)
    x = (rng.random((rows, spec.input_size)) < 0.3).astype(np.float32)
    x[:, : spec.n_cards] = 0
    for row in range(rows):
        x[row, rng.choice(spec.n_cards, OWN_RULES_H, replace=False)] = 1
    x[:, 8 * spec.n_cards :] = rng.integers(-8, 9, x[:, 8 * spec.n_cards :].shape) / 16
    return x


def test_own_known_input_false_shrinks_the_first_layer():
    on, off = _own_known_specs()
    n = OWN_RULES_N
    assert off.input_size == on.input_size == 8 * n + 7 * 2 + 5
    assert mlp.OWN_KNOWN_BLOCK == 7 and off.own_known_columns == (7 * n, 8 * n)
    assert on.first_layer_inputs == on.input_size
    assert off.first_layer_inputs == off.input_size - n
    assert off.layer_sizes()[0] == ("layer_0", off.input_size - n, 16)
    assert off.layer_sizes()[1:] == on.layer_sizes()[1:]
    params = mlp.init_params(off, jax.random.key(0))
    chex.assert_shape(params["layer_0"]["kernel"], (off.input_size - n, 16))
    assert mlp.layout_shapes(off)["layer_0.weight"] == (16, off.input_size - n)
    assert {k: v.shape for k, v in mlp.to_layout(off, params).items()} == mlp.layout_shapes(off)
    # the full-width encoding goes in either way
    out = jax.jit(mlp.apply, static_argnums=0)(off, params, _encodings(off))
    chex.assert_shape(out, (32, off.num_actions))
    assert hash(off) != hash(on) and off != on


@pytest.mark.parametrize("head", ["slot", "card"])
def test_own_known_input_false_equals_zero_kernel_rows(head):
    on, off = _own_known_specs(head)
    start, stop = off.own_known_columns
    params = mlp.init_params(off, jax.random.key(4))
    kernel = np.asarray(params["layer_0"]["kernel"])
    padded = np.insert(kernel, [start] * (stop - start), 0.0, axis=0)  # zero rows at 7N..8N
    assert padded.shape == (on.input_size, 16)
    np.testing.assert_array_equal(np.delete(padded, np.s_[start:stop], axis=0), kernel)
    wide = {**params, "layer_0": {**params["layer_0"], "kernel": jnp.asarray(padded)}}
    x = _encodings(off, seed=1)
    x[:, start:stop] = 1.0  # a live block, so reading it would change the outputs
    expected = mlp.apply(on, wide, x)
    actual = mlp.apply(off, params, x)
    # the two sum the same products in a different order: equal to float32 rounding
    np.testing.assert_allclose(actual, expected, rtol=1e-6, atol=1e-6)
    # the dropped columns are never read: any values there give the very same outputs
    blank = x.copy()
    blank[:, start:stop] = 0.0
    np.testing.assert_array_equal(mlp.apply(off, params, blank), actual)
    # whereas a network that reads the block sees the difference
    on_params = mlp.init_params(on, jax.random.key(4))
    assert not np.allclose(mlp.apply(on, on_params, blank), mlp.apply(on, on_params, x))


def test_own_known_input_false_loads_parameters_of_the_older_encoding():
    on, off = _own_known_specs("slot", "relu")
    start, stop = off.own_known_columns
    old = mlp.NetworkSpec(on.input_size - OWN_RULES_N, on.num_actions, 16, 2, "relu")
    old_params = mlp.init_params(old, jax.random.key(9))
    params = mlp.from_layout(off, mlp.to_layout(old, old_params))  # the same shapes
    x = _encodings(off, seed=2)
    old_x = np.delete(x, np.s_[start:stop], axis=1)  # the 7-block encoding of the same states
    np.testing.assert_allclose(
        mlp.apply(off, params, x), mlp.apply(old, old_params, old_x), rtol=1e-6, atol=1e-6
    )
    with pytest.raises(ValueError, match="layer_0.weight"):
        mlp.from_layout(on, mlp.to_layout(old, old_params))


@pytest.mark.parametrize(
    "overrides",
    [
        {},  # n_cards missing
        {"n_cards": 0},
        {"n_cards": -3},
        {"n_cards": 3},  # block 7 would end at 24 > input_size 20
    ],
)
def test_own_known_input_false_needs_n_cards(overrides):
    kwargs = dict(input_size=20, num_actions=2, hidden_size=8, num_layers=1)
    with pytest.raises(ValueError, match="network.own_known_input"):
        mlp.NetworkSpec(**kwargs, own_known_input=False, **overrides)
    mlp.NetworkSpec(**kwargs, **overrides)  # the default reads the block: N not needed
    with pytest.raises(ValueError, match="network.own_known_input"):
        mlp.NetworkSpec(**kwargs, own_known_input=0)
    spec = mlp.NetworkSpec(**kwargs, n_cards=2, own_known_input=False)
    assert spec.layer_sizes()[0] == ("layer_0", 18, 8) and spec.own_known_columns == (14, 16)
