"""Bad input reaches a user of `lc_cfr.main` as one line naming the field, value or path,
with a non-zero status and no traceback (--traceback shows it)."""

import pathlib
import subprocess

import pytest
from cli_helpers import cli_env, smoke_main

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _main(*args, workdir):
    command = smoke_main(workdir, "--config.evaluation.eval_every=0", *args)
    env = cli_env()
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _one_line(result, *fragments):
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("lc_cfr.main: error")]
    assert len(errors) == 1, result.stderr[-2000:]
    for fragment in fragments:
        assert fragment in errors[0], (fragment, errors[0])


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("run")
    result = _main("--config.run.max_iterations=1", workdir=workdir)
    assert result.returncode == 0, result.stderr[-2000:]
    return workdir


CASES = [
    # (extra flags, fragments the one line must hold)
    (["--config.traversl.lanes=4"], ['Did you mean "traversal"']),
    (["--config.traversal.traversals_per_player=0"], ["traversal.traversals_per_player"]),
    (["--config.rules.n_colors=9"], ["rules.n_colors"]),
    (["--config.optimization.non_finite=ignore"], ["optimization.non_finite"]),
]


@pytest.mark.slow
@pytest.mark.parametrize("flags, fragments", CASES, ids=[c[0][0] for c in CASES])
def test_bad_config_is_one_line(tmp_path, flags, fragments):
    _one_line(_main(*flags, workdir=tmp_path / "new"), *fragments)


@pytest.mark.slow
def test_a_workdir_that_is_a_file_is_one_line(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("not a run")
    _one_line(_main(workdir=path), str(path))


@pytest.mark.slow
@pytest.mark.parametrize("flag, field", [("network.hidden_size=8", "network.hidden_size")])
def test_a_resume_with_another_config_is_one_line(trained, flag, field):
    _one_line(_main(f"--config.{flag}", workdir=trained), field, str(trained))


@pytest.mark.slow
def test_traceback_flag_shows_the_traceback(tmp_path):
    result = _main("--config.rules.n_colors=9", "--traceback", workdir=tmp_path / "new")
    assert result.returncode != 0 and "Traceback" in result.stderr
