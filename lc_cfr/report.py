"""One screen about a training run: what it is, how far it got, how well it plays.

    python -m lc_cfr.report --workdir=RUN [--json=PATH] [--all-fields]

Reads RUN/config.json, RUN/metrics.jsonl and the checkpoint listing; loads no network
and starts nothing, so it is instant on a run that is still training. Sections: the
config's highlights and every field that differs from the closest preset of
`configs/default.py` (with --all-fields, all of them); progress (iterations, wall time,
the recent seconds per iteration and the time left); the last and the best evaluation
of every view against every opponent, margin +- its standard error, with the game's
length, truncation rate and the share of the agent's draws taken from a discard pile
(its stalling: scripts/stalling.py prices it); the game the traversals play (path
lengths, truncation share, the turns of the advantage and strategy samples);
throughput and where an iteration's time goes (means of the last 10 rows); health
counters; the checkpoints on disk; and the evaluations `lc_cfr.evaluate` archived in
RUN/evaluations/ (search at play time beside the raw views of the same checkpoint and
deals).
--json writes the same figures.
"""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import sys
from typing import Any

from absl import app, flags

from lc_cfr.train import checkpoint
from lc_cfr.train.run_format import read_run_config

FLAGS = flags.FLAGS
DEFAULT_CONFIG = pathlib.Path(__file__).resolve().parent.parent / "configs" / "default.py"


def define_flags() -> None:
    """The command line's flags; defined only when run as a program, so that importing
    this module beside `lc_cfr.evaluate` (which has a --workdir too) is harmless."""
    flags.DEFINE_string("workdir", None, "the run directory (holds config.json)")
    flags.DEFINE_string("json", None, "also write the report's figures to this JSON file")
    flags.DEFINE_bool("all_fields", False, "list every config field, not only the changed ones")
    flags.DEFINE_string("default_config", str(DEFAULT_CONFIG), "the config to compare with")


# Fields a reader looks for first, in this order.
HIGHLIGHTS = (
    "rules.n_colors",
    "rules.hand_size",
    "traversal.backend",
    "traversal.sampling_mode",
    "traversal.expand_at",
    "traversal.traversals_per_player",
    "traversal.opponent_policy",
    "network.hidden_size",
    "network.num_layers",
    "network.head",
    "optimization.advantage_updates",
    "optimization.advantage_epochs",
    "optimization.learner",
    "seed",
)
PHASES = (
    "traversal_seconds",
    "memory_add_seconds",
    "advantage_train_seconds",
    "strategy_train_seconds",
    "value_train_seconds",
    "evaluation_seconds",
    "checkpoint_seconds",
    "checkpoint_wait_seconds",
)
RECENT = 10  # rows averaged for speed, phases and the game played
# The game the traversals play: metric -> what the report calls it (means of RECENT rows).
PLAYED = {
    "traversal/mean_endpoint_depth": "decisions a path",
    "traversal/truncated_share": "paths truncated",
    "targets/turn_p50": "advantage samples' median turn",
    "targets/turn_p90": "their 90th percentile",
    "strategy_samples/turn_p50": "strategy samples' median turn",
}


def flatten(config, prefix: str = "") -> dict[str, Any]:
    """{dotted field: value} of a ConfigDict (or dict)."""
    flat = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if hasattr(value, "items"):
            flat.update(flatten(value, name + "."))
        else:
            flat[name] = value
    return flat


