"""Evaluation: mirroring, a per-game reference loop, greedy vs sampled, compile-once, CLI."""

import functools
import json
import math
import os
import pathlib
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl import app
from config_helpers import default_config

from lc_cfr import eval as lc_eval
from lc_cfr import evaluate, report, search
from lc_cfr.bots import jax_bots
from lc_cfr.game import engine, rng
from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import policy as pol

ROOT = pathlib.Path(__file__).resolve().parent.parent

# The smoke variant: 12 cards, hands of 3, games of ~15 decisions.
RULES = Rules(n_colors=2, n_ranks=5, n_wagers=1, hand_size=3, bonus_threshold=5, max_turns=30)
RULES_FLAG = "n_colors=2,n_ranks=5,n_wagers=1,hand_size=3,bonus_threshold=5,max_turns=30"
# The smoke network shape, so that the CLI test's run meets loops compiled here (through
# the persistent compilation cache).
SPEC = mlp.NetworkSpec(RULES.encoding_size, RULES.num_actions, hidden_size=32, num_layers=2)
SEED = 11
GAMES = 24  # 12 deals
# 8 lanes per seat: lanes are refilled, and the last games finish in the narrower tail
# phase (2 lanes per seat)
LANES = 16


def _params(key: int):
    return mlp.init_params(SPEC, jax.random.PRNGKey(key))


def _views(key: int = 0) -> dict:
    return {"average_strategy": _params(key), "current": (_params(key + 1), _params(key + 2))}


# ----- the slow reference: one game at a time, engine functions on single states ------


@functools.cache
def _single(rules: Rules):
    return {
        "init": jax.jit(lambda seed, g: engine.init(rules, seed, g, 0)),
        "step": jax.jit(lambda s, a: engine.step(rules, s, a)),
        "mask": jax.jit(lambda s: engine.legal_action_mask(rules, s)),
        "observe": jax.jit(lambda s, p: engine.observe(rules, s, p)),
        "expeditions": jax.jit(lambda s: engine.expedition_scores(rules, s)),
    }


@functools.cache
def _single_bot(rules: Rules, name: str):
    return jax.jit(functools.partial(jax_bots.bot_action, rules, name))


@functools.cache
def _single_forward(spec: mlp.NetworkSpec):
    return jax.jit(lambda params, obs: mlp.apply(spec, params, obs[None])[0])


def _kept_draws(state, draws: str) -> np.ndarray:
    """[A] bool: the actions a `draws` agent keeps (all but some pile draws), in numpy."""
    h, k = RULES.hand_size, RULES.cards_per_color
    kept = np.ones(RULES.num_actions, bool)
    for colour in range(RULES.n_colors):
        size, mover = int(state.pile_sizes[colour]), int(state.current_player)
        playable = False
        if draws == "playable" and size > 0:
            top = int(state.discards[colour, size - 1]) % k
            if top < RULES.n_wagers:  # a wager: before any numbered card only
                playable = int(state.expedition_numbered[mover, colour]) == 0
            else:
                playable = top - RULES.n_wagers > int(state.expedition_top[mover, colour])
        kept[2 * h + 1 + colour] = playable
    return kept


def _greedy(probs, mask) -> int:
    """`policy.greedy_action` written out in numpy: the most probable legal action (lowest
    index among ties) but, at a draw decision, the most probable pile when the piles'
    total (a float32 sum in action order) is above the deck's probability."""
    probs, mask = np.asarray(probs, np.float32), np.asarray(mask, bool)
    legal = np.flatnonzero(mask)
    deck = RULES.draw_deck_action
    piles = [a for a in legal if a > deck]
    if mask[deck] and piles:
        total = np.float32(0.0)
        for a in piles:
            total = np.float32(total + probs[a])
        if total > probs[deck]:
            return int(max(piles, key=lambda a: (probs[a], -a)))
    return int(max(legal, key=lambda a: (probs[a], -a)))


def _network_policy(view, params, fallback, draws="any"):
    """A reference agent: (state, player, game id, decision, seed, mode) -> action."""
    fn = _single(RULES)

    def act(state, player, game_id, decision, seed, mode):
        mask = fn["mask"](state)
        if draws != "any":
            mask = np.asarray(mask) & _kept_draws(state, draws)
        raw = _single_forward(SPEC)(
            params if view == "average_strategy" else params[player], fn["observe"](state, player)
        )
        if view == "average_strategy":
            probs = mlp.masked_policy(raw, mask)
        else:
            probs = pol.regret_matching(mlp.masked_advantages(raw, mask), mask, fallback=fallback)
        if mode == "greedy":
            return _greedy(probs, mask)
        bits = rng.random_bits(seed, 0, game_id, decision, rng.Purpose.SAMPLE)
        return int(pol.sample_action(probs, mask, bits))

    return act


