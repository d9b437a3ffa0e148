"""The lockstep traversal against the per-traversal reference, mode by mode, with chex.

Both run the same networks, seeds and iteration; the sample sets (identified by
traversal and node) must be identical bit for bit, whatever `lanes` is, and so must the
statistics. The networks are on a dyadic grid (see traversal_helpers) so that a batch-1
and a batch-L forward pass agree exactly.

The cases are the parity table `TRAVERSAL_CASES` of tests/traversal_helpers.py, shared
with the torch-vs-jax tests. Samples are compared as one pytree per run with
`chex.assert_trees_all_equal` (no tolerance: bit-exact), so a failure names the leaf
('advantage/(3, 1)/target'); statistics likewise, as a dict. Regret matching is held to
a single trace for same-shaped inputs (`chex.assert_max_traces`).
"""

import functools

import chex
import jax
import numpy as np
import pytest
from traversal_helpers import (
    LANES,
    SPEC,
    TINY,
    TRAVERSAL_CASES,
    lockstep_records,
    networks,
    options,
    reference_records,
)

from lc_cfr.train import anatomy
from lc_cfr.traversal import api, lockstep, reference
from lc_cfr.traversal import policy as pol

# lockstep statistic -> the reference's name for it
STAT_NAMES = {
    name: name
    for name in ("nodes", "terminals", "truncations", "cutoffs", "endpoint_depth_sum")
    + ("clipped_values",)
}
STAT_NAMES["rollout_decisions"] = "rollouts"


def _case_param(case: str):
    """The targets of the estimators with a value network (baseline, history_value) are
    off the dyadic grid: the fused lockstep and the op-by-op reference round them alike
    only when XLA optimises both (conftest.py)."""
    if TRAVERSAL_CASES[case].overrides.get("outcome_estimator", "importance") != "importance":
        return pytest.param(case, marks=pytest.mark.xla_optimized)
    return case


@pytest.mark.parametrize("case", [_case_param(case) for case in sorted(TRAVERSAL_CASES)])
def test_lockstep_equals_reference(case):
    row = TRAVERSAL_CASES[case]
    opts = row.options()
    nets = networks(seed=len(case))
    samples, stats = lockstep.run_traversals(
        TINY,
        SPEC,
        opts,
        nets,
        lanes=row.lanes,
        seed=11,
        iteration=3,
        traverser=row.traverser,
        schedule=row.schedule,
    )
    samples, stats = jax.device_get((samples, stats))
    result = reference.ReferenceTraversal(TINY, SPEC, opts).run(
        nets, seed=11, iteration=3, traverser=row.traverser
    )
    per_adv, per_strat = api.slots_per_traversal(TINY, opts)
    per_value = api.value_slots_per_traversal(TINY, opts)
    got = lockstep_records(samples, per_adv, per_strat, per_value)
    kinds = ["advantage", "strategy"]
    if api.uses_value_network(opts):  # the estimators and leaves with a value network
        kinds.append("value")
    want = {kind: reference_records(getattr(result, kind)) for kind in kinds}
    for kind in kinds:
        assert want[kind], f"no {kind} samples: the case tests nothing"
        assert sorted(got[kind]) == sorted(want[kind]), f"{kind}: other (traversal, node)s"
    chex.assert_trees_all_equal({kind: got[kind] for kind in kinds}, want, custom_message=case)
    path_ends = dict(zip(api.PATH_END_NAMES, stats.path_ends.tolist(), strict=True))
    chex.assert_trees_all_equal(
        {name: int(getattr(stats, name)) for name in STAT_NAMES} | path_ends,
        {name: result.stats[ref_name] for name, ref_name in STAT_NAMES.items()}
        | {name: result.stats[name] for name in api.PATH_END_NAMES},
        custom_message=f"{case} statistics",
    )
    assert sum(path_ends.values()) == int(stats.terminals + stats.truncations + stats.cutoffs)
    if opts.cutoff_turns > 0:
        assert int(stats.cutoffs) > 0
    if api.has_leaves(opts):  # both kinds of child: valued at a leaf, and checked
        assert int(stats.leaves) == result.stats["leaves"] > 0
        # sums over lanes in another order: equal to float32 rounding
        np.testing.assert_allclose(stats.leaf_checks, result.stats["leaf_checks"], rtol=1e-5)
        assert stats.leaf_checks[:, 0].sum() > 0
    one_network = opts.opponent_policy not in ("league", "average_strategy")
    one_mover = opts.sampling_mode == "outcome" or row.schedule == "one_mover"
    if one_mover and one_network and opts.outcome_estimator == "importance":
        # mover-synchronised lockstep: one forward per decision
        assert int(stats.policy_calls) == int(stats.nodes)


