"""The torch path: a torch MLP and learner that match the flax network and optax learner.

`nets` holds `TorchMLP` (state_dict keys equal the canonical layout of
`lc_cfr.nets.mlp.to_layout`) and the masked heads; `learner` holds `TorchLearner`, the
counterpart of `lc_cfr.learn.learner.Learner` fed with explicit batch indices.
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
