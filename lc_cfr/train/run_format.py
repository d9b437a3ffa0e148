"""A run on disk: what a run directory holds, how its state is laid out, how old runs read.

A run directory holds `config.json` (the config it was started with), `metrics.jsonl`
and `checkpoints/` (`lc_cfr.train.checkpoint`: two items per step, `networks` and
`state`, plus a small meta dict). This module is the contract between the loop that
writes them and everything that reads them (resume, `saved_networks`, `evaluate`,
`report`, `play`), so readers never import the training loop:

* `TrainState`, everything a run needs to continue exactly, and its flat arrays
  (`state_arrays` / `state_from_arrays`), the networks apart (`NETWORK_ITEMS`);
* `ADDED_FIELDS`: config fields that came after runs were first written, with the
  value that reproduces what those runs did (`read_run_config` fills them in);
* `RESUMABLE_CHANGES`: the config fields a resumed run may change (`check_resumable`
  builds its message from the same table);
* the migrations of stored memories (`add_own_known_columns`, `recode_rows`), so a run
  written by an older lc_cfr resumes bit for bit (tests/test_run_format.py holds a run
  saved before this module existed to that).
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np

from lc_cfr.game import engine
from lc_cfr.game.rules import Rules
from lc_cfr.memory import codec as memory_codec
from lc_cfr.memory import reservoir
from lc_cfr.train import checkpoint

# Trees saved in the checkpoint item `networks` (all that evaluation and play read).
# The value network joined them on 2026-12-07 (search values its cut rollouts with it);
# older checkpoints hold it in the state item (`saved_networks.value_network` reads both).
NETWORK_ITEMS = ("advantage_params", "strategy_params", "sd_advantage", "value_params")

# Config fields (a prefix ending in "." is a whole block) a resumed run may change, and
# why: every other field must match the saved config.json.
RESUMABLE_CHANGES = {
    "run.": "how long and where the run trains",
    "checkpoint.": "when states are saved",
    "logging.": "where metrics go",
    "evaluation.": "evaluations read the state, they never change it",
    "distributed.": "processes and devices never change the samples (docs/scaling.md)",
    # how a backend runs never changes a traversal's samples
    "traversal.lanes": "how many traversals run side by side",
    "traversal.lockstep_schedule": "which lanes decide in a step",
    "traversal.num_workers": "worker processes",
    "traversal.worker_chunk_size": "traversals a worker task holds",
    "traversal.interleave_width": "games a worker interleaves",
    "traversal.interleave_max_batch": "states a worker's forward batches",
    "optimization.non_finite": "what happens to a non-finite update, not what is computed",
    # 'read' needs scratch fits, which depend on their iteration alone
    "optimization.strategy_train_when": "which iterations fit the strategy network",
    # decoded rows and slots are the same either way (`recode_rows`)
    "memory.info_storage": "how memories store rows",
    "memory.initial_rows": "how memories allocate rows",
}
# Fields that change nothing while the run does not use what they configure.
VALUE_NETWORK_FIELDS = (
    "traversal.value_lambda",
    "optimization.value_",
    "memory.value_capacity",
)

# How value leaves read a regret: nothing to read while neither config has leaves (a run
# of `plain`'s estimator resumes under a default whose leaf_targets changed since).
LEAF_FIELDS = ("traversal.leaf_targets",)

# Fields added after runs were first written, with the value that reproduces what those
# runs did: a saved config without them means exactly these settings.
ADDED_FIELDS = {
    "network.strategic_features": False,
    "network.blocking_features": False,
    "traversal.lockstep_schedule": "all_lanes",
    "traversal.expand_at": "root",
    "traversal.path_epsilon": 0.0,
    "traversal.leaf_decisions": 0,
    "traversal.leaf_check_share": 0.1,
    "traversal.leaf_targets": "mixed",
    "traversal.path_expansions": 1,
    "draws": "any",
    "optimization.advantage_holdout": 0.0,
    "optimization.strategy_init": "warm_start",
    "optimization.strategy_train_when": "every",
    "traversal.outcome_estimator": "importance",
    "traversal.value_lambda": 1.0,
    "regret_matching.floor": 0.0,
    "optimization.value_updates": 256,
    "optimization.value_batch_size": 512,
    "memory.value_capacity": 200_000,
    "evaluation.exploitability_every": 0,
    "network.head": "slot",
    "sd_cfr.snapshots": 0,
    # the encoding's own_known block came later: older networks never read it
    "network.own_known_input": False,
    "traversal.epsilon_decay": 1.0,
    "traversal.epsilon_decay_every": 20,
    "traversal.epsilon_min": 0.05,
    "optimization.non_finite": "stop",
    "run.restart": False,
    "network.compute_dtype": "float32",  # runs before it computed in float32
    # how rows are stored and grown may change on resume (an older run's float16 rows
    # are restored into this codec), so a saved config without them takes the defaults
    "memory.info_storage": "packed",
    "memory.initial_rows": 65_536,
    "training_weighting.average_mode": "same",  # the average weighed as the regrets
    "optimization.strategy_lr_schedule": "constant",
    "optimization.advantage_lr_schedule": "constant",
}


class TrainState(NamedTuple):
    """Everything a run needs to continue exactly (all of it is checkpointed)."""

    iteration: int  # completed iterations
    advantage_params: tuple  # (player 0, player 1) flax params
    advantage_opt: tuple  # their optax states
    strategy_params: Any
    strategy_opt: Any
    advantage_memory: tuple  # (player 0, player 1) Reservoir
    strategy_memory: reservoir.Reservoir
    league: Any  # strategy snapshots, every leaf [K, ...]
    league_added: int  # snapshots taken so far (the initial network counts as one)
    # the history value network of the outcome estimators that read it (else None)
    value_params: Any = None
    value_opt: Any = None
    value_memory: Any = None  # a sliding window (reservoir.window_add)
    # SD-CFR snapshots of the advantage networks (sd_cfr.snapshots > 0, else None):
    # (player 0's, player 1's) params with leaves [K, ...], the first sd_count valid
    sd_advantage: Any = None
    sd_count: int = 0
    sd_weight: float = 0.0  # total weight of the iterations offered (Chao's sampler)
    # the iteration whose fit strategy_params is (strategy_train_when='read' leaves the
    # network of the last iteration that read it in between; 0: the initial network)
    strategy_iteration: int = 0


class Codecs(NamedTuple):
    """How a run's memories store rows (`memory.info_storage`), by memory."""

    samples: memory_codec.Codec  # the advantage and strategy memories
    value: memory_codec.Codec | None  # the value window (None without a value network)