def test_the_table_has_every_value_of_every_mode():
    """A row combines several options (each row costs seconds of compiles) rather than
    giving each value a row of its own: this holds the table to keeping each value of the
    traversal's modes in some row, the numeric options both off and on, and the
    lockstep's lanes at one, a few and more than the traversals."""
    rows = [(case, case.options()) for case in TRAVERSAL_CASES.values()]

    def values(field):
        return {getattr(opts, field) for _, opts in rows}

    for field, want in [
        ("sampling_mode", api.SAMPLING_MODES),
        ("strategy_samples", api.STRATEGY_SAMPLE_NODES),
        ("cutoff_value_mode", api.CUTOFF_VALUE_MODES),
        ("expand_at", api.EXPANSION_POINTS),
        ("leaf_targets", api.LEAF_TARGETS),
        ("outcome_unsampled_regret", pol.UNSAMPLED_REGRET_MODES),
        ("outcome_estimator", pol.OUTCOME_ESTIMATORS),
        ("all_negative_fallback", pol.FALLBACKS),
    ]:
        assert values(field) >= set(want), field
    assert {case.schedule for case, _ in rows} == set(api.LOCKSTEP_SCHEDULES)
    assert {case.traverser for case, _ in rows} == {0, 1}
    lanes = {case.lanes for case, _ in rows}
    assert 1 in lanes and max(lanes) > options().traversals_per_player
    assert {"network", "average_strategy", "league"} <= values("opponent_policy")
    assert len(values("opponent_policy") & set(api.BOT_NAMES)) >= 5
    assert len(values("cutoff_rollout_policy")) >= 2 and len(values("draws")) >= 2
    for field in ("outcome_sampling_value_clip", "cutoff_turns", "floor", "path_epsilon"):
        assert 0 in values(field) and len(values(field)) >= 2, field
    assert len(values("max_depth")) >= 2
    for field in ("path_expansions", "leaf_decisions", "value_lambda"):  # default, 2 more
        assert len(values(field)) >= 3, field
    # the estimators with a value network clip their sampled values too: with and without
    valued = {
        o.outcome_sampling_value_clip > 0 for _, o in rows if o.outcome_estimator != "importance"
    }
    assert valued == {True, False}


def test_lanes_do_not_change_samples():
    nets = networks(seed=5)
    runs = [
        jax.device_get(
            lockstep.run_traversals(
                TINY,
                SPEC,
                options(traversals_per_player=9),
                nets,
                lanes=lanes,
                seed=2,
                iteration=1,
                traverser=0,
            )[0]
        )
        for lanes in (2, 9)
    ]
    chex.assert_trees_all_equal(*runs)


def test_options_are_validated_naming_the_field():
    nets = networks()
    bad = [
        (dict(sampling_mode="full"), "traversal.sampling_mode"),
        (dict(opponent_policy="safe"), "traversal.opponent_policy"),
        (dict(cutoff_rollout_policy="network"), "traversal.cutoff_rollout_policy"),
        (dict(cutoff_value_mode="net"), "traversal.cutoff_value_mode"),
        (dict(all_negative_fallback="zero"), "regret_matching.all_negative_fallback"),
        (dict(outcome_unsampled_regret="half"), "traversal.outcome_unsampled_regret"),
        (dict(cutoff_turns=TINY.max_turns), "traversal.cutoff_turns"),
        (dict(lanes=0), "traversal.lanes"),
        (dict(schedule="mover"), "traversal.lockstep_schedule"),
        (dict(sampling_mode="external", max_depth=0), "traversal.max_depth"),
        (dict(strategy_samples="all"), "traversal.strategy_samples"),
        (dict(expand_at="leaf"), "traversal.expand_at"),
        (dict(sampling_mode="external", path_epsilon=1.5), "traversal.path_epsilon"),
        (dict(floor=1.0), "regret_matching.floor"),
        (dict(outcome_estimator="vr"), "traversal.outcome_estimator"),
        (dict(outcome_estimator="baseline", sampling_mode="external"), "outcome_estimator"),
        (dict(value_lambda=2.0), "traversal.value_lambda"),
        (dict(leaf_decisions=-1), "traversal.leaf_decisions"),
        (dict(leaf_decisions=2), "traversal.leaf_decisions > 0 needs"),  # outcome sampling
        (
            dict(sampling_mode="external", expand_at="sampled", leaf_decisions=2, cutoff_turns=4),
            "traversal.cutoff_turns=0",
        ),
        (
            dict(
                sampling_mode="external", expand_at="path", leaf_decisions=2, leaf_check_share=0.0
            ),
            "traversal.leaf_check_share",
        ),
        (dict(leaf_targets="playouts"), "traversal.leaf_targets"),
        (dict(draws="piles"), "draws must be one of"),
        (dict(sampling_mode="external", expand_at="path", path_expansions=0), "path_expansions"),
        (dict(sampling_mode="external", expand_at="sampled", path_expansions=2), "path_expansions"),
    ]
    for overrides, field in bad:
        lanes = overrides.pop("lanes", LANES)
        schedule = overrides.pop("schedule", "all_lanes")
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
                schedule=schedule,
            )


