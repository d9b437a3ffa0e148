"""Search settings compared on the same deals: the paired difference, not two noisy means.

Two search settings over one blueprint play the same mirrored deals against one bot and
mostly the same moves, so their margins are strongly correlated and the difference of
two independent means (each +- 1.2 points over 500 deals against `safe_heuristic`)
hides effects of a few points that the per-deal difference shows. For each setting
(`raw` is the blueprint's own greedy play, the blueprint a run's view or, with `--agent`,
a bot; `D:k:c[:z[:rollout[:L]]]` a search with D worlds, k
candidates (0 = all), prior weight c, stderr weight z and rollouts cut after L decisions
at the run's value network (0, the default: played to the end); a suffix `@P[:e]` adds the
opponent model, P * D worlds weighted by the blueprint's likelihood of the opponent's
moves to the power e, 1 by default, tempered to keep s * D effective worlds, s 0.5 by
default) the script plays `--games` games against
`--opponent` on the evaluation deals of `--seed`, and prints the mean margin +- standard
error and the mean per-deal difference to the first setting +- its standard error
(a deal's margin: the mean of its two seats), with the seconds each took.

    .venv/bin/python scripts/search_pairs.py --workdir RUN [--checkpoint N] \\
        --settings raw,16:4:2,16:4:0.5,16:0:2,16:0:2@4,16:4:2:0:greedy:16 \\
        [--opponent safe_heuristic] \\
        [--games 200] [--seed 20261130] [--lanes L] [--json out.json]
    .venv/bin/python scripts/search_pairs.py --agent safe_heuristic --settings raw,16:4:2,16:4:2@4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lc_cfr import compile_cache  # noqa: E402
from lc_cfr import search as search_lib  # noqa: E402
from lc_cfr.bots import check_bot_name  # noqa: E402
from lc_cfr.eval import games as eval_games  # noqa: E402
from lc_cfr.game.rules import Rules  # noqa: E402
from lc_cfr.train.saved_networks import (  # noqa: E402
    load_saved_networks,
    search_params,
    value_network,
)

RAW = "raw"


def parse_setting(text: str) -> search_lib.SearchOptions | None:
    """None for `raw`, else the SearchOptions of `D:k:c[:z[:rollout[:L]]][@P[:e[:s]]]` (L
    the leaf decisions, P the world pool, e the evidence weight, s the minimum effective
    share); SystemExit naming it."""
    if text == RAW:
        return None
    text_search, _, model = text.partition("@")
    parts = text_search.split(":")
    try:
        if len(parts) not in (3, 4, 5, 6):
            raise ValueError("expected D:k:c, D:k:c:z, D:k:c:z:rollout or D:k:c:z:rollout:L")
        z = float(parts[3]) if len(parts) > 3 else 0.0
        rollout = parts[4] if len(parts) > 4 else "greedy"
        leaf = int(parts[5]) if len(parts) > 5 else 0
        options = search_lib.SearchOptions(
            int(parts[0]),
            int(parts[1]),
            float(parts[2]),
            rollout,
            stderr_weight=z,
            leaf_decisions=leaf,
        )
        if model:
            pool, _, rest = model.partition(":")
            evidence, _, share = rest.partition(":")
            default = search_lib.SearchOptions()
            options = options._replace(
                opponent_model="blueprint",
                world_pool=int(pool),
                evidence_weight=float(evidence) if evidence else default.evidence_weight,
                min_effective_share=float(share) if share else default.min_effective_share,
            )
        return options
    except ValueError as error:
        raise SystemExit(f"--settings: {text!r}: {error}") from error


def deal_margins(result: eval_games.PlayResult) -> np.ndarray:
    """[deals] float64: each deal's margin, the mean of its two seats."""
    return result.records.margin.astype(np.float64).mean(axis=0)


