"""Kept copies of past networks: the self-play league and the SD-CFR snapshots.

The league (`self_play.league_size`) is a ring of the strategy network's last snapshots,
which the `league` opponent plays. The SD-CFR snapshots (`sd_cfr.snapshots`, Steinberger
2019, arXiv:1901.07621) are past iterations' advantage networks kept by Chao's weighted
reservoir sampler (1982), so that drawing a kept snapshot uniformly draws iteration s
with probability proportional to its training weight (`lc_cfr.eval.Snapshots`).
Both are pure functions of the state and the draws handed in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def stacked(params, k: int, fill: bool):
    """`params` with every leaf stacked k times ([k, ...]): copies, or zeros unless `fill`."""
    if fill:
        return jax.tree.map(lambda x: jnp.stack([x] * k), params)
    return jax.tree.map(lambda x: jnp.zeros((k,) + x.shape, x.dtype), params)


def put(stack, slot: int, params):
    """`stack` with `params` in slot `slot`."""
    return jax.tree.map(lambda s, x: s.at[slot].set(x), stack, params)


def league_slot(added: int, league_size: int) -> int:
    """The ring slot of the league's next snapshot (`added` taken so far)."""
    return added % league_size


def iteration_weight(t: int, weighting: str) -> float:
    """Iteration t's weight in the average strategy (`training_weighting.average_mode`,
    resolved)."""
    return {"lcfr": float(t), "quadratic": float(t) ** 2}.get(weighting, 1.0)


def chao_slot(count: int, k: int, weight: float, total: float, draw: float, pick: int):
    """The slot an offered item takes in Chao's weighted reservoir of size k, or None.

    Once the k slots are full, the item enters with probability min(1, k w / W), W the
    total weight so far, and replaces a uniformly chosen slot. An item s is then kept
    with probability k w_s / W (exactly, for the items after the first k; the first k
    are over-represented while they are few against W).

    Args:
      count: items held (< k: the item takes the next free slot).
      k: capacity.
      weight: the item's weight; total: the total weight offered, this item included.
      draw: uniform in [0, 1); pick: uniform in [0, k), the slot it would replace.
    """
    if count < k:
        return count
    return pick if draw < min(1.0, k * weight / total) else None


def add_to_league(league, added: int, params, *, t: int, every: int, size: int):
    """(league, snapshots taken) with iteration t's strategy `params` in the ring when t
    is a multiple of `every` (self_play.snapshot_every)."""
    if t % every:
        return league, added
    return put(league, league_slot(added, size), params), added + 1


def offer_sd(stacks, count: int, total: float, params, *, weight: float, draw: float, pick: int):
    """(stacks, count, total weight) after offering `params` (both players' advantage
    networks) with `weight` to the SD-CFR reservoir of K = len(stacks' leading axis)
    slots; `draw`, `pick` as `chao_slot` takes them."""
    k = jax.tree.leaves(stacks)[0].shape[0]
    total = total + weight
    slot = chao_slot(count, k, weight, total, draw, pick)
    if slot is not None:
        stacks = tuple(put(s, slot, p) for s, p in zip(stacks, params, strict=True))
    return stacks, min(count + 1, k), total
