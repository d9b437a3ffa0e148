"""What every benchmark reports about a ratio, a goal and an external reference.

A RATIO is stored with its parts: `numerator` and `denominator` are figures of the same
run, each the median over the rounds of its own per-round values (the lower median for
an even count: `median_of`), and `value` is exactly numerator / denominator, the figure
a table's own columns give. `rounds` are the per-round ratios (numerator and
denominator of the same round; `rounds_are` says how a script pairs them) and `spread`
their minimum, median and maximum. The quotient of the two lower medians always lies
within that spread: of n values, more than n/2 lie at or above their lower median and
at least n/2 at or below it, so some round has its numerator at or above the median
numerator and its denominator at or below the median denominator (its ratio is at least
the value), and some round the reverse (at most the value).

A GOAL is judged on the unrounded `value` (`goal_met`: value >= goal, or value <= goal
for a ceiling); `rounds_meeting_goal` counts the rounds that meet it alone. Printed
figures carry four significant digits, so a figure just under its goal never reads as
meeting it.

An EXTERNAL REFERENCE is a figure this run did not measure (another program's, or
lc_cfr's before a change, taken from the project's records): it is stored with its
provenance (machine, date, iteration, what it includes) and compared as
`against_external_reference`, never as a measured speed-up.

The scripts also share how they read a config argument (`load_config`) and how those
that read a training run restore it (`run_config`, `restored_run`).
"""

from __future__ import annotations

import ast
import importlib.util
import pathlib
import statistics
from collections.abc import Sequence

# The lower median: for an odd count the median; for an even one an observed value (see
# the module docstring for why the ratio of two of them stays within the spread).
median_of = statistics.median_low


def spread(values: Sequence[float]) -> dict:
    """min <= median <= max of `values` (the median: `median_of`), and their count."""
    values = [float(v) for v in values]
    return {
        "min": min(values),
        "median": median_of(values),
        "max": max(values),
        "count": len(values),
    }


def goal_record(value: float, goal: float | None, *, ceiling: bool = False) -> dict:
    """{goal, goal_kind, goal_met}: `value` against `goal` as measured, unrounded."""
    if goal is None:
        return {"goal": None, "goal_kind": None, "goal_met": None}
    met = value <= goal if ceiling else value >= goal
    return {"goal": goal, "goal_kind": "at most" if ceiling else "at least", "goal_met": met}


