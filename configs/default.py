"""Default lc_cfr training configuration (Deep CFR on classic Lost Cities).

    python -m lc_cfr.main --config=configs/default.py [--config.a.b=v]
    python -m lc_cfr.main --config=configs/default.py:smoke   # a few tiny iterations
    python -m lc_cfr.main --config=configs/default.py:small,classic   # presets combine

The defaults are the best full-game setting of the learning campaign
(docs/experiments.md): external sampling expanded at a decision drawn from the whole
played path, the children valued by a history-value network 8 decisions down, strategic
features beside the encoding, pile draws only of cards the agent can play (sections 17,
21, 22 and 25), a card-indexed output head, advantage networks fitted with four passes
over their memories and a strategy network fitted from scratch where it is read
(sections 27-31); for a 2-core CPU a 256x3 network (better at equal wall time than the
predecessor's 512x3: section 12) with 4096 traversals per player (sections 50-51: two
hours of it level with or ahead of two hours of 2048 on both seeds); the rest mirrors
the predecessor's seeds (batches of 1024, 2M-sample memories, evaluation every 25
iterations, mirrored, 1000 games per opponent where the seeds had 100 unmirrored).
Presets: `small` (3 colours, for experiments), `tiny` (exact exploitability), `smoke`
(seconds), `classic` (Deep CFR as Brown et al. ran it: outcome sampling from the root
and a slot head; every backend runs it), `wide` (the predecessor's 512x3 network and
1024 traversals, which docs/performance.md measures against it), `plain` (the estimator
and fits of the default until 2026-12-04; `small`, `tiny` and `smoke` use it). Only the
trainer reads this file; every helper takes explicit arguments.
"""

import ml_collections

# The default's advantage updates: the chunk its two passes over a memory are made of
ADVANTAGE_CHUNK = 64


