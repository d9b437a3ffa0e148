"""Search at play time (lc_cfr.search): the determinization sampler's exact distribution,
common random numbers across candidates, k = 1 is the blueprint's own play, search is
worth something, one compile, bad options."""

import collections
import fractions
import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from traversal_helpers import dyadic_params

from lc_cfr import eval as lc_eval
from lc_cfr import search
from lc_cfr.bots import jax_bots
from lc_cfr.game import determinize, engine, moves
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.spiel import TINY_RULES
from lc_cfr.traversal import policy as pol

# The smoke variant of tests/test_eval.py: 12 cards, hands of 3, games of ~15 decisions.
RULES = Rules(n_colors=2, n_ranks=5, n_wagers=1, hand_size=3, bonus_threshold=5, max_turns=30)
SPEC = mlp.NetworkSpec(RULES.encoding_size, RULES.num_actions, hidden_size=32, num_layers=2)
SEED = 11
GAMES = 24
LANES = 8  # four lanes a seat: one phase of the evaluation loop, its cheapest compile
EVAL_GAMES = 8


def _params(key: int):
    return mlp.init_params(SPEC, jax.random.PRNGKey(key))


def _host(tree):
    return jax.tree.map(np.asarray, tree)


def _world(state, player) -> tuple:
    """What a determinization decides: the opponent's hand and the deck still to come."""
    x = _host(state)
    return tuple(x.hands[1 - player]), tuple(x.deck[x.deck_pos :])


@functools.cache
def _jitted(rules):
    """Single-state and batched engine functions, compiled once per rules."""
    return {
        "step": jax.jit(lambda s, a: engine.step(rules, s, a)),
        "mask": jax.jit(lambda s: engine.legal_action_mask(rules, s)),
        "batch_step": jax.jit(jax.vmap(lambda s, a: engine.step(rules, s, a), in_axes=(0, None))),
        "batch_observe": jax.jit(
            jax.vmap(lambda s, p: engine.observe(rules, s, p), in_axes=(0, None))
        ),
    }


def _random_histories(rules, deals, depths, seed=0):
    """(deck, actions, states) of random legal play: states[i] is after actions[:i]."""
    step, mask = _jitted(rules)["step"], _jitted(rules)["mask"]
    rand = np.random.RandomState(seed)
    for g in range(deals):
        deck = np.asarray(engine.deal_order(rules, seed, g))
        state = engine.init_from_deck(rules, deck)
        actions, states = [], [state]
        for _ in range(max(depths)):
            if bool(state.terminal):
                break
            action = int(rand.choice(np.flatnonzero(np.asarray(mask(state)))))
            state = step(state, action)
            actions.append(action)
            states.append(state)
        for depth in depths:
            if depth < len(states) and not bool(states[depth].terminal):
                yield deck, actions[:depth], states[: depth + 1]


def _chance_posterior(rules, actions, states) -> dict:
    """The exact posterior of the last state's mover over worlds: every deck order that
    replays `actions` legally and shows the mover what it saw at every step, counted
    (every deck order is equally likely; hands of one card make an action id mean the
    same move in every deck)."""
    player = int(states[-1].current_player)
    step, observe = _jitted(rules)["batch_step"], _jitted(rules)["batch_observe"]
    seen = [np.asarray(engine.observe(rules, s, player)) for s in states]
    decks = np.array(list(itertools.permutations(range(rules.n_cards))), np.int8)
    batch = jax.vmap(engine.init_from_deck, in_axes=(None, 0))(rules, jnp.asarray(decks))
    consistent = np.ones(len(decks), bool)
    for i in range(len(states)):
        consistent &= (np.asarray(observe(batch, player)) == seen[i]).all(axis=1)
        if i < len(actions):
            batch = step(batch, actions[i])
            consistent &= np.asarray(batch.illegal_player) < 0
    counts = collections.Counter(
        _world(jax.tree.map(lambda x, i=i: x[i], batch), player) for i in np.flatnonzero(consistent)
    )
    total = sum(counts.values())
    return {world: fractions.Fraction(c, total) for world, c in counts.items()}


