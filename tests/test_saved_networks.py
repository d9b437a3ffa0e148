"""Loading a saved run's networks without a trainer: the trainer's arrays, no torch, errors."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import chex
import pytest
from config_helpers import default_config

from lc_cfr.train import Trainer
from lc_cfr.train.saved_networks import CheckpointNotFoundError, load_saved_networks

ROOT = pathlib.Path(__file__).resolve().parent.parent

ENV = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))


def _torch_config():
    """One iteration of the smoke variant with torch everywhere a run can use it, and
    SD-CFR snapshots, so that every array the loader reads is there."""
    config = default_config.get_config("smoke,classic")  # modes every backend has
    config.logging.tensorboard = False
    config.run.max_iterations = 1
    config.evaluation.eval_every = 0
    config.traversal.backend = "recursive"
    config.traversal.num_workers = 0  # in-process: no worker pool for a test this small
    config.optimization.learner = "torch"
    config.sd_cfr.snapshots = 2
    config.traversal.traversals_per_player = 4  # what is saved, not what is learnt, matters
    config.optimization.advantage_updates = 2
    config.optimization.strategy_updates = 2
    return config


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    pytest.importorskip("torch")
    workdir = tmp_path_factory.mktemp("torch_run")
    Trainer(_torch_config(), workdir).run()
    return workdir


def test_torch_run_loads_the_trainers_networks(torch_run):
    saved = load_saved_networks(torch_run)
    trainer = Trainer(_torch_config(), torch_run)
    state, _ = trainer.restore()  # the trainer's whole state, memories included
    assert saved.iteration == state.iteration == 1
    assert saved.rules == trainer.rules and saved.spec == trainer.spec
    chex.assert_trees_all_equal(saved.advantage, tuple(state.advantage_params))
    chex.assert_trees_all_equal(saved.strategy, state.strategy_params)
    assert saved.snapshots.count == state.sd_count == 1
    chex.assert_trees_all_equal(saved.snapshots.advantage, state.sd_advantage)
    assert set(saved.policy_views()) == {"average_strategy", "current", "sd_cfr"}
    assert saved.config.traversal.backend == "recursive"


def test_a_gpu_torch_run_loads_and_evaluates_without_torch(torch_run, tmp_path):
    """The config names a GPU and a worker pool: neither is built, torch never imported."""
    workdir = tmp_path / "gpu_run"
    shutil.copytree(torch_run, workdir)
    config = json.loads((workdir / "config.json").read_text())
    config["run"]["device"] = "cuda:0"
    config["traversal"]["num_workers"] = 4
    (workdir / "config.json").write_text(json.dumps(config))
    script = textwrap.dedent(
        f"""
        import sys
        from lc_cfr import evaluate, play
        from lc_cfr.terminal_game import load_agent
        from lc_cfr.train.saved_networks import load_saved_networks

        workdir = {str(workdir)!r}
        assert load_saved_networks(workdir).snapshots.count == 1
        assert load_agent(workdir).iteration == 1
        request = evaluate.parse_request(
            workdir=workdir, opponents="random", games=2, lanes=2, views="average_strategy"
        )
        document = evaluate.run_request(request)
        assert document["checkpoint"] == 1, document
        assert "torch" not in sys.modules, "torch was imported"
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_errors_name_the_file(torch_run, tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_saved_networks(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match=r"config\.json is missing"):
        load_saved_networks(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"cannot read .*config\.json"):
        load_saved_networks(tmp_path)
    (tmp_path / "config.json").write_text((torch_run / "config.json").read_text())
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint in .*checkpoints yet"):
        load_saved_networks(tmp_path)
    with pytest.raises(CheckpointNotFoundError, match="no checkpoint of iteration 5"):
        load_saved_networks(torch_run, 5)

    wider = tmp_path / "wider"
    shutil.copytree(torch_run, wider)
    config = json.loads((wider / "config.json").read_text())
    config["network"]["hidden_size"] = 48  # not the checkpoint's width
    (wider / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"step_00000001 does not match .*config\.json"):
        load_saved_networks(wider)


def test_an_exported_agent_plays_as_its_run_and_is_never_resumed(torch_run, tmp_path):
    from lc_cfr.export import export_agent
    from lc_cfr.train.checkpoint import NetworksOnly

    with pytest.raises(CheckpointNotFoundError, match="no checkpoint of iteration 5"):
        export_agent(torch_run, tmp_path / "none", 5)
    assert not (tmp_path / "none").exists()
    agent = tmp_path / "agent"
    step = export_agent(torch_run, agent)
    assert not (step / "state").exists()
    saved, original = load_saved_networks(agent), load_saved_networks(torch_run)
    assert saved.iteration == original.iteration and saved.spec == original.spec
    chex.assert_trees_all_equal(saved.policy_views(), original.policy_views())
    before = {p: p.read_bytes() for p in agent.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match="--out: .*agent exists and is not empty"):
        export_agent(torch_run, agent)
    with pytest.raises(NetworksOnly, match="exported agent's networks only"):
        Trainer(_torch_config(), agent).run()
    assert {p: p.read_bytes() for p in agent.rglob("*") if p.is_file()} == before


def test_an_agent_exported_with_a_refitted_strategy_network(torch_run, tmp_path):
    """scripts/refit_strategy.py --export: the checkpoint's networks with the given
    average-strategy network in place of the run's, its checksums anew, the refit in meta."""
    import jax

    from lc_cfr.export import STRATEGY_REFIT, export_agent

    original = load_saved_networks(torch_run)
    refitted = jax.tree.map(lambda leaf: leaf + 1.0, original.strategy)
    with pytest.raises(ValueError, match="`strategy` and `refit` go together"):
        export_agent(torch_run, tmp_path / "bare", strategy=refitted)
    wrong = jax.tree.map(lambda leaf: leaf[..., :1], original.strategy)
    with pytest.raises(ValueError, match="not of .* shape"):
        export_agent(torch_run, tmp_path / "wrong", strategy=wrong, refit={"updates": 1})
    assert not (tmp_path / "bare").exists() and not (tmp_path / "wrong").exists()

    step = export_agent(torch_run, tmp_path / "agent", strategy=refitted, refit={"updates": 1})
    assert not (step / "state").exists()
    saved = load_saved_networks(tmp_path / "agent")  # read against the new checksums
    chex.assert_trees_all_equal(saved.strategy, refitted)
    chex.assert_trees_all_equal(saved.advantage, original.advantage)
    chex.assert_trees_all_equal(saved.snapshots, original.snapshots)
    assert saved.iteration == saved.strategy_iteration == original.iteration
    meta = json.loads((step / "meta" / "metadata").read_text())
    assert meta[STRATEGY_REFIT] == {"updates": 1} and meta["exported_from"] == str(torch_run)


def test_the_shipped_agent_loads_with_its_own_fit():
    """agents/default_2h (a two-hour default run exported with its average strategy fitted
    anew as the default fits it, agents/README.md): the networks read against their
    checksums, finite, and the average strategy is a fit of the checkpoint's own memory
    from scratch, uniform, its learning rate decayed."""
    from lc_cfr.export import STRATEGY_REFIT
    from lc_cfr.nets import mlp

    agent = ROOT / "agents" / "default_2h"
    saved = load_saved_networks(agent)
    assert saved.strategy_iteration == saved.iteration > 100
    assert mlp.all_finite(saved.strategy) and mlp.all_finite(saved.advantage)
    assert saved.config.traversal.expand_at == "path" and saved.rules.n_colors == 5
    (meta,) = agent.glob("checkpoints/step_*/meta/metadata")
    refit = json.loads(meta.read_text())[STRATEGY_REFIT]
    assert (refit["init"], refit["weighting"], refit["lr_schedule"]) == (
        "scratch",
        "uniform",
        "cosine",
    )


def test_the_shipped_4096_agent_loads_with_its_value_network():
    """agents/default_4096_2h (two hours of the 4096-traversal default, exported with its
    last checkpoint's networks and its value network, agents/README.md): read against
    their checksums, finite, the value network of the history features' shape, and the
    config is today's default but for its seed."""
    from lc_cfr.nets import mlp

    saved = load_saved_networks(ROOT / "agents" / "default_4096_2h")
    # the clock stopped the run at 103; its average strategy is iteration 100's fit
    assert (saved.iteration, saved.strategy_iteration) == (103, 100)
    assert saved.config.traversal.traversals_per_player == 4096 and saved.config.seed == 1
    assert mlp.all_finite(saved.strategy) and mlp.all_finite(saved.advantage)
    assert saved.value is not None and mlp.all_finite(saved.value)
