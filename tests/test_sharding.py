"""Lanes sharded over several JAX devices (a `jax.sharding` mesh, lc_cfr.traversal.sharding)
give the single-device samples and statistics, and so do evaluation games.

Both scripts run in one subprocess (one interpreter start and JAX import for the two;
each script runs even if the other fails) with
XLA_FLAGS=--xla_force_host_platform_device_count=4, so the CPU shows four devices
(chex.assert_devices_available checks them). The sharded and the
single-device runs are compared bit for bit with `chex.assert_trees_all_equal`: the
whole Samples pytree at once (a failure names the field) and the statistics as a dict.
Every device must also have done its share: its own counts (the traversal's decisions,
forwarded states and loop steps; an evaluation's forwarded rows) are non-zero and sum
to the single-device figures, so a mesh that left devices idle would fail. One mode of
each sampling (external with a sampled expansion and value leaves, outcome with its
baseline) and every agent is sharded over 4 devices, one mode and one agent over 2 as
well: the mesh code is the same for all, and every further mode or mesh size is one
more compile. Only the baseline mode compiles with XLA's optimisations (as users do):
with them off (tests/conftest.py) its targets, whose arithmetic is off the dyadic grid,
round differently on one device and on four; everything else here is exact on the
dyadic grid, and compiles faster without them.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = """
import os, chex, jax
from traversal_helpers import SPEC, TINY, networks, options
from lc_cfr.traversal import lockstep
OPTIMISATIONS_OFF = os.environ.get("JAX_DISABLE_MOST_OPTIMIZATIONS", "0") != "0"
assert jax.local_device_count() == 4, jax.devices()
chex.assert_devices_available(4, "cpu")
STATS = ("nodes", "terminals", "truncations", "endpoint_depth_sum", "policy_calls")
WORK = ("nodes", "policy_calls")  # each device's share sums to the single-device figure
LOOP = ("steps", "forward_batches")  # each device's own loop: they sum to the run's
nets = networks(seed=3)
# One mode of each sampling: the mesh code is the same for all, and each mode costs two
# or three compiles of the traversal.
MODES = {
    # external sampling at a sampled expansion with value leaves (their checked
    # traversals start first)
    "sampled": dict(
        sampling_mode="external", expand_at="sampled", max_depth=1, leaf_decisions=2,
        leaf_check_share=0.5,
    ),
    # outcome sampling with its baseline estimator
    "baseline": dict(
        sampling_mode="outcome", outcome_estimator="baseline", outcome_sampling_value_clip=0.0
    ),
}
for mode, overrides in MODES.items():
    # the baseline's targets are off the dyadic grid: compiled as users compile them
    jax.config.update("jax_disable_most_optimizations", OPTIMISATIONS_OFF and mode != "baseline")
    jax.clear_caches()
    opts = options(traversals_per_player=8, **overrides)
    run = lambda n: lockstep.run_traversals(
        TINY, SPEC, opts, nets, lanes=4, seed=5, iteration=2, traverser=1, devices=n,
        per_device=True)
    one, one_stats, one_devices = jax.device_get(run(1))
    for name in WORK + LOOP:  # one device: its share is the whole
        assert getattr(one_devices, name).tolist() == [int(getattr(one_stats, name))], name
    for n in (2, 4) if mode == "sampled" else (4,):
        samples, stats, devices = run(n)
        # the whole result is on this process's first device, ready for the learner
        leaves = jax.tree.leaves((samples, stats, devices))
        assert all(x.devices() == {jax.devices()[0]} for x in leaves), mode
        samples, stats, devices = jax.device_get((samples, stats, devices))
        for name in WORK + LOOP:  # every device worked, and the shares add up
            share = getattr(devices, name)
            assert share.shape == (n,) and share.min() > 0, (mode, n, name, share)
            assert share.sum() == getattr(stats, name), (mode, n, name, share)
        for name in WORK:
            assert getattr(devices, name).sum() == getattr(one_stats, name), (mode, n, name)
        chex.assert_trees_all_equal(one, samples, custom_message=f"{mode} on {n}")
        chex.assert_trees_all_equal(
            {name: int(getattr(one_stats, name)) for name in STATS},
            {name: int(getattr(stats, name)) for name in STATS},
            custom_message=f"{mode} on {n}",
        )
    assert one.advantage_valid.any()
