"""Every binding with CUDA torch tensors on 2 GPUs (one process per rank, started with spawn so
the parent never touches CUDA), on the native `cuda` backend and on `nccl`: collectives against
float64 CPU references from random data, bit-identical reductions across ranks, non-zero roots,
p2p and batches, async Works, split, torch's current stream honoured (side streams, graph
capture), errors as exceptions. Skipped without torch or 2 GPUs. Layer: tests (Python)."""

import hashlib
import os

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import gpu_count, gpu_env, run_ranks  # noqa: E402

# COMMX_TEST_CUDA_AS_CPU=1 runs the same checks on CPU tensors with the cpu backend (the stream
# tests excepted): it checks this file's references and bookkeeping where there is no GPU.
AS_CPU = os.environ.get("COMMX_TEST_CUDA_AS_CPU") == "1"
DEV = "cpu" if AS_CPU else "cuda"
pytestmark = pytest.mark.skipif(not AS_CPU and gpu_count() < 2, reason="needs 2 GPUs")

BACKENDS = ["cpu"] if AS_CPU else ["cuda", "nccl"]
TIMEOUT = 240  # per test: spawn imports torch in every rank


def _run(fn, *args):
    gpu_env()
    return run_ranks(2, fn, *args, timeout=TIMEOUT, method="spawn")


# -- helpers (run inside the ranks) -----------------------------------------------------------

def _comm(backend, rank, size, store, name="c"):
    # "cuda" without an index: cuda:(rank % GPUs), made current (torchcomms' rule).
    comm = commx.new_comm(backend, torch.device(DEV), name, store=store, rank=rank, size=size,
                          timeout=60)
    if not AS_CPU:
        assert comm.get_device() == torch.device("cuda", rank), comm.get_device()
        assert torch.cuda.current_device() == rank
    return comm


def _data(rank, n, dtype, salt=0):
    """rank's input, generated on the CPU (every rank can compute every other's) and the float64
    value it holds after rounding to `dtype`."""
    g = torch.Generator().manual_seed(7919 * rank + 104729 * salt + n)
    if dtype.is_floating_point:
        x = torch.randn(n, generator=g, dtype=torch.float64) * 0.5 + 1.0
    else:
        x = torch.randint(-4, 5, (n,), generator=g, dtype=torch.float64)
    x = x.to(dtype)
    return x.to(DEV), x.to(torch.float64)


def _ref_reduce(xs, op):
    kind = op.kind
    acc = xs[0].clone()
    for x in xs[1:]:
        if kind in ("sum", "avg", "premulsum"):
            acc = acc + x
        elif kind == "prod":
            acc = acc * x
        elif kind == "min":
            acc = torch.minimum(acc, x)
        elif kind == "max":
            acc = torch.maximum(acc, x)
        else:
            raise ValueError(kind)
    if kind == "avg":
        acc = acc / len(xs)
    if kind == "premulsum":
        acc = acc * op.factor
    return acc


# Absolute and relative tolerance by result dtype (inputs are exact in it; one or two roundings).
_TOL = {torch.float32: 2e-6, torch.float64: 1e-12, torch.bfloat16: 1.6e-2, torch.float16: 2e-3}


def _check(got, want, what):
    tol = _TOL.get(got.dtype, 0)  # integers: exact
    got = got.detach().to("cpu", torch.float64).reshape(-1)
    want = want.reshape(-1)
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    if tol == 0:
        assert torch.equal(got, want), f"{what}: {got[:8]} != {want[:8]}"
    else:
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=what)


def _digest(t):
    return hashlib.sha1(t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def _sync():
    if not AS_CPU:
        torch.cuda.synchronize()


def _done(comm):
    _sync()
    comm.finalize()


# -- all_reduce: every op, f32/bf16/f16 (+ ints), sizes across every algorithm ------------------

SIZES = [0, 1, 7, 4097, 300_003, 2_000_003]  # LL, flat and tree paths (f32: 1.2 MB, 8 MB)


def _ops(backend, dtype):
    R = commx.ReduceOp
    if not dtype.is_floating_point:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]
    if backend != "nccl":  # the nccl backend has no premul_sum
        ops += [R.PREMUL_SUM(0.5), R.PREMUL_SUM(torch.tensor([0.25]))]
    return ops


