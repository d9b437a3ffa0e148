"""The Cython + torch backends `recursive`, `interleaved` and `server`.

All three (docs/design.md section 4) run the C traversal of
`lc_cfr/traversal/cy_traversal.pyx` in a pool of `num_workers` spawned processes,
`chunk_size` traversals per task, and differ in who evaluates the networks and how many
traversals a worker advances together:

* `recursive`: one traversal at a time per worker, by recursion in C
  (`RecursiveTraversal`), a batch-1 torch forward per decision in the worker (the
  predecessor's design, kept to show what batch 1 costs);
* `interleaved` (Option B of the seeds): `interleave_width` suspendable traversals per
  worker (`TraversalCore`), all their pending requests in one batched forward of at most
  `interleave_max_batch` rows;
* `server` (Option A of the seeds): the recursion of `recursive` in every worker, every
  request sent through shared-memory slots to an inference server process that batches
  the requests of all workers (`lc_cfr.traversal.torch.server`).

Every iteration the parent publishes the parameters of all networks to a shared-memory
`WeightBoard` (weight sync); workers and the server reload when its version moves. The
samples come back as contiguous arrays of filled rows and land in the same fixed slots as
the `jax` backend's, so the trainer cannot tell the backends apart. With
`num_workers=0` the chunks run in the trainer's process (handy for tests and profiling).
"""

from __future__ import annotations

import concurrent.futures
import multiprocessing

import jax
import jax.numpy as jnp
import numpy as np
import torch

from lc_cfr.game.rules import Rules
from lc_cfr.nets import mlp
from lc_cfr.traversal import api
from lc_cfr.traversal.torch import WorkerSettings, weights
from lc_cfr.traversal.torch import server as server_lib
from lc_cfr.traversal.torch.workers import (
    CoreSettings,
    make_core,
    make_evaluator,
    run_chunk,
    sum_stats,
    worker_chunk,
    worker_init,
)

NAMES = ("recursive", "interleaved", "server")
DEVICES = ("cpu", "cuda")
WATCH_SECONDS = 0.5  # how often a waiting parent checks the server is alive


def check_settings(name: str, settings: WorkerSettings) -> None:
    """Raises ValueError naming the config field of a setting `name` cannot run with."""
    if name not in NAMES:
        raise ValueError(f"traversal.backend must be one of {NAMES} here, got {name!r}")
    if settings.num_workers < 0:
        raise ValueError(f"traversal.num_workers must be >= 0, got {settings.num_workers}")
    for field, value in (
        ("worker_chunk_size", settings.chunk_size),
        ("interleave_width", settings.interleave_width),
        ("interleave_max_batch", settings.interleave_max_batch),
    ):
        if value < 1:
            raise ValueError(f"traversal.{field} must be >= 1, got {value}")
    if name == "interleaved" and settings.interleave_width > settings.chunk_size:
        raise ValueError(
            f"traversal.interleave_width={settings.interleave_width} exceeds "
            f"traversal.worker_chunk_size={settings.chunk_size}: a task holds only "
            "worker_chunk_size traversals, so the extra contexts would never run"
        )
    if settings.league_size < 1:
        raise ValueError(f"self_play.league_size must be >= 1, got {settings.league_size}")
    device = settings.device.split(":")[0]
    if device not in DEVICES:
        raise ValueError(f"run.device must be 'cpu' or 'cuda[:N]', got {settings.device!r}")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("run.device='cuda' but torch sees no CUDA device here; use 'cpu'")
    if device == "cuda" and name != "server" and settings.num_workers > 0:
        raise ValueError(
            "run.device='cuda' with traversal.backend="
            f"{name!r} would give every worker process its own CUDA context; use "
            "backend 'server' (one process owns the GPU) or traversal.num_workers=0"
        )


# Modes of api.TraversalOptions that only the `jax` backend (and the reference)
# implement: (field, its value in the C core, config field).
JAX_ONLY_MODES = (
    ("expand_at", "root", "traversal.expand_at"),
    ("floor", 0.0, "regret_matching.floor"),
    ("outcome_estimator", "importance", "traversal.outcome_estimator"),
    ("draws", "any", "draws"),
)


def check_modes(name: str, options: api.TraversalOptions, spec: mlp.NetworkSpec) -> None:
    """Refuses, naming the field and the backends that have it, a mode the C core lacks."""
    if spec.head != "slot":
        raise ValueError(
            f"network.head={spec.head!r} is implemented by the jax backend only "
            f"(traversal.backend='jax'); the {name} backend's torch networks have the slot "
            "head (docs/backends.md)"
        )
    for field, supported, config_field in JAX_ONLY_MODES:
        value = getattr(options, field)
        if field == "expand_at" and options.sampling_mode == "outcome":
            continue  # outcome sampling never expands: the field is inert
        if value != supported:
            raise ValueError(
                f"{config_field}={value!r} is implemented by the jax backend only "
                f"(traversal.backend='jax'); the {name} backend runs {config_field}="
                f"{supported!r} (docs/backends.md)"
            )


def network_layouts(spec: mlp.NetworkSpec, networks: api.Networks, league_size: int) -> list[dict]:
    """Layouts in net-id order: advantage 0, advantage 1, strategy, league 0..K-1."""
    league = [jax.tree.map(lambda x, k=k: x[k], networks.league) for k in range(league_size)]
    trees = [networks.advantage[0], networks.advantage[1], networks.strategy, *league]
    return [mlp.to_layout(spec, jax.device_get(tree)) for tree in trees]


