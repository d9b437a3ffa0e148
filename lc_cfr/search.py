"""Determinized rollout search over a blueprint policy (docs/search.md).

At a decision of the searching player: D worlds it cannot tell from the real one
(`lc_cfr.game.determinize`, the chance posterior of its information state); the k most
probable legal actions of the blueprint; every candidate played in every world and the
game finished by the blueprint on both seats; the candidate of the best mean final margin
plus c * log pi(a), less z standard errors of its paired difference to the blueprint's
first choice, is played. This is Monte Carlo determinization as in GIB (Ginsberg 2001,
"GIB: Imperfect Information in a Computationally Challenging Game") with the rollouts of
policy improvement by Monte Carlo search (Tesauro and Galperin 1996, "On-line Policy
Improvement using Monte-Carlo Search"); the prior term and the paired one keep the
blueprint's choice unless the rollouts' evidence beats their noise (the first prices a
deviation by how unlikely the blueprint finds it, the second by how noisy the worlds'
verdict on it is).

An opponent model, optional (`opponent_model="blueprint"`): the chance posterior above
ignores what the opponent chose to do. With the model, M = world_pool * D worlds are drawn,
each is replayed from its deal with the game's public moves (`lc_cfr.game.moves`), and
weighted by the blueprint's likelihood of every move the opponent made in it, raised to
the power `evidence_weight` (1: the Bayesian posterior of a searcher who believes the
opponent plays the blueprint; below 1 a tempered one, which trusts a wrong model less);
D of them are kept by systematic resampling in proportion to their weights (Kitagawa
1996), and each kept world's undealt deck is reshuffled (`redraw_undealt`). Where the
weights would collapse onto a few worlds, the power is lowered until they are worth
`min_effective_share` * D independent ones (`tempered_weight`). This is the likelihood
weighting of GIB's successors and of particle-filter belief tracking (Silver and Veness
2010, "Monte-Carlo Planning in Large POMDPs"), with the weights computed afresh at every
search instead of tracked from move to move.

Common random numbers: every candidate meets the same D worlds, and at rollout decision
t of world d every candidate's lane draws the same random words (keyed by (d, t), never
by the candidate), so the margins of two candidates differ by what their action changed,
not by the luck of their rollouts.

Rollouts cut at a learned value, optional (`leaf_decisions` L > 0): every rollout stops at
the searcher's first decision at least L decisions after the candidate (the network is
trained at its player's own decisions) and the world's leaf is valued by the run's
history value network (the one the traversal's value leaves read,
`lc_cfr.traversal.lockstep`), as sum_a sigma(a) Q(h, a) for the rollout's own policy
sigma at the leaf (the blueprint's greedy action, `policy.greedy_action`, when greedy):
Monte Carlo search with a learned leaf evaluation, as in AlphaGo's rollouts-and-value mix
(Silver et al. 2016) and the depth-limited search of Brown, Sandholm and Amos 2018 ("Depth-Limited
Solving for Imperfect-Information Games").
The network sees the whole position but the deck's order, so a world's leaf value
averages the draws to come where a rollout plays one of them, and a decision costs
about L / (decisions left) of a full rollout's.

Vectorised: the k x D rollouts are lanes of one `lax.while_loop` that takes one decision
in every lane per step (all lanes start at the same phase, so one network serves them);
`search` is a pure function of one game and is vmapped over games by its callers
(`lc_cfr.eval.games` runs one search per agent lane per step).

A blueprint is a function `(states [B], words [B] uint32) -> probs [B, A]`: the policy of
the player to move in each state, zero off its legal actions (`network_blueprint`,
`bot_blueprint`); `words` are per-lane random words that a noisy bot keys its noise by.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from lc_cfr.bots import check_bot_name, jax_bots
from lc_cfr.game import determinize, engine, moves, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import api as traversal_api
from lc_cfr.traversal import policy as pol

Blueprint = Callable[[engine.State, jax.Array], jax.Array]
# (states [B], sigma [B, A] the rollout's policy at them, player []) -> [B] float32 the
# positions' values for `player`, points (`value_leaf`).
LeafValue = Callable[[engine.State, jax.Array, jax.Array], jax.Array]

# How the blueprint plays the rollouts: its greedy action (`policy.greedy_action`) or a
# draw from it.
ROLLOUT_MODES = ("greedy", "sampled")
# Blueprint views of a trained run that search may stand on.
BLUEPRINT_VIEWS = ("average_strategy", "current")
# How the worlds weigh the opponent's observed moves: not at all (the chance posterior),
# or by their likelihood under the blueprint.
OPPONENT_MODELS = ("none", "blueprint")
# The prior term reads log pi'(a) with pi' = (1 - share) pi + share * uniform(legal): a
# one-hot blueprint (a bot, or regret matching that zeroed an action) then prices an
# action it never plays at a finite number of points instead of excluding it. The
# opponent model reads the opponent's moves through the same pi', so a move the
# blueprint never makes lowers a world's weight instead of ruling every world out.
PRIOR_UNIFORM_SHARE = 0.05


class SearchOptions(NamedTuple):
    """What one search does (static and hashable: one compiled program per value)."""

    determinizations: int = 16  # D: worlds per decision
    candidates: int = 4  # k: the blueprint's most probable legal actions tried; 0 = all
    prior_weight: float = 2.0  # c: points per unit of log pi'(a) added to a mean margin
    rollout: str = "greedy"  # ROLLOUT_MODES: how the blueprint plays the rollouts
    # z: points per standard error of a candidate's per-world margin difference to the
    # blueprint's first choice, taken off its score (`paired_stderr`); 0 = off
    stderr_weight: float = 0.0
    opponent_model: str = "none"  # OPPONENT_MODELS: how the worlds weigh its moves
    world_pool: int = 4  # the model draws world_pool * D worlds and keeps D by weight
    evidence_weight: float = 1.0  # the power of the model's likelihood (1: Bayes' rule)
    # the model lowers the power below evidence_weight as far as needed to keep the
    # pool's effective worlds at min_effective_share * D or more (`tempered_weight`); 0 = off
    min_effective_share: float = 0.5
    # L: rollout decisions after the candidate before the run's value network values the
    # world's leaf (`value_leaf`); 0 = every rollout plays to the end of the game
    leaf_decisions: int = 0


def check_options(options: SearchOptions, rules: Rules, *, prefix: str = "--search_") -> None:
    """Raises ValueError naming the option (`prefix` + field) of a bad value."""
    d, k = options.determinizations, options.candidates
    if not isinstance(d, int) or isinstance(d, bool) or d < 1:
        raise ValueError(f"{prefix}determinizations must be an int >= 1, got {d!r}")
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= rules.num_actions:
        raise ValueError(
            f"{prefix}candidates must be an int in [0, {rules.num_actions}] (the game's "
            f"action count; 0 = every legal action), got {k!r}"
        )
    pool = options.world_pool
    if not isinstance(pool, int) or isinstance(pool, bool) or pool < 1:
        raise ValueError(f"{prefix}world_pool must be an int >= 1, got {pool!r}")
    if options.opponent_model not in OPPONENT_MODELS:
        raise ValueError(
            f"{prefix}opponent_model must be one of {list(OPPONENT_MODELS)}, "
            f"got {options.opponent_model!r}"
        )
    for name in ("prior_weight", "stderr_weight", "evidence_weight"):
        value = getattr(options, name)
        if not isinstance(value, int | float) or isinstance(value, bool) or not value >= 0:
            raise ValueError(f"{prefix}{name} must be a number >= 0, got {value!r}")
    share = options.min_effective_share
    if not isinstance(share, int | float) or isinstance(share, bool) or not 0 <= share <= 1:
        raise ValueError(f"{prefix}min_effective_share must be a number in [0, 1], got {share!r}")
    leaf = options.leaf_decisions
    if not isinstance(leaf, int) or isinstance(leaf, bool) or leaf < 0:
        raise ValueError(
            f"{prefix}leaf_decisions must be an int >= 0 (0 = rollouts to the end), got {leaf!r}"
        )
    if options.rollout not in ROLLOUT_MODES:
        raise ValueError(
            f"{prefix}rollout must be one of {list(ROLLOUT_MODES)}, got {options.rollout!r}"
        )


def define_flags(flag_values=None) -> dict:
    """Defines the command lines' --search_<field> flags (absl) on `flag_values` (the
    global FLAGS by default); returns the flag holders by SearchOptions field."""
    from absl import flags

    default = SearchOptions()
    where = {"flag_values": flag_values} if flag_values is not None else {}
    return {
        "determinizations": flags.DEFINE_integer(
            "search_determinizations",
            default.determinizations,
            "Search: worlds a decision.",
            **where,
        ),
        "candidates": flags.DEFINE_integer(
            "search_candidates",
            default.candidates,
            "Search: the blueprint's most probable legal actions tried (0 = all).",
            **where,
        ),
        "prior_weight": flags.DEFINE_float(
            "search_prior_weight",
            default.prior_weight,
            "Search: points per unit of log pi(a) added to a candidate's mean margin.",
            **where,
        ),
        "rollout": flags.DEFINE_string(
            "search_rollout",
            default.rollout,
            f"Search: how the blueprint plays the rollouts ({' | '.join(ROLLOUT_MODES)}).",
            **where,
        ),
        "stderr_weight": flags.DEFINE_float(
            "search_stderr_weight",
            default.stderr_weight,
            "Search: points per standard error of a candidate's paired difference to the "
            "blueprint's first choice, taken off its score (0 = off).",
            **where,
        ),
        "opponent_model": flags.DEFINE_string(
            "search_opponent_model",
            default.opponent_model,
            "Search: how the worlds weigh the opponent's observed moves "
            f"({' | '.join(OPPONENT_MODELS)}: by their likelihood under the blueprint).",
            **where,
        ),
        "world_pool": flags.DEFINE_integer(
            "search_world_pool",
            default.world_pool,
            "Search, opponent model: worlds drawn per world kept.",
            **where,
        ),
        "evidence_weight": flags.DEFINE_float(
            "search_evidence_weight",
            default.evidence_weight,
            "Search, opponent model: the power of the opponent's likelihood in a world's "
            "weight (1 = Bayes' rule, 0 = none).",
            **where,
        ),
        "min_effective_share": flags.DEFINE_float(
            "search_min_effective_share",
            default.min_effective_share,
            "Search, opponent model: the evidence weight is lowered until the weighted "
            "worlds are worth at least this share of D independent ones (0 = never).",
            **where,
        ),
        "leaf_decisions": flags.DEFINE_integer(
            "search_leaf_decisions",
            default.leaf_decisions,
            "Search: rollout decisions before the run's value network values the leaf "
            "(0 = rollouts to the end of the game).",
            **where,
        ),
    }


def options_from_flags(holders: dict) -> SearchOptions:
    """The SearchOptions of `define_flags`' holders (after parsing)."""
    return SearchOptions(**{name: holder.value for name, holder in holders.items()})


