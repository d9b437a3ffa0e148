"""JAX engine vs Cython engine, bit for bit (docs/design.md section 6), with chex.

Random legal games are played on the vmapped JAX engine and replayed on the Cython
engine; at every decision the full public state, both players' encodings, the legal
mask, the scores and the terminal/truncated flags must be identical.

Every comparison is a `chex.assert_trees_all_equal` (bit-exact, no tolerance anywhere in
this file) over a whole pytree (a game's decisions and final state), so a failure names
the game and the leaf (e.g. 'decisions/states/hands'). `EngineFunctionsTest` runs the
unbatched engine functions (init/step/legal_action_mask/observe/returns) under
`chex.variants`, with and without jit, against CyGame on a few games of the tiny rules;
its jitted variant also holds each function to a single trace (`chex.assert_max_traces`)
over all its games.
"""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from traversal_helpers import TINY

from lc_cfr.game import cy_engine, engine, rng
from lc_cfr.game.random_play import play_random_games, record_random_games
from lc_cfr.game.rules import Rules

# (rules, number of games, games per JAX batch): 1000 games of the default rules, 400 of
# each other variant.
VARIANTS = {
    "default": (Rules(), 1000, 250),
    "one_color": (Rules(n_colors=1, n_ranks=6, n_wagers=1, hand_size=2, max_turns=30), 400, 400),
    "two_colors_no_wagers": (
        Rules(n_colors=2, n_ranks=5, n_wagers=0, hand_size=3, bonus_threshold=4, max_turns=40),
        400,
        400,
    ),
    "two_colors_hand_two": (Rules(n_colors=2, n_ranks=4, n_wagers=2, hand_size=2), 400, 400),
    "six_colors": (Rules(n_colors=6), 400, 200),
}

STATE_FIELDS = [
    "deck",
    "deck_pos",
    "hands",
    "discards",
    "pile_sizes",
    "expedition_cards",
    "expedition_wagers",
    "expedition_numbered",
    "expedition_sum",
    "expedition_top",
    "known_cards",
    "scores",
    "current_player",
    "phase",
    "forbidden_pile",
    "turn",
    "terminal",
    "truncated",
]

SEED = 20261130


def _fields(state) -> dict:
    """{field: array} of STATE_FIELDS, from a CyGame state dict or a JAX engine State."""
    if isinstance(state, dict):
        return {name: state[name] for name in STATE_FIELDS}
    return {name: getattr(state, name) for name in STATE_FIELDS}


def _replay_on_cython(rules, seed, game, actions):
    """Replays one game's actions on CyGame.

    Returns ({"states": {field: [D, ...]}, "masks": [D, A], "observations": [D, 2, E]}
    over its D decisions, and the finished game).
    """
    game_state = cy_engine.CyGame(rules)
    game_state.deal(seed, game, 0)
    records = {name: [] for name in STATE_FIELDS}
    masks, observations = [], ([], [])  # each player's encodings, stacked once a game
    for action in actions:
        if action < 0:
            break
        snapshot = game_state.state_dict()
        for name in STATE_FIELDS:
            records[name].append(snapshot[name])
        masks.append(game_state.legal_mask_array())
        for p in (0, 1):
            observations[p].append(game_state.encode_array(p))
        game_state.apply(int(action))
    stacked = {name: np.stack(values) for name, values in records.items()}
    decisions = {
        "states": stacked,
        "masks": np.stack(masks),
        "observations": np.stack([np.stack(observations[p]) for p in (0, 1)], axis=1),
    }
    return decisions, game_state


def _assert_trees_all_equal(*trees, custom_message=None):
    """`chex.assert_trees_all_equal`'s verdict, cheaper on the thousands of games that
    pass: trees of one structure whose leaves are equal in shape and every value pass
    at once; anything else (a difference, a NaN, a broadcast) goes to chex, which
    passes it or names the leaf that differs."""
    structure, *others = (jax.tree.structure(tree) for tree in trees)
    leaves = zip(*(jax.tree.leaves(tree) for tree in trees), strict=True)
    if all(other == structure for other in others) and all(
        np.array_equal(first, rest) for first, *rests in leaves for rest in rests
    ):
        return
    chex.assert_trees_all_equal(*trees, custom_message=custom_message)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_games_identical_at_every_decision(variant):
    rules, n_games, batch = VARIANTS[variant]
    n = rules.n_cards
    batch_returns = jax.jit(jax.vmap(engine.returns, in_axes=(None, 0)), static_argnums=0)
    decisions = shown = 0
    for first in range(0, n_games, batch):
        games = jnp.arange(first, first + batch, dtype=jnp.int32)
        trajectory = jax.device_get(record_random_games(rules, SEED, 0, games))
        states, final_states = _fields(trajectory.states), _fields(trajectory.final)
        returns = np.asarray(batch_returns(rules, trajectory.final))
        for b in range(batch):
            actions = trajectory.actions[:, b]
            length = int(np.sum(actions >= 0))
            replay, final = _replay_on_cython(rules, SEED, first + b, actions)
            assert final.terminal, f"{variant} game {first + b} not over after {length} moves"
            cy_obs = replay["observations"]
            assert cy_obs.dtype == np.float32
            _assert_trees_all_equal(
                {
                    "decisions": replay,
                    "final": {"state": _fields(final.state_dict()), "returns": final.returns()},
                },
                {
                    "decisions": {
                        "states": {name: x[:length, b] for name, x in states.items()},
                        "masks": trajectory.masks[:length, b],
                        "observations": trajectory.observations[:length, b],
                    },
                    "final": {
                        "state": {name: x[b] for name, x in final_states.items()},
                        "returns": returns[b],
                    },
                },
                custom_message=f"{variant} game {first + b}",
            )
            # the own_known block is each player's own known_cards, the mirror of opp_known
            own_known = cy_obs[:, :, 7 * n : 8 * n]
            _assert_trees_all_equal(
                own_known, replay["states"]["known_cards"], cy_obs[:, ::-1, 5 * n : 6 * n]
            )
            shown += int(own_known.sum())
            decisions += length
    assert decisions > n_games  # every game took decisions
    assert shown > 0  # random play draws from piles, so the block was exercised