def test_path_choices_are_distinct_and_uniform_over_subsets():
    """api.path_choices: min(count, choices) distinct choices in increasing order, -1
    past them; the first draw is path_choice's (one expansion is what it always was);
    every subset of a size equally likely (4000 games, 10 subsets of 2 among 5: each
    within 5 standard deviations of 400)."""
    games = np.arange(4000)
    drawn = np.asarray(api.path_choices(7, 3, games, 5, 2))
    assert (drawn[:, 0] < drawn[:, 1]).all() and drawn.min() >= 0 and drawn.max() <= 4
    first = np.asarray(api.path_choice(7, 3, games, 5))
    assert ((drawn[:, 0] == first) | (drawn[:, 1] == first)).all()
    one = np.asarray(api.path_choices(7, 3, games, 5, 1))[:, 0]
    np.testing.assert_array_equal(one, first)
    _, counts = np.unique(drawn[:, 0] * 5 + drawn[:, 1], return_counts=True)
    assert len(counts) == 10 and np.abs(counts - 400).max() < 5 * np.sqrt(400 * 0.9)
    few = np.asarray(api.path_choices(7, 3, np.arange(3), np.array([0, 1, 2]), 3))
    np.testing.assert_array_equal(few, [[-1, -1, -1], [0, -1, -1], [0, 1, -1]])


def test_sampled_expansions_reach_every_phase_of_the_game():
    """expand_at='sampled' and 'path' record real choices all along the game, root
    expansion only on the first turn (the reason the modes exist); only 'path' reaches
    the turns past those of a game without pile draws."""
    nets = networks(seed=9)
    turns = {}
    for expand_at in ("root", "sampled", "path"):
        opts = options(
            sampling_mode="external", expand_at=expand_at, max_depth=1, traversals_per_player=64
        )
        turns[expand_at] = set()
        for traverser in (0, 1):
            samples, _ = jax.device_get(
                lockstep.run_traversals(
                    TINY, SPEC, opts, nets, lanes=16, seed=4, iteration=2, traverser=traverser
                )
            )
            valid = samples.advantage_valid
            info = samples.advantage_info[valid, anatomy.turn_column(TINY)]
            turns[expand_at] |= set(anatomy.sample_turns(TINY, info).tolist())
            if expand_at != "root":
                assert np.all(samples.advantage_mask[valid].sum(axis=1) >= 2)
                assert valid.sum() >= 48  # most traversals reach their drawn decision
    game_turns = TINY.n_cards - 2 * TINY.hand_size  # 6: 'sampled' draws from these
    assert turns["root"] == {0, 1}
    assert turns["sampled"] >= set(range(game_turns))
    assert turns["path"] >= set(range(game_turns)) and max(turns["path"]) >= game_turns + 2
    assert max(turns["path"]) > max(turns["sampled"])
    phases = {
        k: set(anatomy.phase_of_turn(TINY, np.array(sorted(v))).tolist()) for k, v in turns.items()
    }
    assert phases["path"] == set(range(anatomy.PHASES))


def test_regret_matching_floor_keeps_every_legal_action_positive():
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
    chex.assert_trees_all_equal(
        pol.regret_matching(advantages, mask, fallback="uniform", floor=0.0),
        pol.regret_matching(advantages, mask, fallback="uniform"),
    )
    with pytest.raises(ValueError, match="regret_matching.floor"):
        pol.regret_matching(advantages, mask, fallback="uniform", floor=1.0)


def test_regret_matching_traces_once_for_same_shaped_inputs():
    """Jitted over a batch of nodes (as in the lockstep loop), regret matching compiles
    once per shape: new advantages and masks of the same shapes never retrace."""
    chex.clear_trace_counter()

    @jax.jit
    @chex.assert_max_traces(n=1)
    def matched(advantages, mask):
        rm = functools.partial(pol.regret_matching, fallback="argmax_tiebreak", floor=0.1)
        return jax.vmap(rm)(advantages, mask)

    rng = np.random.default_rng(3)
    for _ in range(5):
        advantages = rng.normal(size=(8, TINY.num_actions)).astype(np.float32)
        mask = rng.random((8, TINY.num_actions)) < 0.6
        mask[:, 0] = True  # at least one legal action per node
        policy = np.asarray(matched(advantages, mask))
        assert np.all(policy[~mask] == 0) and np.all(policy[mask] > 0)
        np.testing.assert_allclose(policy.sum(axis=1), 1.0, rtol=1e-6)
    with pytest.raises(AssertionError, match="traced > 1 times"):
        matched(advantages[:4], mask[:4])  # a new shape is a second trace
