"""Training speed of the optax and torch learners side by side (optimization.learner).

Builds the advantage learner of the config exactly as the trainer does
(`lc_cfr.train.trainer.learner_from_config`) for each variant, `optax`, `torch`, `torch+amp`
(run.use_amp: bfloat16 autocast) and `torch+compile` (run.torch_compile), fills one
reservoir memory with `--rows` random rows, and times `train` calls of `--updates`
updates of the config's batch size from the same start. One untimed call first
(XLA compilation, torch.compile). Prints updates per second, seconds per call, the ratio
to optax, and the last loss (the float32 variants agree to rounding; amp does not).

    .venv/bin/python scripts/bench_learner.py [--config configs/default.py] \\
        [--variants optax,torch,torch+amp,torch+compile] [--updates 64] [--repeats 3] \\
        [--rows 200000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import torch

from lc_cfr.memory import reservoir
from lc_cfr.train.trainer import learner_from_config, rules_from_config, spec_from_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_traversal import DEFAULT_CONFIG, load_config  # noqa: E402


def random_memory(rows: int, capacity: int, encoding: int, actions: int, seed: int):
    """A reservoir holding `rows` random samples (dyadic info, random masks and targets)."""
    rng = np.random.default_rng(seed)
    memory = reservoir.reservoir_init(
        capacity=capacity, encoding_size=encoding, num_actions=actions
    )
    info = rng.integers(0, 4, (rows, encoding)).astype(np.float16) / 4
    mask = rng.random((rows, actions)) < 0.4
    mask[:, -1] = True
    target = np.where(mask, rng.normal(size=(rows, actions)), 0).astype(np.float32)
    iteration = rng.integers(1, 50, rows).astype(np.int32)
    return memory._replace(
        info=memory.info.at[:rows].set(jnp.asarray(info)),
        mask=memory.mask.at[:rows].set(jnp.asarray(mask)),
        target=memory.target.at[:rows].set(jnp.asarray(target)),
        iteration=memory.iteration.at[:rows].set(jnp.asarray(iteration)),
        size=jnp.asarray(rows, memory.size.dtype),
        seen=jnp.asarray(rows, memory.seen.dtype),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="path[:preset]")
    parser.add_argument("--variants", default="optax,torch,torch+amp,torch+compile")
    parser.add_argument("--updates", type=int, default=64, help="updates per timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000, help="filled memory rows")
    parser.add_argument("--json", help="write the figures to this path")
    args = parser.parse_args()

    config = load_config(args.config)
    config.optimization.advantage_updates = args.updates
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    memory = random_memory(
        args.rows, args.rows, rules.encoding_size, rules.num_actions, int(config.seed)
    )
    batch = config.optimization.advantage_batch_size
    print(
        f"{args.config}: network {spec.hidden_size}x{spec.num_layers}, batch {batch}, "
        f"{args.updates} updates per call, {args.rows} rows; jax {jax.__version__}, torch "
        f"{torch.__version__} ({torch.get_num_threads()} threads), {os.cpu_count()} CPUs",
        flush=True,
    )
    rows = []
    for variant in args.variants.split(","):
        name, *extras = variant.split("+")
        config.optimization.learner = name
        config.run.use_amp = "amp" in extras
        config.run.torch_compile = "compile" in extras
        learner = learner_from_config(config, spec, "advantage")
        params, opt_state = learner.init(jax.random.PRNGKey(1))
        key = jax.random.PRNGKey(2)
        start = time.perf_counter()
        jax.block_until_ready(learner.train(params, opt_state, memory, key))
        first = time.perf_counter() - start
        seconds, losses = [], []
        for i in range(args.repeats):
            start = time.perf_counter()
            _, _, metrics = jax.block_until_ready(
                learner.train(params, opt_state, memory, jax.random.PRNGKey(3 + i))
            )
            seconds.append(time.perf_counter() - start)
            losses.append(float(metrics["loss_last"]))
        row = {
            "variant": variant,
            "first_call_seconds": first,
            "seconds_per_call": statistics.median(seconds),
            "updates_per_second": args.updates / statistics.median(seconds),
            "last_losses": losses,
        }
        rows.append(row)
        print(
            f"  {variant}: {row['updates_per_second']:.1f} updates/s (first call {first:.1f}s)",
            flush=True,
        )
    base = next((r for r in rows if r["variant"] == "optax"), rows[0])
    print(f"\n{'variant':>15}{'s/call':>9}{'updates/s':>11}{'vs optax':>10}{'last loss':>12}")
    for r in rows:
        r["ratio_to_optax"] = r["updates_per_second"] / base["updates_per_second"]
        print(
            f"{r['variant']:>15}{r['seconds_per_call']:>9.2f}{r['updates_per_second']:>11.1f}"
            f"{r['ratio_to_optax']:>10.2f}{r['last_losses'][0]:>12.6f}"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                    "config": args.config,
                    "batch_size": batch,
                    "updates_per_call": args.updates,
                    "rows": args.rows,
                    "results": rows,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
