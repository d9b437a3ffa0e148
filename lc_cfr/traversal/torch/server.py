"""An inference server process that batches network requests from many worker processes.

Worker processes run traversals; every network evaluation they need goes to one server
process, which gathers the requests of all workers into one batch per round and answers
them with one `NetSet.forward`. The parent starts the server (`InferenceServer`), hands
`client_handle()` to the workers at process creation, and each worker evaluates through a
`ServerClient`.

Transport, all in one shared-memory block plus a few semaphores (no pickling per request):

* `num_slots` request slots, each with room for `rows_per_slot` rows: net ids int32
  [rows], encodings float32 [rows, E], a row count, and the response float32 [rows, A].
* A pool of free slot ids (a ring in shared memory under a lock, counted by a
  semaphore): a client takes a slot, or waits when all are taken (back-pressure).
* A request ring: the client appends its slot id and releases the `announced` semaphore.
  The server waits for the first announcement, then drains every other one already made
  (up to `max_batch` rows), runs one forward, writes the responses and releases each
  slot's own semaphore, which wakes only the client of that slot.
* Parameters come from a `WeightBoard`: the server calls `NetSet.sync()` before every
  batch, so a parent's `board.publish(...)` reaches it with no message.

Crash detection: the server holds the only write end of a "lifeline" pipe whose read end
every client holds. The server never writes to it after start-up, so the read end becomes
readable (EOF) exactly when the server process is gone, even as an unreaped zombie, which
`os.kill(pid, 0)` would report alive. Clients wait with a timeout and look at the lifeline
after each one, so a worker whose server died raises RuntimeError instead of hanging.

The handle holds multiprocessing semaphores, which can be passed to a process only when
it is created: give it as an argument of `multiprocessing.Process` (spawn context) or in
`initargs` of a pool initializer, not through a queue or a pool task.
"""

from __future__ import annotations

import dataclasses
import multiprocessing as mp
import signal
import time
import traceback
from multiprocessing import shared_memory
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import torch

from lc_cfr.nets.mlp import NetworkSpec
from lc_cfr.nets.torch_mlp import resolve_device
from lc_cfr.traversal.torch.lifeline import exit_with_parent
from lc_cfr.traversal.torch.weights import (
    NetSet,
    WeightBoard,
    WeightBoardHandle,
    attach_untracked,
)

# Words of the int64 control array at the start of the block.
_STOP, _BATCHES, _ROWS, _MAX_ROWS, _FREE_HEAD, _FREE_TAIL, _REQ_TAIL = range(7)
_CONTROL_WORDS = 8
_ALIGN = 64

# The server waits this long for an announcement before it looks at the stop flag and the
# parent; it bounds the time `stop()` takes, not the latency of requests.
_SERVER_TICK_S = 0.1
_PARENT_CHECK_S = 1.0
_MAX_ERROR_CHARS = 16_000


