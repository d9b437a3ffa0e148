"""Test-wide settings: a persistent JAX compilation cache, so reruns skip XLA compiles;
a test whose xdist worker crashed runs once more (crash_reruns.py)."""

import os
import pathlib

import jax

_CACHE = pathlib.Path(__file__).resolve().parent.parent / ".cache" / "jax"
jax.config.update("jax_compilation_cache_dir", os.environ.get("LC_CFR_JAX_CACHE", str(_CACHE)))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

pytest_plugins = ["crash_reruns"]
