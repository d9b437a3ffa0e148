"""How near the advantage targets are to the regrets they estimate: value leaves, full
playouts and the playouts' own noise (issue 23, item 5).

The traversal's leaf guard (`traversal/leaf_corr_p*`, `leaf_rmse_p*`) compares, at the
expansions of checked traversals, the regrets read from value leaves with those of one
full playout per child, on the same deck with the same random numbers. A full playout
carries the luck of the cards still in the deck and of sigma's sampled moves, which the
value network averages away (`engine.observe_history` leaves out the deck's order), so a
low correlation can be the playout's noise as much as the leaf's error: the guard cannot
tell the two apart. This script can. At positions of the run's own self-play it values
every legal action a of the player to move (the traverser) in five ways:

- L, the leaf as the traversal reads it: sigma on both seats for `leaf_decisions`
  decisions, then sum_b sigma(b) Q(h, b) at the traverser's next decision
  (`traversal.api.leaf_point`), or the return if the game ends first;
- F_0, one full playout on the real deck with L's random numbers (the guard's);
- F_1..F_R, full playouts with the position's undealt deck redrawn and their own random
  numbers: independent of L and F_0 given the position;
- M, the `traversal.leaf_targets=mixed` target (the default until 2026-12-07): L,
  except the child that sigma samples at the node, which reads its full playout F_0;
- L_1..L_R, leaves on redrawn decks with their own random numbers (independent of the
  F_r): their spread is the leaf's own noise, the luck of its `leaf_decisions` moves and
  draws, which averages out over samples; the rest of its error is bias (the value
  network's), which does not.

Each gives regrets r(a) = v(a) - sum_b sigma(b) v(b) (common random numbers across the
children of a position, as in the traversal). The mean Fbar of F_1..F_R estimates the
expected regret r* without bias and their spread the variance s2 of one playout's regret
about it, so for an estimator X independent of them, E|X - r*|^2 = E|X - Fbar|^2 - s2/R.
Per phase (quarters of max_turns, the guard's rows) it prints that error's root in points
for L, M and F_0, L's error split into its noise and its bias (E|Lbar - Fbar|^2 less
both means' noise), the size of r* itself (root mean square over legal actions, the
signal the targets carry), one playout's noise sqrt(s2), and the guard's corr(L, F_0)
beside corr(L, Fbar) and corr(F_1, F_2) (how alike two playouts' verdicts are).

Positions: self-play of the current policy (regret matching on both advantage networks,
the run's `draws`, sampled), one decision with two or more legal actions kept per game,
drawn uniformly among them (reservoir sampling: the k-th replaces the kept one with
probability 1/k), as `expand_at=path` draws its expansion among a path's choices (whose
traverser also mixes in `path_epsilon` of uniform play, which this does not).

At the draw decisions among the positions (the deck and a pile legal) it also prints
each estimator's edge of the piles over the deck, and that edge less Fbar's, paired by
position: whether the leaves lean one way at the draw choice (`--decisions draw` draws
every position among those decisions; docs/experiments.md 53).

    .venv/bin/python scripts/leaf_noise.py --workdir RUN [--checkpoint STEP] \\
        [--positions 1024] [--redraws 4] [--leaf-decisions 2,4,8] [--seed 0] \\
        [--decisions all|draw] [--json out.json]

--leaf-decisions measures leaves at other depths with the run's value network (the
full playouts are shared). Nothing in the run directory is written. Random numbers:
purpose LEAF_NOISE, the iteration word naming the stream (`Stream`).
"""

from __future__ import annotations

import argparse
import enum
import functools
import json
import pathlib
import sys
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_common  # noqa: E402

from lc_cfr import compile_cache  # noqa: E402
from lc_cfr.eval.metrics import per_deal_stderr  # noqa: E402
from lc_cfr.game import engine, rng  # noqa: E402
from lc_cfr.nets import mlp  # noqa: E402
from lc_cfr.search import SearchOptions, network_blueprint, redraw_undealt, width  # noqa: E402
from lc_cfr.train.setup import options_from_config  # noqa: E402
from lc_cfr.traversal import api  # noqa: E402
from lc_cfr.traversal import policy as pol  # noqa: E402

