"""The torch path: torch networks and learner, and the Cython + torch backends.

* `nets`: `TorchMLP` (state_dict keys equal the canonical layout of
  `lc_cfr.nets.mlp.to_layout`) and the masked heads;
* `learner`: `TorchLearner`, the counterpart of `lc_cfr.learn.learner.Learner` fed with
  explicit batch indices; `trainer_learner` puts it behind the trainer
  (`optimization.learner=torch`);
* `backends`: the `recursive`, `interleaved` and `server` traversal backends, with
  `workers` (the worker side), `weights` (the shared-memory weight board and the torch
  networks a process evaluates) and `server` (the Option A inference server).

Importing this package imports torch; the trainer does so only when a torch backend or
the torch learner is configured.
"""

from lc_cfr.torch_path.learner import AdamWState, MemoryTensors, TorchLearner, memory_tensors
from lc_cfr.torch_path.nets import (
    TorchMLP,
    from_layout,
    masked_advantages,
    masked_log_policy,
    masked_policy,
    to_layout,
)

__all__ = [
    "AdamWState",
    "MemoryTensors",
    "TorchLearner",
    "TorchMLP",
    "from_layout",
    "masked_advantages",
    "masked_log_policy",
    "masked_policy",
    "memory_tensors",
    "to_layout",
]
