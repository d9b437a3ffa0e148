"""A run directory survives crashes, kills, damaged files and a full disk: atomic
rewrites, a torn last metrics row, fallback checkpoints, SIGKILL at any moment."""

import json
import logging
import os
import pathlib
import random
import re
import shlex
import shutil
import signal
import subprocess
import time

import chex
import pytest
from cli_helpers import assert_same_checkpoints, cli_env, smoke_main
from config_helpers import default_config

from lc_cfr.train import Trainer, checkpoint
from lc_cfr.train.saved_networks import load_saved_networks

ROOT = pathlib.Path(__file__).resolve().parent.parent


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


# The file-size limit of the full-disk test. tensorstore packs a checkpoint's arrays into
# data files whose sizes depend on how its writes happened to batch (on a smoke run: 43 KB
# and 84 KB files, or one larger one), so the old 100 KiB was sometimes never reached on a
# loaded machine and the save succeeded. 16 KiB is below any data file of the state
# and above every other file the run writes (metrics.jsonl is about 7 KB at 3 rows).
FULL_DISK_KIB = 16


def test_orbax_writes_that_fail_after_the_save_failed_are_not_logged(tmp_path, caplog):
    """The writes still pending when a save fails fail too, and asyncio logs each with a
    traceback when its task is collected (seen once in the full-disk test below): the
    store drops those lines, and only those."""
    checkpoint.CheckpointStore(tmp_path / "checkpoints", asynchronous=False).close()
    asyncio_log = logging.getLogger("asyncio")
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        asyncio_log.error(
            "Task exception was never retrieved\nfuture: <Task finished coro=<"
            "NumpyHandler._open_and_write() defined at /v/orbax/checkpoint/h.py:114>>"
        )
        asyncio_log.error("Task exception was never retrieved\nfuture: <Task mine.py:1>")
    assert [r.getMessage().endswith("mine.py:1>") for r in caplog.records] == [True]


@pytest.mark.slow
def test_a_full_disk_during_a_save_is_one_line_and_loses_nothing(tmp_path):
    workdir = tmp_path / "run"
    assert _cli(workdir, 1).wait(timeout=600) == 0
    process = _cli(workdir, 3, file_size_kib=FULL_DISK_KIB)
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


_STEP = re.compile(r"step_(\d{8})")
_RESUMED = re.compile(r"resuming from checkpoint (\d+)|no checkpoint: starting at iteration 0")


def _finalised(workdir) -> int:
    """The newest finalised checkpoint step (0 without one), listed as a resuming run
    lists it: orbax renames a step into place once it is whole."""
    directory = workdir / "checkpoints"
    names = [path.name for path in directory.glob("step_*")] if directory.is_dir() else []
    return max((int(m.group(1)) for name in names if (m := _STEP.fullmatch(name))), default=0)


def _saving(workdir) -> bool:
    """Whether orbax's temporary directory of a step being written exists."""
    return any((workdir / "checkpoints").glob("*.orbax-checkpoint-tmp*"))


def _resumed_from(stderr: str) -> int | None:
    """The step the trainer's resume record names (0: started afresh; None: killed
    before it got that far)."""
    found = _RESUMED.search(stderr)
    return None if found is None else int(found.group(1) or 0)


# What kills each of the three processes, in order: ("save", n) once it has finalised n
# steps of its own, as soon as the next save's temporary directory exists; ("delay", n)
# a seeded 0 to 0.6 s after its n-th step (in an iteration or a save); ("startup", None)
# a seeded 0.5 to 3 s after it started (importing, compiling, restoring). The kills
# follow the run's progress, not the clock, so whatever the machine's speed the first
# one comes after a save, each 'save' and 'delay' kill after the process saved a step
# of its own, and none lets a process reach the last iteration. (n >= 1 also
# keeps a 'save' kill off the temporary directory a killed predecessor left behind,
# which stays until the next writer opens the run.)
KILLS = (("save", 1), ("delay", 1), ("startup", None))


