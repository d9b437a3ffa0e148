"""The trainer: CLI smoke run, exact resume, checkpoints, config errors, compile-once.

A resumed run's whole state is held to the uninterrupted run's with
`chex.assert_trees_all_equal` (bit-exact; a failure names the field).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import chex
import jax
import numpy as np
import pytest
from config_helpers import default_config

from lc_cfr.memory import reservoir
from lc_cfr.train import Trainer, checkpoint, keys
from lc_cfr.train.saved_networks import load_saved_networks
from lc_cfr.traversal import lockstep

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Metric keys every run writes (docs/design.md section 5.2).
SPEC_KEYS = [
    "iteration_seconds",
    "traversal_seconds",
    "advantage_train_seconds",
    "strategy_train_seconds",
    "memory_add_seconds",
    "checkpoint_seconds",
    "evaluation_seconds",
    "traversal/nodes",
    "traversal/policy_calls",
    "traversal/realised_batch_size",
    "traversal/terminals",
    "traversal/cutoffs",
    "traversal/truncations",
    "traversal/mean_endpoint_depth",
    "traversal/truncated_share",
    "traversal/path_ends_d9",
    "targets/turn_p90",
    "strategy_samples/turn_max",
    "loss/advantage_p0",
    "loss/advantage_p1",
    "loss/strategy",
    "memory/advantage_p0_fill",
    "memory/strategy_fill",
]
TIMING = {k for k in SPEC_KEYS if k.endswith("_seconds")} | {"traversal/nodes_per_second"}


def smoke_config(**overrides):
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.checkpoint.save_every = 0
    for dotted, value in overrides.items():
        node = config
        *path, last = dotted.split(".")
        for part in path:
            node = node[part]
        node[last] = value
    return config


def _rows(workdir):
    lines = (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _comparable(row):
    timing = ("seconds", "per_second")
    return {k: v for k, v in row.items() if k not in TIMING and not k.endswith(timing)}


def _assert_target_anatomy(row):
    """The row's target anatomy (lc_cfr.train.anatomy) covers its advantage samples.
    Each sampling mode's smoke run checks it: outcome sampling, external sampling at the
    root and at a sampled decision each record their samples elsewhere in the game."""
    assert row["targets/samples"] == row["traversal/advantage_samples"] > 0
    shares = [row[f"targets/p{k}_share"] for k in range(4)]
    assert sum(shares) == pytest.approx(1.0)
    assert 0.0 <= row["targets/zero_fraction"] <= 1.0 and row["targets/variance"] >= 0


@pytest.mark.slow
def test_cli_smoke_run_writes_every_spec_key_and_resumes(tmp_path):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [
        sys.executable,
        "-m",
        "lc_cfr.main",
        "--config=configs/default.py:smoke",
        f"--workdir={tmp_path}",
        "--config.run.max_iterations=2",
    ]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    rows = _rows(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2]
    for key in SPEC_KEYS:
        assert key in rows[-1], key
    assert rows[-1]["traversal/nodes"] > 0
    assert (tmp_path / "config.json").exists() and list((tmp_path / "tensorboard").iterdir())
    command[-1] = "--config.run.max_iterations=3"
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    rows = _rows(tmp_path)
    assert [r["iteration"] for r in rows] == [1, 2, 3]
    # the smoke preset evaluates both policy views at iteration 3
    for view in ("average_strategy", "current"):
        for metric in ("win_rate", "margin_mean", "margin_stderr", "truncation_rate"):
            assert f"eval/{view}/random/{metric}" in rows[-1]
    assert rows[-1]["evaluation_seconds"] > 0 and rows[0]["evaluation_seconds"] < 0.01
    bad = subprocess.run(
        command + ["--config.traversal.backend=nope"], cwd=ROOT, env=env, capture_output=True
    )
    assert (
        bad.returncode != 0
        and b"traversal.backend must be one of ['interleaved', 'jax', 'recursive', 'server']"
        in bad.stderr
    )


def test_resumed_run_equals_uninterrupted_run(tmp_path):
    whole = Trainer(smoke_config(**{"run.max_iterations": 3}), tmp_path / "whole").run()
    Trainer(smoke_config(**{"run.max_iterations": 2}), tmp_path / "split").run()
    split = Trainer(smoke_config(**{"run.max_iterations": 3}), tmp_path / "split").run()
    assert split.iteration == whole.iteration == 3
    chex.assert_trees_all_equal(whole, split)  # the whole state, bit for bit
    whole_rows, split_rows = _rows(tmp_path / "whole"), _rows(tmp_path / "split")
    assert [r["iteration"] for r in split_rows] == [1, 2, 3]
    for a, b in zip(whole_rows, split_rows, strict=True):
        assert _comparable(a) == _comparable(b)
    _assert_target_anatomy(whole_rows[-1])  # external sampling at a sampled decision


def test_value_network_state_resumes_exactly(tmp_path):
    """The outcome estimators' value network, optimiser and window memory are checkpointed."""
    overrides = {
        "traversal.sampling_mode": "outcome",
        "traversal.outcome_estimator": "baseline",
        "traversal.value_lambda": 0.5,
    }
    whole = Trainer(smoke_config(**{"run.max_iterations": 3, **overrides}), tmp_path / "w").run()
    Trainer(smoke_config(**{"run.max_iterations": 2, **overrides}), tmp_path / "s").run()
    split = Trainer(smoke_config(**{"run.max_iterations": 3, **overrides}), tmp_path / "s").run()
    assert whole.value_memory is not None and int(whole.value_memory.seen) > 0
    chex.assert_trees_all_equal(whole, split)  # the whole state, bit for bit
    row = _rows(tmp_path / "s")[-1]
    assert row["loss/value"] >= 0 and 0 < row["memory/value_fill"] <= 1
    _assert_target_anatomy(row)  # outcome sampling
    with pytest.raises(ValueError, match="optimization.learner"):
        Trainer(smoke_config(**{**overrides, "optimization.learner": "torch"}), tmp_path / "t")