def test_determinizations_enumerate_the_chance_posterior_exactly():
    """On the tiny variant every offset sequence of the Fisher-Yates shuffle is tried:
    the worlds come out with exactly the posterior probabilities of the deck orders."""
    rules = TINY_RULES
    n = rules.n_cards
    shuffle = jax.jit(
        jax.vmap(determinize.shuffle_hidden, in_axes=(None, None, 0)), static_argnums=0
    )
    hidden = jax.jit(determinize.hidden_positions, static_argnums=0)
    checked = known = 0
    for _, actions, states in _random_histories(rules, deals=12, depths=(0, 2, 3, 5)):
        state = states[-1]
        player = int(state.current_player)
        _, m = hidden(rules, state)
        m = int(m)
        offsets = np.array(
            [list(o) + [0] * (n - m) for o in itertools.product(*(range(m - i) for i in range(m)))],
            np.int32,
        )
        worlds = shuffle(rules, state, jnp.asarray(offsets))
        counts = collections.Counter(
            _world(jax.tree.map(lambda x, i=i: x[i], worlds), player) for i in range(len(offsets))
        )
        sampled = {w: fractions.Fraction(c, len(offsets)) for w, c in counts.items()}
        assert sampled == _chance_posterior(rules, actions, states)
        checked += 1
        known += bool(np.asarray(state.known_cards[1 - player]).any())
    assert checked >= 30 and known >= 1, (checked, known)


def test_determinize_keeps_what_the_mover_sees():
    """Random draws (`determinize`) on the smoke variant: the mover's observation and legal
    actions are unchanged, the deck stays a permutation, and worlds differ."""
    draw = jax.jit(jax.vmap(determinize.determinize, in_axes=(None, None, 0)), static_argnums=0)
    for _, _, states in _random_histories(RULES, deals=3, depths=(0, 7, 14)):
        state = states[-1]
        player = int(state.current_player)
        words = jax.random.bits(jax.random.key(len(states)), (64, RULES.n_cards), jnp.uint32)
        worlds = draw(RULES, state, words)
        obs = jax.vmap(engine.observe, in_axes=(None, 0, None))(RULES, worlds, player)
        mask = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(RULES, worlds)
        np.testing.assert_array_equal(
            obs, np.broadcast_to(engine.observe(RULES, state, player), obs.shape)
        )
        np.testing.assert_array_equal(mask[0], engine.legal_action_mask(RULES, state))
        assert (np.asarray(mask) == np.asarray(mask[:1])).all()
        decks = np.asarray(worlds.deck)
        assert (np.sort(decks, axis=1) == np.arange(RULES.n_cards)).all()
        assert len({tuple(d) for d in decks}) > 1


@pytest.mark.parametrize("rollout", search.ROLLOUT_MODES)
def test_candidates_share_worlds_and_random_numbers(rollout):
    """Common random numbers: a candidate listed twice gets the same margins in every
    world, bit for bit, while worlds and candidates differ."""
    options = search.SearchOptions(determinizations=8, candidates=3, rollout=rollout)
    blueprint = search.network_blueprint(RULES, SPEC, "average_strategy", _params(0))
    margins = jax.jit(
        lambda s, a: search.rollout_margins(RULES, options, blueprint, s, a, SEED, 5, 3)
    )
    varied = False
    for _, _, states in _random_histories(RULES, deals=4, depths=(2, 6)):
        state = states[-1]
        legal = np.flatnonzero(np.asarray(engine.legal_action_mask(RULES, state)))
        a, b = int(legal[0]), int(legal[-1])
        m = np.asarray(margins(state, jnp.array([a, a, b], jnp.int32)))
        np.testing.assert_array_equal(m[0], m[1])
        varied |= np.ptp(m[0]) > 0 and (m[0] != m[2]).any()
    assert varied, "the worlds and the candidates should change some margins"


