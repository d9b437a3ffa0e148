# cython: language_level=3
"""The bots over the Cython engine: the twin of `lc_cfr.bots.jax_bots` (docs/bots.md).

Same integer rules, same tie-breaks (the lowest slot, the lowest colour), same draws from
the shared generator, so `bot_action` here and `jax_bots.bot_action` choose the same
action on every state; tests/test_bots.py holds them to it. The core is `nogil` C
(`lc_bot_action`, declared in cy_bots.pxd) for Cython traversals; `bot_action` is the
Python entry point over a `CyGame`.
"""

import operator

from libc.stdint cimport int8_t, int32_t, uint8_t, uint32_t

from lc_cfr.game.cy_engine cimport (
    LC_CARD_PHASE,
    LC_MAX_ACTIONS,
    LC_MAX_CARDS,
    LC_MAX_COLORS,
    LC_MAX_HAND,
    LC_PURPOSE_BOT_NOISE,
    CyGame,
    LCRules,
    LCState,
    lc_apply_unchecked,
    lc_below,
    lc_legal_mask,
    lc_nth_legal,
    lc_random_bits,
)

from lc_cfr.bots import BOT_NAMES, BOT_PARAMS, KIND_PASSIVE, KIND_RANDOM, NO_KEY, check_bot_name

cdef int32_t _NO_KEY = NO_KEY
cdef int32_t _KIND_RANDOM = KIND_RANDOM
cdef int32_t _KIND_PASSIVE = KIND_PASSIVE
cdef uint32_t _MASK32 = 0xFFFFFFFF

cdef LCBotParams _PARAMS[16]
cdef dict _INDEX = {}


cdef int _fill(LCBotParams* out, object params) except -1:
    out.kind = params.kind
    out.open_margin = params.open_margin
    out.wager_margin = params.wager_margin
    out.noise_threshold = params.noise_threshold
    out.future_discount = params.future_discount
    out.gap_early = params.gap_early
    out.gap_late = params.gap_late
    out.gap_deck = params.gap_deck
    out.keep_started = params.keep_started
    out.wager_points = params.wager_points
    out.late_margin = params.late_margin
    if params.late_margin < 0:
        raise ValueError(f"late_margin must be >= 0, got {params.late_margin}")
    return 0


for _i, _name in enumerate(BOT_NAMES):
    _fill(&_PARAMS[_i], BOT_PARAMS[_name])
    _INDEX[_name] = _i


cdef int lc_bot_params(LCBotParams* out, object name, str field="bot") except -1:
    check_bot_name(name, field)
    out[0] = _PARAMS[<int>_INDEX[name]]
    return 0


cdef inline uint32_t _u32(object value) except? 0:
    return <uint32_t>(operator.index(value) & _MASK32)


cdef inline bint _projection_ok(const LCBotParams* prm, int32_t base, int32_t future,
                                int32_t margin, int32_t unseen_total,
                                int32_t deck_left) noexcept nogil:
    return prm.future_discount * unseen_total * (base - margin) + future * deck_left >= 0


# What the mover knows, reduced to per-slot and per-colour quantities (the JAX _View).
ctypedef struct _View:
    int32_t hand[LC_MAX_HAND]
    bint valid[LC_MAX_HAND]
    bint is_wager[LC_MAX_HAND]
    int32_t color[LC_MAX_HAND]
    int32_t rank[LC_MAX_HAND]
    int32_t value[LC_MAX_HAND]
    bint live[LC_MAX_HAND]
    bint lowest_num[LC_MAX_HAND]
    int32_t gap[LC_MAX_HAND]
    bint known[LC_MAX_HAND]
    bint unseen[LC_MAX_CARDS]
    int32_t unseen_total
    int32_t deck_left
    int32_t my_turns
    bint started[LC_MAX_COLORS]
    int32_t my_n[LC_MAX_COLORS]
    int32_t my_top[LC_MAX_COLORS]
    int32_t my_sum[LC_MAX_COLORS]
    int32_t opp_n[LC_MAX_COLORS]
    int32_t opp_top[LC_MAX_COLORS]
    bint opp_started[LC_MAX_COLORS]
    int32_t live_sum[LC_MAX_COLORS]
    int32_t live_count[LC_MAX_COLORS]
    int32_t low_rank[LC_MAX_COLORS]
    int32_t low_live_id[LC_MAX_COLORS]
    bint open_ok[LC_MAX_COLORS]
    bint wager_ok[LC_MAX_COLORS]
    int32_t open_margin
    int32_t live_started
    int32_t allowed_gap


