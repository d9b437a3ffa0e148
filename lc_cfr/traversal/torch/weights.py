"""Network parameters in shared memory (`WeightBoard`) and torch models fed from it (`NetSet`).

Networks are addressed by a net id: 0 and 1 are the advantage networks of players 0 and 1,
2 is the average-strategy network and 3 + k is league snapshot k, so a run with a league of
size K has `num_nets = 3 + K`.

`WeightBoard` keeps the parameters of all `num_nets` networks in one
`multiprocessing.shared_memory` block: a header of eight uint64 words (a sequence counter,
a magic number, num_nets and the parameter count P) followed by a float32 array
[num_nets, P] holding each network's canonical layout (`lc_cfr.nets.mlp.layout_shapes`
order, every array flattened C-order). The owner (the trainer process) publishes new
parameters; any process attaches by a small picklable `WeightBoardHandle` and reads them.

`NetSet` holds one `TorchMLP` per net id and refreshes their parameters from a board when
its version changes, so a process that evaluates networks (an inference server, a worker)
picks up new weights without any message besides the board itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Sequence
from multiprocessing import resource_tracker, shared_memory
from typing import Any

import numpy as np
import torch

from lc_cfr.nets.mlp import NetworkSpec, check_layout, layout_shapes
from lc_cfr.nets.torch_mlp import TorchMLP, resolve_device

# 64 bytes keeps the parameter array cache-line (and float32 SIMD) aligned.
_HEADER_WORDS = 8
_HEADER_BYTES = _HEADER_WORDS * 8
_MAGIC = 0x4C43_4346_5257_4231  # "LCCFRWB1": rejects attaching to an unrelated block.
_SEQ, _MAGIC_WORD, _NUM_NETS_WORD, _NUM_PARAMS_WORD = range(4)

_TRACKER_PATCH_LOCK = threading.Lock()


def attach_untracked(name: str) -> shared_memory.SharedMemory:
    """Opens an existing shared-memory block without registering it with a resource tracker.

    Only the creator of a block should own its cleanup. Before Python 3.13, attaching with
    `SharedMemory(name=...)` also registers the block with this process's resource tracker
    (bpo-39959), and a tracker unlinks every block still registered when the processes
    using it are gone, so a process with a tracker of its own deletes the block under the
    owner's feet when it exits. The usual workaround, calling
    `resource_tracker.unregister` right after attaching, is wrong for children started by
    `multiprocessing` (spawn, forkserver or fork): they share the parent's tracker, which
    keeps one set entry per name, so the child's unregister drops the *owner's*
    registration too (no cleanup if the owner crashes) and the owner's own unlink later
    makes the tracker print a KeyError traceback. Skipping the registration altogether is
    correct in both cases: Python 3.13+ has `track=False` for that; on 3.11/3.12 the
    module-level `register` is swapped, under a lock, for one that drops only this name.

    Args:
        name: the block's name (`SharedMemory.name`).

    Returns:
        The attached block; call `close()` on it, never `unlink()` (the owner does that).

    Raises:
        FileNotFoundError: when no block of that name exists.
    """
    if sys.version_info >= (3, 13):
        return shared_memory.SharedMemory(name=name, track=False)
    original = resource_tracker.register
    bare = name.lstrip("/")

    def register(resource: str, rtype: str) -> None:
        if rtype == "shared_memory" and resource.lstrip("/") == bare:
            return
        original(resource, rtype)

    with _TRACKER_PATCH_LOCK:
        resource_tracker.register = register
        try:
            return shared_memory.SharedMemory(name=name)
        finally:
            resource_tracker.register = original


def num_params(spec: NetworkSpec) -> int:
    """P, the number of float32 parameters of one network of shape `spec`."""
    return sum(int(np.prod(shape)) for shape in layout_shapes(spec).values())


@dataclasses.dataclass(frozen=True)
class WeightBoardHandle:
    """What a process needs to attach to a `WeightBoard`: plain data, picklable anywhere.

    Attributes:
        name: the shared-memory block's name.
        spec: the network shape of every net on the board.
        num_nets: the number of networks (3 + league size).
    """

    name: str
    spec: NetworkSpec
    num_nets: int


class WeightBoard:
    """The parameters of all networks of a run in one shared-memory block.

    The owner (`create`) publishes; other processes `attach` and read. `version` counts
    completed publishes (0 before the first), so readers can tell cheaply whether anything
    changed. Publishing is a seqlock: the raw counter is odd while a publish is writing,
    and readers retry a copy that overlapped a publish, so a reader never sees a mix of
    old and new parameters even if it reads during a publish. There must be one writer
    only (the owner).
    """

    def __init__(
        self, shm: shared_memory.SharedMemory, spec: NetworkSpec, num_nets: int, *, owner: bool
    ):
        """Wraps an open block; use `create` or `attach` instead of calling this."""
        self.spec = spec
        self.num_nets = num_nets
        self.num_params = num_params(spec)
        self._owner = owner
        self._shm: shared_memory.SharedMemory | None = shm
        self._name = shm.name
        self._header = np.ndarray((_HEADER_WORDS,), np.uint64, buffer=shm.buf)
        self._params = np.ndarray(
            (num_nets, self.num_params), np.float32, buffer=shm.buf, offset=_HEADER_BYTES
        )
        self._keys = tuple(layout_shapes(spec).items())
        self._unlinked = False

    @classmethod
    def create(cls, spec: NetworkSpec, num_nets: int) -> WeightBoard:
        """A new zero-filled board owned by this process (version 0).

        Args:
            spec: the network shape of every net.
            num_nets: the number of networks (3 + league size), at least 1.

        Returns:
            The owning board; call `close()` and `unlink()` (or use it as a context
            manager) when the run ends.
        """
        if not isinstance(num_nets, int) or num_nets < 1:
            raise ValueError(f"num_nets must be an int >= 1, got {num_nets!r}")
        size = _HEADER_BYTES + 4 * num_nets * num_params(spec)
        shm = shared_memory.SharedMemory(create=True, size=size)
        board = cls(shm, spec, num_nets, owner=True)
        board._header[:] = 0
        board._header[_MAGIC_WORD] = _MAGIC
        board._header[_NUM_NETS_WORD] = num_nets
        board._header[_NUM_PARAMS_WORD] = board.num_params
        board._params[...] = 0.0
        return board

    @classmethod
    def attach(cls, handle: WeightBoardHandle) -> WeightBoard:
        """Attaches to the board of `handle` (any process; see `attach_untracked`).

        Raises:
            FileNotFoundError: when the block no longer exists.
            ValueError: when the block is not a board of this shape.
        """
        shm = attach_untracked(handle.name)
        header = np.ndarray((_HEADER_WORDS,), np.uint64, buffer=shm.buf).copy()
        expected = (_MAGIC, handle.num_nets, num_params(handle.spec))
        found = (
            int(header[_MAGIC_WORD]),
            int(header[_NUM_NETS_WORD]),
            int(header[_NUM_PARAMS_WORD]),
        )
        if found != expected:
            shm.close()
            raise ValueError(
                f"shared memory {handle.name!r} is not a weight board of {handle.num_nets} "
                f"nets x {expected[2]} parameters (header {found})"
            )
        return cls(shm, handle.spec, handle.num_nets, owner=False)

    def handle(self) -> WeightBoardHandle:
        """The picklable handle other processes attach with."""
        return WeightBoardHandle(name=self._name, spec=self.spec, num_nets=self.num_nets)

    @property
    def name(self) -> str:
        """The shared-memory block's name."""
        return self._name

    @property
    def is_owner(self) -> bool:
        """Whether this process created the board (and may publish and unlink it)."""
        return self._owner

    @property
    def version(self) -> int:
        """The number of completed publishes (a publish in progress is not counted)."""
        self._block()
        return int(self._header[_SEQ]) // 2

    def publish(self, layouts: Sequence[dict[str, Any]]) -> int:
        """Writes the parameters of every network, then bumps the version.

        Every layout is checked before anything is written, so a rejected publish leaves
        the board unchanged.

        Args:
            layouts: `num_nets` canonical layouts, indexed by net id (e.g. from
                `lc_cfr.nets.torch_mlp.to_layout` or `lc_cfr.nets.mlp.to_layout`).

        Returns:
            The new version.

        Raises:
            ValueError: on a wrong number of layouts or a missing, unexpected or misshapen
                key (the message names the net id and the key).
            RuntimeError: when this process does not own the board.
        """
        if not self._owner:
            raise RuntimeError("only the process that created a WeightBoard may publish")
        self._block()
        if len(layouts) != self.num_nets:
            raise ValueError(
                f"publish expects {self.num_nets} layouts (one per net id), got {len(layouts)}"
            )
        flat = np.empty_like(self._params)
        for net_id, layout in enumerate(layouts):
            try:
                check_layout(self.spec, layout)
            except ValueError as err:
                raise ValueError(f"net id {net_id}: {err}") from err
            offset = 0
            for key, shape in self._keys:
                size = int(np.prod(shape))
                flat[net_id, offset : offset + size] = np.asarray(layout[key], np.float32).ravel()
                offset += size
        seq = int(self._header[_SEQ])
        # Odd while writing: readers that overlap the copy below retry (see `_snapshot`).
        self._header[_SEQ] = seq + 1
        self._params[...] = flat
        self._header[_SEQ] = seq + 2
        return (seq + 2) // 2

    def layout(self, net_id: int) -> dict[str, np.ndarray]:
        """A copy of net `net_id`'s parameters in the canonical layout (float32 arrays)."""
        if not 0 <= net_id < self.num_nets:
            raise ValueError(f"net id must be in [0, {self.num_nets}), got {net_id}")
        row, _ = self.snapshot(net_id)
        layout = {}
        offset = 0
        for key, shape in self._keys:
            size = int(np.prod(shape))
            layout[key] = row[offset : offset + size].reshape(shape).copy()
            offset += size
        return layout

    def snapshot(self, net_id: int | None = None) -> tuple[np.ndarray, int]:
        """A consistent copy of the flat parameters and the version they belong to.

        Args:
            net_id: one net's row [P], or None for all of them [num_nets, P].

        Returns:
            (float32 copy, version).
        """
        self._block()
        source = self._params if net_id is None else self._params[net_id]
        spins = 0
        while True:
            before = int(self._header[_SEQ])
            if before % 2 == 0:
                copy = source.copy()
                if int(self._header[_SEQ]) == before:
                    return copy, before // 2
            # A publish is writing; it takes microseconds to milliseconds, so yield the CPU
            # after a few quick retries rather than spinning.
            spins += 1
            if spins > 8:
                time.sleep(1e-4)

    def close(self) -> None:
        """Unmaps the block in this process (idempotent). The owner must also `unlink`."""
        if self._shm is None:
            return
        # The numpy views export the buffer; SharedMemory.close refuses while they live.
        self._header = None
        self._params = None
        self._shm.close()
        self._shm = None

    def unlink(self) -> None:
        """Deletes the block (owner only, idempotent); attached processes keep their maps."""
        if not self._owner:
            raise RuntimeError("only the process that created a WeightBoard may unlink it")
        if self._unlinked:
            return
        self._unlinked = True
        if self._shm is not None:
            self._shm.unlink()
            return
        # Closed already: reopen by name just to unlink (SharedMemory.unlink also drops
        # the creation-time registration with the resource tracker).
        shm = attach_untracked(self._name)
        try:
            shm.unlink()
        finally:
            shm.close()

    def _block(self) -> shared_memory.SharedMemory:
        if self._shm is None:
            raise ValueError("the WeightBoard is closed")
        return self._shm

    def __enter__(self) -> WeightBoard:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._owner:
            self.unlink()
        self.close()


