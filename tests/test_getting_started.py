"""docs/getting_started.md works as written: its bash commands run in order, on the smoke
preset (and its 8 evaluation games), in a temporary directory."""

import pathlib
import re
import shlex
import subprocess

import pytest
from cli_helpers import cli_env

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "getting_started.md"


def page_commands() -> list[str]:
    """Every line of the page's ```bash blocks, in order."""
    blocks = re.findall(r"```bash\n(.*?)```", PAGE.read_text(), flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_page_covers_the_whole_path():
    commands = page_commands()
    for needed in ("setup_env.sh", "train.sh", "lc_cfr.report", "lc_cfr.evaluate", "plot_run.py"):
        assert any(needed in command for command in commands), needed
    assert "lc_cfr.play" in commands[-1]


@pytest.mark.slow
def test_every_command_of_the_page_runs(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot step needs the plots extra")
    env = cli_env()
    for command in page_commands():
        command = command.replace("configs/default.py", "configs/default.py:smoke")
        # the smoke preset's evaluation size: the page's 200 games compile the evaluator's
        # three-phase loop four times, about 80 CPU-s cold against 12 for the whole command
        command = re.sub(r"--games=\d+", "--games=8", command)
        command = command.replace("runs/", f"{shlex.quote(str(tmp_path))}/")
        moves = "1\n" * 6 + "quit\n" if "lc_cfr.play" in command else None
        result = subprocess.run(
            ["bash", "-c", command],
            cwd=ROOT,
            env=env,
            input=moves,
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert result.returncode == 0, (command, result.stderr[-3000:])
        if "lc_cfr.report" in command:
            assert "4/4 iterations" in result.stdout, result.stdout
        if "lc_cfr.evaluate" in command:
            assert "safe_heuristic" in result.stdout
    assert (tmp_path / "first" / "curves.png").stat().st_size > 0