def width(options: SearchOptions, rules: Rules) -> int:
    """K, the candidate slots of a search: k, or for k = 0 the most legal actions any
    decision has (a card decision plays or discards each hand card; a draw decision takes
    the deck or a pile), which is fewer than the action count."""
    most = max(2 * rules.hand_size, 1 + rules.n_colors)
    return min(options.candidates or most, most)


# ----- blueprints --------------------------------------------------------------------


def network_blueprint(
    rules: Rules,
    spec: mlp.NetworkSpec,
    view: str,
    params: Any,
    *,
    fallback: str = "argmax_tiebreak",
    draws: str = "any",
) -> Blueprint:
    """A trained run's policy view as a blueprint.

    `average_strategy` reads the strategy network (`params`); `current` regret-matches the
    mover's advantage network (`params` = (player 0's, player 1's)); both are renormalised
    over the draws `draws` keeps (`policy.restrict_draws`), as the run's agent plays.
    """
    if view not in BLUEPRINT_VIEWS:
        raise ValueError(f"view must be one of {list(BLUEPRINT_VIEWS)}, got {view!r}")
    pol.check_draws(draws)

    def blueprint(states: engine.State, words: jax.Array) -> jax.Array:
        del words  # a network's policy is deterministic
        players = states.current_player
        obs = jax.vmap(engine.observe, in_axes=(None, 0, 0))(rules, states, players)
        mask = pol.agent_masks(rules, states, draws)
        if view == "average_strategy":
            return mlp.masked_policy(mlp.apply(spec, params, obs), mask)
        # Each lane reads its mover's network: both are run (a lane's mover is data).
        raw = jnp.where(
            (players == 0)[:, None],
            mlp.apply(spec, params[0], obs),
            mlp.apply(spec, params[1], obs),
        )
        rm = functools.partial(pol.regret_matching, fallback=fallback)
        return jax.vmap(rm)(mlp.masked_advantages(raw, mask), mask)

    return blueprint