def get_config(preset: str = "") -> ml_collections.ConfigDict:
    """Returns the config; `preset` is the text after the colon (e.g. 'smoke')."""
    config = ml_collections.ConfigDict()
    config.seed = 0  # every random choice derives from it (docs/design.md section 2)
    # Utility = score difference / utility_scale: keeps regret targets near unit scale.
    config.utility_scale = 100.0  # points per utility unit
    # The draws the agent's policies may take, in training and in play (a restriction of
    # the agent, not a rule; docs/experiments.md section 20): any | playable (the deck,
    # or a pile whose top card the mover can play at once) | deck
    config.draws = "playable"

    # The game variant (docs/design.md section 1, docs/game.md).
    config.rules = ml_collections.ConfigDict()
    config.rules.n_colors = 5  # expeditions, 1..6
    config.rules.n_ranks = 9  # numbered cards per colour
    config.rules.min_rank = 2  # face value of the lowest numbered card
    config.rules.n_wagers = 3  # wager cards per colour
    config.rules.hand_size = 8  # cards per hand
    config.rules.expedition_penalty = -20  # cost of opening an expedition
    config.rules.bonus_threshold = 8  # cards (wagers count) that earn the bonus
    config.rules.bonus_amount = 20  # added after the wager multiplier
    config.rules.max_turns = 100  # truncation cap (docs/game.md explains the choice)

    config.run = ml_collections.ConfigDict()
    config.run.max_iterations = 1000  # stop after this many Deep CFR iterations
    config.run.max_minutes = 0.0  # also stop after this much wall-clock; 0 = no limit
    # Start over in a --workdir whose run has metrics but no readable checkpoint (its
    # history is overwritten); without it such a run is refused, never silently restarted.
    config.run.restart = False
    config.run.progress_bar = True  # tqdm bar with ETA and headline metrics
    # Torch networks (backends recursive | interleaved | server, optimization.learner=torch)
    config.run.device = "cpu"  # cpu | cuda[:N] (cuda needs backend=server or num_workers=0)
    # Deprecated alias of network.compute_dtype='bfloat16' on the torch path only (older
    # configs and runs keep their meaning): True runs the torch forwards and training under
    # bfloat16 autocast even when network.compute_dtype is float32; the JAX paths ignore
    # it. It only adds bfloat16, never removes it, so the two never conflict.
    config.run.use_amp = False  # docs/performance.md
    config.run.torch_compile = False  # torch.compile the torch networks (docs/performance.md)

    config.traversal = ml_collections.ConfigDict()
    # jax | recursive | interleaved | server (docs/design.md section 4)
    config.traversal.backend = "jax"
    # per player per iteration: each gives one expanded decision (external, sampled)
    config.traversal.traversals_per_player = 4096
    config.traversal.lanes = 512  # jax: traversals in flight at once (lockstep)
    # jax, external sampling: all_lanes (every lane decides each step, both players'
    # networks on all of them) | one_mover (half the lanes decide, those of the player to
    # move in most lanes, with its network only: one forward per decision); same samples
    config.traversal.lockstep_schedule = "one_mover"
    config.traversal.num_workers = 2  # torch backends: traversal processes; 0 = in-process
    config.traversal.worker_chunk_size = 32  # torch backends: traversals per worker task
    # interleaved: traversals a worker advances together (at most worker_chunk_size)
    config.traversal.interleave_width = 32
    config.traversal.interleave_max_batch = 512  # interleaved: rows per batched forward at most
    config.traversal.sampling_mode = "external"  # outcome | external
    config.traversal.outcome_sampling_epsilon = 0.6  # traverser exploration mix
    # Annealing: epsilon *= epsilon_decay every epsilon_decay_every iterations, down to
    # epsilon_min (a few values: one compiled traversal each); 1.0 = constant epsilon.
    config.traversal.epsilon_decay = 1.0
    config.traversal.epsilon_decay_every = 20  # iterations between two decays
    config.traversal.epsilon_min = 0.05  # the decay stops here
    config.traversal.outcome_sampling_value_clip = 20.0  # |importance-weighted value| cap; 0 = off
    # Targets of unsampled actions: negative_node_value (unbiased) | zero (biased).
    config.traversal.outcome_unsampled_regret = "negative_node_value"  # see line above
    # Outcome targets: importance (W u / q, the above) | baseline (VR-MCCFR: a learned
    # history value as control variate, unbiased) | history_value (ESCHER-style: value
    # network regrets, no importance weights); the last two train a value network.
    config.traversal.outcome_estimator = "importance"
    config.traversal.value_lambda = 1.0  # value targets: sampled return (1) .. bootstrap (0)
    config.traversal.max_depth = 1  # external: traverser decisions expanded in full
    # external: root (the traverser's first max_depth decisions, Brown et al.) | sampled
    # (one on-policy path to a decision drawn uniformly per traversal, expanded there;
    # every phase of the game gets samples; docs/experiments.md) | path (the path played
    # once to count the traverser's choices on it, one of them drawn uniformly and
    # expanded: every decision a game reaches can be expanded, however long it runs)
    config.traversal.expand_at = "path"
    config.traversal.path_epsilon = 0.2  # sampled, path: uniform mix of the traverser on the path
    # path: how many of the path's choices a traversal expands (distinct, uniform; after
    # each, the path goes on from that node to the next). One scouting pass and one pass
    # down the path then yield this many advantage samples; strategy and value samples
    # come from the first expansion's trajectory only (lc_cfr.traversal.api.path_choices)
    config.traversal.path_expansions = 1
    # sampled, path: value the children of an expanded node by the history value network
    # at the traverser's first decision this many decisions below it (ESCHER-style leaves,
    # lc_cfr.traversal.api.leaf_point) instead of playing them out; the child sigma picks
    # and every child of a leaf_check_share of traversals play out to the end and train
    # the value network (checked ones also compare the two: traversal/leaf_corr_p*); 0 = off
    config.traversal.leaf_decisions = 8
    config.traversal.leaf_check_share = 0.1  # traversals played out in full (see above)
    # leaves: the advantage target values the child sigma picks by its leaf value, as its
    # siblings (leaves: every regret from the value network, ESCHER's estimator;
    # docs/experiments.md 45-47) or by its full playout (mixed, the default until
    # 2026-12-07); checked traversals' targets are full playouts in both
    config.traversal.leaf_targets = "leaves"
    config.traversal.cutoff_turns = 0  # cut a traversal off after this many turns; 0 = never
    config.traversal.cutoff_value_mode = "score_diff"  # score_diff | rollouts
    config.traversal.cutoff_rollouts = 4  # playouts averaged per cut-off (rollouts mode)
    config.traversal.cutoff_rollout_policy = "random"  # bot both players use in playouts
    # network | average_strategy | league | a bot name (lc_cfr.bots.BOT_NAMES)
    config.traversal.opponent_policy = "network"  # the non-traverser's policy
    # Where strategy samples are stored: opponent (Brown et al.) | traverser | both |
    # auto (opponent, or traverser when the opponent is a bot: on-distribution samples)
    config.traversal.strategy_samples = "auto"  # storage nodes (see line above)

    config.regret_matching = ml_collections.ConfigDict()
    # When no advantage is positive: argmax_tiebreak (lowest index wins ties) | uniform.
    config.regret_matching.all_negative_fallback = "argmax_tiebreak"  # see line above
    # Uniform share mixed into every regret-matching policy, so no legal action is ever
    # exactly 0 (policy.regret_matching states the bias); 0 = plain regret matching.
    config.regret_matching.floor = 0.0

    config.training_weighting = ml_collections.ConfigDict()
    # How iteration t's samples weigh in the regrets (advantage networks): lcfr (weight t)
    # | quadratic (t^2) | uniform
    config.training_weighting.mode = "lcfr"
    # ... and in the average strategy (strategy network, SD-CFR snapshots), Discounted
    # CFR's separate gamma: uniform (0) | lcfr (1) | quadratic (2) | same (as `mode`).
    # Uniform fits of the two-hour run's memory beat lcfr's by 8-10 points against
    # passive_discard and tie against the safe bots (docs/experiments.md 38).
    config.training_weighting.average_mode = "uniform"

    config.self_play = ml_collections.ConfigDict()
    config.self_play.league_size = 4  # past strategy snapshots kept for `league`
    config.self_play.snapshot_every = 10  # iterations between snapshots

    config.network = ml_collections.ConfigDict()
    config.network.hidden_size = 256  # units per hidden layer
    config.network.num_layers = 3  # hidden layers
    config.network.activation = "relu"  # relu | gelu | tanh | silu
    # Output head: slot (one output per action) | card (play / discard outputs per card id,
    # read through the hand into the slot actions; lc_cfr.nets.mlp)
    config.network.head = "card"
    # Read the encoding's own_known block (own cards the opponent saw us take from a pile);
    # False drops it before the first layer (networks trained before it existed).
    config.network.own_known_input = True
    # Also feed the first layer features derived from the encoding (per colour: live cards
    # above one's top, projected score, cards to the bonus; a discard's danger; turns left;
    # lc_cfr.nets.features)
    config.network.strategic_features = True
    # Also feed, per card of one's hand, what playing it would block (the other hand
    # cards and the live cards below it; lc_cfr.nets.features.blocking_features)
    config.network.blocking_features = False
    # Matmul dtype of every forward and of training, both paths: float32 | bfloat16 (mixed
    # precision: float32 parameters and losses, bfloat16 layers; docs/performance.md).
    config.network.compute_dtype = "float32"

    config.optimization = ml_collections.ConfigDict()
    config.optimization.learning_rate = 1e-3  # AdamW, all three networks
    config.optimization.weight_decay = 0.0  # AdamW decoupled weight decay
    config.optimization.grad_clip = 1.0  # global norm; 0 = off
    # A non-finite loss, sample or parameter: stop (one-line error, nothing of the
    # iteration saved) | skip (drop the update or samples, count them in health/*)
    config.optimization.non_finite = "stop"
    config.optimization.advantage_updates = ADVANTAGE_CHUNK  # updates per iteration per network
    # > 0: each advantage training makes this many passes over the player's memory
    # (ceil(epochs x rows / batch) updates, in whole advantage_updates chunks, which are
    # then the minimum), so the fit keeps up as the memory grows; 0 = advantage_updates.
    # A fixed 512 updates fit the early, small memories' noise (a held-out loss twice as
    # high) and took half of each early iteration (docs/experiments.md 28); four passes
    # did at least as well as two against all six bots in two quiet hours (sections 30, 31).
    config.optimization.advantage_epochs = 4.0
    config.optimization.advantage_batch_size = 1024  # samples per update
    # Share of each iteration's advantage samples kept out of the memory; after training,
    # the network's loss on them is loss/advantage_heldout_p{p}, beside the training loss
    # loss/advantage_p{p}: both high = underfit, held-out far above = noise or overfit.
    config.optimization.advantage_holdout = 0.0  # 0 = every sample is remembered
    config.optimization.strategy_updates = 512  # updates per strategy training
    config.optimization.strategy_batch_size = 1024  # samples per update
    config.optimization.advantage_init = "scratch"  # scratch | warm_start
    # The learning rate over each iteration's advantage fit (all its chunks): constant |
    # cosine (from learning_rate down to 0; needs advantage_init=scratch). Decayed refits
    # of one memory played 4-7 points better, but an hour of training with it was no
    # better at iteration 100 and behind at the hour (docs/experiments.md 41).
    config.optimization.advantage_lr_schedule = "constant"
    config.optimization.strategy_train_every = 1  # iterations between strategy training
    # The strategy network at each training: warm_start (trained on from its last fit) |
    # scratch (re-drawn and fitted anew, as Brown et al. fit it once, at the end; on the
    # full game it plays 3-9 points better against safe_heuristic at the same cost:
    # docs/experiments.md 27)
    config.optimization.strategy_init = "scratch"
    # When the strategy network is trained: every (each strategy_train_every iterations) |
    # read (only at the iterations that read it: evaluations, kept checkpoints, the
    # opponent's or the league's use, the last iteration; needs strategy_init=scratch,
    # whose fit depends on nothing but the iteration, so the networks read are every's;
    # a checkpoint in between holds the last fit). The fits it skips took 17-21% of each
    # iteration of the two-hour run of docs/experiments.md 29.
    config.optimization.strategy_train_when = "read"
    # The learning rate over each strategy fit: constant | cosine (from learning_rate down
    # to 0 over strategy_updates; needs strategy_init=scratch). A constant rate leaves the
    # fit wherever its last batches threw it: four fits of one memory ranged over 10 points
    # against passive_discard; decayed, over 1 to 2 (another run's memory: 6), and no
    # worse on average against any bot, up to 4 points better (docs/experiments.md 40, 41).
    config.optimization.strategy_lr_schedule = "cosine"
    config.optimization.value_updates = 256  # value network (outcome estimators), warm
    config.optimization.value_batch_size = 512  # samples per value update
    # optax (JAX) | torch (on run.device, with run.use_amp / run.torch_compile); the two
    # draw the same batches and agree to float32 rounding (docs/performance.md)
    config.optimization.learner = "optax"

    # SD-CFR (Steinberger 2019): advantage-network snapshots kept for the `sd_cfr` policy
    # view, which plays one snapshot per game drawn by its iteration's weight; 0 = off.
    config.sd_cfr = ml_collections.ConfigDict()
    config.sd_cfr.snapshots = 0  # K, filled by a weighted reservoir (lc_cfr.train.snapshots)

    config.memory = ml_collections.ConfigDict()
    config.memory.advantage_capacity = 2_000_000  # per player
    config.memory.strategy_capacity = 2_000_000  # shared by both players
    config.memory.value_capacity = 200_000  # value samples: the most recent ones (a window)
    # How rows store encodings: packed (card bits and int16 codes, 127 bytes a row by
    # default) | float16 (1040 bytes); both decode to the same values (lc_cfr.memory.codec).
    config.memory.info_storage = "packed"
    # Rows allocated at the start, doubled as a memory fills, up to its capacity (a few
    # recompiles of the training step over a run); 0 = allocate the capacity up front.
    config.memory.initial_rows = 65_536

    # Mirrored evaluation against bots (lc_cfr.eval): every deal is played twice, seats
    # swapped, so `games` must be even. Names are comma-separated.
    config.evaluation = ml_collections.ConfigDict()
    config.evaluation.eval_every = 25  # iterations between evaluations; 0 = never
    config.evaluation.opponents = "random,safe_heuristic"  # bots met every eval_every
    config.evaluation.games = 1000  # games per view and opponent
    config.evaluation.extended_eval_every = 100  # iterations between full evaluations; 0 = never
    config.evaluation.extended_opponents = (
        "random,passive_discard,safe_heuristic,safe_heuristic_loose,"
        "safe_heuristic_strict,noisy_safe"
    )  # bots met every extended_eval_every (replaces the regular set on those iterations)
    config.evaluation.extended_games = 2000  # games per view and opponent
    # Policies evaluated: average_strategy (the strategy network), current (regret
    # matching on the advantage networks), sd_cfr (needs sd_cfr.snapshots).
    config.evaluation.views = "average_strategy,current"
    # greedy (the most probable action; at a draw the piles together against the deck
    # first, policy.greedy_action) | sampled play of the views
    config.evaluation.mode = "greedy"
    config.evaluation.seed = 20261130  # deals (iteration word 0) and sampled actions
    config.evaluation.lanes = 0  # games in flight at once; 0 = the evaluator's default
    # Exact exploitability (OpenSpiel, lc_cfr.spiel) every this many iterations, in points;
    # enumerable variants only (the :tiny preset); 0 = never.
    config.evaluation.exploitability_every = 0

    config.checkpoint = ml_collections.ConfigDict()
    # Checkpoints are orbax steps, checkpoints/step_<8 digits> (lc_cfr/train/checkpoint.py).
    config.checkpoint.save_latest = True  # save every iteration, keeping only the newest
    config.checkpoint.save_every = 25  # also keep every step that is a multiple; 0 = never
    config.checkpoint.asynchronous = True  # write beside the next iteration's traversal

    config.logging = ml_collections.ConfigDict()
    config.logging.tensorboard = True  # events under WORKDIR/tensorboard

    # Several processes, one per host, training one run (jax.distributed, docs/scaling.md):
    # traversals and evaluation games are sharded over every process's devices, every
    # process trains the same networks, and only process 0 writes the run directory.
    config.distributed = ml_collections.ConfigDict()
    # host:port of process 0's coordinator; "" = one process (off); auto = let JAX read
    # the cluster (SLURM, Open MPI, ...), which then sets the two fields below
    config.distributed.coordinator_address = ""
    config.distributed.num_processes = 1  # processes in the run (with a host:port address)
    config.distributed.process_id = 0  # this process: 0 .. num_processes - 1 (host:port)
    config.distributed.initialization_timeout = 300  # seconds to wait for every process

    presets = {
        "smoke": _smoke,
        "small": _small,
        "tiny": _tiny,
        "classic": _classic,
        "wide": _wide,
        "plain": _plain,
    }
    for name in filter(None, (part.strip() for part in preset.split(","))):
        if name not in presets:
            raise ValueError(f"unknown preset {name!r}; valid: {sorted(presets)}, comma-joined")
        presets[name](config)
    return config


