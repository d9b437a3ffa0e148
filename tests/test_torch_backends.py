"""The Cython + torch backends against `jax` (docs/design.md section 6), and their machinery.

Every mode of docs/design.md section 3 that they implement runs through `recursive` and
`interleaved` (in-process, so a case costs milliseconds) and a representative subset
through `server` (a real server process): each must give the lockstep backend's sample
set, the same information states, masks and slots, targets within TARGET_RTOL /
TARGET_ATOL, and the same statistics; `interleaved` (suspendable contexts) and `server`
must give the samples of `recursive` (C recursion) bit for bit.

The test networks are dyadic (tests/traversal_helpers.py), so flax and torch forwards
agree bit for bit and every sampled action is the same; the targets still differ in the
last bits because XLA may fuse multiply-adds and compute a division as a multiplication
by a reciprocal where the C core does neither.

Worker pools are checked to give the in-process samples exactly, a dead server must fail
a traversal within seconds, and short training runs of each backend stay close to the
`jax` run.
"""

import json
import os
import pathlib
import signal
import sys
import time

import jax
import numpy as np
import pytest

from lc_cfr.train import Trainer
from lc_cfr.traversal import api, lockstep
from lc_cfr.traversal.registry import make_backend
from lc_cfr.traversal.torch import WorkerSettings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from traversal_helpers import SPEC, TINY, lockstep_records, networks, options  # noqa: E402

TARGET_RTOL = 1e-5  # relative to the target's magnitude
TARGET_ATOL = 1e-6  # float32 rounding of the policy arithmetic
EXACT_STATS = (
    "nodes",
    "terminals",
    "truncations",
    "cutoffs",
    "endpoint_depth_sum",
    "rollout_decisions",
    "clipped_values",
)

CASES = {
    "outcome": {},
    "outcome_zero_regret": dict(unsampled_regret="zero"),
    "outcome_no_clip": dict(value_clip=0.0),
    "outcome_tight_clip": dict(value_clip=0.5),
    "outcome_cutoff_score": dict(cutoff_turns=4),
    "outcome_cutoff_rollouts": dict(
        cutoff_turns=4, cutoff_value_mode="rollouts", rollout_policy="safe_heuristic"
    ),
    "outcome_average_strategy": dict(opponent_policy="average_strategy"),
    "outcome_league": dict(opponent_policy="league"),
    "outcome_bot_safe": dict(opponent_policy="safe_heuristic"),
    "outcome_bot_noisy": dict(opponent_policy="noisy_safe", strategy_samples="traverser"),
    "outcome_bot_random": dict(opponent_policy="random"),
    "outcome_store_both": dict(strategy_samples="both"),
    "outcome_uniform_fallback": dict(fallback="uniform"),
    "external_depth1": dict(sampling_mode="external", max_depth=1),
    "external_depth2": dict(sampling_mode="external", max_depth=2),
    "external_cutoff_score": dict(sampling_mode="external", cutoff_turns=3),
    "external_cutoff_rollouts": dict(
        sampling_mode="external", cutoff_turns=4, cutoff_value_mode="rollouts"
    ),
    "external_league": dict(sampling_mode="external", opponent_policy="league"),
    "external_bot": dict(sampling_mode="external", opponent_policy="passive_discard"),
    "external_average_both": dict(
        sampling_mode="external", opponent_policy="average_strategy", strategy_samples="both"
    ),
}
SERVER_CASES = (
    "outcome",
    "outcome_cutoff_rollouts",
    "outcome_average_strategy",
    "external_league",
    "external_bot",
)
NETWORKS = networks()
QUOTA = 10


def settings(**overrides):
    base = dict(
        num_workers=0, chunk_size=4, interleave_width=3, interleave_max_batch=4, league_size=3
    )
    base.update(overrides)
    return WorkerSettings(**base)


