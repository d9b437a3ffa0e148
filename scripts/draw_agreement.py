"""Diagnosis: why does a greedy average strategy draw from the deck where its run's current
policy takes a pile? (docs/experiments.md 53)

The average strategy is a fit of the strategy memory: every iteration's policy at the
states its traversals met. Where consecutive iterations choose differently at the same
kind of state, their average is mixed there and a greedy reading of it takes the side
with more of the mass, even if each iteration alone was sure. This script measures that
at the draw decisions, the one place docs/experiments.md 52 found the greedy average to
lose its points: it restores checkpoint STEP of a run, takes up to `--rows` rows of its
strategy memory where the deck and at least one pile are legal, and reports per band of
the iteration that wrote them (`--bands` bands of equal rows):

- the stored targets (that iteration's policy): the piles' mean probability, the share
  of rows whose piles together outweigh the deck, the share of nearly one-hot targets;
- a fit of the memory as the run fits its strategy network (from scratch, the run's
  updates, batch, weighting and rate; `--refit-seed`), and the checkpoint's own strategy
  network: the piles' mean probability and the share whose piles outweigh the deck;
- the checkpoint's current policy (regret matching on each player's advantage network:
  a row does not record its player, so both): the share whose piles outweigh the deck,
  and how often it chooses as the row's target did (pile or deck);
- per player, at the draw rows of its advantage memory (the sampled regrets that the
  current policies are fitted to): the piles' mean target regret less the deck's, its
  mean, standard deviation and the share above 0, beside the same difference as the
  player's advantage network predicts it and the correlation of the two, in utility
  units as the memory stores them (`utility_scale` points each, in the JSON). A mean
  small against the standard deviation is a choice whose sign the samples barely carry.

    .venv/bin/python scripts/draw_agreement.py --workdir RUN [--checkpoint STEP] \\
        [--rows 200000] [--bands 10] [--refit-seed 0] [--seed 0] [--json out.json]

Nothing in the run directory is written.
"""

from __future__ import annotations

import argparse
import functools
import json
import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402
from leaf_noise import is_draw_choice  # noqa: E402

from lc_cfr.eval.metrics import per_deal_stderr  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.train.setup import learner_from_config  # noqa: E402
from lc_cfr.traversal import policy as pol  # noqa: E402

ONE_HOT = 0.99  # a target whose largest probability is at least this is called one-hot
CHUNK = 8192  # rows per forward


def pile_mass(probs: np.ndarray, mask: np.ndarray, deck: int) -> np.ndarray:
    """[N] the legal piles' total probability."""
    return np.where(mask[:, deck + 1 :], probs[:, deck + 1 :], 0.0).sum(axis=1)


def pile_edge(values: np.ndarray, mask: np.ndarray, deck: int) -> np.ndarray:
    """[N] the legal piles' mean value less the deck's (regrets or advantages)."""
    legal = mask[:, deck + 1 :]
    piles = np.where(legal, values[:, deck + 1 :], 0.0).sum(axis=1) / legal.sum(axis=1)
    return piles - values[:, deck]


def regret_summary(
    sampled: np.ndarray, predicted: np.ndarray, select: np.ndarray, low: int, high: int
) -> dict:
    """The piles' edge over the deck in one band: sampled targets beside predictions."""
    s, p = sampled[select].astype(np.float64), predicted[select].astype(np.float64)
    both_vary = len(s) > 1 and s.std() > 0 and p.std() > 0
    return {
        "iterations": [low, high],
        "rows": int(select.sum()),
        "sampled_mean": float(s.mean()),
        "sampled_stderr": per_deal_stderr(s),  # rows as independent observations
        "sampled_sd": float(s.std()),
        "sampled_positive": float((s > 0).mean()),
        "predicted_mean": float(p.mean()),
        "predicted_sd": float(p.std()),
        "predicted_positive": float((p > 0).mean()),
        "correlation": float(np.corrcoef(s, p)[0, 1]) if both_vary else 0.0,
    }


