"""network.strategic_features and network.blocking_features: the features derived from the
encoding (lc_cfr.nets.features).

A hand-counted position, the engine's own scoring on positions of played games, the flax
and torch computations bit for bit, and the networks that read them.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from lc_cfr.game import engine
from lc_cfr.game.rules import COUNT_SCALE, SCORE_SCALE, Rules
from lc_cfr.nets import features, mlp
from lc_cfr.nets import torch_mlp as tn

SMALL = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3)  # cards 0-4 and 5-9, wager first
C2 = 2 * len(features.PER_COLOUR) * SMALL.n_colors  # per-colour features of both players


def _jax(rules, x, derive=features.strategic_features):
    return np.asarray(
        derive(
            rules,
            jnp.asarray(x),
            constants=features.tables(rules).converted(jnp.asarray),
            concatenate=lambda xs: jnp.concatenate(xs, -1),
        )
    )


def _torch(rules, x, derive=features.strategic_features):
    return derive(
        rules,
        torch.as_tensor(x),
        constants=features.tables(rules).converted(torch.as_tensor),
        concatenate=lambda xs: torch.cat(xs, -1),
    ).numpy()


def _unscale(f):
    """Per-colour features [2 players, 6, C] in counts and points."""
    scales = np.array([COUNT_SCALE, features.SUM_SCALE] * 2 + [SCORE_SCALE, COUNT_SCALE])
    return f[:C2].reshape(2, len(features.PER_COLOUR), SMALL.n_colors) / scales[None, :, None]


def _hand_counted_position():
    n = SMALL.n_cards
    x = np.zeros(SMALL.encoding_size, np.float32)
    x[[1, 3, 9]] = 1  # hand: a dead 2 and a live 4 of colour 0, the 5 of colour 1
    x[n + 0] = x[n + 2] = 1  # own expedition 0: the wager and the 3
    x[2 * n + 6] = 1  # the opponent's expedition 1: its 2
    x[3 * n + 7] = 1  # the 3 of colour 1 in a discard pile
    x[5 * n + 8] = 1  # the opponent is known to hold the 4 of colour 1
    x[8 * n] = 3 * SMALL.deck_scale  # three cards in the deck
    x[-1] = 98 * SMALL.turn_scale  # two turns to the cap
    return x


def test_a_hand_counted_position():
    n = SMALL.n_cards
    x = _hand_counted_position()
    f = _jax(SMALL, x)
    assert f.shape == (features.feature_size(SMALL),)
    expected = np.array(
        [
            # own colour 0: 4 and 5 live (sum 9), the 4 held; (3 + 4 - 20) * 2 = -26, 3 of 8
            # own colour 1: wager, 3, 4, 5 live (the 2 is the opponent's); the 5 held
            [[2, 4], [9, 12], [1, 1], [4, 5], [-26, -15], [5, 7]],
            # opponent colour 0: the 2, 4, 5 live; colour 1: 3, 4, 5 live, the 4 known held
            [[3, 3], [11, 12], [0, 1], [0, 4], [0, -14], [8, 6]],
        ],
        np.float32,
    )
    np.testing.assert_array_equal(_unscale(f), expected)
    own_live, opp_live, gift = f[C2 : C2 + 3 * n].reshape(3, n)
    np.testing.assert_array_equal(np.flatnonzero(own_live), [3, 4, 5, 7, 8, 9])
    np.testing.assert_array_equal(np.flatnonzero(opp_live), [1, 3, 4, 7, 8, 9])
    np.testing.assert_array_equal(np.flatnonzero(gift), [9])  # only colour 1 is opened
    # min(3 deck cards, 2 turns) = 2 remaining; slack 2 - 2 * 2 held cards = -2
    np.testing.assert_array_equal(f[-2:] / SMALL.turn_scale, [2, -2])


def test_what_a_play_blocks_in_a_hand_counted_position():
    n = SMALL.n_cards
    x = _hand_counted_position()
    f = _jax(SMALL, x, features.blocking_features)
    assert f.shape == (features.blocking_feature_size(SMALL),)
    strands, skips = f.reshape(2, n) / COUNT_SCALE
    np.testing.assert_array_equal(strands, np.zeros(n))  # no two playable cards share a colour
    # the 4 of colour 0 blocks nothing live (the 5 is above it); the 5 of colour 1 blocks
    # its wager, 3 and 4 (the 2 is the opponent's); the dead 2 and unheld cards: 0
    np.testing.assert_array_equal(skips, np.eye(n)[9] * 3)
    x[[1, 3]] = 0
    x[[6, 8]] = 1  # hand: the 2, 4 and 5 of colour 1 (the 2 no longer the opponent's)
    x[2 * n + 6] = 0
    strands, skips = _jax(SMALL, x, features.blocking_features).reshape(2, n) / COUNT_SCALE
    np.testing.assert_array_equal(strands[5:], [0, 0, 0, 1, 2])  # the 4 strands the 2
    np.testing.assert_array_equal(skips[5:], [0, 1, 0, 3, 4])  # the 2 blocks the wager
    assert not strands[:5].any() and not skips[:5].any()


def _played_encodings(rules, games=6, decisions=160):
    """Both players' encodings at every decision of random games, [rows, E]."""

    def game(index):
        def body(state, d):
            views = jax.vmap(lambda p: engine.observe(rules, state, p))(jnp.arange(2))
            action = engine.random_legal_action(rules, state, 3, 0, index, d)
            return engine.step(rules, state, action), (views, state.terminal)

        _, (views, done) = jax.lax.scan(body, engine.init(rules, 3, index), jnp.arange(decisions))
        return views, done

    views, done = jax.jit(jax.vmap(game))(jnp.arange(games))
    return np.asarray(views)[~np.asarray(done)].reshape(-1, rules.encoding_size)


