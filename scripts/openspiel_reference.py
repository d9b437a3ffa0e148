"""OpenSpiel's own solvers on a small Lost Cities variant: the yardstick's reference curves.

Runs tabular CFR (`CFRSolver`), outcome-sampling MCCFR and external-sampling MCCFR on
`python_lost_cities` (default rules: `lc_cfr.spiel.TINY_RULES`) and records the exact
exploitability of each solver's average policy, in points, at log-spaced iteration counts
(1, 2, 5, 10, 20, 50, ... and the last), with the solver's own wall seconds so far
(evaluation excluded); for CFR also that of its current (regret-matching) policy. Also
reports the uniform policy's exploitability, the baseline.
See docs/exploitability.md.

    .venv/bin/python scripts/openspiel_reference.py [--cfr-iterations 300]
        [--os-iterations 65536] [--es-iterations 16384] [--json out.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import time

import numpy as np
from open_spiel.python import policy as policy_lib
from open_spiel.python.algorithms import cfr, external_sampling_mccfr, outcome_sampling_mccfr

from lc_cfr.game.rules import Rules
from lc_cfr.spiel import TINY_RULES
from lc_cfr.spiel.exploitability import policy_figures
from lc_cfr.spiel.game import load_game, tree_size


def schedule(last: int) -> list[int]:
    """1, 2, 5, 10, 20, 50, ... below `last`, then `last` itself."""
    points, decade = [], 1
    while decade < last:
        points += [m * decade for m in (1, 2, 5) if m * decade < last]
        decade *= 10
    return points + [last]


def run_solver(name: str, game, solver, step, iterations: int) -> list[dict]:
    """Steps a solver `iterations` times, measuring its average policy on the schedule."""
    rows, seconds, done = [], 0.0, 0
    for target in schedule(iterations):
        start = time.perf_counter()
        while done < target:
            step(solver)
            done += 1
        seconds += time.perf_counter() - start
        figures = policy_figures(game, solver.average_policy())
        row = {
            "iterations": done,
            "seconds": seconds,
            "exploitability": figures["exploitability"],
            "nash_conv": figures["nash_conv"],
        }
        # Tabular CFR also has a current (regret-matching) policy, the analogue of Deep
        # CFR's `current` view; the MCCFR solvers keep none.
        if hasattr(solver, "current_policy"):
            row["current_exploitability"] = policy_figures(game, solver.current_policy())[
                "exploitability"
            ]
        rows.append(row)
        current = row.get("current_exploitability")
        print(
            f"{name:<16} {done:>8} it {seconds:>8.1f} s  exploitability "
            f"{figures['exploitability']:.5f}"
            + (f" (current policy {current:.5f})" if current is not None else ""),
            flush=True,
        )
    return rows


def print_table(uniform: dict, results: dict) -> None:
    header = (
        f"{'solver':<16} {'iterations':>10} {'seconds':>9} {'exploitability':>15} "
        f"{'current policy':>15}"
    )
    print(header)
    print("-" * len(header))
    print(f"{'uniform':<16} {'-':>10} {'-':>9} {uniform['exploitability']:>15.5f} {'-':>15}")
    for name, rows in results.items():
        for r in rows:
            current = r.get("current_exploitability")
            print(
                f"{name:<16} {r['iterations']:>10} {r['seconds']:>9.2f} "
                f"{r['exploitability']:>15.5f} "
                + (f"{current:>15.5f}" if current is not None else f"{'-':>15}")
            )


def command_line(args: argparse.Namespace) -> str:
    """The command that reproduces this run (rules flags only where they leave the default)."""
    names = [
        f.name
        for f in dataclasses.fields(Rules)
        if getattr(args, f.name) != getattr(TINY_RULES, f.name)
    ]
    names += ["cfr_iterations", "os_iterations", "es_iterations", "seed"]
    flags = " ".join(f"--{name.replace('_', '-')} {getattr(args, name)}" for name in names)
    return f".venv/bin/python scripts/openspiel_reference.py {flags}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for field in dataclasses.fields(Rules):
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=int, default=getattr(TINY_RULES, field.name))
    parser.add_argument("--cfr-iterations", type=int, default=300)
    parser.add_argument("--os-iterations", type=int, default=65536)
    parser.add_argument("--es-iterations", type=int, default=16384)
    parser.add_argument("--seed", type=int, default=0, help="numpy seed of the MCCFR samplers")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    for name in ("cfr_iterations", "os_iterations", "es_iterations"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0")

    rules = Rules(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Rules)})
    game = load_game(rules)
    print(f"{game}")
    size = tree_size(game)
    start = time.perf_counter()
    uniform_policy = policy_lib.TabularPolicy(game)
    enumerate_seconds = time.perf_counter() - start
    size["info_states"] = [len(keys) for keys in uniform_policy.states_per_player]
    start = time.perf_counter()
    uniform = policy_figures(game, uniform_policy)
    uniform["seconds"] = time.perf_counter() - start
    print(
        f"size {size}; enumerating the information states took {enumerate_seconds:.2f} s; "
        f"uniform exploitability {uniform['exploitability']:.5f} ({uniform['seconds']:.2f} s)",
        flush=True,
    )

    # The MCCFR solvers draw from numpy's legacy global generator, so only it can seed them.
    np.random.seed(args.seed)  # noqa: NPY002
    runs = {
        "cfr": (cfr.CFRSolver, lambda s: s.evaluate_and_update_policy(), args.cfr_iterations),
        "outcome_mccfr": (
            outcome_sampling_mccfr.OutcomeSamplingSolver,
            lambda s: s.iteration(),
            args.os_iterations,
        ),
        "external_mccfr": (
            external_sampling_mccfr.ExternalSamplingSolver,
            lambda s: s.iteration(),
            args.es_iterations,
        ),
    }
    results = {}
    for name, (make, step, iterations) in runs.items():
        if iterations > 0:
            results[name] = run_solver(name, game, make(game), step, iterations)
    print_table(uniform, results)

    if args.json:
        document = {
            "command": command_line(args),
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor(),
                "cpus": os.cpu_count(),
                # timings are wall seconds: other jobs on the machine slow them down
                "load_average_at_end": os.getloadavg(),
            },
            "rules": rules.to_dict(),
            "size": size,
            "enumerate_seconds": enumerate_seconds,
            "uniform": uniform,
            "results": results,
        }
        with open(args.json, "w") as f:
            json.dump(document, f, indent=1)
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
