"""Target anatomy: where in the game the advantage samples of an iteration lie, and
whether their regret targets carry any signal.

A Deep CFR estimator can be unbiased and still useless: outcome sampling's importance
weights are exactly 0 on most long paths, and external sampling from the root records
samples on the traverser's first turn only (docs/experiments.md). These statistics make
both visible every iteration, per game phase. A phase is a quarter of the turns of a game
without pile draws (`N - 2H` turns); later turns count in the last phase.
"""

from __future__ import annotations

import numpy as np

from lc_cfr.game.rules import Rules

PHASES = 4


def turn_column(rules: Rules) -> int:
    """Index of `turn * turn_scale` in the encoding (docs/game.md, the last entry)."""
    return rules.encoding_size - 1


def phase_of_turn(rules: Rules, turns: np.ndarray) -> np.ndarray:
    """[S] int phase 0..PHASES-1 of each turn."""
    game_turns = rules.n_cards - 2 * rules.hand_size
    return np.minimum(turns * PHASES // game_turns, PHASES - 1)


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
      `legal_targets`, and the same five per phase as `p{k}_...`.
    """
    valid = np.asarray(valid, bool)
    mask = np.asarray(mask, bool)[valid]
    target = np.asarray(target, np.float64)[valid]
    turns = np.rint(np.asarray(turn_feature, np.float64)[valid] / rules.turn_scale).astype(int)
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
    return out


def merge(totals: dict[str, float]) -> dict[str, float]:
    """Metrics `targets/...` from the summed totals of an iteration's calls.

    `targets/zero_fraction` and `targets/choice_fraction` are shares of the samples;
    `targets/variance` is the variance of the legal targets;
    `targets/p{k}_share` is phase k's share of the samples, with its own zero fraction
    and variance.
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
    return out