def _all_reduce(rank, size, store, backend):
    comm = _comm(backend, rank, size, store)
    digests = {}
    i = 0
    for dtype in [torch.float32, torch.bfloat16, torch.float16, torch.int32]:
        for op in _ops(backend, dtype):
            for n in SIZES:
                i += 1
                t, _ = _data(rank, n, dtype, salt=i)
                want = _ref_reduce([_data(r, n, dtype, salt=i)[1] for r in range(size)], op)
                if i % 2:
                    comm.all_reduce(t, op, async_op=False)
                else:
                    comm.all_reduce(t, op, async_op=True).wait()
                what = f"all_reduce {op} {dtype} n={n}"
                _check(t, want, what)
                digests[what] = _digest(t)
    # allreduce alias and a 2-D tensor (seen as its flat elements).
    t = torch.full((3, 5), float(rank + 1), device=DEV)
    comm.allreduce(t, commx.ReduceOp.SUM)
    assert t.eq(3.0).all().item()
    _done(comm)
    return digests


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_reduce(backend):
    d0, d1 = _run(_all_reduce, backend)
    if backend != "nccl":  # NCCL does not promise it
        # Every rank reduces in the same order: results are bit-identical across ranks.
        diff = [k for k in d0 if d0[k] != d1[k]]
        assert not diff, f"results differ between ranks: {diff[:5]}"


# -- the other collectives --------------------------------------------------------------------

def _collectives(rank, size, store, backend):
    R = commx.ReduceOp
    comm = _comm(backend, rank, size, store)
    root = size - 1  # non-zero root
    salt = 0
    for dtype in [torch.float32, torch.bfloat16]:
        for n in [0, 1, 7, 33, 100_003]:
            salt += 1
            ins = [_data(r, n, dtype, salt) for r in range(size)]
            x, _ = ins[rank]
            refs = [ref for _, ref in ins]
            tag = f"{dtype} n={n}"
            # all_gather (list), all_gather_single, all_gather_v (uneven: rank r sends n + r)
            outs = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(size)]
            comm.all_gather(outs, x)
            for r in range(size):
                _check(outs[r], refs[r], f"all_gather {tag}")
            out = torch.empty(size * n, dtype=dtype, device=DEV)
            comm.all_gather_single(out, x, async_op=True).wait()
            _check(out, torch.cat(refs), f"all_gather_single {tag}")
            vin = [_data(r, n + r, dtype, salt + 100) for r in range(size)]
            vouts = [torch.empty(n + r, dtype=dtype, device=DEV) for r in range(size)]
            comm.all_gather_v(vouts, vin[rank][0])
            for r in range(size):
                _check(vouts[r], vin[r][1], f"all_gather_v {tag}")
            # reduce_scatter (list and single), reduce_scatter_v, SUM and AVG
            big = [_data(r, size * n, dtype, salt + 200) for r in range(size)]
            for op in [R.SUM, R.AVG]:
                want = _ref_reduce([b for _, b in big], op)[rank * n:(rank + 1) * n]
                o = torch.empty(n, dtype=dtype, device=DEV)
                comm.reduce_scatter_single(o, big[rank][0], op)
                _check(o, want, f"reduce_scatter_single {op} {tag}")
                o2 = torch.empty(n, dtype=dtype, device=DEV)
                comm.reduce_scatter(o2, list(big[rank][0].chunk(size)) if n else
                                    [big[rank][0][:0] for _ in range(size)], op, async_op=True).wait()
                _check(o2, want, f"reduce_scatter {op} {tag}")
            counts = [n + d for d in range(size)]
            vbig = [_data(r, sum(counts), dtype, salt + 300) for r in range(size)]
            off = sum(counts[:rank])
            want = _ref_reduce([b for _, b in vbig], R.SUM)[off:off + counts[rank]]
            o3 = torch.empty(counts[rank], dtype=dtype, device=DEV)
            comm.reduce_scatter_v(o3, list(vbig[rank][0].split(counts)), R.SUM)
            _check(o3, want, f"reduce_scatter_v {tag}")
            # all_to_all_single, all_to_all (lists), all_to_all_v_single (uneven splits)
            a = [_data(r, size * n, dtype, salt + 400) for r in range(size)]
            o4 = torch.empty(size * n, dtype=dtype, device=DEV)
            comm.all_to_all_single(o4, a[rank][0])
            _check(o4, torch.cat([a[s][1][rank * n:(rank + 1) * n] for s in range(size)]),
                   f"all_to_all_single {tag}")
            lo = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(size)]
            comm.all_to_all(lo, list(a[rank][0].split(n)) if n else
                            [a[rank][0][:0] for _ in range(size)])
            for s in range(size):
                _check(lo[s], a[s][1][rank * n:(rank + 1) * n], f"all_to_all {tag}")
            # rank s sends n + s + d elements to rank d
            split = {(s, d): n + s + d for s in range(size) for d in range(size)}
            v = [_data(s, sum(split[s, d] for d in range(size)), dtype, salt + 500)
                 for s in range(size)]
            in_splits = [split[rank, d] for d in range(size)]
            out_splits = [split[s, rank] for s in range(size)]
            o5 = torch.empty(sum(out_splits), dtype=dtype, device=DEV)
            comm.all_to_all_v_single(o5, v[rank][0], out_splits, in_splits, async_op=True).wait()
            want = torch.cat([v[s][1][sum(split[s, d] for d in range(rank)):][:split[s, rank]]
                              for s in range(size)])
            _check(o5, want, f"all_to_all_v_single {tag}")
            # broadcast / reduce / gather / gather_single / scatter from a non-zero root
            b = x.clone()
            comm.broadcast(b, root)
            _check(b, refs[root], f"broadcast root={root} {tag}")
            red = x.clone()
            comm.reduce(red, root, R.SUM, async_op=True).wait()
            if rank == root:
                _check(red, _ref_reduce(refs, R.SUM), f"reduce root={root} {tag}")
            gl = [torch.empty(n, dtype=dtype, device=DEV) for _ in range(size)]
            comm.gather(gl if rank == root else [], x, root)
            gs = torch.empty(size * n, dtype=dtype, device=DEV)
            comm.gather_single(gs, x, root)
            if rank == root:
                for r in range(size):
                    _check(gl[r], refs[r], f"gather {tag}")
                _check(gs, torch.cat(refs), f"gather_single {tag}")
            sc = [_data(root, n, dtype, salt + 600 + d) for d in range(size)]
            so = torch.empty(n, dtype=dtype, device=DEV)
            comm.scatter(so, [t for t, _ in sc] if rank == root else [], root)
            _check(so, sc[rank][1], f"scatter root={root} {tag}")
    _done(comm)
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_collectives(backend):
    _run(_collectives, backend)