cdef void _view(const LCRules* r, const LCState* s, const LCBotParams* prm,
                _View* v) noexcept nogil:
    cdef int N = r.n_cards
    cdef int C = r.n_colors
    cdef int K = r.cards_per_color
    cdef int H = r.hand_size
    cdef int W = r.n_wagers
    cdef int p = s.current_player
    cdef int o = 1 - p
    cdef int i, c, k, x, rk, size
    cdef int32_t base, future, ref, dealt_deck, late, wager_margin
    cdef bint time_ok
    cdef bint seen[LC_MAX_CARDS]

    for x in range(N):
        seen[x] = s.expedition_cards[0][x] or s.expedition_cards[1][x] or s.known_cards[o][x]
    for c in range(C):
        size = s.pile_sizes[c]
        for k in range(size):
            seen[s.discards[c * K + k]] = True
    for i in range(H):
        x = s.hands[p][i]
        if x < N:
            seen[x] = True
    v.unseen_total = 0
    for x in range(N):
        v.unseen[x] = not seen[x]
        v.unseen_total += v.unseen[x]
    v.deck_left = N - s.deck_pos
    v.my_turns = (v.deck_left + 1) // 2

    for c in range(C):
        v.my_n[c] = s.expedition_numbered[p][c]
        v.my_top[c] = s.expedition_top[p][c]
        v.my_sum[c] = s.expedition_sum[p][c]
        v.started[c] = s.expedition_wagers[p][c] + s.expedition_numbered[p][c] > 0
        v.opp_n[c] = s.expedition_numbered[o][c]
        v.opp_top[c] = s.expedition_top[o][c]
        v.opp_started[c] = s.expedition_wagers[o][c] + s.expedition_numbered[o][c] > 0
        v.live_sum[c] = 0
        v.live_count[c] = 0
        v.low_rank[c] = r.n_ranks
        v.low_live_id[c] = N

    v.live_started = 0
    for i in range(H):
        x = s.hands[p][i]
        v.hand[i] = x
        v.valid[i] = x < N
        v.gap[i] = 0
        v.live[i] = False
        v.lowest_num[i] = False
        v.known[i] = False
        if not v.valid[i]:
            v.is_wager[i] = False
            v.color[i] = 0
            v.rank[i] = -1
            v.value[i] = 0
            continue
        c = r.card_color[x]
        v.color[i] = c
        v.rank[i] = r.card_rank[x]
        v.value[i] = r.card_value[x]
        v.is_wager[i] = v.rank[i] < 0
        v.known[i] = s.known_cards[p][x] != 0
        if v.is_wager[i]:
            v.live[i] = v.my_n[c] == 0
        else:
            v.live[i] = v.rank[i] > v.my_top[c]
        if v.live[i]:
            v.live_count[c] += 1
            if x < v.low_live_id[c]:
                v.low_live_id[c] = x
            if not v.is_wager[i]:
                v.live_sum[c] += v.value[i]
                if v.rank[i] < v.low_rank[c]:
                    v.low_rank[c] = v.rank[i]
            if v.started[c]:
                v.live_started += 1
        # unseen ranks strictly between the expedition top and this card
        for k in range(W, K):
            rk = k - W
            if rk > v.my_top[c] and rk < v.rank[i] and v.unseen[c * K + k]:
                v.gap[i] += 1
    for i in range(H):
        if v.valid[i] and v.live[i] and not v.is_wager[i]:
            v.lowest_num[i] = v.rank[i] == v.low_rank[v.color[i]]

    dealt_deck = N - 2 * H
    late = (prm.late_margin * (dealt_deck - v.deck_left)) // dealt_deck
    v.open_margin = prm.open_margin + late
    wager_margin = prm.wager_margin + late
    for c in range(C):
        ref = v.my_top[c] if v.started[c] else v.low_rank[c]
        future = 0
        for k in range(W, K):
            rk = k - W
            if rk > ref and v.unseen[c * K + k]:
                future += r.min_rank + rk
        base = v.my_sum[c] + v.live_sum[c] + r.expedition_penalty
        time_ok = v.live_started + (0 if v.started[c] else v.live_count[c]) <= v.my_turns
        v.open_ok[c] = (not v.started[c]) and time_ok and _projection_ok(
            prm, base, future, v.open_margin, v.unseen_total, v.deck_left
        )
        v.wager_ok[c] = v.my_n[c] == 0 and time_ok and _projection_ok(
            prm, base, future, wager_margin, v.unseen_total, v.deck_left
        )
    if v.live_started >= v.my_turns:
        v.allowed_gap = K
    elif v.deck_left > prm.gap_deck:
        v.allowed_gap = prm.gap_early
    else:
        v.allowed_gap = prm.gap_late