def _read_draw_rows(memory, *, rules, limit: int, rng, codec):
    """(mask, target, iteration, decoded info, the memory's draw rows) of up to `limit`
    draw rows of a memory (`leaf_noise.is_draw_choice`), drawn without replacement and
    kept in memory order; None if it has none."""
    size = int(memory.size)
    mask = np.asarray(memory.mask[:size])
    candidates = np.flatnonzero(np.asarray(is_draw_choice(rules, mask)))
    if candidates.size == 0:
        return None
    rows = np.sort(rng.choice(candidates, size=min(limit, candidates.size), replace=False))
    info = codec.decode_numpy(np.asarray(memory.info[:size])[rows])
    return (
        mask[rows],
        np.asarray(memory.target[:size])[rows],
        np.asarray(memory.iteration[:size])[rows],
        info,
        candidates.size,
    )


def band_edges(iterations: np.ndarray, bands: int) -> list[tuple[int, int]]:
    """Inclusive iteration ranges of about equal rows, in order, none empty."""
    # upper ends at the 1/bands, 2/bands, ..., 1 quantiles: the last is the largest
    highs = np.quantile(iterations, np.linspace(0, 1, bands + 1)[1:]).round().astype(int)
    edges, low = [], int(iterations.min())
    for cut in np.unique(highs):
        if cut >= low:
            edges.append((low, int(cut)))
            low = int(cut) + 1
    return edges


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="run directory")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--rows", type=int, default=200_000, help="draw rows read, at most")
    parser.add_argument("--bands", type=int, default=10, help="iteration bands")
    parser.add_argument("--refit-seed", type=int, default=0, help="the fit's batches and weights")
    parser.add_argument("--seed", type=int, default=0, help="which draw rows are read")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args()
    for flag in ("rows", "bands"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag} must be >= 1, got {getattr(args, flag)}")

    workdir = pathlib.Path(args.workdir)
    config = bench_common.run_config(workdir)
    trainer, state = bench_common.restored_run(config, workdir, args.checkpoint)
    deck = trainer.rules.draw_deck_action
    codec = trainer.strategy_learner.codec
    rng = np.random.default_rng(args.seed)
    read = functools.partial(
        _read_draw_rows, rules=trainer.rules, limit=args.rows, rng=rng, codec=codec
    )
    rows = read(state.strategy_memory)
    if rows is None:
        raise SystemExit(f"checkpoint {int(state.iteration)}: no draw rows in the strategy memory")
    mask, target, iterations, info, draw_count = rows

    fit_config = config.copy_and_resolve_references()
    fit_config.optimization.strategy_init = "scratch"
    learner = learner_from_config(fit_config, trainer.spec, "strategy", codec=codec)
    key = jax.random.PRNGKey(args.refit_seed)
    params, opt_state = learner.init(jax.random.fold_in(key, 1))
    refit, _, _ = learner.train(params, opt_state, state.strategy_memory, key)

    spec = trainer.spec
    matching = jax.vmap(
        functools.partial(
            pol.regret_matching, fallback=config.regret_matching.all_negative_fallback
        )
    )
    strategy = jax.jit(lambda p, x, m: mlp.masked_policy(mlp.apply(spec, p, x), m))
    advantages = jax.jit(lambda p, x, m: mlp.masked_advantages(mlp.apply(spec, p, x), m))
    current = jax.jit(lambda p, x, m: matching(advantages(p, x, m), m))

    def forward(fn, params, info, mask) -> np.ndarray:
        out = [
            np.asarray(
                fn(params, jnp.asarray(info[s : s + CHUNK], jnp.float32), mask[s : s + CHUNK])
            )
            for s in range(0, len(mask), CHUNK)
        ]
        return np.concatenate(out)

    target_piles = pile_mass(target, mask, deck)
    target_pile = target_piles > target[:, deck]
    one_hot = np.where(mask, target, 0.0).max(axis=1) >= ONE_HOT
    views = {
        "refit": forward(strategy, refit, info, mask),
        "own": forward(strategy, state.strategy_params, info, mask),
    }
    for player in (0, 1):
        views[f"current_p{player}"] = forward(current, state.advantage_params[player], info, mask)
    view_piles = {name: pile_mass(p, mask, deck) for name, p in views.items()}
    view_pile = {name: view_piles[name] > p[:, deck] for name, p in views.items()}

    def summary(select: np.ndarray, low: int, high: int) -> dict:
        out = {
            "iterations": [low, high],
            "rows": int(select.sum()),
            "target_pile_mass": float(target_piles[select].mean()),
            "target_pile_share": float(target_pile[select].mean()),
            "target_one_hot_share": float(one_hot[select].mean()),
        }
        for name in views:
            out[f"{name}_pile_mass"] = float(view_piles[name][select].mean())
            out[f"{name}_pile_share"] = float(view_pile[name][select].mean())
            out[f"{name}_agreement"] = float((view_pile[name] == target_pile)[select].mean())
        return out

    regrets = {}
    for player in (0, 1):
        player_rows = read(state.advantage_memory[player])
        if player_rows is None:
            continue
        a_mask, a_target, a_iterations, a_info, _ = player_rows
        sampled = pile_edge(a_target, a_mask, deck)
        predicted = pile_edge(
            forward(advantages, state.advantage_params[player], a_info, a_mask), a_mask, deck
        )
        regrets[f"p{player}"] = [
            regret_summary(sampled, predicted, (a_iterations >= lo) & (a_iterations <= hi), lo, hi)
            for lo, hi in band_edges(a_iterations, args.bands)
        ]

    result = {
        "workdir": str(workdir),
        "checkpoint": int(state.iteration),
        "strategy_iteration": int(state.strategy_iteration),
        "memory_rows": int(state.strategy_memory.size),
        "draw_rows": int(draw_count),
        "rows_read": int(len(mask)),
        "refit_seed": args.refit_seed,
        "utility_scale": float(config.utility_scale),  # points per unit of "regrets"
        "bands": [
            summary((iterations >= lo) & (iterations <= hi), lo, hi)
            for lo, hi in band_edges(iterations, args.bands)
        ],
        "all": summary(np.ones(len(mask), bool), int(iterations.min()), int(iterations.max())),
        "regrets": regrets,
    }
    print(
        f"checkpoint {result['checkpoint']}: {result['draw_rows']} draw rows of "
        f"{result['memory_rows']}, {result['rows_read']} read; per band: targets' pile "
        "mass / piles first / one-hot | refit, own network: pile mass / piles first | current "
        "p0, p1: piles first / agrees with the target"
    )
    for band in [*result["bands"], result["all"]]:
        low, high = band["iterations"]
        line = (
            f"{low:4d}-{high:<4d} {band['rows']:7d}  {band['target_pile_mass']:.3f} "
            f"{band['target_pile_share']:.3f} {band['target_one_hot_share']:.3f} |"
        )
        for name in ("refit", "own"):
            line += f" {band[f'{name}_pile_mass']:.3f} {band[f'{name}_pile_share']:.3f}"
        line += " |"
        for name in ("current_p0", "current_p1"):
            line += f" {band[f'{name}_pile_share']:.3f} {band[f'{name}_agreement']:.3f}"
        print(line)
    print(
        "advantage memories' draw rows, per band: sampled regret of the piles less the "
        "deck's: mean +- stderr, sd, share > 0 | the network's: mean, sd, share > 0 | corr"
    )
    for player, bands in regrets.items():
        for band in bands:
            low, high = band["iterations"]
            print(
                f"{player} {low:4d}-{high:<4d} {band['rows']:7d}  {band['sampled_mean']:+.3f} +- "
                f"{band['sampled_stderr']:.3f} {band['sampled_sd']:.3f} "
                f"{band['sampled_positive']:.3f} | {band['predicted_mean']:+.3f} "
                f"{band['predicted_sd']:.3f} {band['predicted_positive']:.3f} | "
                f"{band['correlation']:+.3f}"
            )
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
