"""Learners: the losses and their weighting, training progress, and a single compile."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from lc_cfr.learn import api as learn_api
from lc_cfr.learn import learner as lr
from lc_cfr.memory import reservoir as rv
from lc_cfr.nets import mlp

E, A, N = 8, 4, 256
SPEC = mlp.NetworkSpec(input_size=E, num_actions=A, hidden_size=32, num_layers=2)
LN2 = float(np.log(2.0))


def _dataset(kind, seed=0):
    """A fixed synthetic memory of N rows from iterations 1..4: smooth targets."""
    rng = np.random.default_rng(seed)
    info = rng.integers(0, 5, size=(N, E)).astype(np.float32) / 4
    mask = rng.random((N, A)) < 0.7
    mask[np.arange(N), rng.integers(0, A, N)] = True  # at least one legal action
    projection = rng.normal(size=(E, A)).astype(np.float32)
    if kind == "advantage":
        target = np.tanh(info @ projection) * mask
    else:
        target = np.asarray(mlp.masked_policy(jnp.asarray(2 * info @ projection), mask))
    memory = rv.reservoir_init(capacity=N, encoding_size=E, num_actions=A)
    quarter = N // 4
    for t in range(4):
        rows = slice(t * quarter, (t + 1) * quarter)
        valid = np.ones(quarter, bool)
        memory = rv.reservoir_add(
            memory, jax.random.key(t), info[rows], mask[rows], target[rows], t + 1, valid
        )
    return memory


def _learner(kind, *, num_updates, weighting="lcfr", lr_schedule="constant"):
    optimizer = lr.make_optimizer(learning_rate=3e-3, weight_decay=1e-4, grad_clip=1.0)
    return lr.Learner(
        SPEC,
        kind=kind,
        optimizer=optimizer,
        batch_size=64,
        num_updates=num_updates,
        weighting=weighting,
        lr_schedule=lr_schedule,
    )


def _full_batch(memory):
    info = memory.info.astype(jnp.float32)
    return rv.Batch(info, memory.mask, memory.target, memory.iteration)


@pytest.mark.parametrize("kind", ["advantage", "strategy"])
def test_loss_goes_down(kind):
    memory = _dataset(kind)
    learner = _learner(kind, num_updates=300)
    params, opt_state = learner.init(jax.random.key(0))
    batch = _full_batch(memory)
    floor = 0.0  # the smallest possible loss
    if kind == "strategy":  # cross-entropy >= the weighted entropy of the targets
        weight = lr.sample_weights(batch.iteration, mode="lcfr")
        exact_logits = jnp.log(jnp.where(batch.mask, batch.target, 1.0))
        floor = float(lr.strategy_loss(exact_logits, batch.mask, batch.target, weight))
    before = float(learner.loss(params, batch)) - floor
    params, opt_state, metrics = learner.train(params, opt_state, memory, jax.random.key(1))
    after = float(learner.loss(params, batch)) - floor
    assert set(metrics) == {"loss_first", "loss_last", "loss_mean"}
    chex.assert_tree_all_finite(metrics)
    assert metrics["loss_last"] < metrics["loss_first"]
    assert after < 0.2 * before, (before, after)


def _hand_built_batch():
    """Two samples, iterations 1 and 3, with losses worked out by hand."""
    raw = jnp.array([[1.0, 2.0, 9.0], [np.log(3.0), 0.0, 0.0]], jnp.float32)
    mask = jnp.array([[True, True, False], [True, False, True]])
    iteration = jnp.array([1, 3], jnp.int32)
    return raw, mask, iteration


def test_advantage_loss_weighting_by_hand():
    raw, mask, iteration = _hand_built_batch()
    target = jnp.array([[0.0, 0.0, 5.0], [np.log(3.0) - 1.0, 7.0, 3.0]])
    # sample 0: errors (1, 2) -> mean 2.5; sample 1: errors (1, -3) -> mean 5.
    uniform = lr.advantage_loss(raw, mask, target, lr.sample_weights(iteration, mode="uniform"))
    lcfr = lr.advantage_loss(raw, mask, target, lr.sample_weights(iteration, mode="lcfr"))
    np.testing.assert_allclose(uniform, (2.5 + 5.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(lcfr, (1 * 2.5 + 3 * 5.0) / 4, rtol=1e-6)


def test_strategy_loss_weighting_by_hand():
    raw, mask, iteration = _hand_built_batch()
    raw = raw.at[0].set(jnp.array([0.0, 0.0, 9.0]))
    target = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.5, 1.0]])  # illegal entries ignored
    # sample 0: policy (1/2, 1/2) -> ln 2; sample 1: policy (3/4, 1/4) -> -ln(1/4) = 2 ln 2.
    uniform = lr.strategy_loss(raw, mask, target, lr.sample_weights(iteration, mode="uniform"))
    lcfr = lr.strategy_loss(raw, mask, target, lr.sample_weights(iteration, mode="lcfr"))
    np.testing.assert_allclose(uniform, 1.5 * LN2, rtol=1e-6)
    np.testing.assert_allclose(lcfr, (1 * LN2 + 3 * 2 * LN2) / 4, rtol=1e-6)


def test_learner_loss_uses_its_weighting():
    raw, mask, iteration = _hand_built_batch()
    target = jnp.array([[0.0, 0.0, 5.0], [np.log(3.0) - 1.0, 7.0, 3.0]])
    batch = rv.Batch(jnp.zeros((2, E)), mask, target, iteration)
    spec = mlp.NetworkSpec(input_size=E, num_actions=3, hidden_size=4, num_layers=1)
    params = mlp.init_params(spec, jax.random.key(0))
    params["output"] = {"kernel": jnp.zeros((4, 3)), "bias": jnp.zeros(3)}  # raw = 0
    losses = {}
    for mode in lr.WEIGHTING_MODES:
        optimizer = lr.make_optimizer(learning_rate=1e-3, weight_decay=0.0, grad_clip=0.0)
        learner = lr.Learner(
            spec,
            kind="advantage",
            optimizer=optimizer,
            batch_size=2,
            num_updates=1,
            weighting=mode,
        )
        losses[mode] = float(learner.loss(params, batch))
    # raw = 0: sample 0 errors (0, 0) -> 0; sample 1 errors (ln3 - 1, 3) -> mean m1.
    m1 = ((np.log(3.0) - 1.0) ** 2 + 9.0) / 2
    np.testing.assert_allclose(losses["uniform"], m1 / 2, rtol=1e-6)
    np.testing.assert_allclose(losses["lcfr"], 3 * m1 / 4, rtol=1e-6)
    np.testing.assert_allclose(losses["quadratic"], 9 * m1 / 10, rtol=1e-6)  # weights 1, 9


def test_strategy_loss_minimiser_is_the_weighted_average_policy():
    mask = jnp.array([[True, True, False, True]] * 2)
    target = jnp.array([[0.7, 0.3, 0.0, 0.0], [0.0, 0.2, 0.0, 0.8]])
    weight = jnp.array([1.0, 3.0])
    average = (1 * target[0] + 3 * target[1]) / 4
    logits = jnp.log(jnp.where(mask[0], average, 1.0))

    def loss(z):
        return lr.strategy_loss(jnp.broadcast_to(z, (2, 4)), mask, target, weight)

    np.testing.assert_allclose(jax.grad(loss)(logits), 0.0, atol=1e-6)
    assert loss(logits) < loss(logits + jnp.array([0.1, -0.1, 0.0, 0.0]))


def _refusing_learner(optimizer, **changes):
    kwargs = dict(kind="advantage", batch_size=4, num_updates=2, weighting="lcfr") | changes
    return lr.Learner(SPEC, optimizer=optimizer, **kwargs)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda _: lr.sample_weights(jnp.ones(2, jnp.int32), mode="linear"),
            "training_weighting.mode",
        ),
        (lambda opt: _refusing_learner(opt, weighting="linear"), "training_weighting.mode"),
        (lambda opt: _refusing_learner(opt, kind="value"), "kind"),
        (
            lambda opt: _refusing_learner(opt, kind="strategy", batch_size=0),
            "optimization.strategy_batch_size",
        ),
        (
            lambda _: lr.make_optimizer(learning_rate=0.0, weight_decay=0.0, grad_clip=1.0),
            "optimization.learning_rate",
        ),
    ],
    ids=["sample_weights_mode", "learner_weighting", "kind", "batch_size", "learning_rate"],
)
def test_unknown_weighting_and_kind_name_the_field(call, match):
    optimizer = lr.make_optimizer(learning_rate=1e-3, weight_decay=0.0, grad_clip=1.0)
    with pytest.raises(ValueError, match=match):
        call(optimizer)


def test_grad_clip_limits_the_global_norm():
    params = {"w": jnp.zeros(3)}
    grads = {"w": jnp.full(3, 10.0)}
    steps = {}
    for clip in (0.0, 1e-10):
        optimizer = lr.make_optimizer(learning_rate=0.1, weight_decay=0.0, grad_clip=clip)
        updates, _ = optimizer.update(grads, optimizer.init(params), params)
        steps[clip] = float(jnp.max(jnp.abs(updates["w"])))
    np.testing.assert_allclose(steps[0.0], 0.1, rtol=1e-3)  # Adam's first step: lr * sign
    assert steps[1e-10] < 0.01  # clipped to ~1e-10, the update drowns in Adam's epsilon
    assert isinstance(
        lr.make_optimizer(learning_rate=0.1, weight_decay=0.0, grad_clip=0.0),
        optax.GradientTransformation,
    )


def test_training_compiles_once():
    learner = _learner("advantage", num_updates=3)
    memory = _dataset("advantage")
    params, opt_state = learner.init(jax.random.key(0))
    params, opt_state, _ = learner.train(params, opt_state, memory, jax.random.key(1))
    more = rv.reservoir_add(
        memory,
        jax.random.key(9),
        np.ones((4, E)),
        np.ones((4, A), bool),
        np.ones((4, A)),
        5,
        np.ones(4, bool),
    )
    params, opt_state, _ = learner.train(params, opt_state, more, jax.random.key(2))
    params, opt_state, metrics = learner.train(params, opt_state, memory, jax.random.key(3))
    assert learner.trace_count == 1
    assert learner._train._cache_size() == 1
    chex.assert_tree_all_finite((params, metrics))


def test_updates_for_makes_passes_in_whole_chunks():
    assert learn_api.updates_for(10_000, floor=256, epochs=0.0, batch_size=512) == 256
    # 2 passes over 100k rows in batches of 512 = 391 updates -> 2 chunks of 256
    assert learn_api.updates_for(100_000, floor=256, epochs=2.0, batch_size=512) == 512
    assert learn_api.updates_for(10, floor=256, epochs=2.0, batch_size=512) == 256  # the floor
    assert learn_api.updates_for(131_072, floor=256, epochs=1.0, batch_size=512) == 256
    assert learn_api.updates_for(131_073, floor=256, epochs=1.0, batch_size=512) == 512


def test_training_in_chunks_equals_the_same_calls_by_hand():
    learner = _learner("advantage", num_updates=4)
    memory = _dataset("advantage")
    start = learner.init(jax.random.key(0))
    key = jax.random.key(5)
    params, opt_state, losses = learn_api.train_in_chunks(learner, *start, memory, key, 12)
    by_hand = learner.train(*start, memory, key)
    firsts = [by_hand[2]["loss_first"]]
    means = [by_hand[2]["loss_mean"]]
    for c in (1, 2):
        by_hand = learner.train(*by_hand[:2], memory, jax.random.fold_in(key, c))
        means.append(by_hand[2]["loss_mean"])
    chex.assert_trees_all_equal((params, opt_state), by_hand[:2])
    assert losses["loss_first"] == firsts[0] and losses["loss_last"] == by_hand[2]["loss_last"]
    np.testing.assert_allclose(losses["loss_mean"], np.mean(means), rtol=1e-6)
    # one chunk is exactly one train call; anything but whole chunks is refused
    one = learn_api.train_in_chunks(learner, *start, memory, key, 4)
    chex.assert_trees_all_equal(one, learner.train(*start, memory, key))
    with pytest.raises(ValueError, match="multiple of 4"):
        learn_api.train_in_chunks(learner, *start, memory, key, 6)
    assert learner.trace_count == 1


def test_a_cosine_rate_decays_over_the_whole_fit_across_its_chunks():
    # the factor: 1 at the first update, a half cosine, 0 from the fit's end on
    scales = [float(lr.cosine_scale(jnp.int32(k), jnp.int32(4))) for k in range(6)]
    expected = [(1 + np.cos(np.pi * k / 4)) / 2 for k in range(4)] + [0.0, 0.0]
    np.testing.assert_allclose(scales, expected, atol=1e-7)
    memory = _dataset("advantage")
    key = jax.random.key(5)

    def moved(a, b):
        return float(optax.tree.norm(jax.tree.map(jnp.subtract, a, b)))

    ratios = {}
    for schedule in ("constant", "cosine"):
        learner = _learner("advantage", num_updates=4, lr_schedule=schedule)
        start = learner.init(jax.random.key(0))
        fit = learn_api.train_in_chunks(learner, *start, memory, key, 12)
        # by hand: chunk c is updates 4c..4c+3 of the fit's 12
        steps = [start]
        for c in range(3):
            chunk_key = key if c == 0 else jax.random.fold_in(key, c)
            steps.append(learner.train(*steps[-1][:2], memory, chunk_key, lr.FitSpan(4 * c, 12)))
        chex.assert_trees_all_equal(fit[:2], steps[-1][:2])
        ratios[schedule] = moved(steps[3][0], steps[2][0]) / moved(steps[1][0], steps[0][0])
        assert learner.trace_count == 1  # a span is traced, not compiled in
    # the fit's last chunk moves the network a small part of what its first did (a span
    # restarted at every chunk would move it as far), a constant rate about as far
    assert ratios["cosine"] < 0.3 < 0.6 < ratios["constant"], ratios


def test_the_average_strategy_has_its_own_weighting():
    """training_weighting.average_mode weighs the strategy network's samples and leaves
    the advantage networks' to training_weighting.mode; 'same' follows mode."""
    from configs.default import get_config
    from lc_cfr.train.setup import learner_from_config, training_from_config

    config = get_config("smoke")
    config.training_weighting.mode = "quadratic"
    config.training_weighting.average_mode = "uniform"
    spec = mlp.NetworkSpec(input_size=E, num_actions=A, hidden_size=8, num_layers=1)
    assert learner_from_config(config, spec, "advantage").weighting == "quadratic"
    assert learner_from_config(config, spec, "strategy").weighting == "uniform"
    assert training_from_config(config).average_weighting == "uniform"
    config.training_weighting.average_mode = "same"
    assert learner_from_config(config, spec, "strategy").weighting == "quadratic"
    assert training_from_config(config).average_weighting == "quadratic"
    with pytest.raises(ValueError, match="training_weighting.average_mode"):
        lr.average_weighting("lcfr", "linear")