# The default's estimator, which `plain` (and with it `smoke`, `small`, `tiny`) replaces.
DEFAULT_MODES = (
    "draws",
    "traversal.expand_at",
    "traversal.leaf_decisions",
    "network.strategic_features",
    "optimization.strategy_init",
    "optimization.strategy_train_when",
    "optimization.strategy_lr_schedule",
    "optimization.advantage_epochs",
)


def _modes(config) -> dict:
    """{dotted name: value} of DEFAULT_MODES in `config`."""
    modes = {}
    for name in DEFAULT_MODES:
        node = config
        for part in name.split("."):
            node = node[part]
        modes[name] = node
    return modes


def test_the_defaults_modes_train_at_smoke_size(tmp_path):
    """The default's estimator at smoke size (`smoke` runs `plain`'s): the value network
    learns from the leaves' samples (the same state as the outcome estimators',
    checkpointed alike) and the rows carry the leaves' guard figures."""
    overrides = _modes(default_config.get_config(""))
    overrides.update({"run.max_iterations": 2, "traversal.leaf_check_share": 0.5})
    overrides["optimization.advantage_lr_schedule"] = "cosine"  # the option, wired through
    trainer = Trainer(smoke_config(**overrides), tmp_path)
    assert trainer.options.draws == "playable" and trainer.options.expand_at == "path"
    assert trainer.advantage_learner.lr_schedule == "cosine"
    assert trainer.strategy_learner.lr_schedule == "cosine"  # the default's
    state = trainer.run()
    assert int(state.value_memory.seen) > 0
    row = _rows(tmp_path)[-1]
    assert row["loss/value"] >= 0 and row["traversal/leaves"] > 0
    assert -1 <= row["traversal/leaf_corr_p0"] <= 1 and row["traversal/leaf_rmse_p0"] >= 0
    # strategy_init=scratch: the network is the learner's fit, on the memory, of one
    # re-drawn from the iteration's REINIT key (warm_start would train iteration 1's on)
    learner, owner = trainer.strategy_learner, keys.Owner.STRATEGY
    redrawn = learner.init(trainer.key(2, owner, keys.Use.REINIT))
    fitted, _, _ = learner.train(
        *redrawn, state.strategy_memory, trainer.key(2, owner, keys.Use.TRAIN)
    )
    chex.assert_trees_all_equal(state.strategy_params, fitted)


