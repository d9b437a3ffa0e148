"""The OpenSpiel game `python_lost_cities` and the exact-exploitability yardstick.

The game must be lc_cfr's game: random OpenSpiel games replayed in the JAX engine agree
on every legal mask, encoding, terminal flag and return. Its information-state strings
must have perfect recall, and the evaluator's figures must be OpenSpiel's own.
"""

from __future__ import annotations

import functools
import pickle

import jax
import numpy as np
import pytest

pyspiel = pytest.importorskip("pyspiel", reason="OpenSpiel is optional: pip install .[openspiel]")

from open_spiel.python import policy as policy_lib  # noqa: E402
from open_spiel.python.algorithms import cfr  # noqa: E402
from open_spiel.python.algorithms import exploitability as os_exploitability  # noqa: E402

from lc_cfr.game import engine  # noqa: E402
from lc_cfr.game.rules import Rules  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.spiel import TINY_RULES  # noqa: E402
from lc_cfr.spiel import game as spiel_game  # noqa: E402
from lc_cfr.spiel.exploitability import (  # noqa: E402
    ExploitabilityEvaluator,
    openspiel_policy,
    policy_figures,
)

# 4 cards, one-card hands: the smallest real variant, for CFR's many iterations.
MICRO_RULES = Rules(
    n_colors=2, n_ranks=2, n_wagers=0, hand_size=1, max_turns=4, expedition_penalty=-3
)
# Bigger than anything enumerable: 3 colours, wagers, several cards in hand.
BIG_RULES = Rules(n_colors=3, n_ranks=4, n_wagers=1, hand_size=3, max_turns=30)


@functools.cache
def _game(rules: Rules):
    return spiel_game.load_game(rules)


@functools.cache
def _evaluator() -> ExploitabilityEvaluator:
    rules = TINY_RULES
    return ExploitabilityEvaluator(rules, _spec(rules))


def _spec(rules: Rules) -> mlp.NetworkSpec:
    return mlp.NetworkSpec(rules.encoding_size, rules.num_actions, 32, 2, "relu")


def _random_step(state, rng) -> int:
    if state.is_chance_node():
        outcomes, probs = zip(*state.chance_outcomes(), strict=True)
        return int(rng.choice(outcomes, p=probs))
    return int(rng.choice(state.legal_actions()))


# --------------------------------------------------------------------------------------
# The game
# --------------------------------------------------------------------------------------


def test_game_facts():
    rules = TINY_RULES
    game = _game(rules)
    assert game.get_type().short_name == "python_lost_cities"
    assert game.num_distinct_actions() == rules.num_actions
    assert game.max_chance_outcomes() == rules.n_cards
    assert game.max_game_length() == 2 * rules.max_turns
    assert game.information_state_tensor_shape() == [rules.encoding_size]
    assert game.observation_tensor_shape() == [rules.encoding_size]
    assert game.num_players() == 2
    assert game.get_type().utility == pyspiel.GameType.Utility.ZERO_SUM
    assert game.get_type().chance_mode == pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC
    # the parameters round-trip through pyspiel's own loader
    again = pyspiel.load_game(str(game))
    assert again.rules == rules and again.utility_scale == 1.0


@pytest.mark.parametrize(
    "rules", [TINY_RULES, MICRO_RULES, BIG_RULES], ids=["tiny", "micro", "big"]
)
def test_pyspiel_random_sim_test(rules):
    pyspiel.random_sim_test(_game(rules), num_sims=10, serialize=True, verbose=False)


def test_clone_and_pickle_are_independent_copies():
    game = _game(BIG_RULES)
    rng = np.random.default_rng(0)
    for _ in range(3):
        state = game.new_initial_state()
        while not state.is_terminal():
            action = _random_step(state, rng)
            snapshot = (
                str(state),
                state.history(),
                [state.information_state_string(p) for p in (0, 1)],
            )
            copy = state.clone()
            copy.apply_action(action)
            assert (str(state), state.history()) == snapshot[:2]
            assert [state.information_state_string(p) for p in (0, 1)] == snapshot[2]
            restored = pickle.loads(pickle.dumps(state))
            assert str(restored) == str(state) and restored.history() == state.history()
            state.apply_action(action)
            assert str(copy) == str(state)


