"""Trains lc_cfr: python -m lc_cfr.main --config=configs/default.py [--workdir=DIR].

Config fields are overridden with --config.a.b=value (ml_collections). Pointing
--workdir at an existing run resumes it from its latest checkpoint. Errors a user can
fix (a config field, a run that diverged, a path) end the run with one line naming the
field, value or path and a non-zero status; --traceback (or LC_CFR_TRACEBACK=1) shows
the traceback instead.

Several processes train one run when `distributed.coordinator_address` is set: start one
per host with the same flags and its own --config.distributed.process_id (or
coordinator_address=auto under SLURM / Open MPI); process 0 writes --workdir
(docs/scaling.md).
"""

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from lc_cfr import compile_cache
from lc_cfr.train import Trainer, distributed
from lc_cfr.train.health import NonFiniteError
from lc_cfr.train.trainer import default_workdir

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<time>).")
_TRACEBACK = flags.DEFINE_bool(
    "traceback", False, "Show the traceback of an error (also LC_CFR_TRACEBACK=1)."
)
flags.mark_flags_as_required(["config"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    compile_cache.quiet_backend_probe()
    compile_cache.enable(compile_cache.directory())
    workdir = _WORKDIR.value or str(default_workdir())
    try:
        # before anything touches a device: the processes agree on one device list
        distributed.initialize(_CONFIG.value)
        if distributed.is_writer():
            logging.info("training in %s", workdir)
        state = Trainer(_CONFIG.value, workdir).run()
    except (ValueError, NonFiniteError, OSError) as error:
        if _TRACEBACK.value or os.environ.get("LC_CFR_TRACEBACK") == "1":
            raise
        # a bad config field, a diverged run, an unusable path: say which, in one line
        print(f"lc_cfr.main: error: {error}", file=sys.stderr)
        return 1
    if distributed.is_writer():
        print(f"finished iteration {state.iteration}; run directory: {workdir}")
    return 0


def parse_flags(argv):
    """absl's parser, with a mistyped --config.* field reported in one line."""
    try:
        return app.parse_flags_with_usage(argv)
    except (KeyError, AttributeError, TypeError, ValueError) as error:
        if "--traceback" in argv or os.environ.get("LC_CFR_TRACEBACK") == "1":
            raise
        message = error.args[0] if error.args else error
        print(f"lc_cfr.main: error: {' '.join(str(message).split())}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
