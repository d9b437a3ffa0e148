"""Test-wide settings: a persistent JAX compilation cache, so reruns skip XLA compiles;
XLA's optimisation passes off; a test whose xdist worker crashed runs once more
(crash_reruns.py).

Most of the suite's time on a 2-core machine is XLA compiling programs that then run
for milliseconds on tiny variants, so the tests compile with
`jax_disable_most_optimizations` (backend optimisation level 0, no expensive LLVM
passes): measured on tests/test_eval.py and tests/test_search.py from a cold cache, 162 s
against 199 s; a clean clone's suite took 1045 s against 1463 s the same day (with two
smaller trims: tests/test_sharding.py's modes, tests/test_engine_parity.py's default
games). It can change float rounding
(which products XLA fuses): a test that compares bits of arithmetic off the dyadic grid
between two programs (one device and four, one process and two, fused and op by op) or
with a run saved by the optimised compiler is marked `xla_optimized` and compiles as
users do (the `_xla_optimisations` fixture below, which also clears JAX's in-memory
caches so that nothing compiled the other way is reused; tests/test_sharding.py's
subprocess switches so for its one such mode alone). Set here
before JAX is imported, in the environment, so that the command lines and scripts that
tests start in subprocesses compile the same way; `JAX_DISABLE_MOST_OPTIMIZATIONS=0`
runs the suite with the optimised compiler. No figure of docs/performance.md comes from
a test: the benchmark scripts' tests check what they print, not how fast.

Running each module on one worker (`pytest -n 2 --dist loadfile`, so that two workers do
not both compile a module's cached helpers or build its module-scoped fixtures) was
measured no faster: 163 s against 166 s of `--dist load` for tests/test_eval.py,
test_search.py, test_scripts.py and test_estimator.py from a cold cache, fresh clones,
the machine otherwise idle (2026-12-07). The persistent cache presumably already hands
one worker's compiles to the other; scripts/test.sh keeps the default distribution.
"""

import os
import pathlib

os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")

import jax  # noqa: E402
import pytest  # noqa: E402

_CACHE = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "jax"
jax.config.update("jax_compilation_cache_dir", os.environ.get("LC_CFR_JAX_CACHE", str(_CACHE)))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

pytest_plugins = ["crash_reruns"]


OPTIMISATIONS_OFF = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"] != "0"


@pytest.fixture(autouse=True)
def _xla_optimisations(request, monkeypatch):
    """A test marked `xla_optimized` compiles with XLA's optimisations, in this process
    and in the subprocesses it starts."""
    if not OPTIMISATIONS_OFF or request.node.get_closest_marker("xla_optimized") is None:
        yield
        return
    monkeypatch.setenv("JAX_DISABLE_MOST_OPTIMIZATIONS", "0")
    jax.config.update("jax_disable_most_optimizations", False)
    jax.clear_caches()
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)
        jax.clear_caches()