def test_search_with_one_candidate_plays_the_blueprint():
    """k = 1 tries only the blueprint's most probable action: a search over a bot makes
    the bot's moves, and in the evaluation loop a search over a view plays the greedy
    view's games, record for record (head to head against that view)."""
    one = search.SearchOptions(determinizations=2, candidates=1)
    bot = search.bot_blueprint(RULES, "safe_heuristic")

    @jax.jit
    def both(state):
        mask = engine.legal_action_mask(RULES, state)
        found = search.search(RULES, one, bot, state, mask, SEED, 1, 2)
        return found.action, jax_bots.bot_action(RULES, "safe_heuristic", state, 0, 0, 0, 0)

    for _, _, states in _random_histories(RULES, deals=4, depths=(0, 3, 8, 13)):
        searched, played = both(states[-1])
        assert int(searched) == int(played)
    # Head to head against the greedy view itself. Dyadic weights: the search's one-row
    # forward and the view's batched ones agree bit for bit, so a near-tie cannot part them.
    params = dyadic_params(jax.random.PRNGKey(3), spec=SPEC)
    view = lc_eval.network_agent("average_strategy", draws="playable")
    records = [
        lc_eval.play(
            RULES,
            SPEC,
            agent,
            view,
            params,
            opponent_params=params,
            games=EVAL_GAMES,
            seed=SEED,
            lanes=8,
        ).records
        for agent in (view, lc_eval.network_agent("average_strategy", draws="playable", search=one))
    ]
    for name in lc_eval.GameRecords._fields:
        np.testing.assert_array_equal(getattr(records[0], name), getattr(records[1], name))
    # the view against itself, mirrored: every deal's two games are the same game
    np.testing.assert_array_equal(records[0].margin[0], -records[0].margin[1])
    assert records[0].decisions.min() > 4


def test_cut_rollouts_stop_at_the_searchers_decision_and_read_the_value_network():
    """With leaf_decisions L, a rollout stops at the searcher's first decision at least L
    rollout decisions after the candidate and its margin is the value network's sum_a
    sigma(a) Q(h, a) there (sigma the greedy rollout's choice, in points); a game over
    before then keeps its final margin; and an L past every game's end is the plain
    search, bit for bit. The reference plays each world alone, step by step."""
    cut, scale, d = 3, 100.0, 4
    options = search.SearchOptions(determinizations=d, candidates=2, leaf_decisions=cut)
    params = dyadic_params(jax.random.PRNGKey(5), spec=SPEC)  # one row = a batch's row
    value = mlp.init_params(search.traversal_api.value_spec(RULES, SPEC), jax.random.PRNGKey(6))
    guided = search.with_value(options, params, value, scale)
    blueprint = search.network_blueprint(RULES, SPEC, "average_strategy", params)

    @jax.jit
    def greedy(world):
        """The greedy rollout's sigma at one world: one-hot on the blueprint's choice."""
        probs = blueprint(jax.tree.map(lambda x: x[None], world), jnp.zeros(1, jnp.uint32))
        mask = engine.legal_action_mask(RULES, world)
        best = pol.greedy_action(probs[0], mask, RULES.n_colors)  # tests/test_eval.py holds it
        return jax.nn.one_hot(best, RULES.num_actions)

    @jax.jit
    def leaf(world, sigma, player):
        one = jax.tree.map(lambda x: x[None], world)
        return search.value_leaf(RULES, SPEC, value, scale)(one, sigma[None], player)[0]

    def searched(options, read):
        return jax.jit(
            lambda s: search.search_named(
                RULES, options, "average_strategy", read, s, SEED, 2, 7, spec=SPEC
            )
        )

    cut_search = searched(options, guided)
    plain = searched(options._replace(leaf_decisions=0), params)
    past = searched(options._replace(leaf_decisions=search.rollout_span(RULES)), guided)
    step = _jitted(RULES)["step"]
    kinds = collections.Counter()
    for _, _, states in _random_histories(RULES, deals=3, depths=(1, 9)):
        state = states[-1]
        player = int(state.current_player)
        found, full = cut_search(state), plain(state)
        np.testing.assert_array_equal(past(state).margins, full.margins)
        worlds = search.draw_worlds(RULES, d, state, SEED, 2, 7)
        for j, action in enumerate(np.asarray(found.candidates)):
            for w in range(d):
                world = step(jax.tree.map(lambda x, w=w: x[w], worlds), int(action))
                t = 0
                while not bool(world.terminal) and (t < cut or int(world.current_player) != player):
                    world = step(world, int(jnp.argmax(greedy(world))))
                    t += 1
                if bool(world.terminal):
                    expected = float(engine.returns(RULES, world)[player])
                    assert found.margins[j, w] == full.margins[j, w] == expected
                    kinds["ended"] += 1
                else:
                    expected = float(leaf(world, greedy(world), player))
                    np.testing.assert_allclose(found.margins[j, w], expected, rtol=1e-5, atol=1e-4)
                    kinds["cut"] += 1
    assert kinds["cut"] > 0, kinds


