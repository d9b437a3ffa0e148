"""Reservoir memories for the advantage and strategy samples."""

from lc_cfr.memory.reservoir import (
    Batch,
    Reservoir,
    candidate_slots,
    capacity_of,
    from_numpy,
    last_writers,
    reservoir_add,
    reservoir_init,
    reservoir_sample,
    to_numpy,
)

__all__ = [
    "Batch",
    "Reservoir",
    "candidate_slots",
    "capacity_of",
    "from_numpy",
    "last_writers",
    "reservoir_add",
    "reservoir_init",
    "reservoir_sample",
    "to_numpy",
]
