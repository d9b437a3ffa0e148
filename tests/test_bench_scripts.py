"""The benchmark scripts at tiny sizes: what they store holds together.

Not that they run: every ratio they store equals the quotient of its stored parts, the
parts are the run's own per-round figures, a spread's min <= median <= max holds the
ratio, a goal flag is the unrounded figure compared with the goal, and an external
reference is stored as one (with its provenance), never as a measured speed-up.
"""

import json
import os
import pathlib
import statistics
import subprocess
import sys

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402


def _script(name: str, *args):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [sys.executable, str(ROOT / "scripts" / name), *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)


def check_ratio(record: dict, numerators=None, denominators=None) -> None:
    """The relations every stored ratio keeps (bench_common.ratio)."""
    assert record["value"] == record["numerator"] / record["denominator"]
    rounds, spread = record["rounds"], record["spread"]
    assert spread["count"] == len(rounds) >= 1
    assert spread["min"] == min(rounds) and spread["max"] == max(rounds)
    assert spread["median"] == statistics.median_low(rounds)
    assert spread["min"] <= spread["median"] <= spread["max"]
    assert spread["min"] <= record["value"] <= spread["max"]
    if numerators is not None:  # the parts are the run's own per-round figures
        assert record["numerator"] == statistics.median_low(numerators)
        assert record["denominator"] == statistics.median_low(denominators)
        quotients = [n / d for n, d in zip(numerators, denominators, strict=True)]
        assert rounds == pytest.approx(quotients)
    if record.get("goal") is not None:
        assert record["goal_met"] == (record["value"] >= record["goal"])
        assert record["rounds_meeting_goal"] == sum(r >= record["goal"] for r in rounds)


# ----- the shared helper -------------------------------------------------------------


def test_ratio_keeps_its_parts_and_judges_the_goal_unrounded():
    # the reviewer's case: a median round of 0.7476 reads 0.75 at two digits
    record = bench_common.ratio(
        [980.4, 1000.0, 1016.0],
        [1358.6, 1321.0, 1359.0],
        numerator_is="games/s",
        denominator_is="limit",
        goal=0.75,
    )
    check_ratio(record, [980.4, 1000.0, 1016.0], [1358.6, 1321.0, 1359.0])
    assert record["value"] == 1000.0 / 1358.6 < 0.75 and not record["goal_met"]
    assert record["rounds_meeting_goal"] == 1
    line = bench_common.describe(record)
    assert "0.7361" in line and "NOT met" in line and "1 of 3 rounds" in line
    assert bench_common.goal_record(0.7476, 0.75)["goal_met"] is False
    assert bench_common.goal_record(2.31, 2.5, ceiling=True)["goal_met"] is True


def test_ratio_of_lower_medians_stays_within_the_spread():
    rng = np.random.default_rng(0)
    for count in (1, 2, 3, 4, 6, 7):
        for _ in range(200):
            numerators = rng.lognormal(size=count).tolist()
            denominators = rng.lognormal(size=count).tolist()
            record = bench_common.ratio(
                numerators, denominators, numerator_is="a", denominator_is="b", goal=1.0
            )
            check_ratio(record, numerators, denominators)


def test_against_reference_is_labelled_and_keeps_both_parts():
    reference = bench_common.external_reference(
        {"iteration_seconds": 132.1, "peak_rss_gb": 0.75}, {"iteration": 1, "machine": "m"}
    )
    compared = bench_common.against_reference(
        reference, {"iteration_seconds": 51.6}, ("iteration_seconds", "peak_rss_gb"), "iteration_1"
    )
    assert compared["kind"].startswith("external reference")
    assert compared["provenance"]["iteration"] == 1 and compared["compared_with"] == "iteration_1"
    (row,) = compared["figures"].values()  # nothing measured for peak_rss_gb: left out
    assert row["reference_over_measured"] == row["reference"] / row["measured"] == 132.1 / 51.6


# ----- the scripts -------------------------------------------------------------------


