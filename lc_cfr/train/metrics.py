"""Per-iteration metrics: metrics.jsonl, TensorBoard events and a progress bar."""

from __future__ import annotations

import json
import math
import pathlib
import time

import tqdm
from absl import logging

from lc_cfr.train.checkpoint import atomic_write_text

HEADLINE = {
    "traversal/nodes_per_second": "nodes/s",
    "loss/advantage_p0": "adv0",
    "loss/strategy": "strat",
    "iteration_seconds": "s/it",
}


class MetricsWriter:
    """Appends one JSON object per iteration and mirrors scalars to TensorBoard."""

    def __init__(self, workdir: pathlib.Path, *, tensorboard: bool, resume_after: int):
        self.path = workdir / "metrics.jsonl"
        self._truncate_after(resume_after)
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter

            self._tb = SummaryWriter(str(workdir / "tensorboard"))

    def _truncate_after(self, iteration: int) -> None:
        """Drops rows past the checkpoint being resumed, so the file matches the run, and
        a last row torn by a crash mid-write; rewrites the file atomically."""
        if not self.path.exists():
            return
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        rows = []
        for number, line in enumerate(lines, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                if number < len(lines):  # only the last write can have been cut short
                    raise ValueError(f"{self.path} line {number} is not JSON: {error}") from None
                logging.warning("%s: dropped a torn last line (%d bytes)", self.path, len(line))
        pairs = zip(lines[: len(rows)], rows, strict=True)
        kept = [line for line, row in pairs if row["iteration"] <= iteration]
        if len(kept) < len(lines):
            atomic_write_text(self.path, "".join(line + "\n" for line in kept))

    def write(self, row: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            step = row["iteration"]
            for key, value in row.items():
                if key != "iteration" and isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            self._tb.flush()

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


class Progress:
    """A tqdm bar over iterations with ETA and the headline metrics (or nothing).

    With a time limit (`max_seconds` > 0, run.max_minutes) the bar's total is the
    iteration the run will reach first: run.max_iterations, or the iterations that fit
    in the time left at the rate so far; tqdm's ETA then reads whichever comes first.
    """

    def __init__(self, *, total: int, initial: int, enabled: bool, max_seconds: float = 0.0):
        self._max_iterations, self._max_seconds = total, max_seconds
        self._started, self._done = time.perf_counter(), 0
        self._bar = tqdm.tqdm(total=total, initial=initial, unit="it", disable=not enabled)

    def update(self, row: dict) -> None:
        shown = {short: row[key] for key, short in HEADLINE.items() if key in row}
        self._bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        self._done += 1
        if self._max_seconds > 0:
            self._bar.total = self.expected_total(self._bar.n + 1)
        self._bar.update(1)

    def expected_total(self, reached: int) -> int:
        """The iteration a time-limited run stops at, at the rate of this process so far."""
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        left = max(self._max_seconds - elapsed, 0.0)
        return min(self._max_iterations, reached + math.ceil(left * self._done / elapsed))

    def close(self) -> None:
        self._bar.close()