@pytest.fixture(scope="module")
def played():
    return _played_encodings(Rules())


def test_projected_scores_are_the_engines_when_nothing_is_held(played):
    """Where a player holds (or is known to hold) nothing live in a colour, the projected
    score is the expedition's score as the engine counts it (the encoding's score blocks)."""
    rules = Rules()
    n, c = rules.n_cards, rules.n_colors
    f = _jax(rules, played)
    per = f[:, : 12 * c].reshape(-1, 2, 6, c)
    held, projected = per[:, :, 2], per[:, :, 4] / SCORE_SCALE
    score_at = 8 * n + 3 + c + 4 * c  # own scores, then the opponent's (docs/game.md)
    scores = played[:, score_at : score_at + 2 * c].reshape(-1, 2, c) / SCORE_SCALE
    empty = held == 0
    assert empty.mean() > 0.3 and (~empty).mean() > 0.1  # both kinds occur
    np.testing.assert_array_equal(projected[empty], scores[empty])
    # holding live cards of a colour changes what it will score
    assert np.any(projected[~empty] != scores[~empty])


@pytest.mark.parametrize("derive", [features.strategic_features, features.blocking_features])
def test_flax_and_torch_compute_the_same_features_bit_for_bit(played, derive):
    rules = Rules()
    np.testing.assert_array_equal(_jax(rules, played, derive), _torch(rules, played, derive))


