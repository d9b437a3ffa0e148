"""Learners: optax training of the advantage and strategy networks."""

from lc_cfr.learn.learner import (
    KINDS,
    WEIGHTING_MODES,
    Learner,
    advantage_loss,
    average_weighting,
    check_weighting,
    make_optimizer,
    sample_weights,
    strategy_loss,
)

__all__ = [
    "KINDS",
    "WEIGHTING_MODES",
    "Learner",
    "advantage_loss",
    "average_weighting",
    "check_weighting",
    "make_optimizer",
    "sample_weights",
    "strategy_loss",
]