class NetSet:
    """One torch model per net id, refreshed from a `WeightBoard`.

    `sync()` copies new parameters into the existing modules (no new modules), so a model
    wrapped by `torch.compile` keeps its compiled code across publishes. `forward` groups
    rows by net id and runs one torch forward per distinct id.

    Attributes:
        forward_calls: number of `forward` calls with at least one row.
        forward_rows: total rows passed to `forward`.
        model_calls: total torch forwards (one per distinct net id per call).
    """

    def __init__(
        self,
        spec: NetworkSpec,
        board: WeightBoard,
        *,
        device: str | torch.device = "cpu",
        use_amp: bool = False,
        compile: bool = False,
    ):
        """Builds the models and loads the board's current parameters.

        Args:
            spec: the network shape; must equal the board's.
            board: the board to read (owned or attached); NetSet does not close it.
            device: "cpu", "cuda" or "cuda:N" (see `resolve_device`).
            use_amp: run the forward under `torch.autocast(..., dtype=torch.bfloat16)`;
                outputs are still returned as float32 (bfloat16 precision, though). A
                spec with compute_dtype='bfloat16' computes in bfloat16 without it (in
                `TorchMLP.forward`); use_amp is how a float32 spec does (`run.use_amp`).
            compile: optional: wrap each model in `torch.compile(dynamic=True)` the first
                time its net id is evaluated (compiling costs seconds per net and needs a
                working inductor toolchain; results equal the eager ones up to rounding).
        """
        if board.spec != spec:
            raise ValueError(f"NetSet spec {spec} differs from the board's {board.spec}")
        self.spec = spec
        self.board = board
        self.num_nets = board.num_nets
        self.device = resolve_device(device)
        self.use_amp = bool(use_amp)
        self.compile = bool(compile)
        self._models = []
        self._params = []
        keys = tuple(layout_shapes(spec))
        for _ in range(self.num_nets):
            model = TorchMLP(spec).to(self.device).eval().requires_grad_(False)
            named = dict(model.named_parameters())
            self._models.append(model)
            # Layout order, which is the board's flat order.
            self._params.append([named[key] for key in keys])
        self._runners: list[Any] = [None] * self.num_nets
        self._synced_version: int | None = None
        self.forward_calls = 0
        self.forward_rows = 0
        self.model_calls = 0
        self.sync()

    @property
    def synced_version(self) -> int | None:
        """The board version the models hold."""
        return self._synced_version

    def model(self, net_id: int) -> TorchMLP:
        """The (uncompiled) model of `net_id`, holding the last synced parameters."""
        return self._models[net_id]

    def sync(self) -> bool:
        """Reloads every model from the board if its version changed since the last sync.

        Returns:
            Whether parameters were reloaded.
        """
        if self.board.version == self._synced_version:
            return False
        flat, version = self.board.snapshot()
        # One host-to-device copy for all nets; the per-parameter copies are then on device.
        source = torch.from_numpy(flat).to(self.device)
        with torch.no_grad():
            for net_id, params in enumerate(self._params):
                offset = 0
                for param in params:
                    size = param.numel()
                    param.copy_(source[net_id, offset : offset + size].view_as(param))
                    offset += size
        self._synced_version = version
        return True

    def forward(self, net_ids: np.ndarray, obs: np.ndarray) -> np.ndarray:
        """Raw network outputs, each row by its own net id.

        Args:
            net_ids: [R] integer net ids in [0, num_nets).
            obs: [R, E] float32 encodings.

        Returns:
            [R, A] float32 raw outputs, in row order.

        Raises:
            ValueError: on mismatched shapes or a net id out of range.
        """
        ids = np.asarray(net_ids)
        obs = np.asarray(obs, dtype=np.float32)
        rows = self._check_rows(ids, obs)
        if rows == 0:
            return np.zeros((0, self.spec.num_actions), np.float32)
        self.forward_calls += 1
        self.forward_rows += rows
        first = int(ids[0])
        if rows == 1 or not (ids != first).any():
            # One network (every batch-1 call): no grouping, the least Python per call.
            self.model_calls += 1
            with self._mode():
                x = torch.from_numpy(np.ascontiguousarray(obs)).to(self.device)
                return self._runner(first)(x).float().cpu().numpy()
        # A stable sort makes each net id's rows one contiguous run.
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        ends = np.r_[starts[1:], rows]
        with self._mode():
            x = torch.from_numpy(np.ascontiguousarray(obs[order])).to(self.device)
            outs = [
                self._runner(int(sorted_ids[start]))(x[start:end])
                for start, end in zip(starts, ends, strict=True)
            ]
            y = outs[0] if len(outs) == 1 else torch.cat(outs)
            out_sorted = y.float().cpu().numpy()
        result = np.empty_like(out_sorted)
        result[order] = out_sorted
        self.model_calls += len(outs)
        return result

    def _mode(self) -> contextlib.AbstractContextManager:
        """inference_mode, plus bfloat16 autocast with use_amp (entered only then: even a
        disabled autocast costs microseconds per batch-1 call)."""
        if not self.use_amp:
            return torch.inference_mode()
        stack = contextlib.ExitStack()
        stack.enter_context(torch.inference_mode())
        stack.enter_context(torch.autocast(self.device.type, dtype=torch.bfloat16))
        return stack

    def _check_rows(self, ids: np.ndarray, obs: np.ndarray) -> int:
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"net_ids must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        rows = ids.shape[0]
        if obs.shape != (rows, self.spec.input_size):
            raise ValueError(
                f"obs must have shape ({rows}, {self.spec.input_size}) for {rows} net ids, "
                f"got {obs.shape}"
            )
        if rows and (ids.min() < 0 or ids.max() >= self.num_nets):
            raise ValueError(
                f"net ids must be in [0, {self.num_nets}), got range [{ids.min()}, {ids.max()}]"
            )
        return rows

    def _runner(self, net_id: int) -> Any:
        if not self.compile:
            return self._models[net_id]
        if self._runners[net_id] is None:
            self._runners[net_id] = torch.compile(self._models[net_id], dynamic=True)
        return self._runners[net_id]
