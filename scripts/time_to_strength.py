"""What a user gets for their time: margins against the bots at fixed wall times of training.

Trains a config as `scripts/train.sh` does (the same `Trainer`, with its checkpoints,
metrics and scheduled evaluations in --workdir) and, each time the training's wall time
first passes one of the --minutes marks (15, 30, 60 and 120 by default), stops the clock
and plays the state's policy views (--views) against the bots (all six by default),
--games mirrored games each (every deal twice, seats swapped), greedy, on the config's
evaluation seed; the run stops after the last mark. An iteration that passes several
marks is evaluated once for all of them. The clock (wall seconds and this process's CPU
seconds, which count every XLA thread) starts before the trainer is built, so start-up
and compiles count as they do for a user; this script's own evaluations do not (the
strategy network they read is fitted on the clock, `Trainer.fit_strategy`).

One fit of the average-strategy network can play 15 points from another fit of the same
memory against a bot (docs/experiments.md 33), so the average strategy is also read as
--strategy-fits draws of its fit (the run's own and others from folded keys,
`Trainer.strategy_refit`, off the clock): their mean and range are the figure to quote.

It prints margin +- standard error per mark, view and bot (and the fits' mean and range);
--json writes the figures and --plot draws margin against wall minutes and against
CPU-seconds (the average strategy as the fits' mean, its bar their range).

    .venv/bin/python scripts/time_to_strength.py --workdir /tmp/tts \\
        [--config configs/default.py] [--set traversal.leaf_decisions=8 ...] \\
        [--minutes 15,30,60,120] [--opponents random,passive_discard,...] \\
        [--games 2000] [--views average_strategy] [--strategy-fits K] \\
        [--json out.json] [--plot out.png]

The workdir must not hold a run: a resumed run's clock would start at its checkpoint.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402

from lc_cfr import compile_cache  # noqa: E402
from lc_cfr.bots import BOT_NAMES  # noqa: E402
from lc_cfr.eval import POLICY_VIEWS, evaluate  # noqa: E402
from lc_cfr.train.evaluation import policy_views  # noqa: E402
from lc_cfr.train.trainer import Trainer  # noqa: E402

DEFAULT_MARKS = "15,30,60,120"
DEFAULT_FITS = 4  # the run's own fit of the average strategy and three more draws


class Clock:
    """Training time: wall and CPU seconds since the start, less the paused stretches."""

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def read(self) -> tuple[float, float]:
        return time.perf_counter() - self.wall, time.process_time() - self.cpu

    def paused(self, since: tuple[float, float]) -> None:
        """Moves the start on by what passed after `since` (a `read`)."""
        wall, cpu = self.read()
        self.wall += wall - since[0]
        self.cpu += cpu - since[1]


def margins(row: dict, views, opponents) -> dict:
    """{view: {opponent: {margin, stderr, win_rate}}} of an `evaluate` row."""
    return {
        view: {
            opponent: {
                "margin": row[f"eval/{view}/{opponent}/margin_mean"],
                "stderr": row[f"eval/{view}/{opponent}/margin_stderr"],
                "win_rate": row[f"eval/{view}/{opponent}/win_rate"],
            }
            for opponent in opponents
        }
        for view in views
    }


def fit_margins(trainer, state, own, fits, opponents, games, seed) -> dict:
    """{opponent: {margins, stderrs, mean, low, high}} of `fits` draws of the strategy
    fit at `state`: its own first (`own`, the view's margins already played), then the
    refits on the same deals."""
    refits = [trainer.strategy_refit(state, draw) for draw in range(1, fits)]
    rows = [own] + [
        margins(
            evaluate(
                trainer.rules,
                trainer.spec,
                {"average_strategy": p},
                opponents=opponents,
                games=games,
                seed=seed,
                draws=trainer.options.draws,
            ),
            ("average_strategy",),
            opponents,
        )["average_strategy"]
        for p in refits
    ]
    out = {}
    for opponent in opponents:
        values = [r[opponent]["margin"] for r in rows]
        out[opponent] = {
            "margins": values,
            "stderrs": [r[opponent]["stderr"] for r in rows],
            "mean": sum(values) / len(values),
            "low": min(values),
            "high": max(values),
        }
    return out


def train_and_measure(config, workdir, marks, views, opponents, games, fits=1) -> list[dict]:
    """Trains until the last mark (or run.max_iterations); one record per mark reached
    (with `fits` > 1 and the average strategy among the views, its fits' margins)."""
    clock = Clock()
    trainer = Trainer(config, workdir)
    records: list[dict] = []
    left = list(marks)

    def after_iteration(state) -> bool:
        passed = [m for m in left if clock.read()[0] >= 60 * m]
        if not passed:
            return False
        # the strategy network of this iteration (strategy_train_when='read' fits it
        # only where the run reads it): a cost of training, on the clock
        state = trainer.fit_strategy(state)
        now = clock.read()
        row = evaluate(
            trainer.rules,
            trainer.spec,
            policy_views(state, views),
            opponents=opponents,
            games=games,
            seed=config.evaluation.seed,
            fallback=trainer.options.all_negative_fallback,
            draws=trainer.options.draws,
        )
        record = {
            "trained_minutes": now[0] / 60,
            "cpu_seconds": now[1],
            "iteration": int(state.iteration),
            "eval": margins(row, views, opponents),
        }
        if fits > 1 and "average_strategy" in views:
            own = record["eval"]["average_strategy"]
            record["strategy_fits"] = fit_margins(
                trainer, state, own, fits, opponents, games, config.evaluation.seed
            )
        for mark in passed:
            left.remove(mark)
            records.append({"minutes": mark, **record})
            print_record(records[-1], views, opponents)
        clock.paused(now)
        return not left

    trainer.run(after_iteration)
    for mark in left:
        print(
            f"{mark:g} min: not reached (run.max_iterations={config.run.max_iterations} came first)"
        )
    return records


def print_record(record: dict, views, opponents) -> None:
    head = (
        f"{record['minutes']:g} min (trained {record['trained_minutes']:.1f} min, "
        f"{record['cpu_seconds']:.0f} CPU-s, iteration {record['iteration']})"
    )
    print(head, flush=True)
    for view in views:
        figures = record["eval"][view]
        cells = [
            f"{o} {figures[o]['margin']:+.2f} +- {figures[o]['stderr']:.2f}" for o in opponents
        ]
        print(f"  {view}: " + ", ".join(cells), flush=True)
    if "strategy_fits" in record:
        fits = record["strategy_fits"]
        count = len(next(iter(fits.values()))["margins"])
        cells = [
            f"{o} {fits[o]['mean']:+.2f} ({fits[o]['low']:+.2f} .. {fits[o]['high']:+.2f})"
            for o in opponents
        ]
        print(f"  average_strategy, {count} fits, mean (range): " + ", ".join(cells), flush=True)


def plot(records: list[dict], views, opponents, out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True)
    for axis, x_key, label in (
        (axes[0], "trained_minutes", "training wall minutes"),
        (axes[1], "cpu_seconds", "training CPU-seconds"),
    ):
        x = [r[x_key] for r in records]
        for style, view in zip(("-", "--", ":"), views, strict=False):
            # one colour per bot, one line style per view: every curve tells itself apart
            for colour, opponent in enumerate(opponents):
                y = [r["eval"][view][opponent]["margin"] for r in records]
                err = [r["eval"][view][opponent]["stderr"] for r in records]
                name = opponent if len(views) == 1 else f"{view} / {opponent}"
                if view == "average_strategy" and "strategy_fits" in records[0]:
                    # the fits' mean, the bar their range: one fit is one draw
                    fits = [r["strategy_fits"][opponent] for r in records]
                    y = [f["mean"] for f in fits]
                    below = [f["mean"] - f["low"] for f in fits]
                    err = [below, [f["high"] - f["mean"] for f in fits]]
                    name = f"{name} (fits' mean, range)"
                axis.errorbar(
                    x,
                    y,
                    yerr=err,
                    marker="o",
                    capsize=3,
                    label=name,
                    color=f"C{colour}",
                    linestyle=style,
                )
        axis.axhline(0.0, color="grey", linewidth=0.8)
        axis.set_xlabel(label)
        axis.grid(alpha=0.3)
    axes[0].set_ylabel("margin, points a game (mirrored)")
    axes[1].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(out, dpi=110)


def names(text: str, valid, flag: str) -> tuple[str, ...]:
    chosen = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = [n for n in chosen if n not in valid]
    if unknown or not chosen:
        raise SystemExit(f"{flag}: unknown {unknown or 'empty'}; choose from {list(valid)}")
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", required=True, help="a new run directory")
    parser.add_argument("--config", default="configs/default.py", help="path[:presets]")
    parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE")
    parser.add_argument("--minutes", default=DEFAULT_MARKS, help="comma-separated marks")
    parser.add_argument("--opponents", default=",".join(BOT_NAMES))
    parser.add_argument("--games", type=int, default=2000, help="per view and bot (even)")
    parser.add_argument("--views", default="average_strategy")
    parser.add_argument(
        "--strategy-fits",
        type=int,
        default=None,
        help="draws of the average-strategy fit read at each mark (1: the run's own only; "
        f"default {DEFAULT_FITS} where the config fits it from scratch, else 1)",
    )
    parser.add_argument("--json", help="write the records here")
    parser.add_argument("--plot", help="write margin against time here (png)")
    args = parser.parse_args()

    try:
        marks = sorted({float(m) for m in args.minutes.split(",") if m.strip()})
    except ValueError:
        raise SystemExit(f"--minutes: numbers, comma-separated; got {args.minutes!r}") from None
    if not marks or marks[0] <= 0:
        raise SystemExit(f"--minutes: every mark must be > 0, got {args.minutes!r}")
    if args.games < 2 or args.games % 2:
        raise SystemExit(f"--games must be even and >= 2 (mirrored deals), got {args.games}")
    opponents = names(args.opponents, BOT_NAMES, "--opponents")
    views = names(args.views, POLICY_VIEWS, "--views")
    workdir = pathlib.Path(args.workdir)
    if (workdir / "metrics.jsonl").exists() or (workdir / "checkpoints").exists():
        raise SystemExit(f"--workdir: {workdir} holds a run; time_to_strength needs a new one")
    config = bench_common.load_config(args.config)
    bench_common.apply_overrides(config, args.set)
    config.run.max_minutes = 0.0  # the marks stop the run
    config.run.progress_bar = False
    scratch = config.optimization.strategy_init == "scratch"
    fits = args.strategy_fits
    if fits is None:
        fits = DEFAULT_FITS if scratch else 1
    if fits < 1:
        raise SystemExit(f"--strategy-fits must be >= 1, got {fits}")
    fits = fits if "average_strategy" in views else 1
    if fits > 1 and not scratch:
        raise SystemExit(
            "--strategy-fits > 1 needs optimization.strategy_init='scratch' (a warm fit has "
            f"no other draw), got {config.optimization.strategy_init!r}; pass --strategy-fits=1"
        )
    if "sd_cfr" in views and config.sd_cfr.snapshots < 1:
        raise SystemExit("--views sd_cfr needs --set sd_cfr.snapshots=K (K >= 1)")

    compile_cache.enable(compile_cache.directory())  # as lc_cfr.main: what a user gets
    records = train_and_measure(config, workdir, marks, views, opponents, args.games, fits)
    report = {
        "config": args.config,
        "overrides": args.set,
        "games": args.games,
        "views": list(views),
        "opponents": list(opponents),
        "marks": marks,
        "strategy_fits": fits,
        "records": records,
    }
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(report, indent=1))
    if args.plot and records:
        plot(records, views, opponents, pathlib.Path(args.plot))


if __name__ == "__main__":
    main()
