"""What a checkpoint costs the training loop: the format before orbax against orbax's
CheckpointManager, synchronous and asynchronous (checkpoint.asynchronous).

Builds a checkpoint shaped as the trainer's for the config (`configs/default.py`): the
networks and their AdamW states (`networks` and `state` items) and the two advantage
memories and the strategy memory filled with `--rows` random rows each (float16
encodings, bool masks, float32 targets, int32 iterations: what `Reservoir` stores).
Each variant saves it `--repeats` times to a fresh directory under `--dir`:

* `npz`: the format before orbax, `np.savez` of every array + fsync + rename (what the
  trainer did until orbax; all of it blocks the loop);
* `orbax_sync`: `CheckpointStore(asynchronous=False)`: the save blocks until on disk;
* `orbax_async`: `CheckpointStore(asynchronous=True)`: `blocking` is what the loop pays
  (`checkpoint_seconds`), `total` when the write and the checksums are done.

Prints the median seconds per variant (the lower median for an even count) and the
ratio of each blocking time to `npz`'s, stored with its parts and the spread over the
saves (scripts/bench_common.py). JSON schema 2 (since issue 21) adds the per-save
seconds and `blocking_vs_npz_record`; schema 1 files (no `schema` field) held medians.

    .venv/bin/python scripts/bench_checkpoint.py [--rows 500000] [--repeats 3] \\
        [--dir /tmp/lc_cfr_bench_ckpt] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

import jax
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402

from configs import default as default_config  # noqa: E402
from lc_cfr.learn import make_optimizer  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.train import checkpoint  # noqa: E402
from lc_cfr.train.setup import rules_from_config, spec_from_config  # noqa: E402


def flat(name: str, tree) -> dict[str, np.ndarray]:
    return {
        name + jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def build(config, rows: int, seed: int = 0) -> tuple[dict, dict]:
    """(networks, state) arrays shaped as the trainer's checkpoint of `config`."""
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    optimizer = make_optimizer(learning_rate=1e-3, weight_decay=0.0, grad_clip=1.0)
    params = [mlp.init_params(spec, jax.random.PRNGKey(k)) for k in range(3)]
    networks = {}
    state = {}
    names = ("advantage_params[0]", "advantage_params[1]", "strategy_params")
    for name, p in zip(names, params, strict=True):
        networks.update(flat(name, p))
        state.update(flat(name.replace("params", "opt"), optimizer.init(p)))
    rng = np.random.default_rng(seed)
    actions = spec.num_actions
    for memory in ("advantage_memory_0", "advantage_memory_1", "strategy_memory"):
        state[f"{memory}/info"] = rng.integers(0, 2, (rows, spec.input_size)).astype(np.float16)
        state[f"{memory}/mask"] = rng.random((rows, actions)) < 0.3
        state[f"{memory}/target"] = rng.normal(size=(rows, actions)).astype(np.float32)
        state[f"{memory}/iteration"] = rng.integers(1, 100, rows).astype(np.int32)
        for counter in ("size", "seen"):
            state[f"{memory}/{counter}"] = np.asarray(rows, np.int32)
        state[f"{memory}/capacity"] = np.asarray(config.memory.advantage_capacity, np.int64)
    return networks, state


def save_npz(directory: pathlib.Path, step: int, networks: dict, state: dict) -> None:
    """The format before orbax: one uncompressed npz, fsynced, renamed into place."""
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=directory))
    with open(staging / "arrays.npz", "wb") as f:
        np.savez(f, **networks, **state)
        f.flush()
        os.fsync(f.fileno())
    os.rename(staging, directory / f"ckpt_{step:08d}")


def run(variant: str, directory: pathlib.Path, networks, state, repeats: int) -> dict:
    blocking, total = [], []
    for step in range(1, repeats + 1):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        if variant == "npz":
            start = time.perf_counter()
            save_npz(directory, step, networks, state)
            blocking.append(time.perf_counter() - start)
            total.append(blocking[-1])
            continue
        store = checkpoint.CheckpointStore(directory, asynchronous=variant == "orbax_async")
        start = time.perf_counter()
        store.save(step, networks, state, {})
        blocking.append(time.perf_counter() - start)
        store.wait()
        total.append(time.perf_counter() - start)
        store.close()
    shutil.rmtree(directory, ignore_errors=True)
    return {
        "blocking_seconds": bench_common.median_of(blocking),
        "total_seconds": bench_common.median_of(total),
        "blocking_seconds_per_save": blocking,
        "total_seconds_per_save": total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000, help="rows in each of 3 memories")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "lc_cfr_bench_ckpt"))
    parser.add_argument("--variants", default="npz,orbax_sync,orbax_async")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    config = default_config.get_config("wide")  # the sizes the recorded figures used
    networks, state = build(config, args.rows)
    size = sum(a.nbytes for a in (*networks.values(), *state.values()))
    results = {}
    for variant in args.variants.split(","):
        results[variant] = run(
            variant, pathlib.Path(args.dir) / variant, networks, state, args.repeats
        )
    base = results.get("npz", {}).get("blocking_seconds_per_save")
    print(f"checkpoint of {size / 1e9:.2f} GB ({args.rows} rows in each of 3 memories)")
    print(f"{'variant':<12} {'blocking s':>10} {'total s':>8} {'GB/s':>6} {'blocking / npz':>15}")
    for variant, figures in results.items():
        if base:
            record = bench_common.ratio(
                figures["blocking_seconds_per_save"],
                base,
                numerator_is=f"{variant} blocking seconds",
                denominator_is="npz blocking seconds",
                rounds_are="save i of each variant; the variants run one after the other",
            )
            figures["blocking_vs_npz_record"] = record
            figures["blocking_vs_npz"] = record["value"]
        rate = size / 1e9 / figures["total_seconds"]
        ratio = f"{figures['blocking_vs_npz']:.4f}" if base else "-"
        print(
            f"{variant:<12} {figures['blocking_seconds']:>10.3f} {figures['total_seconds']:>8.3f}"
            f" {rate:>6.2f} {ratio:>15}"
        )
    if args.json:
        report = {
            "schema": 2,
            "rows": args.rows,
            "bytes": size,
            "repeats": args.repeats,
            "results": results,
        }
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
