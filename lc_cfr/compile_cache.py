"""JAX's persistent compilation cache, set up one way for every command line and script.

XLA compiles are slow on a small CPU, and every program of lc_cfr compiles the same
jitted loops (the traversal, the learner, evaluation games): a cache on disk lets a
second run, a resume or a later evaluation skip them. `LC_CFR_JAX_CACHE` names the
folder (the tests point it into the repository); the command lines fall back to
DEFAULT_DIRECTORY, benchmarks to no cache at all, so that a timing never depends on what
an earlier run left on disk unless asked. The command lines also quiet JAX's backend
probing here (`quiet_backend_probe`), the other set-up they share.
"""

from __future__ import annotations

import logging
import os

import jax

ENVIRONMENT_VARIABLE = "LC_CFR_JAX_CACHE"
# LC_CFR_DEBUG=1 keeps JAX's backend-probing lines (`quiet_backend_probe`).
DEBUG_VARIABLE = "LC_CFR_DEBUG"
# The logger of JAX's backend set-up: on a CPU machine it logs, at INFO, "Unable to
# initialize backend 'tpu' ... libtpu.so" at the first computation of every command.
BACKEND_LOGGER = "jax._src.xla_bridge"
DEFAULT_DIRECTORY = os.path.join("~", ".cache", "lc_cfr", "jax")
# Compiles shorter than this are not written: they cost less to redo than to read.
MIN_COMPILE_SECONDS = 1.0


def directory(default: str | None = DEFAULT_DIRECTORY) -> str | None:
    """The cache folder: `LC_CFR_JAX_CACHE` if set, else `default` (None: no cache)."""
    found = os.environ.get(ENVIRONMENT_VARIABLE) or default
    return os.path.expanduser(found) if found else None


def enable(folder: str | None) -> None:
    """Compiles go through the persistent cache in `folder` (None leaves it off)."""
    if not folder:
        return
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)


def quiet_backend_probe() -> None:
    """Hides JAX's INFO lines about accelerators it probed for and did not find, which
    every command would otherwise start with on a CPU machine; warnings still show, and
    `LC_CFR_DEBUG=1` keeps everything."""
    if os.environ.get(DEBUG_VARIABLE) != "1":
        logging.getLogger(BACKEND_LOGGER).setLevel(logging.WARNING)
