"""The trainer: one loop over a traversal backend, learners, checkpoints and metrics.

`setup` reads the config, `run_format` is a run directory's contract, `trainer` is the
loop. `Trainer` is loaded on first use, so that the readers of a saved run (evaluation,
play, reports) that import `lc_cfr.train.run_format` never load the loop.
"""

__all__ = ["Trainer"]


def __getattr__(name: str):
    if name == "Trainer":
        from lc_cfr.train.trainer import Trainer

        return Trainer
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
