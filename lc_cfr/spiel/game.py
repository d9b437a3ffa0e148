"""Lost Cities as an OpenSpiel Python game, `python_lost_cities` (docs/exploitability.md).

The rules are lc_cfr's (docs/game.md), executed by the Cython engine `CyGame`; this module
only adds what OpenSpiel needs on top of it:

* Chance is explicit. The deal is one chance node per card (uniform over the cards not yet
  dealt; the first H go to player 0, the next H to player 1), and every deck draw is a
  chance node of its own: the player picks action `2H`, then chance picks the drawn card
  uniformly among those still in the deck. Drawing the deck order once at the deal, as
  lc_cfr does, gives the same distribution over games.
* Player actions are lc_cfr's action layout unchanged (`num_distinct_actions = 2H + 1 + C`)
  and chance outcomes are card ids, so a history replays in either lc_cfr engine.
* The information-state string has perfect recall (what OpenSpiel's exact solvers
  assume); the tensors are lc_cfr's encoding, which the networks read.

Importing this module registers the game with pyspiel.
"""

from __future__ import annotations

import dataclasses
import math
from itertools import combinations

import numpy as np
import pyspiel

from lc_cfr.game.cy_engine import CyGame
from lc_cfr.game.rules import CARD_BLOCKS, DRAW_PHASE, Rules

GAME_NAME = "python_lost_cities"

_RULE_FIELDS = tuple(field.name for field in dataclasses.fields(Rules))
_DEFAULT_RULES = Rules()
_DEFAULT_PARAMS = {name: getattr(_DEFAULT_RULES, name) for name in _RULE_FIELDS}
_DEFAULT_PARAMS["utility_scale"] = 1.0

_GAME_TYPE = pyspiel.GameType(
    short_name=GAME_NAME,
    long_name="Python Lost Cities (lc_cfr rules)",
    dynamics=pyspiel.GameType.Dynamics.SEQUENTIAL,
    chance_mode=pyspiel.GameType.ChanceMode.EXPLICIT_STOCHASTIC,
    information=pyspiel.GameType.Information.IMPERFECT_INFORMATION,
    utility=pyspiel.GameType.Utility.ZERO_SUM,
    reward_model=pyspiel.GameType.RewardModel.TERMINAL,
    max_num_players=2,
    min_num_players=2,
    provides_information_state_string=True,
    provides_information_state_tensor=True,
    provides_observation_string=True,
    provides_observation_tensor=True,
    parameter_specification=_DEFAULT_PARAMS,
)

# Named pieces of the encoding, in order (docs/game.md, "Information-state encoding"); the
# card blocks are the rules' own list, so the observer's views follow the engine's layout.
_CARD_PIECES = CARD_BLOCKS
_COLOR_PIECES = (
    "forbidden_pile",
    "own_wagers",
    "opp_wagers",
    "own_count",
    "opp_count",
    "own_score",
    "opp_score",
)


def rules_from_params(params: dict) -> tuple[Rules, float]:
    """The `Rules` and utility scale of a parameter dict (missing keys take defaults).

    Raises:
        ValueError: naming the parameter, for an unknown key, a value of the wrong type,
            a non-positive or non-finite `utility_scale`, or rules that `Rules` or the
            Cython engine refuse.
    """
    unknown = sorted(set(params) - set(_DEFAULT_PARAMS))
    if unknown:
        raise ValueError(
            f"unknown {GAME_NAME} parameter(s) {unknown}; valid: {sorted(_DEFAULT_PARAMS)}"
        )
    merged = {**_DEFAULT_PARAMS, **params}
    scale = merged.pop("utility_scale")
    if isinstance(scale, bool) or not isinstance(scale, int | float):
        raise ValueError(f"utility_scale must be a number, got {scale!r}")
    scale = float(scale)
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"utility_scale must be a finite number > 0, got {scale}")
    rules = Rules(**merged)
    CyGame(rules)  # the engine's own limits (int8 cards, int32 scores), named by field
    return rules, scale


def game_params(rules: Rules, utility_scale: float = 1.0) -> dict:
    """The `pyspiel.load_game` parameters of a rules variant."""
    return {**rules.to_dict(), "utility_scale": float(utility_scale)}


def load_game(rules: Rules, utility_scale: float = 1.0) -> LostCitiesGame:
    """Loads `python_lost_cities` for a rules variant (the game's parameters are checked)."""
    if not isinstance(rules, Rules):
        raise ValueError(f"rules must be a lc_cfr.game.rules.Rules, got {type(rules).__name__}")
    rules_from_params(game_params(rules, utility_scale))  # ValueError before pyspiel sees it
    return pyspiel.load_game(GAME_NAME, game_params(rules, utility_scale))