def test_the_paired_stderr_prices_noisy_deviations():
    """stderr_weight z takes z standard errors of a candidate's per-world difference to the
    blueprint's first choice off its score: a steady gain in every world costs nothing,
    the same mean gain from one lucky world costs z times its error."""
    margins = jnp.array([[0.0, 10.0, -10.0, 0.0], [2.0, 12.0, -8.0, 2.0], [8.0, 10.0, -10.0, 0.0]])
    se = np.asarray(search.paired_stderr(margins))
    np.testing.assert_allclose(se, [0.0, 0.0, np.std([8, 0, 0, 0], ddof=1) / 2], rtol=1e-6)
    assert float(search.paired_stderr(margins[:, :1]).sum()) == 0.0  # one world: no error

    options = search.SearchOptions(determinizations=8, candidates=3, prior_weight=1.0)
    options = options._replace(stderr_weight=2.0)
    blueprint = search.network_blueprint(RULES, SPEC, "average_strategy", _params(0))
    found = jax.jit(lambda s, m: search.search(RULES, options, blueprint, s, m, SEED, 2, 4))
    for _, _, states in _random_histories(RULES, deals=3, depths=(2, 7)):
        state = states[-1]
        result = found(state, engine.legal_action_mask(RULES, state))
        m = np.asarray(result.margins, np.float64)
        legal = float(np.asarray(engine.legal_action_mask(RULES, state)).sum())
        pi = np.asarray(result.policy, np.float64)[np.asarray(result.candidates)]
        mixed = (1 - search.PRIOR_UNIFORM_SHARE) * pi + search.PRIOR_UNIFORM_SHARE / legal
        diff = m - m[:1]
        expected = m.mean(1) + np.log(mixed) - 2.0 * diff.std(1, ddof=1) / np.sqrt(8)
        tried = np.asarray(result.tried)
        np.testing.assert_allclose(
            np.asarray(result.scores)[tried], expected[tried], rtol=1e-4, atol=1e-3
        )
        assert int(result.action) == int(np.asarray(result.candidates)[np.argmax(result.scores)])


def test_search_over_sd_cfr_with_one_candidate_plays_its_snapshots():
    """The sd_cfr blueprint: each block of deals searches over its snapshot's regret
    matching; with one candidate the search plays the sd_cfr view's games."""
    keys = jax.random.split(jax.random.PRNGKey(5), 4)
    nets = [dyadic_params(k, spec=SPEC) for k in keys]
    stack = lambda *trees: jax.tree.map(lambda *x: jnp.stack(x), *trees)  # noqa: E731
    snapshots = lc_eval.Snapshots(advantage=(stack(*nets[:2]), stack(*nets[2:])), count=2)
    common = {"opponents": ["safe_heuristic"], "games": EVAL_GAMES, "seed": SEED, "lanes": 8}
    plain = lc_eval.evaluate(RULES, SPEC, {"sd_cfr": snapshots}, **common)
    one = search.SearchOptions(determinizations=2, candidates=1)
    searched = lc_eval.evaluate_search(RULES, SPEC, "sd_cfr", snapshots, one, **common)
    for metric in lc_eval.METRICS:
        key = f"safe_heuristic/{metric}"
        assert searched[f"eval/search/{key}"] == plain[f"eval/sd_cfr/{key}"], metric


