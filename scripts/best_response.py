"""Yardstick: can the trainer learn a best response to a fixed bot?

With `traversal.opponent_policy` set to a bot, the traverser faces a fixed opponent and
Deep CFR's regret minimisation becomes a single-agent problem: the current
regret-matching policy should climb towards a best response to that bot, whatever else
is wrong with self-play. This script trains such a run (the `:small` preset unless told
otherwise) and reports the margin of the current policy (and of the average strategy)
against the same bot over the iterations, each +- its standard error over mirrored deals.

    .venv/bin/python scripts/best_response.py --opponent safe_heuristic --iterations 100 \
        [--preset small] [--games 2000] [--eval-every 10] [--workdir DIR] [--json out.json] \
        [--set traversal.sampling_mode=external --set traversal.expand_at=sampled ...]

A workdir that already holds the run resumes it (the trainer's exact resume). The JSON
holds the command's settings, the wall time and the curve rows.
"""

from __future__ import annotations

import argparse
import ast
import json
import pathlib
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from configs import default as default_config  # noqa: E402
from lc_cfr import compile_cache  # noqa: E402
from lc_cfr.bots import BOT_NAMES  # noqa: E402
from lc_cfr.train import Trainer  # noqa: E402

VIEWS = ("current", "average_strategy")


def parse_value(text: str):
    """A --set value as a Python literal where it is one (1e-3, True, 'x'), else text."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def apply_overrides(config, assignments: list[str]) -> None:
    """Applies `block.field=value` assignments, naming any unknown field."""
    for assignment in assignments:
        if "=" not in assignment:
            raise SystemExit(f"--set needs block.field=value, got {assignment!r}")
        path, text = assignment.split("=", 1)
        node = config
        *blocks, field = path.split(".")
        for block in blocks:
            if block not in node:
                raise SystemExit(f"--set: unknown config block {block!r} in {path!r}")
            node = node[block]
        if field not in node:
            raise SystemExit(f"--set: unknown config field {path!r}")
        value = parse_value(text)
        current = node[field]
        if isinstance(current, float) and isinstance(value, int):
            value = float(value)
        node[field] = value if not isinstance(current, str) else str(value)


def curve(workdir: pathlib.Path, opponent: str) -> list[dict]:
    """Rows {iteration, <view>: margin, <view>_stderr, <view>_win_rate} of the run's evals."""
    rows = []
    for line in (workdir / "metrics.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        metrics = json.loads(line)
        row = {"iteration": metrics["iteration"]}
        for view in VIEWS:
            key = f"eval/{view}/{opponent}/"
            if key + "margin_mean" in metrics:
                row[view] = metrics[key + "margin_mean"]
                row[view + "_stderr"] = metrics[key + "margin_stderr"]
                row[view + "_win_rate"] = metrics[key + "win_rate"]
        if len(row) > 1:
            rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--opponent", default="safe_heuristic", choices=BOT_NAMES)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--preset", default="small", help="configs/default.py preset ('' = full)")
    parser.add_argument("--games", type=int, default=2000, help="games per evaluation (even)")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default=None, help="default: a new temporary folder")
    parser.add_argument("--set", action="append", default=[], help="block.field=value")
    parser.add_argument("--json", default=None, help="write the curve here")
    args = parser.parse_args()

    compile_cache.enable(compile_cache.directory())
    config = default_config.get_config(args.preset)
    config.seed = args.seed
    config.traversal.opponent_policy = args.opponent
    config.run.max_iterations = args.iterations
    config.run.progress_bar = False
    config.evaluation.eval_every = args.eval_every
    config.evaluation.extended_eval_every = 0
    config.evaluation.games = args.games
    config.evaluation.opponents = args.opponent
    config.evaluation.views = ",".join(VIEWS)
    apply_overrides(config, args.set)
    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="best_response_"))

    start = time.perf_counter()
    Trainer(config, workdir).run()
    seconds = time.perf_counter() - start
    rows = curve(workdir, args.opponent)
    print(f"run directory: {workdir}  ({seconds:.0f} s)")
    print(f"margin against {args.opponent} (points +- stderr over {args.games // 2} deals)")
    print(f"{'iteration':>9}  {'current':>16}  {'average strategy':>16}")
    for row in rows:
        cells = [
            f"{row[v]:+7.1f} +- {row[v + '_stderr']:4.1f}" if v in row else f"{'-':>16}"
            for v in VIEWS
        ]
        print(f"{row['iteration']:>9}  {cells[0]:>16}  {cells[1]:>16}")
    if args.json:
        out = {
            "opponent": args.opponent,
            "preset": args.preset,
            "iterations": args.iterations,
            "games": args.games,
            "overrides": args.set,
            "seed": args.seed,
            "workdir": str(workdir),
            "wall_seconds": seconds,
            "curve": rows,
        }
        pathlib.Path(args.json).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
