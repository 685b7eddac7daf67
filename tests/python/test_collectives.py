"""Every collective of the bindings on 1-3 CPU ranks (separate processes) against numpy
references: all dtypes numpy has, every reduce op, sizes 0/1/7/33, non-zero roots, sync and async.
Runs on the Python reference backend (always) and the native cpu backend (when built).
Layer: tests (Python)."""

import numpy as np
import pytest

import commx
import store_backend
from ranks import run_ranks
from refs import FLOATS, INTS, SIZES, assert_close, data, ops_for, reduce_ref

ALL_DTYPES = FLOATS + INTS + [np.bool_]
# The Python reference backend is slow (a store round trip per piece): it checks the bindings on
# a subset; the native backends get every dtype.
REF_DTYPES = [np.float32, np.float64, np.int32, np.uint8, np.bool_]


def dtypes_for(backend):
    return REF_DTYPES if backend == "pystore" else ALL_DTYPES


def _backends():
    out = ["pystore"]
    if commx._C.has_backend("cpu"):
        out.append("cpu")
    return out


BACKENDS = _backends()
WORLDS = [1, 2, 3]


def make_comm(backend, rank, size, store, name="test"):
    if backend == "pystore":
        store_backend.register()
    return commx.new_comm(backend, "cpu", name, store=store, rank=rank, size=size, timeout=30)


def _all_reduce(rank, size, store, backend, async_op):
    comm = make_comm(backend, rank, size, store)
    checked = 0
    for dtype in dtypes_for(backend):
        for op in ops_for(dtype):
            for n in SIZES:
                t = data(rank, n, dtype, salt=checked)
                want = reduce_ref([data(r, n, dtype, salt=checked) for r in range(size)], op)
                w = comm.all_reduce(t, op, async_op=async_op)
                if async_op:
                    w.wait()
                assert w.is_completed()
                assert_close(t, want, f"all_reduce {np.dtype(dtype)} {op} n={n}")
                checked += 1
    # torch.distributed's spelling and torchcomms' positional async_op.
    t = np.ones(5, np.float32)
    comm.allreduce(t, commx.ReduceOp.SUM, False).wait()
    assert_close(t, np.full(5, size, np.float32), "allreduce alias")
    comm.finalize()
    return checked


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
@pytest.mark.parametrize("async_op", [False, True])
def test_all_reduce(backend, size, async_op):
    counts = run_ranks(size, _all_reduce, backend, async_op)
    assert counts[0] > 100


