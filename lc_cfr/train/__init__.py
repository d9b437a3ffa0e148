"""The trainer: one loop, one backend registry, checkpoints and metrics."""

from lc_cfr.train.backends import BACKENDS, make_backend
from lc_cfr.train.trainer import Trainer

__all__ = ["BACKENDS", "Trainer", "make_backend"]