def _bot_policy(name):
    bot = _single_bot(RULES, name)
    return lambda state, player, deal, decision, seed: int(bot(state, seed, 0, deal, decision))


def reference_games(agent, opponent: str, games: int, seed: int, mode: str = "greedy"):
    """Plays every (deal, seat) game alone; returns a list of per-game dicts."""
    fn = _single(RULES)
    opponent_act = _bot_policy(opponent)
    h = RULES.hand_size
    out = []
    for deal in range(games // 2):
        for seat in (0, 1):
            state = fn["init"](seed, deal)
            counts = dict(plays=0, discards=0, deck_draws=0, pile_draws=0)
            decision = 0
            while not bool(state.terminal):
                player = int(state.current_player)
                if player == seat:
                    if isinstance(agent, str):  # a bot agent draws by deal, like the opponent
                        action = _bot_policy(agent)(state, player, deal, decision, seed)
                    else:
                        action = agent(state, player, 2 * deal + seat, decision, seed, mode)
                    kind = (
                        "plays"
                        if action < h
                        else "discards"
                        if action < 2 * h
                        else "deck_draws"
                        if action == 2 * h
                        else "pile_draws"
                    )
                    counts[kind] += 1
                else:
                    action = opponent_act(state, player, deal, decision, seed)
                assert bool(fn["mask"](state)[action]), "a player chose an illegal action"
                state = fn["step"](state, action)
                decision += 1
            scores = [int(x) for x in state.scores]
            cards = np.asarray(state.expedition_wagers + state.expedition_numbered)[seat]
            per_color = np.asarray(fn["expeditions"](state))[seat]
            out.append(
                dict(
                    deal=deal,
                    seat=seat,
                    agent_score=scores[seat],
                    opponent_score=scores[1 - seat],
                    margin=scores[seat] - scores[1 - seat],
                    decisions=decision,
                    truncated=bool(state.truncated),
                    opened=int(sum(c > 0 for c in cards)),
                    negative=int(
                        sum(c > 0 and v < 0 for c, v in zip(cards, per_color, strict=True))
                    ),
                    bonus=int(sum(c >= RULES.bonus_threshold for c in cards)),
                    **counts,
                )
            )
    return out


def reference_metrics(rows) -> dict:
    """The metrics, computed from the reference games in plain Python."""
    n = len(rows)
    total = lambda key: sum(r[key] for r in rows)  # noqa: E731
    deals = sorted({r["deal"] for r in rows})
    per_deal = [sum(r["margin"] for r in rows if r["deal"] == d) / 2 for d in deals]
    mean = sum(per_deal) / len(per_deal)
    var = sum((x - mean) ** 2 for x in per_deal) / (len(per_deal) - 1)
    card, draw = total("plays") + total("discards"), total("deck_draws") + total("pile_draws")
    opened = total("opened")
    return {
        "games": n,
        "win_rate": sum(1.0 if r["margin"] > 0 else 0.5 if r["margin"] == 0 else 0.0 for r in rows)
        / n,
        "margin_mean": total("margin") / n,
        "margin_stderr": math.sqrt(var / len(per_deal)),
        "score_mean": total("agent_score") / n,
        "opponent_score_mean": total("opponent_score") / n,
        "length_mean": total("decisions") / n,
        "truncation_rate": total("truncated") / n,
        "illegal_rate": 0.0,
        "play_rate": total("plays") / card,
        "discard_rate": total("discards") / card,
        "draw_deck_rate": total("deck_draws") / draw,
        "draw_pile_rate": total("pile_draws") / draw,
        "expeditions_opened": opened / n,
        "score_per_expedition": total("agent_score") / opened if opened else 0.0,
        "negative_expedition_rate": total("negative") / opened if opened else 0.0,
        "bonus_expedition_rate": total("bonus") / opened if opened else 0.0,
        "agent_decisions": card + draw,
    }


def _records_as_rows(records: lc_eval.GameRecords) -> list[dict]:
    rows = []
    for deal in range(records.margin.shape[1]):
        for seat in (0, 1):
            row = {name: getattr(records, name)[seat, deal].item() for name in records._fields}
            row.pop("illegal")
            rows.append(dict(deal=deal, seat=seat, **row))
    return rows


def _check_against_reference(metrics: dict, prefix: str, rows: list[dict]):
    expected = reference_metrics(rows)
    assert set(lc_eval.METRICS) == set(expected)
    for name, value in expected.items():
        assert metrics[f"{prefix}/{name}"] == pytest.approx(value, rel=1e-12, abs=1e-12), name


# ----- tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("bot", ["random", "noisy_safe"])
def test_bot_mirrored_against_itself_is_exactly_even(bot):
    metrics = lc_eval.evaluate_bots(RULES, agent=bot, opponents=[bot], games=GAMES, seed=SEED)
    assert metrics[f"eval/{bot}/{bot}/margin_mean"] == 0.0
    assert metrics[f"eval/{bot}/{bot}/win_rate"] == 0.5
    assert metrics[f"eval/{bot}/{bot}/margin_stderr"] == 0.0
    result = lc_eval.play(RULES, None, lc_eval.bot_agent(bot), bot, None, games=GAMES, seed=SEED)
    r = result.records
    # the seat-1 game of a deal replays the seat-0 game with the seats exchanged
    np.testing.assert_array_equal(r.agent_score[0], r.opponent_score[1])
    np.testing.assert_array_equal(r.decisions[0], r.decisions[1])
    np.testing.assert_array_equal(r.margin[0], -r.margin[1])
    assert np.any(r.margin != 0), "the deals should not all be ties"
    # bot against bot, game by game against the reference loop
    rows = reference_games(bot, bot, GAMES, SEED)
    assert _records_as_rows(r) == rows
    _check_against_reference(metrics, f"eval/{bot}/{bot}", rows)


@pytest.mark.parametrize(
    "view,mode,opponent,fallback",
    [
        ("average_strategy", "greedy", "safe_heuristic", "argmax_tiebreak"),
        ("current", "sampled", "noisy_safe", "uniform"),
    ],
)
def test_metrics_match_per_game_reference(view, mode, opponent, fallback):
    views = _views(3)
    metrics = lc_eval.evaluate(
        RULES,
        SPEC,
        {view: views[view]},
        opponents=[opponent],
        games=GAMES,
        view_modes=mode,
        seed=SEED,
        fallback=fallback,
        lanes=LANES,
    )
    agent = _network_policy(view, views[view], fallback)
    rows = reference_games(agent, opponent, GAMES, SEED, mode)
    _check_against_reference(metrics, f"eval/{view}/{opponent}", rows)
    result = lc_eval.play(
        RULES,
        SPEC,
        lc_eval.network_agent(view, mode, fallback),
        opponent,
        views[view],
        games=GAMES,
        seed=SEED,
        lanes=LANES,
    )
    assert _records_as_rows(result.records) == rows  # game by game, not only on average
    for name in lc_eval.TIMING_METRICS:
        assert metrics[f"eval/{view}/{opponent}/{name}"] >= 0


def test_greedy_and_sampled():
    # zero parameters: the average strategy is uniform over the legal actions
    flat = jax.tree.map(jnp.zeros_like, _params(0))

    def run(mode):
        agent = lc_eval.network_agent("average_strategy", mode)
        return lc_eval.play(
            RULES, SPEC, agent, "noisy_safe", flat, games=GAMES, seed=SEED, lanes=LANES
        ).records

    def uniform_greedy(state, player, game_id, decision, seed, mode):
        mask = np.asarray(_single(RULES)["mask"](state))
        return _greedy(mask / np.float32(mask.sum()), mask)

    greedy, sampled = run("greedy"), run("sampled")
    # greedy breaks the all-way tie by the lowest index: it plays or discards slot 0 and
    # draws from the deck where one pile at most may be drawn from, from the first pile
    # where two or more may (their total outweighs the deck's share)
    assert greedy.pile_draws.sum() > 0 and greedy.deck_draws.sum() > 0
    assert _records_as_rows(greedy) == reference_games(uniform_greedy, "noisy_safe", GAMES, SEED)
    # sampled draws from the uniform policy: it differs, and repeats itself exactly
    assert sampled.pile_draws.sum() > 0
    assert not np.array_equal(greedy.margin, sampled.margin)
    for name in lc_eval.GameRecords._fields:
        np.testing.assert_array_equal(getattr(run("sampled"), name), getattr(sampled, name))


def test_greedy_weighs_the_piles_together_against_the_deck():
    """`policy.greedy_action` against its numpy statement on random policies (with ties)
    at card and draw decisions, and the cases that say why it exists."""
    h, deck, n = RULES.hand_size, RULES.draw_deck_action, RULES.num_actions
    greedy = jax.jit(jax.vmap(pol.greedy_action, in_axes=(0, 0, None)), static_argnums=2)
    rng_ = np.random.default_rng(0)
    draw = np.zeros((400, n), bool)
    draw[:, deck] = True
    draw[:, deck + 1 :] = rng_.random((400, n - deck - 1)) < 0.6
    card = np.zeros((400, n), bool)
    card[:, : 2 * h] = rng_.random((400, 2 * h)) < 0.7
    card[:, h] = True  # a discard is always legal
    masks = np.concatenate([draw, card])
    probs = rng_.integers(0, 4, masks.shape).astype(np.float32) * masks  # ties are common
    probs = probs / np.maximum(probs.sum(axis=1, keepdims=True), 1.0)
    got = np.asarray(greedy(probs, masks, RULES.n_colors))
    assert got.tolist() == [_greedy(p, m) for p, m in zip(probs, masks, strict=True)]
    # the piles' 0.6 outweighs the deck's 0.4 though each pile alone is below it; the
    # deck at a tie of the totals
    two = np.zeros(n, np.float32)
    two[[deck, deck + 1, deck + 2]] = 0.4, 0.3, 0.3
    tie = np.zeros(n, np.float32)
    tie[[deck, deck + 1, deck + 2]] = 0.5, 0.25, 0.25
    assert int(pol.greedy_action(two, two > 0, RULES.n_colors)) == deck + 1
    assert int(pol.greedy_action(tie, tie > 0, RULES.n_colors)) == deck


@pytest.mark.parametrize("draws", ["deck", "playable"])
def test_restricted_draws_mask_the_pile_draws(draws):
    # the counterfactuals of scripts/stalling.py: the same policy, renormalised over the
    # draws kept at every draw decision, game by game as the one-game-at-a-time reference
    views = _views(40)
    agent = lc_eval.network_agent("current", "sampled", "uniform", draws=draws)
    records = lc_eval.play(
        RULES, SPEC, agent, "noisy_safe", views["current"], games=GAMES, seed=SEED, lanes=LANES
    ).records
    assert (records.pile_draws.sum() == 0) == (draws == "deck") and records.deck_draws.sum() > 0
    reference = _network_policy("current", views["current"], "uniform", draws=draws)
    assert _records_as_rows(records) == reference_games(
        reference, "noisy_safe", GAMES, SEED, "sampled"
    )
    with pytest.raises(ValueError, match="draws must be one of"):
        lc_eval.network_agent("current", draws="piles")


def test_compiles_once_across_calls():
    calls = [
        dict(view="average_strategy", view_modes="greedy", fallback="argmax_tiebreak"),
        dict(view="current", view_modes="sampled", fallback="uniform"),
    ]
    for key in (20, 30):  # new parameters of the same shapes: no new compile
        views = _views(key)
        for call in calls:
            traces = lc_eval.trace_count()
            metrics = lc_eval.evaluate(
                RULES,
                SPEC,
                {call["view"]: views[call["view"]]},
                opponents=["noisy_safe"],
                games=GAMES,
                view_modes=call["view_modes"],
                seed=SEED,
                fallback=call["fallback"],
                lanes=LANES,
            )
            prefix = f"eval/{call['view']}/noisy_safe"
            if key == 30:
                assert lc_eval.trace_count() == traces
                assert metrics[f"{prefix}/compile_seconds"] == 0.0
            assert metrics[f"{prefix}/seconds"] > 0


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(games=7), "games"),
        (dict(games=0), "games"),
        (dict(lanes=3), "lanes"),
        (dict(opponents=["nobody"]), "opponents"),
        (dict(opponents="random"), "opponents"),
        (dict(view_modes="argmax"), "mode"),
        (dict(fallback="zero"), "fallback"),
    ],
)
def test_bad_arguments_name_the_field(change, field):
    views = _views(0)
    kwargs = dict(opponents=["random"], games=GAMES, seed=SEED) | change
    with pytest.raises(ValueError, match=field):
        lc_eval.evaluate(RULES, SPEC, views, **kwargs)


