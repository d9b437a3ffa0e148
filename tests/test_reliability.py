"""A run directory survives crashes, kills, damaged files and a full disk: atomic
rewrites, a torn last metrics row, fallback checkpoints, SIGKILL at any moment."""

import json
import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import chex
import pytest
from cli_helpers import cli_env, smoke_main

from lc_cfr.train import Trainer, checkpoint
from lc_cfr.train.saved_networks import load_saved_networks

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
    shutil.copytree(run, tmp_path / "run")
    return tmp_path / "run"


def _resume(workdir, iterations=4, **run_fields):
    config = _config(iterations)
    config.checkpoint.save_every = 1
    for field, value in run_fields.items():
        config.run[field] = value
    return Trainer(config, workdir).run()


def test_a_save_that_died_half_way_is_ignored(three_iterations, tmp_path):
    workdir = _copy(three_iterations, tmp_path)
    # what a kill inside orbax's write leaves: its temporary directory, half filled
    unfinished = workdir / "checkpoints" / "step_00000004.orbax-checkpoint-tmp"
    shutil.copytree(workdir / "checkpoints" / "step_00000003", unfinished)
    (unfinished / "_CHECKPOINT_METADATA").unlink()
    assert checkpoint.latest_step(workdir / "checkpoints") == 3
    assert _resume(workdir).iteration == 4
    assert _rows(workdir) == [1, 2, 3, 4]  # the history is kept
    assert not unfinished.exists()


def test_a_step_whose_state_checksums_were_not_written_is_restored_with_a_warning(
    three_iterations, tmp_path, caplog
):
    workdir = _copy(three_iterations, tmp_path)
    (workdir / "checkpoints" / checkpoint.CHECKSUMS / "step_00000003.json").unlink()
    assert _resume(workdir).iteration == 4 and _rows(workdir) == [1, 2, 3, 4]
    assert "restored unverified" in caplog.text


def test_a_run_without_checkpoints_is_not_restarted_unless_asked(three_iterations, tmp_path):
    workdir = _copy(three_iterations, tmp_path)
    shutil.rmtree(workdir / "checkpoints")
    with pytest.raises(ValueError, match=r"3 rows\) but no checkpoint.*run\.restart=True"):
        _resume(workdir)
    assert _rows(workdir) == [1, 2, 3]  # refused before anything was rewritten
    assert _resume(workdir, iterations=1, restart=True).iteration == 1
    assert _rows(workdir) == [1]


def _largest_file(item: pathlib.Path) -> pathlib.Path:
    return max((p for p in item.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)


def _truncate(item):
    path = _largest_file(item)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garble(item):
    # zeros in the middle of the item's largest data file: orbax reads it without a
    # complaint, the checksums catch it
    path = _largest_file(item)
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(data))


def _cut_meta(item):
    path = item / "metadata"
    path.write_text(path.read_text()[:10])


@pytest.mark.parametrize(
    "item, damage",
    [
        ("networks", _truncate),
        ("networks", _garble),
        ("meta", _cut_meta),
        ("state", _truncate),
        ("state", _garble),
    ],
)
def test_a_damaged_latest_checkpoint_falls_back_to_the_one_before(
    three_iterations, tmp_path, item, damage, caplog
):
    workdir = _copy(three_iterations, tmp_path)
    damage(workdir / "checkpoints" / "step_00000003" / item)
    from lc_cfr.train.saved_networks import load_saved_networks

    if item == "state":  # evaluate and play read the networks only
        assert load_saved_networks(workdir).iteration == 3
    else:  # evaluate and play name the damaged file and the good checkpoints
        with pytest.raises(ValueError, match=r"step_00000003/.*damaged.*checkpoints: 1, 2"):
            load_saved_networks(workdir)
    assert load_saved_networks(workdir, iteration=2).iteration == 2
    state = _resume(workdir, iterations=3)
    assert state.iteration == 3 and _rows(workdir) == [1, 2, 3]
    assert "damaged" in caplog.text and "falling back" in caplog.text


def _cli(workdir, iterations, *, file_size_kib=None):
    """`lc_cfr.main` on the smoke preset in a subprocess (a Popen, not yet waited for);
    with `file_size_kib`, under a file-size limit: a disk that fills up, writes past the
    limit failing with EFBIG (bash's ulimit, so no Python runs between fork and exec)."""
    env = cli_env()
    command = smoke_main(
        workdir,
        f"--config.run.max_iterations={iterations}",
        "--config.evaluation.eval_every=0",
        "--config.checkpoint.save_every=0",
    )
    if file_size_kib:
        limited = f"ulimit -f {file_size_kib}; trap '' XFSZ; exec {shlex.join(command)}"
        command = ["bash", "-c", limited]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _reference_run(workdir, iterations):
    config = _config(iterations)
    config.checkpoint.save_every = 0
    return Trainer(config, workdir).run()


@pytest.mark.slow
def test_a_full_disk_during_a_save_is_one_line_and_loses_nothing(tmp_path):
    workdir = tmp_path / "run"
    assert _cli(workdir, 1).wait(timeout=600) == 0
    process = _cli(workdir, 3, file_size_kib=100)  # step 2's state does not fit
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 1, stderr[-2000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("lc_cfr.main: error")]
    assert len(errors) == 1, stderr[-2000:]
    failed = re.search(r"saving checkpoint (\d+) in \S+ failed \(.*File too large", errors[0])
    assert failed, errors[0]
    step = int(failed.group(1))  # 2 or 3: how far the state grows before it no longer fits
    assert f"step {step - 1} is intact" in errors[0]
    assert checkpoint.latest_step(workdir / "checkpoints") == step - 1
    assert _cli(workdir, 3).wait(timeout=600) == 0  # space again: the run goes on
    assert _rows(workdir) == [1, 2, 3]
    whole = _reference_run(tmp_path / "whole", 3)
    saved = load_saved_networks(workdir)
    chex.assert_trees_all_equal(saved.strategy, whole.strategy_params)


@pytest.mark.slow
def test_sigkill_at_any_moment_resumes_to_the_same_run(tmp_path):
    """Kills `lc_cfr.main` with SIGKILL while it trains and saves (asynchronously),
    resumes it each time, and compares the end with an uninterrupted run."""
    workdir = tmp_path / "run"
    rng = random.Random(0)
    kills = 0
    for delay in (rng.uniform(6, 12) for _ in range(4)):
        process = _cli(workdir, 8)
        started = time.monotonic()
        while process.poll() is None and time.monotonic() - started < delay:
            tmp = list((workdir / "checkpoints").glob("*.orbax-checkpoint-tmp"))
            if tmp and rng.random() < 0.5:  # inside a save
                break
            time.sleep(0.02)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            kills += 1
        process.communicate(timeout=600)
    assert kills >= 2
    finished = _cli(workdir, 8)
    _, stderr = finished.communicate(timeout=600)
    assert finished.returncode == 0, stderr[-2000:]
    assert _rows(workdir) == list(range(1, 9))
    whole = _reference_run(tmp_path / "whole", 8)
    saved = load_saved_networks(workdir)
    chex.assert_trees_all_equal(saved.strategy, whole.strategy_params)
    chex.assert_trees_all_equal(saved.advantage, whole.advantage_params)
