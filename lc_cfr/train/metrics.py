"""Per-iteration metrics: metrics.jsonl, TensorBoard events and a progress bar."""

from __future__ import annotations

import json
import math
import pathlib

import tqdm

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
        """Drops rows past the checkpoint being resumed, so the file matches the run."""
        if not self.path.exists():
            return
        rows = [line for line in self.path.read_text().splitlines() if line.strip()]
        kept = [row for row in rows if json.loads(row)["iteration"] <= iteration]
        self.path.write_text("".join(row + "\n" for row in kept))

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
    """A tqdm bar over iterations with ETA and the headline metrics (or nothing)."""

    def __init__(self, *, total: int, initial: int, enabled: bool):
        self._bar = tqdm.tqdm(total=total, initial=initial, unit="it", disable=not enabled)

    def update(self, row: dict) -> None:
        shown = {short: row[key] for key, short in HEADLINE.items() if key in row}
        self._bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        self._bar.close()