# ----- the config -----------------------------------------------------------------


def read_run_config(path: pathlib.Path) -> ml_collections.ConfigDict:
    """A run's saved config.json, completed with ADDED_FIELDS where it predates them."""
    config = ml_collections.ConfigDict(json.loads(pathlib.Path(path).read_text()))
    for dotted, value in ADDED_FIELDS.items():
        *blocks, field = dotted.split(".")  # a top-level field has no block
        node = config
        for block in blocks:
            if block not in node:
                node[block] = ml_collections.ConfigDict()
            node = node[block]
        if field not in node:
            node[field] = value
    return config


def flat_config(config) -> dict:
    """{"block.field": value} of a ConfigDict (nested blocks joined by dots)."""
    out = {}

    def walk(prefix, node):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(f"{prefix}{key}.", value)
            else:
                out[prefix + key] = value

    walk("", config.to_dict())
    return out


def check_resumable(workdir: pathlib.Path, config, uses_value_network: bool) -> None:
    """Refuses, naming the differing fields, to resume `workdir` with another config
    than it was started with, outside RESUMABLE_CHANGES."""
    saved_path = workdir / "config.json"
    if not saved_path.exists():
        return
    saved, current = flat_config(read_run_config(saved_path)), flat_config(config)
    inert = tuple(RESUMABLE_CHANGES)
    if not uses_value_network and saved.get("traversal.outcome_estimator") == "importance":
        inert += VALUE_NETWORK_FIELDS
    if not saved.get("traversal.leaf_decisions") and not current.get("traversal.leaf_decisions"):
        inert += LEAF_FIELDS
    changed = sorted(
        key
        for key in set(saved) | set(current)
        if saved.get(key) != current.get(key) and not key.startswith(inert)
    )
    if changed:
        allowed = ", ".join(f"{p}*" if p.endswith(".") else p for p in RESUMABLE_CHANGES)
        raise ValueError(
            f"{workdir} holds a run with another config; differing fields: {changed}. "
            f"Use a new --workdir, or change only {allowed}"
        )


