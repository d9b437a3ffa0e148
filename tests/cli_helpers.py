"""`lc_cfr.main` in a subprocess, as the command-line tests run it: the smoke preset,
no progress bar or TensorBoard, the shared JAX compilation cache, and no traceback
switch inherited from the caller's environment (one-line errors are under test). And
the comparison of two runs' checkpoints, array by array."""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def cli_env() -> dict:
    """The environment of a command-line test's subprocess."""
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    env.pop("LC_CFR_TRACEBACK", None)
    return env


def smoke_main(workdir, *flags) -> list[str]:
    """The argv of `python -m lc_cfr.main` on the smoke preset in `workdir` plus `flags`."""
    return [
        sys.executable,
        "-m",
        "lc_cfr.main",
        "--config=configs/default.py:smoke",
        f"--workdir={workdir}",
        "--config.run.progress_bar=False",
        "--config.logging.tensorboard=False",
        *flags,
    ]


def assert_same_checkpoints(expected_run, found_run, step: int) -> list[str]:
    """Asserts that step `step` of two run directories' checkpoints holds the same arrays,
    bit for bit and dtype for dtype: networks, optimiser states, memories, league, RNG
    key. Returns the names compared."""
    import numpy as np

    from lc_cfr.train import checkpoint

    stores = [
        checkpoint.CheckpointStore(pathlib.Path(run) / "checkpoints", read_only=True)
        for run in (expected_run, found_run)
    ]
    try:
        (expected, _), (found, _) = (store.load(step) for store in stores)
    finally:
        for store in stores:
            store.close()
    assert expected.keys() == found.keys(), sorted(expected.keys() ^ found.keys())
    for prefix in ("advantage_params", "advantage_opt", "strategy_opt", "advantage_memory_0/"):
        assert any(key.startswith(prefix) for key in found), f"no {prefix} in the checkpoint"
    differing = [
        key
        for key in expected
        if expected[key].dtype != found[key].dtype or not np.array_equal(expected[key], found[key])
    ]
    assert not differing, differing
    return sorted(found)