def jax_result(opts, traverser):
    samples, stats = lockstep.run_traversals(
        TINY, SPEC, opts, NETWORKS, lanes=5, seed=5, iteration=3, traverser=traverser
    )
    return samples, api.TraversalStats(*(int(x) for x in stats))


def assert_same_samples(got, want, opts, *, exact=False) -> dict:
    """Same slots, infos and masks; targets within tolerance (or bit-exact).

    Returns the number of samples of each kind.
    """
    per = api.slots_per_traversal(TINY, opts)
    got, want = lockstep_records(got, *per), lockstep_records(want, *per)
    for kind in ("advantage", "strategy"):
        assert sorted(got[kind]) == sorted(want[kind]), kind
        for key, (info, mask, target) in want[kind].items():
            g_info, g_mask, g_target = got[kind][key]
            np.testing.assert_array_equal(g_info, info, err_msg=f"{kind} {key}")
            np.testing.assert_array_equal(g_mask, mask, err_msg=f"{kind} {key}")
            if exact:
                np.testing.assert_array_equal(g_target, target, err_msg=f"{kind} {key}")
            else:
                np.testing.assert_allclose(
                    g_target, target, rtol=TARGET_RTOL, atol=TARGET_ATOL, err_msg=f"{kind} {key}"
                )
    return {kind: len(want[kind]) for kind in want}


def assert_same_stats(stats, want: api.TraversalStats):
    assert {k: stats[k] for k in EXACT_STATS} == {
        "nodes": want.nodes,
        "terminals": want.terminals,
        "truncations": want.truncations,
        "cutoffs": want.cutoffs,
        "endpoint_depth_sum": want.endpoint_depth_sum,
        "rollout_decisions": want.rollout_decisions,
        "clipped_values": want.clipped_values,
    }
    assert stats["policy_calls"] > 0 and stats["forward_batches"] > 0


def run_backend(name, opts, traverser, **overrides):
    backend = make_backend(
        name, rules=TINY, spec=SPEC, options=opts, lanes=5, workers=settings(**overrides)
    )
    try:
        return backend.traverse(NETWORKS, seed=5, iteration=3, traverser=traverser)
    finally:
        backend.close()


@pytest.mark.parametrize("case", sorted(CASES))
def test_recursive_and_interleaved_match_jax(case):
    """recursive ~ jax (within tolerance); interleaved == recursive (bit for bit: the two
    C walks share their per-node arithmetic and differ only in control flow)."""
    opts = options(num_traversals=QUOTA, **CASES[case])
    counts = {"advantage": 0, "strategy": 0}
    for traverser in (0, 1):
        want, want_stats = jax_result(opts, traverser)
        recursive, stats = run_backend("recursive", opts, traverser)
        for kind, count in assert_same_samples(recursive, want, opts).items():
            counts[kind] += count
        assert_same_stats(stats, want_stats)
        # batch 1: one call per decision that needs a network, one or two rows each
        assert stats["forward_batches"] <= stats["nodes"]
        assert stats["forward_batches"] <= stats["policy_calls"] <= 2 * stats["forward_batches"]
        interleaved, interleaved_stats = run_backend("interleaved", opts, traverser)
        assert_same_samples(interleaved, recursive, opts, exact=True)
        for key in EXACT_STATS + ("policy_calls",):
            assert interleaved_stats[key] == stats[key], key
    assert min(counts.values()) > 0, f"the case stores no samples of a kind: {counts}"
    if case == "outcome_tight_clip":  # the clip statistic is exercised, not just zero
        assert stats["clipped_values"] > 0


@pytest.mark.parametrize("case", SERVER_CASES)
def test_server_matches_jax(case):
    opts = options(num_traversals=QUOTA, **CASES[case])
    want, want_stats = jax_result(opts, 1)
    got, stats = run_backend("server", opts, 1)
    assert_same_samples(got, want, opts)
    assert_same_stats(stats, want_stats)
    recursive, _ = run_backend("recursive", opts, 1)
    assert_same_samples(got, recursive, opts, exact=True)
    assert 1 <= stats["server_batch_max"] <= 2 and stats["server_rows"] == stats["policy_calls"]


