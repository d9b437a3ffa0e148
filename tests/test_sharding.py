"""Lanes sharded over several JAX devices give the single-device samples and statistics.

Runs in a subprocess with XLA_FLAGS=--xla_force_host_platform_device_count=4, so the
CPU shows four devices (chex.assert_devices_available checks them). The sharded and the
single-device runs are compared bit for bit with `chex.assert_trees_all_equal`: the
whole Samples pytree at once (a failure names the field) and the statistics as a dict.
"""

import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent

SCRIPT = """
import chex, jax
from traversal_helpers import SPEC, TINY, networks, options
from lc_cfr.traversal import lockstep
assert jax.local_device_count() == 4, jax.devices()
chex.assert_devices_available(4, "cpu")
STATS = ("nodes", "terminals", "truncations", "endpoint_depth_sum", "policy_calls")
nets = networks(seed=3)
for mode in ("outcome", "external"):
    opts = options(sampling_mode=mode, num_traversals=8)
    run = lambda n: jax.device_get(lockstep.run_traversals(
        TINY, SPEC, opts, nets, lanes=4, seed=5, iteration=2, traverser=1, devices=n))
    (one, one_stats), (four, four_stats) = run(1), run(4)
    chex.assert_trees_all_equal(one, four, custom_message=mode)
    chex.assert_trees_all_equal(
        {name: int(getattr(one_stats, name)) for name in STATS},
        {name: int(getattr(four_stats, name)) for name in STATS},
        custom_message=mode,
    )
    assert one.advantage_valid.any()
try:
    lockstep.run_traversals(TINY, SPEC, options(num_traversals=6), nets,
                            lanes=6, seed=5, iteration=2, traverser=1)
    raise SystemExit("6 traversals over 4 devices should be refused")
except ValueError as error:
    assert "traversal.traversals_per_player" in str(error)
print("SHARDING OK")
"""


def test_sharded_lanes_equal_single_device():
    env = dict(
        os.environ,
        XLA_FLAGS="--xla_force_host_platform_device_count=4",
        PYTHONPATH=os.pathsep.join([str(ROOT / "tests"), str(ROOT)]),
        LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"),
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"SHARDING OK" in done.stdout
