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


def _rows(workdir) -> list[int]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["iteration"] for line in lines if line.strip()]


@pytest.fixture(scope="module")
def three_iterations(tmp_path_factory):
    """A run of 3 iterations keeping every checkpoint; tests damage copies of it."""
    workdir = tmp_path_factory.mktemp("three")
    config = _config(3)
    config.checkpoint.save_every = 1
    Trainer(config, workdir).run()
    return workdir


def _copy(run, tmp_path):
    import shutil

    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _resume(workdir, iterations=4, **run_fields):
    config = _config(iterations)
    config.checkpoint.save_every = 1
    for field, value in run_fields.items():
        config.run[field] = value
    return Trainer(config, workdir).run()


def test_a_missing_latest_pointer_resumes_from_the_newest_checkpoint(three_iterations, tmp_path):
    workdir = _copy(three_iterations, tmp_path)
    (workdir / "checkpoints" / "LATEST").unlink()
    assert _resume(workdir).iteration == 4
    assert _rows(workdir) == [1, 2, 3, 4]  # the history is kept


def test_a_run_without_checkpoints_is_not_restarted_unless_asked(three_iterations, tmp_path):
    import shutil

    workdir = _copy(three_iterations, tmp_path)
    shutil.rmtree(workdir / "checkpoints")
    with pytest.raises(ValueError, match=r"3 rows\) but no checkpoint.*run\.restart=True"):
        _resume(workdir)
    assert _rows(workdir) == [1, 2, 3]  # refused before anything was rewritten
    assert _resume(workdir, iterations=1, restart=True).iteration == 1
    assert _rows(workdir) == [1]


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(path):
    data = bytearray(path.read_bytes())
    # zeros inside the second stored member (the first layer's kernel, which evaluation
    # reads too): the zip's CRC check fails when it is read
    data[1000:1064] = bytes(64)
    path.write_bytes(bytes(data))


def _cut_meta(path):
    path = path.parent / "meta.json"
    path.write_text(path.read_text()[:10])


@pytest.mark.parametrize("damage", [_truncate, _garble, _cut_meta])
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(
    three_iterations, tmp_path, damage, caplog
):
    workdir = _copy(three_iterations, tmp_path)
    damage(workdir / "checkpoints" / "ckpt_00000003" / "arrays.npz")
    from lc_cfr.train.saved_networks import load_saved_networks

    with pytest.raises(ValueError, match=r"ckpt_00000003/.* is damaged.*ckpt_00000002"):
        load_saved_networks(workdir)  # evaluate and play: the bad file and the good ones
    assert load_saved_networks(workdir, iteration=2).iteration == 2
    state = _resume(workdir, iterations=3)
    assert state.iteration == 3 and _rows(workdir) == [1, 2, 3]
    assert "is damaged" in caplog.text and "falling back" in caplog.text
