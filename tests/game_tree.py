"""The exact game tree of a tiny variant, for the estimator tests (test_estimator*.py).

Both players follow regret matching on fixed advantage networks. The tree of every deal is
enumerated level by level (one level per decision) in float64, with a regret matching of
its own (numpy, `uniform` fallback): the traversal's `lc_cfr/traversal/policy.py` is not
used, so a wrong formula there cannot cancel against the same formula here. The only code
shared with the traversal is the engine (the rules) and the network's forward pass.

Given the deal, the rest of the game is deterministic but for the players' choices (the
deck order is fixed at the deal), so each node's values are exact expectations over the
choices below it.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.game import engine
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import api

CHUNK = 4096  # states per jitted call of the enumeration (one compile per function)

# One colour, ranks 2..8, hands of two: three cards stay in the deck, so the traverser
# (player 0) always has a real second turn; 1260 different deals (hands are sorted), with
# about 380 decisions in the tree of each.
RULES = Rules(n_colors=1, n_ranks=7, min_rank=2, n_wagers=0, hand_size=2, max_turns=6)
OUTPUT_GAIN = 3.0  # sharpens the advantages: later policies are peaked
FIRST_TURN_SHIFT = 1.0  # added to every advantage on turn 0: the root policy mixes


def fixed_advantage_networks(spec: mlp.NetworkSpec, key: int) -> tuple:
    """Flax-initialised advantage networks of both players, with hidden unit 0 rewired to
    relu(1 - turn).

    That unit is 1 on turn 0 and 0 afterwards, and its output weights add
    FIRST_TURN_SHIFT to every raw output (so to every action, whatever the head): the root
    advantages are positive, so regret matching mixes over all root actions, while later
    nodes keep the network's sharp preferences.
    """
    turn = spec.first_layer_inputs - 1  # the last input is the encoding's turn * turn_scale
    advantage = []
    for player_key in jax.random.split(jax.random.PRNGKey(key), 2):
        params = mlp.init_params(spec, player_key)
        hidden, output = params["layer_0"], params["output"]
        kernel = hidden["kernel"].at[:, 0].set(0.0).at[turn, 0].set(-1.0 / RULES.turn_scale)
        advantage.append(
            {
                "layer_0": {"kernel": kernel, "bias": hidden["bias"].at[0].set(1.0)},
                "output": {
                    "kernel": (output["kernel"] * OUTPUT_GAIN).at[0].set(FIRST_TURN_SHIFT),
                    "bias": output["bias"],
                },
            }
        )
    return tuple(advantage)


def traversal_decks(seed: int, iteration: int, traverser: int, num_traversals: int):
    """(decks [D, N], deal [T]): the distinct deals the traversals of one call meet, and
    which one traversal j plays (game traverser * num_traversals + j, docs/design.md 2.2).

    Hands are sorted at the deal, so orders differing only within a hand are one game.
    """
    games = traverser * num_traversals + np.arange(num_traversals)
    decks = np.array(jax.vmap(lambda g: engine.deal_order(RULES, seed, g, iteration))(games))
    h = RULES.hand_size
    decks[:, :h] = np.sort(decks[:, :h], axis=1)
    decks[:, h : 2 * h] = np.sort(decks[:, h : 2 * h], axis=1)
    decks, deal = np.unique(decks, axis=0, return_inverse=True)
    return decks, deal.reshape(-1)


def decision_of(info: np.ndarray) -> np.ndarray:
    """[...] int: 2 * turn + phase, read off encodings [..., E] of RULES (docs/game.md:
    the phase one-hot at 8N + 1, the turn times turn_scale last)."""
    draw_phase = info[..., 8 * RULES.n_cards + 2]
    return 2 * np.rint(info[..., -1] / RULES.turn_scale).astype(int) + draw_phase.astype(int)


def regret_matching(advantages: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[B, A] float64 regret-matching policies: the positive part of the legal advantages,
    normalised; uniform over the legal actions where none is positive."""
    positive = np.where(mask, np.maximum(advantages.astype(np.float64), 0.0), 0.0)
    total = positive.sum(axis=1, keepdims=True)
    uniform = mask / np.maximum(mask.sum(axis=1, keepdims=True), 1)
    return np.where(total > 0, positive / np.where(total > 0, total, 1.0), uniform)


def _take(tree, index):
    return jax.tree.map(lambda x: x[index], tree)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _expand(rules: Rules, spec: mlp.NetworkSpec, advantage, states):
    """Per state: legal mask, both networks' masked advantages for the mover, decision
    index (2 turn + phase) and mover."""
    mask = jax.vmap(functools.partial(engine.legal_action_mask, rules))(states)
    mover = states.current_player
    obs = jax.vmap(functools.partial(engine.observe, rules))(states, mover)
    raw = [mlp.masked_advantages(mlp.apply(spec, params, obs), mask) for params in advantage]
    return mask, jnp.where((mover == 0)[:, None], raw[0], raw[1]), 2 * states.turn + states.phase


