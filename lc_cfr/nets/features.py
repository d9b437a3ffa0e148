"""Strategic features: what a strong player reads off the board, derived from the encoding.

The encoding (docs/game.md) holds every card a player has seen as bits; an MLP must learn
from them alone that a red 4 is dead once a red 6 is on one's expedition, or what an
expedition will score. `network.strategic_features=True` appends to the first layer's
input, per colour and for both players, the quantities a player counts before a move
(issue 23 item 6):

* `live_count`, `live_sum`: the cards above the player's top (a wager: only while the
  expedition has no numbered card) that no expedition holds, so they may still reach it
  from a hand, the deck or a pile; their number and the sum of their face values;
* `held_count`, `held_sum`: those of them in the player's hand (for the opponent: the
  cards it is known to hold, the encoding's `opp_known` block);
* `projected`: the expedition's score once the held cards are played on it, the stake a
  player weighs against the time left (an expedition with nothing scores 0);
* `bonus_gap`: cards still missing to the bonus threshold after the held ones;

then three blocks of N card bits: `own_live` and `opp_live` (the live cards above) and
`gift` (a card of one's hand that the opponent may still play on an
expedition it has opened: the danger of discarding it); and two scalars: `remaining`,
the turns left if every draw is from the deck (min(deck, max_turns - turn), both players
together), and `slack`, remaining - 2 * (one's held cards over all colours): negative
when one's turns cannot play all of them.

`network.blocking_features=True` appends two more card blocks, what playing a card of
one's hand gives up (the cards it blocks: every lower numbered card and every wager of its
colour): `strands`, the other cards of one's hand it would block, and `skips`, the live
cards it would block wherever they are (hand, deck, piles, the opponent's hand), as
counts at the card's position and 0 for cards one cannot play. Both are pairwise
comparisons within a colour, which an MLP must otherwise learn from card bits for every
pair. Against `passive_discard` the two-hour agent of docs/experiments.md 29 made 5.3
plays a game that gave up lower cards of its own hand, `safe_heuristic` 2.8 (section 30).

Why derived here and not by the engines: every feature is a function of the encoding, so
the memories store nothing new (the packed codec and every saved run are unchanged), the
two engines need no new code to agree, and one function serves the flax and the torch
MLP: `strategic_features` takes its constants as arrays of the caller's kind and the one
array function it needs (a concatenation) as arguments, and otherwise uses only
operators both libraries share. Every value is a small integer times a power of two and
every sum is of small integers, so the two networks read bit-identical inputs
(tests/test_features.py holds them to it).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from lc_cfr.game.rules import CARD_BLOCKS, COUNT_SCALE, SCORE_SCALE, Rules

SUM_SCALE = 1.0 / 64.0  # face-value sums: at most 54 in the classic game
PER_COLOUR = ("live_count", "live_sum", "held_count", "held_sum", "projected", "bonus_gap")
CARD_FEATURES = ("own_live", "opp_live", "gift")
BLOCKING = ("strands", "skips")  # card blocks of `blocking_features`
SCALARS = ("remaining", "slack")
_SCALES = (COUNT_SCALE, SUM_SCALE, COUNT_SCALE, SUM_SCALE, SCORE_SCALE, COUNT_SCALE)

_HAND, _OWN, _OPP, _OPP_KNOWN = (
    CARD_BLOCKS.index(name) for name in ("hand", "own_expedition", "opp_expedition", "opp_known")
)


def feature_size(rules: Rules) -> int:
    """Number of features: 6 per colour for each player, 3 card blocks, 2 scalars."""
    return 2 * len(PER_COLOUR) * rules.n_colors + len(CARD_FEATURES) * rules.n_cards + 2


def blocking_feature_size(rules: Rules) -> int:
    """Number of blocking features: 2 card blocks."""
    return len(BLOCKING) * rules.n_cards


@dataclasses.dataclass(frozen=True)
class Tables:
    """Per-rank constants of a colour ([K] over a colour's cards, wagers first), numpy
    arrays from `tables` or a backend's arrays from `converted`."""

    value: Any  # [K] float32, face value (0 for a wager)
    is_wager: Any  # [K] float32, 1 for a wager
    blocks: Any  # [K, K] float32, blocks[i, j] = 1: card i on the expedition blocks j

    def converted(self, asarray: Callable[[np.ndarray], Any]) -> Tables:
        """The same tables as arrays of another kind (jnp.asarray, torch.as_tensor)."""
        return Tables(*(asarray(getattr(self, f.name)) for f in dataclasses.fields(self)))


@functools.cache
def tables(rules: Rules) -> Tables:
    """The constants of `rules` as numpy arrays."""
    k, w = rules.cards_per_color, rules.n_wagers
    within = np.arange(k)
    is_wager = within < w
    value = np.where(is_wager, 0, rules.min_rank + within - w)
    # A numbered card blocks itself, every lower numbered card and every wager; a wager
    # on the expedition blocks nothing but itself (wagers are distinct cards).
    numbered_i = ~is_wager[:, None]
    blocks = numbered_i & (is_wager[None, :] | (within[:, None] >= within[None, :]))
    blocks = blocks | np.eye(k, dtype=bool)
    f32 = np.float32
    return Tables(value.astype(f32), is_wager.astype(f32), blocks.astype(f32))


def _card_block(rules: Rules, x, block: int):
    """[..., C, K] the card bits of encoding block `block` of x."""
    n, c, k = rules.n_cards, rules.n_colors, rules.cards_per_color
    return x[..., block * n : (block + 1) * n].reshape(tuple(x.shape[:-1]) + (c, k))


def _open_cards(expedition, blocks):
    """[..., C, K] 1 where no card of `expedition` blocks the card."""
    return ((expedition @ blocks) < 0.5) * 1.0


def strategic_features(
    rules: Rules,
    x,
    *,
    constants: Tables,
    concatenate: Callable[[Sequence[Any]], Any],
):
    """[..., F] features (`feature_size`) of encodings x [..., E'] (E' >= E: a history
    input appends columns after the encoding, which are not read).

    Args:
        rules: the variant whose encoding x holds.
        x: float32 encodings, a jax array or a torch tensor.
        constants: `tables(rules)` as arrays of x's kind (`Tables.converted`).
        concatenate: joins a list of arrays along the last axis.
    """
    n = rules.n_cards
    value, is_wager, blocks = constants.value, constants.is_wager, constants.blocks

    hand, own, opp, opp_known = (
        _card_block(rules, x, block) for block in (_HAND, _OWN, _OPP, _OPP_KNOWN)
    )
    gone = own + opp  # no card is on both expeditions

    def side(expedition, held_cards):
        """A player's [..., 6 C] per-colour features, [..., C, K] live and open cards and
        [...] number of held cards."""
        open_ = _open_cards(expedition, blocks)
        live = open_ * (1.0 - gone)
        held = held_cards * open_
        held_count = held.sum(-1)
        count = expedition.sum(-1) + held_count
        total = (expedition * value).sum(-1) + (held * value).sum(-1)
        wagers = (expedition * is_wager).sum(-1) + (held * is_wager).sum(-1)
        bonus = (count >= rules.bonus_threshold) * float(rules.bonus_amount)
        projected = (count > 0) * ((total + rules.expedition_penalty) * (1.0 + wagers) + bonus)
        gap = rules.bonus_threshold - count
        quantities = (
            live.sum(-1),
            (live * value).sum(-1),
            held_count,
            (held * value).sum(-1),
            projected,
            gap * (gap > 0),
        )
        per_colour = [q * scale for q, scale in zip(quantities, _SCALES, strict=True)]
        return concatenate(per_colour), live, open_, held_count.sum(-1)

    own_colours, own_live, _, own_held = side(own, hand)
    opp_colours, opp_live, opp_open, _ = side(opp, opp_known)
    gift = hand * opp_open * (opp.sum(-1)[..., None] > 0)
    flat = tuple(x.shape[:-1]) + (n,)

    scalars = len(CARD_BLOCKS) * n  # the deck size opens the scalars (docs/game.md)
    deck = x[..., scalars : scalars + 1] * (1.0 / rules.deck_scale)
    turn = x[..., rules.encoding_size - 1 : rules.encoding_size] * (1.0 / rules.turn_scale)
    left = rules.max_turns - turn
    remaining = left - (left - deck) * ((left - deck) > 0)  # min(deck, left), as operators
    slack = remaining - 2.0 * own_held[..., None]
    return concatenate(
        [
            own_colours,
            opp_colours,
            own_live.reshape(flat),
            opp_live.reshape(flat),
            gift.reshape(flat),
            remaining * rules.turn_scale,
            slack * rules.turn_scale,
        ]
    )


def blocking_features(
    rules: Rules,
    x,
    *,
    constants: Tables,
    concatenate: Callable[[Sequence[Any]], Any],
):
    """[..., 2N] blocking features (`blocking_feature_size`, the module doc) of encodings
    x [..., E'], with `strategic_features`' arguments.

    Card i blocks card j when blocks[i, j] = 1, so what a play of i blocks among the cards
    marked in m [..., C, K] is (m @ blocks^T)[i], less i itself.
    """
    n = rules.n_cards
    hand, own, opp = (_card_block(rules, x, block) for block in (_HAND, _OWN, _OPP))
    open_ = _open_cards(own, constants.blocks)
    held = hand * open_  # the cards of the hand one may still play
    live = open_ * (1.0 - own - opp)
    blocked_by = constants.blocks.T
    strands = held * (held @ blocked_by - held)
    skips = held * (live @ blocked_by - live)
    flat = tuple(x.shape[:-1]) + (n,)
    return concatenate([strands.reshape(flat) * COUNT_SCALE, skips.reshape(flat) * COUNT_SCALE])
