"""`lc_cfr.main` in a subprocess, as the command-line tests run it: the smoke preset,
no progress bar or TensorBoard, the shared JAX compilation cache, and no traceback
switch inherited from the caller's environment (one-line errors are under test)."""

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