# ----- the state's arrays -----------------------------------------------------------


def state_arrays(state: TrainState, base_key: jax.Array) -> tuple[dict, dict]:
    """(networks, rest): the flat arrays of the checkpoint's two items; evaluation and
    play read only the first."""
    networks, arrays = {}, {}
    trees = {
        "advantage_params": state.advantage_params,
        "strategy_params": state.strategy_params,
        "advantage_opt": state.advantage_opt,
        "strategy_opt": state.strategy_opt,
        "league": state.league,
    }
    if state.value_params is not None:
        trees.update(value_params=state.value_params, value_opt=state.value_opt)
    if state.sd_advantage is not None:
        trees["sd_advantage"] = state.sd_advantage
    for name, tree in trees.items():
        (networks if name in NETWORK_ITEMS else arrays).update(flat_tree(name, tree))
    for name, memory in _memories(state).items():
        for key, value in reservoir.to_numpy(memory).items():
            arrays[f"{name}/{key}"] = np.asarray(value)
    # The only RNG state: every key is fold_in(base_key, iteration, owner, use).
    arrays["rng/base_key"] = np.asarray(jax.random.key_data(base_key))
    return networks, arrays


def strategy_iteration_of(meta: dict) -> int:
    """The iteration whose fit a checkpoint's strategy network is; checkpoints from before
    strategy_train_when were written right after their iteration's fit."""
    return int(meta.get("strategy_iteration", meta["iteration"]))


def state_meta(state: TrainState, row: dict | None, seed: int) -> dict:
    """The checkpoint's meta dict: the state's scalars and the iteration's metrics row."""
    meta = {
        "league_added": state.league_added,
        "strategy_iteration": state.strategy_iteration,
        "metrics": row,
        "seed": seed,
    }
    if state.sd_advantage is not None:
        meta.update(sd_count=state.sd_count, sd_weight=state.sd_weight)
    return meta


def _memories(state: TrainState) -> dict:
    memories = {
        "advantage_memory_0": state.advantage_memory[0],
        "advantage_memory_1": state.advantage_memory[1],
        "strategy_memory": state.strategy_memory,
    }
    if state.value_memory is not None:
        memories["value_memory"] = state.value_memory
    return memories


