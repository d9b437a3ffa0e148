"""Learning curves of one or more runs as a PNG (and optionally the numbers as JSON).

Five panels, one line per run (runs are overlaid for comparison):
  1. evaluation margins per opponent and policy view, with +- one standard error bars;
  2. losses (advantage networks after training, strategy network);
  3. phase timings per iteration (traversal, advantage and strategy training, evaluation);
  4. target anatomy: share of exactly-zero advantage targets, overall and per game phase,
     and the share of traversal paths truncated at max_turns;
  5. the game played: the turns traversal paths last (mean), the turns the advantage
     samples lie at (median, 90th percentile) and the strategy samples' median turn.

    .venv/bin/python scripts/plot_run.py RUN_DIR [RUN_DIR ...] [--out curves.png]
        [--opponents safe_heuristic,passive_discard] [--views current] [--json curves.json]
        [--panels margins,losses,timings,anatomy,game]

With many runs overlaid, `--panels margins` draws the evaluation margins alone, large
enough for the legend.
"""

from __future__ import annotations

import argparse
import json
import pathlib

import matplotlib

matplotlib.use("Agg")  # files only: no display on a training machine
import matplotlib.pyplot as plt  # noqa: E402

TIMINGS = (
    "traversal_seconds",
    "advantage_train_seconds",
    "strategy_train_seconds",
    "evaluation_seconds",
)


def read_rows(run: pathlib.Path) -> list[dict]:
    """The run's metrics rows (a torn last line, from a run killed mid-write, is skipped)."""
    rows = []
    for line in (run / "metrics.jsonl").read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def eval_series(rows: list[dict], opponents=None, views=None) -> dict:
    """{(view, opponent): [(iteration, margin, stderr)]} of every evaluation in the rows."""
    series: dict = {}
    for row in rows:
        for key, value in row.items():
            parts = key.split("/")
            if len(parts) != 4 or parts[0] != "eval" or parts[3] != "margin_mean":
                continue
            view, opponent = parts[1], parts[2]
            if (opponents and opponent not in opponents) or (views and view not in views):
                continue
            stderr = row.get(f"eval/{view}/{opponent}/margin_stderr", 0.0)
            series.setdefault((view, opponent), []).append((row["iteration"], value, stderr))
    return series


VIEW_STYLES = {"current": "-", "average_strategy": "--", "sd_cfr": ":"}
PANELS = ("margins", "losses", "timings", "anatomy", "game")
# the game panel's lines: metric -> label (paths' decisions are halved into turns)
GAME_TURNS = {
    "traversal/mean_endpoint_depth": "path turns (mean)",
    "targets/turn_p50": "advantage sample turn (median)",
    "targets/turn_p90": "advantage sample turn (p90)",
    "strategy_samples/turn_p50": "strategy sample turn (median)",
}
DECISIONS_PER_TURN = 2


def scalar_series(rows: list[dict], key: str) -> list[tuple[int, float]]:
    return [(row["iteration"], row[key]) for row in rows if key in row]


