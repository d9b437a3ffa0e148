"""The lockstep traversal against the per-traversal reference, mode by mode.

Both run the same networks, seeds and iteration; the sample sets (identified by
traversal and node) must be identical bit for bit, whatever `lanes` is, and so must the
statistics. The networks are on a dyadic grid (see traversal_helpers) so that a batch-1
and a batch-L forward pass agree exactly.
"""

import jax
import numpy as np
import pytest
from traversal_helpers import LANES, SPEC, TINY, lockstep_records, networks, options

from lc_cfr.train import anatomy
from lc_cfr.traversal import api, lockstep, reference

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
    "outcome_floor_league": dict(rm_floor=0.1, opponent_policy="league", lanes=3),
    "outcome_baseline": dict(outcome_estimator="baseline", value_clip=0.0),
    "outcome_baseline_clip_bootstrap_bot": dict(
        outcome_estimator="baseline",
        value_lambda=0.0,
        opponent_policy="safe_heuristic",
        strategy_samples="traverser",
        lanes=3,
    ),
    "outcome_history_value_half_lambda_cutoff": dict(
        outcome_estimator="history_value",
        value_lambda=0.5,
        cutoff_turns=4,
        rm_floor=0.05,
        traverser=0,
    ),
    "external_sampled_depth1": dict(sampling_mode="external", expand_at="sampled", max_depth=1),
    "external_sampled_depth2_path_eps_both_floor": dict(
        sampling_mode="external",
        expand_at="sampled",
        path_epsilon=0.3,
        strategy_samples="both",
        rm_floor=0.05,
        traverser=0,
        lanes=3,
    ),
    "external_sampled_bot_cutoff_rollouts": dict(
        sampling_mode="external",
        expand_at="sampled",
        max_depth=1,
        opponent_policy="safe_heuristic",
        strategy_samples="traverser",
        cutoff_turns=6,
        cutoff_value_mode="rollouts",
        lanes=2,
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
    lanes = settings.pop("lanes", LANES)
    opts = options(**settings)
    nets = networks(seed=len(case))
    samples, stats = lockstep.run_traversals(
        TINY, SPEC, opts, nets, lanes=lanes, seed=11, iteration=3, traverser=traverser
    )
    samples, stats = jax.device_get((samples, stats))
    result = reference.ReferenceTraversal(TINY, SPEC, opts).run(
        nets, seed=11, iteration=3, traverser=traverser
    )
    per_adv, per_strat = api.slots_per_traversal(TINY, opts)
    got = lockstep_records(samples, per_adv, per_strat)
    expectations = [("advantage", result.advantage), ("strategy", result.strategy)]
    if "baseline" in case or "history_value" in case:
        expectations.append(("value", result.value))
    for kind, expected in expectations:
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
    ) and not CASES[case].get("outcome_estimator")
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
                options(num_traversals=9),
                nets,
                lanes=lanes,
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
        (dict(expand_at="leaf"), "traversal.expand_at"),
        (dict(sampling_mode="external", path_epsilon=1.5), "traversal.path_epsilon"),
        (dict(rm_floor=1.0), "regret_matching.floor"),
        (dict(outcome_estimator="vr"), "traversal.outcome_estimator"),
        (dict(outcome_estimator="baseline", sampling_mode="external"), "outcome_estimator"),
        (dict(value_lambda=2.0), "traversal.value_lambda"),
    ]
    for overrides, field in bad:
        lanes = overrides.pop("lanes", LANES)
        with pytest.raises(ValueError, match=field):
            lockstep.run_traversals(
                TINY,
                SPEC,
                options(**overrides),
                nets,
                lanes=lanes,
                seed=0,
                iteration=1,
                traverser=0,
            )


def test_sampled_expansions_reach_every_phase_of_the_game():
    """expand_at='sampled' records real choices all along the game, root expansion only
    on the first turn (the reason the mode exists)."""
    nets = networks(seed=9)
    phases = {}
    for expand_at in ("root", "sampled"):
        opts = options(
            sampling_mode="external", expand_at=expand_at, max_depth=1, num_traversals=64
        )
        phases[expand_at] = set()
        for traverser in (0, 1):  # TINY's 6 turns: each player moves in 3 of the 4 phases
            samples, _ = jax.device_get(
                lockstep.run_traversals(
                    TINY, SPEC, opts, nets, lanes=16, seed=4, iteration=2, traverser=traverser
                )
            )
            valid = samples.advantage_valid
            turns = samples.advantage_info[valid, anatomy.turn_column(TINY)] / TINY.turn_scale
            phases[expand_at] |= set(
                anatomy.phase_of_turn(TINY, np.rint(turns).astype(int)).tolist()
            )
            if expand_at == "sampled":
                assert np.all(samples.advantage_mask[valid].sum(axis=1) >= 2)
                assert valid.sum() >= 48  # most traversals reach their drawn decision
    assert phases["root"] == {0}
    assert phases["sampled"] == set(range(anatomy.PHASES))


def test_regret_matching_floor_keeps_every_legal_action_positive():
    from lc_cfr.traversal import policy as pol

    advantages = np.array([2.0, -1.0, 0.0, 5.0, 3.0], np.float32)
    mask = np.array([True, True, True, False, True])
    plain = np.asarray(pol.regret_matching(advantages, mask, fallback="argmax_tiebreak"))
    floored = np.asarray(
        pol.regret_matching(advantages, mask, fallback="argmax_tiebreak", floor=0.2)
    )
    assert plain[1] == plain[2] == 0.0 and plain[3] == 0.0
    np.testing.assert_allclose(floored[mask], 0.8 * plain[mask] + 0.2 / 4, rtol=1e-6)
    assert floored[3] == 0.0 and np.isclose(floored.sum(), 1.0)
    # the all-negative fallback is floored too
    negative = -np.abs(advantages)
    one_hot = np.asarray(pol.regret_matching(negative, mask, fallback="argmax_tiebreak", floor=0.1))
    assert np.all(one_hot[mask] >= 0.1 / 4 - 1e-7)
    np.testing.assert_array_equal(
        np.asarray(pol.regret_matching(advantages, mask, fallback="uniform", floor=0.0)),
        np.asarray(pol.regret_matching(advantages, mask, fallback="uniform")),
    )
    with pytest.raises(ValueError, match="regret_matching.floor"):
        pol.regret_matching(advantages, mask, fallback="uniform", floor=1.0)
