"""Exports a trained agent: one checkpoint's networks, without the run's memories.

    python -m lc_cfr.export --workdir=RUN [--checkpoint=STEP] --out=AGENT

A run directory holds what training needs to resume (per checkpoint about 110 MB of
memories and optimizer states on the default config) beside what play needs (the
networks, 4 MB). AGENT is a directory that evaluation and play read as they read a run
(`lc_cfr.evaluate --workdir=AGENT`, `lc_cfr.play --workdir=AGENT`, `lc_cfr.serve`, the
OpenSpiel bots, search): RUN/config.json and checkpoint STEP with its `networks` and
`meta` items only, the networks checked against their checksums before anything is
written. Its meta names the source (`exported_from`); training refuses to resume it with
one line (`checkpoint.NetworksOnly`) rather than call it damaged.

The checkpoint should hold its own average-strategy fit (with
`optimization.strategy_train_when=read` the kept checkpoints and the last one do); one
that holds an earlier iteration's is exported with a warning that says so.

Search can cut its rollouts at the run's value network (docs/search.md), so an agent keeps
it: checkpoints since 2026-12-07 hold it in their networks item, which is copied; from an
older checkpoint it is read from the state item and written into the agent's networks.

`export_agent(..., strategy=params, refit=how)` exports the checkpoint with another
average-strategy network in place of the run's: a refit of the checkpoint's strategy
memory (`scripts/refit_strategy.py --export`), so that an agent can ship the fit that a
later config makes of its run's memory without training again. The meta records how it
was fitted; its `metrics` row stays the run's iteration's (the run's own fit's margins).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import sys

import jax
from absl import app, flags

from lc_cfr.train import checkpoint, run_format
from lc_cfr.train.saved_networks import load_saved_networks, value_network

# What an exported checkpoint keeps of a step directory (orbax's files and two items).
KEPT = ("_CHECKPOINT_METADATA", "commit_success.txt", "networks", "meta")


# The meta key of an agent whose average strategy is not the run's own fit.
STRATEGY_REFIT = "strategy_refit"


def check_new_directory(out: str | os.PathLike, flag: str) -> None:
    """Raises FileExistsError naming `flag` unless `out` is absent or an empty directory."""
    out = pathlib.Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{flag}: {out} exists and is not empty; name a new directory")


def export_agent(
    workdir: str | os.PathLike,
    out: str | os.PathLike,
    iteration: int | None = None,
    *,
    strategy=None,
    refit: dict | None = None,
) -> pathlib.Path:
    """Writes checkpoint `iteration` (the latest if None) of run `workdir` as an agent
    directory `out`; returns the exported step's directory.

    With `strategy` (flax params of the run's network shape) the agent's average-strategy
    network is `strategy` instead of the checkpoint's, and its meta holds `refit` (how
    `strategy` was fitted, required with it) under STRATEGY_REFIT.

    Raises:
        FileExistsError: `out` exists and is not an empty directory (nothing is touched).
        FileNotFoundError, ValueError: as `load_saved_networks`, for a missing run or
            checkpoint, or networks that fail their checksums.
    """
    out = pathlib.Path(out)
    check_new_directory(out, "--out")
    saved = load_saved_networks(workdir, iteration)  # a readable run and checkpoint
    source = pathlib.Path(workdir)
    store = checkpoint.CheckpointStore(source / "checkpoints", read_only=True)
    try:
        step_dir = store.path(saved.iteration)
    finally:
        store.close()
    if step_dir.name.startswith("ckpt_"):
        raise ValueError(
            f"{step_dir} is of the format before orbax: resume the run once to save it anew"
        )
    if (strategy is None) != (refit is None):
        raise ValueError("export_agent: `strategy` and `refit` go together")
    if strategy is not None:
        shapes = jax.tree.map(lambda leaf: leaf.shape, saved.strategy)
        if jax.tree.map(lambda leaf: leaf.shape, strategy) != shapes:
            raise ValueError(f"the refitted strategy network is not of {workdir}'s shape")
    # an older checkpoint's value network, from its state item (None: none to add)
    value = value_network(saved) if saved.value is None else None
    created = not out.exists()
    target = out / "checkpoints" / step_dir.name
    try:
        if strategy is None and value is None:
            _copy_step(step_dir, target, source)
        else:
            _write_step(
                step_dir, out / "checkpoints", saved.iteration, strategy, refit, source, value
            )
        shutil.copy2(source / "config.json", out / "config.json")
        # The copy, read back against the networks' checksums (a training run may have
        # replaced its latest step while it was copied).
        load_saved_networks(out, saved.iteration)
    except BaseException:
        shutil.rmtree(out if created else out / "checkpoints", ignore_errors=True)
        (out / "config.json").unlink(missing_ok=True)
        raise
    return target


def _copy_step(step_dir: pathlib.Path, target: pathlib.Path, source: pathlib.Path) -> None:
    """The run's step as it is, less its state item, its meta naming the source."""
    target.mkdir(parents=True)
    for name in KEPT:
        if (step_dir / name).is_dir():
            shutil.copytree(step_dir / name, target / name)
        elif (step_dir / name).exists():
            shutil.copy2(step_dir / name, target / name)
    meta_path = target / "meta" / "metadata"
    meta = json.loads(meta_path.read_text())
    meta[checkpoint.EXPORTED_FROM] = str(source.absolute())
    meta_path.write_text(json.dumps(meta))