# -- p2p, batches, barrier, Work --------------------------------------------------------------

def _p2p(rank, size, store, backend):
    comm = _comm(backend, rank, size, store)
    peer = 1 - rank
    for n in [1, 7, 100_003]:
        mine, _ = _data(rank, n, torch.float32, 1)
        _, theirs = _data(peer, n, torch.float32, 1)
        got = torch.empty(n, device=DEV)
        if rank == 0:  # send then recv on rank 0, the opposite on rank 1
            comm.send(mine, peer)
            comm.recv(got, peer)
        else:
            comm.recv(got, peer)
            comm.send(mine, peer)
        _check(got, theirs, f"send/recv n={n}")
        # Both directions at once through a batch (would deadlock as plain blocking ops).
        got2 = torch.empty(n, device=DEV)
        batch = comm.batch_op_create()
        batch.send(mine, peer).recv(got2, peer)
        assert batch.num_ops == 2
        w = batch.issue(async_op=True)
        w.wait()
        _check(got2, theirs, f"batch p2p n={n}")
        # async send/recv with waits
        got3 = torch.empty(n, device=DEV)
        ws = [comm.send(mine, peer, async_op=True)] if rank == 0 else []
        wr = comm.recv(got3, peer, async_op=True) if rank == 1 else None
        for w in ws:
            w.wait()
        if wr is not None:
            wr.wait()
            _check(got3, theirs, f"async recv n={n}")
    comm.barrier()
    w = comm.barrier(async_op=True)
    w.wait_blocking()
    assert w.is_completed() and w.status() == commx.WorkStatus.COMPLETED
    assert w.exception() is None
    _done(comm)
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_p2p_batch_barrier(backend):
    _run(_p2p, backend)


