"""The yardstick and plotting scripts run end to end on a smoke run (the benchmark
scripts: tests/test_bench_scripts.py)."""

import json
import os
import pathlib
import subprocess
import sys

import jax
import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _script(name: str, *args, cwd=ROOT):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [sys.executable, str(ROOT / "scripts" / name), *map(str, args)]
    return subprocess.run(command, cwd=cwd, env=env, check=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def best_response_run(tmp_path_factory) -> pathlib.Path:
    """One iteration of scripts/best_response.py on the smoke preset, evaluated, in
    `run` beside its curve (`curve.json`): the plots read its metrics and the yardsticks
    its checkpoint (none of them writes into the run), so one run serves both tests."""
    run = tmp_path_factory.mktemp("best_response") / "run"
    _script(
        "best_response.py",
        "--preset=smoke",
        "--opponent=passive_discard",
        "--iterations=1",
        "--eval-every=1",
        "--games=8",
        f"--workdir={run}",
        "--set=network.head=card",
        f"--json={run.parent / 'curve.json'}",
    )
    return run


@pytest.mark.slow
def test_best_response_then_plots(best_response_run, tmp_path):
    pytest.importorskip("matplotlib", reason="the plots need the plots extra")
    run = best_response_run
    curve = json.loads((run.parent / "curve.json").read_text())
    assert curve["opponent"] == "passive_discard" and len(curve["curve"]) == 1
    point = curve["curve"][0]
    assert point["iteration"] == 1 and {"current", "average_strategy"} <= set(point)
    assert json.loads((run / "config.json").read_text())["network"]["head"] == "card"

    _script("plot_run.py", run, f"--out={tmp_path / 'curves.png'}", f"--json={tmp_path / 'n.json'}")
    assert (tmp_path / "curves.png").stat().st_size > 10_000
    numbers = json.loads((tmp_path / "n.json").read_text())
    assert numbers[str(run)]["iterations"] == 1
    _script("plot_run.py", run, run, "--panels=margins", f"--out={tmp_path / 'm.png'}")
    assert (tmp_path / "m.png").stat().st_size > 10_000
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("plot_run.py", run, "--panels=margins,speed")
    assert "--panels: unknown ['speed']" in failure.value.stderr

    reference = ROOT / "docs" / "openspiel_reference.json"
    _script(
        "plot_exploitability.py", run, f"--reference={reference}", f"--out={tmp_path / 'x.png'}"
    )
    assert (tmp_path / "x.png").stat().st_size > 10_000
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("plot_exploitability.py", run, "--views=average")
    assert "--views: choose from" in failure.value.stderr


def test_best_response_refuses_unknown_fields(tmp_path):
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("best_response.py", "--preset=smoke", "--set=traversal.nope=1")
    assert "unknown config field 'traversal.nope'" in failure.value.stderr


@pytest.mark.slow
def test_expeditions_follows_every_opened_expedition(best_response_run, tmp_path):
    run = best_response_run
    out = tmp_path / "expeditions.json"
    # the current policy held to one open expedition (a what-if the script offers)
    for view, cap in (("average_strategy", 0), ("current", 1)):
        _script(
            "expeditions.py",
            f"--workdir={run}",
            f"--view={view}",
            "--deals=2",
            f"--max-expeditions={cap}",
            f"--json={out}",
        )
        summary = json.loads(out.read_text())
        assert summary["games"] == 4 and summary["checkpoint"] == 1
        opened = sum(row["openings"] for row in summary["by_deck_left"])
        assert opened == round(summary["openings_per_game"] * 4)
        assert all(0.0 <= row["negative_share"] <= 1.0 for row in summary["by_deck_left"])
        assert 0 <= summary["stranding_plays_per_game"] <= summary["plays_per_game"]
        assert summary["plays_per_game"] + summary["discards_per_game"] > 0
    assert summary["openings_per_game"] <= 1
    _script(
        "expeditions.py", f"--workdir={run}", "--deals=2", "--agent-bot=random", f"--json={out}"
    )
    assert json.loads(out.read_text())["agent_bot"] == "random"
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("expeditions.py", f"--workdir={run}", "--agent-bot=random", "--max-expeditions=2")
    assert "--max-expeditions caps the trained agent" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("expeditions.py", f"--workdir={tmp_path / 'none'}")
    assert "does not exist" in failure.value.stderr

    # the same run's current policy with and without its pile draws (item 3 of issue 23)
    stalling = tmp_path / "stalling.json"
    _script(
        "stalling.py",
        f"--workdir={run}",
        "--views=current",
        "--opponents=random",
        "--games=8",
        f"--json={stalling}",
    )
    (row,) = json.loads(stalling.read_text())["rows"]
    assert row["deck"]["pile_draw_share"] == 0.0
    gain = row["any"]["margin"] - row["deck"]["margin"]
    assert row["pile_draw_gain"] == pytest.approx(gain)
    unplayable = row["any"]["margin"] - row["playable"]["margin"]
    assert row["unplayable_pile_draw_gain"] == pytest.approx(unplayable)
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("stalling.py", f"--workdir={run}", "--views=current", "--games=3")
    assert "--games must be even" in failure.value.stderr

    # the same run's memory at its draw rows: targets, fits and current policy (section 53)
    agreement = tmp_path / "agreement.json"
    _script("draw_agreement.py", f"--workdir={run}", "--rows=64", f"--json={agreement}")
    drawn = json.loads(agreement.read_text())
    assert drawn["rows_read"] == min(64, drawn["draw_rows"]) > 0
    assert sum(band["rows"] for band in drawn["bands"]) == drawn["rows_read"]
    for name, value in drawn["all"].items():
        if name.endswith(("_share", "_agreement")):
            assert 0.0 <= value <= 1.0, name
    for bands in drawn["regrets"].values():  # each player's advantage memory
        assert 0 < sum(band["rows"] for band in bands) <= 64
        for band in bands:
            assert 0.0 <= band["sampled_positive"] <= 1.0 and -1.0 <= band["correlation"] <= 1.0
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("draw_agreement.py", f"--workdir={run}", "--bands=0")
    assert "--bands must be >= 1, got 0" in failure.value.stderr

    # the same run's strategy network refitted from scratch on its own memory, then
    # both networks evaluated on the same deals
    refit = tmp_path / "refit.json"
    _script(
        "refit_strategy.py",
        f"--workdir={run}",
        "--init=scratch",
        "--updates=4",
        "--batch=8",
        "--lr-schedule=cosine",  # the smoke run's own is constant
        "--opponents=passive_discard",
        "--games=4",
        f"--json={refit}",
        f"--export={tmp_path / 'agent'}",
    )
    result = json.loads(refit.read_text())
    from lc_cfr.train.saved_networks import load_saved_networks

    agent = load_saved_networks(tmp_path / "agent")  # the refitted network, as an agent
    assert agent.strategy_iteration == agent.iteration == 1
    run_strategy = load_saved_networks(run).strategy
    assert not all(jax.tree.leaves(jax.tree.map(np.array_equal, agent.strategy, run_strategy)))
    (meta_path,) = (tmp_path / "agent").glob("checkpoints/step_*/meta/metadata")
    meta = json.loads(meta_path.read_text())
    (fit,) = result["fits"]
    assert meta["strategy_refit"]["after"] == fit["after"]
    assert meta["strategy_refit"]["lr_schedule"] == "cosine"
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("refit_strategy.py", f"--workdir={run}", f"--export={tmp_path / 'agent'}")
    assert "--export: " in failure.value.stderr and "exists" in failure.value.stderr
    assert result["checkpoint"] == 1 and result["memory_rows"] > 0
    assert result["init"] == "scratch" and result["updates"] == 4
    assert result["lr_schedule"] == "cosine"
    assert set(result["before"]) == set(fit["after"]) == {"passive_discard"}
    assert np.isfinite(fit["loss_first"]) and np.isfinite(fit["loss_last"])
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("refit_strategy.py", f"--workdir={run}", "--weighting=uniform,cubic")
    assert (
        "--weighting must be one of" in failure.value.stderr and "'cubic'" in failure.value.stderr
    )
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("refit_strategy.py", f"--workdir={run}", "--refit-seed=0,1", "--export=x")
    assert "--export writes one refit" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("refit_strategy.py", f"--workdir={run}", "--lr-schedule=cosine", "--init=warm")
    assert "--lr-schedule: a cosine decays over one fit" in failure.value.stderr


@pytest.mark.slow
def test_time_to_strength_evaluates_at_the_marks_and_refuses_an_old_run(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot needs the plots extra")
    run, out = tmp_path / "run", tmp_path / "tts.json"
    args = ["--config=configs/default.py:smoke", f"--workdir={run}", "--opponents=random"]
    args += ["--games=8", "--views=average_strategy,current", "--set=run.max_iterations=2"]
    scratch = ["--set=optimization.strategy_init=scratch", "--strategy-fits=2"]
    printed = _script(
        "time_to_strength.py",
        *args,
        *scratch,
        "--minutes=0.001,60",
        f"--json={out}",
        f"--plot={out}.png",
    ).stdout
    report = json.loads(out.read_text())
    (record,) = report["records"]  # 60 minutes never come: max_iterations stops the run
    assert record["minutes"] == 0.001 and record["trained_minutes"] >= 0.001
    assert record["iteration"] == 1 and record["cpu_seconds"] > 0
    for view in ("average_strategy", "current"):
        assert record["eval"][view]["random"]["stderr"] >= 0
    # two draws of the strategy fit: the run's own (the view's figure) and another
    fits = record["strategy_fits"]["random"]
    assert fits["margins"][0] == record["eval"]["average_strategy"]["random"]["margin"]
    assert len(fits["margins"]) == 2 and fits["low"] <= fits["mean"] <= fits["high"]
    assert "2 fits, mean (range)" in printed
    assert "60 min: not reached" in printed and (tmp_path / "tts.json.png").stat().st_size > 5000
    rows = (run / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 2  # the trainer's own run, in the workdir
    for bad, message in (
        ([], "holds a run"),
        (["--set=traversal.no_such_field=1"], "no field 'traversal.no_such_field'"),
        (["--strategy-fits=2"], "needs optimization.strategy_init='scratch'"),
    ):
        where = run if not bad else tmp_path / "other"
        with pytest.raises(subprocess.CalledProcessError) as failure:
            _script("time_to_strength.py", *args[:1], f"--workdir={where}", *bad)
        assert message in failure.value.stderr


@pytest.mark.slow
def test_search_pairs_holds_k1_equal_to_the_raw_blueprint(best_response_run, tmp_path):
    out = tmp_path / "pairs.json"
    done = _script(
        "search_pairs.py",
        f"--workdir={best_response_run}",
        "--settings=raw,2:1:0",
        "--opponent=passive_discard",
        "--games=8",
        f"--json={out}",
    )
    rows = json.loads(out.read_text())["rows"]
    assert [row["setting"] for row in rows] == ["raw", "2:1:0"]
    # one candidate is the blueprint's own move: the same games, deal for deal
    assert rows[1]["difference"] == 0.0 and rows[1]["difference_stderr"] == 0.0
    assert rows[1]["mean"] == rows[0]["mean"] and "vs raw:  +0.00 +- 0.00" in done.stdout
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("search_pairs.py", f"--workdir={best_response_run}", "--settings=raw,0:4:2")
    assert "--settings determinizations must be an int >= 1" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("search_pairs.py", f"--workdir={best_response_run}", "--settings=raw,2:1:0@0")
    assert "--settings world_pool must be an int >= 1" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:  # no value network
        _script(
            "search_pairs.py", f"--workdir={best_response_run}", "--settings=raw,2:1:0:0:greedy:2"
        )
    assert "--settings leaf_decisions=2 values the leaves" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("search_pairs.py", "--agent=wizard", "--settings=raw,2:1:0")
    assert "--agent" in failure.value.stderr and "wizard" in failure.value.stderr


@pytest.mark.slow
def test_bench_traversal_runs_a_checkpoints_trained_networks(best_response_run, tmp_path):
    run, out = best_response_run, tmp_path / "trained.json"
    _script(
        "bench_traversal.py",
        f"--workdir={run}",
        "--backends=jax",
        "--lanes=8",
        "--traversals=8",
        "--repeats=1",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    assert report["networks"] == {"kind": "trained", "workdir": str(run), "checkpoint": 1}
    assert report["config"] == str(run / "config.json") and report["results"][0]["nodes"] > 0

    # the networks it traverses are the checkpoint's, as evaluation reads them
    sys.path.insert(0, str(ROOT / "scripts"))
    import bench_common
    import bench_traversal

    from lc_cfr.train.saved_networks import load_saved_networks

    networks, iteration = bench_traversal.trained_networks(bench_common.run_config(run), run, None)
    saved = load_saved_networks(run)
    assert iteration == saved.iteration == 1
    jax.tree.map(np.testing.assert_array_equal, networks.advantage, tuple(saved.advantage))
    jax.tree.map(np.testing.assert_array_equal, networks.strategy, saved.strategy)
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("bench_traversal.py", f"--workdir={run}", "--config=configs/default.py:smoke")
    assert "--config and --workdir exclude each other" in failure.value.stderr
