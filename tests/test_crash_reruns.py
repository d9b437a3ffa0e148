"""tests/crash_reruns.py: a crashed xdist worker's test runs once more, a failed one not."""

import os
import pathlib
import subprocess
import sys
import textwrap

TESTS = pathlib.Path(__file__).resolve().parent

CASES = """
import os
import pathlib


def test_crashes_once():
    marker = pathlib.Path(os.environ["CRASH_MARKER"])
    if not marker.exists():
        marker.write_text("crashed once")
        os.abort()


def test_always_crashes():
    os.abort()


def test_fails():
    assert 1 + 1 == 3
"""


def test_a_crashed_workers_test_runs_once_more_and_a_failed_one_never(tmp_path):
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    env = {**os.environ, "CRASH_MARKER": str(tmp_path / "marker"), "PYTHONPATH": str(TESTS)}
    command = [sys.executable, "-m", "pytest", "-n", "2", "-p", "crash_reruns"]
    command += ["-p", "no:cacheprovider", "-rA", "test_cases.py"]
    run = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    summary = run.stdout.strip().splitlines()[-1]
    assert run.returncode == 1, run.stdout + run.stderr
    # crashes_once: crashed, rerun, passed; always_crashes: crashed, rerun, crashed;
    # fails: failed once (a third rerun would be its)
    assert "2 failed, 1 passed" in summary and "2 rerun" in summary, run.stdout
    assert "PASSED test_cases.py::test_crashes_once" in run.stdout
    assert "FAILED test_cases.py::test_always_crashes" in run.stdout
    assert "FAILED test_cases.py::test_fails" in run.stdout