DECISIONS = ("all", "draw")  # --decisions: where positions are drawn


class Stream(enum.IntEnum):
    """The iteration word of this script's draws (purpose LEAF_NOISE)."""

    SELF_PLAY = 0  # the moves of the games the positions come from
    PICK = 1  # the reservoir's keep-or-not coin
    NODE = 2  # the action sigma samples at a position (the child M reads in full)
    PLAYOUT = 3  # playout r's moves and redrawn deck: PLAYOUT + r (r = 0 is L's and F_0's)
    # ... and leaf r's (r = 1..R), after the R + 1 playouts': PLAYOUT + R + r


def playout_stream(r: int) -> int:
    """The stream of playout F_r (r = 0 on the real deck, shared with L)."""
    return Stream.PLAYOUT + r


def leaf_stream(r: int, redraws: int) -> int:
    """The stream of leaf L_r on a redrawn deck, r = 1..R: none of the playouts'."""
    return Stream.PLAYOUT + redraws + r


# Counters of a playout's redrawn deck start here, past any decision index.
REDRAW_COUNTER = 1 << 16


class Networks(NamedTuple):
    """What the measurement reads of a run (flax params)."""

    advantage: tuple  # (player 0's, player 1's): sigma, regret matching on them
    value: Any  # the history value network the leaves read


def bits(seed, stream, game, counter):
    return rng.random_bits(seed, stream, game, counter, rng.Purpose.LEAF_NOISE)


def _sigma(rules, spec, options, networks: Networks):
    return network_blueprint(
        rules,
        spec,
        "current",
        tuple(networks.advantage),
        fallback=options.all_negative_fallback,
        draws=options.draws,
    )


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3, 6))
def sample_positions(rules, spec, options, count: int, networks: Networks, seed, draws_only=False):
    """([count] positions, one per self-play game of sigma, drawn uniformly among its
    decisions with two or more actions (reservoir sampling), with `draws_only` among its
    draw decisions where the deck and a pile are legal; [count] bool whether the game
    had one)."""
    sigma = _sigma(rules, spec, options, networks)
    games = jnp.arange(count, dtype=jnp.uint32)
    states = jax.vmap(engine.init, in_axes=(None, None, 0, None))(rules, seed, games, 0)

    def unfinished(carry):
        return jnp.any(~carry[0].terminal)

    def play(carry):
        states, kept, seen = carry
        mask = pol.agent_masks(rules, states, options.draws)
        live = ~states.terminal
        t = engine.decision_index(states).astype(jnp.uint32)
        choice = live & (jnp.sum(mask, axis=-1) >= 2)
        if draws_only:
            choice = choice & is_draw_choice(rules, mask)
        seen = seen + choice
        coin = rng.uniform(bits(seed, Stream.PICK, games, t))
        kept = engine.tree_where(choice & (coin * seen < 1.0), states, kept)
        probs = sigma(states, None)
        action = jax.vmap(pol.sample_action)(probs, mask, bits(seed, Stream.SELF_PLAY, games, t))
        stepped = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, action)
        return engine.tree_where(live, stepped, states), kept, seen

    seen = jnp.zeros(count, jnp.int32)
    _, kept, seen = jax.lax.while_loop(unfinished, play, (states, states, seen))
    return kept, seen > 0


