"""Play Lost Cities in the terminal against a trained agent.

    python -m lc_cfr.play --workdir=RUN [--checkpoint=N] [--seat=0|1] [--deal=G]
                          [--mode=greedy|sampled] [--seed=S]
                          [--search [--search_determinizations=D] [--search_candidates=K]
                           [--search_prior_weight=C] [--search_rollout=greedy|sampled]
                           [--search_stderr_weight=Z]
                           [--search_opponent_model=none|blueprint] [--search_world_pool=P]
                           [--search_evidence_weight=E] [--search_min_effective_share=S]
                           [--search_leaf_decisions=L]]

The agent is the average-strategy network of checkpoint N of the run (the latest by
default). The config is rebuilt from RUN/config.json. The deal is game G of the shared
generator (`engine.init(rules, seed, G)`), drawn from the clock unless given, and is
printed with the seed so that a game can be replayed. In `sampled` mode the agent draws
its moves with the shared generator (purpose OPPONENT), so a replay with the same human
moves is the same game. With --search the agent searches over that network at each of its
decisions (`lc_cfr.search`, docs/search.md): a stronger and slower opponent, whose moves
also replay exactly.

Each human decision shows the board and a numbered list of the legal moves. Type a move
number, or a short command: `p3` (play slot 3), `d3` (discard slot 3), `deck`,
`pile 2` / `pile blue`; `help` lists them and `quit` (or end of input) leaves the game.
Slots and colours are numbered from 1. Bad input is explained and asked again. A forced
move (the deck is the only draw) is made for you and announced.

This module is the command line only; the game itself is `lc_cfr.terminal_game`.
"""

from __future__ import annotations

import signal
import sys
import time

if __name__ == "__main__":
    # Ctrl-C while JAX loads (a few seconds) leaves quietly instead of with a traceback
    # from inside an import; main() hands SIGINT back to the game's own handling.
    signal.signal(signal.SIGINT, lambda *_: sys.exit(130))

from absl import app, flags, logging  # noqa: E402

from lc_cfr import compile_cache  # noqa: E402
from lc_cfr import search as search_lib  # noqa: E402
from lc_cfr.terminal_game import MODES, Game, PlayError, load_agent  # noqa: E402

FLAGS = flags.FLAGS
_SEARCH_FLAGS: dict = {}


def _define_flags(flag_values: flags.FlagValues = FLAGS) -> None:
    """Defined only when run as a program, so that importing this module defines none."""
    flags.DEFINE_string(
        "workdir", None, "Training run directory (holds config.json).", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "checkpoint",
        None,
        "Checkpoint iteration (default: the latest).",
        lower_bound=0,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "seat",
        0,
        "Your seat: 0 moves first, 1 second.",
        lower_bound=0,
        upper_bound=1,
        flag_values=flag_values,
    )
    flags.DEFINE_integer(
        "deal",
        None,
        "Game index of the shared generator (default: from the clock, printed).",
        lower_bound=0,
        upper_bound=2**32 - 1,
        flag_values=flag_values,
    )
    flags.DEFINE_enum(
        "mode", "greedy", list(MODES), "How the agent picks its moves.", flag_values=flag_values
    )
    flags.DEFINE_integer(
        "seed",
        0,
        "Seed of the deal and of the sampled agent's choices.",
        lower_bound=0,
        upper_bound=2**32 - 1,
        flag_values=flag_values,
    )
    flags.DEFINE_boolean(
        "search",
        False,
        "The agent searches over its network at each decision (docs/search.md).",
        flag_values=flag_values,
    )
    _SEARCH_FLAGS.update(search_lib.define_flags(flag_values))


def _fail(message: str, status: int = 1):
    sys.stderr.write(f"lc_cfr.play: {message}\n")
    sys.stderr.flush()
    sys.exit(status)


def _parse_flags(argv):
    try:
        return FLAGS(argv)
    except flags.Error as error:
        _fail(f"{error}", status=2)


def main(argv) -> int:
    signal.signal(signal.SIGINT, signal.default_int_handler)  # KeyboardInterrupt from here
    logging.set_verbosity(logging.WARNING)  # no INFO lines (jax's backend probing) on stderr
    if len(argv) > 1:
        _fail(f"unexpected arguments {argv[1:]} (all options are --flags)", status=2)
    if not FLAGS.workdir:
        _fail("--workdir is required: the training run to play against", status=2)
    compile_cache.quiet_backend_probe()
    compile_cache.enable(compile_cache.directory())
    deal = FLAGS.deal if FLAGS.deal is not None else time.time_ns() // 1000 % 2**31
    try:
        search = search_lib.options_from_flags(_SEARCH_FLAGS) if FLAGS.search else None
        game = Game(load_agent(FLAGS.workdir, FLAGS.checkpoint), mode=FLAGS.mode, search=search)
        return game.play(
            human=FLAGS.seat, deal=deal, seed=FLAGS.seed, infile=sys.stdin, outfile=sys.stdout
        )
    except PlayError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        sys.stdout.write("\nInterrupted: leaving the game (no result).\n")
        sys.stdout.flush()
        return 130


if __name__ == "__main__":
    _define_flags()
    app.run(main, flags_parser=_parse_flags)
