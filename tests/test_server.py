"""The shared-memory weight board, the NetSet and the batching inference server.

Child processes use the spawn context, as the trainer does. They run functions defined at
the top level of this module, which spawn children can import as `test_server` because
pytest (prepend import mode, no tests/__init__.py) puts tests/ on sys.path, and children
inherit the parent's sys.path (the same mechanism as `from traversal_helpers import ...`).

Tolerances: NetSet against the bare models 1e-6 (same float32 arithmetic, only the batch
composition differs); server answers against NetSet 1e-5 (a row's result can change in
the last bits with the batch it was computed in).
"""

import multiprocessing as mp
import os
import pickle
import signal
import threading
import time
import traceback
from multiprocessing import shared_memory

import numpy as np
import pytest
import torch

from lc_cfr.nets.mlp import NetworkSpec, layout_shapes
from lc_cfr.nets.torch_mlp import TorchMLP, to_layout
from lc_cfr.traversal.torch.server import InferenceServer, ServerClient
from lc_cfr.traversal.torch.weights import NetSet, WeightBoard, WeightBoardHandle

SPEC = NetworkSpec(input_size=12, num_actions=5, hidden_size=8, num_layers=2, activation="relu")
LEAGUE_SIZE = 1
NUM_NETS = 3 + LEAGUE_SIZE
E, A = SPEC.input_size, SPEC.num_actions
NETSET_TOL = 1e-6
SERVER_TOL = 1e-5


def _models(seed):
    generator = torch.Generator().manual_seed(seed)
    return [TorchMLP(SPEC, generator=generator) for _ in range(NUM_NETS)]


def _layouts(seed):
    return [to_layout(model) for model in _models(seed)]


def _rows(rng, count):
    ids = rng.integers(0, NUM_NETS, size=count).astype(np.int32)
    obs = rng.standard_normal((count, E)).astype(np.float32)
    return ids, obs


def _direct(models, ids, obs):
    """Each row through its own net's model, computed on the whole batch then picked."""
    with torch.no_grad():
        outs = [model(torch.from_numpy(obs)).numpy() for model in models]
    return np.stack([outs[net_id][row] for row, net_id in enumerate(ids)])


# ------------------------------------------------------------- spawn-child entry points
def _board_child(handle, results):
    board = WeightBoard.attach(handle)
    try:
        results.put((board.version, [board.layout(i) for i in range(board.num_nets)]))
    finally:
        board.close()


def _client_child(handle, seed, num_requests, results):
    try:
        rng = np.random.default_rng(seed)
        records = []
        with ServerClient(handle) as client:
            for _ in range(num_requests):
                ids, obs = _rows(rng, int(rng.integers(1, client.rows_per_slot + 1)))
                records.append((ids, obs, client.evaluate(ids, obs)))
        results.put((seed, None, records))
    except BaseException:
        results.put((seed, traceback.format_exc(), None))


# ---------------------------------------------------------------------------- fixtures
@pytest.fixture
def board():
    with WeightBoard.create(SPEC, NUM_NETS) as board:
        board.publish(_layouts(seed=0))
        yield board


@pytest.fixture(scope="module")
def served():
    """One server for the server tests: (board, server), the board at seed 0 on entry."""
    with WeightBoard.create(SPEC, NUM_NETS) as board:
        board.publish(_layouts(seed=0))
        with InferenceServer(SPEC, board.handle(), num_slots=4, rows_per_slot=2) as server:
            yield board, server


@pytest.fixture
def fresh(served):
    board, server = served
    board.publish(_layouts(seed=0))
    server.batch_stats(reset=True)
    return board, server


def _gone(name):
    try:
        shared_memory.SharedMemory(name=name).close()
    except FileNotFoundError:
        return True
    return False


# ------------------------------------------------------------------------ weight board
def test_board_round_trip(board):
    layouts = _layouts(seed=0)
    assert board.version == 1
    for net_id, expected in enumerate(layouts):
        got = board.layout(net_id)
        assert list(got) == list(layout_shapes(SPEC))
        for key, value in expected.items():
            assert got[key].dtype == np.float32
            np.testing.assert_array_equal(got[key], value, strict=True)
    # layout() returns copies, not views of the shared block.
    board.layout(0)["output.bias"][:] = 7.0
    np.testing.assert_array_equal(board.layout(0)["output.bias"], layouts[0]["output.bias"])
    handle = pickle.loads(pickle.dumps(board.handle()))
    assert handle == board.handle()
    assert board.publish(_layouts(seed=1)) == 2 and board.version == 2


