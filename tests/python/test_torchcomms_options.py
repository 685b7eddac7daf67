"""torchcomms' per-op option classes on commx (cpu backend, 2 ranks): each class built as
torchcomms documents it (no arguments, then timeout and hints), given to its op as options=, the
result checked against a reference; a class of another op is refused naming both; the call's own
timeout wins over the options'; ReconfigureOptions drives reconfigure. Layer: tests (Python)."""

import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=20)


def _v(rank, n=4):
    return torch.arange(n, dtype=torch.float32) + 10 * rank


def _opts(cls):
    o = cls()
    o.timeout = T
    o.hints = {"test": "1"}
    return o


def _every_op(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "opts", store=store, rank=rank, size=size)
    R, o, n = commx.ReduceOp, _opts, size
    want_sum = sum(_v(r) for r in range(n))

    t = _v(rank)
    comm.all_reduce(t, R.SUM, False, options=o(commx.AllReduceOptions))
    torch.testing.assert_close(t, want_sum)
    t = _v(rank)
    comm.broadcast(t, 1, False, options=o(commx.BroadcastOptions))
    torch.testing.assert_close(t, _v(1))
    t = _v(rank)
    comm.reduce(t, 0, R.SUM, False, options=o(commx.ReduceOptions))
    if rank == 0:
        torch.testing.assert_close(t, want_sum)
    t = _v(rank) if rank == 0 else torch.zeros(4)
    if rank == 0:
        comm.send(t, 1, False, options=o(commx.SendOptions))
    else:
        comm.recv(t, 0, False, options=o(commx.RecvOptions))
    torch.testing.assert_close(t, _v(0))
    outs = [torch.zeros(4) for _ in range(n)]
    comm.all_gather(outs, _v(rank), False, options=o(commx.AllGatherOptions))
    torch.testing.assert_close(torch.stack(outs), torch.stack([_v(r) for r in range(n)]))
    outs = [torch.zeros(r + 1) for r in range(n)]
    comm.all_gather_v(outs, _v(rank, rank + 1), False, options=o(commx.AllGatherOptions))
    torch.testing.assert_close(torch.cat(outs), torch.cat([_v(r, r + 1) for r in range(n)]))
    out = torch.zeros(4 * n)
    comm.all_gather_single(out, _v(rank), False, options=o(commx.AllGatherSingleOptions))
    torch.testing.assert_close(out, torch.cat([_v(r) for r in range(n)]))
    out = torch.zeros(4)
    comm.reduce_scatter(out, [_v(rank) + j for j in range(n)], R.SUM, False,
                        options=o(commx.ReduceScatterOptions))
    torch.testing.assert_close(out, want_sum + n * rank)
    out = torch.zeros(2)
    comm.reduce_scatter_single(out, _v(rank), R.SUM, False,
                               options=o(commx.ReduceScatterSingleOptions))
    torch.testing.assert_close(out, want_sum[2 * rank:2 * rank + 2])
    outs = [torch.zeros(2) for _ in range(n)]
    comm.all_to_all(outs, [torch.full((2,), 10.0 * rank + j) for j in range(n)], False,
                    options=o(commx.AllToAllOptions))
    torch.testing.assert_close(torch.stack(outs),
                               torch.stack([torch.full((2,), 10.0 * j + rank) for j in range(n)]))
    out = torch.zeros(4)
    comm.all_to_all_single(out, _v(rank), False, options=o(commx.AllToAllSingleOptions))
    torch.testing.assert_close(out, torch.cat([_v(r)[2 * rank:2 * rank + 2] for r in range(n)]))
    send = [rank + 1 + j for j in range(n)]  # rows of dim 0 to rank j
    recv = [j + 1 + rank for j in range(n)]
    inp = torch.cat([torch.full((send[j], 3), 10.0 * rank + j) for j in range(n)])
    out = torch.zeros(sum(recv), 3)
    comm.all_to_all_v_single(out, inp, recv, send, False, options=o(commx.AllToAllvSingleOptions))
    torch.testing.assert_close(out, torch.cat([torch.full((recv[j], 3), 10.0 * j + rank)
                                               for j in range(n)]))
    comm.barrier(False, options=o(commx.BarrierOptions))
    out = torch.zeros(4)
    comm.scatter(out, [_v(r) for r in range(n)] if rank == 1 else [], 1, False,
                 options=o(commx.ScatterOptions))
    torch.testing.assert_close(out, _v(rank))
    outs = [torch.zeros(4) for _ in range(n)] if rank == 0 else []
    comm.gather(outs, _v(rank), 0, False, options=o(commx.GatherOptions))
    if rank == 0:
        torch.testing.assert_close(torch.stack(outs), torch.stack([_v(r) for r in range(n)]))
    out = torch.zeros(4 * n)
    comm.gather_single(out, _v(rank), 0, False, options=o(commx.GatherOptions))
    if rank == 0:
        torch.testing.assert_close(out, torch.cat([_v(r) for r in range(n)]))
    out = torch.zeros(4 * n)
    h = comm.all_gather_p_init(out, options=o(commx.AllGatherPInitOptions))
    for k in range(2):
        comm.all_gather_p_exec(h, _v(rank) + k, True,
                               options=o(commx.AllGatherPExecOptions)).wait()
        torch.testing.assert_close(out, torch.cat([_v(r) for r in range(n)]) + k)
    comm.all_gather_p_free(h)
    b = comm.batch_op_create()
    got = torch.zeros(4)
    b.send(_v(rank), 1 - rank)
    b.recv(got, 1 - rank)
    b.issue(True, options=o(commx.BatchP2POptions)).wait()
    torch.testing.assert_close(got, _v(1 - rank))

    # Another op's class is refused before anything is sent, naming both.
    with pytest.raises(commx.InvalidArgumentError, match="all_reduce: options is a "
                       "BroadcastOptions; all_reduce takes AllReduceOptions"):
        comm.all_reduce(_v(rank), R.SUM, False, options=commx.BroadcastOptions())
    with pytest.raises(commx.InvalidArgumentError, match="issue takes BatchP2POptions"):
        comm.batch_op_create().issue(False, options=commx.SendOptions())
    comm.finalize()
    return True


