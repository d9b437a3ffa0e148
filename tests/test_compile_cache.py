"""lc_cfr.compile_cache: which folder the command lines and the benchmarks compile into."""

import jax

from lc_cfr import compile_cache


def test_the_environment_variable_wins_over_the_default(monkeypatch, tmp_path):
    monkeypatch.setenv(compile_cache.ENVIRONMENT_VARIABLE, str(tmp_path))
    assert compile_cache.directory() == str(tmp_path)
    assert compile_cache.directory(default=None) == str(tmp_path)
    monkeypatch.delenv(compile_cache.ENVIRONMENT_VARIABLE)
    assert compile_cache.directory(default="~/x") == str(tmp_path.home() / "x")
    assert compile_cache.directory(default=None) is None  # benchmarks: no cache unless asked


def test_enable_sets_the_folder_and_none_leaves_it(tmp_path):
    before = jax.config.jax_compilation_cache_dir
    before_seconds = jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        compile_cache.enable(None)
        assert jax.config.jax_compilation_cache_dir == before
        compile_cache.enable(str(tmp_path))
        assert jax.config.jax_compilation_cache_dir == str(tmp_path)
        assert (
            jax.config.jax_persistent_cache_min_compile_time_secs
            == compile_cache.MIN_COMPILE_SECONDS
        )
    finally:  # the suite's own cache settings (tests/conftest.py)
        jax.config.update("jax_compilation_cache_dir", before)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before_seconds)
