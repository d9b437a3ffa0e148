"""Checkpoints of a run on orbax's `CheckpointManager`, with checksums of our own.

`checkpoints/step_<8 digits>/` holds three orbax items: `networks` (the advantage,
average-strategy, SD-CFR and history-value parameters: all that evaluation, play and
search read; steps before 2026-12-07 keep the value network in `state`), `state`
(optimizer states, memories, league, RNG key) and `meta` (JSON: the
iteration, counters, the iteration's metrics row and the checksums of `networks`).
Orbax writes a step under a temporary name and renames it into place when every item is
on disk, so a crash at any moment leaves the previous complete step, and the newest
complete step is found by listing the directory: there is no pointer file. Saves are
asynchronous: `save` returns once the arrays are handed over and the write runs beside
the next iteration's traversal; `wait` joins it.

Orbax does not notice flipped or zeroed bytes inside its data files, so every array
carries a CRC-32: the networks' in `meta`, the state's in `checksums/step_N.json`,
computed beside orbax's write by a thread of ours (zlib releases the GIL) and written
as soon as they are known. A step without them (a crash in the second or so before
they land) is restored with a warning. docs/reliability.md lists what this guarantees.

Runs saved before orbax (`ckpt_<8 digits>/arrays.npz` + `meta.json`) are still read; they
are never written or pruned.
"""

from __future__ import annotations

import json
import logging as std_logging
import os
import pathlib
import re
import sys
import tempfile
import threading
import zipfile
import zlib

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from orbax.checkpoint import type_handlers

CHECKSUMS = "checksums"  # checkpoints/checksums/step_N.json: the state item's CRCs
FORMAT = "lc_cfr/orbax-1"
# meta key of a checkpoint that `lc_cfr.export` wrote: its networks only, named by source
EXPORTED_FROM = "exported_from"
_LEGACY = re.compile(r"^ckpt_(\d{8})$")


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


class DamagedCheckpoint(ValueError):
    """A checkpoint file that cannot be read whole; the message names the file."""


class CheckpointWriteError(OSError):
    """A save that failed (disk full, permissions); the steps before it are intact."""


class CheckpointMismatch(ValueError):
    """A checkpoint that reads whole but does not hold what the config describes."""


class NetworksOnly(ValueError):
    """An exported agent's checkpoint (`lc_cfr.export`): it is played, never resumed."""


class _QuietOrbax:
    """Drops orbax's INFO lines (about 80 a save) and its ERROR lines from absl's log;
    warnings pass, except those saying a reader's manager is read-only. Every orbax
    error of a save is raised again by `CheckpointStore.wait` as one
    `CheckpointWriteError` naming the step, so the logged copies (each with a traceback)
    would only repeat it."""

    def filter(self, record) -> bool:
        if "/orbax/" not in record.pathname:
            return True
        # a read-only manager warns that it is read-only, which is what was asked for
        return record.levelno == std_logging.WARNING and "read only" not in (
            record.getMessage().replace("_", " ")
        )


_QUIET = _QuietOrbax()


