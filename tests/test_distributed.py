"""Several processes training one run (lc_cfr.train.distributed, docs/scaling.md).

The end-to-end test starts two trainer processes on localhost (CPU collectives over
gloo), each with two forced host devices, so the traversal and evaluation mesh spans four
devices in two processes. They train the smoke config for one iteration, stop, and a
second pair resumes the run for the second iteration (process 0 reads the checkpoint and
hands the state to process 1). A single process with one device trains the same config
for two iterations at once. Every array of the two runs' last checkpoints (networks,
optimiser states, memories: the samples of both iterations) and every metric that does
not count per device or time something must be equal, and process 1 must have written
nothing. The per-device counters must show that the work was spread: each of the four
devices (two a process) took decisions, forwarded states and ran its loop, and their
shares sum to the single device's figures; both processes of the second pair must log
that they resumed from checkpoint 1.
"""

import json
import os
import pathlib
import re
import socket
import subprocess

import ml_collections
import pytest
from cli_helpers import assert_same_checkpoints, smoke_main
from config_helpers import default_config

from lc_cfr.train import distributed
from lc_cfr.traversal import sharding

ROOT = pathlib.Path(__file__).resolve().parent.parent

# Metrics that time something, or count per device (each device's loop steps and
# batches its own forwards), and so depend on the machine or the topology.
TOPOLOGY_METRICS = (
    "seconds",
    "per_second",
    "steps",
    "forward_batches",
    "realised_batch_size",
    "lane_utilisation",
)
# Per-device counters (`traversal/<name>_device<d>`, docs/scaling.md), checked apart:
# decisions and forwarded states sum to the single device's figures, loop steps to the
# run's own total.
DEVICE_KEY = re.compile(rf"traversal/(\w+){sharding.DEVICE_SUFFIX}(\d+)")
WORK = ("nodes", "policy_calls")


def _config(**distributed_fields) -> ml_collections.ConfigDict:
    config = default_config.get_config("smoke")
    config.distributed.update(distributed_fields)
    return config


def test_one_process_by_default():
    assert distributed.settings_from_config(_config()) is None
    assert not distributed.initialize(_config())


@pytest.mark.parametrize(
    "fields, named",
    [
        (dict(num_processes=2), "distributed.num_processes"),
        (dict(coordinator_address="localhost"), "distributed.coordinator_address"),
        (dict(coordinator_address="h:1", num_processes=0), "distributed.num_processes"),
        (dict(coordinator_address="h:1", num_processes=2, process_id=2), "process_id"),
        (dict(coordinator_address="h:1", initialization_timeout=0), "initialization_timeout"),
    ],
)
def test_bad_settings_name_the_field(fields, named):
    with pytest.raises(ValueError, match=named):
        distributed.settings_from_config(_config(**fields))


def test_settings_need_the_jax_backend():
    config = _config(coordinator_address="h:1", num_processes=2, process_id=1)
    assert distributed.settings_from_config(config) == distributed.DistributedSettings(
        "h:1", 2, 1, 300
    )
    config.traversal.backend = "recursive"
    with pytest.raises(ValueError, match="traversal.backend"):
        distributed.settings_from_config(config)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _command(workdir: pathlib.Path, iterations: int, *extra: str) -> list[str]:
    return smoke_main(
        workdir,
        f"--config.run.max_iterations={iterations}",
        "--config.evaluation.eval_every=2",  # the sharded evaluation runs at iteration 2
        # one view: a second is a second compile in every process, and the current view
        # sharded is tests/test_sharding.py's (current_greedy)
        "--config.evaluation.views=average_strategy",
        *extra,
    )


def _train_pair(
    workdir: pathlib.Path, other: pathlib.Path, iterations: int, env: dict
) -> list[str]:
    """Process 0 trains in `workdir`, process 1 is pointed at `other`; their stderr."""
    address = f"--config.distributed.coordinator_address=localhost:{_free_port()}"
    processes = [
        subprocess.Popen(
            _command(
                directory,
                iterations,
                address,
                "--config.distributed.num_processes=2",
                f"--config.distributed.process_id={rank}",
            ),
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for rank, directory in enumerate((workdir, other))
    ]
    try:
        outputs = [process.communicate(timeout=600) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for rank, (process, (_, stderr)) in enumerate(zip(processes, outputs, strict=True)):
        assert process.returncode == 0, f"process {rank}:\n{stderr.decode()[-3000:]}"
    return [stderr.decode() for _, stderr in outputs]


def _rows(workdir: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]


def _comparable(row: dict) -> dict:
    return {
        k: v
        for k, v in row.items()
        if not DEVICE_KEY.fullmatch(k) and not any(part in k for part in TOPOLOGY_METRICS)
    }


def _device_shares(row: dict) -> dict[str, list[int]]:
    """{name: [device 0's count, device 1's, ...]} of a row's per-device counters."""
    shares: dict[str, dict[int, int]] = {}
    for key, value in row.items():
        if found := DEVICE_KEY.fullmatch(key):
            shares.setdefault(found.group(1), {})[int(found.group(2))] = value
    return {name: [by[d] for d in sorted(by)] for name, by in shares.items()}


@pytest.mark.slow
@pytest.mark.xla_optimized  # one process and two compile their programs alike only so
def test_two_processes_train_the_single_process_run(tmp_path):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    env.pop("XLA_FLAGS", None)
    single = tmp_path / "single"
    done = subprocess.run(_command(single, 2), cwd=ROOT, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    shared, other = tmp_path / "shared", tmp_path / "process1"
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    _train_pair(shared, other, 1, env)
    # resumes: process 1 receives process 0's state
    for rank, stderr in enumerate(_train_pair(shared, other, 2, env)):
        assert "resuming from checkpoint 1 " in stderr, f"process {rank}:\n{stderr[-3000:]}"
    assert not other.exists(), "process 1 wrote its --workdir"

    assert_same_checkpoints(single, shared, 2)
    single_rows, shared_rows = _rows(single), _rows(shared)
    assert [row["iteration"] for row in shared_rows] == [1, 2]
    assert any(key.startswith("eval/") for key in shared_rows[1])
    for one, two in zip(single_rows, shared_rows, strict=True):
        one, two, t = _comparable(one), _comparable(two), one["iteration"]
        differing = {k: (one.get(k), two.get(k)) for k in one | two if one.get(k) != two.get(k)}
        assert not differing, f"iteration {t}: {differing}"
    # every device of both processes (mesh order: process 0's two devices, then process
    # 1's) did its share, and the shares add up to the single device's work
    for one, two in zip(single_rows, shared_rows, strict=True):
        alone, spread, t = _device_shares(one), _device_shares(two), one["iteration"]
        assert set(alone) == set(spread) >= {*WORK, "steps"}, (t, alone, spread)
        for name, counts in alone.items():
            assert counts == [one[f"traversal/{name}"]], (t, name, counts)
        for name, counts in spread.items():
            assert len(counts) == 4 and min(counts) > 0, (t, name, counts)
            assert sum(counts) == two[f"traversal/{name}"], (t, name, counts)
        for name in WORK:
            assert sum(spread[name]) == one[f"traversal/{name}"], (t, name, spread[name])
