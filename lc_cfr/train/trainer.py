"""The Deep CFR training loop that every backend sits behind (docs/design.md sections 3 to 5).

Each iteration t = 1, 2, ...: for each player p, the backend runs the traversals with p
as traverser, their samples enter p's advantage memory and the strategy memory, and p's
advantage network is trained; the strategy network is trained every
`optimization.strategy_train_every` iterations. Every random choice derives from
`config.seed` and the iteration, so a resumed run is the uninterrupted run.

This module is the only reader of the config: it turns it into explicit arguments.
"""

from __future__ import annotations

import contextlib
import datetime
import enum
import functools
import json
import pathlib
import time
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import logging

from lc_cfr.bots import BOT_NAMES
from lc_cfr.eval import POLICY_VIEWS, SD_CFR, Snapshots, evaluate
from lc_cfr.game import engine
from lc_cfr.game.rules import Rules
from lc_cfr.learn import Learner, make_optimizer
from lc_cfr.learn import api as learn_api
from lc_cfr.learn.learner import check_weighting
from lc_cfr.memory import codec as memory_codec
from lc_cfr.memory import reservoir
from lc_cfr.nets import mlp
from lc_cfr.train import anatomy, checkpoint, distributed, health
from lc_cfr.train.metrics import MetricsWriter, Progress
from lc_cfr.traversal import api
from lc_cfr.traversal.registry import make_backend
from lc_cfr.traversal.torch import WorkerSettings

# Trees saved in the checkpoint item `networks` (all that evaluation and play read).
NETWORK_ITEMS = ("advantage_params", "strategy_params", "sd_advantage")

# Config blocks a resumed run may change; every other field must match the checkpoint.
# How a backend runs (lanes, worker counts, widths) never changes a traversal's samples.
RESUMABLE_CHANGES = (
    "run.",
    "checkpoint.",
    "logging.",
    "traversal.lanes",
    "optimization.non_finite",  # what happens to a non-finite update, not what is computed
    "traversal.num_workers",
    "traversal.worker_chunk_size",
    "traversal.interleave_width",
    "traversal.interleave_max_batch",
    "evaluation.",  # evaluations read the state, they never change it
    "distributed.",  # processes and devices never change the samples (docs/scaling.md)
    # how memories store and allocate rows: decoded rows and slots are the same either way
    "memory.info_storage",
    "memory.initial_rows",
)
# Fields that change nothing while the run does not use what they configure.
VALUE_NETWORK_FIELDS = (
    "traversal.value_lambda",
    "optimization.value_",
    "memory.value_capacity",
)


# Fields added after runs were first written, with the value that reproduces what those
# runs did: a saved config without them means exactly these settings.
ADDED_FIELDS = {
    "traversal.expand_at": "root",
    "traversal.path_epsilon": 0.0,
    "traversal.outcome_estimator": "importance",
    "traversal.value_lambda": 1.0,
    "regret_matching.floor": 0.0,
    "optimization.value_updates": 256,
    "optimization.value_batch_size": 512,
    "memory.value_capacity": 200_000,
    "evaluation.exploitability_every": 0,
    "network.head": "slot",
    "sd_cfr.snapshots": 0,
    # the encoding's own_known block came later: older networks never read it
    "network.own_known_input": False,
    "traversal.epsilon_decay": 1.0,
    "traversal.epsilon_decay_every": 20,
    "traversal.epsilon_min": 0.05,
    "optimization.non_finite": "stop",
    "run.restart": False,
    "network.compute_dtype": "float32",  # runs before it computed in float32
    # how rows are stored and grown may change on resume (an older run's float16 rows
    # are restored into this codec), so a saved config without them takes the defaults
    "memory.info_storage": "packed",
    "memory.initial_rows": 65_536,
}


def read_run_config(path: pathlib.Path) -> ml_collections.ConfigDict:
    """A run's saved config.json, completed with ADDED_FIELDS where it predates them."""
    config = ml_collections.ConfigDict(json.loads(pathlib.Path(path).read_text()))
    for dotted, value in ADDED_FIELDS.items():
        block, field = dotted.split(".")
        if block not in config:
            config[block] = ml_collections.ConfigDict()
        if field not in config[block]:
            config[block][field] = value
    return config


class KeyOwner(enum.IntEnum):
    """Whose random stream a trainer key belongs to (`Trainer.key`); the players' own
    advantage networks and memories are 0 and 1. The numbers are part of the run format:
    changing one changes every run's bits."""

    PLAYER_0 = 0
    PLAYER_1 = 1
    STRATEGY = 2  # the average-strategy network
    VALUE = 3  # the history value network
    SD_CFR = 4  # the SD-CFR snapshot reservoir


class KeyUse(enum.IntEnum):
    """What a trainer key is drawn for, within its owner's stream."""

    INIT = 0  # network initialisation (iteration 0)
    ADVANTAGE_ADD = 1  # reservoir slots of a player's advantage samples
    STRATEGY_ADD = 2  # reservoir slots of the strategy samples a player's traversal made
    REINIT = 3  # advantage_init='scratch': the network re-drawn every iteration
    TRAIN = 4  # the learner's batches
    # the SD_CFR stream's own uses (their numbers repeat INIT's and ADVANTAGE_ADD's, as
    # aliases, in a stream that has neither)
    SNAPSHOT_DRAW = 0  # whether this iteration's networks enter the reservoir
    SNAPSHOT_PICK = 1  # which slot they replace


class TrainState(NamedTuple):
    """Everything a run needs to continue exactly (all of it is checkpointed)."""

    iteration: int  # completed iterations
    advantage_params: tuple  # (player 0, player 1) flax params
    advantage_opt: tuple  # their optax states
    strategy_params: Any
    strategy_opt: Any
    advantage_memory: tuple  # (player 0, player 1) Reservoir
    strategy_memory: reservoir.Reservoir
    league: Any  # strategy snapshots, every leaf [K, ...]
    league_added: int  # snapshots taken so far (the initial network counts as one)
    # the history value network of the outcome estimators that read it (else None)
    value_params: Any = None
    value_opt: Any = None
    value_memory: Any = None  # a sliding window (reservoir.window_add)
    # SD-CFR snapshots of the advantage networks (sd_cfr.snapshots > 0, else None):
    # (player 0's, player 1's) params with leaves [K, ...], the first sd_count valid
    sd_advantage: Any = None
    sd_count: int = 0
    sd_weight: float = 0.0  # total weight of the iterations offered (Chao's sampler)


