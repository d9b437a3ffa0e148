"""The pgx-style environment (`lc_cfr.game.env`) against the engine it wraps.

One batch of games is played to the end with uniformly random legal actions, jitted and
vmapped, while the bare engine replays the same actions; every step of the two must
agree. A small variant keeps compiles short: its `max_turns` is chosen so that the batch
holds both natural ends and truncations.
"""

import collections

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from lc_cfr.game import engine
from lc_cfr.game.env import EnvState, LostCitiesEnv
from lc_cfr.game.rules import ILLEGAL_ACTION_PENALTY, Rules

RULES = Rules(n_colors=2, n_ranks=5, n_wagers=1, hand_size=3, bonus_threshold=5, max_turns=8)
ENV = LostCitiesEnv(RULES)
GAMES = 64
# A game lasts at most max_turns turns of two decisions; a few more steps find any bug
# that would keep a game running.
MAX_STEPS = 2 * RULES.max_turns + 4

TRACES = collections.Counter()


def _counted_step(states, actions):
    TRACES["step"] += 1  # runs once per trace, not per call
    return jax.vmap(ENV.step)(states, actions)


# Module-level jitted functions, all called with [GAMES] batches of one dtype, so that each
# compiles once for the whole module.
batch_init = jax.jit(jax.vmap(ENV.init))
batch_step = jax.jit(_counted_step)
engine_step = jax.jit(jax.vmap(lambda x, a: engine.step(RULES, x, a)))


@jax.jit
def engine_view(x):
    """The engine's mask, mover's encoding and returns of a batch of engine states."""

    def one(x):
        mask = engine.legal_action_mask(RULES, x)
        return mask, engine.observe(RULES, x, x.current_player), engine.returns(RULES, x)

    return jax.vmap(one)(x)


@jax.jit
def random_actions(key, mask):
    """A uniformly random action among the true entries of each row of `mask`."""
    return jax.random.categorical(key, jnp.where(mask, 0.0, -jnp.inf)).astype(jnp.int32)


batch_resample = jax.jit(jax.vmap(ENV.resample_hidden))