@pytest.mark.parametrize("name", ["recursive", "interleaved", "server"])
def test_worker_pool_gives_the_in_process_samples(name):
    opts = options(num_traversals=QUOTA, **CASES["outcome_league"])
    local, local_stats = run_backend(name, opts, 0)
    pooled, pooled_stats = run_backend(name, opts, 0, num_workers=2, chunk_size=3)
    assert_same_samples(pooled, local, opts, exact=True)
    for key in EXACT_STATS + ("policy_calls",):
        assert pooled_stats[key] == local_stats[key], key
    if name == "server":  # two workers' requests can share a server batch
        assert 1 <= pooled_stats["server_batch_max"] <= 4


def test_interleaved_batches_up_to_its_limits():
    opts = options(num_traversals=QUOTA)
    wide_settings = dict(interleave_width=8, chunk_size=QUOTA)
    _, wide = run_backend("interleaved", opts, 0, interleave_max_batch=64, **wide_settings)
    _, narrow = run_backend("interleaved", opts, 0, interleave_max_batch=2, **wide_settings)
    _, single = run_backend("recursive", opts, 0)
    assert wide["policy_calls"] == narrow["policy_calls"] == single["policy_calls"]
    batch = lambda s: s["policy_calls"] / s["forward_batches"]  # noqa: E731
    assert batch(single) == 1.0
    assert 2.0 < batch(wide) <= 8.0  # several traversals share a forward
    assert batch(narrow) <= 2.0
    for key in ("forward_seconds", "scheduler_seconds"):
        assert wide[key] > 0.0


def test_dead_server_fails_the_traversal_quickly():
    opts = options(num_traversals=QUOTA)
    backend = make_backend(
        "server", rules=TINY, spec=SPEC, options=opts, lanes=5, workers=settings(num_workers=1)
    )
    try:
        backend.traverse(NETWORKS, seed=5, iteration=3, traverser=0)  # warm: workers up
        os.kill(backend.server.pid, signal.SIGKILL)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="server"):
            backend.traverse(NETWORKS, seed=5, iteration=4, traverser=0)
        assert time.monotonic() - start < 15.0
    finally:
        backend.close()


def test_dead_worker_fails_the_traversal_with_a_clear_error():
    opts = options(num_traversals=QUOTA)
    backend = make_backend(
        "recursive", rules=TINY, spec=SPEC, options=opts, lanes=5, workers=settings(num_workers=2)
    )
    try:
        backend.traverse(NETWORKS, seed=5, iteration=3, traverser=0)  # workers are up
        victim = next(iter(backend.pool._processes.values()))  # no public handle on them
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(10)
        with pytest.raises(RuntimeError, match="traversal worker of the recursive backend died"):
            backend.traverse(NETWORKS, seed=5, iteration=4, traverser=0)
    finally:
        backend.close()


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(num_workers=-1), "traversal.num_workers"),
        (dict(chunk_size=0), "traversal.worker_chunk_size"),
        (dict(interleave_width=0), "traversal.interleave_width"),
        (dict(interleave_max_batch=0), "traversal.interleave_max_batch"),
        (dict(interleave_width=5, chunk_size=4), "traversal.worker_chunk_size"),
        (dict(device="tpu"), "run.device"),
    ],
)
def test_bad_settings_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        make_backend(
            "interleaved",
            rules=TINY,
            spec=SPEC,
            options=options(),
            lanes=5,
            workers=settings(**overrides),
        )


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(sampling_mode="external", expand_at="sampled"), "traversal.expand_at"),
        (dict(rm_floor=0.1), "regret_matching.floor"),
        (dict(outcome_estimator="baseline"), "traversal.outcome_estimator"),
    ],
)
def test_modes_of_the_jax_backend_only_are_refused_naming_it(overrides, field):
    for name in ("recursive", "interleaved", "server"):
        with pytest.raises(ValueError, match=field.replace(".", r"\.") + ".*jax backend only"):
            make_backend(
                name,
                rules=TINY,
                spec=SPEC,
                options=options(**overrides),
                lanes=5,
                workers=settings(),
            )