def test_an_unknown_view_or_agent_is_named():
    views = _views(0)
    with pytest.raises(ValueError, match="view"):
        lc_eval.evaluate(RULES, SPEC, {"policy": views["current"]}, opponents=["random"], games=4)
    with pytest.raises(ValueError, match="agent"):
        lc_eval.evaluate_bots(RULES, agent="nobody", opponents=["random"], games=4)


def _cli(*args, check=True):
    env = dict(os.environ, LC_CFR_JAX_CACHE=str(ROOT / ".cache" / "jax"))
    command = [sys.executable, "-m", "lc_cfr.evaluate", *args]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_cli_evaluates_a_trained_run(tmp_path):
    from lc_cfr.train import Trainer

    config = default_config.get_config("smoke")
    config.logging.tensorboard = False
    config.run.max_iterations = 1
    workdir = tmp_path / "run"
    Trainer(config, workdir).run()
    # the evaluator reads the fallback from the run's config.json, written here rather than
    # trained with: the fallback is compiled into the traversal, and the other smoke runs
    # of the suite have compiled the default's
    saved = json.loads((workdir / "config.json").read_text())
    assert saved["regret_matching"]["all_negative_fallback"] != "uniform"
    saved["regret_matching"]["all_negative_fallback"] = "uniform"
    (workdir / "config.json").write_text(json.dumps(saved))
    out = tmp_path / "eval.json"
    _cli(
        f"--workdir={workdir}",
        "--opponents=noisy_safe",
        f"--games={GAMES}",
        f"--lanes={LANES}",
        f"--seed={SEED}",
        "--mode=sampled",
        f"--json={out}",
    )
    document = json.loads(out.read_text())
    assert document["checkpoint"] == 1 and document["fallback"] == "uniform"
    metrics = document["metrics"]
    for view in lc_eval.VIEWS:
        for name in lc_eval.METRICS + lc_eval.TIMING_METRICS:
            assert f"eval/{view}/noisy_safe/{name}" in metrics
        assert metrics[f"eval/{view}/noisy_safe/games"] == GAMES
    # the bad values below are refused in-process (no interpreter and JAX import each):
    # lc_cfr.evaluate.main turns every app.UsageError into a one-line error and a non-zero
    # exit, which test_cli_bot_against_bot checks on the command line
    with pytest.raises(app.UsageError, match="--checkpoint"):
        evaluate.run_request(evaluate.parse_request(workdir=str(workdir), checkpoint=7, games=4))
    # the same networks played in bfloat16 forwards: greedy margins close to float32's
    # (8 lanes, 4 a seat: one phase, half the compile of LANES' two; the smoke preset's
    # evaluation, the loop tests/test_compute_dtype.py's bfloat16 run compiles, so the
    # cache serves it)
    _cli(
        f"--workdir={workdir}",
        "--opponents=random",
        "--games=8",
        "--lanes=8",
        f"--seed={SEED}",
        "--views=average_strategy",
        "--compute_dtype=bfloat16",
        f"--json={out}",
    )
    bf16 = json.loads(out.read_text())
    assert bf16["compute_dtype"] == "bfloat16" and document["compute_dtype"] == "float32"
    assert bf16["metrics"]["eval/average_strategy/random/games"] == 8
    with pytest.raises(app.UsageError, match="--compute_dtype must be one of"):
        evaluate.parse_request(workdir=str(workdir), compute_dtype="float8")
    # search over the run's average strategy (docs/search.md), in-process; archived in the
    # run beside the command lines' documents, and listed by the report
    searched = evaluate.run_request(
        evaluate.parse_request(
            workdir=str(workdir),
            views="search",
            opponents="random",
            games=8,
            lanes=8,
            seed=SEED,
            search_options=search.SearchOptions(determinizations=2, candidates=2),
        )
    )
    assert searched["search"]["blueprint"] == "average_strategy"
    assert searched["metrics"]["eval/search/random/games"] == 8
    evaluate.archive(searched, workdir)
    archived = report.build_report(workdir)["archived_evaluations"]
    assert len(archived) == 3  # the two command lines' and this one
    assert "search/random" in archived[-1]["pairs"] and archived[-1]["search"]["candidates"] == 2
    assert "search over average_strategy: D=2, k=2" in report.render(report.build_report(workdir))


@pytest.mark.slow
def test_cli_bot_against_bot(tmp_path):
    out = tmp_path / "bots.json"
    result = _cli(
        "--agent=noisy_safe",
        "--opponents=noisy_safe",
        f"--games={GAMES}",
        f"--seed={SEED}",
        f"--rules={RULES_FLAG}",
        f"--json={out}",
    )
    assert "noisy_safe" in result.stdout
    # JAX's backend probing stays quiet for users (LC_CFR_DEBUG=1 shows it)
    assert "Unable to initialize backend" not in result.stderr
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["eval/noisy_safe/noisy_safe/margin_mean"] == 0.0
    assert metrics["eval/noisy_safe/noisy_safe/win_rate"] == 0.5
    for flags, name in [
        (["--agent=random", "--games=5"], "--games"),
        (["--agent=random", "--opponents=nobody"], "--opponents"),
        (["--games=4"], "--workdir"),
        (["--agent=random", "--compute_dtype=bfloat16"], "--compute_dtype"),
    ]:
        bad = _cli(*flags, check=False)
        assert bad.returncode != 0 and name in bad.stderr.splitlines()[-1], (flags, bad.stderr)
