"""Latency of search at play time, per decision, beside its blueprint's own decision.

One search (`lc_cfr.search.search`, jitted for one game, as `lc_cfr.play` and the
OpenSpiel bot run it) is timed at each of `--positions` decisions of the searching
player, drawn from games that `safe_heuristic` plays against itself (so positions of every
stage, with realistic game lengths ahead). For each setting (D determinizations x k
candidates) the script reports the first call once (compile and one search), then the
median and the 95th percentile of the per-decision seconds, and the median's ratio to the
blueprint's own decision (one forward and the policy at the same positions, timed in the
same run). With `--opponent-model blueprint` it also reports the median effective worlds
of the weighted pool and the median evidence weight the tempering used. `--leaf-decisions`
times rollouts cut after L decisions at the run's value network (0: to the end).

The blueprint is a view of a run (`--workdir`, latest checkpoint unless `--checkpoint`)
or, without one, a network of the default config's shape with random weights (the cost
of a search does not depend on the weights, only on how long the rollouts play).

    .venv/bin/python scripts/bench_search.py [--workdir RUN] [--determinizations 16,64,256]
        [--candidates 2,4,0] [--leaf-decisions 0,16] [--positions 40] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from lc_cfr import compile_cache, search
from lc_cfr.bots import jax_bots
from lc_cfr.game import engine
from lc_cfr.traversal import policy as pol

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_common  # noqa: E402


def _positions(rules, count: int, seed: int) -> list:
    """`count` (state, public moves before it) at decisions, drawn uniformly from
    safe_heuristic self-play games."""
    act = jax.jit(lambda s, g, d: jax_bots.bot_action(rules, "safe_heuristic", s, seed, 0, g, d))
    step = jax.jit(lambda s, a: engine.step(rules, s, a))
    record = search.jitted_record(rules)
    rand = np.random.RandomState(seed)
    positions, game = [], 0
    while len(positions) < count:
        state, history, path = engine.init(rules, seed, game), search.empty_history(rules), []
        while not bool(state.terminal):
            path.append((state, history))
            action = act(state, game, len(path) - 1)
            state, history = step(state, action), record(history, state, action)
        positions.append(path[rand.randint(len(path))])
        game += 1
    return positions


def _blueprint(args, rules, cut: bool):
    """(spec, params, value network or None, utility scale, draws, fallback, where); the
    value network is read only when some setting cuts its rollouts (`cut`)."""
    if args.workdir:
        from lc_cfr.train.saved_networks import load_saved_networks, value_network

        networks = load_saved_networks(args.workdir, args.checkpoint)
        params = networks.policy_views()[args.view]
        value = value_network(networks) if cut else None
        scale = networks.config.utility_scale
        draws = networks.config.draws
        fallback = networks.config.regret_matching.all_negative_fallback
        spec, where = networks.spec, f"checkpoint {networks.iteration} of {args.workdir}"
    else:
        from lc_cfr.nets import mlp
        from lc_cfr.train.setup import spec_from_config
        from lc_cfr.traversal.api import value_spec

        config = bench_common.load_config("configs/default.py")
        spec = spec_from_config(config, rules)
        params = mlp.init_params(spec, jax.random.PRNGKey(0))
        if args.view == "current":
            params = (params, mlp.init_params(spec, jax.random.PRNGKey(1)))
        value = mlp.init_params(value_spec(rules, spec), jax.random.PRNGKey(2))
        scale = config.utility_scale
        draws, fallback = config.draws, "argmax_tiebreak"
        where = "random weights, the default config's shape"
    return spec, params, value, scale, draws, fallback, where


def _time(fn, positions) -> tuple[list[float], list]:
    """(seconds, results) of `fn` at each position."""
    seconds, results = [], []
    for state, history in positions:
        start = time.perf_counter()
        results.append(jax.block_until_ready(fn(state, history)))
        seconds.append(time.perf_counter() - start)
    return seconds, results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", help="a run (default: random weights)")
    parser.add_argument("--checkpoint", type=int)
    parser.add_argument("--view", default="average_strategy", choices=search.BLUEPRINT_VIEWS)
    parser.add_argument("--determinizations", default="16,64,256")
    parser.add_argument("--candidates", default="2,4,0", help="0 = every legal action")
    parser.add_argument("--prior-weight", type=float, default=search.SearchOptions().prior_weight)
    parser.add_argument("--rollout", default="greedy", choices=search.ROLLOUT_MODES)
    parser.add_argument("--opponent-model", default="none", choices=search.OPPONENT_MODELS)
    parser.add_argument("--world-pool", type=int, default=search.SearchOptions().world_pool)
    parser.add_argument(
        "--evidence-weight", type=float, default=search.SearchOptions().evidence_weight
    )
    parser.add_argument(
        "--min-effective-share", type=float, default=search.SearchOptions().min_effective_share
    )
    parser.add_argument(
        "--leaf-decisions", default="0", help="L: rollouts cut at the value network (0: none)"
    )
    parser.add_argument("--positions", type=int, default=40)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json")
    args = parser.parse_args()
    compile_cache.enable(compile_cache.directory())

    from lc_cfr.game.rules import Rules

    rules = Rules()
    if args.workdir:
        from lc_cfr.train.saved_networks import load_saved_networks

        rules = load_saved_networks(args.workdir, args.checkpoint).rules
    leaves = [int(x) for x in args.leaf_decisions.split(",")]
    spec, params, value, scale, draws, fallback, where = _blueprint(args, rules, any(leaves))
    blueprint = search.network_blueprint(
        rules, spec, args.view, params, fallback=fallback, draws=draws
    )
    positions = _positions(rules, args.positions, args.seed)

    def mask_of(state):
        return pol.agent_mask(rules, state, draws)

    def own(state, history):
        del history  # the blueprint reads the state only
        probs = blueprint(jax.tree.map(lambda x: x[None], state), jnp.zeros((1,), jnp.uint32))
        return pol.greedy_action(probs[0], mask_of(state), rules.n_colors)

    own = jax.jit(own)
    jax.block_until_ready(own(*positions[0]))
    base = float(np.median(_time(own, positions)[0]))
    print(f"blueprint: {args.view} of {where}; {len(positions)} positions")
    print(f"the blueprint's own decision: {base * 1e3:.3f} ms (median)")
    print(
        f"{'D':>5} {'k':>4} {'L':>4} {'first s':>10} {'median ms':>10} {'p95 ms':>10} {'x own':>9} "
        f"{'eff worlds':>10} {'e used':>8}"
    )
    rows = []
    grid = [
        (int(d), int(k), leaf)
        for d in args.determinizations.split(",")
        for k in args.candidates.split(",")
        for leaf in leaves
    ]
    for d, k, leaf in grid:
        options = search.SearchOptions(d, k, args.prior_weight, args.rollout)
        options = options._replace(
            opponent_model=args.opponent_model,
            world_pool=args.world_pool,
            evidence_weight=args.evidence_weight,
            min_effective_share=args.min_effective_share,
            leaf_decisions=leaf,
        )
        try:
            search.check_options(options, rules, prefix="--")
            read = search.with_value(options, params, value, scale, prefix="--")
        except ValueError as error:
            raise SystemExit(str(error)) from error

        def one(state, history, options=options, read=read):
            found = search.search_named(
                rules,
                options,
                args.view,
                read,
                state,
                args.seed,
                0,
                engine.decision_index(state),
                history,
                spec=spec,
                fallback=fallback,
                draws=draws,
            )
            return found.action, found.effective_worlds, found.evidence_weight

        fn = jax.jit(one)
        start = time.perf_counter()
        jax.block_until_ready(fn(*positions[0]))
        compile_seconds = time.perf_counter() - start
        seconds, results = _time(fn, positions)
        median, p95 = float(np.median(seconds)), float(np.percentile(seconds, 95))
        weighed = np.array([result[1:] for result in results], np.float64)
        rows.append(
            {
                "determinizations": d,
                "candidates": k,
                "leaf_decisions": leaf,
                "compile_seconds": compile_seconds,
                "median_seconds": median,
                "p95_seconds": p95,
                "ratio_to_blueprint": median / base,
                "effective_worlds_median": float(np.median(weighed[:, 0])),
                "evidence_weight_median": float(np.median(weighed[:, 1])),
            }
        )
        print(
            f"{d:>5} {k or 'all':>4} {leaf:>4} {compile_seconds:>10.1f} {median * 1e3:>10.1f} "
            f"{p95 * 1e3:>10.1f} {median / base:>9.0f} {np.median(weighed[:, 0]):>10.1f} "
            f"{np.median(weighed[:, 1]):>8.3f}"
        )
    if args.json:
        document = {
            "command": " ".join(sys.argv),
            "blueprint": where,
            "view": args.view,
            "positions": len(positions),
            "blueprint_seconds": base,
            "settings": rows,
            "machine": platform.platform(),
        }
        Path(args.json).write_text(json.dumps(document, indent=1))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