def bot_blueprint(rules: Rules, name: str) -> Blueprint:
    """A bot as a blueprint: all its probability on the action it plays (a noisy bot draws
    its noise from the lane's words)."""
    name = check_bot_name(name, "blueprint")

    def blueprint(states: engine.State, words: jax.Array) -> jax.Array:
        actions = jax.vmap(jax_bots.bot_action, in_axes=(None, None, 0, 0, None, None, None))(
            rules, name, states, words, 0, 0, 0
        )
        return (actions[:, None] == jnp.arange(rules.num_actions)).astype(jnp.float32)

    return blueprint


class WithValue(NamedTuple):
    """A blueprint's parameters with the run's value network, as a search that cuts its
    rollouts (`leaf_decisions` > 0) reads them (`with_value`)."""

    blueprint: Any  # the view's parameters, as `network_blueprint` reads them
    value: Any  # the history value network's flax params
    utility_scale: jax.Array  # [] float32 points per unit of the value network's output


def with_value(
    options: SearchOptions,
    params: Any,
    value: Any,
    utility_scale: float,
    *,
    prefix: str = "--search_",
) -> Any:
    """`params` as a search with `options` reads them: with the value network when it cuts
    its rollouts, else unchanged. Raises ValueError naming the option when it cuts them
    and `value` is None (a run trained without a value network, or a bot blueprint)."""
    if not options.leaf_decisions:
        return params
    if value is None:
        raise ValueError(
            f"{prefix}leaf_decisions={options.leaf_decisions} values the leaves with the "
            "run's value network and there is none here (a run trained without value "
            "leaves, a checkpoint exported before agents kept it, or a bot blueprint); "
            f"{prefix}leaf_decisions=0 plays the rollouts to the end"
        )
    return WithValue(params, value, jnp.float32(utility_scale))


