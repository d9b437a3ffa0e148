"""The Cython + torch backends against `jax` (docs/design.md section 6), and their machinery.

The cases are the rows of the parity table `TRAVERSAL_CASES` (tests/traversal_helpers.py,
shared with the lockstep-vs-reference tests) flagged `torch`: every mode of
docs/design.md section 3 that the torch backends implement. Each runs through
`recursive` and `interleaved` (in-process, so a case costs milliseconds) and a
representative subset through `server` (a real server process): each must give the
lockstep backend's sample set, the same information states, masks and slots, targets
within TARGET_RTOL / TARGET_ATOL, and the same statistics; `interleaved` (suspendable
contexts) and `server` must give the samples of `recursive` (C recursion) bit for bit.

The test networks are dyadic (tests/traversal_helpers.py), so flax and torch forwards
agree bit for bit and every sampled action is the same; the targets still differ in the
last bits because XLA may fuse multiply-adds and compute a division as a multiplication
by a reciprocal where the C core does neither.

All comparisons are chex pytree assertions: a run's samples are one pytree (kind ->
(traversal, node) -> info/mask/target), infos and masks compared with
`chex.assert_trees_all_equal`, targets with `chex.assert_trees_all_close` (or equal, where
bit-exact), statistics, losses and trained parameters as dicts, so a failure names the
leaf.

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

import chex
import pytest
from config_helpers import default_config

from lc_cfr.train import Trainer
from lc_cfr.traversal import api, lockstep
from lc_cfr.traversal.registry import make_backend
from lc_cfr.traversal.torch import WorkerSettings

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from traversal_helpers import (  # noqa: E402
    SPEC,
    TINY,
    TRAVERSAL_CASES,
    lockstep_records,
    networks,
    options,
)

# C targets vs XLA targets: the same arithmetic in another order (fused multiply-adds, a
# division by a multiplication with a reciprocal), so a few float32 ulps apart.
TARGET_RTOL = 1e-5  # relative to the target's magnitude
TARGET_ATOL = 1e-6  # float32 rounding of the policy arithmetic, near-zero targets
# short training runs: same samples, but losses of networks trained on targets that
# differ by the rounding above (and real, not dyadic, networks): 1e-4 relative, with
# pytest.approx's absolute floor of 1e-12 (the bound these tests had before chex)
RUN_LOSS_RTOL, RUN_LOSS_ATOL = 1e-4, 1e-12
LOSSES = ("loss/advantage_p0", "loss/advantage_p1", "loss/strategy")
# optax vs torch learner after two smoke iterations: float32 rounding of two different
# implementations of AdamW, accumulated over the iterations' updates
RUN_PARAM_RTOL, RUN_PARAM_ATOL = 1e-4, 1e-5
# the C core's statistics (one list, lc_cfr.traversal.api) equal jax's exactly; how many
# states went to a network depends on batching, so policy_calls is compared where it must
EXACT_STATS = tuple(name for name in api.CORE_STAT_NAMES if name != "policy_calls")

# the table's rows flagged torch (each costs seconds: a row in modes the torch backends
# have may stay off where it only recombines these rows' modes, and test_traversal.py
# holds every row to the reference)
CASES = sorted(name for name, case in TRAVERSAL_CASES.items() if case.torch)
SERVER_CASES = (
    "outcome_lanes4",
    "outcome_bot_noisy_cutoff4_safe_rollouts",
    "outcome_average_strategy_both",
    "external_league_rollouts",
    "external_bot_cutoff4_lanes1",
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
    return samples, api.stats_to_metrics(stats)


def assert_same_samples(got, want, opts, *, exact=False) -> dict:
    """Same slots, infos and masks; targets within tolerance (or bit-exact).

    Returns the number of samples of each kind.
    """
    per = api.slots_per_traversal(TINY, opts)
    got, want = lockstep_records(got, *per), lockstep_records(want, *per)
    kinds = ("advantage", "strategy")
    for kind in kinds:
        assert sorted(got[kind]) == sorted(want[kind]), kind
    part = lambda records, field: {  # noqa: E731
        kind: {key: record[field] for key, record in records[kind].items()} for kind in kinds
    }
    chex.assert_trees_all_equal(
        {"info": part(got, "info"), "mask": part(got, "mask")},
        {"info": part(want, "info"), "mask": part(want, "mask")},
    )
    if exact:
        chex.assert_trees_all_equal(part(got, "target"), part(want, "target"))
    else:
        chex.assert_trees_all_close(
            part(got, "target"), part(want, "target"), rtol=TARGET_RTOL, atol=TARGET_ATOL
        )
    return {kind: len(want[kind]) for kind in want}


def assert_same_stats(stats, want: api.TraversalStats):
    chex.assert_trees_all_equal(
        {k: stats[k] for k in EXACT_STATS}, {k: want[k] for k in EXACT_STATS}
    )
    assert stats["policy_calls"] > 0 and stats["forward_batches"] > 0


def assert_equal_stats(stats, want, keys=EXACT_STATS + ("policy_calls",)):
    chex.assert_trees_all_equal({k: stats[k] for k in keys}, {k: want[k] for k in keys})


def run_backend(name, opts, traverser, **overrides):
    backend = make_backend(
        name, rules=TINY, spec=SPEC, options=opts, lanes=5, workers=settings(**overrides)
    )
    try:
        return backend.traverse(NETWORKS, seed=5, iteration=3, traverser=traverser)
    finally:
        backend.close()


@pytest.mark.parametrize("case", CASES)
def test_recursive_and_interleaved_match_jax(case):
    """recursive ~ jax (within tolerance); interleaved == recursive (bit for bit: the two
    C walks share their per-node arithmetic and differ only in control flow)."""
    opts = TRAVERSAL_CASES[case].options(traversals_per_player=QUOTA)
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
        assert_equal_stats(interleaved_stats, stats)
    assert min(counts.values()) > 0, f"the case stores no samples of a kind: {counts}"
    if case == "outcome_lanes1_zero_tight_clip":  # the clip statistic is exercised, not just 0
        assert stats["clipped_values"] > 0


@pytest.mark.parametrize("case", SERVER_CASES)
def test_server_matches_jax(case):
    opts = TRAVERSAL_CASES[case].options(traversals_per_player=QUOTA)
    want, want_stats = jax_result(opts, 1)
    got, stats = run_backend("server", opts, 1)
    assert_same_samples(got, want, opts)
    assert_same_stats(stats, want_stats)
    recursive, _ = run_backend("recursive", opts, 1)
    assert_same_samples(got, recursive, opts, exact=True)
    assert 1 <= stats["server_batch_max"] <= 2 and stats["server_rows"] == stats["policy_calls"]


@pytest.mark.parametrize("name", ["recursive", "interleaved", "server"])
def test_worker_pool_gives_the_in_process_samples(name):
    opts = TRAVERSAL_CASES["outcome_league"].options(traversals_per_player=QUOTA)
    local, local_stats = run_backend(name, opts, 0)
    pooled, pooled_stats = run_backend(name, opts, 0, num_workers=2, chunk_size=3)
    assert_same_samples(pooled, local, opts, exact=True)
    assert_equal_stats(pooled_stats, local_stats)
    if name == "server":  # two workers' requests can share a server batch
        assert 1 <= pooled_stats["server_batch_max"] <= 4


def test_interleaved_batches_up_to_its_limits():
    opts = options(traversals_per_player=QUOTA)
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
    opts = options(traversals_per_player=QUOTA)
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
    opts = options(traversals_per_player=QUOTA)
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
        (dict(floor=0.1), "regret_matching.floor"),
        (dict(outcome_estimator="baseline"), "traversal.outcome_estimator"),
        (dict(draws="playable"), "draws"),
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


def test_torch_cases_are_modes_the_torch_backends_run():
    """The table's torch flags stay within what the backends accept (their check_modes)."""
    from lc_cfr.traversal.torch.backends import check_modes

    supported = set()
    for name, case in TRAVERSAL_CASES.items():
        try:
            check_modes("recursive", case.options(), SPEC)
        except ValueError:
            continue
        supported.add(name)
    assert set(CASES) <= supported, sorted(set(CASES) - supported)
    assert set(SERVER_CASES) <= set(CASES)


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
        counts = ("traversal/nodes", "traversal/terminals", "memory/strategy_seen")
        chex.assert_trees_all_equal(
            [{key: row[key] for key in counts} for row in rows],
            [{key: row[key] for key in counts} for row in want],
            custom_message=backend,
        )
        chex.assert_trees_all_close(
            [{key: row[key] for key in LOSSES} for row in rows],
            [{key: row[key] for key in LOSSES} for row in want],
            rtol=RUN_LOSS_RTOL,
            atol=RUN_LOSS_ATOL,
            custom_message=backend,
        )


