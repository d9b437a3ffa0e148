"""The terminal game of `lc_cfr.play`: a human against a checkpoint's strategy network.

`load_agent` reads the network of a saved run; `Game` plays one game on a pair of text
streams: it renders the board, lists and parses the human's moves (explaining illegal
ones) and draws the agent's moves, greedily or with the shared generator. A move forced on the
human (a single legal one: the deck is the only draw) is made and announced without
asking. Each engine function is jitted once per `Game`, so later games start without
compiling.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
from typing import TextIO

import jax
import numpy as np

from lc_cfr import search as search_lib
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import CARD_PHASE, Rules
from lc_cfr.nets import mlp
from lc_cfr.train.saved_networks import (
    CheckpointNotFoundError,
    load_saved_networks,
    search_params,
)
from lc_cfr.traversal import policy as pol

COLOR_NAMES = ("yellow", "blue", "white", "green", "red", "purple")
MODES = ("greedy", "sampled")
QUIT_WORDS = frozenset({"q", "quit", "exit"})
HELP_WORDS = frozenset({"h", "help", "?"})
QUIT = -1  # what `Game.parse` returns for "leave the game"


class PlayError(Exception):
    """A problem that ends the program with one line on stderr and no traceback."""


# ----- loading the agent -------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Agent:
    """The average-strategy network of one checkpoint, with the rules it was trained on."""

    rules: Rules
    spec: mlp.NetworkSpec
    params: mlp.Params
    iteration: int
    workdir: pathlib.Path
    draws: str = "any"  # the run's `draws` (policy.DRAWS): the pile draws it may take
    note: str = ""  # what the player should know of the network (`strategy_note`)


def load_agent(workdir: str | os.PathLike, iteration: int | None = None) -> Agent:
    """The strategy network of checkpoint `iteration` (latest if None) of run `workdir`.

    Reads RUN/config.json and the checkpoint's networks only (`load_saved_networks`):
    no trainer is built, so neither the traversal backend nor the memories (gigabytes
    with the default config) are, and a run trained on any backend or device plays here.

    Raises:
        PlayError: naming the problem (no run directory, no config, a bad config, no
            checkpoint, a checkpoint of another network shape).
    """
    try:
        networks = load_saved_networks(workdir, iteration)
    except CheckpointNotFoundError as error:
        raise PlayError(f"{error}: train the run for an iteration first") from error
    except (FileNotFoundError, ValueError) as error:  # the messages name the file
        raise PlayError(str(error)) from error
    return Agent(
        rules=networks.rules,
        spec=networks.spec,
        params=networks.strategy,
        iteration=networks.iteration,
        workdir=networks.workdir,
        draws=networks.config.draws,
        note=networks.strategy_note(),
    )


# ----- the game ----------------------------------------------------------------------


class Game:
    """One agent and the jitted single-state engine functions (each compiles once)."""

    def __init__(
        self,
        agent: Agent,
        *,
        mode: str = "greedy",
        search: search_lib.SearchOptions | None = None,
    ):
        """`search`: the agent searches over its strategy network (`lc_cfr.search`) at
        each of its decisions instead of playing the network's policy (`mode` unused)."""
        if mode not in MODES:
            raise PlayError(f"--mode must be one of {list(MODES)}, got {mode!r}")
        if search is not None:
            try:
                search_lib.check_options(search, agent.rules)
            except ValueError as error:
                raise PlayError(str(error)) from None
        self.agent, self.mode, self.search = agent, mode, search
        rules, spec = agent.rules, agent.spec
        self.rules = rules
        self.h = rules.hand_size

        def policy(params, state):
            mask = pol.agent_mask(rules, state, agent.draws)
            info = engine.observe(rules, state, state.current_player)
            return mlp.masked_policy(mlp.apply(spec, params, info[None])[0], mask)

        self._init = jax.jit(lambda seed, index: engine.init(rules, seed, index))
        self._step = jax.jit(lambda state, action: engine.step(rules, state, action))
        self._view = jax.jit(
            lambda state: (
                engine.legal_action_mask(rules, state),
                engine.expedition_scores(rules, state),
            )
        )
        self._policy = jax.jit(policy)
        self._search = None
        self._record = search_lib.jitted_record(rules)  # the public moves a search replays
        # what the search reads: the strategy network, with the run's value network when
        # it cuts its rollouts (read once, from the agent's checkpoint)
        self._search_params = agent.params
        if search is not None and search.leaf_decisions:
            try:
                saved = load_saved_networks(agent.workdir, agent.iteration)
                self._search_params = search_params(search, agent.params, saved)
            except (FileNotFoundError, ValueError) as error:
                raise PlayError(str(error)) from None
        if search is not None:
            self._search = search_lib.jitted_search(
                rules, search, "average_strategy", spec, "argmax_tiebreak", agent.draws
            )

    def jitted(self) -> dict:
        """The jitted functions by name (tests check that each compiled once)."""
        return {
            "init": self._init,
            "step": self._step,
            "view": self._view,
            "policy": self._policy,
            "record": self._record,
            **({"search": self._search} if self._search is not None else {}),
        }

    # ----- words -----------------------------------------------------------------------

    def color_name(self, color: int) -> str:
        if self.rules.n_colors <= len(COLOR_NAMES):
            return COLOR_NAMES[color]
        return f"colour {color + 1}"

    def card_name(self, card: int) -> str:
        card = int(card)
        face = "W" if self.rules.card_is_wager(card) else str(self.rules.card_value(card))
        return f"{self.color_name(self.rules.card_color(card))} {face}"

    def face(self, card: int) -> str:
        """A card's face: its value, or W for a wager."""
        return "W" if self.rules.card_is_wager(card) else str(self.rules.card_value(card))

    def describe(self, s, action: int) -> str:
        """A legal action of the player to move, as a menu entry ("play blue 7 (slot 3)")."""
        r, h, p = self.rules, self.h, int(s.current_player)
        if action < 2 * h:
            slot = action % h
            verb = "play" if action < h else "discard"
            return f"{verb} {self.card_name(s.hands[p, slot])} (slot {slot + 1})"
        if action == r.draw_deck_action:
            left = r.n_cards - int(s.deck_pos)
            return f"draw from the deck ({_plural(left, 'card')} left)"
        color = action - r.first_pile_action
        top = self.card_name(s.discards[color, int(s.pile_sizes[color]) - 1])
        return f"draw {top} from the {self.color_name(color)} pile"

    def announce(self, s, action: int, *, human: bool) -> str:
        """A move that is about to be made, as a sentence ("The agent plays blue 7.")."""
        r, h, p = self.rules, self.h, int(s.current_player)
        who, ending = ("You", "") if human else ("The agent", "s")
        if action < 2 * h:
            verb = "play" if action < h else "discard"
            return f"{who} {verb}{ending} {self.card_name(s.hands[p, action % h])}."
        if action == r.draw_deck_action:
            if human:  # the human may see the card; the agent's stays hidden
                return f"You draw {self.card_name(s.deck[int(s.deck_pos)])} from the deck."
            return "The agent draws from the deck."
        color = action - r.first_pile_action
        top = self.card_name(s.discards[color, int(s.pile_sizes[color]) - 1])
        return f"{who} draw{ending} {top} from the {self.color_name(color)} pile."

    # ----- the board -------------------------------------------------------------------

    def _expedition(self, s, player: int, color: int) -> str:
        k = self.rules.cards_per_color
        cards = [c for c in range(color * k, (color + 1) * k) if s.expedition_cards[player, c]]
        return " ".join(self.face(c) for c in cards) or "-"

    def _left(self) -> int:
        """Width of the left column of the tables (title or "  N colour")."""
        names = max(len(self.color_name(c)) for c in range(self.rules.n_colors))
        return max(len("Final scores") + 2, names + 6)

    def _expeditions(self, s, exp_scores, human: int, title: str, *, total: bool) -> list[str]:
        """The expeditions table: both players' cards and score per colour."""
        r, agent, left = self.rules, 1 - human, self._left()
        cards = {
            (p, c): self._expedition(s, p, c) for p in (human, agent) for c in range(r.n_colors)
        }
        width = max([14] + [len(text) + 2 for text in cards.values()])
        lines = [f"{title:<{left}}{'You':<{width}}{'score':>6}     {'Agent':<{width}}{'score':>6}"]
        for c in range(r.n_colors):
            lines.append(
                f"  {c + 1} {self.color_name(c):<{left - 4}}"
                f"{cards[human, c]:<{width}}{int(exp_scores[human, c]):>6}     "
                f"{cards[agent, c]:<{width}}{int(exp_scores[agent, c]):>6}"
            )
        if total:
            you, them = int(s.scores[human]), int(s.scores[agent])
            lines.append(f"  {'total':<{left - 2}}{'':<{width}}{you:>6}     {'':<{width}}{them:>6}")
        return lines

    def render_board(self, s, exp_scores, human: int) -> str:
        """Everything the human may see: expeditions, piles, deck, scores, own hand."""
        r, agent, left = self.rules, 1 - human, self._left()
        label = {human: "You", agent: "Agent"}
        deck_left = r.n_cards - int(s.deck_pos)
        lines = [
            "",
            "=" * 64,
            f"Turn {int(s.turn) + 1} (at most {r.max_turns})  |  deck: "
            f"{_plural(deck_left, 'card')} left  |  {label[int(s.current_player)]} to move",
            "",
            *self._expeditions(s, exp_scores, human, "Expeditions", total=False),
            "",
            "Discard piles",
        ]
        for c in range(r.n_colors):
            size = int(s.pile_sizes[c])
            if size:
                top = self.face(s.discards[c, size - 1])
                pile = f"{top} on top ({_plural(size, 'card')})"
            else:
                pile = "empty"
            lines.append(f"  {c + 1} {self.color_name(c):<{left - 4}}{pile}")
        you, them = int(s.scores[human]), int(s.scores[agent])
        lines.append("")
        lines.append(f"Scores: you {you}, agent {them}  ({_lead(you - them)})")
        known = [self.card_name(c) for c in np.flatnonzero(s.known_cards[agent])]
        if known:
            lines.append(f"The agent holds (taken from a pile): {', '.join(known)}")
        lines.append(f"Your hand: {self.render_hand(s, human)}")
        return "\n".join(lines)

    def render_hand(self, s, player: int) -> str:
        n = self.rules.n_cards
        slots = [
            f"[{i + 1}] {self.card_name(card)}"
            for i, card in enumerate(s.hands[player])
            if int(card) != n
        ]
        return "  ".join(slots) or "(empty)"

    def render_final(self, s, exp_scores, human: int) -> str:
        """The final expeditions and scores, and who won."""
        r, agent = self.rules, 1 - human
        if bool(s.truncated):
            how = f"the turn limit of {r.max_turns} is reached"
        elif int(s.illegal_player) >= 0:
            how = "an illegal move"
        else:
            how = "the deck is exhausted"
        lines = [
            "",
            "=" * 64,
            f"Game over: {how}.",
            "",
            *self._expeditions(s, exp_scores, human, "Final scores", total=True),
        ]
        you, them = int(s.scores[human]), int(s.scores[agent])
        lines.append("")
        if int(s.illegal_player) >= 0:
            loser = "You" if int(s.illegal_player) == human else "The agent"
            lines.append(f"{loser} made an illegal move and lost.")
        elif you > them:
            lines.append(f"You win by {_plural(you - them, 'point')}!")
        elif them > you:
            lines.append(f"The agent wins by {_plural(them - you, 'point')}.")
        else:
            lines.append("The game is a draw.")
        return "\n".join(lines)

    # ----- input -----------------------------------------------------------------------

    def help_text(self, moves: np.ndarray) -> str:
        colors = ", ".join(self.color_name(c) for c in range(self.rules.n_colors))
        return "\n".join(
            [
                "Commands:",
                f"  {f'1-{len(moves)}':<17}the move with that number in the list",
                "  p N / play N     play the card in slot N of your hand",
                "  d N / discard N  discard the card in slot N",
                "  deck             draw from the deck",
                f"  pile C           draw the top of pile C (1-{self.rules.n_colors} or {colors})",
                "  help             this list",
                "  quit             leave the game",
                "A turn is two moves: play or discard a card, then draw one. Numbered cards go",
                "up within an expedition; wagers (W) only before its first numbered card.",
            ]
        )

    def parse(self, text: str, s, mask: np.ndarray) -> tuple[int | None, str | None]:
        """(action, None) for a legal move, (QUIT, None), or (None, a message to show)."""
        r, h, p = self.rules, self.h, int(s.current_player)
        moves = np.flatnonzero(mask)
        text = " ".join(text.strip().lower().split())
        if not text:
            return None, f"Empty input: type a move number (1-{len(moves)}), or 'help'."
        if text in QUIT_WORDS:
            return QUIT, None
        if text in HELP_WORDS:
            return None, self.help_text(moves)
        if re.fullmatch(r"[+-]?\d+", text):
            number = int(text)
            if 1 <= number <= len(moves):
                return int(moves[number - 1]), None
            return None, f"No move {number}: choose a number from 1 to {len(moves)}."
        card_phase = int(s.phase) == CARD_PHASE
        held = int(np.sum(s.hands[p] != r.n_cards))
        match = re.fullmatch(r"(p|play|d|discard) ?(\d+)", text)
        if match:
            slot = int(match.group(2)) - 1
            if not card_phase:
                return (
                    None,
                    "You have played or discarded this turn: now draw ('deck' or 'pile C').",
                )
            if not 0 <= slot < held:
                return None, f"There is no slot {slot + 1}: your hand has slots 1-{held}."
            action = slot if match.group(1).startswith("p") else h + slot
            if mask[action]:
                return action, None
            return None, self.why_not_play(s, slot)
        if text in ("deck", "draw", "draw deck", "draw from deck"):
            if card_phase:
                return None, "First play or discard a card; you draw afterwards."
            return r.draw_deck_action, None
        match = re.fullmatch(r"(pile|take|draw|draw pile) (\S+)", text)
        if match:
            color = self._parse_color(match.group(2))
            if color is None:
                names = ", ".join(self.color_name(c) for c in range(r.n_colors))
                return None, (
                    f"Unknown pile {match.group(2)!r}: use 1-{r.n_colors} or one of {names}."
                )
            if card_phase:
                return None, "First play or discard a card; you draw afterwards."
            name = self.color_name(color)
            if int(s.pile_sizes[color]) == 0:
                return None, f"The {name} pile is empty."
            if int(s.forbidden_pile) == color:
                return None, f"You can't take back the {name} card you discarded this turn."
            return r.first_pile_action + color, None
        return None, (
            f"Unrecognised input {text!r}: type a move number (1-{len(moves)}), or 'help'."
        )

    def _parse_color(self, word: str) -> int | None:
        if word.isdigit():
            color = int(word) - 1
            return color if 0 <= color < self.rules.n_colors else None
        for c in range(self.rules.n_colors):
            if self.color_name(c) == word:
                return c
        return None

    def why_not_play(self, s, slot: int) -> str:
        """Why the card in `slot` cannot be played now (the terminal and the web game)."""
        r, p = self.rules, int(s.current_player)
        card = int(s.hands[p, slot])
        color = r.card_color(card)
        name = self.color_name(color)
        if r.card_is_wager(card):
            return (
                f"You can't play {self.card_name(card)}: your {name} expedition already has "
                "numbered cards (wagers must come first)."
            )
        top = r.min_rank + int(s.expedition_top[p, color])
        return (
            f"You can't play {self.card_name(card)}: your {name} expedition is already at "
            f"{top} (cards must go up)."
        )

    # ----- the agent ---------------------------------------------------------------------

    def agent_action(self, state, mask, *, seed: int, deal: int, decision: int, history=None):
        """(action, its probability) under the strategy network; with search, the
        searched action and the network's probability of it (`history`: the game's public
        moves, `search_lib.jitted_record`'s, which an opponent model replays)."""
        if self._search is not None:
            if history is None:
                history = search_lib.empty_history(self.rules)
            found = self._search(
                self._search_params,
                state,
                np.uint32(seed),
                np.uint32(deal),
                np.int32(decision),
                history,
            )
            action = int(found.action)
            return action, float(found.policy[action])
        probs = np.asarray(self._policy(self.agent.params, state), np.float64)
        legal = np.flatnonzero(mask)
        weights = probs[legal]
        if not np.isfinite(weights).all() or weights.sum() <= 0:
            weights = np.ones(len(legal))  # cannot happen with a finite network; stay legal
        weights = weights / weights.sum()
        if self.mode == "greedy":  # as the vectorised evaluation plays it
            greedy = pol.greedy_action(
                probs.astype(np.float32), np.asarray(mask, bool), self.rules.n_colors
            )
            index = int(np.searchsorted(legal, int(greedy)))
        else:
            bits = rng.random_bits_py(seed, 0, deal, decision, rng.Purpose.OPPONENT)
            u = (bits >> 8) * 2.0**-24
            index = min(int(np.searchsorted(np.cumsum(weights), u, side="right")), len(legal) - 1)
        return int(legal[index]), float(weights[index])

    # ----- one game ----------------------------------------------------------------------

    def play(
        self,
        *,
        human: int,
        deal: int,
        seed: int,
        infile: TextIO,
        outfile: TextIO,
    ) -> int:
        """Plays one game on the terminal; returns the exit status (0, also for 'quit')."""

        def say(text: str = "") -> None:
            outfile.write(text + "\n")
            outfile.flush()

        r = self.rules
        echo = not _isatty(infile)
        state = self._init(np.uint32(seed), np.uint32(deal))
        kind = f"{self.mode} agent"
        if self.search is not None:
            o = self.search
            kind = (
                f"searching agent: {o.determinizations} worlds, "
                f"{o.candidates or 'all'} candidates a decision"
            )
        say(
            f"Lost Cities: you (player {human}) against checkpoint {self.agent.iteration} "
            f"of {self.agent.workdir} ({kind})."
        )
        if self.agent.note:
            say(f"Note: {self.agent.note}.")
        say(
            f"Deal {deal}, seed {seed}: replay this game with --deal={deal} --seed={seed} "
            f"--seat={human} --mode={self.mode}."
        )
        say(
            f"Rules: {r.n_colors} colours, values {r.min_rank}-{r.min_rank + r.n_ranks - 1}, "
            f"{_plural(r.n_wagers, 'wager')} per colour, hands of {r.hand_size}. "
            "Type 'help' for commands."
        )
        decision = 0
        history = search_lib.empty_history(self.rules)
        while True:
            s = jax.device_get(state)
            mask, exp_scores = jax.device_get(self._view(state))
            if bool(s.terminal):
                say(self.render_final(s, exp_scores, human))
                return 0
            player = int(s.current_player)
            moves = np.flatnonzero(mask)
            if player == human and len(moves) == 1:
                # a forced move (the deck is the only draw): made for the player, and said
                action = int(moves[0])
                say(f"{self.announce(s, action, human=True)[:-1]} (your only move).")
            elif player == human:
                say(self.render_board(s, exp_scores, human))
                phase = "play or discard a card" if int(s.phase) == CARD_PHASE else "draw a card"
                say(f"Your moves ({phase}):")
                for number, action in enumerate(moves, start=1):
                    say(f"  {number:>2}. {self.describe(s, int(action))}")
                while True:
                    outfile.write(f"Your move [1-{len(moves)}, help, quit]> ")
                    outfile.flush()
                    line = infile.readline()
                    if not line:
                        say("")
                        say("End of input: leaving the game (no result).")
                        return 0
                    if echo:
                        say(line.rstrip("\n"))
                    action, message = self.parse(line, s, mask)
                    if action == QUIT:
                        say("You quit: the game is abandoned (no result).")
                        return 0
                    if action is not None:
                        break
                    say(message)
                say(self.announce(s, action, human=True))
            else:
                action, prob = self.agent_action(
                    state, mask, seed=seed, deal=deal, decision=decision, history=history
                )
                say(f"{self.announce(s, action, human=False)[:-1]} (p={prob:.2f}).")
            history = self._record(history, state, np.int32(action))
            state = self._step(state, np.int32(action))
            decision += 1


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _lead(diff: int) -> str:
    if diff > 0:
        return f"you lead by {diff}"
    if diff < 0:
        return f"the agent leads by {-diff}"
    return "level"


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