def value_leaf(rules: Rules, spec: mlp.NetworkSpec, value: Any, utility_scale) -> LeafValue:
    """The run's history value network as a search's leaf value: sum_a sigma(a) Q(h, a)
    in points, h the position as `player` sees it with the whole of the opponent's hand
    and without the deck's order (`engine.observe_history`), read as the traversal reads
    its value leaves (`pol.node_regrets`). `spec` is the policy networks' shape; the
    value network has it over the history features (`traversal.api.value_spec`)."""
    shape = traversal_api.value_spec(rules, spec)

    def leaf(states: engine.State, sigma: jax.Array, player) -> jax.Array:
        history = jax.vmap(engine.observe_history, in_axes=(None, 0, None))(rules, states, player)
        mask = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, states)
        q = mlp.masked_advantages(mlp.apply(shape, value, history), mask)
        return jax.vmap(pol.node_regrets)(sigma, q, mask)[0] * utility_scale

    return leaf


# ----- the search --------------------------------------------------------------------


class SearchResult(NamedTuple):
    """One search's answer (K candidate slots, D worlds, A actions)."""

    action: jax.Array  # [] int32 the action chosen
    candidates: jax.Array  # [K] int32 the actions tried, the greedy one first
    tried: jax.Array  # [K] bool the slot holds a legal action (k may exceed the legal count)
    margins: jax.Array  # [K, D] float32 the searcher's final margin in each world, points
    scores: jax.Array  # [K] float32 mean margin + c log pi'(a) - z stderr; -inf where not tried
    policy: jax.Array  # [A] float32 the blueprint at the real state
    effective_worlds: jax.Array  # [] float32 the worlds' effective sample size (D unweighted)
    evidence_weight: jax.Array  # [] float32 the likelihood's power used (0 without a model)


def rollout_span(rules: Rules) -> int:
    """Counters a world's rollout may use: more than the decisions of a whole game."""
    return 2 * rules.max_turns + 2


def candidates(
    policy: jax.Array, mask: jax.Array, count: int, n_piles: int
) -> tuple[jax.Array, jax.Array]:
    """The blueprint's greedy action (`policy.greedy_action`, so that k = 1 plays as the
    blueprint does) and then the most probable other legal actions (the lowest index
    first among ties), `count` in all, and whether each slot holds one."""
    key = jnp.where(mask, policy, -1.0)
    key = key.at[pol.greedy_action(policy, mask, n_piles)].set(2.0)  # above every probability
    order = jnp.argsort(-key, stable=True)[:count].astype(jnp.int32)
    return order, jnp.arange(count) < jnp.sum(mask)


def paired_stderr(margins: jax.Array) -> jax.Array:
    """[K] float32: the standard error of each candidate's mean margin difference to the
    first candidate's (the blueprint's greedy action), over the D worlds; 0 for the
    first and with one world.

    With common random numbers the worlds' differences are paired, so this measures the
    evidence for a deviation far more finely than the two means' own errors: the
    difference a world shows is what the candidate's action changed there.
    """
    d = margins.shape[1]
    if d < 2:
        return jnp.zeros(margins.shape[:1], jnp.float32)
    difference = margins - margins[:1]
    return jnp.std(difference, axis=1, ddof=1) / jnp.sqrt(jnp.float32(d))