@pytest.mark.slow
def test_torch_learner_tracks_optax_and_resumes_exactly(tmp_path):
    """optimization.learner=torch: the same batches as optax, parameters within float32
    rounding after two iterations; a resumed torch run equals the uninterrupted one."""
    optax_state, optax_rows = _train(tmp_path / "optax", "recursive")
    torch_state, torch_rows = _train(
        tmp_path / "torch", "recursive", **{"optimization.learner": "torch"}
    )
    params = lambda state: {  # noqa: E731
        "advantage": state.advantage_params,
        "strategy": state.strategy_params,
    }
    chex.assert_trees_all_close(
        params(torch_state), params(optax_state), rtol=RUN_PARAM_RTOL, atol=RUN_PARAM_ATOL
    )
    assert len(torch_rows) == len(optax_rows)
    chex.assert_trees_all_equal(
        [row["traversal/nodes"] for row in torch_rows],
        [row["traversal/nodes"] for row in optax_rows],
    )
    chex.assert_trees_all_close(
        [{key: row[key] for key in LOSSES} for row in torch_rows],
        [{key: row[key] for key in LOSSES} for row in optax_rows],
        rtol=RUN_LOSS_RTOL,
        atol=RUN_LOSS_ATOL,
    )

    _train(tmp_path / "split", "recursive", iterations=1, **{"optimization.learner": "torch"})
    split, _ = _train(tmp_path / "split", "recursive", **{"optimization.learner": "torch"})
    chex.assert_trees_all_equal(torch_state, split)  # the whole state, bit for bit


def test_unknown_learner_names_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"optimization\.learner"):
        _train(tmp_path, "jax", **{"optimization.learner": "sgd"})
