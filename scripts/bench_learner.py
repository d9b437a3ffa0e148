"""Training speed of the optax and torch learners side by side (optimization.learner).

Builds the advantage learner of the config exactly as the trainer does
(`lc_cfr.train.setup.learner_from_config`) for each variant, `optax`, `optax+bf16`
(network.compute_dtype='bfloat16'), `torch`, `torch+bf16`, `torch+amp` (run.use_amp:
bfloat16 autocast) and `torch+compile` (run.torch_compile), and `bare` (`BareStep`: the
optax step on one fixed batch, no memory: the limit the learner is held to). It fills
one reservoir memory of `--capacity` rows, stored as the trainer stores them
(memory.info_storage, `--storage`), with `--rows` random rows, and times `train` calls
of `--updates` updates of the config's batch size from the same start. One untimed call
first (XLA compilation, torch.compile). The timed calls go round-robin over the variants
(`--repeats` rounds). Prints updates per second (the median call; the lower median for
an even count), the ratio to optax (this variant's updates/s over optax's, both of this
run, with the spread of the ratios within a round: scripts/bench_common.py), the ratio
of every learner to `bare` where it ran, judged against `--goal` (0.95) as measured,
the last batch loss of the first timed call (the same batches for every variant: the
float32 variants agree to rounding, the bfloat16 ones do not), and the float32 loss of
that call's trained parameters on a fixed batch of `--eval-rows` rows drawn from the
memory (what the training achieved, free of the variant's own rounding). The torch
learner implements the slot head only: on a card-head config (the default) its variants
are skipped with a note.

    .venv/bin/python scripts/bench_learner.py [--config configs/default.py] \\
        [--variants optax,optax+bf16,torch,torch+amp,torch+compile] [--updates 64] \\
        [--repeats 3] [--rows 200000] [--capacity 0] [--storage packed] [--goal 0.95] \\
        [--json out.json]

JSON schema 2 (since issue 21): `ratio_to_base` and `ratio_to_bare` are ratio records
(bench_common.ratio: value, numerator, denominator, rounds, spread, goal, goal_met);
schema 1 files (no `schema` field) held `ratio_to_optax`, the median of the per-round
ratios base seconds / variant seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

from lc_cfr.learn.learner import Learner, make_optimizer
from lc_cfr.memory import codec as memory_codec
from lc_cfr.memory import reservoir
from lc_cfr.train.setup import learner_from_config, rules_from_config, spec_from_config

EXTRAS = ("amp", "bf16", "compile")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402
from bench_traversal import DEFAULT_CONFIG  # noqa: E402

# The learner on its memory against the bare step (docs/performance.md, issue 13).
LEARNER_GOAL = 0.95


def random_memory(rows: int, capacity: int, codec, actions: int, seed: int):
    """A reservoir of `capacity` rows holding `rows` random samples stored by `codec`
    (card bits and small integers in the encoding, random masks and targets)."""
    rng = np.random.default_rng(seed)
    chunks = []
    for start in range(0, rows, 65_536):
        info = (rng.random((min(65_536, rows - start), codec.size)) < 0.1).astype(np.float32)
        info[:, -1] = rng.integers(0, 64, info.shape[0]) / 64  # an integer column (turn)
        chunks.append(codec.encode_numpy(info))
    stored = np.zeros((capacity, codec.width), codec.dtype)
    stored[:rows] = np.concatenate(chunks)
    mask = np.zeros((capacity, actions), bool)
    mask[:rows] = rng.random((rows, actions)) < 0.4
    mask[:rows, -1] = True
    target = np.where(mask, rng.normal(size=mask.shape), 0).astype(np.float32)
    iteration = np.zeros(capacity, np.int32)
    iteration[:rows] = rng.integers(1, 50, rows)
    return reservoir.Reservoir(
        info=jnp.asarray(stored),
        mask=jnp.asarray(mask),
        target=jnp.asarray(target),
        iteration=jnp.asarray(iteration),
        size=jnp.int32(rows),
        seen=jnp.int32(rows),
        capacity=jnp.int32(capacity),
    )


class BareStep:
    """The limit a learner is held to: the same loss and optimizer as `learner`, jitted
    as a scan of `num_updates` steps on one fixed float32 batch already on the device (no
    row draws, no gathers from the memory, no decoding)."""

    def __init__(self, learner: Learner, batch):
        self.batch = batch

        # the batch is an argument, not a constant XLA could fold into the step
        def run(params, opt_state, batch):
            def step(carry, _):
                params, opt_state = carry
                loss, grads = jax.value_and_grad(learner.loss)(params, batch)
                updates, opt_state = learner.optimizer.update(grads, opt_state, params)
                return (optax.apply_updates(params, updates), opt_state), loss

            (params, opt_state), losses = jax.lax.scan(
                step, (params, opt_state), None, length=learner.num_updates
            )
            return params, opt_state, {"loss_last": losses[-1]}

        self.init = learner.init
        self._run = jax.jit(run)

    def train(self, params, opt_state, memory, key, span=None):  # the learner's signature
        del memory, key, span  # one fixed batch, a constant rate
        return self._run(params, opt_state, self.batch)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG), help="path[:preset]")
    parser.add_argument("--variants", default="optax,optax+bf16,torch,torch+amp,torch+compile")
    parser.add_argument("--updates", type=int, default=64, help="updates per timed call")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rows", type=int, default=200_000, help="filled memory rows")
    parser.add_argument("--capacity", type=int, default=0, help="memory rows; 0 = --rows")
    parser.add_argument(
        "--storage", default="", help="memory.info_storage (packed | float16); default: config's"
    )
    parser.add_argument(
        "--eval-rows", type=int, default=8192, help="rows drawn for the float32 loss"
    )
    parser.add_argument(
        "--goal", type=float, default=LEARNER_GOAL, help="a learner's ratio to bare at least"
    )
    parser.add_argument("--json", help="write the figures to this path")
    args = parser.parse_args()

    config = bench_common.load_config(args.config)
    config.optimization.advantage_updates = args.updates
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    if args.storage:
        config.memory.info_storage = args.storage
    codec = memory_codec.for_rules(rules, kind=config.memory.info_storage)
    capacity = max(args.capacity, args.rows)
    memory = random_memory(args.rows, capacity, codec, rules.num_actions, int(config.seed))
    batch = config.optimization.advantage_batch_size
    # The yardstick: a float32 loss of trained parameters on fixed rows (same for all).
    f32_spec = dataclasses.replace(spec, compute_dtype="float32")
    judge = Learner(
        f32_spec,
        kind="advantage",
        optimizer=make_optimizer(learning_rate=1.0, weight_decay=0.0, grad_clip=0.0),
        batch_size=1,
        num_updates=1,
        weighting=config.training_weighting.mode,
    )
    eval_rows = min(args.eval_rows, args.rows)
    # drawn as the learners draw (decoded float32 encodings, whatever the memory stores)
    eval_batch = reservoir.reservoir_sample(memory, jax.random.PRNGKey(99), eval_rows, codec=codec)
    judge_loss = jax.jit(judge.loss)
    print(
        f"{args.config}: network {spec.hidden_size}x{spec.num_layers} ({spec.head} head), "
        f"batch {batch}, {args.updates} updates per call, {args.rows} of {capacity} rows "
        f"stored {config.memory.info_storage}; jax "
        f"{jax.__version__}, torch {torch.__version__} ({torch.get_num_threads()} threads), "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    built = []  # (variant, learner, params, opt_state, first-call seconds)
    for variant in args.variants.split(","):
        name, *extras = variant.split("+")
        unknown = sorted(set(extras) - set(EXTRAS))
        if unknown:
            raise SystemExit(f"variant {variant!r}: unknown extra(s) {unknown}; valid {EXTRAS}")
        config.optimization.learner = name
        config.run.use_amp = "amp" in extras
        config.run.torch_compile = "compile" in extras
        config.network.compute_dtype = "bfloat16" if "bf16" in extras else "float32"
        variant_spec = spec_from_config(config, rules)
        try:
            if name == "bare":
                config.optimization.learner = "optax"
                learner = learner_from_config(config, variant_spec, "advantage", codec=codec)
                learner = BareStep(
                    learner,
                    reservoir.reservoir_sample(memory, jax.random.PRNGKey(98), batch, codec=codec),
                )
            else:
                learner = learner_from_config(config, variant_spec, "advantage", codec=codec)
        except ValueError as error:  # e.g. the torch learner on a card-head config
            print(f"  {variant}: skipped ({error})", flush=True)
            continue
        params, opt_state = learner.init(jax.random.PRNGKey(1))
        start = time.perf_counter()
        jax.block_until_ready(learner.train(params, opt_state, memory, jax.random.PRNGKey(2)))
        first = time.perf_counter() - start
        print(f"  {variant}: untimed first call {first:.1f}s", flush=True)
        built.append((variant, learner, params, opt_state, first))
    if not built:
        raise SystemExit("no variant could be built")
    # Round-robin: repeat i times every variant once, so a change in the machine's load
    # during the run weighs on every variant alike (ratios are taken within a round).
    seconds = {variant: [] for variant, *_ in built}
    results = {variant: ([], None) for variant, *_ in built}
    for i in range(args.repeats):
        for variant, learner, params, opt_state, _ in built:
            start = time.perf_counter()
            trained, _, metrics = jax.block_until_ready(
                learner.train(params, opt_state, memory, jax.random.PRNGKey(3 + i))
            )
            seconds[variant].append(time.perf_counter() - start)
            losses, first_trained = results[variant]
            losses.append(float(metrics["loss_last"]))
            results[variant] = (losses, first_trained if first_trained is not None else trained)
    base = "optax" if "optax" in seconds else built[0][0]

    def rates(variant):  # updates per second of each round
        return [args.updates / s for s in seconds[variant]]

    rows = []
    for variant, *_, first in built:
        losses, trained = results[variant]
        rate = bench_common.median_of(rates(variant))
        row = {
            "variant": variant,
            "first_call_seconds": first,
            "seconds": seconds[variant],
            "seconds_per_call": args.updates / rate,
            "updates_per_second": rate,
            # this variant's updates/s over base's, round by round (same round: same load)
            "ratio_to_base": bench_common.ratio(
                rates(variant),
                rates(base),
                numerator_is=f"{variant} updates/s",
                denominator_is=f"{base} updates/s",
                rounds_are="round-robin: one call of every variant per round",
            ),
            "last_losses": losses,
            "float32_loss_after": float(judge_loss(trained, eval_batch)),
        }
        if "bare" in seconds and variant != "bare":
            row["ratio_to_bare"] = bench_common.ratio(
                rates(variant),
                rates("bare"),
                numerator_is=f"{variant} updates/s",
                denominator_is="bare updates/s",
                goal=args.goal,
                rounds_are="round-robin: one call of every variant per round",
            )
        rows.append(row)
    print(
        f"\n{'variant':>15}{'s/call':>9}{'updates/s':>11}{'vs ' + base:>12}"
        f"{'last loss':>12}{'f32 loss':>10}"
    )
    for r in rows:
        print(
            f"{r['variant']:>15}{r['seconds_per_call']:>9.3f}{r['updates_per_second']:>11.3f}"
            f"{r['ratio_to_base']['value']:>12.4f}{r['last_losses'][0]:>12.6f}"
            f"{r['float32_loss_after']:>10.6f}"
        )
    print("(s/call, updates/s: the median call of the run; vs: the quotient of those medians)")
    for r in rows:
        if r["variant"] != base:
            print(f"{r['variant']} vs {base}: " + bench_common.describe(r["ratio_to_base"]))
        if "ratio_to_bare" in r:
            print(f"{r['variant']} vs bare: " + bench_common.describe(r["ratio_to_bare"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "schema": 2,
                    "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
                    "config": args.config,
                    "base": base,
                    "goal_ratio_to_bare": args.goal,
                    "batch_size": batch,
                    "updates_per_call": args.updates,
                    "rows": args.rows,
                    "eval_rows": eval_rows,
                    "results": rows,
                },
                f,
                indent=2,
            )


if __name__ == "__main__":
    main()