def _actions(values) -> jax.Array:
    return jnp.asarray(np.broadcast_to(values, (GAMES,)), jnp.int32)


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _assert_trees_equal(a, b):
    leaves_a, tree_a = jax.tree.flatten(a)
    leaves_b, tree_b = jax.tree.flatten(b)
    assert tree_a == tree_b
    for x, y in zip(leaves_a, leaves_b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


@pytest.fixture(scope="module")
def episode():
    """Random legal play to the end: the env's states and an independent engine replay."""
    key = jax.random.key(12)
    key, deal = jax.random.split(key)
    state = batch_init(jax.random.split(deal, GAMES))
    replay = state.engine_state
    states, replays = [_host(state)], [_host(replay)]
    for _ in range(MAX_STEPS):
        key, pick = jax.random.split(key)
        action = random_actions(pick, state.legal_action_mask)
        state = batch_step(state, action)
        replay = engine_step(replay, action)
        states.append(_host(state))
        replays.append(_host(replay))
    return states, replays


def test_init_deals_the_deck_of_the_key():
    keys = jax.random.split(jax.random.key(3), GAMES)
    state = batch_init(keys)
    decks = np.asarray(state.engine_state.deck)
    assert (np.sort(decks, axis=1) == np.arange(RULES.n_cards)).all()
    assert len({deck.tobytes() for deck in decks}) == GAMES
    _assert_trees_equal(batch_init(keys), state)  # the key alone decides the deal

    expected = jax.vmap(lambda d: ENV.from_engine_state(engine.init_from_deck(RULES, d)))(decks)
    _assert_trees_equal(state, expected)
    mask, observation, _ = engine_view(state.engine_state)
    np.testing.assert_array_equal(state.legal_action_mask, mask)
    np.testing.assert_array_equal(state.observation, observation)
    assert state.observation.shape == (GAMES, *ENV.observation_shape)
    assert state.legal_action_mask.shape == (GAMES, ENV.num_actions)
    assert (np.asarray(state.current_player) == 0).all()
    assert not np.asarray(state.rewards).any() and not np.asarray(state._step_count).any()
    assert not np.asarray(state.terminated | state.truncated).any()
    assert (ENV.num_players, ENV.id, ENV.version) == (2, "lost_cities", "v0")
    assert isinstance(state, EnvState) and state.env_id == ENV.id


def test_every_step_agrees_with_the_engine(episode):
    states, replays = episode
    for t, (state, replay) in enumerate(zip(states, replays, strict=True)):
        _assert_trees_equal(state.engine_state, replay)
        mask, observation, _ = _host(engine_view(replay))
        over = replay.terminal
        np.testing.assert_array_equal(state.legal_action_mask[~over], mask[~over], f"step {t}")
        assert state.legal_action_mask[over].all(), "pgx: every action is legal at the end"
        np.testing.assert_array_equal(state.observation, observation)
        np.testing.assert_array_equal(state.current_player, replay.current_player)
        np.testing.assert_array_equal(state.terminated, replay.terminal & ~replay.truncated)
        np.testing.assert_array_equal(state.truncated, replay.truncated)
        if t > 0:
            ended = replay.terminal & ~replays[t - 1].terminal
            assert not state.rewards[~ended].any(), f"step {t} pays before the end"
            running = ~replays[t - 1].terminal
            np.testing.assert_array_equal(state._step_count, states[t - 1]._step_count + running)


def test_episode_rewards_sum_to_the_engine_returns(episode):
    states, replays = episode
    final = replays[-1]
    assert final.terminal.all()
    # The variant is chosen for both endings; without them this test checks less.
    assert final.truncated.any() and (~final.truncated).any()
    total = np.sum([state.rewards for state in states], axis=0)
    _, _, returns = _host(engine_view(final))
    np.testing.assert_array_equal(total, returns)
    assert np.abs(total).sum() > 0 and (total.sum(axis=1) == 0).all()


def test_stepping_a_finished_game_changes_nothing(episode):
    states, _ = episode
    final = jax.tree.map(jnp.asarray, states[-1])
    key = jax.random.key(5)
    actions = [random_actions(key, final.legal_action_mask), _actions(-1), _actions(99)]
    for action in actions + [_actions(RULES.draw_deck_action)]:
        stepped = batch_step(final, action)
        _assert_trees_equal(stepped, final.replace(rewards=jnp.zeros_like(final.rewards)))


def test_an_illegal_action_loses_the_game_for_the_mover():
    state = batch_init(jax.random.split(jax.random.key(7), GAMES))
    # Half the games let player 0 finish a legal turn first, so that player 1 moves.
    first = np.arange(GAMES) < GAMES // 2
    turn = batch_step(batch_step(state, _actions(0)), _actions(RULES.draw_deck_action))
    state = engine.tree_where(jnp.asarray(first), state, turn)
    mover = np.where(first, 0, 1)
    np.testing.assert_array_equal(state.current_player, mover)
    assert not np.asarray(state.terminated).any()

    # Drawing in the card phase, and actions out of range, are illegal.
    illegal = _actions(np.array([RULES.draw_deck_action, -1, RULES.num_actions, 99] * 16))
    assert not np.asarray(state.legal_action_mask)[np.arange(GAMES), RULES.draw_deck_action].any()
    ended = batch_step(state, illegal)
    assert np.asarray(ended.terminated).all() and not np.asarray(ended.truncated).any()
    expected = np.where(mover[:, None] == np.arange(2), -1.0, 1.0) * ILLEGAL_ACTION_PENALTY
    np.testing.assert_array_equal(ended.rewards, expected)
    np.testing.assert_array_equal(ended.engine_state.illegal_player, mover)
    np.testing.assert_array_equal(ended._step_count, state._step_count + 1)
    assert np.asarray(ended.legal_action_mask).all()
    # The game is over: nothing else about it changed, and nothing more is paid.
    _assert_trees_equal(ended.engine_state.hands, state.engine_state.hands)
    again = batch_step(ended, _actions(0))
    _assert_trees_equal(again, ended.replace(rewards=jnp.zeros_like(ended.rewards)))


def test_resample_hidden_redraws_only_what_the_mover_cannot_see(episode):
    states, _ = episode
    n = RULES.n_cards
    # Mid-game states with pile draws behind them, so that known cards are exercised.
    state = jax.tree.map(jnp.asarray, states[6])
    live = ~np.asarray(state.engine_state.terminal)
    assert live.sum() > GAMES // 2
    assert np.asarray(state.engine_state.known_cards).any()
    worlds = [batch_resample(state, jax.random.split(jax.random.key(s), GAMES)) for s in (1, 2)]
    x = _host(state.engine_state)
    for world in worlds:
        y = _host(world.engine_state)
        mask, observation, _ = _host(engine_view(world.engine_state))
        np.testing.assert_array_equal(observation, state.observation)
        np.testing.assert_array_equal(mask[live], np.asarray(state.legal_action_mask)[live])
        assert (np.sort(y.deck, axis=1) == np.arange(n)).all(), "the deck stays a permutation"
        for g in range(GAMES):
            me, them = x.current_player[g], 1 - x.current_player[g]
            np.testing.assert_array_equal(y.hands[g, me], x.hands[g, me])
            hand = y.hands[g, them]
            assert (np.diff(hand.astype(int)) >= 0).all() and (hand < n).all()
            # Cards the mover saw the opponent take stay in the opponent's hand.
            assert set(np.flatnonzero(x.known_cards[g, them])) <= set(hand)
            # Every card is in exactly one place, and the hidden ones swap only among
            # the opponent's hand and the rest of the deck.
            rest = x.deck[g, x.deck_pos[g] :]
            hidden_before = set(x.hands[g, them]) | set(rest)
            hidden_after = set(hand) | set(y.deck[g, y.deck_pos[g] :])
            assert hidden_before == hidden_after and len(hidden_after) == len(rest) + len(hand)
    # The worlds differ from the truth and from each other somewhere.
    decks = [np.asarray(w.engine_state.deck)[live] for w in worlds]
    assert (decks[0] != x.deck[live]).any() and (decks[0] != decks[1]).any()
    hands = [np.asarray(w.engine_state.hands)[live] for w in worlds]
    assert (hands[0] != x.hands[live]).any()


def test_step_compiles_once(episode):
    """After the whole module's steps (or alone) the batched step was traced once."""
    state = batch_init(jax.random.split(jax.random.key(9), GAMES))
    for seed in range(3):
        state = batch_step(state, random_actions(jax.random.key(seed), state.legal_action_mask))
    jax.block_until_ready(state)
    assert TRACES["step"] == 1