def test_every_op_takes_its_option_class():
    run_ranks(2, _every_op)


def _timeouts(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "opts_timeout", store=store, rank=rank, size=size,
                          timeout=T)
    comm.set_timeout(T)  # a per-comm default: the options' timeout still wins over it
    if rank == 0:
        # Nobody sends: the options' timeout (0.3 s) bounds the receive, not the comm's 20 s.
        opts = commx.RecvOptions()
        opts.timeout = timedelta(seconds=0.3)
        start = time.monotonic()
        with pytest.raises(commx.TimeoutError):
            comm.recv(torch.zeros(4), 1, False, options=opts)
        assert time.monotonic() - start < 10
        store.set("opts/timed_out", "1")
    else:
        store.wait(["opts/timed_out"])  # alive (not a dead peer) until rank 0 timed out
    return True


def test_the_options_timeout_bounds_the_op():
    run_ranks(2, _timeouts)


def test_option_classes_without_comm():
    o = commx.AllReduceOptions()
    assert o.timeout is None and o.hints == {}
    o.timeout = 5  # seconds, as commx's ops take them
    assert o.timeout == timedelta(seconds=5)
    assert commx.AllReduceOptions(timeout=T, hints={"a": "b"}) == commx.AllReduceOptions(
        timeout=T, hints={"a": "b"})
    r = commx.ReconfigureOptions(uuid=7, init_handles=["x"], timeout=T)
    assert (r.uuid, r.init_handles, r.timeout, r.hints) == (7, ["x"], T, {})


def _reconfigure_options(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "opts_reconf", store=store, enable_reconfigure=True)
    store.set(f"h/{rank}", comm.get_init_handle())
    handles = [bytes(store.get(f"h/{r}")).decode() for r in range(size)]
    comm.reconfigure(commx.ReconfigureOptions(uuid=1, init_handles=handles[::-1],
                                              timeout=T)).wait()
    assert comm.get_rank() == size - 1 - rank  # a list gives the ranks in its order
    t = _v(comm.get_rank())
    comm.all_reduce(t, commx.ReduceOp.SUM, False)
    torch.testing.assert_close(t, sum(_v(r) for r in range(size)))
    comm.finalize()
    return True


def test_reconfigure_options():
    run_ranks(2, _reconfigure_options)