def _classic(config: ml_collections.ConfigDict) -> None:
    """Deep CFR as Brown et al. (2019) and the predecessor ran it: outcome sampling from
    the root, full playouts, the encoding alone, any draw and a slot-indexed head, with the
    sizes of the other presets. Every backend implements it (docs/backends.md)."""
    _plain(config)
    config.traversal.sampling_mode = "outcome"
    config.traversal.expand_at = "root"
    config.traversal.max_depth = 2
    config.network.head = "slot"


def _plain(config: ml_collections.ConfigDict) -> None:
    """The default until 2026-12-04 (docs/experiments.md sections 2-13): the expansion at
    a decision drawn uniformly below the length of a game without pile draws, children
    played out to the end, the encoding alone, any draw, a warm-started strategy network
    averaging as the regrets weigh, 512 advantage updates an iteration and constant
    learning rates. The small variants' yardsticks were measured with it, so `tiny`, `small`
    and `smoke` apply it (and then set their own updates)."""
    config.draws = "any"
    config.traversal.expand_at = "sampled"
    config.traversal.leaf_decisions = 0
    config.network.strategic_features = False
    config.optimization.strategy_init = "warm_start"
    config.optimization.strategy_train_when = "every"
    config.optimization.strategy_lr_schedule = "constant"
    config.optimization.advantage_epochs = 0.0
    config.training_weighting.average_mode = "same"
    # `classic` applies this after a preset's own sizes (`tiny,classic`): only the
    # default's chunk becomes plain's fixed 512, a preset's updates stay
    if config.optimization.advantage_updates == ADVANTAGE_CHUNK:
        config.optimization.advantage_updates = 512