def _split(rank, size, store, backend):
    comm = _comm(backend, rank, size, store)
    # Reversed order: new rank = position in the list.
    sub = comm.split([1, 0], "rev")
    assert sub.get_rank() == 1 - rank and sub.get_size() == 2
    t = torch.full((5,), float(rank + 1), device=DEV)
    sub.all_reduce(t, commx.ReduceOp.SUM)
    assert t.eq(3.0).all().item()
    b = torch.full((3,), float(rank), device=DEV)
    sub.broadcast(b, 1)  # sub rank 1 = world rank 0
    assert b.eq(0.0).all().item()
    # A comm of one (rank 0 alone) and None for the rank that is not in it.
    solo = comm.split([0] if rank == 0 else [], "solo")
    if rank == 0:
        assert solo.get_size() == 1
        u = torch.arange(4.0, device=DEV)
        solo.all_reduce(u, commx.ReduceOp.SUM)
        assert u.tolist() == [0.0, 1.0, 2.0, 3.0]
        solo.finalize()
    else:
        assert solo is None
    _sync()
    sub.finalize()
    _done(comm)
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_split(backend):
    _run(_split, backend)


# -- streams: ops follow torch's current stream -----------------------------------------------

_SLEEP = int(2e8)  # torch.cuda._sleep cycles (~0.1 s): makes a missing stream dependency visible