def world_words(rules: Rules, count: int, seed, game, decision, purpose) -> jax.Array:
    """[count, N] uint32: world m's words random_bits(seed, decision, game, m * N + i,
    purpose), one per card position."""
    n = rules.n_cards
    worlds = jnp.arange(count, dtype=jnp.uint32)
    cards = jnp.arange(n, dtype=jnp.uint32)
    return rng.random_bits(seed, decision, game, worlds[:, None] * jnp.uint32(n) + cards, purpose)


def draw_worlds(rules: Rules, count: int, state: engine.State, seed, game, decision):
    """`count` worlds of `state`'s mover (`determinize`) from `world_words` with
    DETERMINIZE: a larger pool begins with the same worlds."""
    words = world_words(rules, count, seed, game, decision, rng.Purpose.DETERMINIZE)
    return jax.vmap(determinize.determinize, in_axes=(None, None, 0))(rules, state, words)


def opponent_log_likelihood(
    rules: Rules,
    blueprint: Blueprint,
    worlds: engine.State,
    history: jax.Array,
    state: engine.State,
    seed,
    game,
    decision,
) -> jax.Array:
    """[M] float32: log of the blueprint's probability (pi', the uniform share mixed in)
    of every public move the opponent of `state`'s mover made, in each of `worlds` [M].

    Each world is replayed from its own deal with `history` [T] (`moves.record`'s public
    moves of the real game, `decision_index(state)` of them): the opponent's hidden cards
    differ between worlds, so the same moves are more likely in some. The mover's own
    moves weigh the same in every world (its information is the same) and are skipped. A
    bot blueprint's noise at replayed decision t of world m is random_bits(seed, decision,
    game, m * T + t, SEARCH_EVIDENCE).
    """
    m = worlds.deck.shape[0]
    searcher = state.current_player
    span = jnp.uint32(history.shape[0])
    ids = jnp.arange(m, dtype=jnp.uint32)
    states = jax.vmap(engine.init_from_deck, in_axes=(None, 0))(rules, worlds.deck)
    act = jax.vmap(moves.move_action, in_axes=(None, 0, None))

    def one(t, carry):
        states, total = carry
        actions = act(rules, states, history[t])

        def weigh():
            words = rng.random_bits(
                seed, decision, game, ids * span + t.astype(jnp.uint32), rng.Purpose.SEARCH_EVIDENCE
            )
            probs = blueprint(states, words)
            legal = jnp.sum(jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, states), 1)
            chosen = jnp.take_along_axis(probs, actions[:, None], axis=1)[:, 0]
            share = jnp.float32(PRIOR_UNIFORM_SHARE)
            return jnp.log((1.0 - share) * chosen + share / legal.astype(jnp.float32))

        # every world has the same mover at decision t (they replay the same moves)
        theirs = states.current_player[0] != searcher
        gain = jax.lax.cond(theirs, weigh, lambda: jnp.zeros((m,), jnp.float32))
        return jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, actions), total + gain

    count = engine.decision_index(state)
    _, total = jax.lax.fori_loop(0, count, one, (states, jnp.zeros((m,), jnp.float32)))
    return total


def resample(log_weights: jax.Array, count: int, word) -> jax.Array:
    """[count] int32: systematic resampling (Kitagawa 1996) of the indices of
    `log_weights` [M]: index i is kept floor(count * w_i) or that plus one times, w the
    normalised weights, from the one random word `word`."""
    weights = jax.nn.softmax(log_weights)
    # Point j is (j + u) / count; the kept index is the number of cumulative weights at or
    # below it, compared as count * edge - j <= u: with equal weights both sides are exact
    # (small integers against u in [0, 1)), where j + u could round up to j + 1.
    scaled = count * jnp.cumsum(weights)  # [M]
    below = scaled[None, :] - jnp.arange(count, dtype=jnp.float32)[:, None] <= rng.uniform(word)
    kept = jnp.sum(below, axis=1)
    return jnp.minimum(kept, log_weights.shape[0] - 1).astype(jnp.int32)


def effective_worlds(log_weights: jax.Array) -> jax.Array:
    """[] float32: the effective sample size 1 / sum(w^2) of normalised weights."""
    weights = jax.nn.softmax(log_weights)
    return 1.0 / jnp.sum(weights * weights)


# Halvings of the tempering's interval: the power is then within evidence_weight * 2^-24
# of the largest that keeps the floor, below float32's resolution of it.
TEMPERING_STEPS = 24


