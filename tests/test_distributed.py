"""Several processes training one run (lc_cfr.train.distributed, docs/scaling.md).

The end-to-end test starts two trainer processes on localhost (CPU collectives over
gloo), each with two forced host devices, so the traversal and evaluation mesh spans four
devices in two processes. They train the smoke config for one iteration, stop, and a
second pair resumes the run for the second iteration (process 0 reads the checkpoint and
hands the state to process 1). A single process with one device trains the same config
for two iterations at once. Every array of the two runs' last checkpoints (networks,
optimiser states, memories: the samples of both iterations) and every metric that does
not count per device or time something must be equal, and process 1 must have written
nothing.
"""

import json
import os
import pathlib
import socket
import subprocess
import sys

import ml_collections
import numpy as np
import pytest
from cli_helpers import smoke_main

from lc_cfr.train import checkpoint, distributed

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "configs"))
import default as default_config  # noqa: E402

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
        *extra,
    )


def _train_pair(workdir: pathlib.Path, other: pathlib.Path, iterations: int, env: dict) -> None:
    """Process 0 trains in `workdir`, process 1 is pointed at `other`."""
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


def _rows(workdir: pathlib.Path) -> list[dict]:
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    return [
        {k: v for k, v in row.items() if not any(part in k for part in TOPOLOGY_METRICS)}
        for row in rows
    ]


@pytest.mark.slow
def test_two_processes_train_the_single_process_run(tmp_path):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    env.pop("XLA_FLAGS", None)
    single = tmp_path / "single"
    done = subprocess.run(_command(single, 2), cwd=ROOT, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()[-3000:]

    shared, other = tmp_path / "shared", tmp_path / "process1"
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    _train_pair(shared, other, 1, env)
    _train_pair(shared, other, 2, env)  # resumes: process 1 receives process 0's state
    assert not other.exists(), "process 1 wrote its --workdir"

    stores = [
        checkpoint.CheckpointStore(d / "checkpoints", read_only=True) for d in (single, shared)
    ]
    try:
        (expected, _), (found, _) = (store.load(2) for store in stores)
    finally:
        for store in stores:
            store.close()
    assert expected.keys() == found.keys()
    assert any(key.startswith("advantage_memory_0/") for key in found)
    differing = [key for key in expected if not np.array_equal(expected[key], found[key])]
    assert not differing, differing
    single_rows, shared_rows = _rows(single), _rows(shared)
    assert [row["iteration"] for row in shared_rows] == [1, 2]
    assert any(key.startswith("eval/") for key in shared_rows[1])
    for one, two in zip(single_rows, shared_rows, strict=True):
        differing = {k: (one.get(k), two.get(k)) for k in one | two if one.get(k) != two.get(k)}
        assert not differing, f"iteration {one['iteration']}: {differing}"
