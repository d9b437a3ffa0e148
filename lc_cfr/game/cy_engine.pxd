# cython: language_level=3
"""C-level interface of the Cython Lost Cities engine (docs/game.md).

A traversal module can `from lc_cfr.game.cy_engine cimport ...` and run games without
touching Python per node: build an `LCRules` once (`lc_rules_from_py`), keep `LCState`
values (plain structs: copy them with `=` or memcpy for undo), and call the `nogil`
functions below. The module that cimports this needs `lc_cfr/game` on its include path
(for lc_rng.h), as setup.py gives the engine itself.
"""

from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t

cdef extern from "lc_rng.h" nogil:
    uint32_t lc_random_bits(uint32_t seed, uint32_t iteration, uint32_t index,
                            uint32_t counter, uint32_t purpose)
    float lc_uniform(uint32_t bits)
    int32_t lc_below(uint32_t bits, uint32_t n)
    enum:
        LC_PURPOSE_DEAL
        LC_PURPOSE_RANDOM_PLAY
        LC_PURPOSE_EXPLORE
        LC_PURPOSE_SAMPLE
        LC_PURPOSE_ROLLOUT
        LC_PURPOSE_BOT_NOISE
        LC_PURPOSE_OPPONENT

# Fixed maximum sizes of the C state. Rules that do not fit are refused by
# lc_rules_from_py with a ValueError naming the field.
cdef enum:
    LC_MAX_CARDS = 120       # n_cards; the sentinel N <= 120 still fits int8
    LC_MAX_COLORS = 6        # n_colors
    LC_MAX_HAND = 60         # hand_size (2 * hand_size < n_cards <= 120 gives <= 59)
    LC_MAX_ACTIONS = 128     # num_actions = 2 * hand_size + 1 + n_colors <= 125

# Phases.
cdef enum:
    LC_CARD_PHASE = 0
    LC_DRAW_PHASE = 1

# Result codes of lc_check / lc_apply (0 = legal / applied). lc_error_reason gives text.
cdef enum:
    LC_OK = 0
    LC_ERR_GAME_OVER = 1
    LC_ERR_OUT_OF_RANGE = 2
    LC_ERR_DRAW_IN_CARD_PHASE = 3
    LC_ERR_CARD_IN_DRAW_PHASE = 4
    LC_ERR_EMPTY_SLOT = 5
    LC_ERR_WAGER_AFTER_NUMBER = 6
    LC_ERR_RANK_NOT_ABOVE = 7
    LC_ERR_FORBIDDEN_PILE = 8
    LC_ERR_EMPTY_PILE = 9
    LC_ERR_DECK_EMPTY = 10


ctypedef struct LCRules:
    # The Rules fields.
    int32_t n_colors
    int32_t n_ranks
    int32_t min_rank
    int32_t n_wagers
    int32_t hand_size
    int32_t expedition_penalty
    int32_t bonus_threshold
    int32_t bonus_amount
    int32_t max_turns
    # Derived.
    int32_t cards_per_color
    int32_t n_cards
    int32_t num_actions
    int32_t draw_deck_action         # 2H
    int32_t first_pile_action        # 2H + 1
    int32_t encoding_size            # 8N + 7C + 5
    float deck_scale
    float turn_scale
    # Per-card tables, indexed by card id < n_cards.
    int8_t card_color[LC_MAX_CARDS]
    int8_t card_rank[LC_MAX_CARDS]   # rank index, -1 for a wager
    int32_t card_value[LC_MAX_CARDS] # face value, 0 for a wager


ctypedef struct LCState:
    # The fields of docs/game.md, compacted. Unused entries (beyond N, H, C) are ignored.
    int8_t deck[LC_MAX_CARDS]
    int8_t hands[2][LC_MAX_HAND]               # sorted ascending, empty slots = N (last)
    int8_t discards[LC_MAX_CARDS]              # pile c, slot j at [c * cards_per_color + j]
    int8_t pile_sizes[LC_MAX_COLORS]
    uint8_t expedition_cards[2][LC_MAX_CARDS]
    uint8_t known_cards[2][LC_MAX_CARDS]
    uint8_t in_discards[LC_MAX_CARDS]          # card lies in a discard pile (for encode)
    int16_t expedition_wagers[2][LC_MAX_COLORS]
    int16_t expedition_numbered[2][LC_MAX_COLORS]
    int16_t expedition_top[2][LC_MAX_COLORS]   # highest rank index, -1 if none
    int32_t expedition_sum[2][LC_MAX_COLORS]
    int32_t color_scores[2][LC_MAX_COLORS]     # per-colour score, kept up to date
    int32_t scores[2]                          # sum of color_scores
    int32_t deck_pos
    int32_t turn
    int8_t current_player
    int8_t phase
    int8_t forbidden_pile                      # -1 if none
    int8_t terminal
    int8_t truncated


# Fills *r from a lc_cfr.game.rules.Rules (ValueError naming the field if it does not fit).
cdef int lc_rules_from_py(LCRules* r, object rules) except -1

# Deals from an explicit permutation of 0..N-1 (not checked here).
cdef void lc_deal_order(const LCRules* r, LCState* s, const int8_t* deck) noexcept nogil
# Deals the deck sorted by (lc_random_bits(seed, iteration, game_index, card, DEAL), card).
cdef void lc_deal_seed(const LCRules* r, LCState* s, uint32_t seed, uint32_t game_index,
                       uint32_t iteration) noexcept nogil

# LC_OK if the action is legal in s, else an LC_ERR_* code.
cdef int lc_check(const LCRules* r, const LCState* s, int32_t action) noexcept nogil
# Applies a legal action and returns LC_OK; an illegal one returns its LC_ERR_* code and
# leaves s untouched.
cdef int lc_apply(const LCRules* r, LCState* s, int32_t action) noexcept nogil
# Applies an action known to be legal (no checks at all).
cdef void lc_apply_unchecked(const LCRules* r, LCState* s, int32_t action) noexcept nogil
# Writes num_actions bytes (1 = legal) and returns how many actions are legal.
cdef int lc_legal_mask(const LCRules* r, const LCState* s, uint8_t* out) noexcept nogil
# The n-th (0-based) legal action in ascending order of a mask, -1 if there is none.
cdef int lc_nth_legal(const uint8_t* mask, int num_actions, int n) noexcept nogil
# Writes the encoding_size floats of observe(state, player).
cdef void lc_encode(const LCRules* r, const LCState* s, int player, float* out) noexcept nogil
# Score of one expedition from its counts (0 when empty).
cdef int32_t lc_expedition_score(const LCRules* r, int32_t wagers, int32_t numbered,
                                 int32_t total) noexcept nogil
# Current total score of a player.
cdef int32_t lc_score(const LCState* s, int player) noexcept nogil
# Text of an LC_ERR_* code.
cdef const char* lc_error_reason(int code) noexcept nogil


cdef class CyGame:
    cdef LCRules r
    cdef LCState s
    cdef readonly object rules
    cdef bint dealt
    cdef str _illegal_message(self, object action, int err)
    cdef str _describe(self, int action)
