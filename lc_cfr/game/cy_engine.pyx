# cython: language_level=3
"""The Cython Lost Cities engine (docs/game.md is the contract).

The state is a compact C struct (`LCState`, see cy_engine.pxd) and every transition is a
`nogil` C function, so the multiprocessing backends can traverse games without Python per
node. `CyGame` wraps one state for Python; `play_random_games` is the batch benchmark.
It agrees bit for bit with the JAX engine: same deal, same transitions, same encoding.
"""

import operator

import numpy as np

cimport cython
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint32_t, uint64_t
from libc.string cimport memcmp, memcpy, memset

_MASK32 = 0xFFFFFFFF
_INT32_MAX = 2**31 - 1

PURPOSE_DEAL = LC_PURPOSE_DEAL
PURPOSE_RANDOM_PLAY = LC_PURPOSE_RANDOM_PLAY
CARD_PHASE = LC_CARD_PHASE
DRAW_PHASE = LC_DRAW_PHASE
MAX_CARDS = LC_MAX_CARDS
MAX_COLORS = LC_MAX_COLORS
MAX_HAND = LC_MAX_HAND

_PHASE_NAMES = ("CARD", "DRAW")


# --------------------------------------------------------------------------------------
# Rules
# --------------------------------------------------------------------------------------

cdef int lc_rules_from_py(LCRules* r, object rules) except -1:
    cdef int i, k
    values = {}
    for name in ("n_colors", "n_ranks", "min_rank", "n_wagers", "hand_size",
                 "expedition_penalty", "bonus_threshold", "bonus_amount", "max_turns"):
        try:
            value = getattr(rules, name)
        except AttributeError:
            raise TypeError(f"rules must be a lc_cfr.game.rules.Rules; it has no {name}")
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"rules.{name} must be an int, got {value!r}")
        if not -_INT32_MAX <= value <= _INT32_MAX:
            raise ValueError(f"rules.{name}={value} does not fit the engine's int32")
        values[name] = value
    n_colors = values["n_colors"]
    n_ranks = values["n_ranks"]
    min_rank = values["min_rank"]
    n_wagers = values["n_wagers"]
    hand_size = values["hand_size"]
    if not 1 <= n_colors <= LC_MAX_COLORS:
        raise ValueError(f"rules.n_colors must be in 1..{LC_MAX_COLORS}, got {n_colors}")
    if n_ranks < 1:
        raise ValueError(f"rules.n_ranks must be >= 1, got {n_ranks}")
    if n_wagers < 0:
        raise ValueError(f"rules.n_wagers must be >= 0, got {n_wagers}")
    if min_rank < 0:
        raise ValueError(f"rules.min_rank must be >= 0, got {min_rank}")
    if values["bonus_threshold"] < 1:
        raise ValueError(f"rules.bonus_threshold must be >= 1, got {values['bonus_threshold']}")
    if values["max_turns"] < 1:
        raise ValueError(f"rules.max_turns must be >= 1, got {values['max_turns']}")
    cards_per_color = n_wagers + n_ranks
    n_cards = n_colors * cards_per_color
    if n_cards > LC_MAX_CARDS:
        raise ValueError(
            f"rules.n_colors * (rules.n_wagers + rules.n_ranks) = {n_cards} cards; the "
            f"Cython engine holds at most {LC_MAX_CARDS}"
        )
    if not 1 <= hand_size <= LC_MAX_HAND:
        raise ValueError(f"rules.hand_size must be in 1..{LC_MAX_HAND}, got {hand_size}")
    if n_cards <= 2 * hand_size:
        raise ValueError(
            f"rules.hand_size={hand_size} deals two hands of {2 * hand_size} cards from a "
            f"deck of only {n_cards}; the deck must hold more than two hands"
        )
    # Every score, per colour or total, and the score difference must fit int32.
    max_sum = n_ranks * (min_rank + n_ranks - 1)
    per_color = (max_sum + abs(values["expedition_penalty"])) * (1 + n_wagers) + abs(
        values["bonus_amount"]
    )
    if 2 * n_colors * per_color > _INT32_MAX:
        raise ValueError(
            "rules.min_rank, rules.expedition_penalty and rules.bonus_amount give scores "
            "beyond int32"
        )
    num_actions = 2 * hand_size + 1 + n_colors
    encoding_size = 8 * n_cards + 7 * n_colors + 5

    memset(r, 0, sizeof(LCRules))
    r.n_colors = n_colors
    r.n_ranks = n_ranks
    r.min_rank = min_rank
    r.n_wagers = n_wagers
    r.hand_size = hand_size
    r.expedition_penalty = values["expedition_penalty"]
    r.bonus_threshold = values["bonus_threshold"]
    r.bonus_amount = values["bonus_amount"]
    r.max_turns = values["max_turns"]
    r.cards_per_color = cards_per_color
    r.n_cards = n_cards
    r.num_actions = num_actions
    r.draw_deck_action = 2 * hand_size
    r.first_pile_action = 2 * hand_size + 1
    r.encoding_size = encoding_size
    r.deck_scale = _pow2_scale(n_cards - 2 * hand_size)
    r.turn_scale = _pow2_scale(values["max_turns"])
    for i in range(n_cards):
        k = i % cards_per_color
        r.card_color[i] = <int8_t>(i // cards_per_color)
        if k < n_wagers:
            r.card_rank[i] = -1
            r.card_value[i] = 0
        else:
            r.card_rank[i] = <int8_t>(k - n_wagers)
            r.card_value[i] = min_rank + (k - n_wagers)
    return 0


def _pow2_scale(maximum):
    """2^-ceil(log2(maximum)) (1 when maximum <= 1), computed exactly on integers."""
    maximum = max(1, int(maximum))
    return 2.0 ** -((maximum - 1).bit_length())


# --------------------------------------------------------------------------------------
# Deal
# --------------------------------------------------------------------------------------

cdef inline void _hand_insert(int8_t* hand, int hand_size, int8_t card) noexcept nogil:
    """Inserts a card into a sorted hand whose last slot is empty (holds N)."""
    cdef int j = hand_size - 1
    while j > 0 and hand[j - 1] > card:
        hand[j] = hand[j - 1]
        j -= 1
    hand[j] = card


cdef inline void _hand_remove(int8_t* hand, int hand_size, int slot, int8_t sentinel) noexcept nogil:
    """Removes the card in a slot, shifting the rest left; the last slot becomes N."""
    cdef int j
    for j in range(slot, hand_size - 1):
        hand[j] = hand[j + 1]
    hand[hand_size - 1] = sentinel


cdef void lc_deal_order(const LCRules* r, LCState* s, const int8_t* deck) noexcept nogil:
    cdef int N = r.n_cards
    cdef int H = r.hand_size
    cdef int p, i
    cdef int8_t* hand
    memset(s, 0, sizeof(LCState))
    memcpy(s.deck, deck, N * sizeof(int8_t))
    memset(s.discards, N, sizeof(s.discards))
    for p in range(2):
        hand = s.hands[p]
        memset(hand, N, LC_MAX_HAND)
        for i in range(H):
            _hand_insert(hand, i + 1, deck[p * H + i])
        for i in range(r.n_colors):
            s.expedition_top[p][i] = -1
    s.deck_pos = 2 * H
    s.turn = 0
    s.current_player = 0
    s.phase = LC_CARD_PHASE
    s.forbidden_pile = -1
    s.terminal = 0
    s.truncated = 0


cdef void lc_deal_seed(const LCRules* r, LCState* s, uint32_t seed, uint32_t game_index,
                       uint32_t iteration) noexcept nogil:
    # Sort cards by the 64-bit key (bits << 32 | card): a bottom-up merge sort.
    cdef uint64_t buf_a[LC_MAX_CARDS]
    cdef uint64_t buf_b[LC_MAX_CARDS]
    cdef uint64_t* src = buf_a
    cdef uint64_t* dst = buf_b
    cdef uint64_t* tmp
    cdef int8_t deck[LC_MAX_CARDS]
    cdef int n = r.n_cards
    cdef int width, lo, mid, hi, i, j, k
    cdef uint32_t card
    for card in range(<uint32_t>n):
        src[card] = ((<uint64_t>lc_random_bits(seed, iteration, game_index, card,
                                                LC_PURPOSE_DEAL)) << 32) | card
    width = 1
    while width < n:
        lo = 0
        while lo < n:
            mid = lo + width
            if mid > n:
                mid = n
            hi = lo + 2 * width
            if hi > n:
                hi = n
            i = lo
            j = mid
            k = lo
            while i < mid and j < hi:
                if src[j] < src[i]:
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
            lo = hi
        tmp = src
        src = dst
        dst = tmp
        width *= 2
    for i in range(n):
        deck[i] = <int8_t>(src[i] & 0xFF)
    lc_deal_order(r, s, deck)


# --------------------------------------------------------------------------------------
# Transitions
# --------------------------------------------------------------------------------------

cdef int32_t lc_expedition_score(const LCRules* r, int32_t wagers, int32_t numbered,
                                 int32_t total) noexcept nogil:
    cdef int32_t score
    if wagers + numbered == 0:
        return 0
    score = (total + r.expedition_penalty) * (1 + wagers)
    if wagers + numbered >= r.bonus_threshold:
        score += r.bonus_amount
    return score


cdef int32_t lc_score(const LCState* s, int player) noexcept nogil:
    return s.scores[player]


cdef inline int _can_play(const LCRules* r, const LCState* s, int p, int x) noexcept nogil:
    """1 if card x (in p's hand) may be played onto p's expedition of its colour, else 0.

    A numbered card needs a rank above the top (-1 when empty); a wager (rank -1, never
    above the top) needs no numbered card yet. Branch-free: this runs per hand card.
    """
    cdef int c = r.card_color[x]
    cdef int rank = r.card_rank[x]
    return (rank > s.expedition_top[p][c]) | (
        (rank < 0) & (s.expedition_numbered[p][c] == 0))


cdef int lc_check(const LCRules* r, const LCState* s, int32_t action) noexcept nogil:
    cdef int H = r.hand_size
    cdef int N = r.n_cards
    cdef int p = s.current_player
    cdef int x, c
    if s.terminal:
        return LC_ERR_GAME_OVER
    if action < 0 or action >= r.num_actions:
        return LC_ERR_OUT_OF_RANGE
    if s.phase == LC_CARD_PHASE:
        if action >= 2 * H:
            return LC_ERR_DRAW_IN_CARD_PHASE
        x = s.hands[p][action % H]
        if x >= N:
            return LC_ERR_EMPTY_SLOT
        if action < H:
            c = r.card_color[x]
            if r.card_rank[x] < 0:
                if s.expedition_numbered[p][c] > 0:
                    return LC_ERR_WAGER_AFTER_NUMBER
            elif r.card_rank[x] <= s.expedition_top[p][c]:
                return LC_ERR_RANK_NOT_ABOVE
        return LC_OK
    if action < 2 * H:
        return LC_ERR_CARD_IN_DRAW_PHASE
    if action == 2 * H:
        if s.deck_pos >= N:
            return LC_ERR_DECK_EMPTY
        return LC_OK
    c = action - 2 * H - 1
    if c == s.forbidden_pile:
        return LC_ERR_FORBIDDEN_PILE
    if s.pile_sizes[c] == 0:
        return LC_ERR_EMPTY_PILE
    return LC_OK


cdef void lc_apply_unchecked(const LCRules* r, LCState* s, int32_t action) noexcept nogil:
    cdef int H = r.hand_size
    cdef int N = r.n_cards
    cdef int p = s.current_player
    cdef int slot, c, rank
    cdef int32_t old, new
    cdef int8_t x
    if s.phase == LC_CARD_PHASE:
        slot = action % H
        x = s.hands[p][slot]
        c = r.card_color[x]
        _hand_remove(s.hands[p], H, slot, <int8_t>N)
        s.known_cards[p][x] = 0
        if action < H:
            s.expedition_cards[p][x] = 1
            rank = r.card_rank[x]
            if rank < 0:
                s.expedition_wagers[p][c] += 1
            else:
                s.expedition_numbered[p][c] += 1
                s.expedition_sum[p][c] += r.card_value[x]
                s.expedition_top[p][c] = <int16_t>rank
            old = s.color_scores[p][c]
            new = lc_expedition_score(r, s.expedition_wagers[p][c],
                                      s.expedition_numbered[p][c], s.expedition_sum[p][c])
            s.color_scores[p][c] = new
            s.scores[p] += new - old
        else:
            s.discards[c * r.cards_per_color + s.pile_sizes[c]] = x
            s.in_discards[x] = 1
            s.pile_sizes[c] += 1
            s.forbidden_pile = <int8_t>c
        s.phase = LC_DRAW_PHASE
        return
    if action == 2 * H:
        x = s.deck[s.deck_pos]
        s.deck_pos += 1
    else:
        c = action - 2 * H - 1
        s.pile_sizes[c] -= 1
        slot = c * r.cards_per_color + s.pile_sizes[c]
        x = s.discards[slot]
        s.discards[slot] = <int8_t>N
        s.in_discards[x] = 0
        s.known_cards[p][x] = 1
    _hand_insert(s.hands[p], H, x)
    s.forbidden_pile = -1
    s.phase = LC_CARD_PHASE
    s.turn += 1
    s.current_player = <int8_t>(1 - p)
    if s.deck_pos == N:
        s.terminal = 1
    elif s.turn >= r.max_turns:
        s.terminal = 1
        s.truncated = 1


cdef int lc_apply(const LCRules* r, LCState* s, int32_t action) noexcept nogil:
    cdef int err = lc_check(r, s, action)
    if err != LC_OK:
        return err
    lc_apply_unchecked(r, s, action)
    return LC_OK


cdef int lc_legal_mask(const LCRules* r, const LCState* s, uint8_t* out) noexcept nogil:
    cdef int H = r.hand_size
    cdef int N = r.n_cards
    cdef int p = s.current_player
    cdef int i, x, c, ok, count = 0
    cdef const int8_t* hand
    memset(out, 0, r.num_actions)
    if s.terminal:
        return 0
    if s.phase == LC_CARD_PHASE:
        hand = s.hands[p]
        for i in range(H):
            x = hand[i]
            if x >= N:
                continue
            ok = _can_play(r, s, p, x)
            out[i] = <uint8_t>ok
            out[H + i] = 1
            count += 1 + ok
        return count
    if s.deck_pos < N:
        out[2 * H] = 1
        count += 1
    for c in range(r.n_colors):
        if s.pile_sizes[c] > 0 and c != s.forbidden_pile:
            out[2 * H + 1 + c] = 1
            count += 1
    return count


cdef int lc_nth_legal(const uint8_t* mask, int num_actions, int n) noexcept nogil:
    cdef int a
    for a in range(num_actions):
        if mask[a]:
            if n == 0:
                return a
            n -= 1
    return -1


cdef const char* lc_error_reason(int code) noexcept nogil:
    if code == LC_OK:
        return "legal"
    if code == LC_ERR_GAME_OVER:
        return "game is over"
    if code == LC_ERR_OUT_OF_RANGE:
        return "action out of range"
    if code == LC_ERR_DRAW_IN_CARD_PHASE:
        return "a draw action in the CARD phase"
    if code == LC_ERR_CARD_IN_DRAW_PHASE:
        return "a card action in the DRAW phase"
    if code == LC_ERR_EMPTY_SLOT:
        return "hand slot is empty"
    if code == LC_ERR_WAGER_AFTER_NUMBER:
        return "wager after a numbered card"
    if code == LC_ERR_RANK_NOT_ABOVE:
        return "rank not above the expedition's top"
    if code == LC_ERR_FORBIDDEN_PILE:
        return "pile is the one just discarded to"
    if code == LC_ERR_EMPTY_PILE:
        return "pile is empty"
    if code == LC_ERR_DECK_EMPTY:
        return "deck is empty"
    return "unknown error"


# --------------------------------------------------------------------------------------
# Encoding
# --------------------------------------------------------------------------------------

@cython.cdivision(True)
cdef void lc_encode(const LCRules* r, const LCState* s, int player, float* out) noexcept nogil:
    cdef int N = r.n_cards
    cdef int C = r.n_colors
    cdef int H = r.hand_size
    cdef int cpc = r.cards_per_color
    cdef int p = player
    cdef int o = 1 - player
    cdef int i, x, c, size
    cdef const int8_t* hand = s.hands[p]
    cdef const uint8_t* own_exp = s.expedition_cards[p]
    cdef const uint8_t* opp_exp = s.expedition_cards[o]
    cdef const uint8_t* opp_known = s.known_cards[o]
    cdef const uint8_t* own_known = s.known_cards[p]
    cdef const uint8_t* in_discards = &s.in_discards[0]
    cdef float* out_own = out + N
    cdef float* out_opp = out + 2 * N
    cdef float* out_discards = out + 3 * N
    cdef float* out_tops = out + 4 * N
    cdef float* out_known = out + 5 * N
    cdef float* out_playable = out + 6 * N
    cdef float* out_own_known = out + 7 * N
    cdef float* tail = out + 8 * N

    # hand and playable (zero first, the hand sets a few entries).
    memset(out, 0, N * sizeof(float))
    memset(out_tops, 0, N * sizeof(float))
    memset(out_playable, 0, N * sizeof(float))
    for i in range(H):
        x = hand[i]
        if x < N:
            out[x] = 1.0
            out_playable[x] = <float>_can_play(r, s, p, x)
    # expeditions and the known cards of both players: straight loops over cards.
    for x in range(N):
        out_own[x] = <float>own_exp[x]
    for x in range(N):
        out_opp[x] = <float>opp_exp[x]
    for x in range(N):
        out_known[x] = <float>opp_known[x]
    for x in range(N):
        out_own_known[x] = <float>own_known[x]
    for x in range(N):
        out_discards[x] = <float>in_discards[x]
    # tops of the discard piles.
    for c in range(C):
        size = s.pile_sizes[c]
        if size > 0:
            out_tops[s.discards[c * cpc + size - 1]] = 1.0
    # scalars and per-colour features.
    tail[0] = <float>(N - s.deck_pos) * r.deck_scale
    tail[1] = 1.0 if s.phase == LC_CARD_PHASE else 0.0
    tail[2] = 1.0 if s.phase == LC_DRAW_PHASE else 0.0
    for c in range(C):
        tail[3 + c] = 1.0 if c == s.forbidden_pile else 0.0
        tail[3 + C + c] = <float>s.expedition_wagers[p][c] * 0.25
        tail[3 + 2 * C + c] = <float>s.expedition_wagers[o][c] * 0.25
        tail[3 + 3 * C + c] = (
            <float>(s.expedition_wagers[p][c] + s.expedition_numbered[p][c]) * 0.0625
        )
        tail[3 + 4 * C + c] = (
            <float>(s.expedition_wagers[o][c] + s.expedition_numbered[o][c]) * 0.0625
        )
        tail[3 + 5 * C + c] = <float>s.color_scores[p][c] * 0.0078125
        tail[3 + 6 * C + c] = <float>s.color_scores[o][c] * 0.0078125
    tail[3 + 7 * C] = <float>(s.scores[p] - s.scores[o]) * 0.00390625
    tail[4 + 7 * C] = <float>s.turn * r.turn_scale


# --------------------------------------------------------------------------------------
# Python API
# --------------------------------------------------------------------------------------

cdef inline uint32_t _u32(object value) except? 0:
    return <uint32_t>(operator.index(value) & _MASK32)


cdef class CyGame:
    """One Lost Cities game in a C struct.

    Args:
      rules: a `lc_cfr.game.rules.Rules`.

    The game starts undealt (terminal, every action refused); call `deal` or
    `deal_from_order`.
    """

    def __init__(self, rules):
        lc_rules_from_py(&self.r, rules)
        self.rules = rules
        memset(&self.s, 0, sizeof(LCState))
        self.s.terminal = 1
        self.s.forbidden_pile = -1
        self.dealt = False

    # ---- dealing -------------------------------------------------------------------

    def deal(self, seed, game_index, iteration=0):
        """Deals game `game_index` of (seed, iteration) with the shared generator."""
        cdef uint32_t s32 = _u32(seed)
        cdef uint32_t g32 = _u32(game_index)
        cdef uint32_t i32 = _u32(iteration)
        with nogil:
            lc_deal_seed(&self.r, &self.s, s32, g32, i32)
        self.dealt = True

    def deal_from_order(self, deck):
        """Deals from an explicit deck order: a permutation of 0..N-1."""
        cdef int N = self.r.n_cards
        cdef int8_t order[LC_MAX_CARDS]
        cdef int i
        values = np.asarray(deck)
        if values.ndim != 1:
            raise ValueError(f"deck must be 1-D, got shape {values.shape}")
        if values.shape[0] != N:
            raise ValueError(f"deck has {values.shape[0]} cards; the rules need {N}")
        if values.dtype.kind not in "iu":
            raise ValueError(f"deck must hold integer card ids, got dtype {values.dtype}")
        if N and (values.min() < 0 or values.max() >= N):
            raise ValueError(f"deck holds card ids outside 0..{N - 1}")
        counts = np.bincount(values.astype(np.int64), minlength=N)
        if np.any(counts != 1):
            missing = np.flatnonzero(counts == 0).tolist()
            repeated = np.flatnonzero(counts > 1).tolist()
            raise ValueError(
                f"deck is not a permutation of 0..{N - 1}: repeated {repeated}, "
                f"missing {missing}"
            )
        for i in range(N):
            order[i] = <int8_t>values[i]
        lc_deal_order(&self.r, &self.s, order)
        self.dealt = True

    def arrange_next_draw(self, card):
        """Makes `card` the next deck card, swapping it with the one at `deck_pos`.

        For callers that treat each deck draw as its own chance event (the OpenSpiel
        game of lc_cfr.spiel): the deck order past `deck_pos` has not been observed by
        anyone, so any permutation of it is an equally likely deal.

        Raises:
          ValueError: naming the card, when it is not among the cards still in the deck.
        """
        cdef int N = self.r.n_cards
        cdef int i, pos
        cdef int8_t held, wanted
        try:
            value = operator.index(card)
        except TypeError:
            raise ValueError(f"card {card!r} is not an integer") from None
        if not self.dealt:
            raise ValueError(f"card {value}: no game dealt yet (call deal or deal_from_order)")
        pos = self.s.deck_pos
        if 0 <= value < N:
            wanted = <int8_t>value
        else:
            wanted = -1  # matches no deck entry: falls through to the error below
        for i in range(pos, N):
            if self.s.deck[i] == wanted:
                held = self.s.deck[pos]
                self.s.deck[pos] = self.s.deck[i]
                self.s.deck[i] = held
                return
        raise ValueError(
            f"card {value} is not among the {N - pos} cards left in the deck "
            f"(deck_pos {pos} of {N})"
        )

    # ---- transitions ---------------------------------------------------------------

    def apply(self, action):
        """Applies one action; an illegal one raises ValueError and changes nothing."""
        cdef int32_t a
        cdef int err
        try:
            value = operator.index(action)
        except TypeError:
            raise ValueError(f"illegal action {action!r}: not an integer") from None
        if not self.dealt:
            raise ValueError(
                f"illegal action {value}: no game dealt yet (call deal or deal_from_order)"
            )
        if value < 0 or value >= self.r.num_actions:
            a = -1
        else:
            a = <int32_t>value
        err = lc_apply(&self.r, &self.s, a)
        if err != LC_OK:
            raise ValueError(self._illegal_message(value, err))

    cdef str _illegal_message(self, object action, int err):
        cdef int H = self.r.hand_size
        cdef int N = self.r.n_cards
        cdef int p = self.s.current_player
        cdef int x, c, slot
        phase = _PHASE_NAMES[self.s.phase]
        if err == LC_ERR_GAME_OVER:
            if 0 <= action < self.r.num_actions:
                what = f" ({self._describe(action)})"
            else:
                what = ""
            return f"illegal action {action}{what} in the {phase} phase: game is over"
        if err == LC_ERR_OUT_OF_RANGE:
            return (
                f"illegal action {action} in the {phase} phase: action out of range "
                f"0..{self.r.num_actions - 1}"
            )
        what = self._describe(action)
        head = f"illegal action {action} ({what}) by player {p} in the {phase} phase: "
        if err == LC_ERR_DRAW_IN_CARD_PHASE:
            return head + "a draw action in the CARD phase (play or discard a card first)"
        if err == LC_ERR_CARD_IN_DRAW_PHASE:
            return head + "a card action in the DRAW phase (draw a card first)"
        if err == LC_ERR_EMPTY_SLOT:
            return head + f"hand slot {action % H} is empty"
        if err in (LC_ERR_WAGER_AFTER_NUMBER, LC_ERR_RANK_NOT_ABOVE):
            slot = action % H
            x = self.s.hands[p][slot]
            c = self.r.card_color[x]
            if err == LC_ERR_WAGER_AFTER_NUMBER:
                return head + (
                    f"wager after a numbered card (expedition {c} holds "
                    f"{self.s.expedition_numbered[p][c]} numbered cards)"
                )
            return head + (
                f"rank not above the expedition's top (rank index {self.r.card_rank[x]}, "
                f"expedition {c} top {self.s.expedition_top[p][c]})"
            )
        if err == LC_ERR_FORBIDDEN_PILE:
            c = action - 2 * H - 1
            return head + f"pile {c} is the one just discarded to"
        if err == LC_ERR_EMPTY_PILE:
            c = action - 2 * H - 1
            return head + f"pile {c} is empty"
        if err == LC_ERR_DECK_EMPTY:
            return head + "deck is empty"
        return head + lc_error_reason(err).decode()

    cdef str _describe(self, int action):
        cdef int H = self.r.hand_size
        cdef int N = self.r.n_cards
        cdef int p = self.s.current_player
        cdef int x
        if action < 2 * H:
            x = self.s.hands[p][action % H]
            verb = "play" if action < H else "discard"
            card = f"card {x}" if x < N else "empty"
            return f"{verb} hand slot {action % H}, {card}"
        if action == 2 * H:
            return "draw from the deck"
        return f"draw from pile {action - 2 * H - 1}"

    def legal_mask(self, out):
        """Writes the legal mask into a uint8 (or bool) buffer of length num_actions.

        Returns the number of legal actions.
        """
        cdef uint8_t[::1] view
        if isinstance(out, np.ndarray) and out.dtype == np.bool_:
            out = out.view(np.uint8)
        view = out
        if view.shape[0] != self.r.num_actions:
            raise ValueError(
                f"legal mask buffer has length {view.shape[0]}, need {self.r.num_actions}"
            )
        return lc_legal_mask(&self.r, &self.s, &view[0])

    def legal_mask_array(self):
        """The legal mask as a new np.bool_ array [num_actions]."""
        out = np.zeros(self.r.num_actions, dtype=np.uint8)
        cdef uint8_t[::1] view = out
        lc_legal_mask(&self.r, &self.s, &view[0])
        return out.view(np.bool_)

    def playable_pile_tops_array(self):
        """[n_colors] np.bool_: colour c's discard pile is not empty and its top card may be
        played onto the mover's expedition now (engine.playable_pile_tops; the pile draws
        that `draws='playable'` keeps)."""
        out = np.zeros(self.r.n_colors, dtype=np.uint8)
        cdef int c, top
        cdef int k = self.r.cards_per_color
        for c in range(self.r.n_colors):
            if self.s.pile_sizes[c] > 0:
                top = self.s.discards[c * k + self.s.pile_sizes[c] - 1]
                out[c] = _can_play(&self.r, &self.s, self.s.current_player, top)
        return out.view(np.bool_)

    def legal_actions(self):
        """The legal actions in ascending order (a Python list)."""
        return np.flatnonzero(self.legal_mask_array()).tolist()

    def encode(self, player, float[::1] out):
        """Writes observe(state, player) into a float32 buffer of length encoding_size."""
        cdef int p = _check_player(player)
        if out.shape[0] != self.r.encoding_size:
            raise ValueError(
                f"encoding buffer has length {out.shape[0]}, need {self.r.encoding_size}"
            )
        lc_encode(&self.r, &self.s, p, &out[0])

    def encode_array(self, player):
        """observe(state, player) as a new np.float32 array [encoding_size]."""
        cdef int p = _check_player(player)
        out = np.empty(self.r.encoding_size, dtype=np.float32)
        cdef float[::1] view = out
        lc_encode(&self.r, &self.s, p, &view[0])
        return out

    # ---- inspection ----------------------------------------------------------------

    @property
    def current_player(self):
        return int(self.s.current_player)

    @property
    def phase(self):
        return int(self.s.phase)

    @property
    def terminal(self):
        return bool(self.s.terminal)

    @property
    def truncated(self):
        return bool(self.s.truncated)

    @property
    def turn(self):
        return int(self.s.turn)

    @property
    def deck_pos(self):
        return int(self.s.deck_pos)

    @property
    def num_actions(self):
        return int(self.r.num_actions)

    @property
    def encoding_size(self):
        return int(self.r.encoding_size)

    def scores(self):
        """(score of player 0, score of player 1), in points."""
        return (int(self.s.scores[0]), int(self.s.scores[1]))

    def returns(self):
        """np.float32 [2]: [s0 - s1, s1 - s0] in points."""
        cdef int32_t diff = self.s.scores[0] - self.s.scores[1]
        return np.array([diff, -diff], dtype=np.float32)

    def state_dict(self):
        """The state as numpy arrays, names, shapes and dtypes as in docs/game.md."""
        cdef int N = self.r.n_cards
        cdef int C = self.r.n_colors
        cdef int H = self.r.hand_size
        cdef int cpc = self.r.cards_per_color
        cdef int p, c, i
        deck = np.empty(N, dtype=np.int8)
        hands = np.empty((2, H), dtype=np.int8)
        discards = np.empty((C, cpc), dtype=np.int8)
        pile_sizes = np.empty(C, dtype=np.int32)
        expedition_cards = np.empty((2, N), dtype=np.bool_)
        known_cards = np.empty((2, N), dtype=np.bool_)
        wagers = np.empty((2, C), dtype=np.int32)
        numbered = np.empty((2, C), dtype=np.int32)
        sums = np.empty((2, C), dtype=np.int32)
        tops = np.empty((2, C), dtype=np.int32)
        for i in range(N):
            deck[i] = self.s.deck[i]
        for c in range(C):
            pile_sizes[c] = self.s.pile_sizes[c]
            for i in range(cpc):
                discards[c, i] = self.s.discards[c * cpc + i]
        for p in range(2):
            for i in range(H):
                hands[p, i] = self.s.hands[p][i]
            for i in range(N):
                expedition_cards[p, i] = self.s.expedition_cards[p][i] != 0
                known_cards[p, i] = self.s.known_cards[p][i] != 0
            for c in range(C):
                wagers[p, c] = self.s.expedition_wagers[p][c]
                numbered[p, c] = self.s.expedition_numbered[p][c]
                sums[p, c] = self.s.expedition_sum[p][c]
                tops[p, c] = self.s.expedition_top[p][c]
        return {
            "deck": deck,
            "deck_pos": np.array(self.s.deck_pos, dtype=np.int32),
            "hands": hands,
            "discards": discards,
            "pile_sizes": pile_sizes,
            "expedition_cards": expedition_cards,
            "expedition_wagers": wagers,
            "expedition_numbered": numbered,
            "expedition_sum": sums,
            "expedition_top": tops,
            "known_cards": known_cards,
            "scores": np.array([self.s.scores[0], self.s.scores[1]], dtype=np.int32),
            "current_player": np.array(self.s.current_player, dtype=np.int32),
            "phase": np.array(self.s.phase, dtype=np.int32),
            "forbidden_pile": np.array(self.s.forbidden_pile, dtype=np.int32),
            "turn": np.array(self.s.turn, dtype=np.int32),
            "terminal": np.array(bool(self.s.terminal), dtype=np.bool_),
            "truncated": np.array(bool(self.s.truncated), dtype=np.bool_),
        }

    # ---- copies --------------------------------------------------------------------

    def clone(self):
        """An independent copy of this game."""
        cdef CyGame other = CyGame.__new__(CyGame)
        memcpy(&other.r, &self.r, sizeof(LCRules))
        memcpy(&other.s, &self.s, sizeof(LCState))
        other.rules = self.rules
        other.dealt = self.dealt
        return other

    def copy_from(self, CyGame other not None):
        """Overwrites this game's state with another's (same rules): a fast undo."""
        if memcmp(&self.r, &other.r, sizeof(LCRules)) != 0:
            raise ValueError(
                f"copy_from needs games of the same rules: {self.rules} != {other.rules}"
            )
        memcpy(&self.s, &other.s, sizeof(LCState))
        self.dealt = other.dealt

    def __reduce__(self):
        state = (<char*>&self.s)[:sizeof(LCState)]
        return (_restore_game, (self.rules, state, bool(self.dealt)))

    def __repr__(self):
        if not self.dealt:
            return "CyGame(undealt)"
        return (
            f"CyGame(turn={self.s.turn}, player={self.s.current_player}, "
            f"phase={_PHASE_NAMES[self.s.phase]}, deck_pos={self.s.deck_pos}, "
            f"scores={self.scores()}, terminal={bool(self.s.terminal)})"
        )


def _restore_game(rules, bytes state, dealt):
    """Unpickles a CyGame (the raw LCState bytes of the same build)."""
    cdef CyGame game = CyGame(rules)
    if len(state) != sizeof(LCState):
        raise ValueError(
            f"pickled CyGame state has {len(state)} bytes; this build's LCState has "
            f"{sizeof(LCState)}"
        )
    memcpy(&game.s, <const char*>state, sizeof(LCState))
    game.dealt = dealt
    return game


cdef int _check_player(object player) except -1:
    value = operator.index(player)
    if value != 0 and value != 1:
        raise ValueError(f"player must be 0 or 1, got {value}")
    return value


# --------------------------------------------------------------------------------------
# Generator and batch play
# --------------------------------------------------------------------------------------

def random_bits(seed, iteration, index, counter, purpose):
    """lc_random_bits of five integers (each taken modulo 2^32), as a Python int."""
    return int(lc_random_bits(_u32(seed), _u32(iteration), _u32(index), _u32(counter),
                              _u32(purpose)))


def uniform(bits):
    """lc_uniform: (bits >> 8) * 2^-24, a float32 value in [0, 1) (as a Python float)."""
    return float(lc_uniform(_u32(bits)))


def below(bits, n):
    """lc_below: ((bits >> 8) * n) >> 24, an integer in [0, n) for 1 <= n <= 256."""
    value = operator.index(n)
    if not 1 <= value <= 256:
        raise ValueError(f"below needs 1 <= n <= 256, got {value}")
    return int(lc_below(_u32(bits), <uint32_t>value))


def random_bits_array(const uint32_t[::1] seeds, const uint32_t[::1] iterations,
                      const uint32_t[::1] indices, const uint32_t[::1] counters,
                      const uint32_t[::1] purposes):
    """Elementwise lc_random_bits of five equal-length 1-D uint32 arrays."""
    cdef Py_ssize_t n = seeds.shape[0]
    cdef Py_ssize_t i
    if not (iterations.shape[0] == n and indices.shape[0] == n and counters.shape[0] == n
            and purposes.shape[0] == n):
        raise ValueError(
            "random_bits_array needs equal-length inputs, got "
            f"{[seeds.shape[0], iterations.shape[0], indices.shape[0], counters.shape[0], purposes.shape[0]]}"
        )
    out = np.empty(n, dtype=np.uint32)
    cdef uint32_t[::1] view = out
    with nogil:
        for i in range(n):
            view[i] = lc_random_bits(seeds[i], iterations[i], indices[i], counters[i],
                                     purposes[i])
    return out


def play_random_games(rules, seed, iteration, first_game, n_games, with_encoding_sum=False,
                      with_encoding=True):
    """Plays games of uniformly random legal moves entirely in C (the benchmark).

    Game g in [first_game, first_game + n_games) is dealt by deal(seed, g, iteration); at
    its decision d (counted from 0 within the game) the legal mask and the encoding of the
    player to move are computed, and the below(random_bits(seed, iteration, g, d,
    RANDOM_PLAY), k)-th of the k legal actions (ascending) is applied, until terminal.

    Returns:
      {"decisions": total decisions, "games": n_games, "truncated": truncated games,
       "score_diff_sum": sum of s0 - s1, "checksum": sum over games and decisions of
       (d + 1) * action, modulo 2^32}; with `with_encoding_sum`, also "encoding_sum": the
      float64 sum of every encoding computed (exact: all values are small dyadic numbers).
      `with_encoding=False` skips the encoding (the benchmark's breakdown of its cost).
    """
    cdef LCRules r
    cdef LCState s
    cdef uint8_t mask[LC_MAX_ACTIONS]
    lc_rules_from_py(&r, rules)
    cdef uint32_t s32 = _u32(seed)
    cdef uint32_t i32 = _u32(iteration)
    cdef uint32_t g0 = _u32(first_game)
    cdef int64_t n = operator.index(n_games)
    if n < 0:
        raise ValueError(f"n_games must be >= 0, got {n}")
    cdef bint want_sum = bool(with_encoding_sum)
    cdef bint want_encoding = bool(with_encoding) or want_sum
    encoding = np.zeros(r.encoding_size, dtype=np.float32)
    cdef float[::1] enc_view = encoding
    cdef float* enc = &enc_view[0]
    cdef int64_t decisions = 0
    cdef int64_t truncated = 0
    cdef int64_t score_diff_sum = 0
    cdef uint32_t checksum = 0
    cdef double encoding_sum = 0.0
    cdef int64_t gi
    cdef uint32_t g, d
    cdef int k, action, j
    with nogil:
        for gi in range(n):
            g = g0 + <uint32_t>gi
            lc_deal_seed(&r, &s, s32, g, i32)
            d = 0
            while not s.terminal:
                k = lc_legal_mask(&r, &s, mask)
                if want_encoding:
                    lc_encode(&r, &s, s.current_player, enc)
                if want_sum:
                    for j in range(r.encoding_size):
                        encoding_sum += enc[j]
                action = lc_nth_legal(
                    mask, r.num_actions,
                    lc_below(lc_random_bits(s32, i32, g, d, LC_PURPOSE_RANDOM_PLAY),
                             <uint32_t>k))
                lc_apply_unchecked(&r, &s, action)
                d += 1
                checksum += d * <uint32_t>action
            decisions += d
            truncated += s.truncated
            score_diff_sum += s.scores[0] - s.scores[1]
    result = {
        "decisions": int(decisions),
        "games": int(n),
        "truncated": int(truncated),
        "score_diff_sum": int(score_diff_sum),
        "checksum": int(checksum),
    }
    if want_sum:
        result["encoding_sum"] = float(encoding_sum)
    return result