cdef int32_t _discard_cost(const LCBotParams* prm, const _View* v, int i) noexcept nogil:
    cdef int c = v.color[i]
    cdef int32_t points, keep = 0, help_ = 0
    cdef bint opp_playable
    if not v.valid[i]:
        return _NO_KEY
    points = prm.wager_points if v.is_wager[i] else v.value[i]
    if v.live[i]:
        keep = prm.keep_started + 2 * points if v.started[c] else v.live_sum[c]
    if v.is_wager[i]:
        opp_playable = v.opp_n[c] == 0
    else:
        opp_playable = v.rank[i] > v.opp_top[c]
    if opp_playable:
        help_ = 2 * points if v.opp_started[c] else points // 2
    return keep + help_


cdef int32_t _cheapest_discard(const LCRules* r, const LCBotParams* prm,
                               const _View* v) noexcept nogil:
    cdef int i, best = 0
    cdef int32_t cost, best_cost = _NO_KEY + 1
    for i in range(r.hand_size):
        cost = _discard_cost(prm, v, i)
        if cost < best_cost:
            best_cost = cost
            best = i
    return best


cdef int32_t _safe_card(const LCRules* r, const LCBotParams* prm, const _View* v) noexcept nogil:
    cdef int H = r.hand_size
    cdef int i, c, d
    cdef int32_t key, best_key = _NO_KEY, fb_key = _NO_KEY
    cdef int play_slot = 0, fb_slot = 0
    for i in range(H):
        c = v.color[i]
        key = _NO_KEY
        if v.live[i] and v.known[i]:
            key = 0
        elif v.live[i] and v.is_wager[i] and v.wager_ok[c]:
            key = 1
        elif v.started[c] and v.lowest_num[i] and v.gap[i] <= v.allowed_gap:
            key = 2 + 2 * v.gap[i]
        elif (not v.started[c]) and v.lowest_num[i] and v.open_ok[c]:
            key = 3 + 2 * v.gap[i]
        if key < best_key:
            best_key = key
            play_slot = i
    if best_key < _NO_KEY:
        return play_slot
    d = _cheapest_discard(r, prm, v)
    if v.live[d] and v.started[v.color[d]]:
        # never throw away a card of a started expedition while one can be played instead
        for i in range(H):
            if v.started[v.color[i]] and v.lowest_num[i] and v.gap[i] < fb_key:
                fb_key = v.gap[i]
                fb_slot = i
        if fb_key < _NO_KEY:
            return fb_slot
    return H + d


cdef int32_t _safe_draw(const LCRules* r, const LCState* s, const LCBotParams* prm,
                        const _View* v) noexcept nogil:
    cdef int N = r.n_cards
    cdef int K = r.cards_per_color
    cdef int W = r.n_wagers
    cdef int c, k, rk, size, top, best = 0
    cdef int32_t x_rank, x_value, x_gap, x_future, x_base, key, best_key = _NO_KEY
    cdef bint x_wager, playable, useful, x_open_ok
    for c in range(r.n_colors):
        size = s.pile_sizes[c]
        if size <= 0 or c == s.forbidden_pile:
            continue
        top = s.discards[c * K + size - 1]
        x_rank = r.card_rank[top]
        x_value = r.card_value[top]
        x_wager = x_rank < 0
        if x_wager:
            playable = v.my_n[c] == 0
        else:
            playable = x_rank > v.my_top[c]
        if not (playable and top < v.low_live_id[c]):
            continue
        if x_wager:
            useful = v.wager_ok[c]
        elif v.started[c]:
            x_gap = 0
            for k in range(W, K):
                rk = k - W
                if rk > v.my_top[c] and rk < x_rank and v.unseen[c * K + k]:
                    x_gap += 1
            useful = x_gap <= v.allowed_gap
        else:
            x_future = 0
            for k in range(W, K):
                rk = k - W
                if rk > x_rank and v.unseen[c * K + k]:
                    x_future += r.min_rank + rk
            x_base = v.my_sum[c] + v.live_sum[c] + x_value + r.expedition_penalty
            useful = (v.live_started + v.live_count[c] + 1 <= v.my_turns) and _projection_ok(
                prm, x_base, x_future, v.open_margin, v.unseen_total, v.deck_left
            )
        if not useful:
            continue
        key = -(prm.wager_points if x_wager else x_value)
        if key < best_key:
            best_key = key
            best = c
    if best_key < _NO_KEY:
        return r.first_pile_action + best
    return r.draw_deck_action


