"""network.compute_dtype: bfloat16 forwards and training on the JAX and the torch path.

bfloat16 keeps 8 significant bits (a relative rounding of at most 2^-9 ~ 0.2% per value),
so every comparison with float32 is a tolerance relative to the outputs' scale, never to
rounding. The tolerances (CPU; measured on the networks below, 2-4 hidden layers of
32-64 units, encodings in quarters as the game's):

* forwards, bfloat16 against float32 on either path: FORWARD_REL = 4e-2 of the largest
  output (measured <= 1.1e-2 over 4 activations x 3 seeds: a few roundings of 2^-9
  through the layers);
* forwards, JAX bfloat16 against torch bfloat16: FORWARD_REL as well. With relu and tanh
  the two agree exactly here; gelu and silu are evaluated differently in bfloat16 by XLA
  and torch (measured <= 1.4e-2), no closer to each other than to float32;
* whole learners, JAX bfloat16 against torch bfloat16, after K = 20 AdamW steps on the
  same batches from the same parameters: losses LEARNER_LOSS_RTOL = 1e-2 relative
  (measured <= 3.7e-4) and parameters LEARNER_PARAM_ATOL = 1e-2 (measured <= 2.2e-3
  while training moved them ~2.1e-2, K steps of Adam's normalised size lr). Adam divides
  by sqrt(nu), so a rounding difference in a small gradient becomes a step of full size:
  the bound is 5000x float32's (tests/test_torch_parity.py) and still under the distance
  trained;
* training: K bfloat16 steps lower the loss on both paths, and end within
  TRAIN_LOSS_RTOL = 2e-2 of the float32 run's loss (measured <= 4.3e-4).
"""

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from config_helpers import default_config

from lc_cfr.learn import learner as lr
from lc_cfr.learn import torch_learner as tl
from lc_cfr.learn.torch_adapter import TrainerTorchLearner
from lc_cfr.memory import reservoir as rv
from lc_cfr.nets import mlp
from lc_cfr.nets import torch_mlp as tn
from lc_cfr.train import Trainer
from lc_cfr.train.saved_networks import load_saved_networks

E, A, N = 24, 6, 512
K, BATCH = 20, 64
FORWARD_REL = 4e-2  # bfloat16 forwards: max |difference| / max |float32 output|
LEARNER_LOSS_RTOL, LEARNER_PARAM_ATOL = 1e-2, 1e-2  # JAX vs torch bfloat16 learners
TRAIN_LOSS_RTOL = 2e-2  # bfloat16 training's last loss against float32's
HYPER = dict(learning_rate=1e-3, weight_decay=0.0, grad_clip=1.0)


def _specs(**kwargs):
    f32 = mlp.NetworkSpec(**{"input_size": E, "num_actions": A, **kwargs})
    return f32, dataclasses.replace(f32, compute_dtype="bfloat16")


def _encodings(rows, seed=0, size=E):
    return (np.random.default_rng(seed).integers(0, 5, (rows, size)) / 4).astype(np.float32)


def _close(actual, expected, rel=FORWARD_REL):
    actual, expected = np.asarray(actual), np.asarray(expected)
    scale = float(np.abs(expected).max())
    assert float(np.abs(actual - expected).max()) <= rel * scale, (
        float(np.abs(actual - expected).max()) / scale
    )


def test_default_is_float32_and_the_dtypes_are_told_apart():
    assert mlp.NetworkSpec(4, 2, 8, 1).compute_dtype == "float32"
    f32, b16 = _specs(hidden_size=8, num_layers=1)
    assert f32 != b16 and hash(f32) != hash(b16)  # jitted functions tell them apart


@pytest.mark.parametrize("bad", ["float16", "bf16", None])
def test_only_known_dtypes_pass(bad):
    with pytest.raises(ValueError, match="network.compute_dtype"):
        mlp.NetworkSpec(4, 2, 8, 1, compute_dtype=bad)


@pytest.mark.parametrize("activation", sorted(mlp.ACTIVATIONS))
def test_jax_bfloat16_forward_is_float32_within_tolerance(activation):
    f32, b16 = _specs(hidden_size=64, num_layers=3, activation=activation)
    params = mlp.init_params(b16, jax.random.key(1))
    # the parameters stay float32 and are the float32 network's (same key, same values)
    chex.assert_trees_all_equal(params, mlp.init_params(f32, jax.random.key(1)))
    assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
    x = _encodings(256)
    low = mlp.apply(b16, params, x)
    assert low.dtype == jnp.float32
    high = mlp.apply(f32, params, x)
    assert not np.array_equal(low, high)  # really computed in bfloat16
    _close(low, high)
    # the matmuls really run in bfloat16 (XLA may widen them on the CPU; the roundings stay)
    text = jax.jit(lambda p, x: mlp.apply(b16, p, x)).lower(params, x).as_text()
    assert "bf16" in text


