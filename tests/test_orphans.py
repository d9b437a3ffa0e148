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


def _held_by_live_processes() -> set[int]:
    """The inodes of /dev/shm files that some live process has open or mapped.

    The suite runs on two workers, and the other worker's torch tests make segments and
    semaphores of their own while this test runs; those are held by a live process. What
    the killed trainer's group leaves behind is held by nobody: every process of that
    group is dead. Inodes, not names: glibc maps a named semaphore under a temporary name
    that it then links to the real one and unlinks.
    """
    held = set()
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fds = list((proc / "fd").iterdir())
            maps = (proc / "maps").read_text().splitlines()
        except OSError:  # the process ended
            continue
        for fd in fds:
            try:
                if os.readlink(fd).startswith("/dev/shm/"):
                    held.add(os.stat(fd).st_ino)
            except OSError:  # closed meanwhile (the listing's own descriptor among them)
                continue
        for line in maps:
            fields = line.split(None, 5)
            if len(fields) == 6 and fields[5].startswith("/dev/shm/"):
                held.add(int(fields[4]))
    return held


def _leaked(before: set[str]) -> set[str]:
    """Names that appeared since `before` and that no live process holds; a name another
    process is just creating gets a few seconds to be mapped."""
    deadline = time.monotonic() + 5
    while True:
        held = _held_by_live_processes()
        leaked = set()
        for name in _shared_memory() - before:
            try:
                if (SHM / name).stat().st_ino not in held:
                    leaked.add(name)
            except FileNotFoundError:  # released meanwhile
                continue
        if not leaked or time.monotonic() > deadline:
            return leaked
        time.sleep(0.5)


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
    leaked = _leaked(before)
    assert not leaked, f"left in /dev/shm: {leaked}"
