"""The one reader of the config: `build(config)` turns it into typed components.

Every cross-field check of the config happens here, before any backend starts (a torch
backend starts worker processes), and every error names the config field. The loop
(`lc_cfr.train.trainer`) and the tools that read a saved run (`saved_networks`,
`evaluate`, the benchmarks) take what they need from here; nothing else reads the
config's fields. To add a config field: its default and comment in configs/default.py,
its reading and checks here, and, when runs saved before it must resume unchanged, its
old meaning in `run_format.ADDED_FIELDS`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from lc_cfr.bots import BOT_NAMES
from lc_cfr.eval import POLICY_VIEWS, SD_CFR
from lc_cfr.eval.api import parse_names
from lc_cfr.game.rules import Rules
from lc_cfr.learn import Learner, make_optimizer
from lc_cfr.learn.learner import average_weighting, check_lr_schedule, check_weighting
from lc_cfr.memory import codec as memory_codec
from lc_cfr.nets import mlp
from lc_cfr.train import health
from lc_cfr.train.run_format import Codecs
from lc_cfr.traversal import api
from lc_cfr.traversal.torch import WorkerSettings

LEARNERS = ("optax", "torch")
NETWORK_INITS = ("scratch", "warm_start")  # optimization.advantage_init, strategy_init
# optimization.strategy_train_when: every strategy_train_every iterations, or only at the
# iterations whose strategy network is read (Trainer.strategy_read_at)
STRATEGY_TRAIN_WHEN = ("every", "read")
EVALUATION_MODES = ("greedy", "sampled")


class EpsilonSchedule(NamedTuple):
    """`traversal.epsilon_*`: outcome sampling's exploration by iteration."""

    start: float  # traversal.outcome_sampling_epsilon
    decay: float  # traversal.epsilon_decay, in (0, 1]; 1 = no schedule
    every: int  # traversal.epsilon_decay_every
    minimum: float  # traversal.epsilon_min

    def at(self, t: int) -> float | None:
        """The exploration of iteration t: start times decay every `every` iterations,
        not below `minimum` (None without a schedule: the options' value)."""
        if self.decay == 1.0:
            return None
        return max(self.minimum, self.start * self.decay ** ((t - 1) // self.every))


class EvaluationPlan(NamedTuple):
    """The `evaluation` block as explicit arguments of `lc_cfr.eval.evaluate`."""

    every: int  # evaluation.eval_every; 0 = never
    opponents: tuple[str, ...]
    games: int  # even: every deal is played mirrored
    extended_every: int  # evaluation.extended_eval_every; 0 = never
    extended_opponents: tuple[str, ...]
    extended_games: int
    views: tuple[str, ...]  # of lc_cfr.eval.POLICY_VIEWS
    mode: str  # greedy | sampled
    seed: int
    lanes: int | None  # None: lc_cfr.eval's default
    exploitability_every: int  # 0 = never


class Training(NamedTuple):
    """What an iteration does beyond the traversal (optimization, memory, self_play and
    sd_cfr blocks)."""

    seed: int
    advantage_init: str  # optimization.advantage_init: scratch | warm_start
    advantage_epochs: float  # optimization.advantage_epochs (updates floor: the learner's)
    advantage_holdout: float  # optimization.advantage_holdout: share kept out; 0 = none
    strategy_init: str  # optimization.strategy_init: scratch | warm_start
    strategy_train_every: int
    strategy_train_when: str  # optimization.strategy_train_when: every | read
    non_finite: str  # optimization.non_finite: stop | skip
    average_weighting: str  # training_weighting.average_mode resolved: SD-CFR's snapshots
    advantage_capacity: int  # memory.*_capacity: rows each memory keeps
    strategy_capacity: int
    value_capacity: int
    initial_rows: int  # memory.initial_rows; 0 = the whole capacity up front
    league_size: int  # self_play.league_size
    snapshot_every: int  # self_play.snapshot_every
    sd_cfr_snapshots: int  # sd_cfr.snapshots; 0 = none kept
    epsilon: EpsilonSchedule


class RunPlan(NamedTuple):
    """How long the loop runs, and when it saves and logs (run, checkpoint, logging)."""

    max_iterations: int
    max_minutes: float  # 0 = no limit
    restart: bool  # run.restart: train a run directory with history but no checkpoint anew
    progress_bar: bool
    save_latest: bool  # checkpoint.save_latest: after every iteration
    save_every: int  # checkpoint.save_every: keep every k-th; 0 = none kept
    asynchronous: bool
    tensorboard: bool


class ValueNetwork(NamedTuple):
    """The history value network of the outcome estimators that read it."""

    spec: mlp.NetworkSpec
    codec: Any  # its window's rows carry the history bits too
    learner: Learner


class Components(NamedTuple):
    """Everything the loop is built from, read from the config once."""

    rules: Rules
    spec: mlp.NetworkSpec  # the advantage and strategy networks'
    options: api.TraversalOptions
    backend: str  # traversal.backend
    lanes: int
    schedule: str  # traversal.lockstep_schedule
    workers: WorkerSettings
    codec: Any  # how the advantage and strategy memories store rows
    advantage_learner: Any
    strategy_learner: Any
    value: ValueNetwork | None  # None: no estimator reads a value network
    evaluation: EvaluationPlan
    exploitability: Any  # the exact evaluator, or None (evaluation.exploitability_every 0)
    training: Training
    run: RunPlan

    @property
    def codecs(self) -> Codecs:
        return Codecs(self.codec, self.value.codec if self.value is not None else None)


def build(config) -> Components:
    """The components of `config`, every field checked (ValueError naming the field)."""
    rules = rules_from_config(config)
    spec = spec_from_config(config, rules)
    options = options_from_config(config)
    api.validate_options(options, rules)  # before the backend's own settings
    training = training_from_config(config)
    if training.epsilon.decay < 1.0 and config.traversal.backend != "jax":
        raise ValueError(
            "traversal.epsilon_decay is implemented by the jax backend only "
            "(traversal.backend='jax')"
        )
    codec = memory_codec.for_rules(rules, kind=config.memory.info_storage)
    evaluation = evaluation_plan(config)
    if SD_CFR in evaluation.views and not training.sd_cfr_snapshots:
        raise ValueError("evaluation.views names sd_cfr but sd_cfr.snapshots is 0")
    if evaluation.exploitability_every and options.draws != "any":
        raise ValueError(
            f"evaluation.exploitability_every with draws={options.draws!r}: the OpenSpiel "
            "policy of the exploitability computation plays every legal draw (draws='any')"
        )
    return Components(
        rules=rules,
        spec=spec,
        options=options,
        backend=config.traversal.backend,
        lanes=lanes_from_config(config),
        schedule=schedule_from_config(config),
        workers=worker_settings_from_config(config),
        codec=codec,
        advantage_learner=learner_from_config(config, spec, "advantage", codec=codec),
        strategy_learner=learner_from_config(config, spec, "strategy", codec=codec),
        value=value_network_from_config(config, rules, spec, options),
        evaluation=evaluation,
        exploitability=(
            exploitability_evaluator(config, rules, spec)
            if evaluation.exploitability_every
            else None
        ),
        training=training,
        run=run_plan_from_config(config),
    )


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
        strategic_features=config.network.strategic_features,
        blocking_features=config.network.blocking_features,
        rules=rules,
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
        traversals_per_player=t.traversals_per_player,
        sampling_mode=t.sampling_mode,
        outcome_sampling_epsilon=float(t.outcome_sampling_epsilon),
        outcome_sampling_value_clip=float(t.outcome_sampling_value_clip),
        outcome_unsampled_regret=t.outcome_unsampled_regret,
        max_depth=t.max_depth,
        cutoff_turns=t.cutoff_turns,
        cutoff_value_mode=t.cutoff_value_mode,
        cutoff_rollouts=t.cutoff_rollouts,
        cutoff_rollout_policy=t.cutoff_rollout_policy,
        opponent_policy=t.opponent_policy,
        strategy_samples=strategy_sample_nodes(t.strategy_samples, t.opponent_policy),
        all_negative_fallback=config.regret_matching.all_negative_fallback,
        utility_scale=float(config.utility_scale),
        expand_at=t.expand_at,
        path_epsilon=float(t.path_epsilon),
        floor=float(config.regret_matching.floor),
        outcome_estimator=t.outcome_estimator,
        value_lambda=float(t.value_lambda),
        leaf_decisions=int(t.leaf_decisions),
        leaf_check_share=float(t.leaf_check_share),
        leaf_targets=t.leaf_targets,
        draws=config.draws,
        path_expansions=t.path_expansions,
    )


def schedule_from_config(config) -> str:
    """traversal.lockstep_schedule of the `jax` backend (the torch backends ignore it)."""
    schedule = config.traversal.lockstep_schedule
    if schedule not in api.LOCKSTEP_SCHEDULES:
        raise ValueError(
            f"traversal.lockstep_schedule must be one of {api.LOCKSTEP_SCHEDULES}, got {schedule!r}"
        )
    return schedule


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


def _optimizer(opt):
    return make_optimizer(
        learning_rate=opt.learning_rate, weight_decay=opt.weight_decay, grad_clip=opt.grad_clip
    )


def learner_from_config(config, spec: mlp.NetworkSpec, kind: str, codec=None):
    """The `optimization.learner` for networks of `kind` ('advantage' or 'strategy'),
    reading memories stored by `codec` (default: float16 rows)."""
    opt = config.optimization
    if opt.learner not in LEARNERS:
        raise ValueError(f"optimization.learner must be one of {LEARNERS}, got {opt.learner!r}")
    weighting = config.training_weighting.mode
    if kind == "strategy":
        weighting = average_weighting(weighting, config.training_weighting.average_mode)
    sizes = dict(
        batch_size=opt[f"{kind}_batch_size"],
        num_updates=opt[f"{kind}_updates"],
        weighting=weighting,
        lr_schedule=check_lr_schedule(opt[f"{kind}_lr_schedule"], kind, opt[f"{kind}_init"]),
    )
    if opt.learner == "optax":
        return Learner(spec, kind=kind, optimizer=_optimizer(opt), codec=codec, **sizes)
    if spec.head != "slot":
        raise ValueError(
            f"network.head={spec.head!r} is implemented by the optax learner only; set "
            "optimization.learner='optax'"
        )
    from lc_cfr.learn.torch_adapter import TrainerTorchLearner
    from lc_cfr.learn.torch_learner import TorchLearner  # torch is imported only if asked for

    hyper = dict(
        learning_rate=opt.learning_rate,
        weight_decay=opt.weight_decay,
        grad_clip=opt.grad_clip,
    )
    return TrainerTorchLearner(
        TorchLearner(spec, kind=kind, **hyper, **sizes),
        device=config.run.device,
        use_amp=bool(config.run.use_amp),
        compile=bool(config.run.torch_compile),
        codec=codec,
    )


def value_network_from_config(
    config, rules: Rules, spec: mlp.NetworkSpec, options: api.TraversalOptions
) -> ValueNetwork | None:
    """The value network of `traversal.outcome_estimator` baseline or history_value,
    or of `traversal.leaf_decisions` > 0."""
    if not api.uses_value_network(options):
        return None
    opt = config.optimization
    if opt.learner != "optax":
        reader = (
            f"traversal.leaf_decisions={options.leaf_decisions}"
            if api.has_leaves(options)
            else f"traversal.outcome_estimator={options.outcome_estimator!r}"
        )
        raise ValueError(
            f"{reader} trains its value network with optax only; set optimization.learner='optax'"
        )
    if config.memory.value_capacity < 1:
        raise ValueError(f"memory.value_capacity must be >= 1, got {config.memory.value_capacity}")
    value_spec = api.value_spec(rules, spec)
    codec = memory_codec.for_rules(
        rules,
        kind=config.memory.info_storage,
        extra_bits=value_spec.input_size - rules.encoding_size,
    )
    learner = Learner(
        value_spec,
        kind="advantage",  # masked MSE, the mask holding the sampled action only
        optimizer=_optimizer(opt),
        batch_size=opt.value_batch_size,
        num_updates=opt.value_updates,
        weighting="uniform",  # the window already holds recent samples only
        codec=codec,
    )
    return ValueNetwork(value_spec, codec, learner)


def epsilon_schedule_from_config(config) -> EpsilonSchedule:
    """The `traversal.epsilon_*` schedule, checked."""
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
    return EpsilonSchedule(
        start=tr.outcome_sampling_epsilon,
        decay=tr.epsilon_decay,
        every=tr.epsilon_decay_every,
        minimum=tr.epsilon_min,
    )


def check_strategy_train_when(when: str, init: str, every: int) -> None:
    """'read' skips the fits nobody reads, which leaves every read network as 'every'
    would have it only when a fit depends on nothing but its iteration's memory and keys
    (strategy_init='scratch') and every iteration has one (strategy_train_every=1)."""
    if when not in STRATEGY_TRAIN_WHEN:
        raise ValueError(
            f"optimization.strategy_train_when must be one of {STRATEGY_TRAIN_WHEN}, got {when!r}"
        )
    if when == "read" and (init != "scratch" or every != 1):
        raise ValueError(
            "optimization.strategy_train_when='read' needs optimization.strategy_init='scratch' "
            f"and optimization.strategy_train_every=1 (got {init!r} and {every}): a warm-started "
            "fit builds on the one before, so skipping fits would change the network"
        )


def training_from_config(config) -> Training:
    """The optimization, memory, self_play and sd_cfr settings of the loop, checked."""
    opt, memory, sp = config.optimization, config.memory, config.self_play
    epsilon = epsilon_schedule_from_config(config)
    weighting = config.training_weighting
    check_weighting(weighting.mode)
    for field in ("advantage_init", "strategy_init"):
        if opt[field] not in NETWORK_INITS:
            raise ValueError(
                f"optimization.{field} must be 'scratch' or 'warm_start', got {opt[field]!r}"
            )
    health.check_mode(opt.non_finite)
    if not isinstance(opt.advantage_epochs, (int, float)) or opt.advantage_epochs < 0:
        raise ValueError(
            f"optimization.advantage_epochs must be a number >= 0, got {opt.advantage_epochs!r}"
        )
    holdout = opt.advantage_holdout
    if not isinstance(holdout, (int, float)) or not 0.0 <= holdout < 1.0:
        raise ValueError(f"optimization.advantage_holdout must be in [0, 1), got {holdout!r}")
    if opt.strategy_train_every < 1:
        raise ValueError("optimization.strategy_train_every must be >= 1")
    check_strategy_train_when(opt.strategy_train_when, opt.strategy_init, opt.strategy_train_every)
    if sp.league_size < 1 or sp.snapshot_every < 1:
        raise ValueError("self_play.league_size and self_play.snapshot_every must be >= 1")
    for field in ("advantage_capacity", "strategy_capacity"):
        if memory[field] < 1:
            raise ValueError(f"memory.{field} must be >= 1, got {memory[field]}")
    rows = memory.initial_rows
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 0:
        raise ValueError(f"memory.initial_rows must be an int >= 0, got {rows!r}")
    if config.sd_cfr.snapshots < 0:
        raise ValueError(f"sd_cfr.snapshots must be >= 0, got {config.sd_cfr.snapshots}")
    return Training(
        seed=config.seed,
        advantage_init=opt.advantage_init,
        advantage_epochs=float(opt.advantage_epochs),
        advantage_holdout=float(holdout),
        strategy_init=opt.strategy_init,
        strategy_train_every=opt.strategy_train_every,
        strategy_train_when=opt.strategy_train_when,
        non_finite=opt.non_finite,
        average_weighting=average_weighting(weighting.mode, weighting.average_mode),
        advantage_capacity=memory.advantage_capacity,
        strategy_capacity=memory.strategy_capacity,
        value_capacity=memory.value_capacity,
        initial_rows=rows,
        league_size=sp.league_size,
        snapshot_every=sp.snapshot_every,
        sd_cfr_snapshots=config.sd_cfr.snapshots,
        epsilon=epsilon,
    )


def run_plan_from_config(config) -> RunPlan:
    run, ckpt = config.run, config.checkpoint
    return RunPlan(
        max_iterations=run.max_iterations,
        max_minutes=run.max_minutes,
        restart=bool(run.restart),
        progress_bar=bool(run.progress_bar),
        save_latest=bool(ckpt.save_latest),
        save_every=ckpt.save_every,
        asynchronous=bool(ckpt.asynchronous),
        tensorboard=bool(config.logging.tensorboard),
    )


def evaluation_plan(config) -> EvaluationPlan:
    """The `evaluation` block, checked."""
    e = config.evaluation
    for field in ("eval_every", "extended_eval_every", "lanes", "exploitability_every"):
        if e[field] < 0:
            raise ValueError(f"evaluation.{field} must be >= 0, got {e[field]}")
    for field in ("games", "extended_games"):
        if e[field] < 2 or e[field] % 2:
            raise ValueError(f"evaluation.{field} must be even and >= 2 (mirrored deals)")
    if e.mode not in EVALUATION_MODES:
        raise ValueError(f"evaluation.mode must be 'greedy' or 'sampled', got {e.mode!r}")
    return EvaluationPlan(
        every=e.eval_every,
        opponents=parse_names(e.opponents, "evaluation.opponents", BOT_NAMES),
        games=e.games,
        extended_every=e.extended_eval_every,
        extended_opponents=parse_names(
            e.extended_opponents, "evaluation.extended_opponents", BOT_NAMES
        ),
        extended_games=e.extended_games,
        views=parse_names(e.views, "evaluation.views", POLICY_VIEWS),
        mode=e.mode,
        seed=e.seed,
        lanes=e.lanes or None,
        exploitability_every=e.exploitability_every,
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