cdef int32_t lc_heuristic_action(const LCRules* r, const LCState* s,
                                 const LCBotParams* prm) noexcept nogil:
    cdef _View v
    _view(r, s, prm, &v)
    if prm.kind == _KIND_PASSIVE:
        if s.phase == LC_CARD_PHASE:
            return r.hand_size + _cheapest_discard(r, prm, &v)
        return r.draw_deck_action
    if s.phase == LC_CARD_PHASE:
        return _safe_card(r, prm, &v)
    return _safe_draw(r, s, prm, &v)


cdef int32_t lc_bot_action(const LCRules* r, const LCState* s, const LCBotParams* prm,
                           uint32_t seed, uint32_t iteration, uint32_t game_index,
                           uint32_t decision) noexcept nogil:
    cdef uint8_t mask[LC_MAX_ACTIONS]
    cdef int count = lc_legal_mask(r, s, mask)
    cdef int32_t action
    cdef uint32_t bits
    if count <= 0:
        return -1
    if prm.kind == _KIND_RANDOM:
        bits = lc_random_bits(seed, iteration, game_index, decision * 2 + 1,
                              LC_PURPOSE_BOT_NOISE)
        return lc_nth_legal(mask, r.num_actions, lc_below(bits, count))
    action = lc_heuristic_action(r, s, prm)
    if prm.noise_threshold > 0:
        bits = lc_random_bits(seed, iteration, game_index, decision * 2, LC_PURPOSE_BOT_NOISE)
        if (bits >> 8) < prm.noise_threshold:
            bits = lc_random_bits(seed, iteration, game_index, decision * 2 + 1,
                                  LC_PURPOSE_BOT_NOISE)
            action = lc_nth_legal(mask, r.num_actions, lc_below(bits, count))
    # Guard (never taken in tests): an illegal choice falls back to the first legal action.
    if action < 0 or action >= r.num_actions or not mask[action]:
        action = lc_nth_legal(mask, r.num_actions, 0)
    return action


def bot_action(rules, name, CyGame game not None, seed, iteration, game_index, decision):
    """The action (int) of bot `name` for the player to move in `game`.

    The twin of `lc_cfr.bots.jax_bots.bot_action`: the same arguments and the same choice.
    `rules` must be the game's rules; the game must be dealt and not over.
    """
    cdef LCBotParams prm
    cdef uint32_t s32 = _u32(seed)
    cdef uint32_t i32 = _u32(iteration)
    cdef uint32_t g32 = _u32(game_index)
    cdef uint32_t d32 = _u32(decision)
    lc_bot_params(&prm, name, "name")
    if rules is not game.rules and rules != game.rules:
        raise ValueError(f"rules {rules} differ from the game's rules {game.rules}")
    if not game.dealt or game.s.terminal:
        raise ValueError(f"bot {name!r} asked to act in a finished or undealt game: {game!r}")
    return int(lc_bot_action(&game.r, &game.s, &prm, s32, i32, g32, d32))


def heuristic_action(name, CyGame game not None):
    """The deterministic part of a passive or safe bot (no noise, no legality guard)."""
    cdef LCBotParams prm
    lc_bot_params(&prm, name, "name")
    if not game.dealt or game.s.terminal:
        raise ValueError(f"bot {name!r} asked to act in a finished or undealt game: {game!r}")
    return int(lc_heuristic_action(&game.r, &game.s, &prm))


def play_match(rules, name0, name1, seed, game_index, iteration=0, bot_iteration=None):
    """Plays one seeded deal between two bots on the Cython engine; returns the CyGame.

    Player 0 is `name0`, player 1 `name1`; the deal is CyGame.deal(seed, game_index,
    iteration); the bots' randomness uses (seed, bot_iteration (default: iteration),
    game_index, decision index of the game).
    """
    cdef LCBotParams prm[2]
    cdef CyGame game = CyGame(rules)
    cdef uint32_t s32 = _u32(seed)
    cdef uint32_t g32 = _u32(game_index)
    cdef uint32_t b32 = _u32(iteration if bot_iteration is None else bot_iteration)
    cdef uint32_t d = 0
    cdef int32_t action
    lc_bot_params(&prm[0], name0, "name0")
    lc_bot_params(&prm[1], name1, "name1")
    game.deal(seed, game_index, iteration)
    with nogil:
        while not game.s.terminal:
            action = lc_bot_action(&game.r, &game.s, &prm[game.s.current_player], s32, b32,
                                   g32, d)
            lc_apply_unchecked(&game.r, &game.s, action)
            d += 1
    return game

