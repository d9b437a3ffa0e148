"""OpenSpiel's search bots as opponents, in mirrored games on lc_cfr's deals (docs/bots.md).

Two bots of OpenSpiel play `python_lost_cities` (`lc_cfr.spiel.game`):

* `openspiel_mcts`: `open_spiel.python.algorithms.mcts.MCTSBot` with a
  `RandomRolloutEvaluator` (one uniformly random rollout per leaf). It searches the
  OpenSpiel state as if it were a perfect-information game, so it sees the opponent's
  hand: a cheating, upper-bound-style baseline, not a fair opponent. It does not see the
  deck order: every deck draw is a chance node, sampled uniformly inside the search.
* `openspiel_ismcts`: `open_spiel.python.algorithms.ismcts.ISMCTSBot` with the same
  evaluator, the fair one. Each simulation starts from a world drawn by
  `InfostateResampler` from the searching player's information-state string alone.

`play_mirrored` plays any two `Player`s (these bots, lc_cfr's bots, a network policy
view) on lc_cfr's shared deals, one game at a time: deal g's deck is
`rng.deal_order(N, seed, g)`, the deck that `lc_cfr.eval` deals (`engine.deal_order` of
iteration 0), and the OpenSpiel state's chance outcomes are set to reproduce it instead
of being sampled. Every deal is played twice, the seats swapped.

This module imports OpenSpiel only when a bot or the game is built, so that command lines
can list `OPENSPIEL_BOTS` and refuse them with one line when OpenSpiel is missing.
"""

from __future__ import annotations

import abc
import bisect
import functools
import importlib
import re
import time
import types
from collections.abc import Iterable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr.bots import BOT_NAMES
from lc_cfr.game import engine as jax_engine
from lc_cfr.game import rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol

OPENSPIEL_BOTS = ("openspiel_mcts", "openspiel_ismcts")
DEFAULT_SIMULATIONS = 100
# OpenSpiel's usual UCT constant for returns of order 1; `search_scale` brings the
# returns the bots search with to that order.
UCT_C = 2.0
INSTALL_HINT = "OpenSpiel is not installed: pip install '.[openspiel]'"

# The per-game fields of `play_mirrored`'s records, those of `lc_cfr.eval.games.GameRecords`
# (this layer may not import lc_cfr.eval; tests/test_spiel_bots.py holds the two equal).
RECORD_FIELDS = (
    "margin",
    "agent_score",
    "opponent_score",
    "decisions",
    "truncated",
    "illegal",
    "plays",
    "discards",
    "deck_draws",
    "pile_draws",
    "opened",
    "negative",
    "bonus",
)


def openspiel_available() -> bool:
    """Whether OpenSpiel imports (the `openspiel` extra is installed)."""
    try:
        importlib.import_module("pyspiel")
    except ImportError:
        return False
    return True


def check_player_name(name, field: str) -> str:
    """Returns `name` if it names a bot of lc_cfr or of OpenSpiel, else raises ValueError.

    Raises:
        ValueError: naming `field`, for an unknown name, or for an OpenSpiel bot when
            OpenSpiel does not import.
    """
    if name in OPENSPIEL_BOTS:
        if not openspiel_available():
            raise ValueError(f"{field} {name}: {INSTALL_HINT}")
        return name
    if name not in BOT_NAMES:
        raise ValueError(f"{field} must be one of {list(BOT_NAMES + OPENSPIEL_BOTS)}, got {name!r}")
    return name


def check_simulations(simulations, field: str = "simulations") -> int:
    """Returns `simulations` as an int >= 1, else raises ValueError naming `field`."""
    if (
        not isinstance(simulations, int | np.integer)
        or isinstance(simulations, bool)
        or simulations < 1
    ):
        raise ValueError(f"{field} must be an int >= 1, got {simulations!r}")
    return int(simulations)


def search_scale(rules: Rules) -> float:
    """The `utility_scale` the bots' game is built with, in points.

    A strong game's score: every colour's numbered cards played, no wager. Margins then
    fall mostly within +-1, the range UCT_C is meant for, whatever the variant's size.
    """
    ranks = sum(rules.min_rank + r for r in range(rules.n_ranks))
    return float(rules.n_colors * max(1, ranks + rules.expedition_penalty))