def test_chance_outcomes_are_the_undealt_or_undrawn_cards():
    rules = BIG_RULES
    game = _game(rules)
    rng = np.random.default_rng(1)
    state = game.new_initial_state()
    dealt = []
    while not state.is_terminal():
        if state.is_chance_node():
            outcomes, probs = zip(*state.chance_outcomes(), strict=True)
            np.testing.assert_allclose(probs, 1.0 / len(outcomes))
            if len(dealt) < 2 * rules.hand_size:
                expected = sorted(set(range(rules.n_cards)) - set(dealt))
            else:
                s = state.engine.state_dict()
                expected = sorted(s["deck"][s["deck_pos"] :].tolist())
            assert list(outcomes) == expected
            dealt.append(_random_step(state, rng))
            state.apply_action(dealt[-1])
        else:
            state.apply_action(_random_step(state, rng))


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: spiel_game.rules_from_params({"utility_scale": 0.0}), "utility_scale"),
        (
            lambda: spiel_game.rules_from_params({"n_colors": 1, "n_ranks": 2, "n_wagers": 0}),
            "hand_size",
        ),
        (lambda: spiel_game.rules_from_params({"n_colours": 2}), "n_colours"),
        (lambda: spiel_game.load_game(TINY_RULES, utility_scale=float("nan")), "utility_scale"),
        (
            lambda: pyspiel.load_game("python_lost_cities", {"utility_scale": -1.0}),
            "utility_scale",
        ),
    ],
    ids=["scale_zero", "too_few_cards", "misspelt_field", "scale_nan", "pyspiel_scale"],
)
def test_bad_parameters_raise_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_tiny_variant_size_is_as_documented():
    size = spiel_game.tree_size(_game(TINY_RULES))
    assert size == {
        "histories": 7426,
        "chance_nodes": 2146,
        "decision_nodes": 3360,
        "terminals": 1920,
    }
    assert _evaluator().rows_of_player == (855, 1260)


def test_utility_scale_divides_returns_and_stays_within_bounds():
    rng = np.random.default_rng(2)
    scaled = spiel_game.load_game(BIG_RULES, utility_scale=8.0)
    for _ in range(20):
        state = scaled.new_initial_state()
        chance_nodes = 0
        while not state.is_terminal():
            chance_nodes += state.is_chance_node()
            state.apply_action(_random_step(state, rng))
        assert chance_nodes <= spiel_game.max_chance_nodes(BIG_RULES)
        assert len(state.history()) - chance_nodes <= scaled.max_game_length()
        s0, s1 = state.engine.scores()
        assert state.returns() == [(s0 - s1) / 8.0, (s1 - s0) / 8.0]
        assert scaled.min_utility() <= state.returns()[0] <= scaled.max_utility()


def test_illegal_actions_raise():
    game = _game(TINY_RULES)
    state = game.new_initial_state()
    for card in (0, 1):
        state.apply_action(card)
    with pytest.raises(ValueError, match="illegal action"):
        state.apply_action(TINY_RULES.draw_deck_action)  # a draw in the CARD phase


# --------------------------------------------------------------------------------------
# Parity with lc_cfr's JAX engine
# --------------------------------------------------------------------------------------


@functools.cache
def _jax_views(rules: Rules):
    def views(state):
        return (
            engine.legal_action_mask(rules, state),
            engine.observe(rules, state, 0),
            engine.observe(rules, state, 1),
            state.terminal,
            state.truncated,
            engine.returns(rules, state),
        )

    return jax.jit(views), jax.jit(functools.partial(engine.step, rules))


def _play_openspiel(game, rules, rng):
    """One random game: its decisions, the cards chance revealed, and the end."""
    state = game.new_initial_state()
    decisions, revealed = [], []
    while not state.is_terminal():
        action = _random_step(state, rng)
        if state.is_chance_node():
            revealed.append(action)
        else:
            mask = np.asarray(state.legal_actions_mask(), bool)
            tensors = [
                (
                    np.asarray(state.information_state_tensor(p), np.float32),
                    np.asarray(state.observation_tensor(p), np.float32),
                )
                for p in (0, 1)
            ]
            decisions.append((state.current_player(), action, mask, tensors))
        state.apply_action(action)
    return decisions, revealed, state


