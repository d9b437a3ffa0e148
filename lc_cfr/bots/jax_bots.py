"""The bots in JAX: pure, jittable and vmappable (docs/bots.md).

`bot_action(rules, name, state, seed, iteration, game_index, decision)` returns the
action of bot `name` for the player to move in ONE game state; vmap it over games:

    jax.vmap(bot_action, in_axes=(None, None, 0, None, None, 0, 0))

Everything is integer arithmetic with selects (no Python branching on traced values), so
the Cython twin (`lc_cfr.bots.cy_bots`) reproduces every choice exactly. The bots only
read what the mover may know: its own hand, both expeditions, the discard piles, the
opponent's cards known from pile draws, and the deck size.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.bots import BOT_PARAMS, KIND_PASSIVE, KIND_RANDOM, NO_KEY, BotParams, check_bot_name
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import CARD_PHASE, Rules

i32 = jnp.int32


class _Tables:
    """Per-card constants padded with the sentinel N, and per-colour-slot ones [K]."""

    def __init__(self, rules: Rules):
        n, k = rules.n_cards, rules.cards_per_color
        cards = np.arange(n + 1)
        within = cards % k
        valid = cards < n
        self.color = np.where(valid, cards // k, 0).astype(np.int32)  # [N+1]
        self.is_wager = (within < rules.n_wagers) & valid  # [N+1]
        self.rank = np.where(valid & ~self.is_wager, within - rules.n_wagers, -1)
        self.rank = self.rank.astype(np.int32)  # [N+1], -1 for wagers and the sentinel
        self.value = np.where(self.rank >= 0, rules.min_rank + self.rank, 0).astype(np.int32)
        self.rank_k = (np.arange(k) - rules.n_wagers).astype(np.int32)  # [K], < 0: wager
        self.value_k = np.where(self.rank_k >= 0, rules.min_rank + self.rank_k, 0)
        self.value_k = self.value_k.astype(np.int32)  # [K]


@functools.cache
def _tables(rules: Rules) -> _Tables:
    return _Tables(rules)


class _View(NamedTuple):
    """What the mover knows, reduced to per-slot [H] and per-colour [C] quantities."""

    hand: jax.Array  # [H] card ids, N = empty
    valid: jax.Array  # [H] slot holds a card
    is_wager: jax.Array  # [H]
    rank: jax.Array  # [H]
    value: jax.Array  # [H]
    onehot: jax.Array  # [H, C] slot's colour
    live: jax.Array  # [H] playable on the mover's expedition now
    lowest_num: jax.Array  # [H] the lowest live numbered card of its colour
    gap: jax.Array  # [H] unseen ranks between the expedition top and the card
    known: jax.Array  # [H] the mover drew this card from a pile
    deck_left: jax.Array  # []
    my_turns: jax.Array  # [] turns left to the mover if every draw is from the deck
    unseen_total: jax.Array  # []
    unseen_ck: jax.Array  # [C, K] card is unseen by the mover
    started: jax.Array  # [C]
    my_n: jax.Array  # [C]
    my_top: jax.Array  # [C]
    my_sum: jax.Array  # [C]
    opp_n: jax.Array  # [C]
    opp_top: jax.Array  # [C]
    opp_started: jax.Array  # [C]
    live_sum: jax.Array  # [C] face values of live numbered hand cards
    live_count: jax.Array  # [C] live hand cards, wagers included
    low_live_id: jax.Array  # [C] lowest live hand card id, N if none
    allowed_gap: jax.Array  # []
    open_ok: jax.Array  # [C]
    open_margin: jax.Array  # []
    live_started: jax.Array  # [] live hand cards of started colours
    wager_ok: jax.Array  # [C]


def _mine_theirs(x, player):
    first = player == 0
    return jnp.where(first, x[0], x[1]), jnp.where(first, x[1], x[0])


def _projection_ok(params: BotParams, base, future, margin, unseen_total, deck_left):
    """base + future * deck_left / (future_discount * unseen_total) >= margin, in ints."""
    return params.future_discount * unseen_total * (base - margin) + future * deck_left >= 0


def _margins(rules: Rules, params: BotParams, deck_left):
    """(open margin, wager margin): each grows by late_margin * drawn / deck after the deal."""
    dealt_deck = rules.n_cards - 2 * rules.hand_size
    late = (params.late_margin * (dealt_deck - deck_left)) // dealt_deck
    return params.open_margin + late, params.wager_margin + late


def _view(rules: Rules, params: BotParams, state: engine.State) -> _View:
    t = _tables(rules)
    n, c, k = rules.n_cards, rules.n_colors, rules.cards_per_color
    p = state.current_player
    hand, _ = _mine_theirs(state.hands, p)
    hand = hand.astype(i32)
    my_w, opp_w = _mine_theirs(state.expedition_wagers, p)
    my_n, opp_n = _mine_theirs(state.expedition_numbered, p)
    my_sum, _ = _mine_theirs(state.expedition_sum, p)
    my_top, opp_top = _mine_theirs(state.expedition_top, p)
    my_exp, opp_exp = _mine_theirs(state.expedition_cards, p)
    my_known, opp_known = _mine_theirs(state.known_cards, p)

    # card sets as bit words (the engine's encoding does the same): the [slots, N]
    # comparisons they replace were the costliest part of a safe-family decision
    hand_set = engine.card_set(hand, n)
    pile_set = engine.card_set(state.discards, n)
    unseen = ~(hand_set | my_exp | opp_exp | pile_set | opp_known)
    unseen_total = jnp.sum(unseen, dtype=i32)
    unseen_ck = unseen.reshape(c, k)
    deck_left = (n - state.deck_pos).astype(i32)
    my_turns = (deck_left + 1) // 2
    started = (my_w + my_n) > 0

    valid = hand < n
    is_wager = jnp.take(t.is_wager, hand)
    rank = jnp.take(t.rank, hand)
    value = jnp.take(t.value, hand)
    color = jnp.take(t.color, hand)
    onehot = (color[:, None] == jnp.arange(c)[None, :]) & valid[:, None]  # [H, C]

    def per_slot(v):
        return jnp.sum(jnp.where(onehot, v[None, :].astype(i32), 0), axis=1)

    slot_my_n = per_slot(my_n)
    slot_my_top = per_slot(my_top)
    live = valid & jnp.where(is_wager, slot_my_n == 0, rank > slot_my_top)
    live_num = live & ~is_wager
    live_sum = jnp.sum(jnp.where(onehot & live_num[:, None], value[:, None], 0), axis=0)
    live_count = jnp.sum(onehot & live[:, None], axis=0, dtype=i32)
    low_rank = jnp.min(jnp.where(onehot & live_num[:, None], rank[:, None], rules.n_ranks), axis=0)
    low_live_id = jnp.min(jnp.where(onehot & live[:, None], hand[:, None], n), axis=0)
    lowest_num = live_num & (rank == per_slot(low_rank))

    rank_k = jnp.asarray(t.rank_k)
    value_k = jnp.asarray(t.value_k)
    slot_unseen = jnp.take(unseen_ck, color, axis=0) & valid[:, None]  # [H, K]
    between = (rank_k[None, :] > slot_my_top[:, None]) & (rank_k[None, :] < rank[:, None])
    gap = jnp.sum(slot_unseen & between, axis=1, dtype=i32)

    ref = jnp.where(started, my_top, low_rank)
    future = jnp.sum(jnp.where(unseen_ck & (rank_k[None, :] > ref[:, None]), value_k, 0), axis=1)
    base = my_sum + live_sum + rules.expedition_penalty
    slot_started = per_slot(started) > 0
    live_started = jnp.sum(live & slot_started, dtype=i32)
    time_ok = live_started + jnp.where(started, 0, live_count) <= my_turns
    open_margin, wager_margin = _margins(rules, params, deck_left)
    open_ok = ~started & time_ok
    open_ok &= _projection_ok(params, base, future, open_margin, unseen_total, deck_left)
    wager_ok = (my_n == 0) & time_ok
    wager_ok &= _projection_ok(params, base, future, wager_margin, unseen_total, deck_left)

    allowed_gap = jnp.where(
        live_started >= my_turns,
        k,
        jnp.where(deck_left > params.gap_deck, params.gap_early, params.gap_late),
    ).astype(i32)
    known = jnp.take(jnp.append(my_known, False), hand)
    return _View(
        hand=hand,
        valid=valid,
        is_wager=is_wager,
        rank=rank,
        value=value,
        onehot=onehot,
        live=live,
        lowest_num=lowest_num,
        gap=gap,
        known=known,
        deck_left=deck_left,
        my_turns=my_turns,
        unseen_total=unseen_total,
        unseen_ck=unseen_ck,
        started=started,
        my_n=my_n,
        my_top=my_top,
        my_sum=my_sum,
        opp_n=opp_n,
        opp_top=opp_top,
        opp_started=(opp_w + opp_n) > 0,
        live_sum=live_sum,
        live_count=live_count,
        low_live_id=low_live_id,
        allowed_gap=allowed_gap,
        open_ok=open_ok,
        open_margin=open_margin,
        live_started=live_started,
        wager_ok=wager_ok,
    )


def _per_slot(v: _View, x):
    return jnp.sum(jnp.where(v.onehot, x[None, :].astype(i32), 0), axis=1)


def _discard_cost(rules: Rules, params: BotParams, v: _View):
    """[H] int32: what discarding each slot costs the mover (keep) plus gives away (help)."""
    points = jnp.where(v.is_wager, params.wager_points, v.value)
    slot_started = _per_slot(v, v.started) > 0
    keep = jnp.where(
        v.live,
        jnp.where(
            slot_started,
            params.keep_started + 2 * points,
            _per_slot(v, v.live_sum),
        ),
        0,
    )
    opp_playable = jnp.where(
        v.is_wager, _per_slot(v, v.opp_n) == 0, v.rank > _per_slot(v, v.opp_top)
    )
    help_ = jnp.where(
        opp_playable,
        jnp.where(_per_slot(v, v.opp_started) > 0, 2 * points, points // 2),
        0,
    )
    return jnp.where(v.valid, keep + help_, NO_KEY)


def _passive_card(rules: Rules, params: BotParams, v: _View):
    return (rules.hand_size + jnp.argmin(_discard_cost(rules, params, v))).astype(i32)


def _safe_card(rules: Rules, params: BotParams, v: _View):
    h = rules.hand_size
    slot_started = _per_slot(v, v.started) > 0
    cand_known = v.live & v.known
    cand_wager = v.live & v.is_wager & (_per_slot(v, v.wager_ok) > 0)
    cand_cont = slot_started & v.lowest_num & (v.gap <= v.allowed_gap)
    cand_open = ~slot_started & v.lowest_num & (_per_slot(v, v.open_ok) > 0)
    key = jnp.minimum(
        jnp.minimum(jnp.where(cand_known, 0, NO_KEY), jnp.where(cand_wager, 1, NO_KEY)),
        jnp.minimum(
            jnp.where(cand_cont, 2 + 2 * v.gap, NO_KEY),
            jnp.where(cand_open, 3 + 2 * v.gap, NO_KEY),
        ),
    )
    play_slot = jnp.argmin(key)
    has_play = jnp.min(key) < NO_KEY

    cost = _discard_cost(rules, params, v)
    discard_slot = jnp.argmin(cost)
    discards_keeper = jnp.any((jnp.arange(h) == discard_slot) & v.live & slot_started)
    fallback_key = jnp.where(slot_started & v.lowest_num, v.gap, NO_KEY)
    fallback_slot = jnp.argmin(fallback_key)
    has_fallback = jnp.min(fallback_key) < NO_KEY

    action = jnp.where(
        has_play,
        play_slot,
        jnp.where(discards_keeper & has_fallback, fallback_slot, h + discard_slot),
    )
    return action.astype(i32)


def _safe_draw(rules: Rules, params: BotParams, state: engine.State, v: _View):
    t = _tables(rules)
    n, c, k = rules.n_cards, rules.n_colors, rules.cards_per_color
    sizes = state.pile_sizes
    top_slot = jnp.arange(k)[None, :] == (sizes - 1)[:, None]  # [C, K]
    top = jnp.sum(jnp.where(top_slot, state.discards.astype(i32), 0), axis=1)
    top = jnp.where(sizes > 0, top, n)  # [C]
    legal = (sizes > 0) & (jnp.arange(c) != state.forbidden_pile)
    x_wager = jnp.take(t.is_wager, top)
    x_rank = jnp.take(t.rank, top)
    x_value = jnp.take(t.value, top)
    rank_k = jnp.asarray(t.rank_k)
    value_k = jnp.asarray(t.value_k)

    playable = jnp.where(x_wager, v.my_n == 0, x_rank > v.my_top)
    lowest = top < v.low_live_id
    between = (rank_k[None, :] > v.my_top[:, None]) & (rank_k[None, :] < x_rank[:, None])
    x_gap = jnp.sum(v.unseen_ck & between, axis=1, dtype=i32)
    above = v.unseen_ck & (rank_k[None, :] > x_rank[:, None])
    x_future = jnp.sum(jnp.where(above, value_k[None, :], 0), axis=1)
    x_base = v.my_sum + v.live_sum + x_value + rules.expedition_penalty
    x_open_ok = (v.live_started + v.live_count + 1 <= v.my_turns) & _projection_ok(
        params, x_base, x_future, v.open_margin, v.unseen_total, v.deck_left
    )
    useful = jnp.where(
        v.started,
        jnp.where(x_wager, v.wager_ok, x_gap <= v.allowed_gap),
        jnp.where(x_wager, v.wager_ok, x_open_ok),
    )
    useful = legal & playable & lowest & useful
    key = jnp.where(useful, -jnp.where(x_wager, params.wager_points, x_value), NO_KEY)
    pile = jnp.argmin(key)
    return jnp.where(
        jnp.min(key) < NO_KEY, rules.first_pile_action + pile, rules.draw_deck_action
    ).astype(i32)


def _noise_bits(seed, iteration, game_index, counter):
    return rng.random_bits(seed, iteration, game_index, counter, rng.Purpose.BOT_NOISE)


def heuristic_action(rules: Rules, params: BotParams, state: engine.State):
    """The deterministic part of a passive or safe bot (no noise, no legality guard)."""
    v = _view(rules, params, state)
    if params.kind == KIND_PASSIVE:
        card = _passive_card(rules, params, v)
        draw = jnp.int32(rules.draw_deck_action)
    else:
        card = _safe_card(rules, params, v)
        draw = _safe_draw(rules, params, state, v)
    return jnp.where(state.phase == CARD_PHASE, card, draw).astype(i32)


def bot_action(rules: Rules, name: str, state: engine.State, seed, iteration, game_index, decision):
    """The action of bot `name` for the player to move (int32, always legal).

    Args:
      rules: static `Rules`.
      name: static bot name (`lc_cfr.bots.BOT_NAMES`).
      state: one non-terminal `engine.State`.
      seed, iteration, game_index, decision: uint32/int32 scalars keying the bot's
        randomness: `random_bits(seed, iteration, game_index, counter, BOT_NOISE)` with
        counter 2 * decision (noise coin) and 2 * decision + 1 (random action).
    """
    params = BOT_PARAMS[check_bot_name(name, "name")]
    mask = engine.legal_action_mask(rules, state)
    counter = jnp.asarray(decision).astype(jnp.uint32) * jnp.uint32(2)  # wraps mod 2^32

    def random_action():
        bits = _noise_bits(seed, iteration, game_index, counter + jnp.uint32(1))
        return engine.nth_legal(mask, bits)

    if params.kind == KIND_RANDOM:
        return random_action()
    action = heuristic_action(rules, params, state)
    if params.noise_threshold > 0:
        coin = _noise_bits(seed, iteration, game_index, counter) >> jnp.uint32(8)
        action = jnp.where(coin < jnp.uint32(params.noise_threshold), random_action(), action)
    # Guard (never taken in tests): an illegal choice falls back to the first legal action
    # (action 0 on a terminal state, whose mask is all false).
    legal = jnp.any(mask & (jnp.arange(rules.num_actions) == action))
    return jnp.where(legal, action, jnp.argmax(mask)).astype(i32)


def batch_bot_action(rules: Rules, name: str, states, seed, iteration, game_indices, decisions):
    """`bot_action` vmapped over a batch of states, game indices and decisions."""
    return jax.vmap(bot_action, in_axes=(None, None, 0, None, None, 0, 0))(
        rules, name, states, seed, iteration, game_indices, decisions
    )
