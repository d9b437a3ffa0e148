"""Opponent bots for evaluation and traversal (docs/bots.md).

Every bot exists twice with identical choices: in JAX (`lc_cfr.bots.jax_bots`, pure and
vmappable) and in Cython over the Cython engine (`lc_cfr.bots.cy_bots`, re-exported by
`lc_cfr.bots.py_bots`). Both read their parameters from `BOT_PARAMS` below, so a tuning
change lands in both at once.

This module imports neither JAX nor the Cython extension.
"""

from __future__ import annotations

from typing import NamedTuple

BOT_NAMES = (
    "random",
    "passive_discard",
    "safe_heuristic",
    "safe_heuristic_loose",
    "safe_heuristic_strict",
    "noisy_safe",
)

# Bot kinds.
KIND_RANDOM = 0
KIND_PASSIVE = 1
KIND_SAFE = 2

# noisy_safe takes a uniformly random legal action when (bits >> 8) < NOISE_THRESHOLD,
# bits = random_bits(seed, iteration, game_index, 2 * decision, BOT_NOISE): with
# probability NOISE_THRESHOLD / 2^24 = 0.1 (to within 2^-24).
NOISE_PROBABILITY = 0.1
NOISE_THRESHOLD = int(NOISE_PROBABILITY * 2**24)  # 1677721

NO_KEY = 1 << 20  # "not a candidate" in every argmin


class BotParams(NamedTuple):
    """Everything that distinguishes one bot name from another (docs/bots.md).

    Both implementations read these, so a tuning change lands in both at once.
    """

    kind: int  # KIND_RANDOM, KIND_PASSIVE or KIND_SAFE
    open_margin: int = 20  # projected expedition points needed to open a colour
    wager_margin: int = 3  # projected points needed to play a wager
    noise_threshold: int = 0  # random action when (bits >> 8) < this; 0 = never
    future_discount: int = 2  # future = unseen_above * deck_left / (this * unseen_total)
    gap_early: int = 1  # unseen ranks a continuing play may skip while deck_left > gap_deck
    gap_late: int = 2  # ... and while deck_left <= gap_deck
    gap_deck: int = 24
    keep_started: int = 5  # keep value of a live card of a started colour: this + 2 * points
    wager_points: int = 10  # what a wager counts for in keep / help values and pile choice
    late_margin: int = 0  # margins grow by late_margin * (deck drawn) / (deck after the deal)


SAFE = BotParams(KIND_SAFE)

BOT_PARAMS = {
    "random": BotParams(KIND_RANDOM),
    "passive_discard": BotParams(KIND_PASSIVE),
    "safe_heuristic": SAFE,
    "safe_heuristic_loose": SAFE._replace(open_margin=8, wager_margin=0),
    "safe_heuristic_strict": SAFE._replace(open_margin=30, wager_margin=5, late_margin=5),
    "noisy_safe": SAFE._replace(noise_threshold=NOISE_THRESHOLD),
}


def check_bot_name(name, field: str = "bot") -> str:
    """Returns `name` if it is a bot name, else raises ValueError naming `field`."""
    if name not in BOT_NAMES:
        raise ValueError(f"{field} must be one of {list(BOT_NAMES)}, got {name!r}")
    return name


__all__ = [
    "BOT_NAMES",
    "BOT_PARAMS",
    "NOISE_PROBABILITY",
    "NOISE_THRESHOLD",
    "BotParams",
    "check_bot_name",
]