# Search over `random` (every legal move a candidate, no prior): the lockstep games are
# played once per module and checked twice below.
RANDOM_SEARCH = search.SearchOptions(determinizations=8, candidates=0, prior_weight=0.0)


@pytest.fixture(scope="module")
def random_search():
    agent = lc_eval.bot_agent("random", search=RANDOM_SEARCH)
    return lc_eval.play(RULES, None, agent, "random", None, games=GAMES, seed=SEED, lanes=LANES)


def test_search_beats_its_blueprint_and_compiles_once(random_search):
    """Search over `random` beats `random` (which is even against itself, mirrored) by a
    clear margin; a second evaluation with another seed reuses the compiled program."""
    margins = random_search.records.margin.astype(float).ravel()
    stderr = margins.std(ddof=1) / np.sqrt(margins.size)
    assert margins.mean() > 3 * stderr and margins.mean() > 10, (margins.mean(), stderr)
    traces = lc_eval.trace_count()
    agent = lc_eval.bot_agent("random", search=RANDOM_SEARCH)
    again = lc_eval.play(
        RULES, None, agent, "random", None, games=GAMES, seed=SEED + 1, lanes=LANES
    )
    assert lc_eval.trace_count() == traces and again.compile_seconds == 0.0


def test_openspiel_search_player_plays_the_lockstep_games(random_search):
    """The OpenSpiel loop's SearchPlayer (one search a decision, on a copy of the Cython
    engine's state, whose unseen deck lies in another order) plays the lockstep search's
    games, record for record; with the opponent model too, whose public moves the
    lockstep loop records as it steps and the OpenSpiel player reads from its
    information-state string."""
    pytest.importorskip("pyspiel")
    from lc_cfr.spiel import bots as spiel_bots

    player = spiel_bots.SearchPlayer(RULES, RANDOM_SEARCH, blueprint="random", seed=SEED)
    opponent = spiel_bots.LcBot("random", SEED)
    result = spiel_bots.play_mirrored(RULES, player, opponent, deals=GAMES // 2, seed=SEED)
    for name in lc_eval.GameRecords._fields:
        np.testing.assert_array_equal(
            np.asarray(result.records[name]), getattr(random_search.records, name), err_msg=name
        )
    # Over safe_heuristic against safe_heuristic the model's weights are sharp.
    model = search.SearchOptions(determinizations=4, candidates=2, opponent_model="blueprint")
    deals = 3
    lockstep = lc_eval.play(
        RULES,
        None,
        lc_eval.bot_agent("safe_heuristic", search=model),
        "safe_heuristic",
        None,
        games=2 * deals,
        seed=SEED,
        lanes=LANES,
    )
    player = spiel_bots.SearchPlayer(RULES, model, blueprint="safe_heuristic", seed=SEED)
    opponent = spiel_bots.LcBot("safe_heuristic", SEED)
    result = spiel_bots.play_mirrored(RULES, player, opponent, deals=deals, seed=SEED)
    for name in lc_eval.GameRecords._fields:
        np.testing.assert_array_equal(
            np.asarray(result.records[name]), getattr(lockstep.records, name), err_msg=name
        )


@pytest.mark.parametrize(
    "change, flag",
    [
        ({"determinizations": 0}, "--search_determinizations"),
        ({"candidates": RULES.num_actions + 1}, "--search_candidates"),
        ({"candidates": -1}, "--search_candidates"),
        ({"prior_weight": -1.0}, "--search_prior_weight"),
        ({"stderr_weight": -0.5}, "--search_stderr_weight"),
        ({"rollout": "wide"}, "--search_rollout"),
        ({"opponent_model": "oracle"}, "--search_opponent_model"),
        ({"world_pool": 0}, "--search_world_pool"),
        ({"evidence_weight": -1.0}, "--search_evidence_weight"),
        ({"min_effective_share": 1.5}, "--search_min_effective_share"),
        ({"leaf_decisions": -1}, "--search_leaf_decisions"),
    ],
)
def test_bad_options_name_the_flag(change, flag):
    options = search.SearchOptions()._replace(**change)
    with pytest.raises(ValueError, match=flag):
        search.check_options(options, RULES)
    with pytest.raises(ValueError, match=flag):
        lc_eval.play(
            RULES, None, lc_eval.bot_agent("random", search=options), "random", None, games=2
        )


RULES_FLAG = "n_colors=2,n_ranks=5,n_wagers=1,hand_size=3,bonus_threshold=5,max_turns=30"


@pytest.mark.parametrize(
    "change, flag",
    [
        ({"search_options": search.SearchOptions(determinizations=0)}, "--search_determinizations"),
        ({"search_options": search.SearchOptions(candidates=99)}, "--search_candidates"),
        ({"search_blueprint": "strategy", "agent": None, "workdir": "RUN"}, "--search_blueprint"),
        ({"agent": "openspiel_ismcts"}, "not on an OpenSpiel bot"),
        ({"opponents": "average_strategy"}, "--opponents"),  # head to head needs a run
        # a bot has no value network to value cut rollouts with
        ({"search_options": search.SearchOptions(leaf_decisions=8)}, "--search_leaf_decisions"),
    ],
)
def test_cli_refuses_bad_search_flags(change, flag):
    from absl import app

    from lc_cfr import evaluate

    request = {"agent": "random", "views": "search", "rules": RULES_FLAG, **change}
    with pytest.raises(app.UsageError, match=flag):
        evaluate.parse_request(**request)


# ----- the opponent model ----------------------------------------------------------------


def _history(rules, actions, states) -> np.ndarray:
    """[T] the public moves of `actions` taken in `states`, as the callers record them."""
    record = search.jitted_record(rules)
    history = search.empty_history(rules)
    for action, state in zip(actions, states, strict=False):
        history = record(history, state, np.int32(action))
    return np.asarray(history)


def _same_state(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
    )


def test_every_world_replays_from_its_deal_with_the_public_moves():
    """A game's public moves (cards, not hand slots) replayed from a world's own deal end
    in that world, field for field: the real game's and 15 determinizations' at every
    depth, which is what lets the opponent model read the opponent's past hands."""
    replay = jax.jit(
        jax.vmap(lambda deck, h, n: moves.replay(RULES, deck, h, n), in_axes=(0, None, None))
    )
    draw = jax.jit(lambda s: search.draw_worlds(RULES, 15, s, SEED, 3, 5))
    checked = 0
    for deck, actions, states in _random_histories(RULES, deals=3, depths=(1, 6, 11, 16)):
        state, history = states[-1], _history(RULES, actions, states)
        count = len(actions)
        assert (history[:count] >= 0).all() and (history[count:] == moves.NO_MOVE).all()
        worlds = draw(state)
        decks = jnp.concatenate([jnp.asarray(deck, jnp.int8)[None], worlds.deck])
        again = replay(decks, history, count)  # one shape: one compile
        assert _same_state(jax.tree.map(lambda x: x[0], again), state)
        assert _same_state(jax.tree.map(lambda x: x[1:], again), worlds)
        checked += 1
    assert checked >= 9


def test_the_opponent_model_weighs_worlds_by_the_opponents_moves():
    """Over a bot blueprint the likelihood is exact to check, one world at a time with the
    bot itself: each of the opponent's moves counts log((1 - share) + share / legal) where
    the bot would have made it and log(share / legal) where not; in the real world it
    made every one, and some drawn worlds contradict a move."""
    rules, name = RULES, "safe_heuristic"
    step, mask_of = _jitted(rules)["step"], _jitted(rules)["mask"]
    bot = jax.jit(lambda s: jax_bots.bot_action(rules, name, s, 0, 0, 0, 0))
    blueprint = search.bot_blueprint(rules, name)
    pool = jax.jit(lambda s: search.draw_worlds(rules, 16, s, SEED, 1, 9))
    likelihood = jax.jit(
        lambda w, h, s: search.opponent_log_likelihood(rules, blueprint, w, h, s, SEED, 1, 9)
    )
    share = search.PRIOR_UNIFORM_SHARE
    contradicted, checked = False, 0
    for g in range(6):
        # player 1 plays the bot, player 0 random legal moves, up to a decision of player 0
        rand = np.random.RandomState(g)
        state = engine.init(rules, SEED, g)
        actions, states = [], []
        while not bool(state.terminal) and (len(actions) < 6 + g or int(state.current_player)):
            if int(state.current_player) == 1:
                action = int(bot(state))
            else:
                action = int(rand.choice(np.flatnonzero(np.asarray(mask_of(state)))))
            actions.append(action)
            states.append(state)
            state = step(state, action)
        if bool(state.terminal):
            continue
        checked += 1
        history = _history(rules, actions, states)
        worlds = pool(state)
        real = jax.tree.map(lambda x: x[None], state)
        both = jax.tree.map(lambda a, b: jnp.concatenate([a, b]), real, worlds)
        got = np.asarray(likelihood(both, history, state), np.float64)
        expected, misses = [], []
        for i in range(both.deck.shape[0]):
            world = engine.init_from_deck(rules, both.deck[i])
            total, missed = 0.0, 0
            for code in history[: len(actions)]:
                action = int(moves.move_action(rules, world, int(code)))
                if int(world.current_player) == 1:
                    legal = float(np.asarray(mask_of(world)).sum())
                    hit = float(int(bot(world)) == action)
                    total += np.log((1 - share) * hit + share / legal)
                    missed += not hit
                world = step(world, action)
            expected.append(total)
            misses.append(missed)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
        assert misses[0] == 0
        contradicted |= max(misses) > 0
    assert checked >= 3 and contradicted, (checked, "some world should contradict a move")


def test_resampling_keeps_each_world_in_proportion_to_its_weight():
    """Systematic resampling: world i is kept floor(D w_i) or one more times; equal
    weights with as many worlds as kept keep each world once, in order."""
    weights = np.array([0.4, 0.3, 0.2, 0.1])  # 8 w: 3.2, 2.4, 1.6, 0.8
    for word in (0, 2**30, 2**31, 2**32 - 1):
        kept = np.asarray(search.resample(jnp.log(jnp.asarray(weights)), 8, np.uint32(word)))
        counts = np.bincount(kept, minlength=4)
        assert counts.sum() == 8
        assert ((counts >= np.floor(8 * weights)) & (counts <= np.ceil(8 * weights))).all()
    for word in (0, 12345, 2**32 - 1):
        kept = search.resample(jnp.zeros(8), 8, np.uint32(word))
        np.testing.assert_array_equal(kept, np.arange(8))
    assert float(search.effective_worlds(jnp.zeros(8))) == pytest.approx(8.0)
    assert float(search.effective_worlds(jnp.log(jnp.asarray(weights)))) == pytest.approx(
        1 / np.sum(weights**2), rel=1e-5
    )


def test_tempering_keeps_the_largest_power_above_the_floor():
    """The tempered power is the largest e <= the flag's whose weights keep the floor of
    effective worlds: the flag's own when it does, else a crossing found to float
    precision (just above it the floor is lost); no power is needed for equal worlds."""
    rand = np.random.RandomState(0)
    for spread in (0.1, 3.0, 30.0):
        log_likelihood = jnp.asarray(spread * rand.standard_normal(64), jnp.float32)
        for most, floor in ((1.0, 8.0), (0.3, 32.0), (1.0, 63.0)):
            e = float(search.tempered_weight(log_likelihood, most, floor))
            most = float(np.float32(most))
            assert 0.0 <= e <= most
            assert float(search.effective_worlds(e * log_likelihood)) >= floor * (1 - 1e-5)
            if e < most:
                above = min(most, e * (1 + 1e-3) + 1e-6)
                assert float(search.effective_worlds(above * log_likelihood)) < floor
    assert float(search.effective_worlds(3.0 * jnp.arange(64.0))) < 8  # collapsed at e = 1
    assert float(search.tempered_weight(jnp.zeros(64), 1.0, 64.0)) == 1.0


def test_redrawing_the_undealt_deck_keeps_the_worlds_past():
    """A kept world's deck order past deck_pos is redrawn: its hands, piles, expeditions
    and dealt cards stay, the undealt cards are a permutation of its own, and copies of
    one world (what resampling makes) part ways in the cards they will draw."""
    redraw = jax.jit(lambda worlds, words: search.redraw_undealt(RULES, worlds, words))
    for _, _, states in _random_histories(RULES, deals=2, depths=(4, 9)):
        world = search.draw_worlds(RULES, 1, states[-1], SEED, 0, 0)
        copies = jax.tree.map(lambda x: jnp.repeat(x, 8, axis=0), world)
        words = jax.random.bits(jax.random.PRNGKey(5), (8, RULES.n_cards), jnp.uint32)
        new, old = _host(redraw(copies, words)), _host(copies)
        cut = int(old.deck_pos[0])
        for name in ("hands", "discards", "expedition_cards", "known_cards", "deck_pos"):
            np.testing.assert_array_equal(getattr(new, name), getattr(old, name), err_msg=name)
        np.testing.assert_array_equal(new.deck[:, :cut], old.deck[:, :cut])
        np.testing.assert_array_equal(np.sort(new.deck[:, cut:]), np.sort(old.deck[:, cut:]))
        assert len({tuple(row[cut:]) for row in new.deck}) > 1


def test_the_opponent_model_without_evidence_is_the_plain_search():
    """evidence_weight 0 and a pool of D worlds weigh every world alike and keep each
    once: the worlds are the plain search's but for the redrawn order of their undealt
    cards, the blueprint's candidates are the same and the effective worlds are D; with
    evidence the worlds change. A caller without the game's moves is refused by name."""
    blueprint = search.network_blueprint(RULES, SPEC, "average_strategy", _params(2))
    plain = search.SearchOptions(determinizations=8, candidates=0)
    flat = plain._replace(opponent_model="blueprint", world_pool=1, evidence_weight=0.0)
    weighed = plain._replace(opponent_model="blueprint", world_pool=4)

    @jax.jit
    def three(state, history):
        mask = engine.legal_action_mask(RULES, state)
        found = [
            search.search(RULES, o, blueprint, state, mask, SEED, 4, 6, history)
            for o in (plain, flat, weighed)
        ]
        worlds = [
            search.searched_worlds(RULES, o, blueprint, state, history, SEED, 4, 6)[0]
            for o in (plain, flat)
        ]
        return found, worlds

    changed = False
    for _, actions, states in _random_histories(RULES, deals=3, depths=(5, 12)):
        (a, b, c), (mine, theirs) = three(states[-1], _history(RULES, actions, states))
        for name in ("candidates", "tried", "policy"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        assert float(b.effective_worlds) == pytest.approx(8.0) and float(b.evidence_weight) == 0
        mine, theirs = _host(mine), _host(theirs)
        cut = int(mine.deck_pos[0])
        np.testing.assert_array_equal(mine.hands, theirs.hands)
        np.testing.assert_array_equal(mine.deck[:, :cut], theirs.deck[:, :cut])
        np.testing.assert_array_equal(np.sort(mine.deck[:, cut:]), np.sort(theirs.deck[:, cut:]))
        changed |= bool((np.asarray(c.margins) != np.asarray(a.margins)).any())
        assert 4.0 * (1 - 1e-5) <= float(c.effective_worlds) <= 32.001  # floor D / 2 of 32
        assert 0.0 <= float(c.evidence_weight) <= 1.0
    assert changed
    with pytest.raises(ValueError, match="public moves"):
        search.search(
            RULES,
            weighed,
            blueprint,
            states[-1],
            engine.legal_action_mask(RULES, states[-1]),
            SEED,
            1,
            1,
        )