def is_draw_choice(rules, mask):
    """[N] bool: the deck draw and at least one pile draw (the actions after the deck's,
    `Rules.draw_deck_action`) are legal."""
    deck = rules.draw_deck_action
    return mask[..., deck] & jnp.any(mask[..., deck + 1 :], axis=-1)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def child_values(
    rules, spec, options, leaf: bool, networks: Networks, nodes, actions, seed, stream, redraw
):
    """[N, K] float32 points for the traverser (each node's player to move) of the
    children `actions` [N, K] of `nodes` [N]: played out by sigma to the end (`leaf`
    False), or to their leaf point (`options.leaf_decisions`, `api.leaf_point`) and
    valued there by sum_b sigma(b) Q(h, b). The moves at decision t of node n's children
    draw bits(seed, stream, n, t), the same for every child (common random numbers);
    `redraw` ([] bool) first reshuffles each node's undealt deck (counters
    REDRAW_COUNTER + i)."""
    sigma = _sigma(rules, spec, options, networks)
    value_spec = api.value_spec(rules, spec)
    n, k = actions.shape
    ids = jnp.arange(n, dtype=jnp.uint32)
    counters = REDRAW_COUNTER + jnp.arange(rules.n_cards, dtype=jnp.uint32)
    redrawn = redraw_undealt(rules, nodes, bits(seed, stream, ids[:, None], counters[None, :]))
    nodes = engine.tree_where(jnp.full(n, redraw), redrawn, nodes)
    traverser = jnp.repeat(nodes.current_player, k)
    start = jnp.repeat(engine.decision_index(nodes), k)
    lane_ids = jnp.repeat(ids, k)
    lanes = jax.tree.map(lambda x: jnp.repeat(x, k, axis=0), nodes)
    # An illegal slot's child ends at once (the engine's penalty); its value is masked out.
    lanes = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, lanes, actions.reshape(-1))

    def leaf_value(states, probs, mask):
        history = jax.vmap(engine.observe_history, in_axes=(None, 0, 0))(rules, states, traverser)
        q = mlp.masked_advantages(mlp.apply(value_spec, networks.value, history), mask)
        # the traversal's leaf value: the node value of sigma over Q (`pol.node_regrets`)
        return jax.vmap(pol.node_regrets)(probs, q, mask)[0] * options.utility_scale

    def unfinished(carry):
        return jnp.any(~carry[1])

    def play(carry):
        states, stopped, value = carry
        mask = pol.agent_masks(rules, states, options.draws)
        probs = sigma(states, None)
        ended = ~stopped & states.terminal
        returns = jax.vmap(engine.returns, in_axes=(None, 0))(rules, states)
        value = jnp.where(ended, jnp.where(traverser == 0, returns[:, 0], returns[:, 1]), value)
        stopped = stopped | ended
        if leaf:
            past = engine.decision_index(states) - start
            mover = states.current_player == traverser
            at_leaf = ~stopped & mover & api.leaf_point(options, past)
            value = jnp.where(at_leaf, leaf_value(states, probs, mask), value)
            stopped = stopped | at_leaf
        t = engine.decision_index(states).astype(jnp.uint32)
        action = jax.vmap(pol.sample_action)(probs, mask, bits(seed, stream, lane_ids, t))
        stepped = jax.vmap(engine.step, in_axes=(None, 0, 0))(rules, states, action)
        return engine.tree_where(stopped, states, stepped), stopped, value

    zeros = jnp.zeros(n * k, jnp.float32)
    _, _, value = jax.lax.while_loop(unfinished, play, (lanes, jnp.zeros(n * k, bool), zeros))
    return value.reshape(n, k)


def node_actions(mask, slots: int):
    """([N, K] int32 each node's legal actions in ascending order, [N, K] bool valid)."""
    order = jnp.argsort(~mask, axis=-1, stable=True)[:, :slots].astype(jnp.int32)
    return order, jnp.take_along_axis(mask, order, axis=-1)


def regrets(policy, values, valid):
    """[N, K] r(a) = v(a) - sum_b sigma(b) v(b) over the valid slots, as the traversal's
    expanded nodes compute them (`pol.node_regrets`; sigma is zero off the legal slots)."""
    return jax.vmap(pol.node_regrets)(policy, values, valid)[1]