def _wide(config: ml_collections.ConfigDict) -> None:
    """The predecessor's sizes: a 512x3 network and 1024 traversals per player (the default
    until 2026-12-01). docs/performance.md measures lc_cfr against the predecessor with
    them (`wide,classic`: its estimator as well)."""
    config.network.hidden_size = 512
    config.traversal.traversals_per_player = 1024


def _small(config: ml_collections.ConfigDict) -> None:
    """A 3-colour game and a 128x2 network for learning experiments: 25-45 s an iteration
    on a 2-core CPU. 1024 advantage updates (256 left the networks underfit), 4096
    traversals per player (better in every run they were tried in) and the default's
    2M-row memories (better than 300,000 in self-play): docs/experiments.md, 7 to 11.
    The estimator is `plain`'s, the one those sections measured, so that the yardsticks
    stay comparable; it is not the best setting: the default's estimator makes a better
    `:small` best response (sections 27 and 47), and on the full game the default above
    is the best setting measured (README, "Where learning stands")."""
    _plain(config)
    config.rules.n_colors = 3
    config.rules.hand_size = 6
    config.rules.max_turns = 60
    config.run.max_iterations = 200
    config.traversal.traversals_per_player = 4096
    config.traversal.lanes = 512
    config.network.hidden_size = 128
    config.network.num_layers = 2
    config.optimization.advantage_updates = 1024
    config.optimization.advantage_batch_size = 512
    config.optimization.strategy_updates = 128
    config.optimization.strategy_batch_size = 256
    config.memory.value_capacity = 50_000
    config.optimization.value_updates = 128
    config.optimization.value_batch_size = 256
    config.evaluation.eval_every = 10
    config.evaluation.opponents = "random,passive_discard,safe_heuristic"
    config.evaluation.extended_eval_every = 50