ENGINE_FUNCTIONS = ("init", "step", "legal_action_mask", "observe", "returns")
# random games of TINY per variant: eager dispatch is slow, so few games without jit
VARIANT_GAMES = {"with_jit": 12, "without_jit": 3}


class EngineFunctionsTest(chex.TestCase):
    """The unbatched engine functions, jitted and not, against CyGame, decision by decision."""

    @chex.variants(with_jit=True, without_jit=True)
    def test_engine_functions_match_cython(self):
        chex.clear_trace_counter()
        jitted = self.variant.type == chex.ChexVariantType.WITH_JIT
        functions = [getattr(engine, name) for name in ENGINE_FUNCTIONS]
        if jitted:  # same-shaped arguments all along: nothing may retrace
            functions = [chex.assert_max_traces(fn, n=1) for fn in functions]
        init, step, legal_action_mask, observe, returns = (
            self.variant(fn, static_argnums=0) for fn in functions
        )
        choices = np.random.default_rng(SEED)
        decisions = 0
        for game in range(VARIANT_GAMES["with_jit" if jitted else "without_jit"]):
            state = init(TINY, SEED, game, 0)
            cy_game = cy_engine.CyGame(TINY)
            cy_game.deal(SEED, game, 0)
            while not cy_game.terminal:
                cy_mask = cy_game.legal_mask_array()
                chex.assert_trees_all_equal(
                    {
                        "state": _fields(cy_game.state_dict()),
                        "mask": cy_mask,
                        "observations": [cy_game.encode_array(p) for p in (0, 1)],
                    },
                    {
                        "state": _fields(state),
                        "mask": legal_action_mask(TINY, state),
                        "observations": [observe(TINY, state, p) for p in (0, 1)],
                    },
                    custom_message=f"game {game}, decision {decisions}",
                )
                action = int(choices.choice(np.flatnonzero(cy_mask)))
                cy_game.apply(action)
                state = step(TINY, state, action)
                decisions += 1
            chex.assert_trees_all_equal(
                {"state": _fields(cy_game.state_dict()), "returns": cy_game.returns()},
                {"state": _fields(state), "returns": returns(TINY, state)},
                custom_message=f"game {game} at its end",
            )
        assert decisions > 0


# Colour 0 holds cards 0 (wager) and 1..4, colour 1 holds 5 (wager) and 6..9; H = 3.
SMALL = Rules(n_colors=2, n_ranks=4, n_wagers=1, hand_size=3, max_turns=20)
PLAY, DISCARD, DECK, PILE = (0, 1, 2), (3, 4, 5), 6, (7, 8)


def test_own_known_block_hand_built_game():
    """own_known holds exactly the cards a player took from a pile and still holds."""
    rules, n = SMALL, SMALL.n_cards
    deck = [0, 1, 4, 5, 6, 7, 2, 3, 8, 9]  # p0 [0, 1, 4], p1 [5, 6, 7], then 2, 3, 8, 9
    # (action, p0's own_known, p1's own_known after it)
    script = [
        (DISCARD[1], [], []),  # p0 discards 1 to pile 0
        (DECK, [], []),  # p0 draws 2 from the deck: never known -> [0, 2, 4]
        (DISCARD[0], [], []),  # p1 discards 5 to pile 1
        (PILE[0], [], [1]),  # p1 takes 1 from pile 0 in view of p0 -> [1, 6, 7]
        (DISCARD[2], [], [1]),  # p0 discards 4 to pile 0
        (PILE[1], [5], [1]),  # p0 takes 5 -> [0, 2, 5]
        (PLAY[0], [5], []),  # p1 plays the known 1: no longer held
        (DECK, [5], []),  # p1 draws 3 -> [3, 6, 7]
        (DISCARD[2], [], []),  # p0 discards the known 5 back to pile 1
        (PILE[0], [4], []),  # p0 takes its own discard 4 back -> [0, 2, 4]
        (DISCARD[0], [4], []),  # p1 discards 3 to pile 0
        (PILE[1], [4], [5]),  # p1 takes 5 -> [5, 6, 7]
    ]
    game = cy_engine.CyGame(rules)
    game.deal_from_order(np.array(deck))
    state = engine.init_from_deck(rules, jnp.array(deck))
    observe = jax.jit(engine.observe, static_argnums=0)
    for action, *expected in script:
        game.apply(action)
        state = engine.step(rules, state, action)
        assert not game.terminal
        for p in (0, 1):
            enc = game.encode_array(p)
            chex.assert_trees_all_equal(observe(rules, state, p), enc, custom_message=f"{p}")
            assert np.flatnonzero(enc[7 * n : 8 * n]).tolist() == expected[p], (action, p)
            # the opponent's opp_known block shows the same cards
            opp = game.encode_array(1 - p)
            assert np.flatnonzero(opp[5 * n : 6 * n]).tolist() == expected[p], (action, p)
    chex.assert_trees_all_equal(game.state_dict()["hands"], np.array([[0, 2, 4], [5, 6, 7]]))