def _streams(rank, size, store, backend):
    import time
    R = commx.ReduceOp
    comm = _comm(backend, rank, size, store)
    n = 1 << 16
    want = float(size * (size + 1) // 2)
    side = torch.cuda.Stream()
    # 1. A sync op issued on a side stream runs after the work queued before it there (a slow
    # kernel, then the fill); run on the default stream it would reduce the stale zeros.
    t = torch.zeros(n, device=DEV)
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(_SLEEP)
        t.fill_(rank + 1.0)
        comm.all_reduce(t, R.SUM)
        after = t * 2  # on the side stream: must see the reduced values
    side.synchronize()
    assert t.eq(want).all().item(), ("sync op on a side stream", t[:4])
    assert after.eq(2 * want).all().item()
    # 2. An async op issued on a side stream starts after that stream's queued work, and
    # wait() orders that stream (not only the default one) after the op. Rank 1 joins late,
    # so the op is still running when rank 0's consumer is queued.
    t2 = torch.zeros(n, device=DEV)
    torch.cuda.synchronize()
    comm.barrier()
    if rank == 1:
        time.sleep(0.3)
    with torch.cuda.stream(side):
        torch.cuda._sleep(_SLEEP)
        t2.fill_(rank + 1.0)
        w = comm.all_reduce(t2, R.SUM, async_op=True)
        w.wait()
        consumer = t2 * 2
    side.synchronize()
    assert consumer.eq(2 * want).all().item(), ("async wait on a side stream", consumer[:4])
    # 3. Issued on one side stream, waited on another.
    other = torch.cuda.Stream()
    t3 = torch.full((n,), rank + 1.0, device=DEV)
    torch.cuda.synchronize()
    comm.barrier()
    if rank == 1:
        time.sleep(0.3)
    with torch.cuda.stream(side):
        w = comm.all_reduce(t3, R.SUM, async_op=True)
    with torch.cuda.stream(other):
        w.wait()
        consumer3 = t3 + 1
    other.synchronize()
    assert consumer3.eq(want + 1).all().item(), ("wait on another stream", consumer3[:4])
    # 4. wait_blocking: the host sees the result without any stream sync; is_completed.
    t4 = torch.full((n,), rank + 1.0, device=DEV)
    w = comm.all_reduce(t4, R.SUM, async_op=True)
    w.wait_blocking()
    assert w.is_completed()
    torch.cuda.synchronize()
    assert t4.eq(want).all().item()
    # 5. CUDA graph capture (torch captures on a side stream): a sync all_reduce captured once,
    # replayed with new inputs (native backend).
    if backend == "cuda":
        g_t = torch.zeros(n, device=DEV)
        cap = torch.cuda.Stream()
        with torch.cuda.stream(cap):  # warm-up outside the capture, on a side stream
            comm.all_reduce(g_t, R.SUM)
        torch.cuda.synchronize()
        comm.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            comm.all_reduce(g_t, R.SUM)
        for k in range(3):
            g_t.fill_(float(rank + k))
            graph.replay()
            torch.cuda.synchronize()
            assert g_t.eq(float(sum(r + k for r in range(size)))).all().item(), (k, g_t[:4])
        comm.barrier()
        del graph
    # 6. Works and tensors dropped right after issue: the tensors live until the ops end.
    for k in range(4):
        comm.all_reduce(torch.full((n,), 1.0, device=DEV), R.SUM, async_op=True)
    t6 = torch.full((n,), rank + 1.0, device=DEV)
    comm.all_reduce(t6, R.SUM)
    torch.cuda.synchronize()
    assert t6.eq(want).all().item()
    _done(comm)
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_current_stream_is_honoured(backend):
    if AS_CPU:
        pytest.skip("streams need GPUs")
    _run(_streams, backend)


# -- errors -----------------------------------------------------------------------------------

def _errors(rank, size, store, backend):
    import threading
    import time
    R = commx.ReduceOp
    comm = _comm(backend, rank, size, store, name="errs")
    t = torch.ones(8, device=DEV)
    with pytest.raises(commx.InvalidArgumentError, match="all_gather_single") as e:
        comm.all_gather_single(torch.empty(3, device=DEV), t)
    assert e.value.code == commx.ErrorCode.INVALID_ARGUMENT
    assert "errs" in str(e.value) and f"rank {rank}" in str(e.value)
    if not AS_CPU:
        with pytest.raises(commx.InvalidArgumentError, match="device"):
            comm.all_reduce(torch.ones(4), R.SUM)  # a CPU tensor on a GPU comm
    with pytest.raises(commx.InvalidArgumentError, match="not contiguous"):
        comm.all_reduce(torch.ones(4, 4, device=DEV).t(), R.SUM)
    with pytest.raises(commx.InvalidArgumentError):
        comm.broadcast(t, 5)  # root out of range
    with pytest.raises(commx.InvalidArgumentError):
        comm.all_to_all_v_single(torch.empty(8, device=DEV), t, [4, 4], [4, 5])
    # Tensors that require grad are taken (their storage; as torchcomms' C++ does).
    p = torch.ones(4, device=DEV, requires_grad=True)
    comm.all_reduce(p, R.SUM)
    assert p.detach().eq(2.0).all().item()
    # The GIL is released while the host waits: a Python thread runs meanwhile.
    ticks = []
    stop = threading.Event()
    th = threading.Thread(target=lambda: [ticks.append(1) or time.sleep(0.005)
                                          for _ in iter(stop.is_set, True)])
    comm.barrier()
    if rank == 1:
        time.sleep(0.5)
    th.start()
    w = comm.all_reduce(torch.ones(4, device=DEV), R.SUM, async_op=True)
    w.wait_blocking()
    stop.set()
    th.join()
    if rank == 0:
        assert len(ticks) >= 10, len(ticks)
    comm.barrier()
    # A peer that never joins: the op ends at its deadline with TimeoutError (native backend).
    msg = ""
    if backend != "nccl" and rank == 0:
        with pytest.raises(commx.TimeoutError) as e:
            comm.all_reduce(torch.ones(4, device=DEV), R.SUM, async_op=True,
                            timeout=1.0).wait_blocking()
        assert e.value.code == commx.ErrorCode.TIMEOUT
        msg = str(e.value)
    store.set(f"errs_done/{rank}", "1")
    store.wait([f"errs_done/{r}" for r in range(size)])
    comm.abort()
    assert comm.is_aborted()
    with pytest.raises(commx.AbortedError):
        comm.all_reduce(t, R.SUM)
    return msg


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_are_exceptions(backend):
    msgs = _run(_errors, backend)
    if backend != "nccl":
        assert "all_reduce" in msgs[0], msgs[0]
    if backend == "cuda":  # the GPU names the peer it waited for
        assert "rank 1" in msgs[0], msgs[0]
