"""The Deep CFR training loop that every backend sits behind (docs/design.md sections 3 to 5).

Each iteration t = 1, 2, ...: for each player p, the backend runs the traversals with p
as traverser, their samples enter p's advantage memory and the strategy memory, and p's
advantage network is trained; the strategy network is trained every
`optimization.strategy_train_every` iterations, or (`strategy_train_when='read'`) only at
the iterations that read it (`strategy_read_at`). Every random choice derives from
`config.seed` and the iteration, so a resumed run is the uninterrupted run.

The config is read once, by `lc_cfr.train.setup.build`; what a run directory holds and
how its state is laid out on disk is `lc_cfr.train.run_format`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import functools
import pathlib
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import ml_collections
from absl import logging

from lc_cfr.memory import reservoir
from lc_cfr.train import (
    checkpoint,
    distributed,
    evaluation,
    health,
    keys,
    run_format,
    setup,
    snapshots,
    steps,
)
from lc_cfr.train.metrics import MetricsWriter, Progress
from lc_cfr.train.run_format import TrainState
from lc_cfr.traversal import api
from lc_cfr.traversal.registry import make_backend

KeyOwner, KeyUse = keys.Owner, keys.Use  # the trainer's random streams


class Trainer:
    """Builds everything from the config once; `run` trains and checkpoints."""

    def __init__(self, config: ml_collections.ConfigDict, workdir: str | pathlib.Path):
        self.config = config  # written to config.json; read by setup.build only
        self.workdir = pathlib.Path(workdir)
        parts = setup.build(config)
        self.rules, self.spec, self.options = parts.rules, parts.spec, parts.options
        self.codec, self.codecs = parts.codec, parts.codecs
        self.advantage_learner, self.strategy_learner = (
            parts.advantage_learner,
            parts.strategy_learner,
        )
        self.value_learner = parts.value.learner if parts.value else None
        self.value_codec = parts.value.codec if parts.value else None
        self.evaluation, self.exploitability = parts.evaluation, parts.exploitability
        self.training, self.plan = parts.training, parts.run
        self.backend = make_backend(
            parts.backend,
            rules=self.rules,
            spec=self.spec,
            options=self.options,
            lanes=parts.lanes,
            workers=parts.workers,
            schedule=parts.schedule,
        )
        self._add = steps.growing_add(reservoir.reservoir_add, self.codec)
        self._window_add = None
        if parts.value is not None:
            self._window_add = steps.growing_add(reservoir.window_add, self.value_codec)
        self.base_key = jax.random.PRNGKey(self.training.seed)
        self._guard = steps.Guard(self.training.non_finite, self._latest_note)
        self._checkpoints: checkpoint.CheckpointStore | None = None  # opened by run/restore

    def key(self, iteration: int, owner: int, use: KeyUse) -> jax.Array:
        """`keys.key` of this run's seed."""
        return keys.key(self.base_key, iteration, owner, use)

    def epsilon(self, t: int) -> float | None:
        """Outcome sampling's exploration at iteration t (`setup.EpsilonSchedule`)."""
        return self.training.epsilon.at(t)

    # ----- state -------------------------------------------------------------------

    def initial_state(self) -> TrainState:
        adv = [self.advantage_learner.init(self.key(0, p, KeyUse.INIT)) for p in (0, 1)]
        strategy_params, strategy_opt = self.strategy_learner.init(
            self.key(0, KeyOwner.STRATEGY, KeyUse.INIT)
        )
        tr = self.training
        advantage_memory = tuple(self._empty_memory(tr.advantage_capacity) for _ in (0, 1))
        extra = {}
        if self.value_learner is not None:
            params, opt = self.value_learner.init(self.key(0, KeyOwner.VALUE, KeyUse.INIT))
            memory = self._empty_memory(tr.value_capacity, self.value_codec)
            extra.update(value_params=params, value_opt=opt, value_memory=memory)
        if tr.sd_cfr_snapshots:
            stacks = tuple(snapshots.stacked(a[0], tr.sd_cfr_snapshots, False) for a in adv)
            extra.update(sd_advantage=stacks, sd_count=0, sd_weight=0.0)
        return TrainState(
            iteration=0,
            advantage_params=(adv[0][0], adv[1][0]),
            advantage_opt=(adv[0][1], adv[1][1]),
            strategy_params=strategy_params,
            strategy_opt=strategy_opt,
            advantage_memory=advantage_memory,
            strategy_memory=self._empty_memory(tr.strategy_capacity),
            league=snapshots.stacked(strategy_params, tr.league_size, True),
            league_added=1,
            **extra,
        )

    def _empty_memory(self, capacity: int, codec=None) -> reservoir.Reservoir:
        codec = codec or self.codec
        rows = self._rows_for(0, capacity)
        return reservoir.reservoir_init(
            capacity=capacity, num_actions=self.rules.num_actions, codec=codec, rows=rows
        )

    def _rows_for(self, size: int, capacity: int) -> int:
        """Rows to allocate for `size` filled ones: memory.initial_rows doubled as often as
        needed (the shapes `reservoir.reserve` grows through), at most the capacity."""
        return reservoir.doubled_rows(self.training.initial_rows or capacity, size, capacity)

    def networks(self, state: TrainState) -> api.Networks:
        return api.Networks(
            advantage=state.advantage_params,
            strategy=state.strategy_params,
            league=state.league,
            league_count=jnp.int32(min(state.league_added, self.training.league_size)),
            value=state.value_params,
        )

    # ----- one iteration -----------------------------------------------------------

    def iteration(
        self, state: TrainState, out_of_time: Callable[[], bool] | None = None
    ) -> tuple[TrainState, dict]:
        """Iteration state.iteration + 1 (`lc_cfr.train.steps`): both players' halves,
        the strategy and value networks, the league and SD-CFR snapshots, the row.
        `out_of_time()`, asked where the strategy network is due or not, says that the
        run stops after this iteration (run.max_minutes), which then reads it."""
        work = steps.Work.start(state)
        for p in (0, 1):
            self._player_half(state, work, p)
        due = self._strategy_due(work.t, out_of_time)
        strategy = self._train_strategy(work, state, due=due)
        # a fit dropped as non-finite (optimization.non_finite='skip') keeps the old one
        fitted = due and strategy[0] is not state.strategy_params
        value = (state.value_params, state.value_opt)
        if self.value_learner is not None:  # warm-started: the values move a little
            value = self._train_network(
                work,
                "value",
                value,
                work.value_memory,
                self.value_learner,
                KeyOwner.VALUE,
                due=True,
            )
        steps.memory_columns(work)
        steps.traversal_columns(work)
        league, added = snapshots.add_to_league(
            state.league,
            state.league_added,
            strategy[0],
            t=work.t,
            every=self.training.snapshot_every,
            size=self.training.league_size,
        )
        sd_advantage, sd_count, sd_weight = self._offer_sd_snapshot(
            state, work.t, tuple(work.advantage_params)
        )
        new_state = TrainState(
            iteration=work.t,
            advantage_params=tuple(work.advantage_params),
            advantage_opt=tuple(work.advantage_opt),
            strategy_params=strategy[0],
            strategy_opt=strategy[1],
            advantage_memory=tuple(work.advantage_memory),
            strategy_memory=work.strategy_memory,
            league=league,
            league_added=added,
            value_params=value[0],
            value_opt=value[1],
            value_memory=work.value_memory,
            sd_advantage=sd_advantage,
            sd_count=sd_count,
            sd_weight=sd_weight,
            strategy_iteration=work.t if fitted else state.strategy_iteration,
        )
        with steps.timed(work.row, "evaluation_seconds"):
            work.row.update(self.evaluate(new_state))
        return new_state, work.row

    def _player_half(self, state: TrainState, work: steps.Work, p: int) -> None:
        """Player p's traversals (against the advantage networks trained so far this
        iteration), their samples remembered, p's advantage network trained."""
        t = work.t
        networks = self.networks(state._replace(advantage_params=tuple(work.advantage_params)))
        samples = steps.traverse(
            self.backend,
            networks,
            work,
            p,
            seed=self.training.seed,
            epsilon=self.epsilon(t),
            rules=self.rules,
            guard=self._guard,
        )
        held = None
        if self.training.advantage_holdout > 0:
            holdout_key = self.key(t, p, KeyUse.HOLDOUT)
            samples, held = steps.hold_out(samples, self.training.advantage_holdout, holdout_key)
        if p == 0 and self._checkpoints is not None:
            # the last save may still be reading the memories this add donates
            with steps.timed(work.row, "checkpoint_wait_seconds"):
                self._checkpoints.wait()
        steps.remember(
            work,
            p,
            samples,
            add=self._add,
            window_add=self._window_add,
            advantage_key=self.key(t, p, KeyUse.ADVANTAGE_ADD),
            strategy_key=self.key(t, p, KeyUse.STRATEGY_ADD),
        )
        scratch = self.training.advantage_init == "scratch"
        steps.train_advantage(
            work,
            p,
            (state.advantage_params[p], state.advantage_opt[p]),
            learner=self.advantage_learner,
            epochs=self.training.advantage_epochs,
            reinit_key=self.key(t, p, KeyUse.REINIT) if scratch else None,
            train_key=self.key(t, p, KeyUse.TRAIN),
            guard=self._guard,
        )
        if held is not None:
            steps.held_out_loss(work, p, held, spec=self.spec)

    def _strategy_due(self, t: int, out_of_time: Callable[[], bool] | None) -> bool:
        training = self.training
        if training.strategy_train_when == "every":
            return t % training.strategy_train_every == 0
        return self.strategy_read_at(t) or (out_of_time is not None and out_of_time())

    def strategy_read_at(self, t: int) -> bool:
        """Whether iteration t's strategy network is read: by its evaluation (a view of
        the bots' or the exploitability schedule), in a kept checkpoint
        (checkpoint.save_every), by the next traversals (the opponent's average strategy,
        or a league snapshot taken at t), or as the run's last (run.max_iterations)."""
        plan, opponent = self.evaluation, self.options.opponent_policy
        every = plan.exploitability_every
        evaluated = "average_strategy" in plan.views and (
            evaluation.opponents_at(plan, t) is not None or (every > 0 and t % every == 0)
        )
        kept = self.plan.save_every > 0 and t % self.plan.save_every == 0
        league = opponent == "league" and t % self.training.snapshot_every == 0
        last = t >= self.plan.max_iterations
        return evaluated or kept or league or opponent == "average_strategy" or last

    def fit_strategy(self, state: TrainState) -> TrainState:
        """`state` with the strategy network of its own iteration, the one
        strategy_train_when='every' holds there ('read' leaves the last read one in
        between; scripts/time_to_strength.py reads one at its marks); `state` itself
        when it holds that one already."""
        if state.strategy_iteration == state.iteration:
            return state
        work = dataclasses.replace(steps.Work.start(state), t=state.iteration)
        params, opt = self._train_strategy(work, state, due=True)
        if params is state.strategy_params:  # dropped as non-finite
            return state
        return state._replace(
            strategy_params=params, strategy_opt=opt, strategy_iteration=state.iteration
        )

    def strategy_refit(self, state: TrainState, draw: int):
        """The strategy network fitted again on `state`'s memory with the iteration's
        keys folded by `draw` >= 1: another draw of the fit the run reads there (its
        own is `fit_strategy`). One fit's greedy play can sit 15 points from another's
        against a bot (docs/experiments.md 33), so a yardstick reads several.

        Only for optimization.strategy_init='scratch', whose fit depends on the memory
        and the keys alone; the run's state is not changed."""
        if self.training.strategy_init != "scratch":
            raise ValueError(
                "strategy refits need optimization.strategy_init='scratch' (a warm fit "
                f"continues the previous network), got {self.training.strategy_init!r}"
            )
        if draw < 1:
            raise ValueError(f"draw must be >= 1 (0 is the run's own fit), got {draw}")
        t = state.iteration
        reinit = jax.random.fold_in(self.key(t, KeyOwner.STRATEGY, KeyUse.REINIT), draw)
        train = jax.random.fold_in(self.key(t, KeyOwner.STRATEGY, KeyUse.TRAIN), draw)
        params, _, _ = self.strategy_learner.train(
            *self.strategy_learner.init(reinit), state.strategy_memory, train
        )
        return params

    def _train_strategy(self, work: steps.Work, state: TrainState, *, due: bool):
        """(params, opt_state) of the strategy network after iteration work.t's training
        (none unless `due`), on the memory as `work` holds it."""
        return self._train_network(
            work,
            "strategy",
            (state.strategy_params, state.strategy_opt),
            work.strategy_memory,
            self.strategy_learner,
            KeyOwner.STRATEGY,
            due=due,
            scratch=self.training.strategy_init == "scratch",
        )

    def _train_network(
        self, work: steps.Work, name: str, trained, memory, learner, owner, *, due, scratch=False
    ):
        """The `name` network ('strategy' or 'value') after its training call of this
        iteration (none unless `due`), re-drawn first if `scratch`; `trained` is its
        (params, opt_state) so far."""
        with steps.timed(work.row, f"{name}_train_seconds"):
            key = self.key(work.t, owner, KeyUse.TRAIN) if due else None
            reinit = self.key(work.t, owner, KeyUse.REINIT) if due and scratch else None
            return steps.train_network(
                work,
                name,
                *trained,
                memory,
                learner=learner,
                key=key,
                reinit_key=reinit,
                guard=self._guard,
            )

    def _offer_sd_snapshot(self, state: TrainState, t: int, params: tuple) -> tuple:
        """(sd_advantage, sd_count, sd_weight) after offering iteration t's advantage
        networks to the SD-CFR snapshots (`snapshots.offer_sd`, the training weighting's
        w_t)."""
        if state.sd_advantage is None:
            return (None, 0, 0.0)
        k = self.training.sd_cfr_snapshots
        draw = jax.random.uniform(self.key(t, KeyOwner.SD_CFR, KeyUse.SNAPSHOT_DRAW))
        pick = jax.random.randint(self.key(t, KeyOwner.SD_CFR, KeyUse.SNAPSHOT_PICK), (), 0, k)
        return snapshots.offer_sd(
            state.sd_advantage,
            state.sd_count,
            state.sd_weight,
            params,
            weight=snapshots.iteration_weight(t, self.training.average_weighting),
            draw=float(draw),
            pick=int(pick),
        )

    def _latest_note(self) -> str:
        latest = self._checkpoints.latest() if self._checkpoints is not None else None
        if latest is None:
            return "no checkpoint written yet"
        return f"{self._checkpoints.path(latest)} is the latest state"

    # ----- evaluation --------------------------------------------------------------

    def evaluate(self, state: TrainState) -> dict:
        """Mirrored evaluation (and exact exploitability) on the `evaluation` schedules."""
        return evaluation.evaluate_state(
            state,
            self.evaluation,
            rules=self.rules,
            spec=self.spec,
            fallback=self.options.all_negative_fallback,
            exploitability=self.exploitability,
            draws=self.options.draws,
        )

    def policy_views(self, state: TrainState) -> dict:
        """{view: its parameters} of the evaluation's `views`."""
        return evaluation.policy_views(state, self.evaluation.views)

    # ----- checkpoints -------------------------------------------------------------

    def save(self, state: TrainState, row: dict | None, on_saved=None) -> None:
        if not distributed.is_writer():
            return  # process 0 saves the state, which every process holds alike
        networks = (state.advantage_params, state.strategy_params, state.value_params)
        if not health.all_finite(networks):  # a last guard: _checked drops such updates
            raise health.NonFiniteError(
                f"refusing to checkpoint non-finite networks at iteration {state.iteration}"
            )
        arrays = run_format.state_arrays(state, self.base_key)
        meta = run_format.state_meta(state, row, self.training.seed)
        self._open_checkpoints().save(state.iteration, *arrays, meta, on_saved)

    def _open_checkpoints(self) -> checkpoint.CheckpointStore:
        """The run's checkpoint store, opened for writing on first use."""
        if self._checkpoints is None:
            self._checkpoints = distributed.checkpoint_store(
                self.workdir / "checkpoints",
                keep_every=self.plan.save_every,
                asynchronous=self.plan.asynchronous,
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
        loaded = store.load_whole(iteration)
        if loaded is None:
            return None
        arrays, meta = loaded
        state = run_format.state_from_arrays(
            arrays,
            meta,
            template=self.initial_state(),
            base_key=self.base_key,
            rules=self.rules,
            own_known_input=self.spec.own_known_input,
            codecs=self.codecs,
            rows_for=self._rows_for,
        )
        return state, meta.get("metrics")

    # ----- the loop ----------------------------------------------------------------

    def run(self, after_iteration: Callable[[TrainState], bool] | None = None) -> TrainState:
        """Trains to run.max_iterations (or run.max_minutes), resuming the workdir's run;
        returns once the last checkpoint is on disk. `after_iteration(state)`, if given,
        runs after every iteration (its time does not count against run.max_minutes) and
        stops the run by returning True (scripts/time_to_strength.py evaluates there)."""
        try:
            return self._run(after_iteration)
        finally:
            if self._checkpoints is not None:
                self._checkpoints.close()  # the last (asynchronous) save lands here
                self._checkpoints = None

    def _resume(self) -> tuple[TrainState, dict | None]:
        """(state, its metrics row) to go on from: the latest checkpoint's, shared by
        process 0, or the initial state; writes config.json on process 0."""
        restored = None
        if distributed.is_writer():
            self.workdir.mkdir(parents=True, exist_ok=True)
            uses_value = api.uses_value_network(self.options)
            run_format.check_resumable(self.workdir, self.config, uses_value)
            config_path = self.workdir / "config.json"
            checkpoint.atomic_write_text(config_path, self.config.to_json(indent=1))
            self._open_checkpoints()
            restored = self.restore()
            if restored is None and not self.plan.restart:
                run_format.refuse_to_restart(self.workdir)
        restored = distributed.share_restored(restored, self.initial_state)
        # the resume record (docs/reliability.md): the step this process goes on from
        if restored:
            where = self.workdir / "checkpoints" if distributed.is_writer() else "process 0's state"
            logging.info("resuming from checkpoint %d (%s)", restored[0].iteration, where)
            return restored
        logging.info("no checkpoint: starting at iteration 0")
        return self.initial_state(), None

    def _run(self, after_iteration) -> TrainState:
        writer = distributed.is_writer()  # with several processes, process 0 writes alone
        state, last_row = self._resume()
        plan = self.plan
        metrics = distributed.NullMetrics()
        if writer:
            metrics = MetricsWriter(
                self.workdir, tensorboard=plan.tensorboard, resume_after=state.iteration
            )
        if last_row is not None and not run_format.has_metrics_row(metrics.path, state.iteration):
            metrics.write(last_row)  # the checkpoint landed but its metrics row did not
        progress = Progress(
            total=plan.max_iterations,
            initial=state.iteration,
            enabled=plan.progress_bar and writer,
            max_seconds=60 * plan.max_minutes,
        )
        started = time.perf_counter()

        def out_of_time() -> bool:
            return plan.max_minutes > 0 and time.perf_counter() - started > 60 * plan.max_minutes

        try:
            while state.iteration < plan.max_iterations:
                state = self._step(state, metrics, progress, out_of_time)
                if after_iteration is not None:
                    paused = time.perf_counter()
                    stop = after_iteration(state)
                    started += time.perf_counter() - paused
                    if stop:
                        break
                # strategy_train_when='read': the last iteration leaves its own strategy
                # network (out_of_time() was already true at its fit); one whose time ran
                # out only after the fit point runs once more
                fresh = state.strategy_iteration == state.iteration
                if out_of_time() and (fresh or self.training.strategy_train_when == "every"):
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

    def _step(self, state: TrainState, metrics, progress, out_of_time) -> TrainState:
        """One iteration, saved on the checkpoint schedule; its metrics row written."""
        plan, start = self.plan, time.perf_counter()
        state, row = self.iteration(state, out_of_time)
        saved = time.perf_counter()
        every = plan.save_every > 0 and state.iteration % plan.save_every == 0
        row["checkpoint_seconds"] = 0.0
        row["iteration_seconds"] = time.perf_counter() - start
        if plan.save_latest or every or state.iteration >= plan.max_iterations:
            # the row is written once the step is on disk, so that metrics.jsonl never
            # holds an iteration that a kill could leave without checkpoint
            self.save(state, row, on_saved=functools.partial(metrics.write, row))
            row["checkpoint_seconds"] = time.perf_counter() - saved
            row["iteration_seconds"] = time.perf_counter() - start
        else:
            metrics.write(row)
        progress.update(row)
        return state


def default_workdir() -> pathlib.Path:
    return pathlib.Path("runs") / datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