def test_cuda_is_refused_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ValueError, match=r"run\.device"):
        make_backend(
            "server",
            rules=TINY,
            spec=SPEC,
            options=options(),
            lanes=5,
            workers=settings(device="cuda"),
        )


# ----- short training runs -------------------------------------------------------------


def _train(workdir, backend, iterations=2, **overrides):
    """A smoke run of `iterations` with `backend` in-process; (state, metric rows)."""
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "configs"))
    import default as default_config

    config = default_config.get_config("smoke,classic")  # modes every backend has
    config.logging.tensorboard = False
    config.checkpoint.save_every = 0
    config.evaluation.eval_every = 0
    config.run.max_iterations = iterations
    config.traversal.backend = backend
    config.traversal.num_workers = 0
    for dotted, value in overrides.items():
        block, field = dotted.split(".")
        config[block][field] = value
    state = Trainer(config, workdir).run()
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    return state, [json.loads(line) for line in lines if line.strip()]


@pytest.mark.slow
def test_short_training_runs_agree_with_jax(tmp_path):
    """Two smoke iterations: traversal statistics equal, losses within 1e-4 (relative).

    The networks are real (not dyadic): torch and flax forwards differ in the last bits,
    which could flip a sampled action whose uniform draw lies within an ulp of a
    boundary; on these runs none does, so nodes and memories agree exactly and the losses
    differ only by the targets' rounding.
    """
    _, want = _train(tmp_path / "jax", "jax")
    for backend in ("recursive", "interleaved", "server"):
        _, rows = _train(tmp_path / backend, backend)
        assert len(rows) == len(want) == 2
        for got_row, want_row in zip(rows, want, strict=True):
            for key in ("traversal/nodes", "traversal/terminals", "memory/strategy_seen"):
                assert got_row[key] == want_row[key], (backend, key)
            for key in ("loss/advantage_p0", "loss/advantage_p1", "loss/strategy"):
                assert got_row[key] == pytest.approx(want_row[key], rel=1e-4), (backend, key)


@pytest.mark.slow
def test_torch_learner_tracks_optax_and_resumes_exactly(tmp_path):
    """optimization.learner=torch: the same batches as optax, parameters within float32
    rounding after two iterations; a resumed torch run equals the uninterrupted one."""
    optax_state, optax_rows = _train(tmp_path / "optax", "recursive")
    torch_state, torch_rows = _train(
        tmp_path / "torch", "recursive", **{"optimization.learner": "torch"}
    )
    for a, b in zip(
        jax.tree.leaves(optax_state.advantage_params + (optax_state.strategy_params,)),
        jax.tree.leaves(torch_state.advantage_params + (torch_state.strategy_params,)),
        strict=True,
    ):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-4, atol=1e-5)
    for got, want in zip(torch_rows, optax_rows, strict=True):
        assert got["traversal/nodes"] == want["traversal/nodes"]
        for key in ("loss/advantage_p0", "loss/advantage_p1", "loss/strategy"):
            assert got[key] == pytest.approx(want[key], rel=1e-4), key

    _train(tmp_path / "split", "recursive", iterations=1, **{"optimization.learner": "torch"})
    split, _ = _train(tmp_path / "split", "recursive", **{"optimization.learner": "torch"})
    for a, b in zip(jax.tree.leaves(torch_state), jax.tree.leaves(split), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_unknown_learner_names_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"optimization\.learner"):
        _train(tmp_path, "jax", **{"optimization.learner": "sgd"})