def test_bench_eval_ratio_is_its_columns_quotient(tmp_path):
    out = tmp_path / "eval.json"
    _script(
        "bench_eval.py",
        "--games=4",
        "--lanes=4",
        "--hidden=16",
        "--layers=1",
        "--opponents=safe_heuristic",
        "--repeats=2",
        "--goal=0.5",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    assert report["schema"] == 2 and report["goals"]["ratio"] == 0.5
    (row,) = report["results"]
    record = row["ratio_to_limit"]
    games = report["settings"]["games"]
    check_ratio(
        record,
        [games / s for s in row["seconds"]],
        [games / s for s in row["forward_only_seconds_per_round"]],
    )
    assert record["goal"] == 0.5
    assert row["ratio"] == record["value"]
    assert row["ratio"] == row["games_per_second"] / row["limit_games_per_second"]
    games_goal = row["games_per_second_goal"]
    assert games_goal["goal_met"] == (row["games_per_second"] >= games_goal["goal"])
    assert report["ratio_goal_met_against_every_bot"] == record["goal_met"]


def test_bench_engine_ratios_to_cython_are_round_by_round(tmp_path):
    out = tmp_path / "engine.json"
    run = _script(
        "bench_engine.py",
        "--batches=4",
        "--min-games=8",
        "--cython-games=16",
        "--repeats=2",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    rows = {r["engine"]: r for r in report["results"]}
    cython = rows["cython_1proc"]
    for row in rows.values():
        assert len(row["rates"]) == 2
        assert row["decisions_per_second"] == statistics.median_low(row["rates"])
        check_ratio(row["ratio_to_cython_record"], row["rates"], cython["rates"])
        assert row["ratio_to_cython"] == row["ratio_to_cython_record"]["value"]
    best = report["best_jax_to_cython_record"]
    assert best == rows["jax_vmap_b4"]["ratio_to_cython_record"]
    assert best["goal"] == report["goal_best_jax_to_cython"] == 0.5
    assert report["best_jax_to_cython"] == best["value"]
    assert ("NOT met" in run.stdout) == (not best["goal_met"])


def test_bench_traversal_ratio_and_goals(tmp_path):
    out = tmp_path / "traversal.json"
    _script(
        "bench_traversal.py",
        "--config=configs/default.py:smoke",
        "--lanes=4",
        "--traversals=8",
        "--repeats=2",
        "--forward-rows=40",
        "--min-forwards=2",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    (row,) = report["results"]
    record = row["ratio_to_limit"]
    runs = row["runs"]
    check_ratio(
        record,
        [r["nodes_per_second"] for r in runs],
        [r["limit_nodes_per_second"] for r in runs],
    )
    assert record["goal"] == report["goals"]["ratio"] == 0.7
    assert row["ratio"] == record["value"] == report["best_ratio"]
    assert row["ratio"] == row["nodes_per_second"] / row["forward"]["limit_nodes_per_second"]
    speed = row["nodes_per_second_goal"]
    assert speed["goal"] == 60_000
    assert speed["goal_met"] == (row["nodes_per_second"] >= speed["goal"])


@pytest.mark.slow
def test_bench_traversal_backends_side_by_side(tmp_path):
    out = tmp_path / "backends.json"
    _script(
        "bench_traversal.py",
        "--config=configs/default.py:smoke,classic",
        "--backends=jax,recursive,jax+outcome_sampling_epsilon=0.3",
        "--workers=0",
        "--lanes=8",
        "--traversals=8",
        "--repeats=2",
        f"--json={out}",
    )
    rows = {r["backend"]: r for r in json.loads(out.read_text())["results"]}
    assert rows["jax"]["nodes"] == rows["recursive"]["nodes"]  # the same games
    for row in rows.values():
        for base in ("jax", "recursive"):
            record = row[f"ratio_to_{base}_record"]
            check_ratio(
                record,
                [r["nodes_per_second"] for r in row["runs"]],
                [r["nodes_per_second"] for r in rows[base]["runs"]],
            )
            assert row[f"ratio_to_{base}"] == record["value"]
            assert record["value"] == row["nodes_per_second"] / rows[base]["nodes_per_second"]
        samples = lambda r: [run["advantage_samples_per_second"] for run in r["runs"]]  # noqa: E731
        check_ratio(row["samples_ratio_to_first_record"], samples(row), samples(rows["jax"]))
    # a TraversalOptions field changes the estimator: other games, the same machinery
    assert rows["jax+outcome_sampling_epsilon=0.3"]["nodes"] != rows["jax"]["nodes"]


def test_bench_checkpoint_times_every_format(tmp_path):
    out = tmp_path / "bench.json"
    _script(
        "bench_checkpoint.py",
        "--rows=500",
        "--repeats=2",
        f"--dir={tmp_path / 'ckpt'}",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    results = report["results"]
    assert set(results) == {"npz", "orbax_sync", "orbax_async"}
    npz = results["npz"]["blocking_seconds_per_save"]
    for figures in results.values():
        assert 0 < figures["blocking_seconds"] <= figures["total_seconds"]
        blocking = figures["blocking_seconds_per_save"]
        assert figures["blocking_seconds"] == statistics.median_low(blocking)
        check_ratio(figures["blocking_vs_npz_record"], blocking, npz)
        assert figures["blocking_vs_npz"] == figures["blocking_vs_npz_record"]["value"]
    assert not (tmp_path / "ckpt" / "npz").exists()  # the saves are cleaned up


def test_bench_learner_times_the_learner_beside_its_bare_step(tmp_path):
    out = tmp_path / "learner.json"
    _script(
        "bench_learner.py",
        "--config=configs/default.py:smoke",
        "--variants=optax,bare",
        "--updates=4",
        "--repeats=3",
        "--rows=600",
        "--capacity=1000",
        f"--json={out}",
    )
    report = json.loads(out.read_text())
    figures = {r["variant"]: r for r in report["results"]}
    assert set(figures) == {"optax", "bare"} and report["base"] == "optax"

    def rates(variant):
        return [report["updates_per_call"] / s for s in figures[variant]["seconds"]]

    for variant, r in figures.items():
        assert np.isfinite(r["float32_loss_after"])
        assert r["updates_per_second"] == statistics.median_low(rates(variant))
        check_ratio(r["ratio_to_base"], rates(variant), rates("optax"))
    learner = figures["optax"]["ratio_to_bare"]
    check_ratio(learner, rates("optax"), rates("bare"))
    assert learner["goal"] == report["goal_ratio_to_bare"] == 0.95
    assert learner["value"] == (
        figures["optax"]["updates_per_second"] / figures["bare"]["updates_per_second"]
    )
    assert "ratio_to_bare" not in figures["bare"]


@pytest.mark.slow
def test_bench_iteration_reports_every_figure(tmp_path):
    out = tmp_path / "iteration.json"
    run = _script(
        "bench_iteration.py",
        "--config=configs/default.py:smoke",
        "--variants=jax+optax",
        "--iterations=2",
        f"--json={out}",
    )
    assert "EXTERNAL REFERENCES (not measured by this run)" in run.stdout
    text = out.read_text()
    assert "speedup" not in text  # no reference is written as a measured speed-up
    report = json.loads(text)
    assert report["iterations"] == 2 and not report["checkpoint"]
    (result,) = report["results"]
    assert "error" not in result and result["variant"] == "jax+optax"
    first, steady = result["iteration_1"], result["steady"]
    timings = (
        "iteration_seconds",
        "traversal_seconds",
        "memory_add_seconds",
        "advantage_train_seconds",
        "strategy_train_seconds",
    )
    for key in timings:
        assert first[key] > 0 and steady[key] > 0, key
    assert first["checkpoint_seconds"] == 0.0  # saving is off unless --checkpoint
    assert first["iteration_seconds"] >= sum(first[key] for key in timings[1:])
    rates = ("nodes_per_second", "advantage_samples_per_second", "advantage_ms_per_update")
    for key in (*rates, "strategy_ms_per_update"):
        assert first[key] > 0, key
    row = result["iterations"][0]
    assert first["advantage_samples_per_second"] == (
        row["advantage_samples"] / row["traversal_seconds"]
    )
    assert 0 < result["rss_after_iteration_1_gb"] <= result["peak_rss_gb"]
    # it 2+ is the mean of the later iterations, within their spread
    for key, spread in result["steady_spread"].items():
        later = [row[key] for row in result["iterations"][1:]]
        assert spread["min"] == min(later) <= steady[key] <= max(later) == spread["max"], key
    for key, record in result["against_first_variant"].items():
        assert record["value"] == record["numerator"] / record["denominator"]
        assert record["denominator"] == steady[key]
    # external references: provenance inline, like with like (the predecessor's figure
    # was a first iteration, so it meets iteration 1)
    references = report["external_references"]
    compared = result["against_external_reference"]
    predecessor = compared["predecessor"]
    assert predecessor["provenance"] == references["predecessor"]["provenance"]
    assert predecessor["provenance"]["iteration"] == 1
    assert predecessor["compared_with"] == "iteration_1"
    assert predecessor["kind"].startswith("external reference")
    for key, row in predecessor["figures"].items():
        assert row["reference"] == references["predecessor"]["figures"][key]
        expected = result["peak_rss_gb"] if key == "peak_rss_gb" else first[key]
        assert row["measured"] == expected
        assert row["reference_over_measured"] == row["reference"] / row["measured"]
    before = [name for name in compared if name.startswith("lc_cfr before issue 13, jax+optax")]
    assert len(before) == 2  # its iteration is not recorded: both phases shown
    assert not any("interleaved" in name for name in compared)  # only its own backend


def test_bench_iteration_refuses_unknown_variants():
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script("bench_iteration.py", "--variants=jax+sgd")
    assert "learner must be one of" in failure.value.stderr
    with pytest.raises(subprocess.CalledProcessError) as failure:
        _script(
            "bench_iteration.py", "--config=configs/default.py", "--variants=jax+optax+preset=huge"
        )
    assert "unknown preset 'huge'" in failure.value.stderr


def test_bench_iteration_variants_carry_their_own_config():
    import bench_iteration

    path = str(ROOT / "configs" / "default.py")
    old = "jax+optax+preset=plain+traversal.lockstep_schedule=all_lanes+traversal.lanes=32"
    config = bench_iteration.variant_config(path, ["traversal.lanes=64"], old)
    # the preset on top of the file's, then --set, then the variant's own fields
    assert (config.draws, config.traversal.expand_at, config.traversal.leaf_decisions) == (
        "any",
        "sampled",
        0,
    )
    assert config.traversal.lockstep_schedule == "all_lanes" and config.traversal.lanes == 32
    assert bench_iteration.parse_variant(old)[2:] == ((), tuple(old.split("+")[2:]))
    today = bench_iteration.variant_config(path, ["traversal.lanes=64"], "jax+optax")
    assert (today.draws, today.traversal.expand_at, today.traversal.lanes) == (
        "playable",
        "path",
        64,
    )
    small = bench_iteration.variant_config(f"{path}:small", [], "jax+optax+preset=smoke")
    assert small.rules.n_colors == 2  # smoke's, applied after the file's small


def test_bench_iteration_divides_by_no_skipped_strategy_fit():
    import bench_iteration

    def entry(variant, strategy_seconds, strategy_ms):
        figures = dict.fromkeys(bench_iteration.FIGURES, 1.0)
        figures.update(strategy_train_seconds=strategy_seconds, strategy_ms_per_update=strategy_ms)
        figures["advantage_samples_per_second"] = 40.0 if variant == "old" else 200.0
        return {"variant": variant, "iteration_1": figures, "steady": figures, "peak_rss_gb": 1.0}

    # the second variant fits its strategy network only where read: no iteration here did
    results = [entry("old", 6.7, 13.1), entry("new", 1e-5, None)]
    bench_iteration.add_ratios(results)
    ratios = results[1]["against_first_variant"]
    assert "strategy_train_seconds" not in ratios and ratios["iteration_seconds"]["value"] == 1.0
    assert ratios["advantage_samples_per_second"]["value"] == 5.0  # a rate: new over old
    for comparison in results[1]["against_external_reference"].values():
        assert "strategy_train_seconds" not in comparison["figures"]
    assert "strategy_train_seconds" in results[0]["against_first_variant"]
