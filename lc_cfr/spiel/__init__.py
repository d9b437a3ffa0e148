"""OpenSpiel integration (optional): exact exploitability on a tiny Lost Cities variant,
and OpenSpiel's search bots as opponents.

OpenSpiel (Lanctot et al. 2019, "OpenSpiel: A Framework for Reinforcement Learning in
Games", arXiv:1908.09453) provides exact best responses and tabular solvers. This package
makes lc_cfr's game one of its games and uses them as a yardstick (docs/exploitability.md):

* `lc_cfr.spiel.game`: the pyspiel game `python_lost_cities` (every `Rules` field a game
  parameter, plus `utility_scale`), played by the Cython engine.
* `lc_cfr.spiel.exploitability`: `ExploitabilityEvaluator`, the exact exploitability of
  Deep CFR networks, and `openspiel_policy`, a tabular policy over lc_cfr's action layout
  as an OpenSpiel policy.
* `lc_cfr.spiel.bots`: OpenSpiel's MCTS and ISMCTS bots, and the sequential mirrored loop
  that plays them on lc_cfr's deals against lc_cfr's bots or a run's networks
  (`lc_cfr.evaluate --opponents=openspiel_ismcts`, docs/bots.md).
* `scripts/openspiel_reference.py`: OpenSpiel's CFR and MCCFR solvers on the same game.

The submodules need `pyspiel` (`pip install .[openspiel]`); this module does not, so that
configurations can name `TINY_RULES` without OpenSpiel installed.
"""

from lc_cfr.game.rules import Rules

TINY_RULES = Rules(
    n_colors=1,
    n_ranks=4,
    min_rank=2,
    n_wagers=1,
    hand_size=1,
    expedition_penalty=-5,
    bonus_threshold=8,
    bonus_amount=20,
    max_turns=4,
)
"""The enumerable variant of the yardstick: one colour of five cards, one-card hands.

Cards: a wager (id 0) and 2, 3, 4, 5 (ids 1-4); an expedition scores (sum - 5) * (1 +
wagers), from -10 (the wager alone) to +18 (all five). Three cards stay in the deck after
the deal, so a game lasts three turns (four if someone draws from the discard pile, which
`max_turns = 4` cuts). Hidden: the opponent's card and the deck order. Choices: play or
discard, then draw from the deck or the pile.

Size of `python_lost_cities` on it (the deal is one chance node per card): 7426 histories
(2146 chance nodes, 3360 decision nodes, 1920 terminals); 855 information states of player
0 and 1260 of player 1, 2115 in all. Encoding 47 floats, 4 actions.

Measured on the 2-core development machine (shared with other jobs, load ~3.5): listing
the information states (OpenSpiel's `TabularPolicy`) 0.2-0.3 s; `nash_conv` of one policy
0.7 s; `ExploitabilityEvaluator` built in 0.4 s, a call 0.65 s per view (1.3 s for both);
Python `CFRSolver` 0.21 s an iteration (300 in 64 s); outcome-sampling MCCFR 0.66 ms and
external-sampling MCCFR 1.6 ms an iteration. Reference curves: docs/openspiel_reference.json.
"""

# Variants with more cards than this are refused by the trainer's exploitability schedule:
# their trees take minutes to hours to enumerate (docs/exploitability.md has the sizes).
MAX_ENUMERABLE_CARDS = 6


def check_enumerable(rules: Rules, field: str) -> None:
    """Raises ValueError naming `field` when `rules` is too large to enumerate."""
    if rules.n_cards > MAX_ENUMERABLE_CARDS:
        raise ValueError(
            f"{field}: exact exploitability enumerates the whole game; these rules have "
            f"{rules.n_cards} cards, at most {MAX_ENUMERABLE_CARDS} are allowed (e.g. the "
            "configs/default.py:tiny preset, lc_cfr.spiel.TINY_RULES)"
        )


__all__ = ["MAX_ENUMERABLE_CARDS", "TINY_RULES", "check_enumerable"]