@pytest.mark.parametrize(
    ("rules", "games"), [(TINY_RULES, 60), (BIG_RULES, 12)], ids=["tiny", "big"]
)
def test_replay_in_the_jax_engine_is_identical(rules, games):
    game = _game(rules)
    views, step = _jax_views(rules)
    rng = np.random.default_rng(3)
    for _ in range(games):
        decisions, revealed, final = _play_openspiel(game, rules, rng)
        rest = sorted(set(range(rules.n_cards)) - set(revealed))
        state = engine.init_from_deck(rules, np.array(revealed + rest, np.int8))
        for player, action, mask, tensors in decisions:
            jax_mask, obs0, obs1, terminal, _, _ = jax.device_get(views(state))
            assert not terminal and int(state.current_player) == player
            np.testing.assert_array_equal(mask, jax_mask)
            for p, obs in ((0, obs0), (1, obs1)):
                for tensor in tensors[p]:  # bit for bit, not approximately
                    np.testing.assert_array_equal(tensor.view(np.uint32), obs.view(np.uint32))
            state = step(state, action)
        jax_mask, _, _, terminal, truncated, returns = jax.device_get(views(state))
        assert terminal and not jax_mask.any()
        assert bool(truncated) == final.engine.truncated
        np.testing.assert_array_equal(np.asarray(final.returns(), np.float32), returns)


# --------------------------------------------------------------------------------------
# Perfect recall
# --------------------------------------------------------------------------------------


def _walk_information_sets(game):
    """{(player, info string): [(own (string, action) sequence, encoding, legal)]} by DFS."""
    seen = {}
    stack = [(game.new_initial_state(), ((), ()))]
    while stack:
        state, past = stack.pop()
        if state.is_terminal():
            continue
        if state.is_chance_node():
            stack.extend((state.child(a), past) for a, _ in state.chance_outcomes())
            continue
        player = state.current_player()
        key = state.information_state_string(player)
        entry = (
            past[player],
            tuple(state.information_state_tensor(player)),
            tuple(state.legal_actions()),
        )
        seen.setdefault((player, key), []).append(entry)
        for action in state.legal_actions():
            after = list(past)
            after[player] = past[player] + ((key, action),)
            stack.append((state.child(action), tuple(after)))
    return seen


def test_information_state_strings_have_perfect_recall():
    seen = _walk_information_sets(_game(TINY_RULES))
    strings = [key for _, key in seen]
    assert len(strings) == len(set(strings)), "a string is shared by both players"
    assert sum(len(v) > 1 for v in seen.values()) > 0, "no information set has two histories"
    for (player, key), entries in seen.items():
        assert key.startswith(f"p{player}:")
        first = entries[0]
        for entry in entries[1:]:
            assert entry[0] == first[0], f"{key}: the player's own past differs"
            assert entry[1] == first[1], f"{key}: encodings differ"
            assert entry[2] == first[2], f"{key}: legal actions differ"


def test_opponent_card_and_deck_order_stay_hidden():
    game = _game(BIG_RULES)
    h = BIG_RULES.hand_size
    # Same cards for player 0, different hands for player 1, same first moves.
    histories = [list(range(2 * h)), list(range(h)) + list(range(2 * h, 3 * h))]
    strings, tensors = [], []
    for deal in histories:
        state = game.new_initial_state()
        for card in deal:
            state.apply_action(card)
        state.apply_action(h)  # player 0 discards slot 0 (card 0)
        state.apply_action(BIG_RULES.draw_deck_action)
        strings.append(state.information_state_string(0))
        tensors.append(state.information_state_tensor(0))
        assert state.is_chance_node()
    assert strings[0] == strings[1] and tensors[0] == tensors[1]


# --------------------------------------------------------------------------------------
# Exploitability
# --------------------------------------------------------------------------------------


def test_uniform_policy_is_exploitable_and_cfr_is_far_less():
    game = _game(MICRO_RULES)
    uniform = policy_figures(game, policy_lib.UniformRandomPolicy(game))
    assert uniform["exploitability"] > 0.1
    assert uniform["nash_conv"] == pytest.approx(2 * uniform["exploitability"])
    # the C++ best response of OpenSpiel's `exploitability` agrees with nash_conv / 2
    direct = os_exploitability.exploitability(game, policy_lib.UniformRandomPolicy(game))
    assert uniform["exploitability"] == pytest.approx(direct, abs=1e-9)
    solver = cfr.CFRSolver(game)
    for _ in range(200):
        solver.evaluate_and_update_policy()
    solved = policy_figures(game, solver.average_policy())
    assert 0 <= solved["exploitability"] < uniform["exploitability"] / 50


