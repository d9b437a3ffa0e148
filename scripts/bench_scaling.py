"""Traversal throughput of the `jax` backend over 1, 2, 4 devices and 1, 2 processes.

Every setting runs in fresh subprocesses: D forced host devices in one process
(XLA_FLAGS=--xla_force_host_platform_device_count=D), or P processes on localhost joined
by `jax.distributed` (CPU collectives over gloo), each with --devices-per-process forced
devices. Each setting builds the rules, network shape, traversal options and lanes from
the config exactly as the trainer does (lc_cfr.train.setup.*_from_config), gives the
networks random parameters, and calls `lockstep.run_traversals` over every device of the
run (lc_cfr.traversal.sharding): one untimed call (compilation), then --repeats timed
calls, traversers alternating. The figure is nodes per second (traversal decisions,
stats.nodes, per wall-clock second of a call, its gather of the samples included), the
median over the repeats (the lower median for an even count); the speed-up is the
setting's nodes/s over the first setting's, both of this run, stored with its parts and
the spread over calls paired by index (`speedup_record`, scripts/bench_common.py; JSON
schema 2 since issue 21, schema 1 files held the quotient alone).

    .venv/bin/python scripts/bench_scaling.py [--config configs/default.py:small] \
        [--devices 1,2,4] [--processes 1,2] [--repeats 3] [--traversals N] [--lanes N] \
        [--json out.json]

On a host with accelerators the forced host devices are not used: `--devices 1,2,4`
then compares the first 1, 2 and 4 of its GPUs (the process settings, whose processes
would all see every GPU, are meant for CPUs: pass `--processes 1` there). Forced host
devices are slices of one CPU: they share its cores (XLA's CPU client runs every
device's programs on one thread pool), so on a machine with few cores the figures show
the cost of the sharding (the gather, the per-device loops waiting for the longest one),
not a speed-up; docs/scaling.md says what they can and cannot show. Take the real
measurement on separate accelerators or hosts.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import bench_common  # noqa: E402

DEFAULT_CONFIG = f"{ROOT / 'configs' / 'default.py'}:small"
RESULT = "BENCH_SCALING_RESULT "


# ----- one setting (a worker process) ------------------------------------------------


def worker(args) -> None:
    """Times the traversal on every device of this run; process 0 prints the result."""
    import jax

    if args.coordinator:
        jax.distributed.initialize(
            coordinator_address=args.coordinator,
            num_processes=args.num_processes,
            process_id=args.process_id,
            initialization_timeout=120,
        )
    import jax.numpy as jnp

    from lc_cfr.nets import mlp
    from lc_cfr.train.setup import options_from_config, rules_from_config, spec_from_config
    from lc_cfr.traversal import api, lockstep

    config = bench_common.load_config(args.config)
    if args.traversals:
        config.traversal.traversals_per_player = args.traversals
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    options = options_from_config(config)
    lanes = args.lanes or config.traversal.lanes
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    adv0, adv1, strategy = (mlp.init_params(spec, k) for k in keys)
    networks = api.Networks(
        advantage=(adv0, adv1),
        strategy=strategy,
        league=jax.tree.map(lambda x: x[None], strategy),
        league_count=jnp.int32(1),
    )
    if api.uses_value_network(options):
        value = mlp.init_params(api.value_spec(rules, spec), jax.random.PRNGKey(1))
        networks = networks._replace(value=value)

    def call(iteration: int):
        start = time.perf_counter()
        samples, stats = lockstep.run_traversals(
            rules,
            spec,
            options,
            networks,
            lanes=lanes,
            seed=0,
            iteration=iteration,
            traverser=iteration % 2,
            devices=args.use_devices or None,
        )
        jax.block_until_ready(samples)
        return time.perf_counter() - start, int(stats.nodes)

    compile_seconds, _ = call(1)
    timed = [call(2 + r) for r in range(args.repeats)]
    rates = [nodes / seconds for seconds, nodes in timed]
    used = args.use_devices or jax.device_count()
    if jax.process_index() == 0:
        result = {
            "processes": jax.process_count(),
            "devices": used,
            "local_devices": used // jax.process_count(),
            "lanes": lanes,
            "lanes_per_device": lanes // used,
            "traversals_per_call": options.traversals_per_player,
            "first_call_seconds": compile_seconds,
            "seconds_per_call": statistics.median(s for s, _ in timed),
            "nodes_per_call": statistics.median(n for _, n in timed),
            "nodes_per_second": bench_common.median_of(rates),
            "nodes_per_second_per_call": rates,
        }
        print(RESULT + json.dumps(result), flush=True)


# ----- the side-by-side run --------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _worker_command(args, *extra: str) -> list[str]:
    command = [sys.executable, __file__, "--worker", "--config", args.config]
    command += ["--repeats", str(args.repeats)]
    if args.traversals:
        command += ["--traversals", str(args.traversals)]
    if args.lanes:
        command += ["--lanes", str(args.lanes)]
    return command + list(extra)


def _env(devices: int) -> dict:
    env = dict(os.environ, XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


def run_setting(args, processes: int, devices_per_process: int) -> dict:
    """One setting in fresh subprocesses; the result process 0 printed."""
    env = _env(devices_per_process)
    if processes == 1:
        commands = [_worker_command(args, "--use-devices", str(devices_per_process))]
    else:
        address = f"localhost:{_free_port()}"
        commands = [
            _worker_command(
                args,
                "--coordinator",
                address,
                "--num-processes",
                str(processes),
                "--process-id",
                str(rank),
            )
            for rank in range(processes)
        ]
    children = [
        subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for command in commands
    ]
    try:
        outputs = [child.communicate(timeout=args.timeout) for child in children]
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    for rank, (child, (_, stderr)) in enumerate(zip(children, outputs, strict=True)):
        if child.returncode:
            raise SystemExit(
                f"{processes} process(es) x {devices_per_process} device(s): process {rank} "
                f"failed:\n{stderr[-3000:]}"
            )
    lines = [line for line in outputs[0][0].splitlines() if line.startswith(RESULT)]
    if not lines:
        raise SystemExit(f"no result from process 0:\n{outputs[0][1][-3000:]}")
    return json.loads(lines[-1][len(RESULT) :])


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="config file[:preset]")
    parser.add_argument("--devices", default="1,2,4", help="forced host devices, one process")
    parser.add_argument("--processes", default="1,2", help="processes on localhost")
    parser.add_argument("--devices-per-process", type=int, default=1, help="with --processes")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per setting")
    parser.add_argument("--traversals", type=int, default=0, help="quota per call (config's)")
    parser.add_argument("--lanes", type=int, default=0, help="lanes in all (config's)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per setting")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", default="", help=argparse.SUPPRESS)
    parser.add_argument("--num-processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--use-devices", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    settings = [(1, d) for d in _ints(args.devices)]
    settings += [(p, args.devices_per_process) for p in _ints(args.processes) if p > 1]
    results = []
    for processes, devices in settings:
        result = run_setting(args, processes, devices)
        results.append(result)
        print(
            f"{result['processes']} process(es) x {result['local_devices']} device(s): "
            f"{result['nodes_per_second']:,.0f} nodes/s "
            f"({result['seconds_per_call']:.2f} s a call, {result['lanes_per_device']} lanes "
            f"a device, first call {result['first_call_seconds']:.1f} s)",
            flush=True,
        )
    base = results[0]
    for result in results:
        record = bench_common.ratio(
            result["nodes_per_second_per_call"],
            base["nodes_per_second_per_call"],
            numerator_is=f"{result['processes']} x {result['devices']} nodes/s",
            denominator_is=f"{base['processes']} x {base['devices']} nodes/s",
            rounds_are="call i of each setting; settings run one after the other",
        )
        result["speedup_record"] = record
        result["speedup"] = record["value"]
    print("\nprocesses  devices  nodes/s        speed-up")
    for r in results:
        rate = f"{r['nodes_per_second']:>13,.0f}"
        print(f"{r['processes']:>9}  {r['devices']:>7}  {rate}  {r['speedup']:.4f}")
    for r in results[1:]:
        print(bench_common.describe(r["speedup_record"], "speed-up"))
    if args.json:
        report = {
            "schema": 2,
            "config": args.config,
            "repeats": args.repeats,
            "machine": {
                "cpu_count": os.cpu_count(),
                "platform": platform.platform(),
                "python": platform.python_version(),
            },
            "note": "forced host devices and localhost processes share this machine's cores",
            "results": results,
        }
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
