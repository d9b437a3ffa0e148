"""Lost Cities: rules, the shared generator, the JAX engine (and the Cython engine)."""

from lc_cfr.game.rules import CARD_PHASE, DRAW_PHASE, ILLEGAL_ACTION_PENALTY, Rules

__all__ = ["CARD_PHASE", "DRAW_PHASE", "ILLEGAL_ACTION_PENALTY", "Rules"]