def stderr(values: np.ndarray) -> float:
    return float(values.std(ddof=1) / np.sqrt(len(values))) if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    blueprint = parser.add_mutually_exclusive_group(required=True)
    blueprint.add_argument("--workdir", help="run or exported agent: its network is searched over")
    blueprint.add_argument("--agent", help="a bot to search over instead (full game)")
    parser.add_argument("--checkpoint", type=int, default=None, help="default: the latest")
    parser.add_argument("--view", default="average_strategy", help="the blueprint view")
    parser.add_argument(
        "--settings", default="raw,16:4:2", help="raw or D:k:c[:z[:rollout[:L]]][@P[:e]]"
    )
    parser.add_argument("--opponent", default="safe_heuristic")
    parser.add_argument("--games", type=int, default=200, help="even: games / 2 deals")
    parser.add_argument("--seed", type=int, default=20261130, help="evaluation seed")
    parser.add_argument("--lanes", type=int, default=None, help="games in flight (default: eval's)")
    parser.add_argument("--json", help="write the per-deal margins and summaries here")
    args = parser.parse_args()
    compile_cache.enable(compile_cache.directory())

    settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    if len(settings) < 2:
        raise SystemExit("--settings: name at least two settings to compare")
    options = [parse_setting(s) for s in settings]
    if args.agent:
        try:
            check_bot_name(args.agent, "--agent")
        except ValueError as error:
            raise SystemExit(str(error)) from error
        rules, spec, params, iteration = Rules(), None, None, None

        def agent_of(option):
            return eval_games.bot_agent(args.agent, "--agent", search=option)

        def params_of(option):
            if option is None:
                return None
            return search_lib.with_value(option, None, None, 1.0, prefix="--settings ")

    else:
        saved = load_saved_networks(args.workdir, args.checkpoint)
        rules, spec, iteration = saved.rules, saved.spec, saved.iteration
        params = saved.policy_views().get(args.view)
        if args.view not in search_lib.BLUEPRINT_VIEWS or params is None:
            raise SystemExit(f"--view must be one of {list(search_lib.BLUEPRINT_VIEWS)}")
        fallback = saved.config.regret_matching.all_negative_fallback
        draws = saved.config.draws

        def agent_of(option):
            return eval_games.network_agent(args.view, "greedy", fallback, draws, search=option)

        if any(option is not None and option.leaf_decisions for option in options):
            saved = saved._replace(value=value_network(saved))  # read once for every setting

        def params_of(option):
            if option is None:
                return params
            return search_params(option, params, saved, prefix="--settings ")

    for option in options:
        if option is not None:
            try:
                search_lib.check_options(option, rules, prefix="--settings ")
                params_of(option)
            except ValueError as error:
                raise SystemExit(str(error)) from error

    rows, margins = [], []
    for text, option in zip(settings, options, strict=True):
        agent = agent_of(option)
        start = time.perf_counter()
        result = eval_games.play(
            rules,
            spec,
            agent,
            args.opponent,
            params_of(option),
            games=args.games,
            seed=args.seed,
            lanes=args.lanes,
        )
        seconds = time.perf_counter() - start
        per_deal = deal_margins(result)
        margins.append(per_deal)
        diff = per_deal - margins[0]
        row = {
            "setting": text,
            "mean": float(per_deal.mean()),
            "stderr": stderr(per_deal),
            "difference": float(diff.mean()),
            "difference_stderr": stderr(diff),
            "seconds": seconds,
        }
        rows.append(row)
        print(
            f"{text:>16}  {row['mean']:+7.2f} +- {row['stderr']:.2f}   vs {settings[0]}: "
            f"{row['difference']:+6.2f} +- {row['difference_stderr']:.2f}   {seconds:7.1f} s",
            flush=True,
        )
    if args.json:
        document = {
            "workdir": args.workdir,
            "agent": args.agent,
            "checkpoint": iteration,
            "view": args.view,
            "opponent": args.opponent,
            "games": args.games,
            "seed": args.seed,
            "rows": rows,
            "deal_margins": {s: m.tolist() for s, m in zip(settings, margins, strict=True)},
        }
        Path(args.json).write_text(json.dumps(document, indent=1))


if __name__ == "__main__":
    main()
