"""The networks of a saved run, read without building a trainer.

Evaluation and play need only a checkpoint's network parameters and the rules and
network shape they were trained with. Building a `Trainer` for that would also build the
traversal backend (for the torch backends a worker pool with shared memory, on
`run.device`) and refuse configs that only the training loop cares about, so a run
trained on a GPU could not be played on a CPU machine. `load_saved_networks` reads
RUN/config.json and the network arrays of one checkpoint, and nothing else: no memories,
no optimizer states, no backend, no torch.

Every learner and backend checkpoints the same canonical layout (the torch learner hands
flax parameters back to the trainer, which saves them as it saves the optax learner's),
so one reader serves every run.
"""

from __future__ import annotations

import os
import pathlib
from typing import Any, NamedTuple

import jax
import ml_collections

from lc_cfr import search
from lc_cfr.eval import SD_CFR, Snapshots
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.train import checkpoint
from lc_cfr.train.run_format import read_run_config, read_tree, strategy_iteration_of
from lc_cfr.train.setup import rules_from_config, spec_from_config
from lc_cfr.traversal.api import value_spec


class CheckpointNotFoundError(FileNotFoundError):
    """The run has no checkpoint yet, or not the one asked for."""


class SavedNetworks(NamedTuple):
    """The networks of one checkpoint, with what they need to be played."""

    workdir: pathlib.Path
    iteration: int  # the checkpoint's completed iterations
    config: ml_collections.ConfigDict  # RUN/config.json, completed as a resume would
    rules: Rules
    spec: mlp.NetworkSpec  # shared by the advantage and strategy networks
    advantage: tuple  # (player 0's, player 1's) flax params
    strategy: Any  # the average-strategy network's flax params
    # the iteration whose fit `strategy` is: below `iteration` when the run trains it only
    # where it reads it (optimization.strategy_train_when='read') and saved in between
    strategy_iteration: int
    snapshots: Snapshots | None  # SD-CFR snapshots; None when sd_cfr.snapshots was 0
    # the history value network's params where the checkpoint's networks item keeps them
    # (checkpoints since 2026-12-07 and their exports); `value_network` reads older ones
    value: Any = None

    def policy_views(self) -> dict:
        """{view name: parameters} of every policy view this checkpoint can play."""
        views = {"average_strategy": self.strategy, "current": tuple(self.advantage)}
        if self.snapshots is not None:
            views[SD_CFR] = self.snapshots
        return views

    def strategy_note(self) -> str:
        return strategy_note(self.iteration, self.strategy_iteration)


def strategy_note(iteration: int, strategy_iteration: int) -> str:
    """'' or a sentence saying that checkpoint `iteration`'s average strategy is the fit
    of an earlier one."""
    if strategy_iteration >= iteration:
        return ""
    return (
        f"checkpoint {iteration}'s average strategy is iteration {strategy_iteration}'s (the "
        "run fits it only at the iterations that read it, optimization.strategy_train_when="
        "'read'; a checkpoint of checkpoint.save_every and the run's last hold their own)"
    )