@functools.cache
def load_search_game(rules: Rules):
    """`python_lost_cities` of `rules` at `search_scale(rules)` (one per rules, cached)."""
    from lc_cfr.spiel import game as spiel_game

    return spiel_game.load_game(rules, search_scale(rules))


# ----- ISMCTS: worlds drawn from one player's information --------------------------


class _Event(NamedTuple):
    player: int
    kind: str  # "play", "discard", "pile" or "deck"
    card: int  # -1: a deck draw of the other player (unseen)
    color: int = -1  # "pile" only


_HEAD = re.compile(r"p([01]): hand\[([\d ]*)\]")
_EVENT = re.compile(r"p([01]):(?:(play|discard)(\d+)|pile(\d+)=(\d+)|deck(?:=(\d+))?)")


def parse_info_string(info: str) -> tuple[int, list[int], list[_Event]]:
    """(player, dealt hand, events) of a dealt state's perfect-recall information string.

    The format is `LostCitiesState.info_string`'s. Raises ValueError on anything else.
    """
    head = _HEAD.match(info)
    if head is None:
        raise ValueError(f"not a dealt python_lost_cities information state: {info!r}")
    events = []
    for token in info[head.end() :].split():
        match = _EVENT.fullmatch(token)
        if match is None:
            raise ValueError(f"unknown event {token!r} in information state {info!r}")
        who, kind, card, color, pile_card, drawn = match.groups()
        q = int(who)
        if kind:
            events.append(_Event(q, kind, int(card)))
        elif color is not None:
            events.append(_Event(q, "pile", int(pile_card), int(color)))
        else:
            events.append(_Event(q, "deck", -1 if drawn is None else int(drawn)))
    return int(head.group(1)), [int(x) for x in head.group(2).split()], events


def public_history(rules: Rules, info: str) -> np.ndarray:
    """[T] int32 the public moves (`lc_cfr.game.moves`' codes, NO_MOVE after the last) of
    a dealt state's information-state string: what a searching player's opponent model
    replays, the same whichever player's string it is."""
    from lc_cfr.game import moves

    _, _, events = parse_info_string(info)
    codes = {
        "play": lambda e: moves.card_move(rules, e.card, 0),
        "discard": lambda e: moves.card_move(rules, e.card, 1),
        "deck": lambda e: moves.draw_move(rules, 0),
        "pile": lambda e: moves.draw_move(rules, 1 + e.color),
    }
    history = moves.empty_history(rules)
    history[: len(events)] = [codes[e.kind](e) for e in events]
    return history


class InfostateResampler:
    """Draws a state consistent with what one player knows: ISMCTS's determinization.

    It reads only the player's information-state string, never the state it is handed,
    so the search cannot learn a hidden card from it. Hidden from the player are the
    opponent's dealt cards and deck draws (its "hidden slots") and the deck order. A card
    the opponent later played or discarded must have been in a hidden slot acquired
    before that move (unless the player saw it taken from a pile); the rest of the hidden
    slots hold cards the player never saw. Every consistent world has the same chance
    probability (each chance node is uniform and all worlds have as many), so the
    posterior given the information is uniform over them; it is sampled exactly: the
    revealed cards are matched to slots in the order they were revealed, each uniformly
    among the free slots acquired before it (those sets are nested, so every matching is
    equally likely), then the free slots get a uniform draw of the unseen cards. Like
    OpenSpiel's own resamplers, it ignores what the opponent's choices say about its hand.

    The world is built by replaying the history in a fresh state (the opponent's card
    moves translated to its new hand slots), so the game checks every step.
    """

    def __init__(self, game, random_state: np.random.RandomState):
        self._game = game
        self._rules = game.rules
        self._random = random_state

    def __call__(self, state, player: int):
        return self.sample(state.information_state_string(player))

    def sample(self, info: str):
        """A new state whose information-state string for its player is `info`."""
        rules, rand = self._rules, self._random
        h = rules.hand_size
        player, hand, events = parse_info_string(info)
        slot_times = [-1] * h  # when each hidden slot of the opponent was filled
        seen = set(hand)
        held_public = set()  # opponent's cards the player saw it take from a pile
        revealed = []  # (time, card): opponent's moves of cards from hidden slots
        for t, event in enumerate(events):
            if event.player == player:
                if event.kind == "deck":
                    seen.add(event.card)
                continue
            if event.kind == "deck":
                slot_times.append(t)
            elif event.kind == "pile":
                held_public.add(event.card)
            elif event.card in held_public:
                held_public.remove(event.card)
            else:
                revealed.append((t, event.card))
                seen.add(event.card)
        slots = [-1] * len(slot_times)
        for t, card in revealed:
            free = [k for k, when in enumerate(slot_times) if when < t and slots[k] < 0]
            slots[free[rand.randint(len(free))]] = card
        unseen = [x for x in range(rules.n_cards) if x not in seen]
        empty = [k for k, card in enumerate(slots) if card < 0]
        for k, card in zip(empty, rand.permutation(unseen)[: len(empty)], strict=True):
            slots[k] = int(card)
        return self._replay(player, hand, events, slots)

    def _replay(self, player, hand, events, slots):
        rules = self._rules
        h = rules.hand_size
        hands = [None, None]
        hands[player] = sorted(hand)
        hands[1 - player] = sorted(slots[:h])
        state = self._game.new_initial_state()
        for card in hands[0] + hands[1]:  # player 0's hand is dealt first
            state.apply_action(card)
        next_slot = h
        for event in events:
            held = hands[event.player]
            if event.kind in ("play", "discard"):
                slot = bisect.bisect_left(held, event.card)
                held.pop(slot)
                state.apply_action(slot if event.kind == "play" else h + slot)
            elif event.kind == "pile":
                state.apply_action(rules.first_pile_action + event.color)
                bisect.insort(held, event.card)
            else:
                card = event.card
                if event.player != player:
                    card, next_slot = slots[next_slot], next_slot + 1
                state.apply_action(rules.draw_deck_action)
                state.apply_action(card)
                bisect.insort(held, card)
        return state


