"""The lockstep traversal against the per-traversal reference, mode by mode.

Both run the same networks, seeds and iteration; the sample sets (identified by
traversal and node) must be identical bit for bit, whatever `lanes` is, and so must the
statistics. The networks are on a dyadic grid (see traversal_helpers) so that a batch-1
and a batch-L forward pass agree exactly.
"""

import jax
import numpy as np
import pytest
from traversal_helpers import SPEC, TINY, lockstep_records, networks, options

from lc_cfr.traversal import lockstep, reference

CASES = {
    "outcome_lanes1": dict(lanes=1),
    "outcome_lanes4": dict(lanes=4),
    "outcome_lanes7_traverser0": dict(lanes=7, traverser=0),
    "outcome_zero": dict(unsampled_regret="zero", traverser=0),
    "outcome_average_strategy_both": dict(
        opponent_policy="average_strategy", strategy_samples="both"
    ),
    "outcome_league_uniform": dict(opponent_policy="league", fallback="uniform", lanes=3),
    "outcome_cutoff_score": dict(cutoff_turns=3, strategy_samples="traverser", value_clip=0.0),
    "outcome_cutoff_rollouts": dict(cutoff_turns=3, cutoff_value_mode="rollouts", lanes=5),
    "external_depth1": dict(sampling_mode="external", max_depth=1, lanes=3),
    "external_depth2_avg_both": dict(
        sampling_mode="external",
        opponent_policy="average_strategy",
        strategy_samples="both",
        traverser=0,
    ),
    "external_league_rollouts": dict(
        sampling_mode="external",
        opponent_policy="league",
        cutoff_turns=4,
        cutoff_value_mode="rollouts",
        lanes=2,
    ),
    "external_cutoff_score_lanes1": dict(sampling_mode="external", cutoff_turns=4, lanes=1),
    "outcome_bot_opponent_safe_rollouts": dict(
        opponent_policy="noisy_safe",
        cutoff_turns=3,
        cutoff_value_mode="rollouts",
        rollout_policy="safe_heuristic",
    ),
    "external_bot_opponent_random_rollouts": dict(
        sampling_mode="external",
        opponent_policy="safe_heuristic_loose",
        cutoff_turns=4,
        cutoff_value_mode="rollouts",
        rollout_policy="random",
        lanes=3,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_lockstep_equals_reference(case):
    settings = dict(CASES[case])
    traverser = settings.pop("traverser", 1)
    opts = options(**settings)
    nets = networks(seed=len(case))
    samples, stats = lockstep.run_traversals(
        TINY, SPEC, opts, nets, seed=11, iteration=3, traverser=traverser
    )
    samples, stats = jax.device_get((samples, stats))
    result = reference.ReferenceTraversal(TINY, SPEC, opts).run(
        nets, seed=11, iteration=3, traverser=traverser
    )
    per_adv, per_strat = lockstep.slots_per_traversal(TINY, opts)
    got = lockstep_records(samples, per_adv, per_strat)
    for kind, expected in [("advantage", result.advantage), ("strategy", result.strategy)]:
        assert len(got[kind]) == len(expected), kind
        assert expected, f"no {kind} samples: the case tests nothing"
        for record in expected:
            info, mask, target = got[kind][(record.traversal, record.node)]
            np.testing.assert_array_equal(info, record.info)
            np.testing.assert_array_equal(mask, record.mask)
            np.testing.assert_array_equal(target, record.target, err_msg=f"{kind} {record}")
    for name in ["nodes", "terminals", "truncations", "cutoffs", "endpoint_depth_sum"] + [
        "clipped_values"
    ]:
        assert int(getattr(stats, name)) == result.stats[name], name
    assert int(stats.rollout_decisions) == result.stats["rollouts"]
    if "cutoff" in case:
        assert int(stats.cutoffs) > 0
    one_network = CASES[case].get("opponent_policy", "network") not in (
        "league",
        "average_strategy",
    )
    if "external" not in case and one_network:
        # mover-synchronised lockstep: one forward per step for every busy lane
        assert int(stats.policy_calls) == int(stats.nodes)


def test_lanes_do_not_change_samples():
    nets = networks(seed=5)
    runs = [
        jax.device_get(
            lockstep.run_traversals(
                TINY,
                SPEC,
                options(lanes=lanes, num_traversals=9),
                nets,
                seed=2,
                iteration=1,
                traverser=0,
            )[0]
        )
        for lanes in (2, 9)
    ]
    for a, b in zip(runs[0], runs[1], strict=True):
        np.testing.assert_array_equal(a, b)


def test_options_are_validated_naming_the_field():
    nets = networks()
    bad = [
        (dict(sampling_mode="full"), "traversal.sampling_mode"),
        (dict(opponent_policy="safe"), "traversal.opponent_policy"),
        (dict(rollout_policy="network"), "traversal.cutoff_rollout_policy"),
        (dict(cutoff_value_mode="net"), "traversal.cutoff_value_mode"),
        (dict(fallback="zero"), "regret_matching.all_negative_fallback"),
        (dict(unsampled_regret="half"), "traversal.outcome_unsampled_regret"),
        (dict(cutoff_turns=TINY.max_turns), "traversal.cutoff_turns"),
        (dict(lanes=0), "traversal.lanes"),
        (dict(sampling_mode="external", max_depth=0), "traversal.max_depth"),
        (dict(strategy_samples="all"), "traversal.strategy_samples"),
    ]
    for overrides, field in bad:
        with pytest.raises(ValueError, match=field):
            lockstep.run_traversals(
                TINY, SPEC, options(**overrides), nets, seed=0, iteration=1, traverser=0
            )