def _tiny(config: ml_collections.ConfigDict) -> None:
    """lc_cfr.spiel.TINY_RULES (one colour of five cards, one-card hands), small enough
    that OpenSpiel computes the exact exploitability every few iterations
    (docs/exploitability.md); needs the `openspiel` extra. The estimator is `plain`'s:
    the exact computation needs every draw allowed, `path` drawing among a path's choices
    over-weights the late decisions of games of at most 8 (docs/experiments.md section
    15), leaves 8 decisions down would never cut one, and tests/test_learning.py's bounds
    were measured with it."""
    _plain(config)
    config.rules.n_colors = 1
    config.rules.n_ranks = 4
    config.rules.n_wagers = 1
    config.rules.hand_size = 1
    config.rules.expedition_penalty = -5
    config.rules.max_turns = 4
    config.utility_scale = 10.0  # expeditions score -10..+18 here
    config.run.max_iterations = 100
    config.traversal.traversals_per_player = 512
    config.traversal.lanes = 256
    config.network.hidden_size = 64
    config.network.num_layers = 2
    config.optimization.advantage_updates = 256
    config.optimization.advantage_batch_size = 256
    config.optimization.strategy_updates = 256
    config.optimization.strategy_batch_size = 256
    config.optimization.value_updates = 128
    config.optimization.value_batch_size = 256
    config.memory.advantage_capacity = 200_000
    config.memory.strategy_capacity = 200_000
    config.memory.value_capacity = 20_000
    config.evaluation.eval_every = 0  # exploitability is the yardstick here, not bots
    config.evaluation.extended_eval_every = 0
    config.evaluation.exploitability_every = 5