def _per_state_reference(evaluator, probabilities_of):
    """OpenSpiel's exploitability of a policy computed state by state, unbatched."""
    game = evaluator.game

    def action_probabilities(state):
        player = state.current_player()
        x = np.asarray(state.information_state_tensor(player), np.float64)
        mask = np.asarray(state.legal_actions_mask(player), bool)
        probs = probabilities_of(player, x, mask)
        return {a: probs[a] / probs.sum() for a in state.legal_actions()}

    tabular = policy_lib.tabular_policy_from_callable(game, action_probabilities)
    return os_exploitability.exploitability(game, tabular)


def _numpy_forward(params, x):
    """The MLP (relu) in float64 numpy: an independent reading of the flax parameters."""
    layers = sorted(k for k in params if k.startswith("layer_")) + ["output"]
    for name in layers:
        x = x @ np.asarray(params[name]["kernel"], np.float64) + np.asarray(params[name]["bias"])
        if name != "output":
            x = np.maximum(x, 0.0)
    return x


def _numpy_softmax(logits, mask):
    z = np.where(mask, logits - logits[mask].max(), -np.inf)
    return np.exp(z) / np.exp(z).sum()


def _numpy_regret_matching(advantages, mask):
    positive = np.where(mask, np.maximum(advantages, 0.0), 0.0)
    if positive.sum() > 0:
        return positive / positive.sum()
    best = np.argmax(np.where(mask, advantages, -np.inf))
    return (np.arange(mask.size) == best).astype(np.float64)


def test_evaluator_matches_openspiel_on_random_networks():
    evaluator = _evaluator()
    spec = evaluator.spec
    keys = jax.random.split(jax.random.PRNGKey(11), 3)
    strategy, adv0, adv1 = (mlp.init_params(spec, k) for k in keys)
    figures = evaluator(strategy_params=strategy, advantage_params=(adv0, adv1))
    assert set(figures) == {"average_strategy", "current"}

    def average(player, x, mask):
        return _numpy_softmax(_numpy_forward(strategy, x), mask)

    def current(player, x, mask):
        return _numpy_regret_matching(_numpy_forward((adv0, adv1)[player], x), mask)

    for view, probabilities_of in (("average_strategy", average), ("current", current)):
        reference = _per_state_reference(evaluator, probabilities_of)
        # float32 network vs float64 numpy: close, not equal
        assert figures[view]["exploitability"] == pytest.approx(reference, rel=1e-4, abs=1e-5)
        assert figures[view]["nash_conv"] == pytest.approx(2 * reference, rel=1e-4, abs=1e-5)


def test_zero_output_network_is_the_uniform_policy():
    evaluator = _evaluator()
    params = mlp.init_params(evaluator.spec, jax.random.PRNGKey(0))
    params = {**params, "output": jax.tree.map(np.zeros_like, params["output"])}
    figures = evaluator(strategy_params=params)["average_strategy"]
    uniform = evaluator.uniform()
    direct = os_exploitability.nash_conv(
        evaluator.game, policy_lib.UniformRandomPolicy(evaluator.game)
    )
    assert figures["exploitability"] == pytest.approx(uniform["exploitability"], abs=1e-9)
    assert uniform["nash_conv"] == pytest.approx(direct, abs=1e-9)
    assert uniform["exploitability"] > 0


def test_evaluator_caches_one_row_per_information_state():
    evaluator = _evaluator()
    template = evaluator.template
    assert evaluator.encodings.shape == (evaluator.num_info_states, TINY_RULES.encoding_size)
    assert evaluator.masks.shape == (evaluator.num_info_states, TINY_RULES.num_actions)
    np.testing.assert_array_equal(evaluator.encodings, np.asarray(template.state_in, np.float32))
    assert evaluator.rows_of_player == tuple(len(k) for k in template.states_per_player)


def test_evaluator_reports_points_whatever_the_utility_scale():
    rules = MICRO_RULES
    params = mlp.init_params(_spec(rules), jax.random.PRNGKey(5))
    points = ExploitabilityEvaluator(rules, _spec(rules))(strategy_params=params)
    scaled = ExploitabilityEvaluator(rules, _spec(rules), utility_scale=16.0)(
        strategy_params=params
    )
    for key in ("exploitability", "nash_conv"):
        assert scaled["average_strategy"][key] == pytest.approx(points["average_strategy"][key])


