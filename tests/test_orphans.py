"""A trainer killed with SIGKILL leaves no process and no shared memory behind, for every
torch backend: its pool workers and inference server watch it and exit, and the resource
tracker then releases the segments and semaphores it registered."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHM = pathlib.Path("/dev/shm")


def _shared_memory() -> set[str]:
    if not SHM.is_dir():
        return set()
    return {p.name for p in SHM.iterdir() if p.name.startswith(("psm_", "sem.mp-"))}


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
@pytest.mark.skipif(not SHM.is_dir(), reason="needs Linux /dev/shm")
@pytest.mark.parametrize("backend", ["recursive", "interleaved", "server"])
def test_killing_the_trainer_leaves_nothing_behind(tmp_path, backend):
    before = _shared_memory()
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [
        sys.executable,
        "-m",
        "lc_cfr.main",
        "--config=configs/default.py:smoke,classic",
        f"--workdir={tmp_path}",
        f"--config.traversal.backend={backend}",
        "--config.traversal.num_workers=2",
        "--config.run.max_iterations=1000",
        "--config.run.progress_bar=False",
        "--config.logging.tensorboard=False",
        "--config.evaluation.eval_every=0",
    ]
    # a session of its own: the trainer, its workers, server and resource tracker share
    # one process group that the test can watch after the trainer is gone
    trainer = subprocess.Popen(
        command, cwd=ROOT, env=env, start_new_session=True, stderr=subprocess.PIPE
    )
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and metrics.read_text().strip()):  # the pool is working
        assert trainer.poll() is None, trainer.stderr.read().decode()[-2000:]
        assert time.monotonic() < deadline, "no iteration finished in 300 s"
        time.sleep(0.5)
    os.kill(trainer.pid, signal.SIGKILL)
    trainer.wait()
    deadline = time.monotonic() + 20
    while _group_alive(trainer.pid) and time.monotonic() < deadline:
        time.sleep(0.25)
    left = _group_alive(trainer.pid)
    if left:
        os.killpg(trainer.pid, signal.SIGKILL)  # do not leak into the rest of the suite
    assert not left, "processes of the killed trainer were alive 20 s later"
    assert _shared_memory() <= before, f"left in /dev/shm: {_shared_memory() - before}"