def read_rows(path: pathlib.Path) -> list[dict]:
    """The rows of metrics.jsonl; a torn last line (a run killed mid-write) is skipped."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = []
    for number, line in enumerate(lines, 1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as error:
            if number < len(lines):
                raise ValueError(f"{path} line {number} is not JSON: {error}") from error
    return rows


def evaluations(rows: list[dict]) -> dict[str, dict]:
    """{"view/opponent": {"last": {...}, "best": {...}}}, each with iteration, margin,
    stderr, win_rate and games."""
    found: dict[str, dict] = {}
    for row in rows:
        for key, margin in row.items():
            if not (key.startswith("eval/") and key.endswith("/margin_mean")):
                continue
            pair = key[len("eval/") : -len("/margin_mean")]
            base = f"eval/{pair}/"
            entry = {
                "iteration": row["iteration"],
                "margin": margin,
                "stderr": row.get(base + "margin_stderr", math.nan),
                "win_rate": row.get(base + "win_rate", math.nan),
                "games": row.get(base + "games"),
                "length": row.get(base + "length_mean", math.nan),
                "truncation": row.get(base + "truncation_rate", math.nan),
                "pile_draws": row.get(base + "draw_pile_rate", math.nan),
            }
            record = found.setdefault(pair, {"last": entry, "best": entry})
            record["last"] = entry
            if margin > record["best"]["margin"]:
                record["best"] = entry
    return found


# Where `lc_cfr.evaluate --workdir=RUN` archives each of its documents.
EVALUATIONS_DIR = "evaluations"


def archived_evaluations(workdir: pathlib.Path) -> list[dict]:
    """The documents of RUN/evaluations/*.json in name (time) order, each reduced to
    {file, checkpoint, games, search, pairs: {"view/opponent": {margin, stderr}}}; a file
    that is not such a document is listed with its error instead of failing the report."""
    found = []
    for path in sorted((workdir / EVALUATIONS_DIR).glob("*.json")):
        try:
            document = json.loads(path.read_text())
            metrics = document["metrics"]
            pairs = {
                key[len("eval/") : -len("/margin_mean")]: {
                    "margin": value,
                    "stderr": metrics.get(key.replace("margin_mean", "margin_stderr"), math.nan),
                }
                for key, value in metrics.items()
                if key.startswith("eval/") and key.endswith("/margin_mean")
            }
            found.append(
                {
                    "file": path.name,
                    "checkpoint": document.get("checkpoint"),
                    "games": document.get("games"),
                    "search": document.get("search"),
                    "pairs": pairs,
                }
            )
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
            found.append({"file": path.name, "error": f"unreadable: {error}"})
    return found


# Presets a run is compared with; the one it differs from least is reported.
PRESETS = ("", "plain", "small", "tiny", "smoke", "classic", "small,classic")


def load_default_config(path: str | pathlib.Path):
    """The module of a config file such as configs/default.py (its `get_config`)."""
    spec = importlib.util.spec_from_file_location("lc_cfr_default_config", path)
    if spec is None or not pathlib.Path(path).is_file():
        raise FileNotFoundError(f"default config {path} does not exist")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def closest_preset(config: dict, module) -> tuple[str, dict]:
    """(preset, {field: value}): the preset of `module.get_config` that the flat
    `config` differs from in the fewest fields, and those fields."""
    best = None
    for preset in PRESETS:
        base = flatten(module.get_config(preset))
        changed = {k: v for k, v in config.items() if base.get(k) != v}
        if best is None or len(changed) < len(best[1]):
            best = (preset, changed)
    return best


def build_report(
    workdir: str | pathlib.Path, default_config: str | pathlib.Path = DEFAULT_CONFIG
) -> dict:
    """Every figure of the report of run `workdir`, its config compared with
    `default_config`'s.

    Raises:
        FileNotFoundError: the directory or its config.json is missing.
        ValueError: config.json or a row of metrics.jsonl before the last is unreadable.
    """
    workdir = pathlib.Path(workdir)
    config_path = workdir / "config.json"
    if not workdir.is_dir():
        raise FileNotFoundError(f"run directory {workdir} does not exist")
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} is missing: is {workdir} a training run directory?")
    try:
        config = flatten(read_run_config(config_path))
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {config_path}: {error}") from error
    preset, changed = closest_preset(config, load_default_config(default_config))
    rows = read_rows(workdir / "metrics.jsonl")
    recent = rows[-RECENT:]

    def mean(key: str) -> float | None:
        values = [row[key] for row in recent if key in row]
        return sum(values) / len(values) if values else None

    done = rows[-1]["iteration"] if rows else 0
    total = int(config["run.max_iterations"])
    per_iteration = mean("iteration_seconds")
    wall = sum(row.get("iteration_seconds", 0.0) for row in rows)
    eta = per_iteration * max(total - done, 0) if per_iteration else None
    limit = 60 * float(config.get("run.max_minutes") or 0.0)
    if limit > 0 and eta is not None:
        # whichever limit comes first; the clock of run.max_minutes restarts at a resume,
        # which the rows do not record: this reads a run trained in one go
        eta = min(eta, max(limit - wall, 0.0))
    store_dir = workdir / "checkpoints"
    store = checkpoint.CheckpointStore(store_dir, read_only=True)
    try:
        steps = store.steps()
    finally:
        store.close()
    return {
        "workdir": str(workdir),
        "highlights": {k: config.get(k) for k in HIGHLIGHTS if k in config},
        "preset": preset,
        "changed_from_preset": changed,
        "config": config,
        "progress": {
            "iterations": done,
            "max_iterations": total,
            "wall_seconds": wall,
            "recent_seconds_per_iteration": per_iteration,
            "eta_seconds": eta,
            "max_minutes": limit / 60,
        },
        "evaluations": evaluations(rows),
        "phases": {key: mean(key) for key in PHASES if mean(key) is not None},
        "played": {key: mean(key) for key in PLAYED if mean(key) is not None},
        "nodes_per_second": mean("traversal/nodes_per_second"),
        "health": {
            key: sum(row.get(key, 0) for row in rows)
            for key in ("health/skipped_updates", "health/non_finite_samples")
        },
        "checkpoints": {"directory": str(store_dir), "steps": steps},
        "archived_evaluations": archived_evaluations(workdir),
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    hours, rest = divmod(int(round(seconds)), 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def render(report: dict, *, all_fields: bool = False) -> str:
    """The report as text, about one screen."""
    lines = [f"run {report['workdir']}"]
    pairs = [f"{k.split('.')[-1]}={v}" for k, v in report["highlights"].items()]
    lines += ["  " + ", ".join(pairs[i : i + 5]) for i in range(0, len(pairs), 5)]
    fields = report["config"] if all_fields else report["changed_from_preset"]
    preset = f"configs/default.py:{report['preset']}" if report["preset"] else "configs/default.py"
    title = "config" if all_fields else f"changed from {preset}"
    lines.append(f"{title} ({len(fields)}):")
    lines += [f"  {key} = {value!r}" for key, value in sorted(fields.items())]
    progress = report["progress"]
    lines.append(
        f"progress: {progress['iterations']}/{progress['max_iterations']} iterations in "
        f"{_duration(progress['wall_seconds'])}; "
        f"{progress['recent_seconds_per_iteration'] or 0:.1f} s per iteration lately; "
        f"{_duration(progress['eta_seconds'])} to go"
        + (f" (run.max_minutes={progress['max_minutes']:g})" if progress.get("max_minutes") else "")
    )
    evaluations = report["evaluations"]
    if evaluations:
        lines.append(
            f"{'evaluation (view/opponent)':<40} {'last':>24} {'best':>24} "
            f"{'decisions':>9} {'truncated':>9} {'pile draws':>10}"
        )
        for pair, record in sorted(evaluations.items()):
            cells = []
            for which in ("last", "best"):
                e = record[which]
                cells.append(f"{e['margin']:+7.2f} +- {e['stderr']:4.2f} @{e['iteration']}")
            last = record["last"]
            lines.append(
                f"  {pair:<38} {cells[0]:>24} {cells[1]:>24} "
                f"{last['length']:9.1f} {last['truncation']:9.1%} {last['pile_draws']:10.1%}"
            )
    else:
        lines.append("evaluation: none yet")
    phases = report["phases"]
    if phases:
        split = ", ".join(f"{k.removesuffix('_seconds')} {v:.1f}" for k, v in phases.items())
        lines.append(f"seconds per iteration (mean of the last {RECENT}): {split}")
    played = report.get("played")
    if played:
        split = ", ".join(
            f"{PLAYED[k]} {v:.1%}" if k.endswith("_share") else f"{PLAYED[k]} {v:.1f}"
            for k, v in played.items()
        )
        lines.append(f"the game traversals play (mean of the last {RECENT}): {split}")
    if report["nodes_per_second"]:
        lines.append(f"traversal: {report['nodes_per_second']:,.0f} nodes/s")
    health = report["health"]
    lines.append(
        f"health: {health['health/skipped_updates']} skipped updates, "
        f"{health['health/non_finite_samples']} non-finite samples"
    )
    steps = report["checkpoints"]["steps"]
    shown = ", ".join(map(str, steps)) if steps else "none yet"
    lines.append(f"checkpoints in {report['checkpoints']['directory']}: {shown}")
    archived = report.get("archived_evaluations") or []
    if archived:
        lines.append(f"evaluations by lc_cfr.evaluate ({EVALUATIONS_DIR}/):")
    for document in archived:
        if "error" in document:
            lines.append(f"  {document['file']}: {document['error']}")
            continue
        lines.append(
            f"  {document['file']}: checkpoint {document['checkpoint']}, "
            f"{document['games']} games per opponent"
        )
        search = document.get("search")
        if search:
            lines.append(
                f"    search over {search['blueprint']}: D={search['determinizations']}, "
                f"k={search['candidates'] or 'all'}, c={search['prior_weight']}, "
                f"z={search.get('stderr_weight', 0.0)}, {search['rollout']} rollouts"
            )
        for pair, figures in sorted(document["pairs"].items()):
            lines.append(f"    {pair:<38} {figures['margin']:+7.2f} +- {figures['stderr']:4.2f}")
    return "\n".join(lines)


def main(argv) -> None:
    del argv
    if not FLAGS.workdir:
        sys.exit("lc_cfr.report: --workdir is required")
    try:
        report = build_report(FLAGS.workdir, FLAGS.default_config)
    except (OSError, ValueError) as error:
        sys.exit(f"lc_cfr.report: {error}")
    print(render(report, all_fields=FLAGS.all_fields))
    if FLAGS.json:
        pathlib.Path(FLAGS.json).write_text(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    define_flags()
    app.run(main)
