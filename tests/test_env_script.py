"""scripts/env_rollout.py runs end to end on a tiny variant and writes its figures."""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SMALL = ["n_colors=2", "n_ranks=5", "n_wagers=1", "hand_size=3", "bonus_threshold=5"]


def _run(*args, pythonpath=None):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    rules = [f"--rule={rule}" for rule in SMALL]
    command = [sys.executable, str(ROOT / "scripts" / "env_rollout.py"), *rules, *map(str, args)]
    return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True)


def _check_rollout(figures: dict, games: int):
    rollout = figures["rollout"]
    assert rollout["games"] == games and rollout["games_per_second"] > 0
    # Every game takes at least one decision per card left in the deck after the deal.
    assert rollout["decisions"] >= games * (12 - 2 * 3)
    mean = rollout["mean_returns"]
    assert len(mean) == 2 and mean[0] == pytest.approx(-mean[1])
    assert figures["rules"]["hand_size"] == 3 and figures["env"] == "lost_cities/v0"


@pytest.mark.slow
def test_rollout_and_search_against_a_bot(tmp_path):
    pytest.importorskip("mctx")
    out = tmp_path / "figures.json"
    result = _run(
        "--games=64",
        "--search-games=2",
        "--simulations=4",
        "--leaf-value=zero",
        "--opponent=random",
        "--rule=max_turns=12",
        f"--json={out}",
    )
    figures = json.loads(out.read_text())
    _check_rollout(figures, 64)
    search = figures["search"]
    assert search["games"] == 2 and search["simulations"] == 4 and search["opponent"] == "random"
    for side in ("search", "random_agent_same_deals"):
        outcome = search[side]
        assert outcome["wins"] + outcome["draws"] + outcome["losses"] == 2
    assert "games/s" in result.stdout and "gumbel muzero" in result.stdout


def test_without_mctx_the_search_is_skipped(tmp_path):
    # A package that fails to import hides an installed mctx from the script.
    (tmp_path / "mctx").mkdir()
    (tmp_path / "mctx" / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    out = tmp_path / "figures.json"
    result = _run("--games=64", f"--json={out}", pythonpath=tmp_path)
    figures = json.loads(out.read_text())
    _check_rollout(figures, 64)
    assert figures["search"] is None and figures["search_skipped"] == "mctx is not installed"
    assert "pip install mctx" in result.stdout