def tempered_weight(log_likelihood: jax.Array, most: float, floor) -> jax.Array:
    """[] float32: the largest power e in [0, most] whose weights exp(e * log_likelihood)
    [M] keep `effective_worlds` at `floor` or more (`most` itself when it does; 0 when no
    power does, which needs floor > M).

    Adaptive tempering as in sequential Monte Carlo (Jasra, Stephens, Doucet and Tsagaris
    2011, "Inference for Levy-driven stochastic volatility models via adaptive sequential
    Monte Carlo"): the effective sample size of exp(e l) falls as e grows (its log's
    derivative is 2 (E_e[l] - E_2e[l]) <= 0, a tilted mean growing with the tilt), so
    bisection finds the crossing. A pool whose likelihoods disagree by many nats keeps
    some of the model's evidence instead of collapsing onto its best one or two worlds.
    """
    most = jnp.float32(most)

    def keeps(e):
        return effective_worlds(e * log_likelihood) >= floor

    def halve(_, bounds):
        low, high = bounds
        middle = 0.5 * (low + high)
        return jax.lax.cond(keeps(middle), lambda: (middle, high), lambda: (low, middle))

    low, _ = jax.lax.fori_loop(0, TEMPERING_STEPS, halve, (jnp.float32(0.0), most))
    return jnp.where(keeps(most), most, low)


def redraw_undealt(rules: Rules, worlds: engine.State, words: jax.Array) -> engine.State:
    """`worlds` [D] with the cards left in each deck reshuffled by `words` [D, N].

    Exact given the world's past: the opponent's moves, and so a world's weight, depend on
    the cards dealt and drawn so far, never on the order of those still in the deck, so
    under the weighted posterior that order is uniform given the rest. Resampling copies a
    heavy world many times; without the redraw each copy would also copy its deck, and the
    search would plan every draw to come for one imagined order. `determinize` of the world
    seen with the opponent's whole hand known has the undealt positions as its only hidden
    ones."""

    def one(world, words):
        opponent = 1 - world.current_player
        cards = jnp.arange(rules.n_cards)
        held = jnp.any(world.hands[opponent].astype(jnp.int32)[:, None] == cards, axis=0)
        seen = world.replace(known_cards=world.known_cards.at[opponent].set(held))
        return determinize.determinize(rules, seen, words).replace(known_cards=world.known_cards)

    return jax.vmap(one)(worlds, words)


def searched_worlds(
    rules: Rules,
    options: SearchOptions,
    blueprint: Blueprint,
    state: engine.State,
    history,
    seed,
    game,
    decision,
):
    """(worlds [D], effective worlds [], evidence weight []): the D worlds a search plays
    in, how many independent draws the opponent model's weights are worth (D without a
    model) and the likelihood's power they used (0 without a model)."""
    d = options.determinizations
    if options.opponent_model == "none":
        worlds = draw_worlds(rules, d, state, seed, game, decision)
        return worlds, jnp.float32(d), jnp.float32(0.0)
    if history is None:
        raise ValueError(
            "--search_opponent_model=blueprint needs the game's public moves (history); "
            "this caller has none"
        )
    pool = draw_worlds(rules, d * options.world_pool, state, seed, game, decision)
    log_likelihood = opponent_log_likelihood(
        rules, blueprint, pool, history, state, seed, game, decision
    )
    power = jnp.float32(options.evidence_weight)
    if options.min_effective_share:  # static: a fixed power compiles no bisection
        floor = jnp.float32(options.min_effective_share * d)
        power = tempered_weight(log_likelihood, options.evidence_weight, floor)
    log_weights = power * log_likelihood
    word = rng.random_bits(seed, decision, game, 0, rng.Purpose.SEARCH_RESAMPLE)
    kept = jax.tree.map(lambda x: x[resample(log_weights, d, word)], pool)
    words = world_words(rules, d, seed, game, decision, rng.Purpose.SEARCH_REDRAW)
    return redraw_undealt(rules, kept, words), effective_worlds(log_weights), power