# ----- the bots --------------------------------------------------------------------


def openspiel_bot(game, name: str, *, simulations: int, seed):
    """OpenSpiel's bot `name` for `game` (a `python_lost_cities` game, or `Rules`).

    Args:
        game: the game the bot searches, or the rules (then `load_search_game(rules)`).
            The bot's returns are the game's: build it at `search_scale` for UCT_C.
        name: `openspiel_mcts` (sees the hidden cards) or `openspiel_ismcts`.
        simulations: simulations per decision.
        seed: seed of the bot's `np.random.RandomState` (an int or a sequence of uint32
            words), shared by the search and its rollouts.

    Returns:
        A `pyspiel.Bot`; `bot.step(state)` gives its action at a decision node.
    """
    from open_spiel.python.algorithms import ismcts, mcts

    if name not in OPENSPIEL_BOTS:
        raise ValueError(f"name must be one of {list(OPENSPIEL_BOTS)}, got {name!r}")
    simulations = check_simulations(simulations)
    if isinstance(game, Rules):
        game = load_search_game(game)
    random_state = np.random.RandomState(seed)
    evaluator = mcts.RandomRolloutEvaluator(n_rollouts=1, random_state=random_state)
    if name == "openspiel_mcts":
        return mcts.MCTSBot(
            game, UCT_C, simulations, evaluator, solve=False, random_state=random_state
        )
    bot = ismcts.ISMCTSBot(game, evaluator, UCT_C, simulations, random_state=random_state)
    bot.set_resampler(InfostateResampler(game, random_state))
    return bot


# ----- who plays a seat ------------------------------------------------------------


class Player(abc.ABC):
    """One side of `play_mirrored`: picks actions at its own decision nodes.

    `start(...)` is called before each game it plays, `action(...)` at each of its
    decisions; `decision` counts both players' decisions of the game from 0, `game_id`
    is `2 * deal + seat of the evaluated agent` (the counters of `lc_cfr.eval.games`).
    """

    name = "player"

    def start(self, rules: Rules, *, deal: int, game_id: int, player: int) -> None:
        """Prepares a new game, in which this player is `player` (a hook: most players
        need no preparation)."""
        return

    @abc.abstractmethod
    def action(self, state, *, deal: int, game_id: int, decision: int) -> int:
        """The action of this player at its decision node `state`."""