def _expedition_scores(rules: Rules) -> list[int]:
    """Every score one expedition can reach (any subset of one colour's cards, empty = 0)."""
    ranks = range(rules.n_ranks)
    scores = {0}
    for wagers in range(rules.n_wagers + 1):
        for count in range(rules.n_ranks + 1):
            if wagers + count == 0:
                continue
            bonus = rules.bonus_amount if wagers + count >= rules.bonus_threshold else 0
            for subset in combinations(ranks, count):
                total = sum(rules.min_rank + r for r in subset)
                scores.add((total + rules.expedition_penalty) * (1 + wagers) + bonus)
    return sorted(scores)


def max_score_difference(rules: Rules) -> int:
    """A bound on |s0 - s1| in points: per colour, the widest gap of expedition scores."""
    scores = _expedition_scores(rules)
    return rules.n_colors * (scores[-1] - scores[0])


def max_game_length(rules: Rules) -> int:
    """Most player decisions in a game: two a turn, at most `max_turns` turns.

    OpenSpiel's MaxGameLength counts decisions only, chance outcomes excluded (those are
    `max_chance_nodes`). It is an upper bound, reached when the players can keep drawing
    from the discard piles until `max_turns`.
    """
    return 2 * rules.max_turns


def max_chance_nodes(rules: Rules) -> int:
    """Most chance nodes in a game: the 2H dealt cards and one per deck draw.

    pyspiel's GameInfo has no field for it, and a Python game reports
    MaxChanceNodesInHistory equal to MaxGameLength; that is still an upper bound whenever
    this number is at most `2 * max_turns` (as in the default rules and TINY_RULES).
    """
    deck_draws = min(rules.n_cards - 2 * rules.hand_size, rules.max_turns)
    return 2 * rules.hand_size + deck_draws


def tree_size(game) -> dict:
    """Counts the nodes of the whole game tree (for small variants only: it visits them all).

    Returns:
        {"histories": every node, "chance_nodes", "decision_nodes", "terminals"}.
    """
    counts = {"histories": 0, "chance_nodes": 0, "decision_nodes": 0, "terminals": 0}
    stack = [game.new_initial_state()]
    while stack:
        state = stack.pop()
        counts["histories"] += 1
        if state.is_terminal():
            counts["terminals"] += 1
            continue
        if state.is_chance_node():
            counts["chance_nodes"] += 1
            actions = [card for card, _ in state.chance_outcomes()]
        else:
            counts["decision_nodes"] += 1
            actions = state.legal_actions()
        stack.extend(state.child(a) for a in actions)
    return counts


class LostCitiesGame(pyspiel.Game):
    """`python_lost_cities`: lc_cfr's Lost Cities with every `Rules` field a parameter.

    Parameters: the `Rules` fields (ints, defaults the classic game) and `utility_scale`
    (float, default 1.0): returns are `[s0 - s1, s1 - s0] / utility_scale`.
    """

    def __init__(self, params=None):
        self.rules, self.utility_scale = rules_from_params(dict(params or {}))
        rules = self.rules
        bound = max_score_difference(rules) / self.utility_scale
        info = pyspiel.GameInfo(
            num_distinct_actions=rules.num_actions,
            max_chance_outcomes=rules.n_cards,
            num_players=2,
            min_utility=-bound,
            max_utility=bound,
            utility_sum=0.0,
            max_game_length=max_game_length(rules),
        )
        super().__init__(_GAME_TYPE, info, game_params(rules, self.utility_scale))
        self.blank_engine = CyGame(rules)  # every new state's engine is a clone of it

    def new_initial_state(self):
        """The state before the deal (a chance node)."""
        return LostCitiesState(self)

    def make_py_observer(self, iig_obs_type=None, params=None):
        """The observer of `iig_obs_type` (default: the observation, no perfect recall)."""
        return LostCitiesObserver(
            self.rules, iig_obs_type or pyspiel.IIGObservationType(perfect_recall=False), params
        )


class _Core:
    """The whole mutable state of a LostCitiesState, plus shared read-only context.

    pyspiel clones a Python state by building a fresh one and deep-copying the attributes
    into it; keeping everything in one object with its own `__deepcopy__` makes that a
    memcpy of the C struct plus a few references (the rules, strings and tuples here are
    immutable and are shared, not copied).
    """

    __slots__ = ("rules", "scale", "engine", "dealt", "deck_left", "pending_draw", "info")

    def __init__(self, rules, scale, engine, dealt, deck_left, pending_draw, info):
        self.rules = rules
        self.scale = scale
        self.engine = engine  # CyGame, dealt once all 2H hand cards are known
        self.dealt = dealt  # tuple: the cards dealt so far, in deal order
        self.deck_left = deck_left  # tuple: cards not dealt or drawn yet, ascending
        self.pending_draw = pending_draw  # the mover chose the deck; chance picks the card
        self.info = info  # [2] perfect-recall strings, one per player

    def __deepcopy__(self, memo):
        return _Core(
            self.rules,
            self.scale,
            self.engine.clone(),
            self.dealt,
            self.deck_left,
            self.pending_draw,
            list(self.info),
        )