def test_board_rejects_bad_layouts(board):
    good = _layouts(seed=1)
    with pytest.raises(ValueError, match="expects 4 layouts"):
        board.publish(good[:3])
    missing = [dict(layout) for layout in good]
    del missing[2]["output.bias"]
    with pytest.raises(ValueError, match=r"net id 2: .*missing key 'output.bias'"):
        board.publish(missing)
    misshapen = [dict(layout) for layout in good]
    misshapen[3]["layer_0.weight"] = np.zeros((E, 8), np.float32)
    with pytest.raises(ValueError, match=r"net id 3: .*'layer_0.weight' has shape"):
        board.publish(misshapen)
    extra = [dict(layout) for layout in good]
    extra[0]["layer_9.weight"] = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="unexpected key"):
        board.publish(extra)
    # A rejected publish leaves the board as it was.
    assert board.version == 1
    np.testing.assert_array_equal(board.layout(0)["output.bias"], _layouts(0)[0]["output.bias"])


def test_board_attach_in_child(board):
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    child = ctx.Process(target=_board_child, args=(board.handle(), results))
    child.start()
    version, layouts = results.get(timeout=120)
    child.join(30)
    assert child.exitcode == 0
    assert version == board.version == 1
    for net_id, expected in enumerate(_layouts(seed=0)):
        for key, value in expected.items():
            np.testing.assert_array_equal(layouts[net_id][key], value)
    # The child's exit must not have taken the block with it.
    again = WeightBoard.attach(board.handle())
    np.testing.assert_array_equal(again.layout(1)["layer_1.bias"], layouts[1]["layer_1.bias"])
    again.close()


def test_board_attach_checks_and_unlink(board):
    handle = board.handle()
    wrong = WeightBoardHandle(name=handle.name, spec=handle.spec, num_nets=NUM_NETS + 1)
    with pytest.raises(ValueError, match="not a weight board"):
        WeightBoard.attach(wrong)
    reader = WeightBoard.attach(handle)
    with pytest.raises(RuntimeError, match="only the process that created"):
        reader.publish(_layouts(seed=1))
    reader.close()
    reader.close()
    board.unlink()
    board.unlink()
    with pytest.raises(FileNotFoundError):
        WeightBoard.attach(handle)


# -------------------------------------------------------------------------------- NetSet
def test_netset_forward_matches_models(board):
    netset = NetSet(SPEC, board)
    models = _models(seed=0)
    ids, obs = _rows(np.random.default_rng(3), 40)
    ids[:4] = [3, 0, 3, 2]  # every net id, interleaved
    out = netset.forward(ids, obs)
    assert out.dtype == np.float32 and out.shape == (40, A)
    np.testing.assert_allclose(out, _direct(models, ids, obs), rtol=NETSET_TOL, atol=NETSET_TOL)
    assert (netset.forward_calls, netset.forward_rows, netset.model_calls) == (1, 40, NUM_NETS)
    single = netset.forward(np.array([1], np.int32), obs[:1])
    np.testing.assert_allclose(single, _direct(models, [1], obs[:1]), rtol=NETSET_TOL, atol=0)
    assert netset.forward(np.zeros(0, np.int32), np.zeros((0, E), np.float32)).shape == (0, A)
    with pytest.raises(ValueError, match="net ids must be in"):
        netset.forward(np.array([NUM_NETS], np.int32), obs[:1])
    with pytest.raises(ValueError, match="obs must have shape"):
        netset.forward(ids, obs[:, :-1])


def test_netset_sync_follows_publishes(board):
    netset = NetSet(SPEC, board)
    ids, obs = _rows(np.random.default_rng(4), 16)
    assert netset.sync() is False
    before = netset.forward(ids, obs)
    board.publish(_layouts(seed=5))
    # Nothing reloads until sync().
    np.testing.assert_array_equal(netset.forward(ids, obs), before)
    assert netset.sync() is True
    assert netset.synced_version == board.version
    after = netset.forward(ids, obs)
    np.testing.assert_allclose(after, _direct(_models(5), ids, obs), rtol=NETSET_TOL, atol=1e-6)
    assert netset.sync() is False


def test_netset_amp_returns_float32(board):
    netset = NetSet(SPEC, board, use_amp=True)
    ids, obs = _rows(np.random.default_rng(6), 24)
    out = netset.forward(ids, obs)
    assert out.dtype == np.float32
    # bfloat16 keeps 8 bits of mantissa: agreement to about 1% of the values' scale.
    np.testing.assert_allclose(out, _direct(_models(0), ids, obs), rtol=5e-2, atol=5e-2)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_netset_cuda_without_cuda_names_run_device(board):
    with pytest.raises(ValueError, match="run.device"):
        NetSet(SPEC, board, device="cuda")
    with pytest.raises(ValueError, match="run.device"):
        InferenceServer(SPEC, board.handle(), num_slots=1, device="cuda")


