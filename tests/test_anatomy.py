"""Target anatomy statistics: counts, zero shares and variances per game phase."""

import numpy as np
import pytest

from lc_cfr.game.rules import Rules
from lc_cfr.train import anatomy

RULES = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=2, max_turns=10)  # 6 game turns


def test_phases_split_the_turns_of_a_game_without_pile_draws():
    turns = np.arange(12)
    phases = anatomy.phase_of_turn(RULES, turns)
    # 6 turns in 4 phases: 0,0,1,2,2,3 and every later turn in the last phase
    assert phases.tolist() == [0, 0, 1, 2, 2, 3, 3, 3, 3, 3, 3, 3]


def test_anatomy_counts_zero_targets_and_variances_by_phase():
    turn_feature = np.array([0, 1, 5, 5, 0], np.float32) * RULES.turn_scale
    mask = np.zeros((5, RULES.num_actions), bool)
    mask[:, :2] = True
    mask[3, 1] = False  # one legal action only
    target = np.zeros((5, RULES.num_actions), np.float32)
    target[0, :2] = [1.0, -1.0]
    target[2, :2] = [0.5, 0.5]
    target[2, 5] = 9.0  # an illegal entry: ignored
    target[4, :2] = [3.0, 3.0]  # an invalid slot: ignored
    valid = np.array([True, True, True, True, False])
    totals = anatomy.target_anatomy(RULES, turn_feature, mask, target, valid)
    assert totals["samples"] == 4 and totals["zero_samples"] == 2  # rows 1 and 3
    assert totals["choice_samples"] == 3
    assert totals["p0_samples"] == 2 and totals["p3_samples"] == 2
    metrics = anatomy.merge(totals)
    assert metrics["targets/zero_fraction"] == pytest.approx(0.5)
    assert metrics["targets/p0_zero_fraction"] == pytest.approx(0.5)
    assert metrics["targets/p3_share"] == pytest.approx(0.5)
    # legal targets of phase 0: 1, -1, 0, 0 -> variance 0.5; overall 1,-1,0,0,.5,.5,0
    assert metrics["targets/p0_variance"] == pytest.approx(0.5)
    values = np.array([1, -1, 0, 0, 0.5, 0.5, 0])
    assert metrics["targets/variance"] == pytest.approx(values.var())
    # merging sums of two calls is the statistic of the union
    twice = {k: 2 * v for k, v in totals.items()}
    assert anatomy.merge(twice)["targets/variance"] == pytest.approx(values.var())