def rules_from_config(config) -> Rules:
    return Rules.from_mapping(config.rules.to_dict())


def spec_from_config(config, rules: Rules) -> mlp.NetworkSpec:
    return mlp.NetworkSpec(
        input_size=rules.encoding_size,
        num_actions=rules.num_actions,
        hidden_size=config.network.hidden_size,
        num_layers=config.network.num_layers,
        activation=config.network.activation,
        head=config.network.head,
        n_cards=rules.n_cards,
        hand_size=rules.hand_size,
        own_known_input=bool(config.network.own_known_input),
        compute_dtype=config.network.get("compute_dtype", "float32"),
    )


def strategy_sample_nodes(strategy_samples: str, opponent_policy: str) -> str:
    """Resolves `traversal.strategy_samples='auto'`.

    Against a network opponent, Deep CFR's choice: the opponent's decisions (its policy,
    reached by its own play). Against a bot the opponent's decisions hold the bot's
    choices, not a policy of ours, so `auto` stores the traverser's own policy at its own
    decisions instead, on states its play (and the bot's) reaches.
    """
    if strategy_samples != "auto":
        return strategy_samples
    return "traverser" if opponent_policy in BOT_NAMES else "opponent"


def options_from_config(config) -> api.TraversalOptions:
    t = config.traversal
    return api.TraversalOptions(
        num_traversals=t.traversals_per_player,
        sampling_mode=t.sampling_mode,
        epsilon=float(t.outcome_sampling_epsilon),
        value_clip=float(t.outcome_sampling_value_clip),
        unsampled_regret=t.outcome_unsampled_regret,
        max_depth=t.max_depth,
        cutoff_turns=t.cutoff_turns,
        cutoff_value_mode=t.cutoff_value_mode,
        cutoff_rollouts=t.cutoff_rollouts,
        rollout_policy=t.cutoff_rollout_policy,
        opponent_policy=t.opponent_policy,
        strategy_samples=strategy_sample_nodes(t.strategy_samples, t.opponent_policy),
        fallback=config.regret_matching.all_negative_fallback,
        utility_scale=float(config.utility_scale),
        expand_at=t.expand_at,
        path_epsilon=float(t.path_epsilon),
        rm_floor=float(config.regret_matching.floor),
        outcome_estimator=t.outcome_estimator,
        value_lambda=float(t.value_lambda),
    )


def lanes_from_config(config) -> int:
    """traversal.lanes of the `jax` backend (the torch backends ignore it)."""
    t = config.traversal
    if t.backend == "jax" and t.lanes > t.traversals_per_player:
        raise ValueError(
            f"traversal.lanes={t.lanes} exceeds traversal.traversals_per_player="
            f"{t.traversals_per_player}: the extra lanes would never run"
        )
    return t.lanes


def worker_settings_from_config(config) -> WorkerSettings:
    t = config.traversal
    return WorkerSettings(
        num_workers=t.num_workers,
        chunk_size=t.worker_chunk_size,
        interleave_width=t.interleave_width,
        interleave_max_batch=t.interleave_max_batch,
        league_size=config.self_play.league_size,
        device=config.run.device,
        use_amp=bool(config.run.use_amp),
        compile=bool(config.run.torch_compile),
    )


LEARNERS = ("optax", "torch")


def learner_from_config(config, spec: mlp.NetworkSpec, kind: str, codec=None):
    """The `optimization.learner` for networks of `kind` ('advantage' or 'strategy'),
    reading memories stored by `codec` (default: float16 rows)."""
    opt = config.optimization
    if opt.learner not in LEARNERS:
        raise ValueError(f"optimization.learner must be one of {LEARNERS}, got {opt.learner!r}")
    sizes = dict(
        batch_size=opt[f"{kind}_batch_size"],
        num_updates=opt[f"{kind}_updates"],
        weighting=config.training_weighting.mode,
    )
    hyper = dict(
        learning_rate=opt.learning_rate, weight_decay=opt.weight_decay, grad_clip=opt.grad_clip
    )
    if opt.learner == "optax":
        return Learner(spec, kind=kind, optimizer=make_optimizer(**hyper), codec=codec, **sizes)
    if spec.head != "slot":
        raise ValueError(
            f"network.head={spec.head!r} is implemented by the optax learner only; set "
            "optimization.learner='optax'"
        )
    from lc_cfr.learn.torch_adapter import TrainerTorchLearner
    from lc_cfr.learn.torch_learner import TorchLearner  # torch is imported only if asked for

    return TrainerTorchLearner(
        TorchLearner(spec, kind=kind, **hyper, **sizes),
        device=config.run.device,
        use_amp=bool(config.run.use_amp),
        compile=bool(config.run.torch_compile),
        codec=codec,
    )


def _growing(add, codec):
    """`add` (reservoir_add or window_add) jitted for `codec`, with the memory first
    grown to hold the batch (`reservoir.reserve`); the old buffers are donated."""
    jitted = jax.jit(functools.partial(add, codec=codec), donate_argnums=0)

    def grow_and_add(memory, *args):
        return jitted(reservoir.reserve(memory, args[-1].shape[0]), *args)

    return grow_and_add


def _names(text: str, field: str, valid) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    bad = [name for name in names if name not in valid]
    if bad or not names:
        raise ValueError(f"{field}: unknown or missing names {bad or text!r}; valid: {list(valid)}")
    return names