class _QuietOrbaxTasks:
    """Drops asyncio's "Task exception was never retrieved" lines about orbax's writer
    coroutines: after a failed save (a full disk) the writes still pending fail too, and
    asyncio logs each with a traceback when its task is collected. `CheckpointStore.wait`
    has already raised the save's first error as one line."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        return not (
            message.startswith("Task exception was never retrieved") and "/orbax/" in message
        )


_QUIET_TASKS = _QuietOrbaxTasks()


def _silence_closed_loop_callbacks() -> None:
    """After a failed save, tensorstore still completes the aborted writes' futures and
    their callbacks find orbax's event loop closed; Python would print each of those
    `RuntimeError('Event loop is closed')` as an ignored exception with a traceback,
    after the one-line error that already says what failed. Only those are dropped."""
    previous = sys.unraisablehook
    if getattr(previous, "lc_cfr_quiet", False):
        return

    def hook(unraisable):
        value = unraisable.exc_value
        if isinstance(value, RuntimeError) and str(value) == "Event loop is closed":
            return
        previous(unraisable)

    hook.lc_cfr_quiet = True
    sys.unraisablehook = hook


def checksums(arrays: dict[str, np.ndarray]) -> dict[str, int]:
    """{key: CRC-32 of the array's bytes} (dtype and shape are checked on restore)."""
    return {
        key: zlib.crc32(np.ascontiguousarray(value).reshape(-1).view(np.uint8))
        for key, value in arrays.items()
    }


def _verify(arrays: dict, expected: dict, where: pathlib.Path) -> None:
    if set(arrays) != set(expected):
        missing = sorted(set(expected) ^ set(arrays))[:3]
        raise DamagedCheckpoint(f"{where} does not hold the arrays its checksums name: {missing}")
    for key, crc in checksums(arrays).items():
        if crc != expected[key]:
            raise DamagedCheckpoint(f"{where} is damaged: array {key} fails its checksum")


def _step_meta(step: int, networks: dict, meta: dict) -> dict:
    """A step's meta item: `meta` with the format, the step and the networks' checksums."""
    return {**meta, "format": FORMAT, "iteration": step, "network_checksums": checksums(networks)}


def _item_handlers() -> dict:
    """Orbax handlers of the three items. Numpy arrays are handed to the writer without
    orbax's protective deep copy (which doubled the peak memory and was most of a save's
    blocking time with full memories, docs/performance.md): the trainer changes no array
    of a pending save before `wait` returns."""

    def arrays():
        registry = type_handlers.create_type_handler_registry(
            (np.ndarray, type_handlers.NumpyHandler(deepcopy_host_arrays=False)),
            (jax.Array, type_handlers.ArrayHandler()),  # unused; orbax warns without it
        )
        return ocp.PyTreeCheckpointHandler(type_handler_registry=registry)

    return {"networks": arrays(), "state": arrays(), "meta": ocp.JsonCheckpointHandler()}


def _legacy_steps(directory: pathlib.Path) -> set[int]:
    """The steps of the format before orbax (`ckpt_<8 digits>/`) in `directory`."""
    if not directory.is_dir():
        return set()
    matches = (_LEGACY.match(path.name) for path in directory.iterdir() if path.is_dir())
    return {int(match.group(1)) for match in matches if match}


class CheckpointStore:
    """The `checkpoints/` directory of one run.

    Writers (the trainer) save, wait and close; readers (`evaluate`, `play`) open it with
    `read_only=True`, which never creates, deletes or prunes anything.
    """

    def __init__(
        self,
        directory: str | os.PathLike,
        *,
        keep_every: int = 0,
        asynchronous: bool = True,
        read_only: bool = False,
        primary_only: bool = False,
    ):
        """Opens the store.

        Args:
            directory: the run's `checkpoints/` directory.
            keep_every: steps that are multiples of it are kept; of the others only the
                newest (0: only the newest step is kept).
            asynchronous: write in the background (`wait` joins); False writes in `save`.
            read_only: open for reading only.
            primary_only: process 0 of several writes alone (lc_cfr.train.distributed):
                orbax otherwise meets every process at barriers in each save, and
                refuses to create the directory for a subset of processes.
        """
        self.directory = pathlib.Path(directory).absolute()
        if primary_only:
            self.directory.mkdir(parents=True, exist_ok=True)
        if _QUIET not in logging.get_absl_logger().filters:
            logging.get_absl_logger().addFilter(_QUIET)
        if _QUIET_TASKS not in std_logging.getLogger("asyncio").filters:
            std_logging.getLogger("asyncio").addFilter(_QUIET_TASKS)
        if not read_only:
            _silence_closed_loop_callbacks()
        self.read_only = read_only
        extra = {}
        if primary_only:
            extra["multiprocessing_options"] = ocp.options.MultiprocessingOptions(
                primary_host=0, active_processes={0}
            )
        options = ocp.CheckpointManagerOptions(
            max_to_keep=None if read_only else 1,
            keep_period=keep_every if keep_every > 0 and not read_only else None,
            enable_async_checkpointing=asynchronous,
            step_name_format=ocp.step.standard_name_format(
                step_prefix="step", step_format_fixed_length=8
            ),
            create=not read_only and not primary_only,
            cleanup_tmp_directories=not read_only,  # what a crash mid-save left
            read_only=read_only,
            **extra,
        )
        self._manager = None
        if not read_only or self.directory.is_dir():
            self._manager = ocp.CheckpointManager(
                self.directory, options=options, item_handlers=_item_handlers()
            )
        # (step, checksum thread, its errors, on_saved) of the save `wait` has not joined
        self._pending: tuple | None = None

    # ----- writing ---------------------------------------------------------------

    def save(self, step: int, networks: dict, state: dict, meta: dict, on_saved=None) -> None:
        """Starts saving step `step`; the arrays must not change until `wait` returns,
        which calls `on_saved()` once the step is on disk (never if the save fails).

        Raises:
            CheckpointWriteError: naming the step, when this save (synchronous) or the
                previous one (asynchronous, joined here) failed.
        """
        self.wait()
        meta = _step_meta(step, networks, meta)
        sums_path = self._checksums_path(step)
        sums_path.parent.mkdir(exist_ok=True)
        sums_path.unlink(missing_ok=True)
        errors: list = []

        def write_checksums():
            try:
                atomic_write_text(sums_path, json.dumps(checksums(state)))
            except OSError as error:  # raised again by `wait`
                errors.append(error)

        thread = threading.Thread(target=write_checksums, name="checkpoint-crc")
        thread.start()
        self._pending = (step, thread, errors, on_saved)
        if step in self._manager.all_steps():  # a rerun of the same iteration replaces it
            self._manager.delete(step)
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    networks=ocp.args.PyTreeSave(networks),
                    state=ocp.args.PyTreeSave(state),
                    meta=ocp.args.JsonSave(meta),
                ),
                force=True,
            )
        except Exception as error:  # synchronous saves fail here
            self._pending = None
            thread.join()
            raise self._write_error(step, error) from error

    def save_networks(self, step: int, networks: dict, meta: dict) -> None:
        """Saves step `step` with its `networks` and `meta` items only, as an exported
        agent's step is laid out (lc_cfr.export); waits for it to be on disk.

        Raises:
            CheckpointWriteError: naming the step, when the save fails.
        """
        self.wait()
        meta = _step_meta(step, networks, meta)
        try:
            self._manager.save(
                step,
                args=ocp.args.Composite(
                    networks=ocp.args.PyTreeSave(networks), meta=ocp.args.JsonSave(meta)
                ),
                force=True,
            )
            self._manager.wait_until_finished()
        except Exception as error:  # orbax raises many kinds
            raise self._write_error(step, error) from error

    def wait(self) -> None:
        """Returns once the last save is on disk with its state checksums."""
        if self._pending is None:
            return
        step, thread, errors, on_saved = self._pending
        self._pending = None
        thread.join()
        try:
            self._manager.wait_until_finished()
            if errors:
                raise errors[0]
        except Exception as error:  # orbax re-raises its writer threads' errors here
            raise self._write_error(step, error) from error
        kept = {self._checksums_path(step) for step in self._manager.all_steps()}
        for path in (self.directory / CHECKSUMS).glob("step_*.json"):
            if path not in kept:  # its step was pruned
                path.unlink(missing_ok=True)
        if on_saved is not None:
            on_saved()

    def _write_error(self, step: int, error: Exception) -> CheckpointWriteError:
        before = [s for s in self.steps() if s < step]
        kept = f"step {before[-1]} is intact" if before else "no earlier checkpoint"
        reason = str(error).splitlines()[0] if str(error) else type(error).__name__
        return CheckpointWriteError(
            f"saving checkpoint {step} in {self.directory} failed ({reason}); {kept}"
        )

    def close(self) -> None:
        """Waits for the last save and releases orbax's threads."""
        try:
            self.wait()
        finally:
            if self._manager is not None:
                self._manager.close()

    # ----- reading ---------------------------------------------------------------

    def _step_path(self, step: int) -> pathlib.Path:
        return self.directory / f"step_{step:08d}"

    def _checksums_path(self, step: int) -> pathlib.Path:
        return self.directory / CHECKSUMS / f"step_{step:08d}.json"

    def steps(self) -> list[int]:
        """Complete steps, oldest first: orbax's finalised ones and the older format's."""
        found = _legacy_steps(self.directory)
        if self._manager is not None:
            self._manager.reload()
            found |= set(self._manager.all_steps())
        return sorted(found)

    def latest(self) -> int | None:
        """The newest complete step, or None."""
        steps = self.steps()
        return steps[-1] if steps else None

    def path(self, step: int) -> pathlib.Path:
        """The directory of step `step` (either format)."""
        path = self._step_path(step)
        legacy = self.directory / f"ckpt_{step:08d}"
        return legacy if legacy.is_dir() and not path.is_dir() else path

    def load(self, step: int, *, networks_only: bool = False) -> tuple[dict, dict]:
        """(arrays, meta) of step `step`, every array checked against its checksum.

        Args:
            step: a step of `steps()`.
            networks_only: read only the `networks` item (the memories stay on disk).

        Raises:
            FileNotFoundError: naming the step, when it is not there.
            DamagedCheckpoint: naming the file or item, when it cannot be read whole.
            NetworksOnly: an exported agent's step, asked for more than its networks.
        """
        path = self.path(step)
        if not path.is_dir():
            raise FileNotFoundError(f"no checkpoint of iteration {step} in {self.directory}")
        if path.name.startswith("ckpt_"):
            return _load_legacy(path)
        try:
            meta = json.loads((path / "meta" / "metadata").read_text())
        except (OSError, ValueError) as error:
            raise DamagedCheckpoint(f"{path / 'meta'} is damaged: {error}") from error
        if not networks_only and EXPORTED_FROM in meta:
            raise NetworksOnly(
                f"{path} holds an exported agent's networks only (from "
                f"{meta[EXPORTED_FROM]}): evaluate or play it; training resumes the run "
                "it came from"
            )
        items = ("networks",) if networks_only else ("networks", "state")
        arrays = {}
        for item in items:
            try:
                restored = self._manager.restore(
                    step, args=ocp.args.Composite(**{item: ocp.args.PyTreeRestore()})
                )[item]
            except Exception as error:  # orbax and tensorstore raise many kinds
                raise DamagedCheckpoint(f"{path / item} is damaged: {error}") from error
            if item == "networks":
                _verify(restored, meta.get("network_checksums", {}), path / item)
            else:
                sums = self._checksums_path(step)
                if sums.is_file():
                    try:
                        expected = json.loads(sums.read_text())
                    except (OSError, ValueError) as error:
                        raise DamagedCheckpoint(f"{sums} is damaged: {error}") from error
                    _verify(restored, expected, path / item)
                else:
                    logging.warning("%s is missing: %s is restored unverified", sums, path)
            arrays.update({key: np.asarray(value) for key, value in restored.items()})
        return arrays, meta

    def load_whole(self, step: int | None = None) -> tuple[dict, dict] | None:
        """(arrays, meta) of step `step`, or with `step` None of the newest step that
        reads whole (a damaged newer one is skipped with a warning naming its file);
        None without any step.

        Raises:
            DamagedCheckpoint: `step` is damaged, or no step reads whole (naming each).
        """
        steps = [step] if step is not None else list(reversed(self.steps()))
        damaged = []
        for candidate in steps:
            try:
                return self.load(candidate)
            except DamagedCheckpoint as error:
                if step is not None:
                    raise
                logging.warning("%s; falling back to the checkpoint before it", error)
                damaged.append(str(error))
        if damaged:
            raise DamagedCheckpoint(
                f"no checkpoint in {self.directory} reads whole: " + "; ".join(damaged)
            )
        return None


# What a damaged file of the older format raises when read (truncated zip, cut JSON).
_LEGACY_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile)


def _load_legacy(path: pathlib.Path) -> tuple[dict, dict]:
    """(arrays, meta) of a checkpoint written before orbax (`ckpt_N/arrays.npz`)."""
    for name in ("meta.json", "arrays.npz"):
        try:
            if name == "meta.json":
                meta = json.loads((path / name).read_text())
            else:
                with np.load(path / name) as data:
                    arrays = {key: data[key] for key in data.files}
        except _LEGACY_READ_ERRORS as error:
            raise DamagedCheckpoint(f"{path / name} is damaged: {error}") from error
    return arrays, meta


def latest_step(directory: str | os.PathLike) -> int | None:
    """The newest complete step in `directory`, read without opening it for writing."""
    store = CheckpointStore(directory, read_only=True)
    try:
        return store.latest()
    finally:
        store.close()
