"""The trainer: one loop over a traversal backend, learners, checkpoints and metrics."""

from lc_cfr.train.trainer import Trainer

__all__ = ["Trainer"]