def test_held_out_advantage_samples_stay_out_of_the_memory_and_are_scored(tmp_path):
    config = smoke_config(**{"run.max_iterations": 1, "optimization.advantage_holdout": 0.25})
    config.evaluation.eval_every = 0
    state = Trainer(config, tmp_path).run()
    (row,) = _rows(tmp_path)
    held = [row[f"memory/advantage_heldout_p{p}"] for p in (0, 1)]
    seen = [int(memory.seen) for memory in state.advantage_memory]
    assert sum(held) > 0 and sum(seen) + sum(held) == row["traversal/advantage_samples"]
    for p in (0, 1):
        assert row[f"memory/advantage_p{p}_seen"] == seen[p]
        if held[p]:
            assert row[f"loss/advantage_heldout_p{p}"] >= 0
    with pytest.raises(ValueError, match="optimization.advantage_holdout"):
        Trainer(smoke_config(**{"optimization.advantage_holdout": 1.0}), tmp_path / "bad")


def test_traversal_compiles_once_across_iterations_and_players(tmp_path):
    """A traversal no other test of a worker compiles (10 traversals): one compile for
    the run. At the root: the suite's trainer run of external sampling there, whose
    target anatomy it checks as well."""
    overrides = {"traversal.traversals_per_player": 10, "traversal.expand_at": "root"}
    config = smoke_config(**{"run.max_iterations": 3, **overrides})
    before = lockstep._run._cache_size()
    Trainer(config, tmp_path).run()
    assert lockstep._run._cache_size() == before + 1
    _assert_target_anatomy(_rows(tmp_path)[-1])


