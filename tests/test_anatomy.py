"""Target anatomy statistics: counts, zero shares and variances per game phase."""

import numpy as np
import pytest

from lc_cfr.game.rules import Rules
from lc_cfr.train import anatomy

RULES = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=2, max_turns=10)  # 6 game turns


def test_phases_split_the_turns_a_game_may_last():
    phases = anatomy.phase_of_turn(RULES, np.arange(RULES.max_turns))
    # max_turns 10 in 4 phases: a game that draws from the piles reaches the last ones
    assert phases.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 3, 3]


def test_turn_distribution_of_the_samples():
    turn_feature = np.array([0, 2, 2, 3, 9, 9, 1], np.float32) * RULES.turn_scale
    valid = np.array([True, True, True, True, True, True, False])
    counts = anatomy.turn_counts(RULES, turn_feature, valid)
    assert counts.tolist() == [1, 0, 2, 1, 0, 0, 0, 0, 0, 2]
    got = anatomy.turn_distribution("targets/turn", counts)
    assert got == {
        "targets/turn_mean": pytest.approx(25 / 6),
        "targets/turn_p10": 0.0,
        "targets/turn_p50": 2.0,  # half the samples at turns 0-2
        "targets/turn_p90": 9.0,
        "targets/turn_max": 9.0,
    }
    assert anatomy.turn_distribution("x", np.zeros(3))["x_max"] == 0.0


def test_anatomy_counts_zero_targets_and_variances_by_phase():
    turn_feature = np.array([0, 1, 9, 9, 0], np.float32) * RULES.turn_scale
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
    assert metrics["targets/turn_p50"] == 1.0 and metrics["targets/turn_max"] == 9.0
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