def _train_until_killed(workdir, iterations, policy, new_steps, rng) -> dict:
    """Runs `lc_cfr.main` until `policy` kills it (or it ends); what happened."""
    at_start = _finalised(workdir)
    process = _cli(workdir, iterations)
    started = time.monotonic()
    kill_at = started + rng.uniform(0.5, 3.0) if policy == "startup" else None
    delay = rng.uniform(0.0, 0.6)
    while process.poll() is None and time.monotonic() - started < 300:
        now = time.monotonic()
        saved = _finalised(workdir) - at_start
        if policy != "startup" and saved >= new_steps:
            if policy == "save" and (_saving(workdir) or saved > new_steps):  # or unseen
                break
            kill_at = kill_at or now + delay
        if kill_at is not None and now >= kill_at:
            break
        time.sleep(0.01)
    before = _finalised(workdir)  # listed just before the signal
    killed = process.poll() is None
    if killed:
        process.send_signal(signal.SIGKILL)
    _, stderr = process.communicate(timeout=600)
    return dict(
        policy=policy,
        killed=killed,
        at_start=at_start,
        before=before,
        after=_finalised(workdir),  # the process is gone: what the next one finds
        resumed=_resumed_from(stderr),
        returncode=process.returncode,
        stderr=stderr[-2000:],
    )


@pytest.mark.slow
def test_sigkill_at_any_moment_resumes_to_the_same_run(tmp_path):
    """Kills `lc_cfr.main` with SIGKILL while it trains and saves (asynchronously),
    resumes it each time, and compares the end with an uninterrupted run: every array of
    the last checkpoint (networks, optimiser states, memories) and the metrics rows.

    Each process's resume record (the trainer's log line) must name the newest step
    that was finalised when it started, which is the newest step listed just before the
    previous kill, or the one after it: a save whose rename lands between the listing
    and the signal is whole on disk, so the run rightly goes on from it."""
    workdir = tmp_path / "run"
    rng = random.Random(0)
    # the uninterrupted run, beside the killed ones (one process uses about one core)
    uninterrupted = _cli(tmp_path / "whole", 8)
    try:
        runs = [_train_until_killed(workdir, 8, policy, n, rng) for policy, n in KILLS]
        finished = _cli(workdir, 8)
        _, stderr = finished.communicate(timeout=600)
        assert finished.returncode == 0, stderr[-2000:]
        _, reference_stderr = uninterrupted.communicate(timeout=600)
        assert uninterrupted.returncode == 0, reference_stderr[-2000:]
    finally:
        if uninterrupted.poll() is None:
            uninterrupted.kill()
            uninterrupted.communicate()
    runs.append(dict(policy="finish", killed=False, at_start=runs[-1]["after"]))
    runs[-1].update(resumed=_resumed_from(stderr), after=_finalised(workdir))
    brief = [{k: v for k, v in run.items() if k != "stderr"} for run in runs]
    assert all(run["killed"] for run in runs[:-1]), brief  # none finished on its own
    # every kill came after a save, and those of 'save' and 'delay' after this
    # process's own: not one of them is a restart from scratch
    assert all(run["before"] > 0 for run in runs[:-1]), brief
    for run in runs[:-1]:
        assert run["policy"] == "startup" or run["before"] > run["at_start"], brief
    for killed, following in zip(runs[:-1], runs[1:], strict=True):
        assert killed["after"] in (killed["before"], killed["before"] + 1), brief
        assert following["at_start"] == killed["after"], brief
    # each process's resume record names the step it found; a process killed before
    # writing its record saved nothing either, so the next one finds the same step
    for run in runs:
        assert run["resumed"] in (None, run["at_start"]), (brief, run.get("stderr"))
    assert runs[0]["resumed"] == 0 and runs[-1]["resumed"] == runs[-2]["after"] > 0, brief
    assert sum(bool(run["resumed"]) for run in runs) >= 2, brief  # went on from a step
    assert _rows(workdir) == list(range(1, 9))
    whole = load_saved_networks(tmp_path / "whole")
    saved = load_saved_networks(workdir)
    assert saved.iteration == whole.iteration == 8
    chex.assert_trees_all_equal(saved.strategy, whole.strategy)
    chex.assert_trees_all_equal(saved.advantage, whole.advantage)
    compared = assert_same_checkpoints(tmp_path / "whole", workdir, 8)
    assert any(name.startswith("strategy_memory/") for name in compared)