def test_jax_bfloat16_card_head_and_dropped_block():
    n = 3  # the card head reads the hand; own_known_input=False drops columns 7N..8N
    f32 = mlp.NetworkSpec(
        input_size=8 * n + 5,
        num_actions=2 * 2 + 3,
        hidden_size=32,
        num_layers=2,
        head="card",
        n_cards=n,
        hand_size=2,
        own_known_input=False,
    )
    b16 = dataclasses.replace(f32, compute_dtype="bfloat16")
    params = mlp.init_params(b16, jax.random.key(2))
    x = _encodings(128, seed=3, size=f32.input_size)
    _close(mlp.apply(b16, params, x), mlp.apply(f32, params, x))


@pytest.mark.parametrize("activation", sorted(mlp.ACTIVATIONS))
def test_torch_bfloat16_forward_matches_float32_and_jax(activation):
    f32, b16 = _specs(hidden_size=64, num_layers=3, activation=activation)
    params = mlp.init_params(f32, jax.random.key(4))
    layout = mlp.to_layout(f32, params)
    model32, model16 = tn.from_layout(f32, layout), tn.from_layout(b16, layout)
    x = _encodings(256, seed=5)
    with torch.no_grad():
        high = model32(torch.from_numpy(x))
        low = model16(torch.from_numpy(x))
        # the parameters stay float32; only the forward computes in bfloat16
        assert {p.dtype for p in model16.parameters()} == {torch.float32}
        assert low.dtype == torch.float32
        # a caller's autocast (run.use_amp) gives a float32 spec the same numbers
        with torch.autocast("cpu", dtype=torch.bfloat16):
            amp = model32(torch.from_numpy(x))
    assert amp.dtype == torch.float32
    assert not torch.equal(low, high)
    _close(low.numpy(), high.numpy())
    _close(amp.numpy(), low.numpy(), rel=1e-6)
    _close(low.numpy(), mlp.apply(b16, params, x))


def test_torch_backends_netset_computes_in_the_spec_dtype():
    """The torch traversal backends' forwards (NetSet): a bfloat16 spec computes in
    bfloat16 without run.use_amp, and use_amp on a float32 spec gives the same numbers."""
    from lc_cfr.traversal.torch.weights import NetSet, WeightBoard

    f32, b16 = _specs(hidden_size=32, num_layers=2)
    layouts = [mlp.to_layout(f32, mlp.init_params(f32, jax.random.key(s))) for s in range(2)]
    ids = np.array([0, 0, 1, 1, 1])  # one run per net: the batches the models see below
    x = _encodings(len(ids), seed=6)
    outs = {}
    for name, spec, use_amp in (("f32", f32, False), ("b16", b16, False), ("amp", f32, True)):
        with WeightBoard.create(spec, len(layouts)) as board:
            board.publish(layouts)
            outs[name] = NetSet(spec, board, use_amp=use_amp).forward(ids, x)
    with torch.no_grad():
        rows = [torch.from_numpy(x[:2]), torch.from_numpy(x[2:])]
        expected = torch.cat(
            [tn.from_layout(b16, lay)(r) for lay, r in zip(layouts, rows, strict=True)]
        )
    chex.assert_trees_all_close(outs["b16"], expected.numpy(), rtol=1e-6, atol=1e-6)
    chex.assert_trees_all_close(outs["amp"], outs["b16"], rtol=1e-6, atol=1e-6)
    assert not np.array_equal(outs["b16"], outs["f32"])
    _close(outs["b16"], outs["f32"])


def _memory(kind, seed=0):
    """N synthetic rows from iteration 3: smooth targets of quartered encodings."""
    rng = np.random.default_rng(seed)
    info = _encodings(N, seed=seed + 1)
    mask = rng.random((N, A)) < 0.7
    mask[:, 0] = True
    projection = rng.normal(size=(E, A)).astype(np.float32)
    if kind == "advantage":
        target = np.tanh(info @ projection) * mask
    else:
        target = np.asarray(mlp.masked_policy(jnp.asarray(2 * info @ projection), mask))
    memory = rv.reservoir_init(capacity=N, encoding_size=E, num_actions=A)
    target = target.astype(np.float32)
    return rv.reservoir_add(memory, jax.random.key(seed), info, mask, target, 3, np.ones(N, bool))