def rollout_margins(
    rules: Rules,
    options: SearchOptions,
    blueprint: Blueprint,
    state: engine.State,
    actions: jax.Array,
    seed,
    game,
    decision,
    worlds: engine.State | None = None,
    leaf: LeafValue | None = None,
) -> jax.Array:
    """[K, D] float32: each of `actions` [K] played in D worlds and the games finished by
    the blueprint, the final margins of `state`'s player to move; with `leaf_decisions`
    L > 0 a game not over by then stops at that player's first decision at least L
    rollout decisions on, and `leaf` values it.

    Random numbers: the worlds are `worlds` [D] or else `draw_worlds`; rollout decision t
    of world d draws random_bits(seed, decision, game, d * span + t, purpose) for
    SEARCH_ROLLOUT (a sampled move) and SEARCH_NOISE (a bot's noise): the same for every
    candidate.
    """
    d = options.determinizations
    k = actions.shape[0]
    if worlds is None:
        worlds = draw_worlds(rules, d, state, seed, game, decision)
    # Lanes are candidate-major: lane j * D + w plays candidate j in world w.
    lanes = jax.tree.map(lambda x: jnp.tile(x, (k,) + (1,) * (x.ndim - 1)), worlds)
    first = jnp.repeat(actions, d)
    lanes = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, lanes, first)
    world = jnp.tile(jnp.arange(d, dtype=jnp.uint32), k)  # [K * D]
    span = jnp.uint32(rollout_span(rules))
    player = state.current_player
    cut = options.leaf_decisions
    if cut and leaf is None:
        raise ValueError("rollout_margins: leaf_decisions > 0 needs a leaf value (`value_leaf`)")

    def at_leaf(states, t):
        # The value network is trained at its player's own decisions (the traverser's).
        return (t >= cut) & (states.current_player == player) & ~states.terminal

    def going(states, t):
        stopped = at_leaf(states, t) if cut else jnp.zeros_like(states.terminal)
        return ~states.terminal & ~stopped

    def policy(states, t):
        """The rollout's sigma [K * D, A] at rollout decision t: one-hot on the
        blueprint's greedy action (greedy) or its distribution (sampled)."""
        counter = world * span + t.astype(jnp.uint32)
        noise = rng.random_bits(seed, decision, game, counter, rng.Purpose.SEARCH_NOISE)
        probs = blueprint(states, noise)
        mask = jax.vmap(engine.legal_action_mask, in_axes=(None, 0))(rules, states)
        if options.rollout == "greedy":
            best = jax.vmap(pol.greedy_action, in_axes=(0, 0, None))(probs, mask, rules.n_colors)
            return jax.nn.one_hot(best, rules.num_actions, dtype=jnp.float32), mask, counter
        return jnp.where(mask, probs, 0.0), mask, counter

    def unfinished(carry):
        states, t = carry
        return jnp.any(going(states, t))

    def play(carry):
        states, t = carry
        sigma, mask, counter = policy(states, t)
        if options.rollout == "greedy":
            chosen = jnp.argmax(sigma, axis=-1).astype(jnp.int32)
        else:
            bits = rng.random_bits(seed, decision, game, counter, rng.Purpose.SEARCH_ROLLOUT)
            chosen = jax.vmap(pol.sample_action)(sigma, mask, bits)
        stepped = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, chosen)
        if cut:  # a lane at its leaf waits for the others (lockstep keeps them together)
            move = going(states, t)
            stepped = jax.tree.map(
                lambda new, old: jnp.where(move.reshape((-1,) + (1,) * (new.ndim - 1)), new, old),
                stepped,
                states,
            )
        return stepped, t + 1

    final, steps = jax.lax.while_loop(unfinished, play, (lanes, jnp.int32(0)))
    margins = jax.vmap(engine.returns, in_axes=(None, 0))(rules, final)[:, player]
    if cut:
        sigma, _, _ = policy(final, steps)
        valued = leaf(final, sigma, player)
        margins = jnp.where(at_leaf(final, steps), valued, margins)
    return margins.reshape(k, d)