@functools.partial(jax.jit, static_argnums=(0, 1))
def _children(rules: Rules, traverser: int, states, actions):
    """The children, whether each is terminal, and the traverser's returns there."""
    children = jax.vmap(functools.partial(engine.step, rules))(states, actions)
    returns = jax.vmap(functools.partial(engine.returns, rules))(children)[:, traverser]
    return children, children.terminal, returns


def _batched(fn, rows: int, batched: tuple, *shared):
    """fn(*shared, *batched) over `rows` rows in fixed-size chunks (one compile per fn).

    The last chunk is padded by repeating the last row; the padding is cut off again.
    """
    outs = []
    for low in range(0, rows, CHUNK):
        index = np.minimum(np.arange(low, low + CHUNK), rows - 1)
        outs.append(jax.device_get(fn(*shared, *_take(batched, index))))
    return jax.tree.map(lambda *parts: np.concatenate(parts)[:rows], *outs)


class Level(NamedTuple):
    """The nodes at one depth (decisions since the deal) of every deal's tree.

    M nodes at this depth, E legal edges out of them (one per legal action).
    """

    deck: np.ndarray  # [M] int, the deal (row of `decks`) each node belongs to
    mover: np.ndarray  # [M] int
    decision: np.ndarray  # [M] int, 2 * turn + phase
    mask: np.ndarray  # [M, A] bool, legal actions
    sigma: np.ndarray  # [M, A] float64, the mover's regret-matching policy
    parent: np.ndarray  # [E] int, the node each edge leaves
    action: np.ndarray  # [E] int
    terminal: np.ndarray  # [E] bool, the edge ends the game
    returns: np.ndarray  # [E] float64, the traverser's utility there (0 if not terminal)
    child: np.ndarray  # [E] int, the child's index in the next level (-1 if terminal)
    values: np.ndarray  # [M, A] float64, v(a): the traverser's expected utility after a
    value: np.ndarray  # [M] float64, sum_a sigma(a) v(a)


def enumerate_tree(
    rules: Rules,
    spec: mlp.NetworkSpec,
    advantage,
    decks: np.ndarray,
    *,
    traverser: int,
    utility_scale: float,
) -> list[Level]:
    """Every deal's whole game, level by level, with exact values under the policies."""
    factor = np.float64(api.utility_factor(utility_scale))
    frontier = jax.vmap(functools.partial(engine.init_from_deck, rules))(jnp.asarray(decks))
    deck = np.arange(len(decks))
    raw_levels = []
    while len(deck):
        mask, advantages, decision = _batched(
            _expand, len(deck), (frontier,), rules, spec, advantage
        )
        mover = np.asarray(jax.device_get(frontier.current_player))
        parent, action = np.nonzero(mask)  # one edge per legal action
        edges = (_take(frontier, parent), action.astype(np.int32))
        children, terminal, returns = _batched(_children, len(parent), edges, rules, traverser)
        child = np.full(len(parent), -1)
        child[~terminal] = np.arange(np.sum(~terminal))
        raw_levels.append(
            dict(
                deck=deck,
                mover=mover,
                decision=decision,
                mask=mask,
                sigma=regret_matching(advantages, mask),
                parent=parent,
                action=action,
                terminal=terminal,
                returns=np.where(terminal, returns.astype(np.float64) * factor, 0.0),
                child=child,
            )
        )
        frontier = _take(children, np.flatnonzero(~terminal))
        deck = deck[parent[~terminal]]
        assert len(raw_levels) <= 2 * rules.max_turns, "the game outlived max_turns"
    levels: list[Level] = []
    below = None  # node values one level down
    for raw in reversed(raw_levels):
        edge_value = raw["returns"].copy()
        if below is not None:
            edge_value[~raw["terminal"]] = below[raw["child"][~raw["terminal"]]]
        values = np.zeros(raw["mask"].shape)
        values[raw["parent"], raw["action"]] = edge_value
        value = np.sum(raw["sigma"] * values, axis=1)
        levels.append(Level(**raw, values=values, value=value))
        below = value
    return levels[::-1]


def explore(sigma: np.ndarray, mask: np.ndarray, epsilon: float) -> np.ndarray:
    """(1 - epsilon) sigma + epsilon uniform(legal)."""
    return (1.0 - epsilon) * sigma + epsilon * mask / mask.sum(axis=1, keepdims=True)


def regrets(level: Level) -> np.ndarray:
    """[M, A] exact regrets v(a) - sum_b sigma(b) v(b), 0 on illegal actions."""
    return np.where(level.mask, level.values - level.value[:, None], 0.0)