class Measured(NamedTuple):
    """The regrets of every estimator at the sampled positions (numpy, points)."""

    phase: np.ndarray  # [N] int, the guard's row (`api.leaf_check_phase`) of each position
    valid: np.ndarray  # [N, K] bool, the legal actions' slots
    full0: np.ndarray  # [N, K] float32 regrets of F_0, the full playouts on the real deck
    redrawn: np.ndarray  # [R, N, K] float32 regrets of the playouts on redrawn decks
    leaf: dict  # {leaf depth: [N, K] float32 regrets of L}
    mixed: dict  # {leaf depth: [N, K] float32 regrets of M}
    leaves: dict  # {leaf depth: [R, N, K] float32 regrets of leaves on other redrawn decks}
    actions: np.ndarray | None = None  # [N, K] int32, the action of each slot


def measure(
    rules, spec, options, networks: Networks, positions, redraws, seed, depths=(), draws_only=False
):
    """Samples the positions (`draws_only`: at draw decisions with a pile legal) and values
    their children (the module docstring), with leaves at each of `depths` decisions
    (default: the run's `leaf_decisions`)."""
    seed = rng.as_word(seed)
    nodes, found = sample_positions(rules, spec, options, positions, networks, seed, draws_only)
    mask = pol.agent_masks(rules, nodes, options.draws)
    actions, valid = node_actions(mask, width(SearchOptions(candidates=0), rules))
    valid = valid & found[:, None]
    sigma = _sigma(rules, spec, options, networks)
    policy = jnp.take_along_axis(sigma(nodes, None), actions, axis=-1)

    def values(leaf, depth, stream, redraw):
        at = options._replace(leaf_decisions=depth)
        return child_values(rules, spec, at, leaf, networks, nodes, actions, seed, stream, redraw)

    def regrets_of(v):
        return np.asarray(regrets(policy, v, valid))

    fulls = [values(False, 0, playout_stream(r), r > 0) for r in range(redraws + 1)]
    ids = jnp.arange(positions, dtype=jnp.uint32)
    sampled = jax.vmap(pol.sample_action)(policy, valid, bits(seed, Stream.NODE, ids, 0))
    picked = jnp.arange(actions.shape[1]) == sampled[:, None]
    leaf, mixed, leaves = {}, {}, {}
    for depth in depths or (options.leaf_decisions,):
        value = values(True, depth, playout_stream(0), False)
        leaf[depth] = regrets_of(value)
        mixed[depth] = regrets_of(jnp.where(picked, fulls[0], value))
        leaves[depth] = np.stack(
            [
                regrets_of(values(True, depth, leaf_stream(r, redraws), True))
                for r in range(1, redraws + 1)
            ]
        )
    return Measured(
        phase=np.asarray(api.leaf_check_phase(rules, nodes.turn)),
        valid=np.asarray(valid),
        full0=regrets_of(fulls[0]),
        redrawn=np.stack([regrets_of(f) for f in fulls[1:]]),
        leaf=leaf,
        mixed=mixed,
        leaves=leaves,
        actions=np.asarray(actions),
    )


def _corr(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's correlation; nan when either side is constant."""
    x, y = x - x.mean(), y - y.mean()
    scale = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum()) / scale if scale > 0 else float("nan")


def phase_table(measured: Measured, depth: int) -> list[dict]:
    """Per phase with two or more legal entries, the leaves `depth` decisions down:
    positions, entries, the size of r*, one playout's noise, each estimator's error
    against r* and correlations (points)."""
    phase, valid, fulls = measured.phase, measured.valid, measured.redrawn
    estimates = {
        "leaf": measured.leaf[depth],
        "mixed": measured.mixed[depth],
        "full0": measured.full0,
    }
    redraws = fulls.shape[0]
    rows = []
    for p in range(api.LEAF_CHECK_PHASES):
        where = valid & (phase[:, None] == p)
        entries = int(where.sum())
        if entries < 2:
            continue
        f = fulls[:, where]  # [R, E]
        fbar = f.mean(axis=0)
        s2 = float(f.var(axis=0, ddof=1).mean())
        row = {
            "phase": p,
            "positions": int((phase == p).sum()),
            "entries": entries,
            "playout_noise": s2**0.5,
            "signal_rms": max(float((fbar**2).mean()) - s2 / redraws, 0.0) ** 0.5,
            "corr_full_pair": _corr(f[0], f[1]),
        }
        for name, x in estimates.items():
            error = float(((x[where] - fbar) ** 2).mean()) - s2 / redraws
            row[f"{name}_error_rms"] = max(error, 0.0) ** 0.5
            row[f"{name}_corr_fbar"] = _corr(x[where], fbar)
        leaves = measured.leaves[depth][:, where]
        leaf_s2 = float(leaves.var(axis=0, ddof=1).mean())
        bias = float(((leaves.mean(axis=0) - fbar) ** 2).mean()) - (leaf_s2 + s2) / redraws
        row["leaf_noise"] = leaf_s2**0.5
        row["leaf_bias_rms"] = max(bias, 0.0) ** 0.5
        row["leaf_corr_full0"] = _corr(estimates["leaf"][where], estimates["full0"][where])
        rows.append(row)
    return rows