@dataclasses.dataclass(frozen=True)
class _Dims:
    num_slots: int
    rows_per_slot: int
    input_size: int
    num_actions: int

    def fields(self) -> tuple[tuple[str, Any, tuple[int, ...]], ...]:
        n, r = self.num_slots, self.rows_per_slot
        return (
            ("control", np.int64, (_CONTROL_WORDS,)),
            ("free_ring", np.int64, (n,)),
            ("req_ring", np.int64, (n,)),
            ("counts", np.int64, (n,)),
            ("net_ids", np.int32, (n, r)),
            ("obs", np.float32, (n, r, self.input_size)),
            ("out", np.float32, (n, r, self.num_actions)),
        )

    def offsets(self) -> tuple[dict[str, int], int]:
        """Byte offset of every field (each 64-byte aligned) and the block size."""
        offsets, end = {}, 0
        for name, dtype, shape in self.fields():
            start = -(-end // _ALIGN) * _ALIGN
            offsets[name] = start
            end = start + np.dtype(dtype).itemsize * int(np.prod(shape))
        return offsets, end


class _SlotViews:
    """Numpy views of the fields of a server block."""

    def __init__(self, buf: memoryview, dims: _Dims):
        offsets, _ = dims.offsets()
        for name, dtype, shape in dims.fields():
            setattr(self, name, np.ndarray(shape, dtype, buffer=buf, offset=offsets[name]))

    control: np.ndarray
    free_ring: np.ndarray
    req_ring: np.ndarray
    counts: np.ndarray
    net_ids: np.ndarray
    obs: np.ndarray
    out: np.ndarray


@dataclasses.dataclass(frozen=True)
class ServerClientHandle:
    """What a worker needs to reach the server; see the module doc on how to pass it.

    Attributes:
        shm_name: the shared-memory block of the request slots.
        dims: slot count, rows per slot, E and A.
        num_nets: number of net ids (requests are checked against it).
        server_pid: the server's process id (for messages).
        free_lock: guards the free-slot ring.
        free_count: counts the free slots.
        request_lock: guards the request ring's tail.
        announced: released once per announced slot.
        done: one semaphore per slot, released when its response is written.
        lifeline: read end of the pipe that reaches EOF when the server is gone.
    """

    shm_name: str
    dims: _Dims
    num_nets: int
    server_pid: int
    free_lock: Any
    free_count: Any
    request_lock: Any
    announced: Any
    done: tuple[Any, ...]
    lifeline: Connection

    @property
    def rows_per_slot(self) -> int:
        """The most rows one `evaluate` call may send."""
        return self.dims.rows_per_slot


@dataclasses.dataclass(frozen=True)
class _ServerConfig:
    spec: NetworkSpec
    board: WeightBoardHandle
    device: str
    use_amp: bool
    compile: bool
    max_batch: int
    torch_threads: int


class ServerClient:
    """A worker's connection to the inference server (thread-safe; one per process is enough).

    Each `evaluate` takes a free slot, writes its rows, announces the slot and waits for
    the answer; it never waits longer than `poll_s` without checking that the server is
    still there.
    """

    def __init__(self, handle: ServerClientHandle, *, poll_s: float = 0.5):
        """Attaches to the server's request slots.

        Args:
            handle: from `InferenceServer.client_handle()`.
            poll_s: how long to wait between checks that the server is alive.
        """
        self._handle = handle
        self._dims = handle.dims
        self._poll_s = float(poll_s)
        self._shm: shared_memory.SharedMemory | None = attach_untracked(handle.shm_name)
        self._views: _SlotViews | None = _SlotViews(self._shm.buf, handle.dims)

    @property
    def rows_per_slot(self) -> int:
        """The most rows one `evaluate` call may send."""
        return self._dims.rows_per_slot

    def evaluate(self, net_ids: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Raw outputs of the networks for a few rows, each row by its own net id.

        Args:
            net_ids: [R] integer net ids in [0, num_nets), R <= rows_per_slot.
            obs: [R, E] float32 encodings.

        Returns:
            [R, A] float32 raw outputs (a fresh array), as `NetSet.forward` computes them
            with the parameters on the board when the server took the request.

        Raises:
            ValueError: on bad shapes, a net id out of range or more than rows_per_slot
                rows.
            RuntimeError: when the server died or was stopped.
        """
        views = self._open_views()
        ids = np.asarray(net_ids)
        obs = np.asarray(obs, dtype=np.float32)
        rows = self._check_rows(ids, obs)
        if rows == 0:
            return np.zeros((0, self._dims.num_actions), np.float32)
        handle = self._handle
        slot = self._take_slot(views)
        announced = False
        try:
            views.net_ids[slot, :rows] = ids
            views.obs[slot, :rows] = obs
            views.counts[slot] = rows
            with handle.request_lock:
                tail = int(views.control[_REQ_TAIL])
                views.req_ring[tail % self._dims.num_slots] = slot
                views.control[_REQ_TAIL] = tail + 1
            handle.announced.release()
            announced = True
            self._wait(handle.done[slot])
            result = views.out[slot, :rows].copy()
        except BaseException:
            # A slot announced to a live server may still be answered; handing it to
            # another client now would mix two requests, so it is given up for good.
            if not announced or self._server_gone() is not None:
                self._return_slot(views, slot)
            raise
        self._return_slot(views, slot)
        return result

    def close(self) -> None:
        """Detaches from the request slots (idempotent)."""
        if self._shm is None:
            return
        self._views = None
        self._shm.close()
        self._shm = None

    def __enter__(self) -> ServerClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _open_views(self) -> _SlotViews:
        if self._views is None:
            raise RuntimeError("the ServerClient is closed")
        return self._views

    def _check_rows(self, ids: np.ndarray, obs: np.ndarray) -> int:
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"net_ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        rows = ids.shape[0]
        if rows > self._dims.rows_per_slot:
            raise ValueError(
                f"evaluate takes at most rows_per_slot={self._dims.rows_per_slot} rows, got {rows}"
            )
        if obs.shape != (rows, self._dims.input_size):
            raise ValueError(
                f"obs must have shape ({rows}, {self._dims.input_size}) for {rows} net ids, "
                f"got {obs.shape}"
            )
        num_nets = self._handle.num_nets
        if rows and (ids.min() < 0 or ids.max() >= num_nets):
            raise ValueError(f"net ids must be in [0, {num_nets}), got {ids.tolist()}")
        return rows

    def _take_slot(self, views: _SlotViews) -> int:
        handle = self._handle
        self._wait(handle.free_count)
        with handle.free_lock:
            head = int(views.control[_FREE_HEAD])
            slot = int(views.free_ring[head % self._dims.num_slots])
            views.control[_FREE_HEAD] = head + 1
        return slot

    def _return_slot(self, views: _SlotViews, slot: int) -> None:
        handle = self._handle
        with handle.free_lock:
            tail = int(views.control[_FREE_TAIL])
            views.free_ring[tail % self._dims.num_slots] = slot
            views.control[_FREE_TAIL] = tail + 1
        handle.free_count.release()

    def _wait(self, semaphore: Any) -> None:
        while not semaphore.acquire(timeout=self._poll_s):
            problem = self._server_gone()
            if problem is not None:
                raise RuntimeError(problem)

    def _server_gone(self) -> str | None:
        """Why the server cannot answer any more, or None while it is running."""
        views = self._views
        if views is not None and views.control[_STOP]:
            return f"inference server stopped (pid {self._handle.server_pid})"
        try:
            gone = self._handle.lifeline.poll()
        except (OSError, ValueError):
            gone = True
        if gone:
            return f"inference server died (pid {self._handle.server_pid})"
        return None


class InferenceServer:
    """Owns the inference server process and its shared memory (the parent's side).

    Use as a context manager, or call `start()` and `stop()`. Between training
    iterations the parent publishes new parameters to the `WeightBoard`; the server picks
    them up before its next batch.
    """

    def __init__(
        self,
        spec: NetworkSpec,
        board_handle: WeightBoardHandle,
        *,
        num_slots: int,
        rows_per_slot: int = 2,
        device: str = "cpu",
        use_amp: bool = False,
        compile: bool = False,
        max_batch: int = 4096,
        torch_threads: int = 1,
        start_timeout_s: float = 300.0,
    ):
        """Checks the settings; nothing starts until `start()`.

        Args:
            spec: the network shape (must equal the board's).
            board_handle: `WeightBoard.handle()` of the board to serve.
            num_slots: request slots; at least the number of client processes (threads)
                that evaluate concurrently, or they wait for one another.
            rows_per_slot: the most rows one `evaluate` call may send.
            device: "cpu", "cuda" or "cuda:N" (run.device) for the server's NetSet.
            use_amp: bfloat16 autocast in the server's NetSet.
            compile: `torch.compile` the server's models (optional; see `NetSet`).
            max_batch: the most rows in one server forward; at least rows_per_slot.
            torch_threads: `torch.set_num_threads` in the server process.
            start_timeout_s: how long `start()` waits for the server to report ready.

        Raises:
            ValueError: on a bad setting (a CUDA device without CUDA names run.device).
        """
        for name, value, low in (
            ("num_slots", num_slots, 1),
            ("rows_per_slot", rows_per_slot, 1),
            ("max_batch", max_batch, 1),
            ("torch_threads", torch_threads, 1),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
        if max_batch < rows_per_slot:
            raise ValueError(f"max_batch ({max_batch}) must be >= rows_per_slot ({rows_per_slot})")
        if board_handle.spec != spec:
            raise ValueError(f"server spec {spec} differs from the board's {board_handle.spec}")
        resolve_device(device)
        self.spec = spec
        self._dims = _Dims(num_slots, rows_per_slot, spec.input_size, spec.num_actions)
        self._num_nets = board_handle.num_nets
        self._config = _ServerConfig(
            spec=spec,
            board=board_handle,
            device=str(device),
            use_amp=bool(use_amp),
            compile=bool(compile),
            max_batch=max_batch,
            torch_threads=torch_threads,
        )
        self._start_timeout_s = float(start_timeout_s)
        self._process: Any = None
        self._shm: shared_memory.SharedMemory | None = None
        self._views: _SlotViews | None = None
        self._handle: ServerClientHandle | None = None
        self._stats_lock: Any = None
        self._error_text = ""
        self._final_stats: dict[str, int] | None = None
        self._stopped = False

    @property
    def pid(self) -> int | None:
        """The server's process id (None before `start()`)."""
        return None if self._process is None else self._process.pid

    def start(self) -> InferenceServer:
        """Creates the slots, spawns the server and waits until it is ready.

        Returns:
            self.

        Raises:
            RuntimeError: with the server's traceback (or exit code) if it fails to start
                or does not report ready within start_timeout_s.
        """
        if self._process is not None or self._stopped:
            raise RuntimeError("an InferenceServer can be started once")
        ctx = mp.get_context("spawn")
        dims = self._dims
        _, size = dims.offsets()
        self._shm = shared_memory.SharedMemory(create=True, size=size)
        self._views = views = _SlotViews(self._shm.buf, dims)
        views.control[:] = 0
        views.free_ring[:] = np.arange(dims.num_slots)
        views.control[_FREE_TAIL] = dims.num_slots
        views.counts[:] = 0
        self._stats_lock = ctx.Lock()
        lifeline, lifeline_writer = ctx.Pipe(duplex=False)
        handle = ServerClientHandle(
            shm_name=self._shm.name,
            dims=dims,
            num_nets=self._num_nets,
            server_pid=0,
            free_lock=ctx.Lock(),
            free_count=ctx.Semaphore(dims.num_slots),
            request_lock=ctx.Lock(),
            announced=ctx.Semaphore(0),
            done=tuple(ctx.Semaphore(0) for _ in range(dims.num_slots)),
            lifeline=lifeline,
        )
        self._process = ctx.Process(
            target=_server_main,
            args=(self._config, handle, self._stats_lock, lifeline_writer),
            name="lc_cfr-inference-server",
            # Daemonic, so a parent that exits without stop() does not wait on it.
            daemon=True,
        )
        try:
            self._process.start()
        except BaseException:
            self._release_memory()
            raise
        finally:
            # The server must hold the only write end, or the lifeline never reaches EOF.
            lifeline_writer.close()
        self._handle = dataclasses.replace(handle, server_pid=self._process.pid)
        self._await_ready()
        return self

    def client_handle(self) -> ServerClientHandle:
        """The handle for `ServerClient` (pass it at worker process creation)."""
        if self._handle is None or self._stopped:
            raise RuntimeError("the inference server is not running (call start() first)")
        return self._handle

    def check(self) -> None:
        """Raises RuntimeError("inference server died (exit code N)...") unless it runs."""
        if self._process is None:
            raise RuntimeError("the inference server was not started")
        if self._stopped:
            raise RuntimeError("the inference server was stopped")
        if not self._process.is_alive():
            raise RuntimeError(
                f"inference server died (exit code {self._process.exitcode})" + self._error_suffix()
            )

    def batch_stats(self, reset: bool = True) -> dict[str, int]:
        """Batches served, rows served and the largest batch, since the last reset.

        Args:
            reset: zero the counters after reading them.

        Returns:
            {"batches": int, "rows": int, "max_rows": int}.
        """
        views = self._views
        if views is None:
            if self._final_stats is None:
                raise RuntimeError("the inference server was not started")
            stats = dict(self._final_stats)
            if reset:
                self._final_stats = dict.fromkeys(stats, 0)
            return stats
        # A server that died holding the lock must not hang the parent; a torn read of
        # three counters is the lesser harm then.
        locked = self._stats_lock.acquire(timeout=2.0)
        try:
            stats = {
                "batches": int(views.control[_BATCHES]),
                "rows": int(views.control[_ROWS]),
                "max_rows": int(views.control[_MAX_ROWS]),
            }
            if reset:
                views.control[[_BATCHES, _ROWS, _MAX_ROWS]] = 0
        finally:
            if locked:
                self._stats_lock.release()
        return stats

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stops the server, waits for it and frees the shared memory (idempotent).

        Clients still waiting get RuntimeError("inference server stopped ...").

        Args:
            timeout_s: how long to wait for a clean exit before terminating it.
        """
        if self._stopped:
            return
        self._stopped = True
        process = self._process
        if process is not None:
            if self._views is not None:
                self._views.control[_STOP] = 1
            process.join(timeout_s)
            if process.is_alive():
                process.terminate()
                process.join(2.0)
            if process.is_alive():
                process.kill()
                process.join()
            if self._views is not None:
                self._final_stats = self.batch_stats(reset=False)
        if self._handle is not None:
            self._handle.lifeline.close()
        self._release_memory()

    def __enter__(self) -> InferenceServer:
        if self._process is None:
            self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _await_ready(self) -> None:
        assert self._handle is not None
        lifeline = self._handle.lifeline
        deadline = time.monotonic() + self._start_timeout_s
        while True:
            try:
                if lifeline.poll(0.1):
                    kind, text = lifeline.recv()
                    if kind == "ready":
                        return
                    self._error_text = text
                    self._fail_start("inference server failed to start:\n" + text)
            except EOFError:
                self._process.join(5.0)
                self._fail_start(
                    f"inference server exited during start-up (exit code "
                    f"{self._process.exitcode}); see its stderr"
                )
            if time.monotonic() > deadline:
                self._fail_start(
                    f"inference server did not report ready within {self._start_timeout_s} s"
                )

    def _fail_start(self, message: str) -> None:
        self.stop(timeout_s=5.0)
        raise RuntimeError(message)

    def _error_suffix(self) -> str:
        if not self._error_text and self._handle is not None:
            try:
                if self._handle.lifeline.poll():
                    kind, text = self._handle.lifeline.recv()
                    if kind == "error":
                        self._error_text = text
            except (EOFError, OSError, ValueError):
                pass
        return f":\n{self._error_text}" if self._error_text else ""

    def _release_memory(self) -> None:
        self._views = None
        if self._shm is not None:
            self._shm.close()
            self._shm.unlink()
            self._shm = None


def _server_main(
    config: _ServerConfig,
    handle: ServerClientHandle,
    stats_lock: Any,
    lifeline: Connection,
) -> None:
    """The server process: attach, report ready on the lifeline, then serve until stopped."""
    # Ctrl-C reaches the whole process group; the parent decides when the server stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    exit_with_parent()  # nor its server
    board = shm = None
    try:
        torch.set_num_threads(config.torch_threads)
        board = WeightBoard.attach(config.board)
        netset = NetSet(
            config.spec,
            board,
            device=config.device,
            use_amp=config.use_amp,
            compile=config.compile,
        )
        shm = attach_untracked(handle.shm_name)
        views = _SlotViews(shm.buf, handle.dims)
    except BaseException:
        _report(lifeline, "error", traceback.format_exc()[-_MAX_ERROR_CHARS:])
        # start() raises the traceback in the parent; printing it here too is noise.
        raise SystemExit(1) from None
    _report(lifeline, "ready", "")
    try:
        _serve(config, handle, stats_lock, netset, views)
    except BaseException:
        # Read by the parent's check(); clients only see the pipe become readable.
        _report(lifeline, "error", traceback.format_exc()[-_MAX_ERROR_CHARS:])
        raise
    finally:
        views = None
        if shm is not None:
            shm.close()
        if board is not None:
            board.close()


def _report(lifeline: Connection, kind: str, text: str) -> None:
    """Sends (kind, text) to the parent; a parent that is already gone is not an error."""
    try:
        lifeline.send((kind, text))
    except OSError:
        pass


def _serve(
    config: _ServerConfig,
    handle: ServerClientHandle,
    stats_lock: Any,
    netset: NetSet,
    views: _SlotViews,
) -> None:
    """Batches announced slots until the stop flag is set or the parent is gone."""
    dims = handle.dims
    num_slots = dims.num_slots
    announced = handle.announced
    control = views.control
    parent = mp.parent_process()
    head = 0  # the request ring's head: only this process moves it
    carried = -1  # a slot that did not fit in the last batch
    next_parent_check = time.monotonic() + _PARENT_CHECK_S
    while not control[_STOP]:
        now = time.monotonic()
        if now > next_parent_check:
            # A parent killed outright never calls stop(); do not outlive it.
            if parent is not None and not parent.is_alive():
                return
            next_parent_check = now + _PARENT_CHECK_S
        if carried < 0:
            if not announced.acquire(timeout=_SERVER_TICK_S):
                continue
            carried = int(views.req_ring[head % num_slots])
            head += 1
        slots = [carried]
        rows = int(views.counts[carried])
        carried = -1
        # Every release of `announced` follows its ring entry, so each token acquired
        # here has a slot id waiting at the head.
        while rows < config.max_batch and announced.acquire(block=False):
            slot = int(views.req_ring[head % num_slots])
            head += 1
            count = int(views.counts[slot])
            if rows + count > config.max_batch:
                carried = slot
                break
            slots.append(slot)
            rows += count
        _answer(slots, dims, netset, views)
        # Counted before the wake-ups: once a client has its answer, the batch that
        # served it is in the statistics the parent reads after the traversal.
        with stats_lock:
            control[_BATCHES] += 1
            control[_ROWS] += rows
            control[_MAX_ROWS] = max(int(control[_MAX_ROWS]), rows)
        for slot in slots:
            handle.done[slot].release()


def _answer(slots: list[int], dims: _Dims, netset: NetSet, views: _SlotViews) -> None:
    """One forward for the rows of all `slots`; writes each slot's response."""
    index = np.asarray(slots, dtype=np.int64)
    counts = views.counts[index]
    used = np.arange(dims.rows_per_slot)[None, :] < counts[:, None]
    net_ids = views.net_ids[index][used]
    obs = views.obs[index][used]
    netset.sync()
    out = netset.forward(net_ids, obs)
    block = np.zeros((len(slots), dims.rows_per_slot, dims.num_actions), np.float32)
    block[used] = out
    views.out[index] = block
