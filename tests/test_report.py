"""`python -m lc_cfr.report`: one screen about a run, from its files only."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from config_helpers import default_config

from lc_cfr import report
from lc_cfr.train import Trainer

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.run.max_iterations = 2
    config.evaluation.eval_every = 1
    config.traversal.lanes = 4  # a change from the smoke preset, and one from the default
    Trainer(config, workdir).run()
    return workdir


def test_report_reads_config_progress_evaluations_and_checkpoints(run):
    figures = report.build_report(run)
    assert figures["preset"] == "smoke"
    assert figures["changed_from_preset"] == {
        "logging.tensorboard": False,
        "run.max_iterations": 2,
        "evaluation.eval_every": 1,
        "traversal.lanes": 4,
    }
    assert figures["progress"]["iterations"] == 2 and figures["progress"]["max_iterations"] == 2
    assert figures["progress"]["eta_seconds"] == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    margins = [row["eval/current/random/margin_mean"] for row in rows]
    pair = figures["evaluations"]["current/random"]
    assert pair["last"]["margin"] == margins[-1] and pair["last"]["iteration"] == 2
    assert pair["best"]["margin"] == max(margins)
    assert figures["checkpoints"]["steps"] == [2]  # smoke keeps every 2nd and the newest
    assert figures["phases"]["traversal_seconds"] > 0
    assert pair["last"]["length"] == rows[-1]["eval/current/random/length_mean"] > 0
    assert pair["last"]["pile_draws"] == rows[-1]["eval/current/random/draw_pile_rate"]
    played = figures["played"]
    assert set(played) == set(report.PLAYED)
    assert 0 <= played["traversal/truncated_share"] <= 1
    assert played["targets/turn_p50"] <= played["targets/turn_p90"]
    text = report.render(figures)
    assert "the game traversals play" in text
    assert "changed from configs/default.py:smoke (4)" in text
    assert "current/random" in text and "2/2 iterations" in text and "pile draws" in text


def test_a_torn_last_row_is_skipped(run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    with open(copy / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 3, "lo')
    assert report.build_report(copy)["progress"]["iterations"] == 2


def _cli(*args):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [sys.executable, "-m", "lc_cfr.report", *args]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_cli_prints_one_screen_and_writes_json(run, tmp_path):
    out = tmp_path / "report.json"
    result = _cli(f"--workdir={run}", f"--json={out}")
    assert result.returncode == 0, result.stderr[-2000:]
    assert len(result.stdout.splitlines()) < 40
    assert json.loads(out.read_text())["checkpoints"]["steps"] == [2]
    missing = _cli(f"--workdir={tmp_path / 'nowhere'}")
    assert missing.returncode != 0 and "Traceback" not in missing.stderr
    assert "does not exist" in missing.stderr.splitlines()[-1]


def test_eta_and_bar_respect_the_time_limit(run, tmp_path, monkeypatch):
    """run.max_minutes: the report's ETA and the progress bar's total stop at whichever
    limit, iterations or minutes, comes first."""
    import shutil

    from lc_cfr.train import metrics

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    figures = report.build_report(copy)
    wall = figures["progress"]["wall_seconds"]
    saved = json.loads((copy / "config.json").read_text())
    saved["run"]["max_iterations"] = 1000
    saved["run"]["max_minutes"] = (wall + 90.0) / 60
    (copy / "config.json").write_text(json.dumps(saved))
    figures = report.build_report(copy)
    assert figures["progress"]["eta_seconds"] == pytest.approx(90.0)
    assert "1m30s to go (run.max_minutes=" in report.render(figures)

    clock = iter([0.0, 2.0, 4.0])  # the bar starts at 0 s; one iteration by 2 s, two by 4 s
    monkeypatch.setattr(metrics.time, "perf_counter", lambda: next(clock))
    progress = metrics.Progress(total=1000, initial=0, enabled=False, max_seconds=10.0)
    progress._done = 1
    assert progress.expected_total(1) == 1 + 4  # 8 s left at 0.5 it/s
    progress._done = 2
    assert progress.expected_total(2) == 2 + 3  # 6 s left at 0.5 it/s