def _mean_stderr(x: np.ndarray) -> tuple[float, float]:
    """Mean and its standard error over positions (independent games)."""
    return float(x.mean()), per_deal_stderr(x)


def draw_table(measured: Measured, depth: int, deck: int) -> dict | None:
    """At the positions where the deck draw (action `deck`) and a pile draw (the actions
    after it) are legal: each estimator's edge of the piles over the deck, the legal
    piles' mean regret less the deck's (= their values' difference: the regrets share
    sigma's node value), in points, mean +- stderr over positions and the share of
    positions where it is above 0; and each estimator's edge less Fbar's, paired by
    position: the leaves' bias on the draw choice (Fbar, the redrawn playouts' mean,
    estimates the expected edge without bias). None without such positions."""
    valid, actions = measured.valid, measured.actions
    deck_slot = valid & (actions == deck)
    pile_slot = valid & (actions > deck)
    where = deck_slot.any(axis=1) & pile_slot.any(axis=1)
    if not where.any():
        return None

    def edge(regrets: np.ndarray) -> np.ndarray:
        piles = np.where(pile_slot, regrets, 0.0).sum(axis=1) / np.maximum(pile_slot.sum(1), 1)
        return (piles - np.where(deck_slot, regrets, 0.0).sum(axis=1))[where]

    edges = {
        "leaf": edge(measured.leaf[depth]),
        "leaf_mean": edge(measured.leaves[depth].mean(axis=0)),
        "mixed": edge(measured.mixed[depth]),
        "full0": edge(measured.full0),
        "fbar": edge(measured.redrawn.mean(axis=0)),
    }
    table = {"positions": int(where.sum())}
    for name, x in edges.items():
        table[name], table[f"{name}_stderr"] = _mean_stderr(x)
        table[f"{name}_positive"] = float((x > 0).mean())
        if name != "fbar":
            key = f"{name}_less_fbar"
            table[key], table[f"{key}_stderr"] = _mean_stderr(x - edges["fbar"])
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", required=True, help="run directory (value leaves on)")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--positions", type=int, default=1024, help="games, a position each")
    parser.add_argument("--redraws", type=int, default=4, help="R >= 2 playouts on redrawn decks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--leaf-decisions", help="leaf depths to measure, e.g. 2,4,8 (default: the run's)"
    )
    parser.add_argument(
        "--decisions",
        choices=DECISIONS,
        default="all",
        help="positions among all decisions with a choice, or only draws with a pile legal",
    )
    parser.add_argument("--json", help="write the table here")
    args = parser.parse_args()
    if args.positions < 1:
        raise SystemExit(f"--positions must be >= 1, got {args.positions}")
    if args.redraws < 2:
        raise SystemExit(f"--redraws must be >= 2 (their spread is the noise), got {args.redraws}")
    workdir = pathlib.Path(args.workdir)
    config = bench_common.run_config(workdir)
    compile_cache.enable(compile_cache.directory())
    if not api.has_leaves(options_from_config(config)):
        raise SystemExit("--workdir: the run has no value leaves (traversal.leaf_decisions=0)")
    trainer, state = bench_common.restored_run(config, workdir, args.checkpoint)
    networks = Networks(tuple(state.advantage_params), state.value_params)
    depths = _depths(args.leaf_decisions, trainer.options.leaf_decisions, trainer.rules)
    start = time.perf_counter()
    measured = measure(
        trainer.rules,
        trainer.spec,
        trainer.options,
        networks,
        args.positions,
        args.redraws,
        args.seed,
        depths,
        draws_only=args.decisions == "draw",
    )
    seconds = time.perf_counter() - start
    print(
        f"checkpoint {int(state.iteration)} of {workdir} (leaves {trainer.options.leaf_decisions} "
        f"decisions down in training): {args.positions} positions, {args.redraws} redrawn "
        f"playouts, {seconds:.0f} s; regrets in points, errors against the expected regret r*"
    )
    tables = {depth: phase_table(measured, depth) for depth in depths}
    for depth, rows in tables.items():
        print(f"leaves {depth} decisions down")
        print(
            f"{'phase':>5} {'positions':>9} {'|r*|':>6} {'noise':>6} {'err L':>6} "
            f"{'L noise':>7} {'L bias':>6} {'err M':>6} {'err F0':>6} {'corr(L,F0)':>10} "
            f"{'corr(L,Fbar)':>12} {'corr(F1,F2)':>11}"
        )
        for row in rows:
            print(
                f"{row['phase']:>5} {row['positions']:>9} {row['signal_rms']:>6.2f} "
                f"{row['playout_noise']:>6.2f} {row['leaf_error_rms']:>6.2f} "
                f"{row['leaf_noise']:>7.2f} {row['leaf_bias_rms']:>6.2f} "
                f"{row['mixed_error_rms']:>6.2f} {row['full0_error_rms']:>6.2f} "
                f"{row['leaf_corr_full0']:>10.3f} {row['leaf_corr_fbar']:>12.3f} "
                f"{row['corr_full_pair']:>11.3f}"
            )
    deck = trainer.rules.draw_deck_action
    draws = {depth: draw_table(measured, depth, deck) for depth in depths}
    for depth, table in draws.items():
        if table is None:
            continue
        print(
            f"draw decisions with a pile legal, leaves {depth} decisions down: "
            f"{table['positions']} positions; the piles' edge over the deck in points, "
            "mean +- stderr (share above 0), and less Fbar's paired by position"
        )
        for name in ("fbar", "full0", "leaf", "leaf_mean", "mixed"):
            line = (
                f"  {name:<9} {table[name]:+7.2f} +- {table[name + '_stderr']:.2f} "
                f"({table[name + '_positive']:.2f})"
            )
            if name != "fbar":
                key = f"{name}_less_fbar"
                line += f"   less Fbar {table[key]:+6.2f} +- {table[key + '_stderr']:.2f}"
            print(line)
    if args.json:
        result = {
            "workdir": str(workdir),
            "checkpoint": int(state.iteration),
            "positions": args.positions,
            "redraws": args.redraws,
            "seed": args.seed,
            "trained_leaf_decisions": trainer.options.leaf_decisions,
            "seconds": seconds,
            "decisions": args.decisions,
            "depths": {str(depth): rows for depth, rows in tables.items()},
            "draw_edges": {str(depth): table for depth, table in draws.items()},
        }
        pathlib.Path(args.json).write_text(json.dumps(result, indent=1))


def _depths(text: str | None, trained: int, rules) -> tuple[int, ...]:
    """The leaf depths of --leaf-decisions (comma-separated), default the run's own."""
    if not text:
        return (trained,)
    try:
        depths = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SystemExit(f"--leaf-decisions must be comma-separated ints, got {text!r}") from None
    bad = [d for d in depths if not 1 <= d <= 2 * rules.max_turns]
    if bad:
        raise SystemExit(f"--leaf-decisions must be in [1, {2 * rules.max_turns}], got {bad}")
    return depths


if __name__ == "__main__":
    main()