class LostCitiesState(pyspiel.State):
    """One game: chance deal, then the engine's turns with chance deck draws."""

    def __init__(self, game):
        super().__init__(game)
        # pyspiel also runs this for every clone, before copying the attributes over, so
        # it stays cheap: the blank engine is a memcpy of the game's template.
        rules = game.rules
        self._core = _Core(
            rules,
            game.utility_scale,
            game.blank_engine.clone(),
            (),
            tuple(range(rules.n_cards)),
            False,
            ["p0:", "p1:"],
        )

    # ---- the OpenSpiel state API ----------------------------------------------------

    def current_player(self):
        core = self._core
        if core.pending_draw or len(core.dealt) < 2 * core.rules.hand_size:
            return pyspiel.PlayerId.CHANCE
        if core.engine.terminal:
            return pyspiel.PlayerId.TERMINAL
        return core.engine.current_player

    def is_terminal(self):
        core = self._core
        return len(core.dealt) == 2 * core.rules.hand_size and core.engine.terminal

    def _legal_actions(self, player):
        if player != self.current_player():  # OpenSpiel: none for a player not to move
            return []
        return self._core.engine.legal_actions()

    def chance_outcomes(self):
        """Uniform over the cards not yet dealt (deal) or still in the deck (draw)."""
        cards = self._core.deck_left
        p = 1.0 / len(cards)
        return [(card, p) for card in cards]

    def _apply_action(self, action):
        core = self._core
        rules = core.rules
        if len(core.dealt) < 2 * rules.hand_size:
            self._deal(action)
        elif core.pending_draw:
            self._resolve_draw(action)
        elif (
            action == rules.draw_deck_action
            and core.engine.phase == DRAW_PHASE
            and not core.engine.terminal
        ):
            # The card stays unknown until the chance node that follows.
            core.pending_draw = True
            event = f" p{core.engine.current_player}:deck"
            core.info[0] += event
            core.info[1] += event
        else:
            self._apply_card_or_pile(action)

    def _deal(self, card):
        core = self._core
        h = core.rules.hand_size
        if card not in core.deck_left:
            raise ValueError(f"chance outcome {card}: card already dealt or not a card id")
        core.dealt = core.dealt + (card,)
        core.deck_left = tuple(c for c in core.deck_left if c != card)
        if len(core.dealt) == 2 * h:
            core.engine.deal_from_order(np.array(core.dealt + core.deck_left, np.int64))
            for p in (0, 1):
                hand = " ".join(str(c) for c in sorted(core.dealt[p * h : (p + 1) * h]))
                core.info[p] += f" hand[{hand}]"

    def _resolve_draw(self, card):
        core = self._core
        if card not in core.deck_left:
            raise ValueError(f"chance outcome {card}: card is not in the deck")
        mover = core.engine.current_player
        core.engine.arrange_next_draw(card)
        core.engine.apply(core.rules.draw_deck_action)
        core.deck_left = tuple(c for c in core.deck_left if c != card)
        core.pending_draw = False
        core.info[mover] += f"={card}"

    def _apply_card_or_pile(self, action):
        core = self._core
        rules = core.rules
        engine = core.engine
        n, h = rules.n_cards, rules.hand_size
        mover = engine.current_player
        # The engine's encoding names the card an action moves: the hand block lists the
        # sorted hand (slot i is its i-th card) and the tops block the top of every pile.
        before = engine.encode_array(mover) if not engine.terminal else None
        engine.apply(action)  # ValueError naming the action if illegal
        if action < 2 * h:
            card = np.flatnonzero(before[:n])[action % h]
            event = f" p{mover}:{'play' if action < h else 'discard'}{card}"
        else:
            color = action - rules.first_pile_action
            k = rules.cards_per_color
            tops = before[4 * n + color * k : 4 * n + (color + 1) * k]
            card = color * k + np.flatnonzero(tops)[0]
            event = f" p{mover}:pile{color}={card}"
        core.info[0] += event
        core.info[1] += event

    def _action_to_string(self, player, action):
        rules = self._core.rules
        if player == pyspiel.PlayerId.CHANCE:
            return f"card {action}"
        h = rules.hand_size
        if action < h:
            return f"play slot {action}"
        if action < 2 * h:
            return f"discard slot {action - h}"
        if action == rules.draw_deck_action:
            return "draw deck"
        return f"draw pile {action - rules.first_pile_action}"

    def returns(self):
        """[s0 - s1, s1 - s0] / utility_scale at the end of the game, else zeros."""
        if not self.is_terminal():
            return [0.0, 0.0]
        core = self._core
        s0, s1 = core.engine.scores()
        return [(s0 - s1) / core.scale, (s1 - s0) / core.scale]

    def __str__(self):
        core = self._core
        if len(core.dealt) < 2 * core.rules.hand_size:
            return f"dealing {list(core.dealt)}"
        state = core.engine.state_dict()
        piles = [
            state["discards"][c, : state["pile_sizes"][c]].tolist()
            for c in range(core.rules.n_colors)
        ]
        expeditions = [np.flatnonzero(state["expedition_cards"][p]).tolist() for p in (0, 1)]
        return (
            f"{core.engine!r} hands={state['hands'].tolist()} piles={piles} "
            f"expeditions={expeditions} deck_left={list(core.deck_left)} "
            f"pending_draw={core.pending_draw}"
        )

    # ---- for the observer -----------------------------------------------------------

    @property
    def engine(self) -> CyGame | None:
        """The dealt Cython game (None during the deal). Do not mutate it."""
        core = self._core
        return core.engine if len(core.dealt) == 2 * core.rules.hand_size else None

    def info_string(self, player: int) -> str:
        """The perfect-recall information-state string of `player`.

        `p{player}:`, the own dealt hand `hand[...]`, then every event in order: `p{q}:play{x}`,
        `p{q}:discard{x}`, `p{q}:pile{c}={x}` and `p{q}:deck`, followed by `={x}` only in the
        drawer's own string once the card is known.
        """
        return self._core.info[player]


