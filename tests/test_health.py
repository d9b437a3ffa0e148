"""Non-finite training is caught: nothing NaN is learnt from, checkpointed or evaluated.

`optimization.non_finite='stop'` stops the run before anything of the bad iteration is
saved; `skip` drops the update (or the samples) and counts it. The failures are planted
(a learner that returns NaN parameters, a backend that returns a NaN target) so that the
tests do not depend on how fast a given learning rate diverges; one CLI run diverges for
real.
"""

import json
import pathlib
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_helpers import cli_env, smoke_main
from config_helpers import default_config

from lc_cfr.eval import evaluate
from lc_cfr.nets import mlp
from lc_cfr.train import Trainer, checkpoint
from lc_cfr.train.health import NonFiniteError
from lc_cfr.train.saved_networks import load_saved_networks

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _config(iterations: int, mode: str = "stop"):
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.checkpoint.save_every = 1
    config.evaluation.eval_every = 0
    config.run.max_iterations = iterations
    config.optimization.non_finite = mode
    return config


def _poison_learner(trainer: Trainer) -> None:
    """The trainer's advantage learner returns NaN parameters."""
    train = trainer.advantage_learner.train

    def poisoned(params, opt_state, memory, key, span=None):
        params, opt_state, losses = train(params, opt_state, memory, key, span)
        return jax.tree.map(lambda x: jnp.full_like(x, jnp.nan), params), opt_state, losses

    trainer.advantage_learner.train = poisoned


def _finite_checkpoint(workdir) -> int:
    saved = load_saved_networks(workdir)
    assert mlp.all_finite((saved.advantage, saved.strategy))
    return saved.iteration


def test_stop_keeps_the_last_finite_checkpoint(tmp_path):
    Trainer(_config(1), tmp_path).run()
    trainer = Trainer(_config(2), tmp_path)
    _poison_learner(trainer)  # from iteration 2 on
    with pytest.raises(NonFiniteError, match="iteration 2: the advantage network of player 0"):
        trainer.run()
    assert _finite_checkpoint(tmp_path) == 1  # nothing of iteration 2 was written
    rows = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len([row for row in rows if row.strip()]) == 1


def test_skip_drops_the_update_and_counts_it(tmp_path):
    Trainer(_config(1, "skip"), tmp_path).run()
    before = load_saved_networks(tmp_path)
    trainer = Trainer(_config(2, "skip"), tmp_path)
    _poison_learner(trainer)  # from iteration 2 on
    state = trainer.run()
    assert state.iteration == 2 and _finite_checkpoint(tmp_path) == 2
    for new, old in zip(state.advantage_params, before.advantage, strict=True):
        for a, b in zip(jax.tree.leaves(new), jax.tree.leaves(old), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    last = load_saved_networks(tmp_path).config  # the run goes on with the same config
    assert last.optimization.non_finite == "skip"

    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["health/skipped_updates"] == 2 and row["health/non_finite_samples"] == 0


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_non_finite_targets_are_refused_or_dropped(tmp_path, mode):
    trainer = Trainer(_config(1, mode), tmp_path)
    traverse = trainer.backend.traverse

    def poisoned(networks, **kwargs):
        samples, stats = traverse(networks, **kwargs)
        first = int(jnp.argmax(samples.advantage_valid))
        target = samples.advantage_target.at[first, 0].set(jnp.inf)
        return samples._replace(advantage_target=target), stats

    trainer.backend.traverse = poisoned
    if mode == "stop":
        with pytest.raises(NonFiniteError, match="advantage samples of player 0"):
            trainer.run()
        assert checkpoint.latest_step(tmp_path / "checkpoints") is None
        return
    trainer.run()

    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert row["health/non_finite_samples"] == 2  # one per player
    assert np.isfinite(row["loss/advantage_p0"]) and _finite_checkpoint(tmp_path) == 1


def test_evaluation_refuses_non_finite_networks():
    config = _config(1)
    trainer = Trainer(config, "/nonexistent/never-written")
    params = mlp.init_params(trainer.spec, jax.random.PRNGKey(0))
    bad = jax.tree.map(lambda x: x.at[(0,) * x.ndim].set(jnp.nan), params)
    with pytest.raises(ValueError, match="average_strategy view's networks hold non-finite"):
        evaluate(
            trainer.rules, trainer.spec, {"average_strategy": bad}, opponents=["random"], games=2
        )


@pytest.mark.slow
def test_a_diverging_cli_run_stops_with_one_line(tmp_path):
    env = cli_env()
    command = smoke_main(
        tmp_path,
        "--config.run.max_iterations=2",
        "--config.evaluation.eval_every=0",
        "--config.optimization.learning_rate=1e30",
        "--config.optimization.grad_clip=0",
    )
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("lc_cfr.main: error")]
    assert len(errors) == 1 and "non-finite" in errors[0], result.stderr[-2000:]
    assert checkpoint.latest_step(tmp_path / "checkpoints") is None