def flat_tree(name: str, tree) -> dict:
    """{name + leaf path: numpy array} of `tree`'s leaves, as checkpoints store them
    (`read_tree` reads them back)."""
    return {
        name + jax.tree_util.keystr(path): np.asarray(leaf)
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def read_tree(arrays, name: str, template):
    """The pytree shaped like `template` whose leaves are arrays[name + path]."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(template)
    values = []
    for path, leaf in leaves:
        key = name + jax.tree_util.keystr(path)
        if key not in arrays or arrays[key].shape != np.shape(leaf):
            raise checkpoint.CheckpointMismatch(
                f"checkpoint field {key} is missing or not of shape {np.shape(leaf)} "
                "(does config.json match the checkpoint?)"
            )
        values.append(jnp.asarray(arrays[key], dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(jax.tree.structure(template), values)


def state_from_arrays(
    arrays: dict,
    meta: dict,
    *,
    template: TrainState,
    base_key: jax.Array,
    rules: Rules,
    own_known_input: bool,
    codecs: Codecs,
    rows_for,
) -> TrainState:
    """The TrainState of a checkpoint's arrays and meta, shaped like `template` (the
    run's initial state); memories are migrated to today's layout and `codecs`, and
    allocated `rows_for(size, capacity)` rows."""
    saved_key = arrays.get("rng/base_key")
    if saved_key is None or not np.array_equal(
        saved_key, np.asarray(jax.random.key_data(base_key))
    ):
        raise ValueError("the checkpoint's RNG state does not match config.seed")

    def memory(name):
        prefix = name + "/"
        rows = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
        codec = codecs.value if name == "value_memory" else codecs.samples
        rows = add_own_known_columns(rows, rules, own_known_input)
        rows = recode_rows(rows, codec, rules)
        size, capacity = int(rows.get("size", 0)), int(rows.get("capacity", 1))
        return reservoir.from_numpy(rows, codec=codec, rows=rows_for(size, capacity))

    trees = {
        name: read_tree(arrays, name, getattr(template, name))
        for name in ("advantage_params", "advantage_opt", "strategy_params", "strategy_opt")
    }
    extra = {}
    if template.value_params is not None:
        extra.update(
            value_params=read_tree(arrays, "value_params", template.value_params),
            value_opt=read_tree(arrays, "value_opt", template.value_opt),
            value_memory=memory("value_memory"),
        )
    if template.sd_advantage is not None:
        extra.update(
            sd_advantage=read_tree(arrays, "sd_advantage", template.sd_advantage),
            sd_count=meta["sd_count"],
            sd_weight=meta["sd_weight"],
        )
    return TrainState(
        iteration=meta["iteration"],
        **trees,
        advantage_memory=(memory("advantage_memory_0"), memory("advantage_memory_1")),
        strategy_memory=memory("strategy_memory"),
        league=read_tree(arrays, "league", template.league),
        league_added=meta["league_added"],
        strategy_iteration=strategy_iteration_of(meta),
        **extra,
    )


# ----- migrations of stored memories -------------------------------------------------


def add_own_known_columns(rows: dict, rules: Rules, own_known_input: bool) -> dict:
    """Memories saved before the encoding's own_known block (N columns at 7N) gain zero
    columns there; a network with own_known_input=False never reads them."""
    n = rules.n_cards
    info = rows.get("info")
    wanted = (rules.encoding_size, engine.history_size(rules))
    if info is None or info.dtype != np.float16:  # packed rows came after own_known
        return rows
    if info.shape[1] in wanted or info.shape[1] + n not in wanted:
        return rows
    if own_known_input:
        raise ValueError(
            "the checkpoint's memories predate the encoding's own_known block; resume "
            "with network.own_known_input=False (the saved config's default)"
        )
    zeros = np.zeros((info.shape[0], n), info.dtype)
    return {**rows, "info": np.concatenate([info[:, : 7 * n], zeros, info[:, 7 * n :]], 1)}


def recode_rows(rows: dict, codec, rules: Rules) -> dict:
    """Memory rows saved in another storage than `codec`'s (memory.info_storage changed,
    or float16 rows from before packing) in `codec`'s: the decoded values are the same,
    so the run resumes exactly."""
    info = rows.get("info")
    if info is None or (info.dtype == codec.dtype and info.shape[1] == codec.width):
        return rows
    if info.dtype == np.float16:
        values = info.astype(np.float32)
    else:
        packed = memory_codec.for_rules(
            rules, kind="packed", extra_bits=codec.size - rules.encoding_size
        )
        values = packed.decode_numpy(info)
    return {**rows, "info": codec.encode_numpy(values)}


# ----- the run directory's history ---------------------------------------------------


def refuse_to_restart(workdir: pathlib.Path) -> None:
    """A run directory with a history but no checkpoint is not silently started over."""
    metrics = workdir / "metrics.jsonl"
    rows = metrics.read_text().count("\n") if metrics.exists() else 0
    if rows:
        raise ValueError(
            f"{workdir} holds a run ({metrics} has {rows} rows) but no checkpoint to resume "
            "from; set run.restart=True to train it again from scratch (its history is "
            "overwritten), or use another --workdir"
        )


def has_metrics_row(path: pathlib.Path, iteration: int) -> bool:
    """Whether metrics.jsonl at `path` holds iteration's row (iteration 0 has none)."""
    if iteration == 0 or not path.exists():
        return iteration == 0
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    return any(json.loads(line)["iteration"] == iteration for line in rows)
