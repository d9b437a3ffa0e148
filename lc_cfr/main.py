"""Trains lc_cfr: python -m lc_cfr.main --config=configs/default.py [--workdir=DIR].

Config fields are overridden with --config.a.b=value (ml_collections). Pointing
--workdir at an existing run resumes it from its latest checkpoint.
"""

import os

import jax
from absl import app, flags, logging
from ml_collections import config_flags

from lc_cfr.train import Trainer
from lc_cfr.train.trainer import default_workdir

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training config file.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory (default: runs/<time>).")
flags.mark_flags_as_required(["config"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cache = os.environ.get("LC_CFR_JAX_CACHE", os.path.expanduser("~/.cache/lc_cfr/jax"))
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
    workdir = _WORKDIR.value or str(default_workdir())
    logging.info("training in %s", workdir)
    try:
        trainer = Trainer(_CONFIG.value, workdir)
    except ValueError as error:  # a bad config field: say which, without a traceback
        raise app.UsageError(str(error)) from error
    state = trainer.run()
    print(f"finished iteration {state.iteration}; run directory: {workdir}")


if __name__ == "__main__":
    app.run(main)