class LostCitiesObserver:
    """The PyObserver of python_lost_cities.

    Tensor: lc_cfr's encoding of the player (`CyGame.encode`), with a named view per field
    of docs/game.md; zeros until the deal is complete. String: with perfect recall the
    information-state string, otherwise a readable view of what the encoding holds.
    Supported: the player's private information plus the public information.
    """

    def __init__(self, rules: Rules, iig_obs_type, params):
        if params:
            raise ValueError(f"observation params are not supported, got {params}")
        if (
            iig_obs_type.private_info != pyspiel.PrivateInfoType.SINGLE_PLAYER
            or not iig_obs_type.public_info
        ):
            raise ValueError(
                "iig_obs_type must have private_info=SINGLE_PLAYER and public_info=True "
                f"(lc_cfr's encoding is one player's view), got {iig_obs_type}"
            )
        self._rules = rules
        self._perfect_recall = iig_obs_type.perfect_recall
        n, c = rules.n_cards, rules.n_colors
        self.tensor = np.zeros(rules.encoding_size, np.float32)
        self.dict = {}
        offset = 0
        for name in _CARD_PIECES:
            self.dict[name] = self.tensor[offset : offset + n]
            offset += n
        for name, size in (("deck_remaining", 1), ("phase", 2)):
            self.dict[name] = self.tensor[offset : offset + size]
            offset += size
        for name in _COLOR_PIECES:
            self.dict[name] = self.tensor[offset : offset + c]
            offset += c
        for name in ("score_diff", "turn"):
            self.dict[name] = self.tensor[offset : offset + 1]
            offset += 1
        assert offset == rules.encoding_size

    def set_from(self, state: LostCitiesState, player: int):
        """Writes the encoding of `state` for `player` into `tensor`."""
        engine = state.engine
        if engine is None:
            self.tensor.fill(0.0)
        else:
            engine.encode(player, self.tensor)

    def string_from(self, state: LostCitiesState, player: int) -> str:
        if self._perfect_recall:
            return state.info_string(player)
        engine = state.engine
        if engine is None:
            return f"p{player}: dealing"
        self.set_from(state, player)
        d = self.dict

        def cards(name):
            return " ".join(str(x) for x in np.flatnonzero(d[name]))

        phase = "CARD" if d["phase"][0] else "DRAW"
        forbidden = np.flatnonzero(d["forbidden_pile"])
        return (
            f"p{player}: hand[{cards('hand')}] mine[{cards('own_expedition')}] "
            f"theirs[{cards('opp_expedition')}] tops[{cards('discard_tops')}] "
            f"discarded[{cards('discards')}] known[{cards('opp_known')}] "
            f"shown[{cards('own_known')}] "
            f"deck {engine.rules.n_cards - engine.deck_pos} turn {engine.turn} {phase}"
            + (f" forbidden {forbidden[0]}" if forbidden.size else "")
        )


pyspiel.register_game(_GAME_TYPE, LostCitiesGame)