def _evaluation_plan(config) -> dict:
    """The `evaluation` block as explicit, validated arguments of `lc_cfr.eval.evaluate`."""
    e = config.evaluation
    for field in ("eval_every", "extended_eval_every", "lanes", "exploitability_every"):
        if e[field] < 0:
            raise ValueError(f"evaluation.{field} must be >= 0, got {e[field]}")
    for field in ("games", "extended_games"):
        if e[field] < 2 or e[field] % 2:
            raise ValueError(f"evaluation.{field} must be even and >= 2 (mirrored deals)")
    if e.mode not in ("greedy", "sampled"):
        raise ValueError(f"evaluation.mode must be 'greedy' or 'sampled', got {e.mode!r}")
    return {
        "every": e.eval_every,
        "opponents": _names(e.opponents, "evaluation.opponents", BOT_NAMES),
        "games": e.games,
        "extended_every": e.extended_eval_every,
        "extended_opponents": _names(
            e.extended_opponents, "evaluation.extended_opponents", BOT_NAMES
        ),
        "extended_games": e.extended_games,
        "views": _names(e.views, "evaluation.views", POLICY_VIEWS),
        "mode": e.mode,
        "seed": e.seed,
        "lanes": e.lanes or None,
        "exploitability_every": e.exploitability_every,
    }


def chao_slot(count: int, k: int, weight: float, total: float, draw: float, pick: int):
    """The slot an offered item takes in Chao's weighted reservoir of size k, or None.

    Args:
      count: items held (< k: the item takes the next free slot).
      k: capacity.
      weight: the item's weight; total: the total weight offered, this item included.
      draw: uniform in [0, 1); pick: uniform in [0, k), the slot it would replace.
    """
    if count < k:
        return count
    return pick if draw < min(1.0, k * weight / total) else None


def _check_epsilon_schedule(config) -> None:
    """The `traversal.epsilon_*` schedule (checked before any backend starts)."""
    tr = config.traversal
    if not 0.0 < tr.epsilon_decay <= 1.0:
        raise ValueError(f"traversal.epsilon_decay must be in (0, 1], got {tr.epsilon_decay}")
    if tr.epsilon_decay_every < 1:
        raise ValueError(
            f"traversal.epsilon_decay_every must be >= 1, got {tr.epsilon_decay_every}"
        )
    if tr.epsilon_decay < 1.0 and not 0.0 < tr.epsilon_min <= tr.outcome_sampling_epsilon:
        raise ValueError(
            "traversal.epsilon_min must be in (0, traversal.outcome_sampling_epsilon], got "
            f"{tr.epsilon_min}"
        )
    if tr.epsilon_decay < 1.0 and tr.backend != "jax":
        raise ValueError(
            "traversal.epsilon_decay is implemented by the jax backend only "
            "(traversal.backend='jax')"
        )


def exploitability_evaluator(config, rules: Rules, spec: mlp.NetworkSpec):
    """The exact-exploitability evaluator of `evaluation.exploitability_every` (OpenSpiel)."""
    from lc_cfr.spiel import check_enumerable

    check_enumerable(rules, "evaluation.exploitability_every")
    try:
        from lc_cfr.spiel.exploitability import ExploitabilityEvaluator
    except ImportError as error:
        raise ValueError(
            "evaluation.exploitability_every needs OpenSpiel: pip install -e '.[openspiel]' "
            f"({error})"
        ) from error
    return ExploitabilityEvaluator(
        rules,
        spec,
        utility_scale=float(config.utility_scale),
        fallback=config.regret_matching.all_negative_fallback,
        floor=float(config.regret_matching.floor),
    )


def _flat_config(config) -> dict:
    out = {}

    def walk(prefix, node):
        for key, value in node.items():
            if isinstance(value, dict):
                walk(f"{prefix}{key}.", value)
            else:
                out[prefix + key] = value

    walk("", config.to_dict())
    return out