def load_saved_networks(workdir: str | os.PathLike, iteration: int | None = None) -> SavedNetworks:
    """The networks of checkpoint `iteration` (the latest if None) of run `workdir`.

    The parameters equal those of the trainer's state restored from the same checkpoint
    (tests/test_saved_networks.py).

    Args:
        workdir: the run directory (holds config.json and checkpoints/).
        iteration: the checkpoint's iteration; None for the newest complete one.

    Returns:
        The checkpoint's `SavedNetworks`.

    Raises:
        FileNotFoundError: the run directory or its config.json is missing.
        CheckpointNotFoundError: the run has no checkpoint yet, or none of `iteration`.
        ValueError: config.json cannot be read or describes no valid rules and network,
            or the checkpoint is unreadable or holds networks of another shape; the
            message names the file.
    """
    workdir = pathlib.Path(workdir)
    if not workdir.is_dir():
        raise FileNotFoundError(f"run directory {workdir} does not exist")
    config_path = workdir / "config.json"
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} is missing: is {workdir} a training run directory?")
    try:
        config = read_run_config(config_path)
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read {config_path}: {error}") from error
    try:
        rules = rules_from_config(config)
        spec = spec_from_config(config, rules)
        # Shapes only: no parameters are initialised just to be overwritten.
        params = jax.eval_shape(lambda: mlp.init_params(spec, jax.random.PRNGKey(0)))
        kept = int(config.sd_cfr.snapshots)
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ValueError(f"{config_path} is not a usable config: {error}") from error

    store = checkpoint.CheckpointStore(workdir / "checkpoints", read_only=True)
    try:
        step = store.latest() if iteration is None else iteration
        if step is None:
            raise CheckpointNotFoundError(f"no checkpoint in {store.directory} yet")
        try:
            # the networks item only: memories and optimizer states stay on disk
            arrays, meta = store.load(step, networks_only=True)
        except FileNotFoundError as error:
            raise CheckpointNotFoundError(str(error)) from error
        except checkpoint.DamagedCheckpoint as error:
            others = [f"{s}" for s in store.steps() if s != step]
            hint = f"other checkpoints: {', '.join(others)} (pick one with --checkpoint=N)"
            raise ValueError(f"{error}; {hint if others else 'no other checkpoint'}") from error
    finally:
        store.close()
    path = store.path(step)
    try:
        found = int(meta["iteration"])
        advantage = read_tree(arrays, "advantage_params", (params, params))
        strategy = read_tree(arrays, "strategy_params", params)
        snapshots = None
        if kept > 0:
            # the trainer's stacks: every leaf gains a leading axis of the K slots
            stack = jax.tree.map(
                lambda leaf: jax.ShapeDtypeStruct((kept, *leaf.shape), leaf.dtype), params
            )
            stacks = read_tree(arrays, "sd_advantage", (stack, stack))
            snapshots = Snapshots(stacks, int(meta["sd_count"]))
        value = _read_value(arrays, rules, spec)
    except (checkpoint.CheckpointMismatch, KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} does not match {config_path}: {error}") from error
    return SavedNetworks(
        workdir=workdir,
        iteration=found,
        config=config,
        rules=rules,
        spec=spec,
        advantage=advantage,
        strategy=strategy,
        strategy_iteration=strategy_iteration_of(meta),
        snapshots=snapshots,
        value=value,
    )


def _read_value(arrays: dict, rules: Rules, spec: mlp.NetworkSpec):
    """The history value network in a checkpoint item's `arrays`, or None where it holds
    none; its shapes are `traversal.api.value_spec`'s (CheckpointMismatch otherwise)."""
    if not any(key.startswith("value_params") for key in arrays):
        return None
    shape = value_spec(rules, spec)
    template = jax.eval_shape(lambda: mlp.init_params(shape, jax.random.PRNGKey(0)))
    return read_tree(arrays, "value_params", template)


def value_network(saved: SavedNetworks):
    """The history value network of `saved`'s checkpoint, or None where there is none.

    Checkpoints since 2026-12-07 keep it in their networks item (`saved.value`); older
    ones in their state item, which is read here (with the memories beside it, then
    dropped); an agent exported from an older checkpoint, or a run trained without value
    leaves or baselines, has none.

    Raises:
        ValueError: the state item is damaged or does not match config.json; names it.
    """
    if saved.value is not None:
        return saved.value
    store = checkpoint.CheckpointStore(saved.workdir / "checkpoints", read_only=True)
    try:
        arrays, _ = store.load(saved.iteration)
    except checkpoint.NetworksOnly:
        return None
    except checkpoint.DamagedCheckpoint as error:
        raise ValueError(str(error)) from error
    finally:
        store.close()
    try:
        return _read_value(arrays, saved.rules, saved.spec)
    except checkpoint.CheckpointMismatch as error:
        raise ValueError(f"{store.path(saved.iteration)}: {error}") from error


def search_params(
    options: search.SearchOptions, params: Any, saved: SavedNetworks, *, prefix: str = "--search_"
) -> Any:
    """`search.with_value` for a view of `saved`: the value network is read (`value_network`)
    only when the search cuts its rollouts, so a plain search never opens the state item.

    Raises:
        ValueError: as `search.with_value` does (no value network, naming the flag with
            `prefix`), or naming a damaged checkpoint.
    """
    if not options.leaf_decisions:
        return params
    value, scale = value_network(saved), saved.config.utility_scale
    return search.with_value(options, params, value, scale, prefix=prefix)
