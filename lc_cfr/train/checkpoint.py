"""Atomic checkpoints: a directory per saved iteration and a LATEST pointer.

A checkpoint is written under a temporary name and renamed into place, and LATEST is
replaced atomically after that, so a crash at any moment leaves the previous
checkpoint readable. Contents are flat dicts of numpy arrays (`arrays.npz`, uncompressed
for speed) plus JSON metadata.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import tempfile
import zipfile

import numpy as np
from absl import logging

POINTER = "LATEST"


def atomic_write_text(path: pathlib.Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename: a crash at any
    moment leaves either the old file or the new one, never a part of either."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _name(iteration: int) -> str:
    return f"ckpt_{iteration:08d}"


def save(
    directory: pathlib.Path, iteration: int, arrays: dict[str, np.ndarray], meta: dict
) -> pathlib.Path:
    """Writes checkpoint `iteration` and points LATEST at it; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / _name(iteration)
    staging = pathlib.Path(tempfile.mkdtemp(prefix=".staging-", dir=directory))
    with open(staging / "arrays.npz", "wb") as f:
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())
    (staging / "meta.json").write_text(json.dumps({"iteration": iteration, **meta}, indent=1))
    if final.exists():  # a rerun of the same iteration replaces it
        shutil.rmtree(final)
    os.rename(staging, final)
    atomic_write_text(directory / POINTER, final.name)
    return final


def _iteration(path: pathlib.Path) -> int:
    return int(path.name.split("_")[1])


def complete(directory: pathlib.Path) -> list[pathlib.Path]:
    """Every checkpoint directory whose files are all in place, oldest first (a save
    renames a finished staging directory into place, so these are whole saves unless a
    file was damaged later)."""
    paths = [
        path
        for path in directory.glob("ckpt_*")
        if (path / "arrays.npz").is_file() and (path / "meta.json").is_file()
    ]
    return sorted(paths, key=_iteration)


def latest(directory: pathlib.Path) -> pathlib.Path | None:
    """The checkpoint LATEST names; the newest complete one when LATEST is missing or
    names a checkpoint that is not there (with a warning); None when there is none."""
    pointer = directory / POINTER
    if pointer.exists():
        path = directory / pointer.read_text().strip()
        if (path / "arrays.npz").is_file() and (path / "meta.json").is_file():
            return path
        problem = f"{pointer} names {path.name}, which is missing or incomplete"
    else:
        problem = f"{pointer} is missing"
    found = complete(directory) if directory.is_dir() else []
    if found:
        logging.warning("%s; using the newest complete checkpoint, %s", problem, found[-1].name)
        return found[-1]
    return None


def candidates(directory: pathlib.Path) -> list[pathlib.Path]:
    """Checkpoints to restore from, best first: the latest, then the older complete ones
    (a damaged latest file falls back to the checkpoint before it)."""
    first = latest(directory)
    if first is None:
        return []
    older = [path for path in reversed(complete(directory)) if _iteration(path) < _iteration(first)]
    return [first, *older]


def find(directory: pathlib.Path, iteration: int | None) -> pathlib.Path | None:
    """Checkpoint `iteration`, or the latest one when `iteration` is None."""
    if iteration is None:
        return latest(directory)
    path = directory / _name(iteration)
    if not (path / "arrays.npz").exists():
        raise FileNotFoundError(f"no checkpoint of iteration {iteration} in {directory}")
    return path


# What a damaged checkpoint raises when read (truncated or garbled zip, cut JSON).
READ_ERRORS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile)


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read whole; the message names the file."""


class CheckpointMismatch(ValueError):
    """A checkpoint that reads whole but does not hold what the config describes."""


def load(path: pathlib.Path) -> tuple[dict[str, np.ndarray], dict]:
    """(arrays, metadata) of one checkpoint directory.

    Raises:
        DamagedCheckpoint: naming the file, when a file cannot be read whole.
    """
    for name in ("meta.json", "arrays.npz"):
        try:
            if name == "meta.json":
                meta = json.loads((path / name).read_text())
            else:
                with np.load(path / name) as data:
                    arrays = {key: data[key] for key in data.files}
        except READ_ERRORS as error:
            raise DamagedCheckpoint(f"{path / name} is damaged: {error}") from error
    return arrays, meta


def prune(directory: pathlib.Path, keep_every: int) -> None:
    """Deletes checkpoints other than LATEST's and those on the `keep_every` schedule."""
    current = latest(directory)
    for path in directory.glob("ckpt_*"):
        iteration = int(path.name.split("_")[1])
        keep = keep_every > 0 and iteration % keep_every == 0
        if path != current and not keep:
            shutil.rmtree(path)
    for stale in directory.glob(".staging-*"):  # left by a crash mid-save
        shutil.rmtree(stale)