def search(
    rules: Rules,
    options: SearchOptions,
    blueprint: Blueprint,
    state: engine.State,
    mask: jax.Array,
    seed,
    game,
    decision,
    history: jax.Array | None = None,
    leaf: LeafValue | None = None,
) -> SearchResult:
    """The search's action at one decision of `state`'s player to move.

    Args:
      rules, options: static.
      blueprint: the policy searched over (see the module docstring).
      state: one non-terminal game (only what its mover can see is used).
      mask: [A] bool the actions the searcher may take (the legal ones, less the draws
        its `draws` excludes).
      seed, game, decision: uint32/int32 scalars keying the search's random numbers
        (`rollout_margins`); a game and decision never searched twice with one seed.
      history: [T] int32 the game's public moves so far (`moves.record`); the opponent
        model reads it, and without the model it may be None.
      leaf: values the cut rollouts' leaves (`value_leaf`) when `leaf_decisions` > 0.

    Returns:
      SearchResult; with k = 1 the action is the blueprint's greedy one.
    """
    k = width(options, rules)
    # The root's noise word lies past every world's rollout counters.
    root = jnp.uint32(options.determinizations * rollout_span(rules))
    words = rng.random_bits(seed, decision, game, root, rng.Purpose.SEARCH_NOISE)
    policy = jnp.where(mask, blueprint(jax.tree.map(lambda x: x[None], state), words[None])[0], 0)
    actions, tried = candidates(policy, mask, k, rules.n_colors)
    actions = jnp.where(tried, actions, actions[0])  # slots past the legal ones repeat one
    worlds, effective, power = searched_worlds(
        rules, options, blueprint, state, history, seed, game, decision
    )
    margins = rollout_margins(
        rules, options, blueprint, state, actions, seed, game, decision, worlds, leaf
    )
    legal = jnp.sum(mask, dtype=jnp.float32)
    mixed = (1.0 - PRIOR_UNIFORM_SHARE) * policy[actions] + PRIOR_UNIFORM_SHARE / legal
    scores = jnp.mean(margins, axis=1) + jnp.float32(options.prior_weight) * jnp.log(mixed)
    if options.stderr_weight:  # static: the default compiles no extra work
        scores = scores - jnp.float32(options.stderr_weight) * paired_stderr(margins)
    scores = jnp.where(tried, scores, -jnp.inf)
    best = jnp.argmax(scores)
    return SearchResult(actions[best], actions, tried, margins, scores, policy, effective, power)


def search_named(
    rules: Rules,
    options: SearchOptions,
    blueprint: str,
    params: Any,
    state: engine.State,
    seed,
    game,
    decision,
    history: jax.Array | None = None,
    *,
    spec: mlp.NetworkSpec | None = None,
    fallback: str = "argmax_tiebreak",
    draws: str = "any",
) -> SearchResult:
    """`search` at one state over a blueprint named as the command lines name it: a view
    (`BLUEPRINT_VIEWS`, of `params` and `spec`; the searcher's moves then leave out the
    draws `draws` excludes, as the raw view's do) or a bot (which draws as the rules
    allow). With `leaf_decisions` > 0, `params` is `with_value`'s (a view's parameters
    and the run's value network). Every caller that searches by name (evaluation, the
    OpenSpiel loop, the terminal and browser games, the benchmark) builds its search
    here."""
    mask = engine.legal_action_mask(rules, state)
    leaf = None
    if options.leaf_decisions:
        if not isinstance(params, WithValue) or spec is None:
            raise ValueError(
                f"--search_leaf_decisions={options.leaf_decisions}: the search over "
                f"{blueprint} was given no value network (see `with_value`)"
            )
        leaf = value_leaf(rules, spec, params.value, params.utility_scale)
        params = params.blueprint
    if blueprint in BLUEPRINT_VIEWS:
        mask = pol.restrict_draws(rules, state, mask, draws)
        policy = network_blueprint(rules, spec, blueprint, params, fallback=fallback, draws=draws)
    else:
        policy = bot_blueprint(rules, blueprint)
    return search(rules, options, policy, state, mask, seed, game, decision, history, leaf)


@functools.cache
def jitted_record(rules: Rules):
    """`moves.record` jitted, (history [T] int32, state, action) -> history: how the
    one-game callers keep the public moves an opponent model replays."""
    return jax.jit(functools.partial(moves.record, rules))


def empty_history(rules: Rules):
    """[T] int32, a game's history before its first move (`moves.empty_history`)."""
    return jnp.asarray(moves.empty_history(rules))


@functools.cache
def jitted_search(
    rules: Rules,
    options: SearchOptions,
    blueprint: str,
    spec: mlp.NetworkSpec | None = None,
    fallback: str = "argmax_tiebreak",
    draws: str = "any",
):
    """`search_named` jitted for one game, (params, state, seed, game, decision[,
    history]) -> SearchResult, with seed and game np.uint32, decision np.int32 and history
    [T] np.int32 (`moves.history_length`; one dtype, one trace); one compiled program per
    argument set, shared by the one-game callers (the OpenSpiel player, the terminal and
    browser games)."""

    def searched(params, state, seed, game, decision, history=None):
        return search_named(
            rules,
            options,
            blueprint,
            params,
            state,
            seed,
            game,
            decision,
            history,
            spec=spec,
            fallback=fallback,
            draws=draws,
        )

    return jax.jit(searched)