def _write_step(
    step_dir: pathlib.Path,
    directory: pathlib.Path,
    step: int,
    strategy,
    refit: dict | None,
    source: pathlib.Path,
    value=None,
) -> None:
    """The run's step written anew (the networks' checksums change with it), with
    `strategy` as its average-strategy network where given (and `refit` in its meta) and
    `value` added to its networks where given."""
    store = checkpoint.CheckpointStore(step_dir.parent, read_only=True)
    try:
        arrays, meta = store.load(step, networks_only=True)
    finally:
        store.close()
    networks = dict(arrays)
    meta[checkpoint.EXPORTED_FROM] = str(source.absolute())
    if strategy is not None:
        name = "strategy_params"  # run_format.state_arrays's name for the network
        networks = {k: v for k, v in networks.items() if not k.startswith(name)}
        networks.update(run_format.flat_tree(name, strategy))  # shapes checked by the caller
        # the refit is this checkpoint's memory's fit
        meta.update({STRATEGY_REFIT: refit, "strategy_iteration": step})
    if value is not None:
        networks.update(run_format.flat_tree("value_params", value))
    writer = checkpoint.CheckpointStore(directory, asynchronous=False)
    try:
        writer.save_networks(step, networks, meta)
    finally:
        writer.close()


def define_flags() -> dict:
    """The command line's flags, defined when it runs (not on import, so that a process
    that also imports `lc_cfr.evaluate`, whose --workdir is global, can call
    `export_agent`)."""
    return {
        "workdir": flags.DEFINE_string("workdir", None, "Run directory to export from."),
        "checkpoint": flags.DEFINE_integer(
            "checkpoint", None, "Iteration to export (default: latest)."
        ),
        "out": flags.DEFINE_string("out", None, "New directory for the agent."),
    }


def main(argv, holders: dict) -> None:
    del argv
    workdir, out = holders["workdir"].value, holders["out"].value
    if not workdir or not out:
        sys.exit("--workdir and --out are required")
    try:
        target = export_agent(workdir, out, holders["checkpoint"].value)
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        sys.exit(f"error: {error}")
    saved = load_saved_networks(out)
    note = saved.strategy_note()
    if note:
        print(f"warning: {note}")
    size = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
    print(
        f"exported iteration {saved.iteration} of {workdir} to {out} "
        f"({size / 2**20:.1f} MiB); play it with --workdir={out}"
    )


if __name__ == "__main__":
    _holders = define_flags()
    app.run(lambda argv: main(argv, _holders))
