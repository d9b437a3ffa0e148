"""The games of `lc_cfr.serve`: a human against a checkpoint, as JSON, rules on the server.

`GameStore` holds the games of one run: each has its own id, its own state in lc_cfr's
JAX engine and its own log; the page only ever sees what the human may see
(`GameStore.view`). A move is applied only when it is legal, in turn and not stale (the
client names the decision it answers); anything else raises `RequestError` with an HTTP
status and a one-line reason, and the game is unchanged. After the human's move the agent
moves until the human is to move again; a move forced on the human (the deck as the only
draw) is made for it and logged, as in `lc_cfr.play`.

The agent plays one policy view of the checkpoint, greedily: `average_strategy`,
`current` (regret matching on the mover's advantage network), `sd_cfr` (one snapshot's
regret matching for the whole game, drawn from the game's seed and deal) where the run
keeps snapshots, or `search` (`lc_cfr.search` over the average strategy, default
options). Each agent move in the log carries the probability its view gave it (for
search: the blueprint's), and a hint is the view's policy over the human's legal moves
(the average strategy's for search).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import secrets
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr import search as search_lib
from lc_cfr.game import rng
from lc_cfr.game.rules import CARD_PHASE, Rules
from lc_cfr.nets import mlp
from lc_cfr.terminal_game import Agent, Game
from lc_cfr.train.saved_networks import (
    CheckpointNotFoundError,
    load_saved_networks,
    search_params,
    value_network,
)
from lc_cfr.traversal import policy as pol

VIEWS = ("average_strategy", "current", "sd_cfr", "search")
# Games kept at once; the oldest is dropped past it (a local server, a few players).
MAX_GAMES = 256
# Checkpoints kept loaded at once (each holds three networks).
MAX_CHECKPOINTS = 4


class RequestError(Exception):
    """A refused request: the HTTP status and a one-line reason."""

    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status, self.reason = status, reason


@functools.cache
def _policy_fn(rules: Rules, spec: mlp.NetworkSpec, view: str, draws: str, fallback: str):
    """Jitted (params, state) -> the view's policy [A] for the player to move (`view`:
    average_strategy, or current for a pair of advantage networks)."""

    def policy(params, state):
        view_of = search_lib.network_blueprint(
            rules, spec, view, params, fallback=fallback, draws=draws
        )
        one = jax.tree.map(lambda x: x[None], state)
        return view_of(one, jnp.zeros((1,), jnp.uint32))[0]

    return jax.jit(policy)


@dataclasses.dataclass
class _Session:
    """One game and what its page needs."""

    game_id: str
    checkpoint: int
    view: str
    human: int
    seed: int
    deal: int
    params: Any  # the view's parameters (for sd_cfr: the drawn snapshot's pair)
    state: Any  # engine.State of the game
    decision: int = 0  # decisions taken (both players)
    log: list = dataclasses.field(default_factory=list)
    history: Any = None  # [T] int32 the public moves (search_lib.jitted_record)
    search_params: Any = None  # what a search reads (`search_lib.with_value`)


class GameStore:
    """The games against one run's checkpoints (thread-safe: one lock for all)."""

    def __init__(self, workdir, *, search_options: search_lib.SearchOptions | None = None):
        # the latest checkpoint, loaded now: a missing or damaged run fails at start
        latest = load_saved_networks(workdir)
        self.workdir = latest.workdir
        self.rules, self.spec = latest.rules, latest.spec
        self.draws = latest.config.draws
        self.fallback = latest.config.regret_matching.all_negative_fallback
        self.search_options = search_options or search_lib.SearchOptions()
        search_lib.check_options(self.search_options, self.rules)
        latest = self._with_value(latest)
        self._search_params(latest)  # a search that cuts its rollouts needs the value network
        self._networks = collections.OrderedDict({latest.iteration: latest})
        self.latest = latest.iteration
        self._games: collections.OrderedDict[str, _Session] = collections.OrderedDict()
        self._lock = threading.Lock()
        # the terminal game's words and jitted engine functions (describe, announce)
        agent = Agent(latest.rules, latest.spec, latest.strategy, latest.iteration, latest.workdir)
        self._words = Game(agent)
        jitted = self._words.jitted()
        self._init, self._step, self._view = jitted["init"], jitted["step"], jitted["view"]

    # ----- the run ----------------------------------------------------------------------

    def info(self) -> dict:
        """What the start screen offers: checkpoints, views, rules, card names."""
        from lc_cfr.train import checkpoint

        store = checkpoint.CheckpointStore(self.workdir / "checkpoints", read_only=True)
        try:
            steps = store.steps()
        finally:
            store.close()
        r = self.rules
        return {
            "workdir": str(self.workdir),
            "checkpoints": steps,
            "latest": self.latest,
            "views": [v for v in VIEWS if v != "sd_cfr" or self._has_snapshots()],
            "search": self.search_options._asdict(),
            "rules": {**r.to_dict(), "n_cards": r.n_cards, "cards_per_color": r.cards_per_color},
            "colors": [self._words.color_name(c) for c in range(r.n_colors)],
            "cards": [self._card(c) for c in range(r.n_cards)],
        }

    def _has_snapshots(self) -> bool:
        return self._networks[self.latest].snapshots is not None

    def _card(self, card: int) -> dict:
        r = self.rules
        return {
            "id": int(card),
            "color": r.card_color(int(card)),
            "face": self._words.face(int(card)),
            "name": self._words.card_name(int(card)),
        }

    def _checkpoint(self, step: int | None):
        step = self.latest if step is None else step
        if step not in self._networks:
            try:
                self._networks[step] = self._with_value(load_saved_networks(self.workdir, step))
            except CheckpointNotFoundError:
                raise RequestError(404, f"no checkpoint {step} in this run") from None
            except (OSError, ValueError) as error:
                raise RequestError(422, f"checkpoint {step} cannot be read: {error}") from None
            while len(self._networks) > MAX_CHECKPOINTS:
                oldest = next(k for k in self._networks if k != self.latest)
                del self._networks[oldest]
        self._networks.move_to_end(step)
        return self._networks[step]

    def _with_value(self, networks):
        """`networks` with its value network read where the search cuts its rollouts."""
        if not self.search_options.leaf_decisions:
            return networks
        return networks._replace(value=value_network(networks))

    def _search_params(self, networks):
        """What the search view reads of `networks` (ValueError naming the option where it
        cuts its rollouts and the checkpoint has no value network)."""
        return search_params(self.search_options, networks.strategy, networks)

    # ----- games ------------------------------------------------------------------------

    def new_game(self, request: dict) -> dict:
        """Starts a game; `request` may hold checkpoint, view, seat, seed and deal."""
        if not isinstance(request, dict):
            raise RequestError(400, "the body must be a JSON object")
        known = {"checkpoint", "view", "seat", "seed", "deal"}
        extra = sorted(set(request) - known)
        if extra:
            raise RequestError(400, f"unknown fields {extra}; allowed: {sorted(known)}")
        checkpoint = _int_field(request, "checkpoint", None, 0, 2**31 - 1)
        seat = _int_field(request, "seat", 0, 0, 1)
        seed = _int_field(request, "seed", 0, 0, 2**32 - 1)
        deal = _int_field(request, "deal", None, 0, 2**32 - 1)
        view = request.get("view", "average_strategy")
        if view not in VIEWS:
            raise RequestError(400, f"view must be one of {list(VIEWS)}, got {view!r}")
        with self._lock:
            networks = self._checkpoint(checkpoint)
            if deal is None:
                deal = secrets.randbelow(2**31)
            params = networks.strategy if view in ("average_strategy", "search") else None
            search_params = None
            if view == "search":
                try:
                    search_params = self._search_params(networks)
                except ValueError as error:
                    raise RequestError(422, f"checkpoint {networks.iteration}: {error}") from None
            if view == "current":
                params = tuple(networks.advantage)
            if view == "sd_cfr":
                if networks.snapshots is None:
                    raise RequestError(400, "view sd_cfr: this run keeps no SD-CFR snapshots")
                # one snapshot for the whole game, drawn from the game's seed and deal
                bits = rng.random_bits_py(seed, 0, deal, 0, rng.Purpose.SAMPLE)
                k = (bits >> 8) * networks.snapshots.count >> 24
                params = tuple(
                    jax.tree.map(lambda x, k=k: x[k], p) for p in networks.snapshots.advantage
                )
            game_id = secrets.token_hex(8)
            state = self._init(np.uint32(seed), np.uint32(deal))
            session = _Session(
                game_id,
                networks.iteration,
                view,
                seat,
                seed,
                deal,
                params,
                state,
                history=search_lib.empty_history(self.rules),
                search_params=search_params,
            )
            self._games[game_id] = session
            while len(self._games) > MAX_GAMES:
                self._games.popitem(last=False)
            self._advance(session)
            return self._render(session)

    def _session(self, game_id: str) -> _Session:
        session = self._games.get(game_id)
        if session is None:
            raise RequestError(404, f"no game {game_id!r} (unknown, or over and dropped)")
        return session

    def view(self, game_id: str) -> dict:
        with self._lock:
            return self._render(self._session(game_id))

    def move(self, game_id: str, request: dict) -> dict:
        """Applies the human's move {action, decision}, then the agent's replies."""
        if not isinstance(request, dict):
            raise RequestError(400, "the body must be a JSON object")
        extra = sorted(set(request) - {"action", "decision"})
        if extra:
            raise RequestError(400, f"unknown fields {extra}; allowed: ['action', 'decision']")
        with self._lock:
            session = self._session(game_id)
            action = _int_field(request, "action", ..., 0, self.rules.num_actions - 1)
            decision = _int_field(request, "decision", ..., 0, 2**31 - 1)
            s = jax.device_get(session.state)
            if bool(s.terminal):
                raise RequestError(409, "the game is over")
            if decision != session.decision:
                raise RequestError(
                    409,
                    f"stale move: it answers decision {decision}, the game is at "
                    f"decision {session.decision}",
                )
            if int(s.current_player) != session.human:
                raise RequestError(409, "not your turn: the agent is to move")
            mask = np.asarray(self._view(session.state)[0])
            if not mask[action]:
                raise RequestError(422, f"illegal move {action}: {self._why(s, mask, action)}")
            self._apply(session, s, action, who="you")
            self._advance(session)
            return self._render(session)

    def hint(self, game_id: str) -> dict:
        """The view's policy over the human's legal moves (what the agent would play)."""
        with self._lock:
            session = self._session(game_id)
            s = jax.device_get(session.state)
            if bool(s.terminal) or int(s.current_player) != session.human:
                raise RequestError(409, "a hint is for your own turn")
            probs = self._policy(session, session.state)
            mask = np.asarray(self._view(session.state)[0])
            return {
                "decision": session.decision,
                "moves": [
                    {
                        "action": int(a),
                        "text": self._words.describe(s, int(a)),
                        "prob": float(probs[a]),
                    }
                    for a in np.flatnonzero(mask)
                ],
            }

    # ----- playing ----------------------------------------------------------------------

    def _policy(self, session: _Session, state) -> np.ndarray:
        view = "average_strategy" if session.view == "search" else session.view
        view = "current" if view == "sd_cfr" else view
        fn = _policy_fn(self.rules, self.spec, view, self.draws, self.fallback)
        return np.asarray(fn(session.params, state), np.float64)

    def _agent_action(self, session: _Session, state) -> tuple[int, float]:
        probs = self._policy(session, state)
        if session.view == "search":
            fn = search_lib.jitted_search(
                self.rules,
                self.search_options,
                "average_strategy",
                self.spec,
                self.fallback,
                self.draws,
            )
            game = 2 * session.deal + 1 - session.human  # the evaluation's id: agent's seat
            found = fn(
                session.search_params,
                state,
                np.uint32(session.seed),
                np.uint32(game),
                np.int32(session.decision),
                session.history,
            )
            action = int(found.action)
        else:
            mask = np.asarray(self._view(state)[0])
            # as the vectorised evaluation plays it
            action = int(pol.greedy_action(probs.astype(np.float32), mask, self.rules.n_colors))
        return action, float(probs[action])

    def _apply(self, session: _Session, s, action: int, *, who: str, prob=None, forced=False):
        text = self._words.announce(s, action, human=who == "you")
        entry = {"who": who, "decision": session.decision, "action": action, "text": text}
        if prob is not None:
            entry["prob"] = prob
        if forced:
            entry["forced"] = True
        session.log.append(entry)
        record = search_lib.jitted_record(self.rules)
        session.history = record(session.history, session.state, np.int32(action))
        session.state = self._step(session.state, np.int32(action))
        session.decision += 1

    def _advance(self, session: _Session) -> None:
        """Plays the agent's moves and the human's forced ones until the human chooses."""
        while True:
            s = jax.device_get(session.state)
            if bool(s.terminal):
                return
            mask = np.asarray(self._view(session.state)[0])
            if int(s.current_player) == session.human:
                moves = np.flatnonzero(mask)
                if len(moves) != 1:
                    return
                self._apply(session, s, int(moves[0]), who="you", forced=True)
                continue
            action, prob = self._agent_action(session, session.state)
            self._apply(session, s, action, who="agent", prob=prob)

    def _why(self, s, mask: np.ndarray, action: int) -> str:
        r, h = self.rules, self.rules.hand_size
        card_phase = int(s.phase) == CARD_PHASE
        if action < 2 * h:
            if not card_phase:
                return "you have played or discarded this turn: now draw"
            if int(s.hands[int(s.current_player), action % h]) == r.n_cards:
                return f"there is no card in slot {action % h + 1}"
            return self._words.why_not_play(s, action % h)
        if card_phase:
            return "first play or discard a card; you draw afterwards"
        color = action - r.first_pile_action
        if int(s.pile_sizes[color]) == 0:
            return f"the {self._words.color_name(color)} pile is empty"
        if int(s.forbidden_pile) == color:
            return "you can't take back the card you discarded this turn"
        return "the agent draws only cards it can play; you may draw as the rules allow"

    # ----- what the page sees -------------------------------------------------------------

    def _render(self, session: _Session) -> dict:
        r = self.rules
        s = jax.device_get(session.state)
        mask, exp_scores = (np.asarray(x) for x in jax.device_get(self._view(session.state)))
        you, agent = session.human, 1 - session.human
        k = r.cards_per_color

        def expeditions(p):
            return [
                [int(c) for c in range(col * k, (col + 1) * k) if s.expedition_cards[p, c]]
                for col in range(r.n_colors)
            ]

        hand = [int(c) for c in s.hands[you] if int(c) != r.n_cards]
        over = bool(s.terminal)
        your_turn = not over and int(s.current_player) == you
        view = {
            "game_id": session.game_id,
            "checkpoint": session.checkpoint,
            "view": session.view,
            "seat": you,
            "seed": session.seed,
            "deal": session.deal,
            "decision": session.decision,
            "turn": int(s.turn) + (0 if over else 1),
            "max_turns": r.max_turns,
            "to_move": None if over else ("you" if your_turn else "agent"),
            "phase": None if over else ("card" if int(s.phase) == CARD_PHASE else "draw"),
            "deck": r.n_cards - int(s.deck_pos),
            "hand": hand,
            "opponent": {
                "count": int(np.sum(s.hands[agent] != r.n_cards)),
                "known": [int(c) for c in np.flatnonzero(s.known_cards[agent])],
            },
            "expeditions": {"you": expeditions(you), "agent": expeditions(agent)},
            "expedition_scores": {
                "you": [int(x) for x in exp_scores[you]],
                "agent": [int(x) for x in exp_scores[agent]],
            },
            "scores": {"you": int(s.scores[you]), "agent": int(s.scores[agent])},
            "piles": [
                {
                    "color": c,
                    "size": int(s.pile_sizes[c]),
                    "top": int(s.discards[c, int(s.pile_sizes[c]) - 1])
                    if int(s.pile_sizes[c])
                    else None,
                }
                for c in range(r.n_colors)
            ],
            "legal": [
                {"action": int(a), "text": self._words.describe(s, int(a))}
                for a in (np.flatnonzero(mask) if your_turn else [])
            ],
            "log": list(session.log),
            "over": over,
        }
        if over:
            view["result"] = _result(s, you)
        return view


def _result(s, you: int) -> dict:
    agent = 1 - you
    mine, theirs = int(s.scores[you]), int(s.scores[agent])
    if int(s.illegal_player) >= 0:
        winner = "agent" if int(s.illegal_player) == you else "you"
    else:
        winner = "you" if mine > theirs else "agent" if theirs > mine else "draw"
    how = "turn limit" if bool(s.truncated) else "deck exhausted"
    return {"winner": winner, "you": mine, "agent": theirs, "ended_by": how}


def _int_field(request: dict, name: str, default, low: int, high: int):
    """request[name] as an int in [low, high]; `default` when absent (... = required)."""
    if name not in request or request[name] is None:
        if default is ...:
            raise RequestError(400, f"missing field {name!r}")
        return default
    value = request[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(400, f"{name} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise RequestError(400, f"{name} must be in [{low}, {high}], got {value}")
    return value
