"""Target anatomy: where in the game the advantage samples of an iteration lie, and
whether their regret targets carry any signal.

A Deep CFR estimator can be unbiased and still useless: outcome sampling's importance
weights are exactly 0 on most long paths, and external sampling from the root records
samples on the traverser's first turn only (docs/experiments.md). These statistics make
both visible every iteration, per game phase, and where in the game the samples lie,
turn by turn. A phase is a quarter of `max_turns`, the turns a game may last: the games
traversals play may run to the cap (drawing from the discard piles), and a phase by the
length of a game without pile draws would put their second half in its last phase.
"""

from __future__ import annotations

import numpy as np

from lc_cfr.game.rules import Rules

PHASES = 4


def turn_column(rules: Rules) -> int:
    """Index of `turn * turn_scale` in the encoding (docs/game.md, the last entry)."""
    return rules.encoding_size - 1


def phase_of_turn(rules: Rules, turns: np.ndarray) -> np.ndarray:
    """[S] int phase 0..PHASES-1 of each turn (0 to max_turns - 1)."""
    return np.minimum(turns * PHASES // rules.max_turns, PHASES - 1)


def sample_turns(rules: Rules, turn_feature: np.ndarray) -> np.ndarray:
    """[S] int the turn of each sample, from the encoding's turn entry."""
    turns = np.asarray(turn_feature, np.float64) / rules.turn_scale
    return np.rint(turns).astype(int)


def turn_counts(rules: Rules, turn_feature: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """[max_turns] float how many valid samples lie at each turn (summable over calls)."""
    turns = np.minimum(
        sample_turns(rules, turn_feature)[np.asarray(valid, bool)], rules.max_turns - 1
    )
    return np.bincount(turns, minlength=rules.max_turns).astype(np.float64)


def turn_distribution(prefix: str, counts: np.ndarray) -> dict[str, float]:
    """`{prefix}_mean`, `_p10`, `_p50`, `_p90` and `_max` of the turns whose sample counts
    are `counts` (all 0 without samples)."""
    counts = np.asarray(counts, np.float64)
    total = counts.sum()
    if total == 0:
        return {f"{prefix}_{name}": 0.0 for name in ("mean", "p10", "p50", "p90", "max")}
    cumulative = np.cumsum(counts) / total
    out = {f"{prefix}_mean": float(np.dot(np.arange(len(counts)), counts) / total)}
    for q in (10, 50, 90):  # the lowest turn with at least q% of the samples at or before it
        out[f"{prefix}_p{q}"] = float(np.searchsorted(cumulative, q / 100 - 1e-12))
    out[f"{prefix}_max"] = float(np.flatnonzero(counts)[-1])
    return out


def target_anatomy(
    rules: Rules,
    turn_feature: np.ndarray,
    mask: np.ndarray,
    target: np.ndarray,
    valid: np.ndarray,
) -> dict[str, float]:
    """Counts and moments of the valid advantage samples, overall and per phase.

    Args:
      rules: the game variant.
      turn_feature: [S] the encoding's turn entry of every sample slot.
      mask: [S, A] legal actions.
      target: [S, A] regret targets.
      valid: [S] the slot holds a sample.

    Returns:
      Per-call totals, summable over calls (`merge` turns sums into fractions):
      `samples`, `zero_samples` (every legal target exactly 0), `choice_samples` (two or
      more legal actions), `square_sum` and `value_sum` (over legal targets),
      `legal_targets`, the same five per phase as `p{k}_...`, and `turn_counts`
      ([max_turns], `turn_counts`).
    """
    valid = np.asarray(valid, bool)
    mask = np.asarray(mask, bool)[valid]
    target = np.asarray(target, np.float64)[valid]
    turns = sample_turns(rules, np.asarray(turn_feature)[valid])
    phase = phase_of_turn(rules, turns)
    legal_target = np.where(mask, target, 0.0)
    per_sample = {
        "samples": np.ones(len(phase)),
        "zero_samples": ~np.any(legal_target != 0, axis=1),
        "choice_samples": np.sum(mask, axis=1) >= 2,
        "square_sum": np.sum(legal_target**2, axis=1),
        "value_sum": np.sum(legal_target, axis=1),
        "legal_targets": np.sum(mask, axis=1),
    }
    out = {name: float(np.sum(values)) for name, values in per_sample.items()}
    for k in range(PHASES):
        here = phase == k
        for name, values in per_sample.items():
            out[f"p{k}_{name}"] = float(np.sum(values[here]))
    out["turn_counts"] = turn_counts(rules, turn_feature, valid)
    return out


def merge(totals: dict[str, float]) -> dict[str, float]:
    """Metrics `targets/...` from the summed totals of an iteration's calls.

    `targets/zero_fraction` and `targets/choice_fraction` are shares of the samples;
    `targets/variance` is the variance of the legal targets;
    `targets/p{k}_share` is phase k's share of the samples, with its own zero fraction
    and variance; `targets/turn_*` the distribution of their turns (`turn_distribution`),
    and `strategy_samples/turn_*` that of the strategy samples where the totals hold
    their `strategy_turn_counts`.
    """

    def block(prefix: str, key: str) -> dict[str, float]:
        samples = totals[prefix + "samples"]
        legal = max(totals[prefix + "legal_targets"], 1.0)
        mean = totals[prefix + "value_sum"] / legal
        return {
            f"targets/{key}zero_fraction": totals[prefix + "zero_samples"] / max(samples, 1.0),
            f"targets/{key}variance": max(totals[prefix + "square_sum"] / legal - mean**2, 0.0),
        }

    out = block("", "")
    out["targets/samples"] = totals["samples"]
    out["targets/choice_fraction"] = totals["choice_samples"] / max(totals["samples"], 1.0)
    for k in range(PHASES):
        out.update(block(f"p{k}_", f"p{k}_"))
        out[f"targets/p{k}_share"] = totals[f"p{k}_samples"] / max(totals["samples"], 1.0)
    if "turn_counts" in totals:
        out.update(turn_distribution("targets/turn", totals["turn_counts"]))
    if "strategy_turn_counts" in totals:
        out.update(turn_distribution("strategy_samples/turn", totals["strategy_turn_counts"]))
    return out