def _rooted(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    root = size - 1
    for dtype in dtypes_for(backend):
        for n in SIZES:
            # reduce: only the root's tensor is defined afterwards.
            op = ops_for(dtype)[0]
            t = data(rank, n, dtype, salt=1)
            comm.reduce(t, root, op)
            if rank == root:
                want = reduce_ref([data(r, n, dtype, salt=1) for r in range(size)], op)
                assert_close(t, want, f"reduce {np.dtype(dtype)} n={n}")
            # broadcast from the root.
            t = data(rank, n, dtype, salt=2)
            comm.broadcast(t, root)
            assert_close(t, data(root, n, dtype, salt=2), f"broadcast {np.dtype(dtype)} n={n}")
            # gather / gather_single to the root.
            inp = data(rank, n, dtype, salt=3)
            outs = [np.zeros(n, dtype) for _ in range(size)] if rank == root else []
            comm.gather(outs, inp, root)
            single = np.zeros(n * size, dtype)
            comm.gather_single(single, inp, root)
            if rank == root:
                for r in range(size):
                    assert_close(outs[r], data(r, n, dtype, salt=3), f"gather from {r}")
                assert_close(single, np.concatenate([data(r, n, dtype, salt=3)
                                                     for r in range(size)]), "gather_single")
            # scatter from the root.
            ins = [data(100 + r, n, dtype) for r in range(size)] if rank == root else []
            out = np.zeros(n, dtype)
            comm.scatter(out, ins, root)
            assert_close(out, data(100 + rank, n, dtype), f"scatter {np.dtype(dtype)} n={n}")
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
def test_rooted_collectives(backend, size):
    run_ranks(size, _rooted, backend)


def _gathers(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    for dtype in dtypes_for(backend):
        for n in SIZES:
            inp = data(rank, n, dtype)
            outs = [np.zeros(n, dtype) for _ in range(size)]
            comm.all_gather(outs, inp)
            for r in range(size):
                assert_close(outs[r], data(r, n, dtype), f"all_gather {np.dtype(dtype)} n={n}")
            single = np.zeros(n * size, dtype)
            comm.all_gather_single(single, inp)
            assert_close(single, np.concatenate([data(r, n, dtype) for r in range(size)]),
                         "all_gather_single")
            # all_gather_v: rank r contributes n + r elements.
            vin = data(rank, n + rank, dtype, salt=5)
            vouts = [np.zeros(n + r, dtype) for r in range(size)]
            comm.all_gather_v(vouts, vin)
            for r in range(size):
                assert_close(vouts[r], data(r, n + r, dtype, salt=5), "all_gather_v")
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
def test_all_gathers(backend, size):
    run_ranks(size, _gathers, backend)


def _reduce_scatters(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    for dtype in dtypes_for(backend):
        for op in ops_for(dtype)[:4]:
            for n in SIZES:
                # Each rank's full input is size*n elements; chunk d goes to rank d.
                full = [data(r, n * size, dtype, salt=6) for r in range(size)]
                want = reduce_ref([f[rank * n:(rank + 1) * n] for f in full], op)
                out = np.zeros(n, dtype)
                comm.reduce_scatter_single(out, full[rank].copy(), op)
                assert_close(out, want, f"reduce_scatter_single {np.dtype(dtype)} {op} n={n}")
                out = np.zeros(n, dtype)
                comm.reduce_scatter(out, [full[rank][d * n:(d + 1) * n].copy()
                                          for d in range(size)], op)
                assert_close(out, want, f"reduce_scatter {np.dtype(dtype)} {op} n={n}")
                # reduce_scatter_v: chunk d has n + d elements.
                pieces = {r: [data(r * 10 + d, n + d, dtype) for d in range(size)]
                          for r in range(size)}
                out = np.zeros(n + rank, dtype)
                comm.reduce_scatter_v(out, pieces[rank], op)
                want = reduce_ref([pieces[r][rank] for r in range(size)], op)
                assert_close(out, want, f"reduce_scatter_v {np.dtype(dtype)} {op} n={n}")
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
def test_reduce_scatters(backend, size):
    run_ranks(size, _reduce_scatters, backend)


def _all_to_alls(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)

    def piece(src, dst, n, dtype):
        return data(1000 * src + dst, n, dtype, salt=8)

    for dtype in dtypes_for(backend):
        for n in SIZES:
            ins = [piece(rank, d, n, dtype) for d in range(size)]
            outs = [np.zeros(n, dtype) for _ in range(size)]
            comm.all_to_all(outs, ins)
            for s in range(size):
                assert_close(outs[s], piece(s, rank, n, dtype), f"all_to_all from {s}")
            out = np.zeros(n * size, dtype)
            comm.all_to_all_single(out, np.concatenate(ins))
            assert_close(out, np.concatenate([piece(s, rank, n, dtype) for s in range(size)]),
                         "all_to_all_single")
            # v: src sends (src + dst + n) % 4 elements to dst.
            cnt = lambda s, d: (s + d + n) % 4  # noqa: E731
            vin = np.concatenate([piece(rank, d, cnt(rank, d), dtype) for d in range(size)])
            in_splits = [cnt(rank, d) for d in range(size)]
            out_splits = [cnt(s, rank) for s in range(size)]
            vout = np.zeros(sum(out_splits), dtype)
            comm.all_to_all_v_single(vout, vin, out_splits, in_splits)
            assert_close(vout, np.concatenate([piece(s, rank, cnt(s, rank), dtype)
                                               for s in range(size)]), "all_to_all_v_single")
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
def test_all_to_alls(backend, size):
    run_ranks(size, _all_to_alls, backend)


def _p2p(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    comm.barrier()
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for n in SIZES:
        # A ring with async sends and blocking receives.
        send = data(rank, n, np.float32, salt=9)
        recv = np.zeros(n, np.float32)
        if size > 1:
            w = comm.send(send, nxt, async_op=True)
            comm.recv(recv, prv)
            w.wait()
            assert_close(recv, data(prv, n, np.float32, salt=9), f"send/recv n={n}")
        if size == 1:
            continue  # a rank may not send to itself
        # The same ring through batch_op_create.
        recv = np.zeros(n, np.int64)
        batch = comm.batch_op_create()
        batch.send(data(rank, n, np.int64, salt=10), nxt)
        batch.recv(recv, prv)
        batch.issue(async_op=True).wait()
        assert_close(recv, data(prv, n, np.int64, salt=10), f"batch send/recv n={n}")
    comm.barrier(async_op=True).wait()
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("size", WORLDS)
def test_p2p_and_barrier(backend, size):
    run_ranks(size, _p2p, backend)


def _async_many(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    tensors = [data(rank, 17, np.float64, salt=i) for i in range(8)]
    works = [comm.all_reduce(t, commx.ReduceOp.MAX, async_op=True) for t in tensors]
    for i, (t, w) in enumerate(zip(tensors, works)):
        w.wait()
        assert w.is_completed() and w.status() == commx.WorkStatus.COMPLETED
        want = reduce_ref([data(r, 17, np.float64, salt=i) for r in range(size)],
                          commx.ReduceOp.MAX)
        assert_close(t, want, f"async all_reduce #{i}")
    # A Work dropped before it ends keeps its tensors alive until the op completes.
    comm.all_gather_single(np.zeros(4 * size, np.int32), np.full(4, rank, np.int32),
                           async_op=True)
    comm.barrier()
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_async_work(backend):
    run_ranks(2, _async_many, backend)


def _split(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    group = [2, 0]  # new rank = position in the list
    sub = comm.split(group if rank in group else [], "pair")
    if rank not in group:
        assert sub is None
    else:
        assert sub.get_rank() == group.index(rank) and sub.get_size() == 2
        assert sub.get_name() == "pair"
        t = np.array([rank + 1.0], np.float32)
        sub.all_reduce(t, commx.ReduceOp.SUM)
        assert t[0] == 4.0, t  # ranks 2 and 0: 3 + 1
        sub.finalize()
    # A rank missing from a non-empty list is an error.
    with pytest.raises(commx.InvalidArgumentError, match="not in the list"):
        comm.split([r for r in range(size) if r != rank], "bad")
    comm.barrier()
    comm.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_split(backend):
    run_ranks(3, _split, backend)


def _shrink(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    t = np.array([1.0], np.float32)
    comm.all_reduce(t, commx.ReduceOp.SUM)
    if rank == 1:
        return True  # leaves: the others go on without it
    with pytest.raises(commx.InvalidArgumentError, match="exclude list"):
        comm.shrink([rank], "self")
    sub = comm.shrink([1], "survivors")
    assert sub.get_rank() == (0 if rank == 0 else 1) and sub.get_size() == 2
    t = np.arange(5, dtype=np.float32) + 10 * rank
    sub.all_reduce(t, commx.ReduceOp.SUM)
    np.testing.assert_array_equal(t, np.arange(5, dtype=np.float32) * 2 + 20)  # ranks 0 and 2
    sub.finalize()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_shrink(backend):
    run_ranks(3, _shrink, backend)


def _timeout(rank, size, store, backend):
    comm = make_comm(backend, rank, size, store)
    comm.barrier()
    result = "skipped"
    if rank == 0:  # rank 1 never joins this all_reduce: it must end at its deadline
        t = np.ones(4, np.float32)
        with pytest.raises(commx.TimeoutError) as e:
            w = comm.all_reduce(t, commx.ReduceOp.SUM, async_op=True, timeout=1.0)
            w.wait()
        assert e.value.code == commx.ErrorCode.TIMEOUT
        result = str(e.value)
    store.set(f"timeout_done/{rank}", "1")
    store.wait([f"timeout_done/{r}" for r in range(size)])
    comm.abort()
    return result


@pytest.mark.parametrize("backend", BACKENDS)
def test_timeout_when_a_peer_is_missing(backend):
    results = run_ranks(2, _timeout, backend)
    assert "all_reduce" in results[0] or "Timeout" in results[0], results[0]


def _gil_released(rank, size, store, backend):
    import threading
    import time
    comm = make_comm(backend, rank, size, store)
    comm.barrier()
    ticks = 0
    if rank == 0:
        stop = threading.Event()

        def spin():
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                time.sleep(0.001)
        th = threading.Thread(target=spin)
        th.start()
        t = np.ones(4, np.float32)
        comm.all_reduce(t, commx.ReduceOp.SUM)  # rank 1 joins 0.5 s late: we block here
        stop.set()
        th.join()
    else:
        time.sleep(0.5)
        comm.all_reduce(np.ones(4, np.float32), commx.ReduceOp.SUM)
    comm.finalize()
    return ticks


@pytest.mark.parametrize("backend", BACKENDS)
def test_gil_released_while_communicating(backend):
    ticks = run_ranks(2, _gil_released, backend)
    assert ticks[0] > 50, ticks  # a Python thread kept running during the blocking op


def _window(rank, size, store, backend, transport):
    if backend == "cpu":
        comm = commx.new_comm("cpu", "cpu", "win", store=store, rank=rank, size=size, timeout=30,
                              hints={"transport": transport})
    else:
        comm = make_comm(backend, rank, size, store, name="win")
    if backend != "cpu":
        with pytest.raises(commx.UnsupportedError, match="no one-sided windows"):
            comm.new_window(4, "float32")
        return True
    n = 7
    for dtype in (np.float32, np.int64, "float64"):
        win = comm.new_window(size * n, dtype)
        np_type = np.dtype(dtype)
        for rnd in range(2):
            for dst in range(size):
                block = (np.arange(n) + 1000 * rank + 100 * dst + 10 * rnd).astype(np_type)
                win.put(block, dst, rank * n)
                win.signal(dst)
            works = [win.wait_signal(src, async_op=True) for src in range(size)]
            for w in works:
                w.wait()
                assert w.is_completed()
            mine = win.local()
            for src in range(size):
                want = (np.arange(n) + 1000 * src + 100 * rank + 10 * rnd).astype(np_type)
                np.testing.assert_array_equal(mine[src * n:(src + 1) * n], want)
            if transport == "shm":
                theirs = win.map_remote_tensor((rank + 1) % size)
                assert theirs[rank * n] == 1000 * rank + 100 * ((rank + 1) % size) + 10 * rnd
            else:  # over TCP only this rank's buffer is here
                with pytest.raises(commx.UnsupportedError, match="not mapped"):
                    win.map_remote_tensor((rank + 1) % size)
            comm.barrier()
    with pytest.raises(commx.InvalidArgumentError, match="do not fit"):
        win.put(np.zeros(n + 1, np.float64), 0, size * n - n)
    with pytest.raises(commx.TimeoutError, match="rank"):
        win.wait_signal(0, timeout=0.2)
    comm.barrier()
    return True


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_window(backend, transport):
    run_ranks(3, _window, backend, transport)