class TorchBackend:
    """One of `NAMES`; see the module docstring. Call `close()` when done."""

    def __init__(
        self,
        name: str,
        *,
        rules: Rules,
        spec: mlp.NetworkSpec,
        options: api.TraversalOptions,
        settings: WorkerSettings,
    ):
        check_settings(name, settings)
        api.validate_options(options, rules)
        check_modes(name, options, spec)
        self.name, self.rules, self.spec, self.options = name, rules, spec, options
        self.settings = settings
        self.slots = api.slots_per_traversal(rules, options)
        # recursive and server walk one traversal at a time by recursion (width 0)
        width = settings.interleave_width if name == "interleaved" else 0
        max_batch = settings.interleave_max_batch if name == "interleaved" else 2
        self.core_settings = CoreSettings(rules, options, width, max_batch)
        self.board = weights.WeightBoard.create(spec, 3 + settings.league_size)
        self.server = None
        self.pool = None
        self._local = None
        try:
            if name == "server":
                self.server = server_lib.InferenceServer(
                    spec,
                    self.board.handle(),
                    # a recursive worker has one request in flight at a time
                    num_slots=max(settings.num_workers, 1),
                    rows_per_slot=2,
                    device=settings.device,
                    use_amp=settings.use_amp,
                    compile=settings.compile,
                )
                self.server.start()
                evaluator = ("server", self.server.client_handle())
            else:
                evaluator = (
                    "netset",
                    self.board.handle(),
                    spec,
                    settings.device,
                    settings.use_amp,
                    settings.compile,
                )
            if settings.num_workers == 0:
                self._local = (make_core(self.core_settings), make_evaluator(evaluator))
            else:
                self.pool = concurrent.futures.ProcessPoolExecutor(
                    max_workers=settings.num_workers,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=worker_init,
                    initargs=(self.core_settings, evaluator),
                )
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        """Stops the pool and the server and frees the shared memory (idempotent)."""
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
            self.pool = None
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.board is not None:
            self.board.close()
            self.board.unlink()
            self.board = None
        self._local = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def traverse(self, networks, *, seed, iteration, traverser, epsilon=None):
        """The iteration's traversals for `traverser`: (Samples, stats dict)."""
        if epsilon is not None and epsilon != self.options.outcome_sampling_epsilon:
            raise ValueError(
                "traversal.epsilon_decay is implemented by the jax backend only "
                f"(traversal.backend='jax'); the {self.name} backend keeps "
                "traversal.outcome_sampling_epsilon"
            )
        if self.board is None:
            raise RuntimeError(f"the {self.name} backend is closed")
        self.board.publish(network_layouts(self.spec, networks, self.settings.league_size))
        total = self.options.traversals_per_player
        size = self.settings.chunk_size
        common = dict(
            seed=int(seed),
            iteration=int(iteration),
            traverser=int(traverser),
            game_base=int(traverser) * total,
            league_count=int(networks.league_count),
        )
        tasks = [
            dict(common, start=start, count=min(size, total - start))
            for start in range(0, total, size)
        ]
        if self.server is not None:
            self.server.batch_stats(reset=True)
        if self._local is not None:
            core, evaluate = self._local
            chunks = [
                run_chunk(core, evaluate, max_batch=self.core_settings.max_batch, **task)
                for task in tasks
            ]
        else:
            chunks = self._run_pool(tasks)
        stats = sum_stats(chunks)
        if self.server is not None:
            batches = self.server.batch_stats(reset=True)
            stats["forward_batches"] = batches["batches"]  # the server's batches count
            stats["server_rows"] = batches["rows"]
            stats["server_batch_max"] = batches["max_rows"]
        return self._assemble(chunks), stats

    def _run_pool(self, tasks):
        futures = []
        try:
            futures = [self.pool.submit(worker_chunk, task) for task in tasks]
            pending = set(futures)
            while pending:
                _, pending = concurrent.futures.wait(
                    pending, timeout=WATCH_SECONDS, return_when=concurrent.futures.FIRST_EXCEPTION
                )
                if self.server is not None:
                    self.server.check()  # a dead server fails the run within seconds
                for future in futures:
                    if future.done() and future.exception() is not None:
                        raise future.exception()
            return [future.result() for future in futures]
        except concurrent.futures.process.BrokenProcessPool as error:
            raise RuntimeError(
                f"a traversal worker of the {self.name} backend died: {error}"
            ) from error
        finally:
            for future in futures:
                future.cancel()

    def _assemble(self, chunks) -> api.Samples:
        """Scatters the chunks' rows into the fixed slots of `api.Samples`."""
        total = self.options.traversals_per_player
        e, a = self.rules.encoding_size, self.rules.num_actions
        arrays = {}
        for kind, per, last in (
            ("advantage", self.slots[0], "target"),
            ("strategy", self.slots[1], "policy"),
        ):
            rows = total * per
            info = np.zeros((rows, e), np.float32)
            mask = np.zeros((rows, a), bool)
            values = np.zeros((rows, a), np.float32)
            valid = np.zeros((rows,), bool)
            for chunk in chunks:
                part = chunk.rows[kind]
                slot = chunk.start * per + part["slot"]
                info[slot], mask[slot], values[slot], valid[slot] = (
                    part["info"],
                    part["mask"],
                    part[last],
                    True,
                )
            arrays[kind] = (info, mask, values, valid)
        return api.Samples(
            *(jnp.asarray(x) for x in arrays["advantage"]),
            *(jnp.asarray(x) for x in arrays["strategy"]),
        )