class Trainer:
    """Builds everything from the config once; `run` trains and checkpoints."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str | pathlib.Path):
        self.config = config
        self.workdir = pathlib.Path(workdir)
        self.rules = rules_from_config(config)
        self.spec = spec_from_config(config, self.rules)
        self.options = options_from_config(config)
        api.validate_options(self.options, self.rules)  # before the backend's own settings
        _check_epsilon_schedule(config)
        self.backend = make_backend(
            config.traversal.backend,
            rules=self.rules,
            spec=self.spec,
            options=self.options,
            lanes=lanes_from_config(config),
            workers=worker_settings_from_config(config),
        )
        opt = config.optimization
        check_weighting(config.training_weighting.mode)
        if opt.advantage_init not in ("scratch", "warm_start"):
            raise ValueError(
                "optimization.advantage_init must be 'scratch' or 'warm_start', "
                f"got {opt.advantage_init!r}"
            )
        self.non_finite = health.check_mode(opt.non_finite)
        if not isinstance(opt.advantage_epochs, (int, float)) or opt.advantage_epochs < 0:
            raise ValueError(
                f"optimization.advantage_epochs must be a number >= 0, got {opt.advantage_epochs!r}"
            )
        if opt.strategy_train_every < 1:
            raise ValueError("optimization.strategy_train_every must be >= 1")
        sp = config.self_play
        if sp.league_size < 1 or sp.snapshot_every < 1:
            raise ValueError("self_play.league_size and self_play.snapshot_every must be >= 1")
        self.codec = memory_codec.for_rules(self.rules, kind=config.memory.info_storage)
        self.advantage_learner, self.strategy_learner = (
            learner_from_config(config, self.spec, kind, codec=self.codec)
            for kind in ("advantage", "strategy")
        )
        for field in ("advantage_capacity", "strategy_capacity"):
            if config.memory[field] < 1:
                raise ValueError(f"memory.{field} must be >= 1, got {config.memory[field]}")
        initial_rows = config.memory.initial_rows
        if not isinstance(initial_rows, int) or isinstance(initial_rows, bool) or initial_rows < 0:
            raise ValueError(f"memory.initial_rows must be an int >= 0, got {initial_rows!r}")
        self._add = _growing(reservoir.reservoir_add, self.codec)
        self.value_learner = None
        if api.uses_value_network(self.options):
            if opt.learner != "optax":
                raise ValueError(
                    f"traversal.outcome_estimator={self.options.outcome_estimator!r} trains "
                    "its value network with optax only; set optimization.learner='optax'"
                )
            if config.memory.value_capacity < 1:
                raise ValueError(
                    f"memory.value_capacity must be >= 1, got {config.memory.value_capacity}"
                )
            self.value_spec = api.value_spec(self.rules, self.spec)
            self.value_codec = memory_codec.for_rules(
                self.rules,
                kind=config.memory.info_storage,
                extra_bits=self.value_spec.input_size - self.rules.encoding_size,
            )
            self.value_learner = Learner(
                self.value_spec,
                kind="advantage",  # masked MSE, the mask holding the sampled action only
                optimizer=make_optimizer(
                    learning_rate=opt.learning_rate,
                    weight_decay=opt.weight_decay,
                    grad_clip=opt.grad_clip,
                ),
                batch_size=opt.value_batch_size,
                num_updates=opt.value_updates,
                weighting="uniform",  # the window already holds recent samples only
                codec=self.value_codec,
            )
            self._window_add = _growing(reservoir.window_add, self.value_codec)
        self.evaluation = _evaluation_plan(config)
        if config.sd_cfr.snapshots < 0:
            raise ValueError(f"sd_cfr.snapshots must be >= 0, got {config.sd_cfr.snapshots}")
        if SD_CFR in self.evaluation["views"] and not config.sd_cfr.snapshots:
            raise ValueError("evaluation.views names sd_cfr but sd_cfr.snapshots is 0")
        self.exploitability = None
        if self.evaluation["exploitability_every"]:
            self.exploitability = exploitability_evaluator(config, self.rules, self.spec)
        self.base_key = jax.random.PRNGKey(config.seed)
        self._checkpoints: checkpoint.CheckpointStore | None = None  # opened by run/restore

    # ----- randomness: a pure function of (seed, iteration, player, purpose) -----------

    def key(self, iteration: int, owner: int, use: KeyUse) -> jax.Array:
        """The key of `owner`'s stream (a KeyOwner, or a player) for `use` at `iteration`."""
        k = jax.random.fold_in(self.base_key, iteration)
        return jax.random.fold_in(jax.random.fold_in(k, KeyOwner(owner)), use)

    def epsilon(self, t: int) -> float | None:
        """Outcome sampling's exploration at iteration t: outcome_sampling_epsilon times
        epsilon_decay every epsilon_decay_every iterations, not below epsilon_min (None
        without a schedule: the options' value)."""
        tr = self.config.traversal
        if tr.epsilon_decay == 1.0:
            return None
        return max(
            tr.epsilon_min,
            tr.outcome_sampling_epsilon * tr.epsilon_decay ** ((t - 1) // tr.epsilon_decay_every),
        )

    # ----- state -------------------------------------------------------------------

    def initial_state(self) -> TrainState:
        adv = [self.advantage_learner.init(self.key(0, p, KeyUse.INIT)) for p in (0, 1)]
        strategy_params, strategy_opt = self.strategy_learner.init(
            self.key(0, KeyOwner.STRATEGY, KeyUse.INIT)
        )
        memory = lambda capacity: reservoir.reservoir_init(  # noqa: E731
            capacity=capacity,
            num_actions=self.rules.num_actions,
            codec=self.codec,
            rows=self._rows_for(0, capacity),
        )
        k = self.config.self_play.league_size
        league = jax.tree.map(lambda x: jnp.stack([x] * k), strategy_params)
        return TrainState(
            iteration=0,
            advantage_params=(adv[0][0], adv[1][0]),
            advantage_opt=(adv[0][1], adv[1][1]),
            strategy_params=strategy_params,
            strategy_opt=strategy_opt,
            advantage_memory=(
                memory(self.config.memory.advantage_capacity),
                memory(self.config.memory.advantage_capacity),
            ),
            strategy_memory=memory(self.config.memory.strategy_capacity),
            league=league,
            league_added=1,
            **self._initial_value_state(),
            **self._initial_snapshots(adv[0][0], adv[1][0]),
        )

    def _initial_snapshots(self, params0, params1) -> dict:
        k = self.config.sd_cfr.snapshots
        if not k:
            return {}
        stack = lambda p: jax.tree.map(lambda x: jnp.zeros((k,) + x.shape, x.dtype), p)  # noqa: E731
        return dict(sd_advantage=(stack(params0), stack(params1)), sd_count=0, sd_weight=0.0)

    def _snapshot(self, state: TrainState, t: int, params: tuple) -> dict:
        """Offers iteration t's advantage networks to the SD-CFR snapshots.

        Chao's weighted reservoir sampler (1982): once the K slots are full, iteration t
        enters with probability min(1, K w_t / W_t), W_t the total weight so far, and
        replaces a uniformly chosen snapshot. An iteration s is then kept with
        probability K w_s / W_t (exactly, for the iterations after the first K; the
        first K are over-represented while they are few against W_t), so drawing a
        kept snapshot uniformly draws iteration s with probability proportional to
        its weight w_s (the training weighting's: t, t^2 or 1).
        """
        if state.sd_advantage is None:
            return {}
        k = self.config.sd_cfr.snapshots
        weight = {"lcfr": float(t), "quadratic": float(t) ** 2}.get(
            self.config.training_weighting.mode, 1.0
        )
        total = state.sd_weight + weight
        draw = float(jax.random.uniform(self.key(t, KeyOwner.SD_CFR, KeyUse.SNAPSHOT_DRAW)))
        pick = int(jax.random.randint(self.key(t, KeyOwner.SD_CFR, KeyUse.SNAPSHOT_PICK), (), 0, k))
        slot = chao_slot(state.sd_count, k, weight, total, draw, pick)
        stacks = state.sd_advantage
        if slot is not None:
            stacks = tuple(
                jax.tree.map(lambda s, x: s.at[slot].set(x), stack, p)
                for stack, p in zip(stacks, params, strict=True)
            )
        return dict(sd_advantage=stacks, sd_count=min(state.sd_count + 1, k), sd_weight=total)

    def _initial_value_state(self) -> dict:
        if self.value_learner is None:
            return {}
        params, opt = self.value_learner.init(self.key(0, KeyOwner.VALUE, KeyUse.INIT))
        capacity = self.config.memory.value_capacity
        memory = reservoir.reservoir_init(
            capacity=capacity,
            num_actions=self.rules.num_actions,
            codec=self.value_codec,
            rows=self._rows_for(0, capacity),
        )
        return dict(value_params=params, value_opt=opt, value_memory=memory)

    def _rows_for(self, size: int, capacity: int) -> int:
        """Rows to allocate for `size` filled ones: memory.initial_rows doubled as often as
        needed (the shapes `reservoir.reserve` grows through), at most the capacity."""
        return reservoir.doubled_rows(self.config.memory.initial_rows or capacity, size, capacity)

    def networks(self, state: TrainState) -> api.Networks:
        k = self.config.self_play.league_size
        return api.Networks(
            advantage=state.advantage_params,
            strategy=state.strategy_params,
            league=state.league,
            league_count=jnp.int32(min(state.league_added, k)),
            value=state.value_params,
        )

    # ----- one iteration -----------------------------------------------------------

    def iteration(self, state: TrainState) -> tuple[TrainState, dict]:
        t = state.iteration + 1
        timing = dict.fromkeys(
            ["traversal_seconds", "memory_add_seconds", "advantage_train_seconds"], 0.0
        )
        row: dict = {"iteration": t, "health/skipped_updates": 0, "health/non_finite_samples": 0}
        totals: dict = {}
        target_totals: dict = {}
        adv_params, adv_opt = list(state.advantage_params), list(state.advantage_opt)
        adv_memory, strategy_memory = list(state.advantage_memory), state.strategy_memory
        value_memory = state.value_memory
        for p in (0, 1):
            start = time.perf_counter()
            networks = self.networks(state._replace(advantage_params=tuple(adv_params)))
            samples, stats = self.backend.traverse(
                networks,
                seed=self.config.seed,
                iteration=t,
                traverser=p,
                epsilon=self.epsilon(t),
            )
            jax.block_until_ready(samples)
            timing["traversal_seconds"] += time.perf_counter() - start
            samples = self._finite_samples(samples, t, p, row)
            stats["advantage_samples"] = int(jnp.sum(samples.advantage_valid))
            for name, value in stats.items():
                merge = max if name.endswith("_max") else lambda a, b: a + b
                totals[name] = merge(totals.get(name, 0), value)
            column = anatomy.turn_column(self.rules)
            shares = anatomy.target_anatomy(
                self.rules,
                *jax.device_get(
                    (
                        samples.advantage_info[:, column],
                        samples.advantage_mask,
                        samples.advantage_target,
                        samples.advantage_valid,
                    )
                ),
            )
            for name, value in shares.items():
                target_totals[name] = target_totals.get(name, 0.0) + value

            if p == 0 and self._checkpoints is not None:
                # the last save may still be reading the memories this add donates
                start = time.perf_counter()
                self._checkpoints.wait()
                row["checkpoint_wait_seconds"] = time.perf_counter() - start
            start = time.perf_counter()
            adv_memory[p] = self._add(
                adv_memory[p],
                self.key(t, p, KeyUse.ADVANTAGE_ADD),
                samples.advantage_info,
                samples.advantage_mask,
                samples.advantage_target,
                t,
                samples.advantage_valid,
            )
            strategy_memory = self._add(
                strategy_memory,
                self.key(t, p, KeyUse.STRATEGY_ADD),
                samples.strategy_info,
                samples.strategy_mask,
                samples.strategy_policy,
                t,
                samples.strategy_valid,
            )
            if value_memory is not None:
                value_memory = self._window_add(
                    value_memory,
                    samples.value_info,
                    samples.value_mask,
                    samples.value_target,
                    t,
                    samples.value_valid,
                )
            jax.block_until_ready((adv_memory[p], strategy_memory))
            timing["memory_add_seconds"] += time.perf_counter() - start

            start = time.perf_counter()
            if self.config.optimization.advantage_init == "scratch":
                adv_params[p], adv_opt[p] = self.advantage_learner.init(
                    self.key(t, p, KeyUse.REINIT)
                )
            updates = learn_api.updates_for(
                int(adv_memory[p].size),
                floor=self.advantage_learner.num_updates,
                epochs=float(self.config.optimization.advantage_epochs),
                batch_size=self.advantage_learner.batch_size,
            )
            row[f"optimization/advantage_updates_p{p}"] = updates
            adv_params[p], adv_opt[p], losses = self._checked(
                f"advantage network of player {p}",
                t,
                learn_api.train_in_chunks(
                    self.advantage_learner,
                    adv_params[p],
                    adv_opt[p],
                    adv_memory[p],
                    self.key(t, p, KeyUse.TRAIN),
                    updates,
                ),
                (state.advantage_params[p], state.advantage_opt[p]),
                row,
            )
            jax.block_until_ready(adv_params[p])
            timing["advantage_train_seconds"] += time.perf_counter() - start
            row[f"loss/advantage_p{p}"] = float(losses["loss_last"])
            row[f"loss/advantage_p{p}_first"] = float(losses["loss_first"])
            row[f"memory/advantage_p{p}_fill"] = int(adv_memory[p].size) / reservoir.capacity_of(
                adv_memory[p]
            )
            row[f"memory/advantage_p{p}_seen"] = int(adv_memory[p].seen)

        start = time.perf_counter()
        strategy_params, strategy_opt = state.strategy_params, state.strategy_opt
        if t % self.config.optimization.strategy_train_every == 0:
            strategy_params, strategy_opt, losses = self._checked(
                "average-strategy network",
                t,
                self.strategy_learner.train(
                    strategy_params,
                    strategy_opt,
                    strategy_memory,
                    self.key(t, KeyOwner.STRATEGY, KeyUse.TRAIN),
                ),
                (strategy_params, strategy_opt),
                row,
            )
            jax.block_until_ready(strategy_params)
            row["loss/strategy"] = float(losses["loss_last"])
            row["loss/strategy_first"] = float(losses["loss_first"])
        timing["strategy_train_seconds"] = time.perf_counter() - start
        row["memory/strategy_fill"] = int(strategy_memory.size) / reservoir.capacity_of(
            strategy_memory
        )
        row["memory/strategy_seen"] = int(strategy_memory.seen)
        memories = (*adv_memory, strategy_memory, value_memory)
        row["memory/bytes"] = sum(x.nbytes for m in memories if m is not None for x in m)

        value_params, value_opt = state.value_params, state.value_opt
        if self.value_learner is not None:
            start = time.perf_counter()
            # warm-started: the value of the current policies moves a little each iteration
            value_params, value_opt, losses = self._checked(
                "value network",
                t,
                self.value_learner.train(
                    value_params, value_opt, value_memory, self.key(t, KeyOwner.VALUE, KeyUse.TRAIN)
                ),
                (value_params, value_opt),
                row,
            )
            jax.block_until_ready(value_params)
            row["value_train_seconds"] = time.perf_counter() - start
            row["loss/value"] = float(losses["loss_last"])
            row["loss/value_first"] = float(losses["loss_first"])
            row["memory/value_fill"] = int(value_memory.size) / reservoir.capacity_of(value_memory)

        league, added = state.league, state.league_added
        if t % self.config.self_play.snapshot_every == 0:
            slot = added % self.config.self_play.league_size
            league = jax.tree.map(lambda s, x: s.at[slot].set(x), league, strategy_params)
            added += 1

        for name, value in totals.items():
            row[f"traversal/{name}"] = value
        row["traversal/realised_batch_size"] = totals["policy_calls"] / max(
            totals["forward_batches"], 1
        )
        # outcome sampling: the share of advantage targets whose value hit value_clip
        row["traversal/clipped_value_fraction"] = totals["clipped_values"] / max(
            totals["advantage_samples"], 1
        )
        row.update(anatomy.merge(target_totals))
        paths = totals["terminals"] + totals["truncations"] + totals["cutoffs"]
        row["traversal/mean_endpoint_depth"] = totals["endpoint_depth_sum"] / max(paths, 1)
        row["traversal/nodes_per_second"] = totals["nodes"] / max(timing["traversal_seconds"], 1e-9)
        row.update(timing)
        # Batches are gathered inside the jitted training scan: no host-side tensor building.
        row["batch_tensor_seconds"] = 0.0
        new_state = TrainState(
            iteration=t,
            advantage_params=tuple(adv_params),
            advantage_opt=tuple(adv_opt),
            strategy_params=strategy_params,
            strategy_opt=strategy_opt,
            advantage_memory=tuple(adv_memory),
            strategy_memory=strategy_memory,
            league=league,
            league_added=added,
            value_params=value_params,
            value_opt=value_opt,
            value_memory=value_memory,
        )
        new_state = new_state._replace(**self._snapshot(state, t, tuple(adv_params)))
        start = time.perf_counter()
        row.update(self.evaluate(new_state))
        row["evaluation_seconds"] = time.perf_counter() - start
        return new_state, row

    # ----- health: nothing non-finite is learnt from, kept or saved -----------------

    def _finite_samples(self, samples: api.Samples, t: int, p: int, row: dict) -> api.Samples:
        """Samples with non-finite targets dropped (`skip`) or refused (`stop`)."""
        kinds = [
            ("advantage", samples.advantage_target, samples.advantage_valid),
            ("strategy", samples.strategy_policy, samples.strategy_valid),
        ]
        if samples.value_target is not None:
            kinds.append(("value", samples.value_target, samples.value_valid))
        kept = {}
        for kind, rows, valid in kinds:
            ok = health.finite_rows(rows)
            bad = int(jnp.sum(valid & ~ok))
            if bad and self.non_finite == "stop":
                raise health.NonFiniteError(
                    f"iteration {t}: {bad} {kind} samples of player {p}'s traversals have "
                    f"non-finite targets; stopped before saving ({self._latest_note()}); set "
                    "optimization.non_finite='skip' to drop such samples"
                )
            row["health/non_finite_samples"] += bad
            kept[f"{kind}_valid"] = valid & ok
        return samples._replace(**kept)

    def _checked(self, what: str, t: int, result, previous, row: dict):
        """`result` = (params, opt_state, losses) of a training call if all finite; else
        the run stops (`stop`) or the update is dropped for `previous` (`skip`)."""
        params, opt_state, losses = result
        if health.all_finite((params, losses)):
            return result
        if self.non_finite == "stop":
            raise health.NonFiniteError(
                f"iteration {t}: the {what} went non-finite in training (last loss "
                f"{float(losses['loss_last'])}); stopped before saving "
                f"({self._latest_note()}); lower optimization.learning_rate, or set "
                "optimization.non_finite='skip' to drop such updates"
            )
        row["health/skipped_updates"] += 1
        return (*previous, losses)

    def _latest_note(self) -> str:
        latest = self._checkpoints.latest() if self._checkpoints is not None else None
        if latest is None:
            return "no checkpoint written yet"
        return f"{self._checkpoints.path(latest)} is the latest state"

    def evaluate(self, state: TrainState) -> dict:
        """Mirrored evaluation (and exact exploitability) on the `evaluation` schedules."""
        row = self.evaluate_bots(state)
        every = self.evaluation["exploitability_every"]
        if every and state.iteration % every == 0:
            figures = self.exploitability.of_views(self.policy_views(state))
            for view, values in figures.items():
                row[f"exploitability/{view}"] = values["exploitability"]
        return row

    def policy_views(self, state: TrainState) -> dict:
        """{view: its parameters} of the evaluation's `views`."""
        views = {"average_strategy": state.strategy_params, "current": state.advantage_params}
        if state.sd_advantage is not None:
            views[SD_CFR] = Snapshots(state.sd_advantage, state.sd_count)
        return {view: views[view] for view in self.evaluation["views"]}

    def evaluate_bots(self, state: TrainState) -> dict:
        """Mirrored evaluation against bots on its schedule ({} when off)."""
        plan = self.evaluation
        t = state.iteration
        if plan["extended_every"] and t % plan["extended_every"] == 0:
            opponents, games = plan["extended_opponents"], plan["extended_games"]
        elif plan["every"] and t % plan["every"] == 0:
            opponents, games = plan["opponents"], plan["games"]
        else:
            return {}
        return evaluate(
            self.rules,
            self.spec,
            self.policy_views(state),
            opponents=opponents,
            games=games,
            view_modes=plan["mode"],
            seed=plan["seed"],
            fallback=self.config.regret_matching.all_negative_fallback,
            lanes=plan["lanes"],
        )

    # ----- checkpoints -------------------------------------------------------------

    def _arrays(self, state: TrainState) -> tuple[dict, dict]:
        """(networks, rest): the flat arrays of the checkpoint's two items; evaluation
        and play read only the first."""
        networks, arrays = {}, {}
        trees = {
            "advantage_params": state.advantage_params,
            "strategy_params": state.strategy_params,
            "advantage_opt": state.advantage_opt,
            "strategy_opt": state.strategy_opt,
            "league": state.league,
        }
        if state.value_params is not None:
            trees.update(value_params=state.value_params, value_opt=state.value_opt)
        if state.sd_advantage is not None:
            trees["sd_advantage"] = state.sd_advantage
        for name, tree in trees.items():
            target = networks if name in NETWORK_ITEMS else arrays
            for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
                target[name + jax.tree_util.keystr(path)] = np.asarray(leaf)
        memories = {
            "advantage_memory_0": state.advantage_memory[0],
            "advantage_memory_1": state.advantage_memory[1],
            "strategy_memory": state.strategy_memory,
        }
        if state.value_memory is not None:
            memories["value_memory"] = state.value_memory
        for name, memory in memories.items():
            for key, value in reservoir.to_numpy(memory).items():
                arrays[f"{name}/{key}"] = np.asarray(value)
        # The only RNG state: every key is fold_in(base_key, iteration, player, purpose).
        arrays["rng/base_key"] = np.asarray(jax.random.key_data(self.base_key))
        return networks, arrays

    def _from_arrays(self, arrays: dict, meta: dict) -> TrainState:
        template = self.initial_state()

        def restore(name, tree):
            return read_tree(arrays, name, tree)

        def memory(name):
            prefix = name + "/"
            rows = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            codec = self.value_codec if name == "value_memory" else self.codec
            rows = self._stored(self._widen(rows), codec)
            size, capacity = int(rows.get("size", 0)), int(rows.get("capacity", 1))
            return reservoir.from_numpy(rows, codec=codec, rows=self._rows_for(size, capacity))

        saved_key = arrays.get("rng/base_key")
        if saved_key is None or not np.array_equal(
            saved_key, np.asarray(jax.random.key_data(self.base_key))
        ):
            raise ValueError("the checkpoint's RNG state does not match config.seed")
        return TrainState(
            iteration=meta["iteration"],
            advantage_params=restore("advantage_params", template.advantage_params),
            advantage_opt=restore("advantage_opt", template.advantage_opt),
            strategy_params=restore("strategy_params", template.strategy_params),
            strategy_opt=restore("strategy_opt", template.strategy_opt),
            advantage_memory=(memory("advantage_memory_0"), memory("advantage_memory_1")),
            strategy_memory=memory("strategy_memory"),
            league=restore("league", template.league),
            league_added=meta["league_added"],
            **(
                dict(
                    value_params=restore("value_params", template.value_params),
                    value_opt=restore("value_opt", template.value_opt),
                    value_memory=memory("value_memory"),
                )
                if template.value_params is not None
                else {}
            ),
            **(
                dict(
                    sd_advantage=restore("sd_advantage", template.sd_advantage),
                    sd_count=meta["sd_count"],
                    sd_weight=meta["sd_weight"],
                )
                if template.sd_advantage is not None
                else {}
            ),
        )

    def _widen(self, rows: dict) -> dict:
        """Memories saved before the encoding's own_known block (N columns at 7N) gain
        zero columns there; a network with own_known_input=False never reads them."""
        n = self.rules.n_cards
        info = rows.get("info")
        wanted = (self.rules.encoding_size, engine.history_size(self.rules))
        if info is None or info.dtype != np.float16:  # packed rows came after own_known
            return rows
        if info.shape[1] in wanted or info.shape[1] + n not in wanted:
            return rows
        if self.spec.own_known_input:
            raise ValueError(
                "the checkpoint's memories predate the encoding's own_known block; resume "
                "with network.own_known_input=False (the saved config's default)"
            )
        zeros = np.zeros((info.shape[0], n), info.dtype)
        return {**rows, "info": np.concatenate([info[:, : 7 * n], zeros, info[:, 7 * n :]], 1)}

    def _stored(self, rows: dict, codec) -> dict:
        """Memory rows saved in another storage than `codec`'s (memory.info_storage
        changed, or float16 rows from before packing) in `codec`'s: the decoded values
        are the same, so the run resumes exactly."""
        info = rows.get("info")
        if info is None or (info.dtype == codec.dtype and info.shape[1] == codec.width):
            return rows
        if info.dtype == np.float16:
            values = info.astype(np.float32)
        else:
            packed = memory_codec.for_rules(
                self.rules, kind="packed", extra_bits=codec.size - self.rules.encoding_size
            )
            values = packed.decode_numpy(info)
        return {**rows, "info": codec.encode_numpy(values)}

    def save(self, state: TrainState, row: dict | None, on_saved=None) -> None:
        if not distributed.is_writer():
            return  # process 0 saves the state, which every process holds alike
        networks = (state.advantage_params, state.strategy_params, state.value_params)
        if not health.all_finite(networks):  # the checks above make this unreachable
            raise health.NonFiniteError(
                f"refusing to checkpoint non-finite networks at iteration {state.iteration}"
            )
        meta = {"league_added": state.league_added, "metrics": row, "seed": self.config.seed}
        if state.sd_advantage is not None:
            meta.update(sd_count=state.sd_count, sd_weight=state.sd_weight)
        self._open_checkpoints().save(state.iteration, *self._arrays(state), meta, on_saved)

    def _open_checkpoints(self) -> checkpoint.CheckpointStore:
        """The run's checkpoint store, opened for writing on first use."""
        if self._checkpoints is None:
            self._checkpoints = distributed.checkpoint_store(
                self.workdir / "checkpoints",
                keep_every=self.config.checkpoint.save_every,
                asynchronous=bool(self.config.checkpoint.asynchronous),
            )
        return self._checkpoints

    def restore(self, iteration: int | None = None) -> tuple[TrainState, dict | None] | None:
        """The state of checkpoint `iteration`, or None without one. With `iteration`
        None: the latest checkpoint, or, when its files are damaged, the newest older one
        that reads whole (with a warning naming the damaged file). Outside `run` the
        checkpoints are opened read-only."""
        if self._checkpoints is not None:
            return self._restore_from(self._checkpoints, iteration)
        store = checkpoint.CheckpointStore(self.workdir / "checkpoints", read_only=True)
        try:
            return self._restore_from(store, iteration)
        finally:
            store.close()

    def _restore_from(self, store: checkpoint.CheckpointStore, iteration: int | None):
        steps = [iteration] if iteration is not None else list(reversed(store.steps()))
        damaged = []
        for step in steps:
            try:
                arrays, meta = store.load(step)
            except checkpoint.DamagedCheckpoint as error:
                if iteration is not None:
                    raise
                logging.warning("%s; falling back to the checkpoint before it", error)
                damaged.append(str(error))
                continue
            return self._from_arrays(arrays, meta), meta.get("metrics")
        if damaged:
            raise checkpoint.DamagedCheckpoint(
                f"no checkpoint in {store.directory} reads whole: " + "; ".join(damaged)
            )
        return None

    def _check_resumable(self) -> None:
        saved_path = self.workdir / "config.json"
        if not saved_path.exists():
            return
        saved = _flat_config(read_run_config(saved_path))
        current = _flat_config(self.config)
        inert = RESUMABLE_CHANGES
        if not api.uses_value_network(self.options) and (
            saved.get("traversal.outcome_estimator") == "importance"
        ):
            inert = inert + VALUE_NETWORK_FIELDS
        changed = sorted(
            key
            for key in set(saved) | set(current)
            if saved.get(key) != current.get(key) and not key.startswith(inert)
        )
        if changed:
            raise ValueError(
                f"{self.workdir} holds a run with another config; differing fields: {changed}. "
                "Use a new --workdir, or change only run.*, checkpoint.*, logging.* or "
                "evaluation.*"
            )

    # ----- the loop ----------------------------------------------------------------

    def run(self) -> TrainState:
        """Trains to run.max_iterations (or run.max_minutes), resuming the workdir's run;
        returns once the last checkpoint is on disk."""
        try:
            return self._run()
        finally:
            if self._checkpoints is not None:
                self._checkpoints.close()  # the last (asynchronous) save lands here
                self._checkpoints = None

    def _run(self) -> TrainState:
        writer = distributed.is_writer()  # with several processes, process 0 writes alone
        restored = None
        if writer:
            self.workdir.mkdir(parents=True, exist_ok=True)
            self._check_resumable()
            checkpoint.atomic_write_text(
                self.workdir / "config.json", self.config.to_json(indent=1)
            )
            self._open_checkpoints()
            restored = self.restore()
            if restored is None and not self.config.run.restart:
                _refuse_to_restart(self.workdir)
        restored = distributed.share_restored(restored, self.initial_state)
        state, last_row = restored if restored else (self.initial_state(), None)
        # the resume record (docs/reliability.md): the step this process goes on from
        if restored:
            where = self.workdir / "checkpoints" if writer else "process 0's state"
            logging.info("resuming from checkpoint %d (%s)", state.iteration, where)
        else:
            logging.info("no checkpoint: starting at iteration 0")
        metrics = (
            MetricsWriter(
                self.workdir,
                tensorboard=self.config.logging.tensorboard,
                resume_after=state.iteration,
            )
            if writer
            else distributed.NullMetrics()
        )
        if last_row is not None and not _has_row(metrics.path, state.iteration):
            metrics.write(last_row)  # the checkpoint landed but its metrics row did not
        run = self.config.run
        progress = Progress(
            total=run.max_iterations, initial=state.iteration, enabled=run.progress_bar and writer
        )
        started = time.perf_counter()
        try:
            while state.iteration < run.max_iterations:
                iteration_start = time.perf_counter()
                state, row = self.iteration(state)
                start = time.perf_counter()
                save_now = self.config.checkpoint.save_latest or (
                    self.config.checkpoint.save_every > 0
                    and state.iteration % self.config.checkpoint.save_every == 0
                )
                final = state.iteration >= run.max_iterations
                row["checkpoint_seconds"] = 0.0
                row["iteration_seconds"] = time.perf_counter() - iteration_start
                if save_now or final:
                    # the row is written once the step is on disk, so that metrics.jsonl
                    # never holds an iteration that a kill could leave without checkpoint
                    self.save(state, row, on_saved=functools.partial(metrics.write, row))
                    row["checkpoint_seconds"] = time.perf_counter() - start
                    row["iteration_seconds"] = time.perf_counter() - iteration_start
                else:
                    metrics.write(row)
                progress.update(row)
                if run.max_minutes > 0 and time.perf_counter() - started > 60 * run.max_minutes:
                    break
            if writer:
                store = self._open_checkpoints()
                store.wait()  # a save still in flight is not listed yet
                latest = store.latest()
                if latest is None or latest < state.iteration:
                    self.save(state, None)  # stopped by max_minutes: never lose the progress
        finally:
            if self._checkpoints is not None:
                # the last saved iteration's row, once its save lands; reached with a
                # save still pending only while another error propagates, which wins
                with contextlib.suppress(checkpoint.CheckpointWriteError):
                    self._checkpoints.wait()
            progress.close()
            metrics.close()
            self.backend.close()  # worker processes and the inference server stop here
        return state


def read_tree(arrays, name: str, template):
    """The pytree shaped like `template` whose leaves are arrays[name + path]."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(template)
    values = []
    for path, leaf in leaves:
        key = name + jax.tree_util.keystr(path)
        if key not in arrays or arrays[key].shape != np.shape(leaf):
            raise checkpoint.CheckpointMismatch(
                f"checkpoint field {key} is missing or not of shape {np.shape(leaf)} "
                "(does config.json match the checkpoint?)"
            )
        values.append(jnp.asarray(arrays[key], dtype=leaf.dtype))
    return jax.tree_util.tree_unflatten(jax.tree.structure(template), values)


def _refuse_to_restart(workdir: pathlib.Path) -> None:
    """A run directory with a history but no checkpoint is not silently started over."""
    metrics = workdir / "metrics.jsonl"
    rows = metrics.read_text().count("\n") if metrics.exists() else 0
    if rows:
        raise ValueError(
            f"{workdir} holds a run ({metrics} has {rows} rows) but no checkpoint to resume "
            "from; set run.restart=True to train it again from scratch (its history is "
            "overwritten), or use another --workdir"
        )


def _has_row(path: pathlib.Path, iteration: int) -> bool:
    if iteration == 0 or not path.exists():
        return iteration == 0
    rows = [line for line in path.read_text().splitlines() if line.strip()]
    return any(json.loads(line)["iteration"] == iteration for line in rows)


def default_workdir() -> pathlib.Path:
    return pathlib.Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