class LcBot(Player):
    """One of lc_cfr's bots (the Cython twin of the JAX bots), on the state's engine.

    Its noise counters are those of `lc_cfr.eval`: (seed, iteration 0, deal, decision),
    so it makes the same choices as in the vectorised evaluation.
    """

    def __init__(self, name: str, seed: int):
        if name not in BOT_NAMES:
            raise ValueError(f"name must be one of {list(BOT_NAMES)}, got {name!r}")
        from lc_cfr.bots import py_bots

        self.name, self._seed, self._act = name, int(rng.as_word(seed)), py_bots.bot_action

    def action(self, state, *, deal, game_id, decision):
        engine = state.engine
        return self._act(engine.rules, self.name, engine, self._seed, 0, deal, decision)


class OpenSpielPlayer(Player):
    """`openspiel_mcts` or `openspiel_ismcts`: a fresh bot every game.

    The bot of player p in deal g is seeded with (seed, g, p), so its randomness does not
    depend on the order games run in, and a bot mirrored against itself replays the same
    game with the seats exchanged (its mean margin is exactly 0).
    """

    def __init__(self, name: str, *, simulations: int = DEFAULT_SIMULATIONS, seed: int = 0):
        if name not in OPENSPIEL_BOTS:
            raise ValueError(f"name must be one of {list(OPENSPIEL_BOTS)}, got {name!r}")
        self.name = name
        self.simulations = check_simulations(simulations)
        self._seed = int(rng.as_word(seed))
        self._bot = None

    def start(self, rules, *, deal, game_id, player):
        self._bot = openspiel_bot(
            load_search_game(rules),
            self.name,
            simulations=self.simulations,
            seed=[self._seed, deal, player],
        )

    def action(self, state, *, deal, game_id, decision):
        legal = state.legal_actions()
        if len(legal) == 1:  # a forced move: no search (MCTSBot would run one anyway)
            return legal[0]
        return int(self._bot.step(state))


@functools.cache
def _chooser(spec: mlp.NetworkSpec, view: str, mode: str, fallback: str, n_piles: int):
    """The jitted batch-1 choice of a network view: (params, obs, mask, bits) -> action."""

    def choose(params, obs, mask, bits):
        raw = mlp.apply(spec, params, obs[None])[0]
        if view == "average_strategy":
            probs = mlp.masked_policy(raw, mask)
        else:
            probs = pol.regret_matching(mlp.masked_advantages(raw, mask), mask, fallback=fallback)
        if mode == "greedy":  # as the vectorised evaluation
            return pol.greedy_action(probs, mask, n_piles)
        return pol.sample_action(probs, mask, bits)

    return jax.jit(choose)


class NetworkPlayer(Player):
    """A policy view of networks, on the state's information-state tensor.

    `average_strategy` plays the strategy network's masked softmax; `current` plays
    regret matching on the advantage network of the player it is (`fallback` as in the
    run). `greedy` plays `policy.greedy_action` (the most probable legal action, the
    draw's source chosen first);
    `sampled` draws with `rng.random_bits(seed, 0, game_id, decision, SAMPLE)`, as
    `lc_cfr.eval.games` does. `draws` restricts the pile draws as the run's `draws` does
    in lockstep (`policy.restrict_draws`; the Cython engine's `playable_pile_tops_array`,
    held equal to the JAX engine's by tests/test_engine_parity.py). One forward per
    decision (batch 1).
    """

    def __init__(
        self,
        spec: mlp.NetworkSpec,
        params,
        *,
        view: str,
        mode: str = "greedy",
        fallback: str = "argmax_tiebreak",
        seed: int = 0,
        name: str | None = None,
        draws: str = "any",
    ):
        if view not in ("average_strategy", "current"):
            raise ValueError(f"view must be average_strategy or current, got {view!r}")
        if mode not in ("greedy", "sampled"):
            raise ValueError(f"mode must be greedy or sampled, got {mode!r}")
        if view == "current" and (not isinstance(params, tuple | list) or len(params) != 2):
            raise ValueError("the current view takes the pair of advantage networks' params")
        self.name = name or view
        self._params = tuple(params) if view == "current" else params
        self._view, self._mode, self._seed = view, mode, int(rng.as_word(seed))
        self._draws = pol.check_draws(draws)
        self._spec, self._fallback = spec, fallback

    def action(self, state, *, deal, game_id, decision):
        player = state.current_player()
        obs = np.asarray(state.information_state_tensor(player), np.float32)
        mask = state.engine.legal_mask_array().astype(bool)
        tops = state.engine.playable_pile_tops_array()  # one per pile (colour)
        if self._draws != "any":  # the pile draws are the last C actions; the deck stays
            mask[-len(tops) :] &= tops if self._draws == "playable" else np.zeros_like(tops)
        params = self._params[player] if self._view == "current" else self._params
        bits = 0
        if self._mode == "sampled":
            bits = rng.random_bits_py(self._seed, 0, game_id, decision, rng.Purpose.SAMPLE)
        choose = _chooser(self._spec, self._view, self._mode, self._fallback, len(tops))
        return int(choose(params, obs, mask, np.uint32(bits)))