def _train_both(spec, kind, memory):
    """(params, metrics) of the optax and the torch learner: same start, same batches."""
    sizes = dict(kind=kind, batch_size=BATCH, num_updates=K, weighting="lcfr")
    learners = (
        lr.Learner(spec, optimizer=lr.make_optimizer(**HYPER), **sizes),
        TrainerTorchLearner(tl.TorchLearner(spec, **HYPER, **sizes)),
    )
    start = mlp.init_params(spec, jax.random.key(0))
    out = []
    for learner in learners:
        _, opt_state = learner.init(jax.random.key(0))
        params, _, metrics = learner.train(start, opt_state, memory, jax.random.key(5))
        out.append((mlp.to_layout(spec, params), {k: float(v) for k, v in metrics.items()}))
    return mlp.to_layout(spec, start), out


@pytest.mark.parametrize("kind", ["advantage", "strategy"])
def test_bfloat16_learners_train_and_agree(kind):
    f32, b16 = _specs(hidden_size=32, num_layers=2, activation="gelu")
    memory = _memory(kind)
    start, ((jax16, jax_m), (torch16, torch_m)) = _train_both(b16, kind, memory)
    _, ((jax32, jax32_m), _) = _train_both(f32, kind, memory)
    for metrics in (jax_m, torch_m):
        assert metrics["loss_last"] < metrics["loss_first"]  # bfloat16 training learns
        assert metrics["loss_last"] == pytest.approx(jax32_m["loss_last"], rel=TRAIN_LOSS_RTOL)
    chex.assert_trees_all_close(torch_m, jax_m, rtol=LEARNER_LOSS_RTOL)
    moved = max(np.abs(jax16[k] - start[k]).max() for k in start)
    assert moved > LEARNER_PARAM_ATOL  # the bound lies inside the distance trained
    chex.assert_trees_all_close(torch16, jax16, rtol=0, atol=LEARNER_PARAM_ATOL)
    # float32 parameters throughout: the layouts hold float32 and differ from float32's run
    assert {v.dtype for v in jax16.values()} == {np.dtype(np.float32)}
    assert any(not np.array_equal(jax16[k], jax32[k]) for k in jax16)


def test_use_amp_updates_see_the_previous_updates():
    """run.use_amp's autocast spans a whole call: every forward must read the weights of
    the step before, not a cached bfloat16 copy of the call's first weights."""
    f32, b16 = _specs(hidden_size=32, num_layers=2, activation="gelu")
    memory = _memory("advantage", seed=7)
    sizes = dict(kind="advantage", batch_size=BATCH, num_updates=K, weighting="lcfr")
    runs = {}
    for name, spec, use_amp in (("amp", f32, True), ("spec", b16, False)):
        learner = TrainerTorchLearner(tl.TorchLearner(spec, **HYPER, **sizes), use_amp=use_amp)
        params, opt_state = learner.init(jax.random.key(0))
        runs[name] = learner.train(params, opt_state, memory, jax.random.key(1))[2]
    assert runs["amp"]["loss_last"] < 0.8 * runs["amp"]["loss_first"]
    chex.assert_trees_all_close(runs["amp"], runs["spec"], rtol=1e-6)


def _smoke_config(**overrides):
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.checkpoint.save_every = 0
    for dotted, value in overrides.items():
        block, field = dotted.split(".")
        config[block][field] = value
    return config


def test_trainer_runs_in_bfloat16_and_old_runs_load(tmp_path):
    with pytest.raises(ValueError, match="network.compute_dtype"):
        Trainer(_smoke_config(**{"network.compute_dtype": "float16"}), tmp_path / "bad")
    config = _smoke_config(**{"run.max_iterations": 1, "network.compute_dtype": "bfloat16"})
    config.evaluation.eval_every = 1
    state = Trainer(config, tmp_path / "run").run()
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    row = json.loads(lines[-1])
    assert np.isfinite(row["loss/advantage_p0"]) and np.isfinite(row["loss/strategy"])
    assert "eval/current/random/margin_mean" in row
    assert state.strategy_params["output"]["kernel"].dtype == jnp.float32
    assert load_saved_networks(tmp_path / "run").spec.compute_dtype == "bfloat16"
    # a run saved before the field existed computed in float32, loads and resumes so
    path = tmp_path / "run" / "config.json"
    saved = json.loads(path.read_text())
    del saved["network"]["compute_dtype"]
    path.write_text(json.dumps(saved))
    assert load_saved_networks(tmp_path / "run").spec.compute_dtype == "float32"
    resumed = Trainer(_smoke_config(**{"run.max_iterations": 2}), tmp_path / "run").run()
    assert resumed.iteration == 2
