"""Files of a run directory survive crashes: atomic rewrites and a torn last metrics row."""

import json
import os
import pathlib
import sys

import pytest

from lc_cfr.train import Trainer, checkpoint

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "configs"))
import default as default_config  # noqa: E402


def _config(iterations: int):
    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.evaluation.eval_every = 0
    config.run.max_iterations = iterations
    return config


def test_atomic_write_leaves_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    checkpoint.atomic_write_text(path, "old")

    def crash(fd):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "fsync", crash)
    with pytest.raises(OSError, match="disk gone"):
        checkpoint.atomic_write_text(path, "new, half written")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]  # no temp left


def test_a_torn_last_metrics_row_is_repaired_on_resume(tmp_path):
    Trainer(_config(2), tmp_path).run()
    metrics = tmp_path / "metrics.jsonl"
    with open(metrics, "a") as f:
        f.write('{"iteration": 3, "loss/adv')  # a crash in the middle of a write
    Trainer(_config(3), tmp_path).run()
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["iteration"] for row in rows] == [1, 2, 3]


def test_a_torn_middle_metrics_row_is_named(tmp_path):
    Trainer(_config(1), tmp_path).run()
    metrics = tmp_path / "metrics.jsonl"
    good = metrics.read_text()
    metrics.write_text('{"iteration": 1, "lo\n' + good)
    with pytest.raises(ValueError, match="metrics.jsonl line 1 is not JSON"):
        Trainer(_config(2), tmp_path).run()
