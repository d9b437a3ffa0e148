"""network.strategic_features: the features derived from the encoding (lc_cfr.nets.features).

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


def _jax(rules, x):
    return np.asarray(
        features.strategic_features(
            rules,
            jnp.asarray(x),
            constants=features.tables(rules).converted(jnp.asarray),
            concatenate=lambda xs: jnp.concatenate(xs, -1),
        )
    )


def _torch(rules, x):
    return features.strategic_features(
        rules,
        torch.as_tensor(x),
        constants=features.tables(rules).converted(torch.as_tensor),
        concatenate=lambda xs: torch.cat(xs, -1),
    ).numpy()


def _unscale(f):
    """Per-colour features [2 players, 6, C] in counts and points."""
    scales = np.array([COUNT_SCALE, features.SUM_SCALE] * 2 + [SCORE_SCALE, COUNT_SCALE])
    return f[:C2].reshape(2, len(features.PER_COLOUR), SMALL.n_colors) / scales[None, :, None]


def test_a_hand_counted_position():
    n = SMALL.n_cards
    x = np.zeros(SMALL.encoding_size, np.float32)
    x[[1, 3, 9]] = 1  # hand: a dead 2 and a live 4 of colour 0, the 5 of colour 1
    x[n + 0] = x[n + 2] = 1  # own expedition 0: the wager and the 3
    x[2 * n + 6] = 1  # the opponent's expedition 1: its 2
    x[3 * n + 7] = 1  # the 3 of colour 1 in a discard pile
    x[5 * n + 8] = 1  # the opponent is known to hold the 4 of colour 1
    x[8 * n] = 3 * SMALL.deck_scale  # three cards in the deck
    x[-1] = 98 * SMALL.turn_scale  # two turns to the cap
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


def test_flax_and_torch_compute_the_same_features_bit_for_bit(played):
    rules = Rules()
    np.testing.assert_array_equal(_jax(rules, played), _torch(rules, played))


@pytest.mark.parametrize("head", ["slot", "card"])
def test_networks_read_the_features_and_agree(head):
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
        strategic_features=True,
        rules=SMALL,
    )
    assert spec.first_layer_inputs == SMALL.encoding_size + features.feature_size(SMALL)
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
    assert run_format.ADDED_FIELDS["network.strategic_features"] is False
