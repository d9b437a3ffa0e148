# cython: language_level=3
"""C-level interface of the Cython bots (docs/bots.md).

A Cython traversal can `from lc_cfr.bots.cy_bots cimport ...`, fill an `LCBotParams` once
with `lc_bot_params` and call `lc_bot_action` on its `LCState` values without touching
Python. The cimporting module needs `lc_cfr/game` on its include path (for lc_rng.h).
"""

from libc.stdint cimport int32_t, uint32_t

from lc_cfr.game.cy_engine cimport LCRules, LCState

ctypedef struct LCBotParams:
    # The fields of lc_cfr.bots.BotParams.
    int32_t kind
    int32_t open_margin
    int32_t wager_margin
    uint32_t noise_threshold
    int32_t future_discount
    int32_t gap_early
    int32_t gap_late
    int32_t gap_deck
    int32_t keep_started
    int32_t wager_points
    int32_t late_margin

# Fills *out with the parameters of bot `name` (ValueError naming `field` if unknown).
cdef int lc_bot_params(LCBotParams* out, object name, str field=*) except -1

# The action of the bot for the player to move in s (non-terminal), keyed for randomness by
# random_bits(seed, iteration, game_index, 2 * decision [+ 1], BOT_NOISE). Always legal.
cdef int32_t lc_bot_action(const LCRules* r, const LCState* s, const LCBotParams* prm,
                           uint32_t seed, uint32_t iteration, uint32_t game_index,
                           uint32_t decision) noexcept nogil

# The deterministic part of a passive or safe bot (no noise, no legality guard).
cdef int32_t lc_heuristic_action(const LCRules* r, const LCState* s,
                                 const LCBotParams* prm) noexcept nogil