def jax_state(engine) -> jax_engine.State:
    """The JAX engine's state of a Cython engine (`state_dict`, the same fields)."""
    fields = engine.state_dict()
    return jax_engine.State(
        **{name: jnp.asarray(value) for name, value in fields.items()},
        illegal_player=jnp.int32(-1),
    )


class SearchPlayer(Player):
    """Search at play time (`lc_cfr.search`, docs/search.md) over a network view
    (`average_strategy`, `current`: `spec` and `params` as for NetworkPlayer) or one of
    lc_cfr's bots (`blueprint` its name).

    Each decision copies the state's engine into the JAX engine (the search redraws what
    the player cannot see, from the hidden cards in ascending order, so the OpenSpiel
    game's own unseen order plays no part) and runs one jitted search keyed by (seed,
    game_id, decision), the counters of `lc_cfr.eval.games`: it makes the choices of the
    lockstep evaluation's search (tests/test_search.py holds the two equal).
    """

    def __init__(
        self,
        rules: Rules,
        options,
        *,
        blueprint: str,
        spec: mlp.NetworkSpec | None = None,
        params=None,
        fallback: str = "argmax_tiebreak",
        seed: int = 0,
        draws: str = "any",
        name: str = "search",
    ):
        from lc_cfr import search

        search.check_options(options, rules)
        if blueprint in search.BLUEPRINT_VIEWS:
            if spec is None or params is None:
                raise ValueError(f"a search over the {blueprint} view needs its spec and params")
            if blueprint == "current":  # a list from JSON-like callers; keep a WithValue
                params = (
                    params._replace(blueprint=tuple(params.blueprint))
                    if isinstance(params, search.WithValue)
                    else tuple(params)
                )
        elif blueprint not in BOT_NAMES:
            raise ValueError(
                f"blueprint must be one of {list(search.BLUEPRINT_VIEWS) + list(BOT_NAMES)}, "
                f"got {blueprint!r}"
            )
        self.name, self._params, self._rules = name, params, rules
        self._seed = np.uint32(rng.as_word(seed))
        self._choose = search.jitted_search(
            rules, options, blueprint, spec, fallback, pol.check_draws(draws)
        )

    def action(self, state, *, deal, game_id, decision):
        x = jax_state(state.engine)
        info = state.information_state_string(state.current_player())
        history = public_history(self._rules, info)
        found = self._choose(
            self._params, x, self._seed, np.uint32(game_id), np.int32(decision), history
        )
        return int(found.action)


# ----- the mirrored loop -----------------------------------------------------------


class GameResult(NamedTuple):
    """One game of `play_mirrored`, from the evaluated agent's side."""

    deal: int
    seat: int  # the agent's player id
    agent_score: int
    opponent_score: int
    margin: int  # agent_score - opponent_score
    winner: str  # "agent", "opponent" or "tie"
    truncated: bool  # cut at max_turns
    decisions: int  # both players'


class MirroredResult(NamedTuple):
    """What `play_mirrored` returns.

    records: {field of RECORD_FIELDS: [2, D] array}, entry [s, i] the i-th deal with the
        agent seated as s (the layout of `lc_cfr.eval.games.GameRecords`).
    games: every game, in the order played.
    seconds: wall time of the whole loop.

    The metrics are `lc_cfr.eval.metrics.summarize` of `GameRecords(**records)` (this
    layer may not import it; `lc_cfr.eval.sequential` does).
    """

    records: dict
    games: tuple
    seconds: float


def _expedition_scores(rules: Rules, engine) -> tuple[np.ndarray, np.ndarray]:
    """(per-colour scores [2, C], cards per colour [2, C]) of a Cython engine state, by
    the JAX engine's formula (`engine.expedition_scores`; `state_dict` has its fields)."""
    state = types.SimpleNamespace(**engine.state_dict())
    cards = state.expedition_wagers + state.expedition_numbered
    return np.asarray(jax_engine.expedition_scores(rules, state)), cards