def ratio(
    numerators: Sequence[float],
    denominators: Sequence[float],
    *,
    numerator_is: str,
    denominator_is: str,
    goal: float | None = None,
    ceiling: bool = False,
    rounds_are: str = "timed back to back, round by round",
) -> dict:
    """A ratio with its parts: per-round numerators and denominators (same length, same
    run) -> value = median numerator / median denominator, the per-round ratios and their
    spread, and the goal judged on the unrounded value."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("a ratio needs as many numerators as denominators, at least one")
    numerator, denominator = median_of(numerators), median_of(denominators)
    rounds = [n / d for n, d in zip(numerators, denominators, strict=True)]
    record = {
        "value": numerator / denominator,
        "numerator": numerator,
        "denominator": denominator,
        "numerator_is": numerator_is,
        "denominator_is": denominator_is,
        "rounds": rounds,
        "rounds_are": rounds_are,
        "spread": spread(rounds),
        **goal_record(numerator / denominator, goal, ceiling=ceiling),
    }
    if goal is not None:
        record["rounds_meeting_goal"] = sum((r <= goal) if ceiling else (r >= goal) for r in rounds)
    return record


def describe(record: dict, name: str = "ratio") -> str:
    """One line: the value with its parts, the spread over rounds and the goal."""
    s = record["spread"]
    text = (
        f"{name} {record['value']:.4g} = {record['numerator']:.6g} ({record['numerator_is']}) "
        f"/ {record['denominator']:.6g} ({record['denominator_is']}); "
        f"{s['count']} round(s): min {s['min']:.4g}, median {s['median']:.4g}, "
        f"max {s['max']:.4g}"
    )
    if record.get("goal") is not None:
        verdict = "met" if record["goal_met"] else "NOT met"
        text += (
            f"; goal {record['goal_kind']} {record['goal']:g}: {verdict} "
            f"({record['rounds_meeting_goal']} of {s['count']} rounds meet it)"
        )
    return text


def external_reference(figures: dict, provenance: dict) -> dict:
    """A figure set this run did not measure, labelled as such, with its provenance."""
    return {
        "kind": "external reference (not measured by this run)",
        "provenance": provenance,
        "figures": dict(figures),
    }


def against_reference(reference: dict, measured: dict, keys: Sequence[str], compared_with: str):
    """reference figure / measured figure per key (where both exist), with both parts.

    Not a measured speed-up: the reference comes from another run, program or machine
    state (its provenance says which); `compared_with` names the measured figures used
    (e.g. 'iteration_1', to match a reference that was a first iteration).
    """
    rows = {}
    for key in keys:
        ref, got = reference["figures"].get(key), (measured or {}).get(key)
        if ref and got:
            rows[key] = {"reference": ref, "measured": got, "reference_over_measured": ref / got}
    return {
        "kind": reference["kind"],
        "provenance": reference["provenance"],
        "compared_with": compared_with,
        "figures": rows,
    }


def run_config(workdir: pathlib.Path):
    """RUN/config.json completed as a resume would, with the run's own evaluation and
    exploitability schedules off (a script that restores a run evaluates, if at all, by
    itself); SystemExit naming --workdir without one."""
    from lc_cfr.train.run_format import read_run_config

    path = pathlib.Path(workdir) / "config.json"
    if not path.exists():
        raise SystemExit(f"--workdir: {path} does not exist")
    config = read_run_config(path)
    config.evaluation.eval_every = 0
    config.evaluation.extended_eval_every = 0
    config.evaluation.exploitability_every = 0
    return config


def restored_run(config, workdir: pathlib.Path, checkpoint: int | None):
    """(trainer, state) of checkpoint `checkpoint` (None: the latest) of the run in
    `workdir`, read as the trainer resumes it (`Trainer.restore`, read-only); `config` is
    `run_config`'s. SystemExit naming --workdir without a checkpoint."""
    from lc_cfr.train.trainer import Trainer

    trainer = Trainer(config, workdir)
    restored = trainer.restore(checkpoint)
    if restored is None:
        raise SystemExit(f"--workdir: no checkpoint in {pathlib.Path(workdir) / 'checkpoints'}")
    return trainer, restored[0]


def load_config(arg: str):
    """The ConfigDict of a config file, `path` or `path:preset` (as lc_cfr.main takes)."""
    path, _, preset = arg.partition(":")
    module_spec = importlib.util.spec_from_file_location("_bench_config", path)
    if module_spec is None or module_spec.loader is None:
        raise SystemExit(f"cannot load config file {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module.get_config(preset)


def apply_overrides(config, items: Sequence[str]) -> None:
    """`FIELD=VALUE` items (e.g. `traversal.leaf_decisions=8`) set on `config`, each value
    read as the type of the field it replaces; an unknown field exits naming it."""
    for item in items:
        field, equals, text = item.partition("=")
        *path, last = field.split(".")
        node = config
        try:
            for part in path:
                node = node[part]
            current = node[last]
        except (KeyError, AttributeError):
            raise SystemExit(f"--set {item!r}: the config has no field {field!r}") from None
        if not equals:
            raise SystemExit(f"--set {item!r}: expected FIELD=VALUE")
        if isinstance(current, bool):
            if text.lower() not in ("true", "false"):
                raise SystemExit(f"--set {item!r}: {field} takes true or false")
            node[last] = text.lower() == "true"
        elif isinstance(current, (int, float)):
            try:
                node[last] = type(current)(ast.literal_eval(text))
            except (ValueError, SyntaxError):
                raise SystemExit(f"--set {item!r}: {field} takes a number") from None
        else:
            node[last] = text