def test_advantage_epochs_grow_the_updates_with_the_memory_without_recompiling(tmp_path):
    # smoke: 8 updates of batch 32, about 16 samples a player an iteration: 8 passes
    config = smoke_config(**{"run.max_iterations": 3, "optimization.advantage_epochs": 8.0})
    config.evaluation.eval_every = 0
    trainer = Trainer(config, tmp_path)
    trainer.run()
    rows = _rows(tmp_path)
    for row in rows:
        for p in (0, 1):
            size = row[f"memory/advantage_p{p}_seen"]  # memories below capacity: size = seen
            wanted = -(-8 * size // 32)
            assert row[f"optimization/advantage_updates_p{p}"] == 8 * max(1, -(-wanted // 8))
    assert (
        rows[-1]["optimization/advantage_updates_p0"] > rows[0]["optimization/advantage_updates_p0"]
    )
    assert trainer.advantage_learner.trace_count == 1


def test_config_errors_name_the_field(tmp_path):
    cases = [
        ({"traversal.backend": "cuda"}, "traversal.backend must be one of"),
        ({"traversal.lanes": 999}, "traversal.lanes"),
        ({"traversal.lockstep_schedule": "mover"}, "traversal.lockstep_schedule"),
        ({"traversal.sampling_mode": "full"}, "traversal.sampling_mode"),
        ({"rules.n_colors": 7}, "rules.n_colors"),
        ({"network.activation": "swish"}, "network.activation"),
        ({"training_weighting.mode": "t2"}, "training_weighting.mode"),
        ({"training_weighting.average_mode": "t0"}, "training_weighting.average_mode"),
        ({"optimization.advantage_init": "keep"}, "optimization.advantage_init"),
        ({"optimization.strategy_init": "keep"}, "optimization.strategy_init"),
        ({"optimization.strategy_train_when": "often"}, "optimization.strategy_train_when must"),
        ({"optimization.strategy_train_when": "read"}, "needs optimization.strategy_init='scr"),
        ({"optimization.strategy_lr_schedule": "step"}, "optimization.strategy_lr_schedule must"),
        (
            {"optimization.strategy_lr_schedule": "cosine"},
            "strategy_lr_schedule='cosine' .* needs optimization.strategy_init='scratch'",
        ),
        ({"optimization.advantage_lr_schedule": "linear"}, "advantage_lr_schedule must be"),
        (
            {
                "optimization.advantage_lr_schedule": "cosine",
                "optimization.advantage_init": "warm_start",
            },
            "advantage_lr_schedule='cosine' .* needs optimization.advantage_init='scratch'",
        ),
        (
            {
                "optimization.strategy_train_when": "read",
                "optimization.strategy_init": "scratch",
                "optimization.strategy_train_every": 2,
            },
            "and optimization.strategy_train_every=1",
        ),
        ({"network.head": "card", "traversal.backend": "recursive"}, "network.head"),
        ({"network.head": "card", "optimization.learner": "torch"}, "network.head"),
        ({"evaluation.exploitability_every": 1}, "evaluation.exploitability_every"),
        ({"optimization.advantage_epochs": -1.0}, "optimization.advantage_epochs"),
        ({"draws": "piles"}, "draws must be one of"),
        ({"draws": "deck", "evaluation.exploitability_every": 1}, "with draws='deck'"),
    ]
    for overrides, message in cases:
        with pytest.raises(ValueError, match=message):
            Trainer(smoke_config(**overrides), tmp_path / "x")


def test_strategy_samples_auto_follows_the_opponent(tmp_path):
    assert Trainer(smoke_config(), tmp_path / "a").options.strategy_samples == "opponent"
    config = smoke_config(**{"traversal.opponent_policy": "safe_heuristic"})
    assert Trainer(config, tmp_path / "b").options.strategy_samples == "traverser"
    config = smoke_config(**{"traversal.strategy_samples": "both"})
    assert Trainer(config, tmp_path / "c").options.strategy_samples == "both"


def test_card_head_trains_and_evaluates(tmp_path):
    # with the agent's draws restricted as well: traversal and evaluation both apply it
    config = smoke_config(**{"run.max_iterations": 1, "network.head": "card", "draws": "playable"})
    config.evaluation.eval_every = 1
    trainer = Trainer(config, tmp_path)
    assert trainer.options.draws == "playable"
    state = trainer.run()
    assert state.strategy_params["output"]["kernel"].shape[1] == 2 * 12 + 1 + 2  # 2N + 1 + C
    assert "eval/current/random/margin_mean" in _rows(tmp_path)[-1]


def test_resume_refuses_another_config_but_allows_run_fields(tmp_path):
    Trainer(smoke_config(**{"run.max_iterations": 1}), tmp_path).run()
    with pytest.raises(ValueError, match="network.hidden_size"):
        Trainer(smoke_config(**{"network.hidden_size": 8}), tmp_path).run()
    # how the jax backend runs (lanes) never changes the samples, so it may change
    state = Trainer(smoke_config(**{"run.max_iterations": 2, "traversal.lanes": 4}), tmp_path).run()
    assert state.iteration == 2


@pytest.mark.parametrize("asynchronous", [True, False])
def test_checkpoints_are_atomic_and_pruned(tmp_path, asynchronous):
    directory = tmp_path / "checkpoints"
    store = checkpoint.CheckpointStore(directory, keep_every=2, asynchronous=asynchronous)
    for iteration in range(1, 6):
        networks = {"net[0]": np.full(3, iteration, np.float32)}
        state = {"memory/info": np.arange(iteration, dtype=np.float16), "size": np.asarray(7)}
        store.save(iteration, networks, state, {"note": iteration})
    store.close()
    # a save that died half-way: orbax's temporary directory, never listed, cleaned up
    (directory / "step_00000006.orbax-checkpoint-tmp").mkdir()
    store = checkpoint.CheckpointStore(directory, keep_every=2)
    assert store.steps() == [2, 4, 5]
    arrays, meta = store.load(store.latest())
    assert meta["iteration"] == 5 and meta["note"] == 5
    assert arrays["memory/info"].dtype == np.float16 and arrays["size"].shape == ()
    assert arrays["memory/info"].tolist() == [0, 1, 2, 3, 4] and arrays["net[0]"][0] == 5
    assert set(store.load(4, networks_only=True)[0]) == {"net[0]"}
    with pytest.raises(FileNotFoundError, match="iteration 3"):
        store.load(3)
    store.close()
    assert sorted(p.name for p in directory.iterdir()) == [
        "checksums",
        "step_00000002",
        "step_00000004",
        "step_00000005",
    ]
    assert sorted(p.name for p in (directory / "checksums").iterdir()) == [
        "step_00000002.json",
        "step_00000004.json",
        "step_00000005.json",
    ]


READ_WHEN_READ = {
    "optimization.strategy_init": "scratch",
    "optimization.strategy_train_when": "read",
}


def _unevaluated(config):
    config.evaluation.eval_every = config.evaluation.extended_eval_every = 0
    return config


def test_max_minutes_stops_and_keeps_the_progress(tmp_path):
    config = smoke_config(**{"run.max_iterations": 50, "run.max_minutes": 1e-6})
    config.checkpoint.save_latest = False
    state = Trainer(config, tmp_path).run()
    assert 1 <= state.iteration < 50
    assert checkpoint.latest_step(tmp_path / "checkpoints") == state.iteration
    # strategy_train_when='read': the iteration that runs out of time fits the strategy
    # network it leaves, though nothing else reads that iteration's
    config = _unevaluated(
        smoke_config(**READ_WHEN_READ, **{"run.max_iterations": 50, "run.max_minutes": 1e-6})
    )
    state = Trainer(config, tmp_path / "read").run()
    assert state.strategy_iteration == state.iteration
    saved = load_saved_networks(tmp_path / "read")
    assert saved.iteration == state.iteration and saved.strategy_note() == ""


def test_strategy_trained_when_read_is_every_iterations_where_read(tmp_path):
    """strategy_train_when='read' fits the strategy network only at the iterations that
    read it (here a kept checkpoint and the last), and there it is the network 'every'
    fits (scratch: a fit depends on its iteration alone); `fit_strategy` gives any other
    iteration's, and a checkpoint saved in between says whose network it holds."""
    trainers = {}
    for when in ("every", "read"):
        config = smoke_config(
            **{**READ_WHEN_READ, "optimization.strategy_train_when": when},
            **{"run.max_iterations": 3},
        )
        config.checkpoint.save_every = 2
        trainers[when] = Trainer(_unevaluated(config), tmp_path / when)
    states, fitted = {}, {}
    for when, trainer in trainers.items():
        state = trainer.initial_state()
        for t in (1, 2, 3):
            state, row = trainer.iteration(state)
            states[when, t] = state, row
            # before the next iteration, whose memory adds donate this state's buffers
            fitted[when, t] = trainer.fit_strategy(state)
    # another draw of the last fit: its own keys, the same every time, the run unchanged
    read = fitted["read", 3]
    refit = trainers["read"].strategy_refit(read, 1)
    chex.assert_trees_all_equal(refit, trainers["read"].strategy_refit(read, 1))
    leaves = zip(jax.tree.leaves(refit), jax.tree.leaves(read.strategy_params), strict=True)
    assert any(not np.array_equal(a, b) for a, b in leaves)
    with pytest.raises(ValueError, match="draw must be >= 1"):
        trainers["read"].strategy_refit(read, 0)
    for t in (1, 2, 3):
        (every, every_row), (read, read_row) = states["every", t], states["read", t]
        chex.assert_trees_all_equal(every.advantage_params, read.advantage_params)
        assert every.strategy_iteration == t
        if t == 1:
            assert read.strategy_iteration == 0 and "loss/strategy" not in read_row
            assert fitted["read", t].strategy_iteration == 1
            chex.assert_trees_all_equal(fitted["read", t].strategy_params, every.strategy_params)
        else:
            assert read.strategy_iteration == t
            assert read_row["loss/strategy"] == every_row["loss/strategy"]
            chex.assert_trees_all_equal(read.strategy_params, every.strategy_params)
            assert fitted["read", t] is read
        assert fitted["every", t] is every
    # a run stopped where its strategy network was not read saves the last one read
    config = _unevaluated(smoke_config(**READ_WHEN_READ, **{"run.max_iterations": 3}))
    Trainer(config, tmp_path / "stopped").run(lambda state: state.iteration == 2)
    saved = load_saved_networks(tmp_path / "stopped")
    assert (saved.iteration, saved.strategy_iteration) == (2, 0)
    assert "checkpoint 2's average strategy is iteration 0's" in saved.strategy_note()


def test_league_keeps_the_last_snapshots_of_the_strategy_network(tmp_path):
    config = smoke_config(
        **{
            "run.max_iterations": 3,
            "traversal.opponent_policy": "league",
            "self_play.league_size": 2,
            "self_play.snapshot_every": 1,
        }
    )
    trainer = Trainer(config, tmp_path)
    state = trainer.initial_state()
    snapshots = []
    for _ in range(3):
        state, row = trainer.iteration(state)
        snapshots.append(state.strategy_params)
        assert row["traversal/nodes"] > 0
    # the initial network counts as snapshot 0; iterations 1..3 took snapshots 1..3
    assert state.league_added == 4
    assert int(trainer.networks(state).league_count) == 2
    expected = {0: snapshots[1], 1: snapshots[2]}  # ring of 2: 3 % 2 = 1 holds iteration 3
    for slot, params in expected.items():
        for stacked, leaf in zip(
            jax.tree.leaves(state.league), jax.tree.leaves(params), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(stacked[slot]), np.asarray(leaf))


def test_presets_build_a_trainer(tmp_path):
    for preset in ("", "small", "small,classic", "wide,classic"):
        config = default_config.get_config(preset)
        trainer = Trainer(config, tmp_path / (preset or "default"))
        assert trainer.options.traversals_per_player == config.traversal.traversals_per_player
    # the small variants' presets and `classic` keep `plain`'s estimator (the one their
    # yardsticks measured; `classic` for the torch backends), which differs from the
    # default's in every mode
    plain = _modes(default_config.get_config("plain"))
    default = _modes(default_config.get_config(""))
    assert all(plain[name] != default[name] for name in DEFAULT_MODES), (plain, default)
    for preset in ("tiny", "small", "smoke", "classic", "wide,classic", "smoke,classic"):
        modes = _modes(default_config.get_config(preset))
        if "classic" in preset:  # outcome sampling from the root
            assert modes.pop("traversal.expand_at") == "root", preset
        assert modes.items() <= plain.items(), preset
    assert _modes(default_config.get_config("wide")) == default
    # `wide` restores the predecessor's sizes, which docs/performance.md's figures used;
    # `classic` changes only the estimator and head, so the two combine in either order.
    for preset in ("wide,classic", "classic,wide"):
        config = default_config.get_config(preset)
        assert (config.network.hidden_size, config.network.num_layers) == (512, 3)
        assert config.traversal.traversals_per_player == 1024
        assert config.network.head == "slot"
    with pytest.raises(ValueError, match="unknown preset"):
        default_config.get_config("huge")


def test_chao_reservoir_keeps_iterations_in_proportion_to_their_weight():
    from lc_cfr.train.snapshots import chao_slot

    k, iterations, trials = 4, 30, 20000
    rng = np.random.default_rng(0)
    kept = np.zeros(iterations + 1)
    for _ in range(trials):
        slots, total = [], 0.0
        for t in range(1, iterations + 1):
            total += t
            slot = chao_slot(len(slots), k, float(t), total, rng.random(), rng.integers(k))
            if slot == len(slots):
                slots.append(t)
            elif slot is not None:
                slots[slot] = t
        kept[slots] += 1
    frequency = kept / trials
    expected = k * np.arange(iterations + 1) / total
    late = np.arange(2 * k, iterations + 1)  # past the fill, where it is exact
    np.testing.assert_allclose(frequency[late], expected[late], atol=0.015)
    assert abs(frequency.sum() - k) < 1e-9


def test_sd_cfr_view_is_evaluated_and_resumes_exactly(tmp_path):
    overrides = {"sd_cfr.snapshots": 2, "evaluation.views": "average_strategy,current,sd_cfr"}
    whole = Trainer(smoke_config(**{"run.max_iterations": 3, **overrides}), tmp_path / "w").run()
    Trainer(smoke_config(**{"run.max_iterations": 2, **overrides}), tmp_path / "s").run()
    split = Trainer(smoke_config(**{"run.max_iterations": 3, **overrides}), tmp_path / "s").run()
    assert whole.sd_count == split.sd_count == 2 and whole.sd_weight == 6.0
    chex.assert_trees_all_equal(whole, split)  # the whole state, bit for bit
    row = _rows(tmp_path / "w")[-1]
    assert row["eval/sd_cfr/random/games"] == 8  # smoke: 8 games, 4 deals in 2 blocks
    loaded = load_saved_networks(tmp_path / "w").snapshots
    assert loaded.count == 2
    chex.assert_trees_all_equal(
        jax.tree.leaves(loaded.advantage), jax.tree.leaves(whole.sd_advantage)
    )
    with pytest.raises(ValueError, match="sd_cfr.snapshots"):
        Trainer(smoke_config(**{"evaluation.views": "sd_cfr"}), tmp_path / "x")


def _rewrite_latest_checkpoint(workdir, change, *, legacy=False):
    """Applies `change` to the latest checkpoint's arrays and saves them back in place,
    in orbax's format or (legacy) in the format before it (ckpt_N/arrays.npz)."""
    directory = workdir / "checkpoints"
    store = checkpoint.CheckpointStore(directory)
    step = store.latest()
    arrays, meta = store.load(step)
    change(arrays)
    names = set(store.load(step, networks_only=True)[0])
    kept = {k: v for k, v in meta.items() if k not in ("format", "iteration", "network_checksums")}
    if legacy:
        store.close()
        shutil.rmtree(directory / f"step_{step:08d}")
        path = directory / f"ckpt_{step:08d}"
        path.mkdir()
        np.savez(path / "arrays.npz", **arrays)
        (path / "meta.json").write_text(json.dumps({"iteration": step, **kept}))
        return
    networks = {k: v for k, v in arrays.items() if k in names}
    state = {k: v for k, v in arrays.items() if k not in names}
    store.save(step, networks, state, kept)
    store.close()


def test_runs_saved_in_the_format_before_orbax_resume_exactly(tmp_path):
    whole = Trainer(smoke_config(**{"run.max_iterations": 3}), tmp_path / "whole").run()
    Trainer(smoke_config(**{"run.max_iterations": 2}), tmp_path / "old").run()
    _rewrite_latest_checkpoint(tmp_path / "old", lambda arrays: None, legacy=True)
    assert checkpoint.latest_step(tmp_path / "old" / "checkpoints") == 2
    state = Trainer(smoke_config(**{"run.max_iterations": 3}), tmp_path / "old").run()
    chex.assert_trees_all_equal(state.advantage_params, whole.advantage_params)
    chex.assert_trees_all_equal(state.strategy_memory, whole.strategy_memory)
    assert sorted(p.name for p in (tmp_path / "old" / "checkpoints").iterdir()) == [
        "checksums",
        "ckpt_00000002",  # never written or pruned
        "step_00000003",
    ]


def test_runs_saved_before_the_own_known_block_resume(tmp_path):
    """A run whose config and memories predate the encoding's own_known block resumes.
    (One iteration saved, one resumed: the smoke preset's evaluation at iteration 3 would
    add compiles and check nothing here.)"""
    overrides = {"network.own_known_input": False}
    Trainer(smoke_config(**{"run.max_iterations": 1, **overrides}), tmp_path).run()
    # turn the run into one written before the block existed
    config = json.loads((tmp_path / "config.json").read_text())
    del config["network"]["own_known_input"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    probe = Trainer(smoke_config(), tmp_path / "probe")
    n, codec = probe.rules.n_cards, probe.codec
    old = {}

    def drop_own_known(arrays):  # memories from then held float16 rows
        for key, value in arrays.items():
            if key.endswith("/info"):
                old[key] = codec.decode_numpy(value)
                arrays[key] = np.delete(old[key], np.s_[7 * n : 8 * n], 1).astype(np.float16)

    _rewrite_latest_checkpoint(tmp_path, drop_own_known)
    with pytest.raises(ValueError, match="network.own_known_input"):
        Trainer(smoke_config(**{"run.max_iterations": 2}), tmp_path).run()
    state = Trainer(smoke_config(**{"run.max_iterations": 1, **overrides}), tmp_path).restore()[0]
    before = old["advantage_memory_0/info"]
    restored = codec.decode_numpy(np.asarray(state.advantage_memory[0].info[: len(before)]))
    assert not restored[:, 7 * n : 8 * n].any()  # the block's columns are zeros
    np.testing.assert_array_equal(
        np.delete(restored, np.s_[7 * n : 8 * n], 1), np.delete(before, np.s_[7 * n : 8 * n], 1)
    )
    state = Trainer(smoke_config(**{"run.max_iterations": 2, **overrides}), tmp_path).run()
    assert state.iteration == 2


def test_memory_storage_and_growth_change_nothing_but_the_bytes(tmp_path):
    """Packed rows in memories that grow from 8 rows train what float16 rows allocated
    up front train (to float32 rounding); a grown run resumes exactly, and a float16 run
    resumes packed. Two iterations: the advantage memories grow at both (16 rows, then
    32), so the run resumed after the first grows again; no evaluation (the smoke
    preset's comes at iteration 3) and one allocation fewer to compile for."""
    runs = {
        "packed": {"memory.info_storage": "packed", "memory.initial_rows": 8},
        "float16": {"memory.info_storage": "float16", "memory.initial_rows": 0},
    }
    states = {
        name: Trainer(smoke_config(**{"run.max_iterations": 2, **o}), tmp_path / name).run()
        for name, o in runs.items()
    }
    packed, plain = states["packed"], states["float16"]
    assert reservoir.allocated_rows(packed.strategy_memory) < 4096
    assert reservoir.allocated_rows(plain.strategy_memory) == 4096
    assert packed.strategy_memory.info.dtype == np.uint8
    codec = Trainer(smoke_config(), tmp_path / "probe").codec
    for a, b in zip(
        (*packed.advantage_memory, packed.strategy_memory),
        (*plain.advantage_memory, plain.strategy_memory),
        strict=True,
    ):
        size = int(a.size)
        assert size == int(b.size) > 8  # the memories grew past their first allocation
        np.testing.assert_array_equal(codec.decode_numpy(a.info[:size]), b.info[:size])
        # the networks of the two runs differ by float32 rounding (two compiled training
        # steps), so later iterations' targets may differ in their last bits
        np.testing.assert_allclose(a.target[:size], b.target[:size], rtol=1e-4, atol=1e-6)
    chex.assert_trees_all_close(
        packed.advantage_params, plain.advantage_params, rtol=1e-4, atol=1e-6
    )
    rows = _rows(tmp_path / "packed")
    assert rows[-1]["memory/bytes"] < _rows(tmp_path / "float16")[-1]["memory/bytes"] / 4

    first = Trainer(
        smoke_config(**{"run.max_iterations": 1, **runs["packed"]}), tmp_path / "split"
    ).run()
    split = Trainer(
        smoke_config(**{"run.max_iterations": 2, **runs["packed"]}), tmp_path / "split"
    ).run()
    chex.assert_trees_all_equal(split, packed)
    # the resumed memories went on growing from the allocation they were saved with
    for saved, resumed in zip(first.advantage_memory, split.advantage_memory, strict=True):
        assert 8 < reservoir.allocated_rows(saved) < reservoir.allocated_rows(resumed)
    # a run written with float16 rows resumes with packed ones (and the other way round)
    Trainer(smoke_config(**{"run.max_iterations": 1, **runs["float16"]}), tmp_path / "mix").run()
    mixed = Trainer(smoke_config(**{"run.max_iterations": 2, **runs["packed"]}), tmp_path / "mix")
    mixed = mixed.run()
    assert mixed.strategy_memory.info.dtype == np.uint8
    chex.assert_trees_all_close(
        mixed.advantage_params, plain.advantage_params, rtol=1e-4, atol=1e-6
    )


def test_epsilon_schedule_decays_in_steps(tmp_path):
    overrides = {
        "traversal.epsilon_decay": 0.5,
        "traversal.epsilon_decay_every": 2,
        "traversal.epsilon_min": 0.1,
        "run.max_iterations": 3,
    }
    trainer = Trainer(smoke_config(**overrides), tmp_path)
    assert [trainer.epsilon(t) for t in range(1, 8)] == [0.6, 0.6, 0.3, 0.3, 0.15, 0.15, 0.1]
    assert Trainer(smoke_config(), tmp_path / "c").epsilon(5) is None
    trainer.run()  # iteration 3 traverses with epsilon 0.3 (a second compiled loop)
    assert _rows(tmp_path)[-1]["traversal/nodes"] > 0
    for bad, field in [
        ({"traversal.epsilon_decay": 0.0}, "traversal.epsilon_decay"),
        ({"traversal.epsilon_decay": 0.5, "traversal.epsilon_min": 0.9}, "epsilon_min"),
        ({"traversal.epsilon_decay": 0.5, "traversal.backend": "recursive"}, "jax backend"),
    ]:
        with pytest.raises(ValueError, match=field):
            Trainer(smoke_config(**bad), tmp_path / "bad")
