"""Rules of a Lost Cities variant and the quantities derived from them.

The rules are a frozen, hashable dataclass so that a JAX engine can close over them as
static data: every array shape in a state follows from them. See docs/game.md.
"""

from __future__ import annotations

import dataclasses
import math

CARD_PHASE = 0
DRAW_PHASE = 1
ILLEGAL_ACTION_PENALTY = 1000

# Scales of the encoding: powers of two so that both engines produce the same float32.
WAGER_SCALE = 1.0 / 4.0
COUNT_SCALE = 1.0 / 16.0
SCORE_SCALE = 1.0 / 128.0
DIFF_SCALE = 1.0 / 256.0

# The card blocks that open the encoding, N values each, in order (docs/game.md). The
# networks locate a block by its index here, e.g. to leave `own_known` out of their input.
CARD_BLOCKS = (
    "hand",
    "own_expedition",
    "opp_expedition",
    "discards",
    "discard_tops",
    "opp_known",
    "playable",
    "own_known",
)


def _pow2_scale(maximum: int) -> float:
    """Returns 2^-ceil(log2(maximum)), so that values up to `maximum` map into (0, 1]."""
    return 2.0 ** -math.ceil(math.log2(max(1, maximum)))


@dataclasses.dataclass(frozen=True)
class Rules:
    """A Lost Cities variant (docs/design.md section 1). Defaults are the classic game."""

    n_colors: int = 5
    n_ranks: int = 9
    min_rank: int = 2
    n_wagers: int = 3
    hand_size: int = 8
    expedition_penalty: int = -20
    bonus_threshold: int = 8
    bonus_amount: int = 20
    max_turns: int = 100

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ValueError(f"rules.{field.name} must be an int, got {value!r}")
        if not 1 <= self.n_colors <= 6:
            raise ValueError(f"rules.n_colors must be in 1..6, got {self.n_colors}")
        if self.n_ranks < 1:
            raise ValueError(f"rules.n_ranks must be >= 1, got {self.n_ranks}")
        if self.min_rank < 0:
            raise ValueError(f"rules.min_rank must be >= 0, got {self.min_rank}")
        if self.n_wagers < 0:
            raise ValueError(f"rules.n_wagers must be >= 0, got {self.n_wagers}")
        if self.hand_size < 1:
            raise ValueError(f"rules.hand_size must be >= 1, got {self.hand_size}")
        if self.bonus_threshold < 1:
            raise ValueError(f"rules.bonus_threshold must be >= 1, got {self.bonus_threshold}")
        if self.max_turns < 1:
            raise ValueError(f"rules.max_turns must be >= 1, got {self.max_turns}")
        if self.n_cards <= 2 * self.hand_size:
            raise ValueError(
                f"rules.hand_size={self.hand_size} deals two hands of {2 * self.hand_size} cards "
                f"from a deck of only {self.n_cards}; the deck must hold more than two hands"
            )
        if self.n_cards > 120:
            raise ValueError(f"rules give {self.n_cards} cards; at most 120 fit the int8 state")

    @property
    def cards_per_color(self) -> int:
        return self.n_wagers + self.n_ranks

    @property
    def n_cards(self) -> int:
        return self.n_colors * self.cards_per_color

    @property
    def num_actions(self) -> int:
        return 2 * self.hand_size + 1 + self.n_colors

    @property
    def draw_deck_action(self) -> int:
        return 2 * self.hand_size

    @property
    def first_pile_action(self) -> int:
        return 2 * self.hand_size + 1

    @property
    def encoding_size(self) -> int:
        """Length of `observe`: the 8 card blocks, 7 per-colour blocks and 5 scalars."""
        return 8 * self.n_cards + 7 * self.n_colors + 5

    @property
    def deck_scale(self) -> float:
        return _pow2_scale(self.n_cards - 2 * self.hand_size)

    @property
    def turn_scale(self) -> float:
        return _pow2_scale(self.max_turns)

    def card_color(self, card: int) -> int:
        return card // self.cards_per_color

    def card_is_wager(self, card: int) -> bool:
        return card % self.cards_per_color < self.n_wagers

    def card_rank(self, card: int) -> int:
        """Rank index of a numbered card (-1 for a wager)."""
        return card % self.cards_per_color - self.n_wagers

    def card_value(self, card: int) -> int:
        """Face value of a numbered card (0 for a wager)."""
        rank = self.card_rank(card)
        return self.min_rank + rank if rank >= 0 else 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_mapping(cls, mapping) -> Rules:
        """Builds rules from a dict or ConfigDict, naming any unknown field."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(mapping) - known)
        if unknown:
            raise ValueError(f"unknown rules field(s) {unknown}; valid: {sorted(known)}")
        return cls(**dict(mapping))
