"""Networks: the MLP shared by the advantage and strategy networks, and its heads."""

from lc_cfr.nets.mlp import (
    ACTIVATIONS,
    NetworkSpec,
    apply,
    from_layout,
    init_params,
    layout_shapes,
    masked_advantages,
    masked_log_policy,
    masked_policy,
    to_layout,
)

__all__ = [
    "ACTIVATIONS",
    "NetworkSpec",
    "apply",
    "from_layout",
    "init_params",
    "layout_shapes",
    "masked_advantages",
    "masked_log_policy",
    "masked_policy",
    "to_layout",
]
