"""The run format (`lc_cfr.train.run_format`): runs saved by an older lc_cfr resume bit
for bit, and the resumable-changes message is the table's.

tests/fixtures/run_ca193c0_*.tar.gz are one-iteration `:smoke` runs written by commit
ca193c0, the last before the trainer was split into setup, run format and loop
(tests/fixtures/make_runs.py writes them). Resumed for a second iteration by today's
code, each must equal today's uninterrupted two-iteration run of the same config, state
and metrics alike. Like every bit-exact test here, this holds on one kind of CPU: the
fixtures were written on the 2-core x86_64 machine CI runs on.
"""

import importlib.util
import json
import pathlib
import tarfile

import chex
import pytest
from config_helpers import default_config

from lc_cfr.export import export_agent
from lc_cfr.train import Trainer, run_format
from lc_cfr.train.saved_networks import load_saved_networks, value_network

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
_spec = importlib.util.spec_from_file_location("make_runs", FIXTURES / "make_runs.py")
make_runs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_runs)
TIMING = ("_seconds", "_per_second")
# Metrics whose meaning changed since the fixtures were written (issue 23): the target
# anatomy's phases are quarters of max_turns, and the `one_mover` lockstep schedule (the
# default; the fixtures ran `all_lanes`) takes other steps and forwards for the same samples.
REDEFINED = (
    "targets/p",
    "traversal/steps",
    "traversal/forward_batches",
    "traversal/policy_calls",
    "traversal/realised_batch_size",
)


def _rows(workdir: pathlib.Path) -> list[dict]:
    lines = (workdir / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines if line.strip()]
    return [{k: v for k, v in row.items() if not k.endswith(TIMING)} for row in rows]


@pytest.mark.parametrize("name", sorted(make_runs.RUNS))
@pytest.mark.xla_optimized  # the saved runs were trained by the optimised compiler
def test_a_run_saved_before_the_split_resumes_bit_for_bit(tmp_path, name):
    saved = tmp_path / "saved"
    with tarfile.open(FIXTURES / f"run_ca193c0_{name}.tar.gz") as archive:
        archive.extractall(saved, filter="data")
    config = make_runs.config_of(default_config, make_runs.RUNS[name], iterations=2)
    resumed = Trainer(config, saved).run()
    whole = Trainer(config, tmp_path / "whole").run()
    assert resumed.iteration == whole.iteration == 2
    chex.assert_trees_all_equal(whole, resumed)  # the whole state, bit for bit
    old, today = _rows(saved), _rows(tmp_path / "whole")
    # the fixture's own row has the metrics of its day: today's code adds some and has
    # redefined a few (REDEFINED)
    kept = [key for key in old[0] if not key.startswith(REDEFINED)]
    assert {key: old[0][key] for key in kept} == {key: today[0][key] for key in kept}
    assert old[1:] == today[1:]
    if whole.value_params is not None:  # today's checkpoints keep it beside the networks
        chex.assert_trees_all_equal(load_saved_networks(saved).value, whole.value_params)


def test_an_old_checkpoint_gives_its_value_network_from_its_state(tmp_path):
    """Checkpoints before 2026-12-07 hold the value network in their state item, not
    their networks item: `value_network` reads it there, as the trainer restores it, and
    an agent exported from one carries it in its networks."""
    saved = tmp_path / "saved"
    with tarfile.open(FIXTURES / "run_ca193c0_value_sd.tar.gz") as archive:
        archive.extractall(saved, filter="data")
    networks = load_saved_networks(saved)
    assert networks.value is None  # the networks item predates it
    config = make_runs.config_of(default_config, make_runs.RUNS["value_sd"], iterations=1)
    state, _ = Trainer(config, saved).restore()
    chex.assert_trees_all_equal(value_network(networks), state.value_params)
    export_agent(saved, tmp_path / "agent")
    chex.assert_trees_all_equal(load_saved_networks(tmp_path / "agent").value, state.value_params)


def test_the_resume_refusal_lists_every_resumable_change(tmp_path):
    config = make_runs.config_of(default_config, {})
    (tmp_path / "config.json").write_text(config.to_json())
    config.network.hidden_size += 1
    with pytest.raises(ValueError, match="network.hidden_size") as refused:
        run_format.check_resumable(tmp_path, config, uses_value_network=False)
    for field in run_format.RESUMABLE_CHANGES:
        assert (f"{field}*" if field.endswith(".") else field) in str(refused.value)


def test_leaf_targets_bind_a_resume_only_where_there_are_leaves(tmp_path):
    """Without value leaves (`leaf_decisions` 0, as `plain` and the presets that apply it)
    the leaf target reads nothing, so a run saved under another default resumes; with
    leaves it is refused."""
    config = make_runs.config_of(default_config, {"traversal.leaf_targets": "mixed"})
    (tmp_path / "config.json").write_text(config.to_json())
    config.traversal.leaf_targets = "leaves"
    run_format.check_resumable(tmp_path, config, uses_value_network=False)
    config.traversal.leaf_decisions = 2
    with pytest.raises(ValueError, match="traversal.leaf_decisions', 'traversal.leaf_targets"):
        run_format.check_resumable(tmp_path, config, uses_value_network=True)