def test_evaluator_refuses_bad_arguments():
    rules = MICRO_RULES
    with pytest.raises(ValueError, match="spec"):
        ExploitabilityEvaluator(rules, _spec(TINY_RULES))
    with pytest.raises(ValueError, match="fallback"):
        ExploitabilityEvaluator(rules, _spec(rules), fallback="softmax")
    evaluator = ExploitabilityEvaluator(rules, _spec(rules))
    with pytest.raises(ValueError, match="strategy_params, advantage_params and/or snapshots"):
        evaluator()
    with pytest.raises(ValueError, match="advantage_params"):
        evaluator(advantage_params=mlp.init_params(_spec(rules), jax.random.PRNGKey(0)))


def test_openspiel_policy_is_the_identity_on_legal_actions():
    template = policy_lib.TabularPolicy(_game(MICRO_RULES))
    rng = np.random.default_rng(4)
    raw = rng.random(template.legal_actions_mask.shape) * template.legal_actions_mask
    probs = raw / raw.sum(1, keepdims=True)
    converted = openspiel_policy(template, probs)
    np.testing.assert_allclose(converted.action_probability_array, probs, rtol=1e-12)
    for index, state in enumerate(template.states):
        got = converted.action_probabilities(state)
        assert sorted(got) == state.legal_actions()  # illegal actions do not appear
        for action, p in got.items():
            assert p == pytest.approx(probs[index, action])
    by_key = {key: probs[i] for key, i in template.state_lookup.items()}
    np.testing.assert_array_equal(
        openspiel_policy(template, by_key).action_probability_array,
        converted.action_probability_array,
    )


def test_openspiel_policy_refuses_bad_probabilities():
    template = policy_lib.TabularPolicy(_game(MICRO_RULES))
    uniform = template.action_probability_array
    illegal = uniform.copy()
    row, action = np.argwhere(template.legal_actions_mask == 0)[0]
    illegal[row, action] = 0.5
    with pytest.raises(ValueError, match="illegal action"):
        openspiel_policy(template, illegal)
    with pytest.raises(ValueError, match="sum to"):
        openspiel_policy(template, uniform * 0.5)
    with pytest.raises(ValueError, match="shape"):
        openspiel_policy(template, uniform[:, :-1])
    with pytest.raises(ValueError, match="negative or non-finite"):
        openspiel_policy(template, -uniform)
    with pytest.raises(ValueError, match="no entry"):
        openspiel_policy(template, {})
    by_key = {key: uniform[i] for key, i in template.state_lookup.items()}
    with pytest.raises(ValueError, match="no information state"):
        openspiel_policy(template, {**by_key, "p0: nonsense": uniform[0]})


def test_mixture_policy_weights_each_policy_by_its_own_reach():
    """Two deterministic policies mixed per game: at a player's first decision the mixture
    is their average; where only one of them can arrive, it is that one's choice."""
    ev = _evaluator()
    rng = np.random.default_rng(3)
    tables = np.zeros((2,) + ev.masks.shape)
    for k in range(2):
        for row in range(ev.num_info_states):
            legal = np.flatnonzero(ev.masks[row])
            tables[k, row, rng.choice(legal)] = 1.0
    mixed = ev.mixture_policy(tables)
    np.testing.assert_allclose(mixed.sum(axis=1), 1.0)
    first = ev.parent < 0
    np.testing.assert_allclose(mixed[first], tables[:, first].mean(axis=0))
    reach = np.ones((2, ev.num_info_states))
    for row in ev._parent_order():
        if ev.parent[row] >= 0:
            reach[:, row] = (
                reach[:, ev.parent[row]] * tables[:, ev.parent[row], ev.parent_action[row]]
            )
    only0 = (reach[0] > 0) & (reach[1] == 0)
    assert only0.any() and (~first).any()
    np.testing.assert_allclose(mixed[only0], tables[0, only0])
    # one policy K times is that policy
    np.testing.assert_allclose(
        ev.mixture_policy(np.stack([tables[1]] * 3))[reach[1] > 0], tables[1][reach[1] > 0]
    )
