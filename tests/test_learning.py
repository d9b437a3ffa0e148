"""Learning regression bounds: short runs that must keep learning, and bounds that bite.

On the enumerable TINY_RULES variant the trainer's exact exploitability (OpenSpiel), as a
fraction of the uniform policy's, after ITERATIONS iterations must stay within SLACK times
what the same deterministic run measured, per view, for every estimator that
docs/experiments.md section 3 finds working. The known-bad setting of that section,
external sampling expanded at the root only, must fail the default's bounds: the bounds
are tight enough to see an estimator that stalls.
"""

import json
import pathlib
from typing import NamedTuple

import pytest
from config_helpers import default_config

pytest.importorskip("pyspiel", reason="exact exploitability needs the openspiel extra")

from lc_cfr import evaluate  # noqa: E402
from lc_cfr.spiel import TINY_RULES  # noqa: E402
from lc_cfr.train import Trainer  # noqa: E402
from lc_cfr.train.setup import rules_from_config  # noqa: E402

ITERATIONS = 12
VIEWS = ("average_strategy", "current", "sd_cfr")
SLACK = 1.5  # a bound is SLACK times the figure its run measured


class Estimator(NamedTuple):
    preset: str
    overrides: dict  # "section.field" -> value over the preset
    # exploitability / uniform at iteration ITERATIONS, per view in VIEWS, measured on
    # 2026-12-02 (main at 3519644; the runs are deterministic given the seed)
    measured: tuple[float, float, float]


CLASSIC = "tiny,classic"  # outcome sampling from the root, slot head
ESTIMATORS = {
    # the default: external sampling expanded at a sampled decision, card head
    # (0.042 / 0.059 / 0.015 on 2026-11-30 too)
    "sampled": Estimator("tiny", {}, (0.0422, 0.0592, 0.0155)),
    "outcome": Estimator(CLASSIC, {}, (0.0608, 0.0784, 0.0529)),
    "baseline": Estimator(
        CLASSIC, {"traversal.outcome_estimator": "baseline"}, (0.0435, 0.0156, 0.0381)
    ),
    # ESCHER-style: far behind at 12 iterations while its value network is untrained,
    # level with plain outcome sampling at 100 (section 3)
    "history_value": Estimator(
        CLASSIC,
        {"traversal.outcome_estimator": "history_value", "traversal.value_lambda": 0.0},
        (0.2165, 0.0551, 0.3512),
    ),
}
# Stalls (section 3: 0.15 of uniform at 100 iterations); measured 0.153 / 0.090 / 0.130
KNOWN_BAD = Estimator(CLASSIC, {"traversal.sampling_mode": "external"}, (0.1530, 0.0899, 0.1303))


def _config(estimator: Estimator):
    config = default_config.get_config(estimator.preset)
    assert rules_from_config(config) == TINY_RULES
    for name, value in estimator.overrides.items():
        section, field = name.split(".")
        setattr(config[section], field, value)
    config.run.max_iterations = ITERATIONS
    config.run.progress_bar = False
    config.logging.tensorboard = False
    config.checkpoint.save_every = 0
    # only the last iteration is saved (the evaluate CLI check reads it): a save every
    # iteration cost about half a second each and changes no figure
    config.checkpoint.save_latest = False
    config.evaluation.exploitability_every = ITERATIONS
    config.evaluation.views = ",".join(VIEWS)
    config.sd_cfr.snapshots = 8
    return config


def _train(estimator: Estimator, workdir: pathlib.Path) -> tuple[dict, dict]:
    """Trains ITERATIONS iterations: (exploitability of each view over the uniform's, the
    last metrics row)."""
    Trainer(_config(estimator), workdir).run()
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    assert last["iteration"] == ITERATIONS
    uniform = last["exploitability/uniform"]
    assert uniform == pytest.approx(2.0385, abs=1e-3)  # docs/exploitability.md
    return {view: last[f"exploitability/{view}"] / uniform for view in VIEWS}, last


def _missed(fractions: dict, estimator: Estimator) -> list[str]:
    """The views whose figure is not below SLACK times the estimator's measured one."""
    return [v for v, m in zip(VIEWS, estimator.measured, strict=True) if fractions[v] >= SLACK * m]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ESTIMATORS))
def test_tiny_exploitability_stays_within_its_bound(name, tmp_path):
    estimator = ESTIMATORS[name]
    fractions, last = _train(estimator, tmp_path)
    assert not _missed(fractions, estimator), (name, fractions, estimator.measured)
    if name == "outcome":
        # classic outcome sampling is no substitute for the default: the default's bounds
        # reject it (its SD-CFR view, 0.053 against 1.5 x 0.0155)
        assert _missed(fractions, ESTIMATORS["sampled"]), fractions
    if name != "sampled":
        return
    # the evaluate CLI's --exploitability gives the trainer's figures for the checkpoint
    request = evaluate.parse_request(
        workdir=str(tmp_path),
        opponents="random",
        games=2,
        views=",".join(VIEWS),
        exploitability=True,
    )
    figures = evaluate.run_request(request)["exploitability"]
    for view in VIEWS:
        assert figures[view]["exploitability"] == pytest.approx(last[f"exploitability/{view}"])


@pytest.mark.slow
def test_every_bound_rejects_root_only_external_sampling(tmp_path):
    fractions, _ = _train(KNOWN_BAD, tmp_path)
    for name, estimator in ESTIMATORS.items():
        assert _missed(fractions, estimator), (name, fractions, estimator.measured)
    # the default's average strategy, the view the docs judge by, misses by over twice
    default_bound = SLACK * ESTIMATORS["sampled"].measured[0]
    assert fractions["average_strategy"] > 2 * default_bound, fractions