def _smoke(config: ml_collections.ConfigDict) -> None:
    """A tiny variant and network: a few iterations in well under a minute on a CPU, with
    `plain`'s estimator (no value network to compile and train; tests/test_trainer.py runs
    the default's modes at this size)."""
    _plain(config)
    config.rules.n_colors = 2
    config.rules.n_ranks = 5
    config.rules.n_wagers = 1
    config.rules.hand_size = 3
    config.rules.bonus_threshold = 5
    config.rules.max_turns = 30
    config.run.max_iterations = 3
    config.run.progress_bar = False
    config.traversal.traversals_per_player = 16
    config.traversal.lanes = 8
    config.network.hidden_size = 32
    config.network.num_layers = 2
    config.optimization.advantage_updates = 8
    config.optimization.advantage_batch_size = 32
    config.optimization.strategy_updates = 8
    config.optimization.strategy_batch_size = 32
    config.memory.advantage_capacity = 4096
    config.memory.strategy_capacity = 4096
    config.memory.value_capacity = 4096
    config.optimization.value_updates = 8
    config.optimization.value_batch_size = 32
    config.checkpoint.save_every = 2
    config.evaluation.eval_every = 3  # once, at the end, against one bot
    config.evaluation.opponents = "random"
    config.evaluation.games = 8
    config.evaluation.extended_eval_every = 0
