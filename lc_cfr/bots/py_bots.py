"""The bots for the Cython engine (the multiprocessing backends), by their API name.

`bot_action(rules, name, game, seed, iteration, game_index, decision) -> int` takes a
dealt, unfinished `lc_cfr.game.cy_engine.CyGame` and returns the same action as
`lc_cfr.bots.jax_bots.bot_action` on the same state and keys. The implementation is the
compiled `lc_cfr.bots.cy_bots` (built by setup.py next to the engine); Cython traversals
can cimport its `nogil` core from `lc_cfr/bots/cy_bots.pxd`.
"""

from lc_cfr.bots.cy_bots import bot_action, heuristic_action, play_match

__all__ = ["bot_action", "heuristic_action", "play_match"]