jax.config.update("jax_disable_most_optimizations", OPTIMISATIONS_OFF)
jax.clear_caches()
try:
    lockstep.run_traversals(TINY, SPEC, options(traversals_per_player=6), nets,
                            lanes=6, seed=5, iteration=2, traverser=1)
    raise SystemExit("6 traversals over 4 devices should be refused")
except ValueError as error:
    assert "traversal.traversals_per_player" in str(error)
print("SHARDING OK")
"""


EVAL_SCRIPT = """
import chex, jax
from traversal_helpers import SPEC, TINY, networks
from lc_cfr.eval import games
assert jax.local_device_count() == 4, jax.devices()
nets = networks(seed=4)  # dyadic weights: forwards exact at every batch width
AGENTS = {
    "current_greedy": (games.network_agent("current"), nets.advantage),
    "average_sampled": (games.network_agent("average_strategy", "sampled"), nets.strategy),
    "bot": (games.bot_agent("safe_heuristic"), None),
}
for name, (agent, params) in AGENTS.items():
    # 7 deals: 4 devices play blocks of 2 and the eighth deal is dropped
    play = lambda n, lanes: games.play(TINY, SPEC, agent, "noisy_safe", params, games=14,
                                       seed=9, lanes=lanes, first_deal=3, devices=n)
    one = play(1, 8)
    assert one.records.decisions.min() > 0, name
    assert one.device_rows == (one.rows,), name
    for n, lanes in ((2, 8), (4, 16)) if name == "current_greedy" else ((4, 16),):
        result = play(n, lanes)
        chex.assert_trees_all_equal(
            one.records._asdict(), result.records._asdict(), custom_message=f"{name} on {n}")
        assert result.half_lanes == max(1, min(lanes // 2 // n, -(-7 // n))) * n
        # every device ran its own loop over agent rows, and the rows add up
        assert len(result.device_rows) == n and min(result.device_rows) > 0, (name, n)
        assert sum(result.device_rows) == result.rows, (name, n)
        # device d played deals d B ... (d + 1) B - 1: its games' decisions are its share
        block = -(-7 // n)
        shares = [int(result.records.decisions[:, d * block : (d + 1) * block].sum())
                  for d in range(n)]
        assert min(shares) > 0 and sum(shares) == int(one.records.decisions.sum()), shares
print("EVAL SHARDING OK")
"""


# Runs each (name, script) of SCRIPTS in its own namespace, every one even if an earlier
# one failed (its traceback goes to stderr), and exits non-zero if any failed.
RUNNER = """
import linecache, sys, traceback
failed = []
for name, script in SCRIPTS:
    linecache.cache[name] = (len(script), None, script.splitlines(True), name)  # tracebacks
    try:
        exec(compile(script, name, "exec"), {"__name__": "__main__"})
    except BaseException:
        print(f"--- {name} failed:", file=sys.stderr)
        traceback.print_exc()
        failed.append(name)
sys.exit(f"failed: {failed}" if failed else 0)
"""


def _run_on_four_devices(*scripts: tuple[str, str]) -> str:
    """Runs the (name, script) pairs in one subprocess on four CPU devices; its stdout."""
    script = f"SCRIPTS = {list(scripts)!r}\n" + RUNNER
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
        LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"),
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()[-6000:]
    return done.stdout.decode()


def test_sharded_lanes_and_evaluation_games_equal_single_device():
    """Lanes: every sampling mode's samples and statistics are the single-device ones.
    Evaluation: every game's record (margin, scores, decisions, action counts,
    expeditions) is the single-device one, for network agents (greedy and sampled) and a
    bot agent against a bot that draws noise, over 4 devices (and 2 for one agent), with
    a deal count neither divides."""
    lines = _run_on_four_devices(("lanes", SCRIPT), ("evaluation", EVAL_SCRIPT)).splitlines()
    assert "SHARDING OK" in lines and "EVAL SHARDING OK" in lines, lines
