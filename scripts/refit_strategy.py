"""Refits a run's average-strategy network on its own strategy memory, and evaluates both.

Deep CFR's average strategy is a network fitted to the strategy memory. The trainer
fits it a little every iteration, warm-started (`optimization.strategy_updates` of
`strategy_batch_size`); Brown et al. (2019, arXiv:1811.00164) instead fit it once, from
scratch, at the end. This script asks whether the trained network is under- or
over-fitted: it restores checkpoint STEP of a run, trains the strategy network further
(`--init warm`) or anew (`--init scratch`) with `--updates` updates of `--batch` rows of
that checkpoint's strategy memory, under `--weighting` (training_weighting.average_mode) and
`--lr-schedule` (optimization.strategy_lr_schedule; a cosine needs `--init scratch`), and
plays the checkpoint's network and the refitted one against the same bots on the same
mirrored deals (greedy), margin +- standard error. `--weighting` and `--refit-seed` take
comma lists: every weighting is fitted with every refit seed in one process (one
restore, one compile), the checkpoint's network played once, and the JSON's `fits` holds
one entry per pair, in that order. `--export AGENT` also writes the checkpoint with the
refitted network (one weighting, one seed) as an agent directory (lc_cfr.export), its
meta holding the refit's settings and margins.

    .venv/bin/python scripts/refit_strategy.py --workdir RUN [--checkpoint STEP] \\
        [--init warm|scratch] [--updates 4096] [--batch 1024] [--weighting uniform,lcfr] \\
        [--lr-schedule constant|cosine] [--refit-seed 0,1,2,3] \\
        [--opponents passive_discard,safe_heuristic] [--games 2000] [--seed 0] \\
        [--json out.json] [--export AGENT]

Nothing in the run directory is written.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

import jax

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402

from lc_cfr.eval.api import evaluate  # noqa: E402
from lc_cfr.export import check_new_directory, export_agent  # noqa: E402
from lc_cfr.learn.learner import LR_SCHEDULES, WEIGHTING_MODES, average_weighting  # noqa: E402
from lc_cfr.train.saved_networks import strategy_note  # noqa: E402
from lc_cfr.train.setup import learner_from_config  # noqa: E402

INITS = ("warm", "scratch")


def margins(row: dict, label: str) -> dict:
    """{opponent: {mean, stderr, win_rate}} of view `label` in an evaluation row."""
    out = {}
    prefix = f"eval/{label}/"
    for key, value in row.items():
        if key.startswith(prefix) and key.endswith("/margin_mean"):
            opponent = key[len(prefix) : -len("/margin_mean")]
            out[opponent] = {
                "mean": float(value),
                "stderr": float(row[key.replace("margin_mean", "margin_stderr")]),
                "win_rate": float(row.get(f"{prefix}{opponent}/win_rate", float("nan"))),
            }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="run directory")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--init", default="warm", choices=INITS)
    parser.add_argument("--updates", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument(
        "--weighting", default=None, help="comma list of average modes; default: the run's"
    )
    parser.add_argument("--lr-schedule", choices=LR_SCHEDULES, help="default: the run's")
    parser.add_argument("--opponents", default="passive_discard,safe_heuristic")
    parser.add_argument("--games", type=int, default=2000, help="per opponent (even)")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed")
    parser.add_argument(
        "--refit-seed", default="0", help="comma list of seeds: batches and fresh weights"
    )
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--export", help="new directory: the refitted agent (lc_cfr.export)")
    args = parser.parse_args()

    workdir = pathlib.Path(args.workdir)
    config = bench_common.run_config(workdir)  # no evaluation schedule: this script evaluates
    if args.updates < 1 or args.batch < 1:
        raise SystemExit("--updates and --batch must be >= 1")
    weightings = [None] if args.weighting is None else args.weighting.split(",")
    for weighting in weightings:
        if weighting is not None and weighting not in WEIGHTING_MODES:
            raise SystemExit(
                f"--weighting must be one of {list(WEIGHTING_MODES)}, got {weighting!r}"
            )
    try:
        refit_seeds = [int(seed) for seed in args.refit_seed.split(",")]
    except ValueError:
        raise SystemExit(
            f"--refit-seed: a comma list of integers, got {args.refit_seed!r}"
        ) from None
    if args.export and len(weightings) * len(refit_seeds) > 1:
        raise SystemExit("--export writes one refit: give one --weighting and one --refit-seed")
    if args.export:
        try:  # before the fit, not after it
            check_new_directory(args.export, "--export")
        except FileExistsError as error:
            raise SystemExit(str(error)) from error
    # the run's own config builds the trainer that restores its checkpoint; each refit's
    # learner takes the flags
    schedule = args.lr_schedule or config.optimization.strategy_lr_schedule
    if args.init == "warm" and schedule == "cosine":
        raise SystemExit(
            "--lr-schedule: a cosine decays over one fit from a fresh network; pass "
            "--init scratch, or --lr-schedule constant to train the run's network on"
        )
    trainer, state = bench_common.restored_run(config, workdir, args.checkpoint)

    def play(strategy_params) -> dict:
        row = evaluate(
            trainer.rules,
            trainer.spec,
            {"average_strategy": strategy_params},
            opponents=tuple(args.opponents.split(",")),
            games=args.games,
            seed=args.seed,
            draws=trainer.options.draws,
        )
        return margins(row, "average_strategy")

    def refit(weighting: str | None, refit_seed: int):
        fit = config.copy_and_resolve_references()
        fit.optimization.strategy_updates = args.updates
        fit.optimization.strategy_batch_size = args.batch
        if weighting is not None:
            fit.training_weighting.average_mode = weighting
        if args.lr_schedule is not None:
            fit.optimization.strategy_lr_schedule = args.lr_schedule
        fit.optimization.strategy_init = "scratch" if args.init == "scratch" else "warm_start"
        learner = learner_from_config(
            fit, trainer.spec, "strategy", codec=trainer.strategy_learner.codec
        )
        key = jax.random.PRNGKey(refit_seed)
        if args.init == "scratch":
            params, opt_state = learner.init(jax.random.fold_in(key, 1))
        else:
            params, opt_state = state.strategy_params, state.strategy_opt
        start = time.perf_counter()
        params, _, losses = learner.train(params, opt_state, state.strategy_memory, key)
        jax.block_until_ready(params)
        seconds = time.perf_counter() - start
        entry = {
            "weighting": average_weighting(
                fit.training_weighting.mode, fit.training_weighting.average_mode
            ),
            "refit_seed": refit_seed,
            "refit_seconds": seconds,
            "loss_first": float(losses["loss_first"]),
            "loss_last": float(losses["loss_last"]),
            "after": play(params),
        }
        return params, entry

    result = {
        "workdir": str(workdir),
        "checkpoint": int(state.iteration),
        "init": args.init,
        "updates": args.updates,
        "batch": args.batch,
        "lr_schedule": schedule,
        "memory_rows": int(state.strategy_memory.size),
        "games": args.games,
        "evaluation_seed": args.seed,
        # strategy_train_when='read': the checkpoint may hold an earlier iteration's fit
        "before_iteration": int(state.strategy_iteration),
        "before": play(state.strategy_params),  # the same deals for every fit
        "fits": [],
    }
    print(f"checkpoint {result['checkpoint']} of {workdir}, {result['memory_rows']} rows")
    note = strategy_note(result["checkpoint"], result["before_iteration"])
    if note:
        print(f"  note (before): {note}")
    for opponent, b in result["before"].items():
        print(f"  before {opponent:<22} {b['mean']:+7.2f} +- {b['stderr']:.2f}")
    for weighting in weightings:
        for refit_seed in refit_seeds:
            params, entry = refit(weighting, refit_seed)
            result["fits"].append(entry)
            print(
                f"{args.init} refit, seed {refit_seed}: {args.updates} updates of {args.batch} "
                f"rows ({entry['weighting']}, {result['lr_schedule']} rate) in "
                f"{entry['refit_seconds']:.1f}s, loss {entry['loss_first']:.4f} -> "
                f"{entry['loss_last']:.4f}"
            )
            for opponent, a in entry["after"].items():
                print(f"  after  {opponent:<22} {a['mean']:+7.2f} +- {a['stderr']:.2f}")
            if args.json:  # after every fit: a long sweep keeps what it measured
                pathlib.Path(args.json).write_text(json.dumps(result, indent=1))
    if args.export:
        (entry,) = result["fits"]
        meta = {k: v for k, v in result.items() if k not in ("workdir", "before", "fits")}
        meta.update(entry)
        export_agent(workdir, args.export, result["checkpoint"], strategy=params, refit=meta)
        print(f"exported to {args.export}: play it with --workdir={args.export}")


if __name__ == "__main__":
    main()