# ---------------------------------------------------------------------- inference server
def test_server_answers_many_client_processes(fresh):
    board, server = fresh
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    handle = server.client_handle()
    seeds, num_requests = (11, 12, 13), 50
    clients = [
        ctx.Process(target=_client_child, args=(handle, seed, num_requests, results))
        for seed in seeds
    ]
    for client in clients:
        client.start()
    reports = [results.get(timeout=120) for _ in clients]
    for client in clients:
        client.join(30)
        assert client.exitcode == 0
    reference = NetSet(SPEC, board)
    total_rows = 0
    for seed, error, records in sorted(reports, key=lambda report: report[0]):
        assert error is None, f"client {seed} failed:\n{error}"
        assert len(records) == num_requests
        for ids, obs, out in records:
            assert out.dtype == np.float32 and out.shape == (len(ids), A)
            np.testing.assert_allclose(
                out, reference.forward(ids, obs), rtol=SERVER_TOL, atol=SERVER_TOL
            )
            total_rows += len(ids)
    stats = server.batch_stats(reset=True)
    assert set(stats) == {"batches", "rows", "max_rows"}
    assert stats["rows"] == total_rows
    assert 1 <= stats["batches"] <= len(seeds) * num_requests
    assert 1 <= stats["max_rows"] <= 4 * 2  # num_slots * rows_per_slot
    assert server.batch_stats()["rows"] == 0
    server.check()


def test_server_threads_share_few_slots(fresh):
    # Six threads on four slots: some must wait for a free slot (back-pressure).
    board, server = fresh
    client = ServerClient(server.client_handle())
    records, failures = [], []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for _ in range(20):
                ids, obs = _rows(rng, 2)
                records.append((ids, obs, client.evaluate(ids, obs)))
        except BaseException as err:
            failures.append(err)

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    client.close()
    assert not failures, failures
    reference = NetSet(SPEC, board)
    for ids, obs, out in records:
        np.testing.assert_allclose(
            out, reference.forward(ids, obs), rtol=SERVER_TOL, atol=SERVER_TOL
        )
    assert server.batch_stats()["rows"] == 6 * 20 * 2


def test_server_sees_published_weights(fresh):
    board, server = fresh
    ids, obs = _rows(np.random.default_rng(7), 2)
    with ServerClient(server.client_handle()) as client:
        old = client.evaluate(ids, obs)
        np.testing.assert_allclose(old, _direct(_models(0), ids, obs), rtol=1e-5, atol=1e-5)
        board.publish(_layouts(seed=8))
        new = client.evaluate(ids, obs)
        np.testing.assert_allclose(new, _direct(_models(8), ids, obs), rtol=1e-5, atol=1e-5)
        assert not np.allclose(old, new)


def test_server_client_rejects_bad_requests(fresh):
    _, server = fresh
    with ServerClient(server.client_handle()) as client:
        with pytest.raises(ValueError, match="rows_per_slot=2"):
            client.evaluate(np.zeros(3, np.int32), np.zeros((3, E), np.float32))
        with pytest.raises(ValueError, match="net ids must be in"):
            client.evaluate(np.array([NUM_NETS], np.int32), np.zeros((1, E), np.float32))
        assert client.evaluate(np.zeros(0, np.int32), np.zeros((0, E), np.float32)).shape == (
            0,
            A,
        )
    # Rejected requests never reach the server.
    assert server.batch_stats()["rows"] == 0


def test_server_start_failure_reports_child_error():
    missing = WeightBoardHandle(name="lc_cfr_no_such_board", spec=SPEC, num_nets=NUM_NETS)
    server = InferenceServer(SPEC, missing, num_slots=1)
    with pytest.raises(RuntimeError, match=r"failed to start:(.|\n)*FileNotFoundError"):
        server.start()
    server.stop()


def test_server_crash_is_detected(board):
    server = InferenceServer(SPEC, board.handle(), num_slots=2).start()
    handle = server.client_handle()
    client = ServerClient(handle)
    ids, obs = _rows(np.random.default_rng(9), 1)
    client.evaluate(ids, obs)
    os.kill(server.pid, signal.SIGKILL)

    start = time.monotonic()
    while True:
        try:
            server.check()
        except RuntimeError as err:
            assert "inference server died (exit code -9)" in str(err)
            break
        assert time.monotonic() - start < 2.0, "check() did not notice the dead server"
        time.sleep(0.01)

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="inference server died"):
        client.evaluate(ids, obs)
    assert time.monotonic() - start < 10.0
    client.close()

    server.stop()
    server.stop()
    assert _gone(handle.shm_name)
    # The board belongs to the parent and outlives the server.
    again = WeightBoard.attach(board.handle())
    assert again.version == 1
    again.close()


def test_server_stop_is_clean_and_idempotent(board):
    with InferenceServer(SPEC, board.handle(), num_slots=1) as server:
        handle = server.client_handle()
        ids, obs = _rows(np.random.default_rng(10), 2)
        with ServerClient(handle) as client:
            client.evaluate(ids, obs)
        process = server._process
        assert server.batch_stats(reset=False) == {"batches": 1, "rows": 2, "max_rows": 2}
    assert process.exitcode == 0
    assert _gone(handle.shm_name)
    server.stop()
    assert server.batch_stats() == {"batches": 1, "rows": 2, "max_rows": 2}
    with pytest.raises(RuntimeError, match="stopped"):
        server.check()
    with pytest.raises(RuntimeError, match="not running"):
        server.client_handle()
