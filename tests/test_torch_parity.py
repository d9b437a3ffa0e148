"""The torch path against the flax/optax reference: networks, heads, optimizer, learner.

Every comparison between the two frameworks is a chex pytree assertion: whole parameter
layouts, head outputs and learner states at once, `chex.assert_trees_all_equal` where the
conversion must be exact (layout round trips), `chex.assert_trees_all_close` with the
named tolerances below otherwise, so a failure names the leaf (e.g. 'layer_1.weight').

Tolerances (float32 on CPU; XLA and torch order their sums differently, so agreement is
to rounding, never bit for bit):

* forward passes from converted parameters: FORWARD_TOL, rtol = atol = 1e-5 (measured
  <= 2.4e-7);
* masked heads: HEAD_TOL, rtol = atol = 1e-6; illegal entries and empty rows exactly 0;
* gradients through the masked log-policy: rtol 1e-5, atol 1e-6 (GRAD_RTOL/GRAD_ATOL: a
  softmax's rounding, relative to the gradient, absolute near zero);
* one-parameter-set AdamW(+clip) steps on identical gradients: ADAMW_TOL, rtol = atol =
  1e-6 (only op-order rounding differs; 5 steps with the clip both acting and not);
* whole learners after K = 20 steps on the same batches from the same parameters (gelu,
  2x16 hidden, lr 1e-3, weight decay 0.05, both kinds, lcfr/uniform, clip off/0.05):
  parameters atol = 2e-6 and losses rtol = 1e-5. Measured: parameters differ by at most
  ~2e-7 (the parameters move ~2e-2), losses by ~2e-7 relative. Each step's gradients
  differ by rounding; Adam divides by sqrt(nu), which can amplify a rounding difference
  in a tiny gradient, and differences accumulate over K steps, so the bound keeps a 10x
  margin over the measured drift while staying 10^4 below the distance trained;
* the learners' AdamW states after those K steps: equal step counts, first moments
  within MU_ATOL = 3e-7 (measured <= 3e-8, moments up to ~0.4), second moments within
  NU_ATOL = 5e-9 (measured <= 4.7e-10, moments up to ~5e-3): a 10x margin over the
  rounding of the gradients they average.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch

from lc_cfr.learn import learner as lr
from lc_cfr.learn import torch_learner as tl
from lc_cfr.memory import reservoir as rv
from lc_cfr.nets import mlp
from lc_cfr.nets import torch_mlp as tn

E, A, N = 6, 4, 96
K, BATCH = 20, 16
LR, WD = 1e-3, 0.05
FORWARD_TOL = 1e-5  # flax vs torch forward: summation order (measured <= 2.4e-7)
HEAD_TOL = 1e-6  # masked heads: a softmax/log-softmax's rounding
GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-6  # gradients through the masked log-policy
ADAMW_TOL = 1e-6  # one AdamW(+clip) step on identical gradients: op order only
PARAM_ATOL, LOSS_RTOL = 2e-6, 1e-5  # whole learners after K steps (see the docstring)
MU_ATOL, NU_ATOL = 3e-7, 5e-9  # their AdamW moments after K steps (see the docstring)


def _spec(activation="relu", num_layers=2, hidden=16):
    return mlp.NetworkSpec(
        input_size=E,
        num_actions=A,
        hidden_size=hidden,
        num_layers=num_layers,
        activation=activation,
    )


def _flax_params(spec, seed=0):
    return mlp.init_params(spec, jax.random.key(seed))


# ---------------------------------------------------------------- networks and layout
@pytest.mark.parametrize("activation", sorted(mlp.ACTIVATIONS))
def test_forward_matches_flax(activation):
    spec = _spec(activation, num_layers=3)
    params = _flax_params(spec)
    model = tn.from_layout(spec, mlp.to_layout(spec, params))
    x = np.random.default_rng(1).normal(size=(32, E)).astype(np.float32)
    expected = np.asarray(mlp.apply(spec, params, x))
    with torch.no_grad():
        actual = model(torch.from_numpy(x)).numpy()
    chex.assert_trees_all_close(actual, expected, rtol=FORWARD_TOL, atol=FORWARD_TOL)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_forward_matches_flax_without_own_known(activation):
    """own_known_input=False: both drop the same N columns before layer_0."""
    n = 3
    spec = mlp.NetworkSpec(
        input_size=8 * n + 5,
        num_actions=A,
        hidden_size=16,
        num_layers=2,
        activation=activation,
        n_cards=n,
        own_known_input=False,
    )
    params = _flax_params(spec, seed=2)
    model = tn.from_layout(spec, mlp.to_layout(spec, params))
    assert model.layer_0.weight.shape == (16, spec.input_size - n)
    assert list(tn.to_layout(model)) == list(mlp.layout_shapes(spec))
    x = np.random.default_rng(3).normal(size=(32, spec.input_size)).astype(np.float32)
    expected = np.asarray(mlp.apply(spec, params, x))
    with torch.no_grad():
        actual = model(torch.from_numpy(x)).numpy()
        # the own_known columns (7N..8N) are not read: changing them changes nothing
        start, stop = spec.own_known_columns
        assert (start, stop) == (7 * n, 8 * n)
        moved = x.copy()
        moved[:, start:stop] += 5.0
        assert torch.equal(model(torch.from_numpy(moved)), torch.from_numpy(actual))
    chex.assert_trees_all_close(actual, expected, rtol=FORWARD_TOL, atol=FORWARD_TOL)
    fresh = tn.TorchMLP(spec, generator=torch.Generator().manual_seed(0))
    assert fresh.layer_0.in_features == spec.input_size - n


def test_state_dict_keys_are_the_canonical_layout():
    spec = _spec(num_layers=3)
    model = tn.TorchMLP(spec)
    assert list(model.state_dict()) == list(mlp.layout_shapes(spec))
    for key, shape in mlp.layout_shapes(spec).items():
        assert tuple(model.state_dict()[key].shape) == shape


def test_round_trips_are_exact():
    spec = _spec("gelu")
    params = _flax_params(spec, seed=3)
    layout = mlp.to_layout(spec, params)
    # flax -> layout -> torch -> layout -> flax
    back = tn.to_layout(tn.from_layout(spec, layout))
    assert list(back) == list(layout)
    assert all(value.dtype == np.float32 for value in back.values())
    chex.assert_trees_all_equal(back, layout)
    flax_back = mlp.from_layout(spec, back)
    layers = lambda p: {  # noqa: E731
        name: {leaf: p[name][leaf] for leaf in ("kernel", "bias")} for name in spec.layer_names
    }
    chex.assert_trees_all_equal(layers(flax_back), layers(params))
    # torch -> layout -> flax -> layout -> torch
    model = tn.TorchMLP(spec, generator=torch.Generator().manual_seed(5))
    again = tn.from_layout(spec, mlp.to_layout(spec, mlp.from_layout(spec, tn.to_layout(model))))
    state_dict = lambda m: {key: value.numpy() for key, value in m.state_dict().items()}  # noqa: E731
    chex.assert_trees_all_equal(state_dict(again), state_dict(model))


def test_fresh_init_is_flax_like():
    spec = _spec(hidden=256, num_layers=1)
    model = tn.TorchMLP(spec, generator=torch.Generator().manual_seed(0))
    weight = model.layer_0.weight.detach().numpy()
    assert np.all(model.layer_0.bias.detach().numpy() == 0)
    flax_kernel = np.asarray(_flax_params(spec)["layer_0"]["kernel"])
    np.testing.assert_allclose(weight.std(), flax_kernel.std(), rtol=0.1)
    assert np.abs(weight).max() <= 2 * np.sqrt(1 / E) / 0.87962566103423978 + 1e-6


def test_layout_errors_name_the_key():
    spec = _spec()
    layout = tn.to_layout(tn.TorchMLP(spec))
    missing = dict(layout)
    del missing["output.bias"]
    with pytest.raises(ValueError, match="output.bias"):
        tn.from_layout(spec, missing)
    with pytest.raises(ValueError, match="layer_0.weight"):
        tn.from_layout(spec, {**layout, "layer_0.weight": np.zeros((2, 2), np.float32)})
    with pytest.raises(ValueError, match="extra"):
        tn.from_layout(spec, {**layout, "extra": np.zeros(1, np.float32)})


# ---------------------------------------------------------------- masked heads
def test_masked_heads_match_flax():
    rng = np.random.default_rng(2)
    raw = (rng.normal(size=(40, A)) * 5).astype(np.float32)
    mask = rng.random((40, A)) < 0.5
    mask[0] = False  # a row without legal actions
    mask[1] = True
    raw[2, 0] = 1e4  # a large logit on a legal or illegal action
    heads = (
        (mlp.masked_advantages, tn.masked_advantages),
        (mlp.masked_log_policy, tn.masked_log_policy),
        (mlp.masked_policy, tn.masked_policy),
    )
    traw, tmask = torch.from_numpy(raw), torch.from_numpy(mask)
    actual, expected = {}, {}
    for flax_head, torch_head in heads:
        name = torch_head.__name__
        expected[name] = np.asarray(flax_head(jnp.asarray(raw), jnp.asarray(mask)))
        actual[name] = torch_head(traw, tmask).numpy()
        assert np.all(np.isfinite(actual[name]))
        assert np.all(actual[name][~mask] == 0)
        assert np.all(actual[name][0] == 0)
    chex.assert_trees_all_close(actual, expected, rtol=HEAD_TOL, atol=HEAD_TOL)
    policy = tn.masked_policy(traw, tmask).numpy()
    np.testing.assert_allclose(policy[1:].sum(-1), 1.0, rtol=1e-6)


def test_masked_log_policy_gradients_are_finite_and_match():
    rng = np.random.default_rng(4)
    raw = rng.normal(size=(8, A)).astype(np.float32)
    mask = rng.random((8, A)) < 0.5
    mask[0] = False
    target = rng.random((8, A)).astype(np.float32)

    def flax_objective(r):
        return jnp.sum(target * mlp.masked_log_policy(r, mask))

    expected = np.asarray(jax.grad(flax_objective)(jnp.asarray(raw)))
    traw = torch.from_numpy(raw).requires_grad_(True)
    torch.sum(
        torch.from_numpy(target) * tn.masked_log_policy(traw, torch.from_numpy(mask))
    ).backward()
    actual = traw.grad.numpy()
    assert np.all(np.isfinite(actual)) and np.all(actual[0] == 0)
    chex.assert_trees_all_close(actual, expected, rtol=GRAD_RTOL, atol=GRAD_ATOL)


# ---------------------------------------------------------------- optimizer step
@pytest.mark.parametrize("grad_clip", [0.0, 0.5, 100.0])
def test_adamw_step_matches_optax(grad_clip):
    """Identical gradient sequences: clip (triggered at 0.5, not at 100) + AdamW."""
    spec = _spec()
    params = _flax_params(spec)
    model = tn.from_layout(spec, mlp.to_layout(spec, params))
    kw = dict(learning_rate=1e-2, weight_decay=0.3, grad_clip=grad_clip)
    optimizer = lr.make_optimizer(**kw)
    learner = tl.TorchLearner(
        spec, kind="advantage", batch_size=1, num_updates=1, weighting="lcfr", **kw
    )
    opt_state, state = optimizer.init(params), learner.init_state(model)
    rng = np.random.default_rng(7)
    update = jax.jit(optimizer.update)
    for step in range(5):
        scale = 10.0 ** rng.uniform(-3, 1)  # gradient norms both below and above the clip
        grads_layout = {
            key: (rng.normal(size=shape) * scale).astype(np.float32)
            for key, shape in mlp.layout_shapes(spec).items()
        }
        grads = mlp.from_layout(spec, grads_layout)
        updates, opt_state = update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        state = learner.apply_gradients(
            model, {k: torch.from_numpy(v) for k, v in grads_layout.items()}, state
        )
        chex.assert_trees_all_close(
            tn.to_layout(model),
            mlp.to_layout(spec, params),
            rtol=ADAMW_TOL,
            atol=ADAMW_TOL,
            custom_message=f"step {step}",
        )


# ---------------------------------------------------------------- whole learners
def _memory(kind, seed=0):
    """N rows from iterations 1..4 as numpy arrays (info float16, as in a Reservoir)."""
    rng = np.random.default_rng(seed)
    info = (rng.integers(0, 5, size=(N, E)) / 4).astype(np.float16)
    mask = rng.random((N, A)) < 0.7
    mask[np.arange(N), rng.integers(0, A, N)] = True
    mask[0] = False  # one row without legal actions
    projection = rng.normal(size=(E, A)).astype(np.float32)
    logits = info.astype(np.float32) @ projection
    if kind == "advantage":
        target = (np.tanh(logits) * mask).astype(np.float32)
    else:
        target = np.asarray(mlp.masked_policy(jnp.asarray(2 * logits), mask))
    iteration = np.repeat(np.arange(1, 5, dtype=np.int32), N // 4)
    return {"info": info, "mask": mask, "target": target, "iteration": iteration}


@functools.cache
def _optax_runner(kind, weighting, grad_clip, lr_schedule="constant"):
    """A jitted optax loop like Learner.train (one whole fit), but on explicit indices
    [K, B]."""
    spec = _spec("gelu")
    optimizer = lr.make_optimizer(learning_rate=LR, weight_decay=WD, grad_clip=grad_clip)
    learner = lr.Learner(
        spec, kind=kind, optimizer=optimizer, batch_size=BATCH, num_updates=K, weighting=weighting
    )

    @jax.jit
    def run(params, memory, indices):
        def step(carry, xs):
            rows, update = xs
            params, opt_state = carry
            batch = rv.Batch(
                memory["info"][rows].astype(jnp.float32),
                memory["mask"][rows],
                memory["target"][rows],
                memory["iteration"][rows],
            )
            loss, grads = jax.value_and_grad(learner.loss)(params, batch)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            if lr_schedule == "cosine":
                scale = lr.cosine_scale(update, jnp.int32(K))
                updates = jax.tree.map(lambda u: u * scale, updates)
            return (optax.apply_updates(params, updates), opt_state), loss

        carry = (params, optimizer.init(params))
        steps = jnp.arange(K, dtype=jnp.int32)
        (params, opt_state), losses = jax.lax.scan(step, carry, (indices, steps))
        first_grads = jax.grad(learner.loss)(carry[0], _first(memory, indices))
        return params, losses, first_grads, opt_state

    def _first(memory, indices):
        rows = indices[0]
        return rv.Batch(
            memory["info"][rows].astype(jnp.float32),
            memory["mask"][rows],
            memory["target"][rows],
            memory["iteration"][rows],
        )

    return spec, run


LEARNER_CASES = [
    (kind, weighting, grad_clip, "constant")
    for kind in ("advantage", "strategy")
    for weighting in ("lcfr", "quadratic", "uniform")
    for grad_clip in (0.0, 0.05)
] + [("strategy", "uniform", 0.05, "cosine")]


@pytest.mark.parametrize(("kind", "weighting", "grad_clip", "lr_schedule"), LEARNER_CASES)
def test_learners_agree_after_k_steps(kind, weighting, grad_clip, lr_schedule):
    spec, run = _optax_runner(kind, weighting, grad_clip, lr_schedule)
    memory = _memory(kind)
    indices = np.random.default_rng(11).integers(0, N, size=(K, BATCH)).astype(np.int32)
    params = _flax_params(spec, seed=1)
    layout = mlp.to_layout(spec, params)

    jax_memory = {k: jnp.asarray(v) for k, v in memory.items()}
    final, losses, first_grads, opt_state = run(params, jax_memory, jnp.asarray(indices))
    if grad_clip > 0:  # the clip really acts (at least on the first step)
        assert float(optax.tree.norm(first_grads)) > grad_clip

    learner = tl.TorchLearner(
        spec,
        kind=kind,
        learning_rate=LR,
        weight_decay=WD,
        grad_clip=grad_clip,
        batch_size=BATCH,
        num_updates=K,
        weighting=weighting,
        lr_schedule=lr_schedule,
    )
    model, state, metrics = learner.train(layout, memory, indices)
    assert state.count == K

    losses = np.asarray(losses)
    chex.assert_trees_all_close(
        {name: metrics[f"loss_{name}"] for name in ("first", "last", "mean")},
        {"first": losses[0], "last": losses[-1], "mean": losses.mean()},
        rtol=LOSS_RTOL,
    )
    expected = mlp.to_layout(spec, final)
    moved = max(np.abs(expected[k] - layout[k]).max() for k in layout)
    assert moved > 10 * PARAM_ATOL  # training moved the parameters well beyond the tolerance
    chex.assert_trees_all_close(tn.to_layout(model), expected, rtol=0, atol=PARAM_ATOL)
    # the learner states: AdamW's step count and moments, in the canonical layout
    moments = {
        m: {key: value.numpy() for key, value in getattr(state, m).items()} for m in ("mu", "nu")
    }
    optax_moments = {
        m: mlp.to_layout(spec, optax.tree_utils.tree_get(opt_state, m)) for m in ("mu", "nu")
    }
    assert int(optax.tree_utils.tree_get(opt_state, "count")) == state.count == K
    chex.assert_trees_all_close(moments["mu"], optax_moments["mu"], rtol=0, atol=MU_ATOL)
    chex.assert_trees_all_close(moments["nu"], optax_moments["nu"], rtol=0, atol=NU_ATOL)


def test_learner_trains_a_model_in_place_and_continues():
    spec = _spec("gelu")
    memory = tl.memory_tensors(_memory("advantage"))
    assert memory.info.dtype == torch.float16 and memory.info.is_contiguous()
    learner = tl.TorchLearner(
        spec,
        kind="advantage",
        learning_rate=1e-2,
        weight_decay=0.0,
        grad_clip=1.0,
        batch_size=BATCH,
        num_updates=K,
        weighting="lcfr",
    )
    model = tn.TorchMLP(spec, generator=torch.Generator().manual_seed(0))
    indices = np.random.default_rng(0).integers(0, N, size=(K, BATCH))
    same, state, first = learner.train(model, memory, indices)
    assert same is model
    _, state, second = learner.train(model, memory, indices, state)
    assert state.count == 2 * K
    assert second["loss_mean"] < first["loss_mean"]


def test_learner_rejects_bad_arguments():
    spec = _spec()
    kw = dict(
        kind="advantage",
        learning_rate=1e-3,
        weight_decay=0.0,
        grad_clip=0.0,
        batch_size=4,
        num_updates=2,
        weighting="lcfr",
    )
    with pytest.raises(ValueError, match="weighting"):
        tl.TorchLearner(spec, **{**kw, "weighting": "nope"})
    with pytest.raises(ValueError, match="kind"):
        tl.TorchLearner(spec, **{**kw, "kind": "nope"})
    with pytest.raises(ValueError, match="learning_rate"):
        tl.TorchLearner(spec, **{**kw, "learning_rate": 0.0})
    learner = tl.TorchLearner(spec, **kw)
    memory = _memory("advantage")
    with pytest.raises(ValueError, match="shape"):
        learner.train(tn.TorchMLP(spec), memory, np.zeros((3, 4), np.int64))
    with pytest.raises(ValueError, match="indices"):
        learner.train(tn.TorchMLP(spec), memory, np.full((2, 4), N, np.int64))


def test_both_learners_keep_the_learner_protocol():
    """The trainer treats the optax and the torch learner alike (lc_cfr.learn.api)."""
    from lc_cfr.learn.api import NetworkLearner
    from lc_cfr.learn.torch_adapter import TrainerTorchLearner

    spec = _spec()
    sizes = dict(kind="advantage", batch_size=4, num_updates=2, weighting="lcfr")
    hyper = dict(learning_rate=1e-3, weight_decay=0.0, grad_clip=1.0)
    optax_learner = lr.Learner(spec, optimizer=lr.make_optimizer(**hyper), **sizes)
    torch_learner = TrainerTorchLearner(tl.TorchLearner(spec, **hyper, **sizes))
    for learner in (optax_learner, torch_learner):
        assert isinstance(learner, NetworkLearner), type(learner)
        params, _ = learner.init(jax.random.PRNGKey(0))
        expected = mlp.init_params(spec, jax.random.PRNGKey(0))
        assert jax.tree.structure(params) == jax.tree.structure(expected)
    assert not isinstance(object(), NetworkLearner)