def _blocking_by_loops(rules, x):
    """[2, N] strands and skips of one encoding, card by card from the rules' words."""
    n, k, w = rules.n_cards, rules.cards_per_color, rules.n_wagers
    hand, own, opp = (x[b * n : (b + 1) * n] > 0 for b in range(3))
    rank = np.arange(n) % k  # wagers 0..w-1, then the numbered cards in order

    def playable(j):  # no numbered card of one's expedition is at or above it
        same = [i for i in range(n) if own[i] and i // k == j // k and rank[i] >= w]
        return not own[j] and all(rank[i] < rank[j] for i in same) and not (rank[j] < w and same)

    def blocked(i, j):  # j is another card a play of i would block
        return j != i and j // k == i // k and rank[i] >= w and rank[j] <= rank[i]

    out = np.zeros((2, n), np.float32)
    for i in range(n):
        if hand[i] and playable(i):
            for j in range(n):
                if blocked(i, j) and playable(j) and not opp[j]:
                    out[1, i] += 1
                    out[0, i] += hand[j]
    return out


def test_blocking_features_equal_a_card_by_card_count(played):
    rules = Rules()
    n = rules.n_cards
    f = _jax(rules, played, features.blocking_features).reshape(-1, 2, n) / COUNT_SCALE
    strands, skips = f[:, 0], f[:, 1]
    assert (strands > 0).mean() > 0.01 and (skips > strands).any()  # both kinds occur
    for row in range(0, len(played), 7):
        np.testing.assert_array_equal(f[row], _blocking_by_loops(rules, played[row]))


@pytest.mark.parametrize(
    "head,kind", [("slot", "strategic"), ("card", "strategic"), ("slot", "blocking")]
)
def test_networks_read_the_features_and_agree(head, kind):
    x = _played_encodings(SMALL, games=2, decisions=24)
    spec = mlp.NetworkSpec(
        SMALL.encoding_size,
        SMALL.num_actions,
        16,
        2,
        "gelu",
        head=head,
        n_cards=SMALL.n_cards,
        hand_size=SMALL.hand_size,
        strategic_features=kind == "strategic",
        blocking_features=kind == "blocking",
        rules=SMALL,
    )
    size = features.feature_size if kind == "strategic" else features.blocking_feature_size
    assert spec.first_layer_inputs == SMALL.encoding_size + size(SMALL)
    params = mlp.init_params(spec, jax.random.key(0))
    chex.assert_shape(params["layer_0"]["kernel"], (spec.first_layer_inputs, 16))
    flax_out = np.asarray(mlp.apply(spec, params, x))
    if head == "slot":  # the torch MLP has the slot head only (the optax learner the card head)
        model = tn.from_layout(spec, mlp.to_layout(spec, params))
        with torch.no_grad():
            raw = model(torch.from_numpy(x)).numpy()
        np.testing.assert_allclose(raw, flax_out, rtol=1e-5, atol=1e-5)
    # the feature columns of layer_0 are read: zero them and the outputs change
    kernel = np.asarray(params["layer_0"]["kernel"]).copy()
    kernel[SMALL.encoding_size :] = 0
    blind = {**params, "layer_0": {**params["layer_0"], "kernel": jnp.asarray(kernel)}}
    assert not np.allclose(mlp.apply(spec, blind, x), flax_out)


def test_bad_strategic_feature_specs_name_the_field():
    kwargs = dict(input_size=SMALL.encoding_size, num_actions=SMALL.num_actions, hidden_size=8)
    with pytest.raises(ValueError, match="network.strategic_features=True needs the rules"):
        mlp.NetworkSpec(**kwargs, num_layers=1, strategic_features=True)
    with pytest.raises(ValueError, match="network.strategic_features=True needs the rules"):
        mlp.NetworkSpec(**kwargs, num_layers=1, strategic_features=True, rules=Rules())
    with pytest.raises(ValueError, match="network.strategic_features must be a bool"):
        mlp.NetworkSpec(**kwargs, num_layers=1, strategic_features=1)
    with pytest.raises(ValueError, match="network.blocking_features=True needs the rules"):
        mlp.NetworkSpec(**kwargs, num_layers=1, blocking_features=True)
    with pytest.raises(ValueError, match="network.blocking_features must be a bool"):
        mlp.NetworkSpec(**kwargs, num_layers=1, blocking_features="yes", rules=SMALL)


def test_the_config_field_reaches_the_networks_and_old_runs_read_without_it():
    from config_helpers import load_default_config

    from lc_cfr.train import run_format, setup

    config = load_default_config().get_config("plain")  # the default reads them
    rules = setup.rules_from_config(config)
    assert not setup.spec_from_config(config, rules).strategic_features
    config.network.strategic_features = True
    spec = setup.spec_from_config(config, rules)
    assert spec.strategic_features and spec.rules == rules
    assert spec.first_layer_inputs == rules.encoding_size + 242  # the classic game's features
    config.network.blocking_features = True
    spec = setup.spec_from_config(config, rules)
    assert spec.first_layer_inputs == rules.encoding_size + 242 + 2 * rules.n_cards
    assert run_format.ADDED_FIELDS["network.strategic_features"] is False
    assert run_format.ADDED_FIELDS["network.blocking_features"] is False
