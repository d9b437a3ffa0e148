"""A pytest plugin (loaded by conftest.py): a test whose pytest-xdist worker process
died runs once more, on a fresh worker.

A worker dies when native code faults. CI saw it first on 2026-12-04: a fatal signal in
the worker running tests/test_traversal.py's path-expansion test, which passes alone,
in a fresh cache, and in every other run of the suite (the class of intermittent XLA
fault under xdist of jax-ml/jax#10242). On 2026-12-06 three clean-clone runs had one,
two and two crashes, in tests of the traversal and the trainer: one in XLA compiling
(`backend_compile_and_load`), four in JAX's persistent compilation cache serialising an
executable it had just compiled (`compilation_cache.put_executable_and_time`,
`executable.serialize()`, jax 0.10.2); each test reran and passed. A failed
assertion is never rerun: only a crash, and only once; a second crash fails the test,
and the first shows as RERUN in the report, so a real, repeatable crash cannot hide.
Uses xdist's `pytest_handlecrashitem` hook, made for this.
"""

from __future__ import annotations

import collections

import pytest

CRASH_RERUNS = 1  # runs after the first that a crashed test gets
_crashes: collections.Counter = collections.Counter()


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    _crashes[crashitem] += 1
    if _crashes[crashitem] <= CRASH_RERUNS:
        sched.mark_test_pending(crashitem)
        report.outcome = "rerun"


def pytest_report_teststatus(report, config):
    del config
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None