@pytest.mark.parametrize("variant", ["default", "one_color", "six_colors"])
def test_batch_random_play_totals_agree(variant):
    rules, _, _ = VARIANTS[variant]
    games = jnp.arange(100, 164, dtype=jnp.int32)
    jax_stats = jax.device_get(play_random_games(rules, SEED, 3, games))
    cy_stats = cy_engine.play_random_games(rules, SEED, 3, 100, 64)
    totals = ("decisions", "truncated", "score_diff_sum", "checksum")
    chex.assert_trees_all_equal(
        {name: int(getattr(jax_stats, name)) for name in totals},
        {name: cy_stats[name] % 2**32 if name == "checksum" else cy_stats[name] for name in totals},
    )
    # the benchmark's no-encoding breakdown plays the very same games
    jax_bare = play_random_games(rules, SEED, 3, games, with_encoding=False)
    cy_bare = cy_engine.play_random_games(rules, SEED, 3, 100, 64, with_encoding=False)
    assert int(jax_bare.checksum) == cy_bare["checksum"] == cy_stats["checksum"]
    assert int(jax_bare.decisions) == cy_bare["decisions"]


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_deals_identical(variant):
    rules = VARIANTS[variant][0]
    for seed, game, iteration in [(0, 0, 0), (SEED, 7, 0), (2**32 - 1, 12345, 99)]:
        reference = rng.deal_order(rules.n_cards, seed, game, iteration)
        jax_deck = np.asarray(engine.deal_order(rules, seed, game, iteration))
        cy_game = cy_engine.CyGame(rules)
        cy_game.deal(seed, game, iteration)
        chex.assert_trees_all_equal(
            reference, jax_deck, cy_game.state_dict()["deck"], custom_message=f"{seed, game}"
        )
        assert sorted(reference.tolist()) == list(range(rules.n_cards))


def test_generator_identical_in_jax_c_and_python():
    words = np.random.default_rng(0).integers(0, 2**32, size=(5, 4000), dtype=np.uint64)
    words[:, :5] = [[0] * 5, [2**32 - 1] * 5, [1, 0, 0, 0, 0], [0, 0, 0, 0, 1], [7] * 5]
    words = words.astype(np.uint32)
    jax_bits = np.asarray(rng.random_bits(*[jnp.asarray(w) for w in words]))
    c_bits = cy_engine.random_bits_array(*words)
    chex.assert_trees_all_equal(jax_bits, c_bits)
    for column in range(50):
        assert rng.random_bits_py(*[int(w) for w in words[:, column]]) == int(c_bits[column])
    assert cy_engine.random_bits(1, 2, 3, 4, 5) == rng.random_bits_py(1, 2, 3, 4, 5)


def test_playable_pile_tops_identical_at_every_decision():
    """engine.playable_pile_tops, the piles `draws='playable'` keeps, against CyGame's at
    every decision of random games (card and draw phases, both movers)."""
    rules, games = Rules(), 200
    trajectory = record_random_games(rules, SEED, 0, jnp.arange(games, dtype=jnp.int32))
    tops = jax.jit(jax.vmap(jax.vmap(lambda state: engine.playable_pile_tops(rules, state))))
    expected = np.asarray(tops(trajectory.states))  # [decision, game, colour]
    actions = np.asarray(trajectory.actions)
    seen = 0
    for game in range(games):
        cy_game = cy_engine.CyGame(rules)
        cy_game.deal(SEED, game, 0)
        found = []
        for action in actions[:, game]:
            if action < 0:
                break
            found.append(cy_game.playable_pile_tops_array())
            cy_game.apply(int(action))
        chex.assert_trees_all_equal(
            np.stack(found), expected[: len(found), game], custom_message=f"game {game}"
        )
        seen += int(np.sum(found))
    assert 0 < seen < expected.size  # both answers occur
