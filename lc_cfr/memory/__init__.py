"""Reservoir memories for the advantage and strategy samples, and how they store rows."""

from lc_cfr.memory.codec import Codec, Float16Codec, PackedCodec, bytes_per_row, for_rules
from lc_cfr.memory.reservoir import (
    Batch,
    Reservoir,
    allocated_rows,
    candidate_slots,
    capacity_of,
    from_numpy,
    last_writers,
    reserve,
    reservoir_add,
    reservoir_init,
    reservoir_sample,
    to_numpy,
)

__all__ = [
    "Batch",
    "Codec",
    "Float16Codec",
    "PackedCodec",
    "Reservoir",
    "allocated_rows",
    "bytes_per_row",
    "candidate_slots",
    "capacity_of",
    "for_rules",
    "from_numpy",
    "last_writers",
    "reserve",
    "reservoir_add",
    "reservoir_init",
    "reservoir_sample",
    "to_numpy",
]