def _play_one(game, rules, agents, deck, *, deal, seat):
    """One game; agents = (agent, opponent); the agent is player `seat`."""
    h = rules.hand_size
    seats = agents if seat == 0 else agents[::-1]
    game_id = 2 * deal + seat
    for player, who in enumerate(seats):
        who.start(rules, deal=deal, game_id=game_id, player=player)
    state = game.new_initial_state()
    drawn = 0
    decision = 0
    counts = [0, 0, 0, 0]  # the agent's plays, discards, deck draws, pile draws
    while not state.is_terminal():
        if state.is_chance_node():
            # lc_cfr's deck, not a sample: the first 2H cards deal, the rest are drawn
            state.apply_action(int(deck[drawn]))
            drawn += 1
            continue
        player = state.current_player()
        action = seats[player].action(state, deal=deal, game_id=game_id, decision=decision)
        if player == seat:
            if action < h:
                counts[0] += 1
            elif action < 2 * h:
                counts[1] += 1
            else:
                counts[2 if action == rules.draw_deck_action else 3] += 1
        state.apply_action(action)  # the engine refuses an illegal action
        decision += 1
    engine = state.engine
    scores = engine.scores()
    per_color, cards = _expedition_scores(rules, engine)
    opened = cards[seat] > 0
    return {
        "margin": scores[seat] - scores[1 - seat],
        "agent_score": scores[seat],
        "opponent_score": scores[1 - seat],
        "decisions": decision,
        "truncated": bool(engine.truncated),
        "illegal": False,
        "plays": counts[0],
        "discards": counts[1],
        "deck_draws": counts[2],
        "pile_draws": counts[3],
        "opened": int(opened.sum()),
        "negative": int((opened & (per_color[seat] < 0)).sum()),
        "bonus": int((cards[seat] >= rules.bonus_threshold).sum()),
    }


def play_mirrored(
    rules: Rules,
    agent: Player,
    opponent: Player,
    *,
    deals: int | Iterable[int],
    seed: int = 0,
) -> MirroredResult:
    """Plays every deal twice, `agent` as player 0 then as player 1, one game at a time.

    Args:
        rules: the game variant.
        agent: the evaluated side.
        opponent: the other side.
        deals: a number D (deals 0..D-1) or the deal indices to play.
        seed: the evaluation seed: deal g is `rng.deal_order(N, seed, g)`, the deck of
            `lc_cfr.eval`'s deal g.

    Returns:
        MirroredResult.
    """
    seed = int(rng.as_word(seed))
    deal_list = list(range(deals)) if isinstance(deals, int | np.integer) else list(deals)
    if not deal_list:
        raise ValueError("deals must name at least one deal")
    game = load_search_game(rules)
    start = time.perf_counter()
    records = {name: np.zeros((2, len(deal_list)), np.int64) for name in RECORD_FIELDS}
    games = []
    for i, deal in enumerate(deal_list):
        deck = rng.deal_order(rules.n_cards, seed, int(deal))
        for seat in (0, 1):
            row = _play_one(game, rules, (agent, opponent), deck, deal=int(deal), seat=seat)
            for name in RECORD_FIELDS:
                records[name][seat, i] = row[name]
            margin = row["margin"]
            winner = "agent" if margin > 0 else "opponent" if margin < 0 else "tie"
            games.append(
                GameResult(
                    int(deal),
                    seat,
                    row["agent_score"],
                    row["opponent_score"],
                    margin,
                    winner,
                    row["truncated"],
                    row["decisions"],
                )
            )
    for name in ("truncated", "illegal"):
        records[name] = records[name].astype(bool)
    return MirroredResult(records, tuple(games), time.perf_counter() - start)


def bot_player(name: str, *, seed: int, simulations: int = DEFAULT_SIMULATIONS) -> Player:
    """A new Player for a bot name of lc_cfr or of OpenSpiel (one per seat: never share one
    between the two sides, an OpenSpiel player holds its game's bot)."""
    if name in OPENSPIEL_BOTS:
        return OpenSpielPlayer(name, simulations=simulations, seed=seed)
    return LcBot(name, seed)
