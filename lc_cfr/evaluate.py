"""Evaluates a saved run, or a bot, against the bots.

    python -m lc_cfr.evaluate --workdir=RUN [--checkpoint=STEP] [--opponents=a,b]
        [--games=N] [--views=average_strategy,current] [--mode=greedy|sampled]
        [--seed=S] [--lanes=L] [--json=PATH] [--exploitability] [--compute_dtype=bfloat16]
    python -m lc_cfr.evaluate --agent=safe_heuristic [--rules=n_colors=2,hand_size=3] ...
    python -m lc_cfr.evaluate --agent=openspiel_ismcts --opponents=random,safe_heuristic \
        --games=8 --rules=n_colors=2 [--openspiel_simulations=N]
    python -m lc_cfr.evaluate --workdir=RUN --opponents=openspiel_mcts --games=8
    python -m lc_cfr.evaluate --workdir=RUN --views=average_strategy,search \
        [--search_blueprint=average_strategy] [--search_determinizations=D] \
        [--search_candidates=K] [--search_prior_weight=C] [--search_rollout=greedy]
        [--search_stderr_weight=Z] [--search_opponent_model=none|blueprint] \
        [--search_world_pool=P] [--search_evidence_weight=E] [--search_min_effective_share=S] \
        [--search_leaf_decisions=L]
    python -m lc_cfr.evaluate --agent=safe_heuristic --views=search ...

With --workdir the run's config is read from RUN/config.json and the networks of
checkpoint STEP (the latest by default) are loaded (`lc_cfr.train.saved_networks`: no
trainer and no traversal backend is built, so a run trained on any backend or device
evaluates on a CPU machine); its policy views are evaluated (`average_strategy`, the
strategy network; `current`, regret matching on the advantage networks with the run's
`regret_matching.all_negative_fallback`). With --agent the named bot plays the evaluated
seat instead, on the default rules or those of --rules. Every deal is played twice with
the seats swapped, so --games must be even; see `lc_cfr.eval` for the deals, the
randomness and the metrics. A table goes to stdout; --json writes every metric. With
--workdir the document is also archived in RUN/evaluations/ (not with --noarchive), where
`lc_cfr.report` lists it.
--exploitability adds the exact exploitability of each view (OpenSpiel, lc_cfr.spiel; runs
on an enumerable variant such as the :tiny preset only).

The view `search` is search at play time (`lc_cfr.search`, docs/search.md): at each of its
decisions the agent plays the candidates of a blueprint in D determinizations and keeps
the best by mean final margin and prior. Its blueprint is a view of the run
(--search_blueprint) or, with --agent, that bot (search over a bot: what search alone is
worth); it plays lc_cfr's bots in lockstep and OpenSpiel's one game at a time, on the
same deals as every other view. With --workdir, --opponents may also name the run's views
`average_strategy` and `current`: head to head, e.g. search against its own blueprint
(`--views=search --opponents=average_strategy`), played in --mode.

OpenSpiel's search bots (`lc_cfr.spiel.bots`, needs the `openspiel` extra) may be named in
--opponents and --agent: `openspiel_ismcts` (information-set MCTS, a fair opponent) and
`openspiel_mcts` (plain MCTS on the OpenSpiel state: it sees the opponent's hand, so it is
a cheating, upper-bound-style baseline), each with --openspiel_simulations simulations a
decision. A pair with one of them is played one game at a time on the same deals
(`spiel.bots.play_mirrored`, no --lanes) and reported with the same metrics.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pathlib
import sys
from typing import NamedTuple

from absl import app, flags

from lc_cfr import compile_cache
from lc_cfr import search as search_lib
from lc_cfr.bots import BOT_NAMES
from lc_cfr.eval import games as eval_games
from lc_cfr.eval import sequential
from lc_cfr.eval.api import POLICY_VIEWS, SD_CFR, SEARCH, parse_names
from lc_cfr.game import rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.spiel import bots as spiel_bots

ALL_OPPONENTS = ",".join(BOT_NAMES)
ALL_VIEWS = ",".join(eval_games.VIEWS)

_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory to evaluate (or use --agent).")
_CHECKPOINT = flags.DEFINE_integer("checkpoint", None, "Iteration to restore (default: latest).")
_AGENT = flags.DEFINE_string(
    "agent", None, "Bot to evaluate instead of a run (bot vs bot; an OpenSpiel bot too)."
)
_OPPONENTS = flags.DEFINE_string(
    "opponents",
    ALL_OPPONENTS,
    "Comma-separated bot names: lc_cfr's, or OpenSpiel's openspiel_ismcts and openspiel_mcts "
    "(openspiel_mcts sees the opponent's hand: a cheating upper-bound baseline); with "
    "--workdir also the run's views average_strategy and current (head to head).",
)
_GAMES = flags.DEFINE_integer("games", 200, "Games per opponent (even: each deal twice).")
_VIEWS = flags.DEFINE_string(
    "views",
    ALL_VIEWS,
    "Policy views of the run (comma-separated), `search` among them; with --agent only "
    "`search` (search over the bot) is read.",
)
_MODE = flags.DEFINE_string(
    "mode", "greedy", "greedy (policy.greedy_action: argmax, a draw's source first) or sampled."
)
_SEED = flags.DEFINE_integer("seed", 0, "Evaluation seed (deals, sampled actions).")
_LANES = flags.DEFINE_integer("lanes", None, "Games in flight at once (even).")
_RULES = flags.DEFINE_string("rules", None, "With --agent: rules overrides, e.g. n_colors=2.")
_JSON = flags.DEFINE_string("json", None, "Write the metrics to this JSON file.")
_COMPUTE_DTYPE = flags.DEFINE_string(
    "compute_dtype",
    None,
    "With --workdir: play the networks in this network.compute_dtype (float32 | bfloat16) "
    "instead of the run's, e.g. to see what bfloat16 forwards cost in margin.",
)
_SEARCH_BLUEPRINT = flags.DEFINE_string(
    "search_blueprint",
    "average_strategy",
    "The view `search` stands on: average_strategy, current or sd_cfr (with --agent: the bot).",
)
_SEARCH = search_lib.define_flags()
_ARCHIVE = flags.DEFINE_boolean(
    "archive",
    True,
    "With --workdir: also keep the JSON document in RUN/evaluations/ (lc_cfr.report lists it).",
)
_EXPLOITABILITY = flags.DEFINE_boolean(
    "exploitability", False, "Also the exact exploitability of each view (tiny variants)."
)
_SIMULATIONS = flags.DEFINE_integer(
    "openspiel_simulations",
    spiel_bots.DEFAULT_SIMULATIONS,
    "Simulations a decision of the OpenSpiel bots (openspiel_mcts, openspiel_ismcts).",
)


class Request(NamedTuple):
    workdir: str | None
    checkpoint: int | None
    agent: str | None
    opponents: tuple[str, ...]
    games: int
    views: tuple[str, ...]
    mode: str
    seed: int
    lanes: int | None
    rules: Rules | None
    json: str | None
    exploitability: bool = False
    openspiel_simulations: int = spiel_bots.DEFAULT_SIMULATIONS
    compute_dtype: str | None = None  # None: the run's network.compute_dtype
    search_blueprint: str = "average_strategy"  # the `search` view's blueprint (runs)
    search: search_lib.SearchOptions = search_lib.SearchOptions()


def _parse_rules(text: str | None) -> Rules:
    if not text:
        return Rules()
    fields = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            if not sep:
                raise ValueError
            fields[name.strip()] = int(value)
        except ValueError:
            raise app.UsageError(
                f"--rules must be comma-separated field=int pairs, got {part!r}"
            ) from None
    try:
        return Rules.from_mapping(fields)
    except ValueError as error:
        raise app.UsageError(f"--rules: {error}") from None


def parse_request(
    *,
    workdir=None,
    checkpoint=None,
    agent=None,
    opponents=ALL_OPPONENTS,
    games=200,
    views=ALL_VIEWS,
    mode="greedy",
    seed=0,
    lanes=None,
    rules=None,
    json_path=None,
    exploitability=False,
    openspiel_simulations=spiel_bots.DEFAULT_SIMULATIONS,
    compute_dtype=None,
    search_blueprint="average_strategy",
    search_options: search_lib.SearchOptions | None = None,
) -> Request:
    """Checks the flag values; every error is an app.UsageError naming its flag."""
    if (workdir is None) == (agent is None):
        raise app.UsageError("give exactly one of --workdir (a run) and --agent (a bot)")
    try:
        if agent is not None:
            spiel_bots.check_player_name(agent, "--agent")
        # head to head: with a run, its own views may be opponents
        rivals = eval_games.VIEWS if workdir is not None else ()
        opponent_names = tuple(
            n if n in rivals else spiel_bots.check_player_name(n, "--opponents")
            for n in parse_names(opponents, "--opponents")
        )
        eval_games.check_games(games, lanes, games_field="--games", lanes_field="--lanes")
        rng.as_word(seed, "--seed")
        simulations = spiel_bots.check_simulations(openspiel_simulations, "--openspiel_simulations")
        view_names = parse_names(views, "--views")
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    for view in view_names:
        if view not in POLICY_VIEWS + (SEARCH,):
            raise app.UsageError(
                f"--views must be among {list(POLICY_VIEWS + (SEARCH,))}, got {view!r}"
            )
    if SD_CFR in view_names and set(opponent_names) & set(eval_games.VIEWS):
        raise app.UsageError("--views sd_cfr plays bots only: not head to head (--opponents)")
    search_options = search_options or search_lib.SearchOptions()
    if SEARCH in view_names and (agent is not None or workdir is not None):
        blueprints = search_lib.BLUEPRINT_VIEWS + (SD_CFR,)
        if agent is None and search_blueprint not in blueprints:
            raise app.UsageError(
                f"--search_blueprint must be one of {list(blueprints)} (a view of the run), "
                f"got {search_blueprint!r}"
            )
        if search_blueprint == SD_CFR and set(opponent_names) & set(eval_games.VIEWS):
            raise app.UsageError(
                "--search_blueprint sd_cfr plays bots only: not head to head (--opponents)"
            )
        if search_options.leaf_decisions and (agent is not None or search_blueprint == SD_CFR):
            over = f"--agent={agent}" if agent is not None else "--search_blueprint sd_cfr"
            raise app.UsageError(
                f"--search_leaf_decisions={search_options.leaf_decisions}: search over {over} "
                "has no value network to value the leaves with (0 plays rollouts to the end)"
            )
        if agent is not None and sequential.is_sequential(spiel_bots, agent):
            raise app.UsageError(
                f"--views search over --agent={agent}: a search stands on a network view or "
                "one of lc_cfr's bots, not on an OpenSpiel bot"
            )
        rules_for_check = _parse_rules(rules) if agent is not None else Rules()
        try:
            search_lib.check_options(search_options, rules_for_check)
        except ValueError as error:
            raise app.UsageError(str(error)) from None
    if mode not in eval_games.MODES:
        raise app.UsageError(f"--mode must be one of {list(eval_games.MODES)}, got {mode!r}")
    if checkpoint is not None and (workdir is None or checkpoint < 0):
        raise app.UsageError("--checkpoint needs --workdir and must be >= 0")
    if exploitability and workdir is None:
        raise app.UsageError("--exploitability needs --workdir (a run)")
    if compute_dtype is not None:
        if workdir is None:
            raise app.UsageError("--compute_dtype needs --workdir (a run's networks)")
        if compute_dtype not in mlp.COMPUTE_DTYPES:
            raise app.UsageError(
                f"--compute_dtype must be one of {sorted(mlp.COMPUTE_DTYPES)}, "
                f"got {compute_dtype!r}"
            )
    if rules is not None and agent is None:
        raise app.UsageError("--rules is for --agent only: a run's rules come from its config")
    if workdir is not None and not (pathlib.Path(workdir) / "config.json").is_file():
        raise app.UsageError(f"--workdir {workdir} holds no config.json (not a run directory)")
    return Request(
        workdir=workdir,
        checkpoint=checkpoint,
        agent=agent,
        opponents=opponent_names,
        games=int(games),
        views=view_names,
        mode=mode,
        seed=int(seed),
        lanes=lanes,
        rules=_parse_rules(rules) if agent is not None else None,
        json=json_path,
        exploitability=bool(exploitability),
        openspiel_simulations=simulations,
        compute_dtype=compute_dtype,
        search_blueprint=search_blueprint,
        search=search_options,
    )


def run_request(request: Request) -> dict:
    """Evaluates; returns the JSON document (the metrics under "metrics")."""
    document = {
        "games": request.games,
        "seed": request.seed,
        "opponents": list(request.opponents),
        "lanes": request.lanes or eval_games.DEFAULT_LANES,
    }
    if sequential.is_sequential(spiel_bots, request.agent or "", *request.opponents):
        document["openspiel_simulations"] = request.openspiel_simulations
    if request.agent is not None:
        metrics = sequential.evaluate_bots(
            spiel_bots,
            request.rules,
            agent=request.agent,
            opponents=request.opponents,
            games=request.games,
            seed=request.seed,
            lanes=request.lanes,
            simulations=request.openspiel_simulations,
        )
        if SEARCH in request.views:
            metrics.update(
                sequential.evaluate_search(
                    spiel_bots,
                    request.rules,
                    None,
                    request.agent,
                    None,
                    request.search,
                    opponents=request.opponents,
                    games=request.games,
                    seed=request.seed,
                    lanes=request.lanes,
                    simulations=request.openspiel_simulations,
                )
            )
            document["search"] = _search_document(request.agent, request.search)
        document.update(agent=request.agent, rules=request.rules.to_dict())
    else:
        from lc_cfr.train.saved_networks import (
            CheckpointNotFoundError,
            load_saved_networks,
            search_params,
        )

        try:
            networks = load_saved_networks(request.workdir, request.checkpoint)
        except CheckpointNotFoundError as error:
            raise app.UsageError(f"--checkpoint: {error}") from None
        except (FileNotFoundError, ValueError) as error:
            raise app.UsageError(f"--workdir {request.workdir}: {error}") from None
        if request.compute_dtype is not None:
            spec = dataclasses.replace(networks.spec, compute_dtype=request.compute_dtype)
            networks = networks._replace(spec=spec)
        available = networks.policy_views()
        if SD_CFR in request.views and SD_CFR not in available:
            raise app.UsageError(
                f"--views sd_cfr: the run {request.workdir} keeps no snapshots "
                "(sd_cfr.snapshots was 0)"
            )
        fallback = networks.config.regret_matching.all_negative_fallback
        draws = networks.config.draws
        if draws != "any" and request.exploitability:
            raise app.UsageError(
                f"--exploitability: the run plays draws={draws!r}, which the OpenSpiel "
                "policy of the exploitability computation does not apply"
            )
        if SEARCH in request.views:
            try:
                search_lib.check_options(request.search, networks.rules)
            except ValueError as error:
                raise app.UsageError(str(error)) from None
            if request.search_blueprint not in available:
                raise app.UsageError(
                    f"--search_blueprint {request.search_blueprint}: the run "
                    f"{request.workdir} has no such view (sd_cfr: it keeps no snapshots)"
                )
        rivals = {
            name: (
                eval_games.network_agent(name, request.mode, fallback, draws),
                available[name],
            )
            for name in request.opponents
            if name in eval_games.VIEWS
        }
        plain = [view for view in request.views if view != SEARCH]
        metrics = {}
        # what every pair shares: the deals, the seats' draws, the opponents and rivals
        common = dict(
            opponents=request.opponents,
            games=request.games,
            seed=request.seed,
            fallback=fallback,
            lanes=request.lanes,
            simulations=request.openspiel_simulations,
            draws=draws,
            rivals=rivals,
        )
        if plain:
            views = {view: available[view] for view in plain}
            metrics = sequential.evaluate(
                spiel_bots, networks.rules, networks.spec, views, mode=request.mode, **common
            )
        if SEARCH in request.views:
            blueprint = request.search_blueprint
            try:
                params = search_params(request.search, available[blueprint], networks)
            except ValueError as error:
                raise app.UsageError(f"--workdir {request.workdir}: {error}") from None
            metrics.update(
                sequential.evaluate_search(
                    spiel_bots,
                    networks.rules,
                    networks.spec,
                    blueprint,
                    params,
                    request.search,
                    **common,
                )
            )
            document["search"] = _search_document(request.search_blueprint, request.search)
        document.update(
            workdir=str(request.workdir),
            checkpoint=networks.iteration,
            strategy_iteration=networks.strategy_iteration,
            views=list(request.views),
            mode=request.mode,
            fallback=fallback,
            draws=draws,
            rules=networks.rules.to_dict(),
            compute_dtype=networks.spec.compute_dtype,
        )
    document["metrics"] = metrics
    if request.exploitability:
        views = [view for view in request.views if view != SEARCH]
        document["exploitability"] = _exploitability(networks, views)
    return document


def archive(document: dict, workdir: str | os.PathLike) -> pathlib.Path:
    """Writes `document` to RUN/evaluations/checkpoint_<N>-<UTC time>.json (whole or not at
    all: a temporary file renamed into place) and returns the path."""
    import datetime

    folder = pathlib.Path(workdir) / "evaluations"
    folder.mkdir(exist_ok=True)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S%f")
    path = folder / f"checkpoint_{document['checkpoint']:08d}-{stamp}.json"
    partial = path.with_suffix(".json.partial")
    partial.write_text(json.dumps(document, indent=1, sort_keys=True))
    os.replace(partial, path)
    return path


def _search_document(blueprint: str, options: search_lib.SearchOptions) -> dict:
    """What the `search` view searched over and with which settings (the JSON's record)."""
    return {"blueprint": blueprint, **options._asdict()}


def _exploitability(networks, views) -> dict:
    """Exact figures of the views (points), and the uniform policy's for reference."""
    from lc_cfr.train.setup import exploitability_evaluator

    try:
        evaluator = exploitability_evaluator(networks.config, networks.rules, networks.spec)
    except ValueError as error:
        raise app.UsageError(f"--exploitability: {error}") from None
    available = networks.policy_views()
    return evaluator.of_views({view: available[view] for view in views})


def format_table(metrics: dict) -> str:
    """One line per (view or agent, opponent)."""
    pairs = sorted({tuple(key.split("/")[1:3]) for key in metrics}, key=lambda x: x)
    header = (
        f"{'agent':<18} {'opponent':<22} {'win':>6} {'margin':>16} {'score':>8} "
        f"{'length':>7} {'trunc':>6} {'games/s':>9} {'seconds':>8}"
    )
    lines = [header, "-" * len(header)]
    for view, opponent in pairs:

        def m(name, view=view, opponent=opponent):
            return metrics[f"eval/{view}/{opponent}/{name}"]

        stderr = m("margin_stderr")
        margin = f"{m('margin_mean'):+.2f}" + ("" if math.isnan(stderr) else f" ± {stderr:.2f}")
        lines.append(
            f"{view:<18} {opponent:<22} {m('win_rate'):>6.3f} {margin:>16} "
            f"{m('score_mean'):>8.2f} {m('length_mean'):>7.1f} {m('truncation_rate'):>6.3f} "
            f"{m('games_per_second'):>9.1f} {m('seconds'):>8.2f}"
        )
    return "\n".join(lines)


def main(argv):
    try:
        return _main(argv)
    except app.UsageError as error:
        if os.environ.get("LC_CFR_TRACEBACK") == "1":
            raise
        # one line naming the flag, file or value (LC_CFR_TRACEBACK=1 shows the traceback)
        print(f"lc_cfr.evaluate: error: {error}", file=sys.stderr)
        return 1


def _main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    request = parse_request(
        workdir=_WORKDIR.value,
        checkpoint=_CHECKPOINT.value,
        agent=_AGENT.value,
        opponents=_OPPONENTS.value,
        games=_GAMES.value,
        views=_VIEWS.value,
        mode=_MODE.value,
        seed=_SEED.value,
        lanes=_LANES.value,
        rules=_RULES.value,
        json_path=_JSON.value,
        exploitability=_EXPLOITABILITY.value,
        openspiel_simulations=_SIMULATIONS.value,
        compute_dtype=_COMPUTE_DTYPE.value,
        search_blueprint=_SEARCH_BLUEPRINT.value,
        search_options=search_lib.options_from_flags(_SEARCH),
    )
    compile_cache.quiet_backend_probe()
    compile_cache.enable(compile_cache.directory())
    document = run_request(request)
    where = (
        f"checkpoint {document['checkpoint']} of {request.workdir}"
        if request.workdir
        else (f"bot {request.agent}")
    )
    search = (
        f", {request.openspiel_simulations} OpenSpiel simulations a decision"
        if "openspiel_simulations" in document
        else ""
    )
    print(f"{where}: {request.games} games per opponent, seed {request.seed}{search}")
    if "search" in document:
        s = document["search"]
        print(
            f"search over {s['blueprint']}: {s['determinizations']} determinizations, "
            f"{s['candidates'] or 'all'} candidates, prior weight {s['prior_weight']}, "
            f"stderr weight {s['stderr_weight']}, {s['rollout']} rollouts"
            + (f" cut at {s['leaf_decisions']} decisions" if s.get("leaf_decisions") else "")
        )
    if "average_strategy" in request.views and "strategy_iteration" in document:
        from lc_cfr.train.saved_networks import strategy_note

        note = strategy_note(document["checkpoint"], document["strategy_iteration"])
        if note:
            print(f"note: {note}")
    print(format_table(document["metrics"]))
    for view, figures in document.get("exploitability", {}).items():
        print(f"exploitability of {view}: {figures['exploitability']:.4f} points")
    if request.workdir and _ARCHIVE.value:
        try:
            print(f"archived in {archive(document, request.workdir)}")
        except OSError as error:  # a read-only run directory: the results are printed
            print(f"lc_cfr.evaluate: warning: not archived in the run: {error}", file=sys.stderr)
    if request.json:
        out = pathlib.Path(request.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(document, indent=1, sort_keys=True))
        print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
