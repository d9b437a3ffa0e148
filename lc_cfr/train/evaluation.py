"""Evaluation during training: the state's policy views on the `evaluation` schedules.

Every `eval_every` iterations the views play `opponents` (every
`extended_eval_every` iterations `extended_opponents` instead, with their own games),
mirrored on the shared deals of `lc_cfr.eval`; every `exploitability_every` iterations the
exact exploitability of each view is added (OpenSpiel, enumerable variants only).
"""

from __future__ import annotations

from lc_cfr.eval import SD_CFR, Snapshots, evaluate
from lc_cfr.train.run_format import TrainState
from lc_cfr.train.setup import EvaluationPlan


def policy_views(state: TrainState, views) -> dict:
    """{view: its parameters} of the named `views` of a training state."""
    held = {"average_strategy": state.strategy_params, "current": state.advantage_params}
    if state.sd_advantage is not None:
        held[SD_CFR] = Snapshots(state.sd_advantage, state.sd_count)
    return {view: held[view] for view in views}


def opponents_at(plan: EvaluationPlan, t: int) -> tuple[tuple[str, ...], int] | None:
    """(opponents, games) that iteration t is evaluated against, or None."""
    if plan.extended_every and t % plan.extended_every == 0:
        return plan.extended_opponents, plan.extended_games
    if plan.every and t % plan.every == 0:
        return plan.opponents, plan.games
    return None


def evaluate_state(
    state: TrainState, plan: EvaluationPlan, *, rules, spec, fallback, exploitability, draws="any"
):
    """The `eval/...` and `exploitability/...` metrics of `state` ({} off schedule); the
    views take the run's `draws` (`policy.DRAWS`)."""
    row = {}
    views = policy_views(state, plan.views)
    scheduled = opponents_at(plan, state.iteration)
    if scheduled is not None:
        opponents, games = scheduled
        row.update(
            evaluate(
                rules,
                spec,
                views,
                opponents=opponents,
                games=games,
                view_modes=plan.mode,
                seed=plan.seed,
                fallback=fallback,
                lanes=plan.lanes,
                draws=draws,
            )
        )
    every = plan.exploitability_every
    if every and state.iteration % every == 0:
        for view, values in exploitability.of_views(views).items():
            row[f"exploitability/{view}"] = values["exploitability"]
    return row