def plot(
    runs: list[pathlib.Path], out: pathlib.Path, opponents=None, views=None, panels=PANELS
) -> dict:
    """Draws the chosen panels into `out`; returns the plotted numbers per run."""
    unknown = sorted(set(panels) - set(PANELS))
    if unknown or not panels:
        raise ValueError(f"panels {unknown or panels} unknown; choose from {list(PANELS)}")
    count = len(panels)
    rows_cols = (1, 1) if count == 1 else (1, 2) if count == 2 else (2, 2) if count <= 4 else (2, 3)
    size = (10, 6) if count == 1 else (7 * rows_cols[1], 4.5 * rows_cols[0])
    fig, grid = plt.subplots(*rows_cols, figsize=size, squeeze=False)
    axes = grid.flat[: len(panels)]
    for spare in grid.flat[len(panels) :]:
        spare.remove()
    # A panel that is not drawn gets a throw-away axis, so the loop below stays flat.
    spares = {name: plt.figure().add_subplot() for name in PANELS if name not in panels}
    chosen = dict(zip(panels, axes, strict=True)) | spares
    ax_eval, ax_loss = chosen["margins"], chosen["losses"]
    ax_time, ax_zero, ax_game = chosen["timings"], chosen["anatomy"], chosen["game"]
    styles = ["-", "--", ":", "-."]
    numbers = {}
    for index, run in enumerate(runs):
        rows = read_rows(run)
        style = styles[index % len(styles)]
        label = run.name
        evals = eval_series(rows, opponents, views)
        # One colour per run, one line style per view and one marker per opponent, so
        # overlaid runs stay legible.
        markers = {name: "os^Dv<>p"[i % 8] for i, name in enumerate(sorted({o for _, o in evals}))}
        for (view, opponent), points in sorted(evals.items()):
            its, means, errs = zip(*points, strict=True)
            ax_eval.errorbar(
                its, means, yerr=errs, color=f"C{index % 10}", marker=markers[opponent],
                markersize=4, linestyle=VIEW_STYLES.get(view, "-."), capsize=2,
                label=f"{label}: {view} vs {opponent}",
            )  # fmt: skip
        for key in ("loss/advantage_p0", "loss/advantage_p1", "loss/strategy"):
            points = scalar_series(rows, key)
            if points:
                ax_loss.plot(*zip(*points, strict=True), style, label=f"{label}: {key[5:]}")
        for key in TIMINGS:
            points = scalar_series(rows, key)
            if points:
                ax_time.plot(*zip(*points, strict=True), style, label=f"{label}: {key[:-8]}")
        for key in ["targets/zero_fraction"] + [f"targets/p{k}_zero_fraction" for k in range(4)]:
            points = scalar_series(rows, key)
            if points:
                ax_zero.plot(*zip(*points, strict=True), style, label=f"{label}: {key[8:]}")
        points = scalar_series(rows, "traversal/truncated_share")
        if points:
            ax_zero.plot(*zip(*points, strict=True), style, label=f"{label}: truncated paths")
        for key, name in GAME_TURNS.items():
            points = scalar_series(rows, key)
            if key == "traversal/mean_endpoint_depth":
                points = [(i, v / DECISIONS_PER_TURN) for i, v in points]
            if points:
                ax_game.plot(*zip(*points, strict=True), style, label=f"{label}: {name}")
        numbers[str(run)] = {
            "evaluations": {f"{v}/{o}": p for (v, o), p in evals.items()},
            "iterations": len(rows),
        }
    ax_eval.axhline(0.0, color="grey", linewidth=0.8)
    ax_eval.set(title="evaluation margin (points, +- stderr)", xlabel="iteration")
    ax_loss.set(title="losses", xlabel="iteration", yscale="log")
    ax_time.set(title="seconds per iteration", xlabel="iteration")
    ax_zero.set(
        title="shares: exactly-zero advantage targets, truncated paths",
        xlabel="iteration",
        ylim=(0, 1),
    )
    ax_game.set(title="the game played (turns)", xlabel="iteration")
    for ax in axes:
        if ax.has_data():
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=90)
    plt.close("all")
    return numbers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=pathlib.Path)
    parser.add_argument("--out", type=pathlib.Path, default=None, help="PNG (default: run/)")
    parser.add_argument("--opponents", default="", help="comma-separated bots (default all)")
    parser.add_argument("--views", default="", help="comma-separated views (default all)")
    parser.add_argument("--json", default=None)
    parser.add_argument("--panels", default=",".join(PANELS), help="comma-separated panels")
    args = parser.parse_args()
    for run in args.runs:
        if not (run / "metrics.jsonl").exists():
            parser.error(f"{run} has no metrics.jsonl (not a run directory?)")
    out = args.out or args.runs[0] / "curves.png"
    split = lambda text: tuple(x for x in text.split(",") if x) or None  # noqa: E731
    panels = split(args.panels) or ()
    if set(panels) - set(PANELS):
        parser.error(f"--panels: unknown {sorted(set(panels) - set(PANELS))}; valid {PANELS}")
    numbers = plot(args.runs, out, split(args.opponents), split(args.views), panels)
    print(f"wrote {out}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(numbers, indent=1) + "\n")


if __name__ == "__main__":
    main()
