"""Runs every call of torchcomms' documented Python API (its `_comms.pyi` at 59426ba, `objcol`,
`device_mesh`, `functional`) over commx, as a program written for torchcomms would make it (the
import renamed, backend "cpu" for torchcomms' "gloo"), on 2 ranks, and prints one row per call:
pass (ran and the result matched a reference), fail (an error or a wrong result) or missing (the
name does not exist in commx), with the reason.

    PYTHONPATH=python python3 tools/torchcomms_surface/surface.py [--json out.json] [--md out.md]

Each check is written from torchcomms' documentation of the call, not from its tests. Every
collective uses a 20 s timeout, so a failing call costs seconds, never a hang.
Layer: tools (Python, over the commx package and torch)."""

import argparse
import json
import multiprocessing as mp
import os
import socket
import sys
import time
from datetime import timedelta

import torch

import commx

T = timedelta(seconds=20)
ROWS = []  # (area, name, check(ctx))


def row(area, name):
    def add(fn):
        ROWS.append((area, name, fn))
        return fn
    return add


class Missing(Exception):
    pass


def need(obj, attr):
    if not hasattr(obj, attr):
        raise Missing(f"{attr} does not exist")
    return getattr(obj, attr)


class Ctx:
    def __init__(self, rank, size, store):
        self.rank, self.size, self.store = rank, size, store
        self.n = 0
        self._comm = None

    @property
    def comm(self):
        if self._comm is None or self._comm.is_aborted():
            self.n += 1
            self._comm = commx.new_comm("cpu", torch.device("cpu"), f"surface{self.n}",
                                        store=self.store, rank=self.rank, size=self.size,
                                        timeout=T)
        return self._comm

    def fresh(self):
        """A comm for a check that may leave it failed."""
        self._comm = None
        return self.comm


def eq(got, want, what):
    if not torch.equal(got, want):
        raise AssertionError(f"{what}: got {got.tolist()}, want {want.tolist()}")


def v(rank, n=4):
    return torch.arange(n, dtype=torch.float32) + 10 * rank


# -- module level ----------------------------------------------------------------------------

@row("module", "new_comm")
def _(c):
    comm = commx.new_comm("cpu", torch.device("cpu"), store=c.store, rank=c.rank, size=c.size)
    assert comm.get_name() and comm.get_size() == c.size
    comm.finalize()


@row("module", "ReduceOp (SUM..AVG, PREMUL_SUM, .type)")
def _(c):
    R = commx.ReduceOp
    want = {"SUM": v(0) + v(1), "PRODUCT": v(0) * v(1), "MIN": torch.minimum(v(0), v(1)),
            "MAX": torch.maximum(v(0), v(1)), "AVG": (v(0) + v(1)) / 2}
    for name, w in want.items():
        t = v(c.rank)
        c.comm.all_reduce(t, getattr(R, name), False)
        eq(t, w, name)
        assert getattr(R, name).type == need(commx, "RedOpType")[name]
    for name, fn in (("BAND", lambda a, b: a & b), ("BOR", lambda a, b: a | b),
                     ("BXOR", lambda a, b: a ^ b)):
        t = torch.tensor([5 + c.rank, 12], dtype=torch.int32)
        c.comm.all_reduce(t, getattr(R, name), False)
        eq(t, fn(torch.tensor([5, 12], dtype=torch.int32), torch.tensor([6, 12], dtype=torch.int32)),
           name)
    t = v(c.rank)
    c.comm.all_reduce(t, R.PREMUL_SUM(0.5), False)
    eq(t, (v(0) + v(1)) * 0.5, "PREMUL_SUM")


for _name in ("RedOpType", "OpName", "RemovableHandle", "CommOptions", "BatchP2POptions",
              "P2POpType", "P2POp", "BatchSendRecv", "TorchComm", "TorchWork", "TorchCommWindow",
              "WorkStatus"):
    row("module", _name)(lambda c, _n=_name: need(commx, _n))

# Each option class: built as torchcomms builds it (no arguments, then timeout and hints set),
# given to its op as options=, the result checked; its class given to another op is refused.
def _opt_ops(c, R=commx.ReduceOp):
    """option class name -> fn(options) running that op once and checking the result."""
    n, r, o = c.size, c.rank, 1 - c.rank

    def ar(opts):
        t = v(r)
        c.comm.all_reduce(t, R.SUM, False, options=opts)
        eq(t, v(0) + v(1), "all_reduce")

    def p2p(opts_send, opts_recv):
        t = v(r) if r == 0 else torch.zeros(4)
        if r == 0:
            c.comm.send(t, 1, False, options=opts_send)
        else:
            c.comm.recv(t, 0, False, options=opts_recv)
        eq(t, v(0), "recv")

    def ag(opts):
        out = [torch.zeros(4) for _ in range(n)]
        c.comm.all_gather(out, v(r), False, options=opts)
        eq(torch.stack(out), torch.stack([v(0), v(1)]), "all_gather")

    def ags(opts):
        out = torch.zeros(4 * n)
        c.comm.all_gather_single(out, v(r), False, options=opts)
        eq(out, torch.cat([v(0), v(1)]), "all_gather_single")

    def rs(opts):
        out = torch.zeros(4)
        c.comm.reduce_scatter(out, [v(r) + 100 * j for j in range(n)], R.SUM, False,
                              options=opts)
        eq(out, v(0) + v(1) + 200 * r, "reduce_scatter")

    def rss(opts):
        out = torch.zeros(2)
        c.comm.reduce_scatter_single(out, v(r), R.SUM, False, options=opts)
        eq(out, (v(0) + v(1))[2 * r:2 * r + 2], "reduce_scatter_single")

    def a2a(opts):
        out = [torch.zeros(2) for _ in range(n)]
        c.comm.all_to_all(out, [torch.full((2,), 10.0 * r + j) for j in range(n)], False,
                          options=opts)
        eq(torch.stack(out), torch.stack([torch.full((2,), 10.0 * j + r) for j in range(n)]),
           "all_to_all")

    def a2as(opts):
        out = torch.zeros(4)
        c.comm.all_to_all_single(out, v(r), False, options=opts)
        eq(out, torch.cat([v(0)[2 * r:2 * r + 2], v(1)[2 * r:2 * r + 2]]), "all_to_all_single")

    def a2av(opts):
        # rank r sends r+1+j rows to rank j; rows are 2 wide
        send = [r + 1 + j for j in range(n)]
        recv = [j + 1 + r for j in range(n)]
        inp = torch.cat([torch.full((send[j], 2), 10.0 * r + j) for j in range(n)])
        out = torch.zeros(sum(recv), 2)
        c.comm.all_to_all_v_single(out, inp, recv, send, False, options=opts)
        eq(out, torch.cat([torch.full((recv[j], 2), 10.0 * j + r) for j in range(n)]),
           "all_to_all_v_single")

    def bc(opts):
        t = v(r)
        c.comm.broadcast(t, 1, False, options=opts)
        eq(t, v(1), "broadcast")

    def red(opts):
        t = v(r)
        c.comm.reduce(t, 0, R.SUM, False, options=opts)
        if r == 0:
            eq(t, v(0) + v(1), "reduce")

    def bar(opts):
        c.comm.barrier(False, options=opts)

    def sc(opts):
        out = torch.zeros(4)
        c.comm.scatter(out, [v(j) for j in range(n)] if r == 1 else [], 1, False, options=opts)
        eq(out, v(r), "scatter")

    def ga(opts):
        outs = [torch.zeros(4) for _ in range(n)] if r == 0 else []
        c.comm.gather(outs, v(r), 0, False, options=opts)
        if r == 0:
            eq(torch.stack(outs), torch.stack([v(0), v(1)]), "gather")

    def agp(init_opts, exec_opts):
        out = torch.zeros(4 * n)
        h = c.comm.all_gather_p_init(out, options=init_opts)
        c.comm.all_gather_p_exec(h, v(r), False, options=exec_opts)
        eq(out, torch.cat([v(0), v(1)]), "all_gather_p_exec")
        c.comm.all_gather_p_free(h)

    def batch(opts):
        b = c.comm.batch_op_create()
        got = torch.zeros(4)
        b.send(v(r), o)
        b.recv(got, o)
        b.issue(False, options=opts)
        eq(got, v(o), "batch recv")

    M = commx
    return {
        "SendOptions": lambda x: p2p(x, M.RecvOptions()),
        "RecvOptions": lambda x: p2p(M.SendOptions(), x),
        "BroadcastOptions": bc, "AllReduceOptions": ar, "ReduceOptions": red,
        "AllGatherOptions": ag, "AllGatherSingleOptions": ags, "ReduceScatterOptions": rs,
        "ReduceScatterSingleOptions": rss, "AllToAllOptions": a2a,
        "AllToAllSingleOptions": a2as, "AllToAllvSingleOptions": a2av, "BarrierOptions": bar,
        "ScatterOptions": sc, "GatherOptions": ga,
        "AllGatherPInitOptions": lambda x: agp(x, M.AllGatherPExecOptions()),
        "AllGatherPExecOptions": lambda x: agp(M.AllGatherPInitOptions(), x),
        "BatchP2POptions": batch,
    }


def _check_options(c, name):
    cls = need(commx, name)
    opts = cls()
    opts.timeout = T
    opts.hints = {"surface": "1"}
    assert opts.timeout == T and opts.hints == {"surface": "1"}, opts
    _opt_ops(c)[name](opts)
    try:  # the class given to another op
        if name == "BarrierOptions":
            c.comm.all_reduce(v(c.rank), commx.ReduceOp.SUM, False, options=opts)
        else:
            c.comm.barrier(False, options=opts)
    except commx.InvalidArgumentError:
        pass
    else:
        raise AssertionError(f"another op took {name}")


for _name in ("SendOptions", "RecvOptions", "BroadcastOptions", "AllReduceOptions",
              "ReduceOptions", "AllGatherOptions", "AllGatherSingleOptions",
              "ReduceScatterOptions", "ReduceScatterSingleOptions", "AllToAllOptions",
              "AllToAllSingleOptions", "AllToAllvSingleOptions", "BarrierOptions",
              "ScatterOptions", "GatherOptions", "AllGatherPInitOptions",
              "AllGatherPExecOptions"):
    row("module", _name)(lambda c, _n=_name: _check_options(c, _n))


@row("module", "ReconfigureOptions")
def _(c):
    comm = commx.new_comm("cpu", torch.device("cpu"), "surface_reconf_opts", store=c.store,
                          enable_reconfigure=True)
    c.store.set(f"surface/rhandle/{c.rank}", comm.get_init_handle())
    handles = [bytes(c.store.get(f"surface/rhandle/{r}")).decode() for r in range(c.size)]
    opts = need(commx, "ReconfigureOptions")(uuid=3, init_handles=set(handles), timeout=T)
    comm.reconfigure(opts).wait()
    t = v(comm.get_rank())
    comm.all_reduce(t, commx.ReduceOp.SUM, False)
    eq(t, v(0) + v(1), "all_reduce after reconfigure(ReconfigureOptions)")
    comm.finalize()


def _window(c, n=4, dtype=torch.float32):
    """new_window() then tensor_register of a (2, n/2) tensor holding 100*rank + i."""
    buf = (torch.arange(n, dtype=torch.float32) + 100 * c.rank).to(dtype).view(2, n // 2)
    win = c.comm.new_window()
    win.tensor_register(buf)
    return win, buf


@row("module", "TorchCommWinAccessType")
def _(c):
    win, _ = _window(c)
    A = need(commx, "TorchCommWinAccessType")
    # ranks of one host map each other's buffers
    assert win.get_attr(1 - c.rank).access_type == A.WIN_ACCESS_TYPE_UNIFIED
    assert {A.WIN_ACCESS_TYPE_UNIFIED, A.WIN_ACCESS_TYPE_SEPARATE} == set(A)
    win.tensor_deregister()
    c.comm.barrier(False)


@row("module", "TorchCommWindowAttr")
def _(c):
    attr = need(commx, "TorchCommWindowAttr")()
    attr.access_type = commx.TorchCommWinAccessType.WIN_ACCESS_TYPE_SEPARATE
    win, _ = _window(c)
    got = win.get_attr(c.rank)
    assert isinstance(got, commx.TorchCommWindowAttr) and got.access_type == \
        commx.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED, got
    win.tensor_deregister()
    c.comm.barrier(False)


@row("module", "TorchCommBackend")
def _(c):
    base = need(commx, "TorchCommBackend")
    calls = []

    class Counting(base):
        # a backend of one op: barrier over the store; everything else Unsupported
        def run(self, op, async_op):
            if op.name != "barrier":
                return super().run(op, async_op)
            calls.append(op.name)
            key = f"surface/tcb/{len(calls)}"
            self.ctx.store.add(key, 1)
            while self.ctx.store.add(key, 0) < self.ctx.size:
                time.sleep(0.001)

    name = f"surface_tcb_{c.rank}"
    commx.register_backend(name, Counting)
    comm = commx.new_comm(name, "cpu", "surface_tcb", store=c.store, rank=c.rank, size=c.size,
                          timeout=T)
    comm.barrier(False)
    assert calls == ["barrier"], calls
    try:
        comm.all_reduce(v(c.rank), commx.ReduceOp.SUM, False)
    except commx.UnsupportedError as e:
        assert "all_reduce" in str(e), e
    else:
        raise AssertionError("the base class ran all_reduce")
    comm.finalize()


@row("module", "_BackendWrapper")
def _(c):
    import torch.distributed as dist
    wrapper = need(commx, "_BackendWrapper")(c.comm)
    assert wrapper.get_comm() is c.comm
    t = v(c.rank)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    wrapper.allreduce([t], opts).wait()
    eq(t, v(0) + v(1), "allreduce through the c10d backend wrapper")


@row("module", "get_mem_allocator")
def _(c):
    alloc = need(commx, "get_mem_allocator")("cpu")
    t = alloc.empty(4, dtype=torch.float32)
    assert t.is_shared()
    t.copy_(v(c.rank))
    c.comm.all_reduce(t, commx.ReduceOp.SUM, False)
    eq(t, v(0) + v(1), "all_reduce of an allocator's tensor")


@row("module", "_is_backend_registered")
def _(c):
    assert need(commx, "_is_backend_registered")("cpu")
    assert not commx._is_backend_registered("no_such_backend")

@row("module", "register_backend")
def _(c):
    class Loop:
        def init(self, ctx):
            self.rank = ctx.rank

        def run(self, op, async_op):
            return None
    need(commx, "register_backend")(f"surface_py_{c.rank}", Loop)
    assert f"surface_py_{c.rank}" in commx.registered_backends()


# -- TorchComm -------------------------------------------------------------------------------

for _name in ("get_rank", "get_size", "get_name", "get_device", "get_backend",
              "get_backend_version", "is_abort_supported", "is_aborted"):
    row("TorchComm", _name)(lambda c, _n=_name: need(c.comm, _n)())


@row("TorchComm", "get_options")
def _(c):
    o = c.comm.get_options()
    assert o.timeout == T and o.hints == {}, o


@row("TorchComm", "get_backend_impl / unsafe_get_backend")
def _(c):
    assert c.comm.get_backend_impl() is not None and c.comm.unsafe_get_backend() is not None


@row("TorchComm", "finalize")
def _(c):
    c.comm.finalize()
    c.fresh()


@row("TorchComm", "abort")
def _(c):
    comm = c.fresh()
    comm.abort()
    assert comm.is_aborted()
    c.fresh()


@row("TorchComm", "get_init_handle / reconfigure (enable_reconfigure=True)")
def _(c):
    comm = commx.new_comm("cpu", torch.device("cpu"), "surface_reconf", store=c.store,
                          enable_reconfigure=True)
    c.store.set(f"surface/handle/{c.rank}", comm.get_init_handle())
    handles = [bytes(c.store.get(f"surface/handle/{r}")).decode() for r in range(c.size)]
    comm.reconfigure(uuid=0, init_handles=handles, timeout=T).wait()
    t = v(comm.get_rank())
    comm.all_reduce(t, commx.ReduceOp.SUM, False)
    eq(t, v(0) + v(1), "all_reduce after reconfigure")
    comm.finalize()


def both_ways(fn):
    """Runs an op check sync and async (wait on the Work)."""
    def run(c):
        for async_op in (False, True):
            fn(c, async_op)
    return run


def done(work, async_op):
    if async_op:
        work.wait()


@row("TorchComm", "send / recv")
@both_ways
def _(c, a):
    t = v(c.rank) if c.rank == 0 else torch.zeros(4)
    w = c.comm.send(t, 1, a) if c.rank == 0 else c.comm.recv(t, 0, a)
    done(w, a)
    eq(t, v(0), "recv")


@row("TorchComm", "broadcast")
@both_ways
def _(c, a):
    t = v(c.rank)
    done(c.comm.broadcast(t, 1, a), a)
    eq(t, v(1), "broadcast")


@row("TorchComm", "all_reduce")
@both_ways
def _(c, a):
    t = v(c.rank)
    done(c.comm.all_reduce(t, commx.ReduceOp.SUM, a), a)
    eq(t, v(0) + v(1), "all_reduce")


@row("TorchComm", "reduce")
@both_ways
def _(c, a):
    t = v(c.rank)
    done(c.comm.reduce(t, 0, commx.ReduceOp.SUM, a), a)
    if c.rank == 0:
        eq(t, v(0) + v(1), "reduce")


@row("TorchComm", "all_gather")
@both_ways
def _(c, a):
    out = [torch.zeros(4) for _ in range(c.size)]
    done(c.comm.all_gather(out, v(c.rank), a), a)
    eq(torch.stack(out), torch.stack([v(0), v(1)]), "all_gather")


@row("TorchComm", "all_gather_v")
@both_ways
def _(c, a):
    out = [torch.zeros(r + 1) for r in range(c.size)]
    done(c.comm.all_gather_v(out, v(c.rank, c.rank + 1), a), a)
    eq(torch.cat(out), torch.cat([v(0, 1), v(1, 2)]), "all_gather_v")


@row("TorchComm", "all_gather_single")
@both_ways
def _(c, a):
    out = torch.zeros(4 * c.size)
    done(c.comm.all_gather_single(out, v(c.rank), a), a)
    eq(out, torch.cat([v(0), v(1)]), "all_gather_single")


@row("TorchComm", "reduce_scatter")
@both_ways
def _(c, a):
    out = torch.zeros(4)
    done(c.comm.reduce_scatter(out, [v(c.rank) + 100 * j for j in range(c.size)],
                               commx.ReduceOp.SUM, a), a)
    eq(out, v(0) + v(1) + 200 * c.rank, "reduce_scatter")


@row("TorchComm", "reduce_scatter_v")
@both_ways
def _(c, a):
    out = torch.zeros(c.rank + 1)
    ins = [v(c.rank, j + 1) for j in range(c.size)]
    done(c.comm.reduce_scatter_v(out, ins, commx.ReduceOp.SUM, a), a)
    eq(out, v(0, c.rank + 1) + v(1, c.rank + 1), "reduce_scatter_v")


@row("TorchComm", "reduce_scatter_single")
@both_ways
def _(c, a):
    out = torch.zeros(2)
    done(c.comm.reduce_scatter_single(out, v(c.rank), commx.ReduceOp.SUM, a), a)
    eq(out, (v(0) + v(1))[2 * c.rank:2 * c.rank + 2], "reduce_scatter_single")


@row("TorchComm", "all_to_all_single")
@both_ways
def _(c, a):
    out = torch.zeros(4)
    done(c.comm.all_to_all_single(out, v(c.rank), a), a)
    eq(out, torch.cat([v(0)[2 * c.rank:2 * c.rank + 2], v(1)[2 * c.rank:2 * c.rank + 2]]),
       "all_to_all_single")


@row("TorchComm", "all_to_all_v_single (rows of dim 0)")
@both_ways
def _(c, a):
    # rank r sends r+1+j rows to rank j; rows are 2 wide
    send = [c.rank + 1 + j for j in range(c.size)]
    recv = [j + 1 + c.rank for j in range(c.size)]
    inp = torch.cat([torch.full((send[j], 2), 10.0 * c.rank + j) for j in range(c.size)])
    out = torch.zeros(sum(recv), 2)
    done(c.comm.all_to_all_v_single(out, inp, recv, send, a), a)
    eq(out, torch.cat([torch.full((recv[j], 2), 10.0 * j + c.rank) for j in range(c.size)]),
       "all_to_all_v_single")


@row("TorchComm", "all_to_all")
@both_ways
def _(c, a):
    out = [torch.zeros(2) for _ in range(c.size)]
    done(c.comm.all_to_all(out, [torch.full((2,), 10.0 * c.rank + j) for j in range(c.size)], a),
         a)
    eq(torch.stack(out), torch.stack([torch.full((2,), 10.0 * j + c.rank)
                                      for j in range(c.size)]), "all_to_all")


@row("TorchComm", "barrier")
@both_ways
def _(c, a):
    done(c.comm.barrier(a), a)


@row("TorchComm", "scatter")
@both_ways
def _(c, a):
    out = torch.zeros(4)
    ins = [v(j) for j in range(c.size)] if c.rank == 1 else []
    done(c.comm.scatter(out, ins, 1, a), a)
    eq(out, v(c.rank), "scatter")


@row("TorchComm", "gather")
@both_ways
def _(c, a):
    outs = [torch.zeros(4) for _ in range(c.size)] if c.rank == 0 else []
    done(c.comm.gather(outs, v(c.rank), 0, a), a)
    if c.rank == 0:
        eq(torch.stack(outs), torch.stack([v(0), v(1)]), "gather")


@row("TorchComm", "gather_single")
@both_ways
def _(c, a):
    out = torch.zeros(4 * c.size)
    done(c.comm.gather_single(out, v(c.rank), 0, a), a)
    if c.rank == 0:
        eq(out, torch.cat([v(0), v(1)]), "gather_single")


@row("TorchComm", "split")
def _(c):
    sub = c.comm.split([1, 0], "surface_split")
    t = v(sub.get_rank())
    sub.all_reduce(t, commx.ReduceOp.SUM, False)
    eq(t, v(0) + v(1), "all_reduce on the split")
    assert sub.get_rank() == 1 - c.rank
    assert c.comm.split([], "nobody") is None
    sub.finalize()


@row("BatchSendRecv", "batch_op_create / send / recv / issue / ops")
@both_ways
def _(c, a):
    b = c.comm.batch_op_create()
    got = torch.zeros(4)
    b.send(v(c.rank), 1 - c.rank)
    b.recv(got, 1 - c.rank)
    assert [op.type for op in b.ops] == [commx.P2POpType.SEND, commx.P2POpType.RECV]
    done(b.issue(a, options=commx.BatchP2POptions()), a)
    eq(got, v(1 - c.rank), "batch recv")


@row("TorchWork", "is_completed / wait / wait_blocking")
def _(c):
    t = v(c.rank)
    w = c.comm.all_reduce(t, commx.ReduceOp.SUM, True)
    w.wait_blocking()
    assert w.is_completed()
    w.wait()
    eq(t, v(0) + v(1), "async all_reduce")


@row("TorchComm", "all_gather_p_init / exec / free")
def _(c):
    out = torch.zeros(4 * c.size)
    h = c.comm.all_gather_p_init(out)
    for k in range(2):
        c.comm.all_gather_p_exec(h, v(c.rank) + k, False)
        eq(out, torch.cat([v(0), v(1)]) + k, "all_gather_p_exec")
    c.comm.all_gather_p_free(h)


@row("TorchComm", "register_pre_hook / register_post_hook / RemovableHandle")
def _(c):
    seen = []
    pre = c.comm.register_pre_hook(lambda name, op_id, args: seen.append(("pre", name)))
    post = c.comm.register_post_hook(lambda op_id, args: seen.append(("post", op_id)))
    c.comm.all_reduce(v(c.rank), commx.ReduceOp.SUM, False)
    pre.remove()
    post.remove()
    c.comm.barrier(False)
    assert [k for k, _ in seen] == ["pre", "post"], seen
    assert seen[0][1] == commx.OpName.all_reduce, seen


@row("TorchComm", "register_abort_hook")
def _(c):
    comm = c.fresh()
    called = []
    comm.register_abort_hook(lambda: called.append(1))
    comm.abort()
    assert called == [1]
    c.fresh()


@row("TorchComm", "get_mem_allocator")
def _(c):
    t = need(c.comm, "get_mem_allocator")().empty((2, 2), dtype=torch.int32)
    assert t.is_shared() and t.shape == (2, 2), t


@row("TorchComm", "mem_allocator")
def _(c):
    alloc = need(type(c.comm), "mem_allocator") and c.comm.mem_allocator
    storage = alloc.allocate(64)
    assert storage.nbytes() == 64 and storage.is_shared()


@row("TorchComm", "tensor_register")
def _(c):
    t = v(c.rank) if c.rank == 0 else torch.zeros(4)
    need(c.comm, "tensor_register")(t)
    try:
        c.comm.broadcast(t, 0, False)
        eq(t, v(0), "broadcast of a registered tensor")
        try:
            c.comm.tensor_register(t)
        except commx.InvalidArgumentError:
            pass
        else:
            raise AssertionError("a tensor registered twice")
    finally:
        c.comm.tensor_deregister(t)


@row("TorchComm", "tensor_deregister")
def _(c):
    t = torch.zeros(4)
    c.comm.tensor_register(t)
    need(c.comm, "tensor_deregister")(t)
    try:
        c.comm.tensor_deregister(t)
    except commx.InvalidArgumentError:
        pass
    else:
        raise AssertionError("a tensor deregistered twice")


@row("TorchComm", "new_window() / new_window(tensor)")
def _(c):
    # torchcomms: a window without memory, then tensor_register; or new_window(tensor)
    for make in ("register", "with_tensor"):
        buf = torch.zeros(2 * c.size)
        if make == "register":
            win = c.comm.new_window()
            assert win.get_tensor() is None and win.get_size() == 0
            win.tensor_register(buf)
        else:
            win = c.comm.new_window(buf)
        dst, src = 1 - c.rank, 1 - c.rank
        for it in range(3):  # repeated use: ring of puts, each read back from the tensor
            win.put(torch.full((2,), 10.0 * c.rank + it), dst, 2 * dst, it % 2 == 1).wait()
            win.signal(dst, False)
            win.wait_signal(src, it % 2 == 1).wait()
            eq(buf[2 * c.rank:2 * c.rank + 2], torch.full((2,), 10.0 * src + it),
               f"registered tensor after put {it} ({make})")
            c.comm.barrier(False)
        win.tensor_deregister()
        try:
            win.tensor_deregister()
        except commx.InvalidArgumentError:
            pass
        else:
            raise AssertionError("deregistered twice")


@row("TorchCommWindow", "put / signal / wait_signal / map_remote_tensor")
def _(c):
    win, buf = _window(c)
    if c.rank == 0:
        win.put(v(7), 1, 0, False)
        win.signal(1, False)
    else:
        win.wait_signal(0, False)
        eq(buf.reshape(-1), v(7), "registered tensor after put")
        eq(win.map_remote_tensor(0).reshape(-1), v(0, 4), "rank 0's buffer, mapped")
    c.comm.barrier(False)
    win.tensor_deregister()


@row("TorchCommWindow", "dtype")
def _(c):
    win, _ = _window(c, dtype=torch.bfloat16)
    assert win.dtype == torch.bfloat16, win.dtype
    eq(win.map_remote_tensor(1 - c.rank).float().reshape(-1),
       torch.arange(4, dtype=torch.float32) + 100 * (1 - c.rank), "bfloat16 peer buffer")
    win.tensor_deregister()
    c.comm.barrier(False)


@row("TorchCommWindow", "shape")
def _(c):
    win, _ = _window(c, n=6)
    assert win.shape == [2, 3], win.shape
    assert win.map_remote_tensor(0).shape == (2, 3)
    win.tensor_deregister()
    c.comm.barrier(False)


@row("TorchCommWindow", "device")
def _(c):
    win, _ = _window(c)
    assert win.device == torch.device("cpu"), win.device
    win.tensor_deregister()
    c.comm.barrier(False)


@row("TorchCommWindow", "get_size")
def _(c):
    win, _ = _window(c, n=8, dtype=torch.int64)
    assert win.get_size() == 8 * 8, win.get_size()
    win.tensor_deregister()
    assert win.get_size() == 0
    c.comm.barrier(False)


@row("TorchCommWindow", "get_tensor")
def _(c):
    win, buf = _window(c)
    assert win.get_tensor() is buf
    eq(buf.reshape(-1), torch.arange(4.0) + 100 * c.rank, "values kept by registration")
    win.tensor_deregister()
    assert win.get_tensor() is None
    eq(buf.reshape(-1), torch.arange(4.0) + 100 * c.rank, "values kept by deregistration")
    c.comm.barrier(False)


@row("TorchCommWindow", "get_attr")
def _(c):
    win, _ = _window(c)
    for peer in range(c.size):
        assert win.get_attr(peer).access_type == \
            commx.TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
    win.tensor_deregister()
    c.comm.barrier(False)


# -- objcol, device_mesh, functional, torch.distributed --------------------------------------

@row("objcol", "all_gather_object / gather_object / broadcast_object_list / "
               "scatter_object_list / send_object_list / recv_object_list")
def _(c):
    from commx import objcol
    out = [None] * c.size
    objcol.all_gather_object(c.comm, out, {"rank": c.rank})
    assert out == [{"rank": 0}, {"rank": 1}], out
    objs = [f"x{c.rank}", 3]
    objcol.broadcast_object_list(c.comm, objs, root=1)
    assert objs == ["x1", 3], objs
    got = [None]
    objcol.scatter_object_list(c.comm, got, [["a"], ["b"]] if c.rank == 0 else None, 0)
    assert got == [[["a"], ["b"]][c.rank]], got
    g = [None] * c.size if c.rank == 1 else None
    objcol.gather_object(c.comm, c.rank * 2, 1, g)
    assert c.rank == 0 or g == [0, 2], g
    box = [c.rank + 40]
    if c.rank == 0:
        objcol.send_object_list(c.comm, box, 1)
    else:
        objcol.recv_object_list(c.comm, box, 0)
        assert box == [40], box


@row("device_mesh", "init_device_mesh(mesh_dim_comms, mesh_dim_names)")
def _(c):
    import importlib
    from torch.distributed._functional_collectives import all_reduce as funcol_all_reduce
    mod = importlib.import_module("commx.device_mesh")
    comm = commx.new_comm("cpu", torch.device("cpu"), "surface_mesh", store=c.store, rank=c.rank,
                          size=c.size, timeout=T)
    mesh = need(mod, "init_device_mesh")((comm,), ("dp",))
    assert mesh.mesh_dim_names == ("dp",) and mesh.get_local_rank("dp") == c.rank
    out = funcol_all_reduce(v(c.rank), "sum", (mesh, 0))
    eq(out, v(0) + v(1), "torch's functional all_reduce over the mesh")


@row("functional", "torch.compile/autograd-aware collectives")
def _(c):
    import importlib
    fc = importlib.import_module("commx.functional")
    comm = c.comm
    x = v(c.rank).requires_grad_()

    def step(t):
        return (fc.all_reduce(t * 2, "sum", comm) * (c.rank + 1)).sum()

    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    loss = compiled(x)
    assert float(loss.detach()) == float(((v(0) + v(1)) * 2 * (c.rank + 1)).sum()), loss
    loss.backward()
    # d/dx of sum((2 x_0 + 2 x_1) * (r + 1)) summed over ranks: 2 * (1 + 2) on every rank
    eq(x.grad, torch.full((4,), 6.0), "gradient through all_reduce")


# -- the runner --------------------------------------------------------------------------------

def _together(store, key, size):
    store.add(key, 1)
    while store.add(key, 0) < size:
        time.sleep(0.001)


def _rank(rank, size, port, queue):
    store = commx.TCPStore("127.0.0.1", port, world_size=size, is_server=(rank == 0), timeout=60)
    ctx = Ctx(rank, size, store)
    results = []
    for i, (area, name, fn) in enumerate(ROWS):
        try:
            fn(ctx)
            outcome, why = "pass", ""
        except Missing as e:
            outcome, why = "missing", str(e)
        except (AttributeError, ImportError, ModuleNotFoundError) as e:
            outcome, why = "missing", f"{type(e).__name__}: {e}"
        except BaseException as e:  # noqa: BLE001 - every failure is a row's outcome
            outcome, why = "fail", f"{type(e).__name__}: {str(e).splitlines()[0][:160]}"
            ctx.fresh()  # a failed collective may leave the comm failed
        results.append((area, name, outcome, why))
        _together(store, f"surface/row/{i}", size)  # the ranks start each row together
    queue.put((rank, results))
    # Rank 0 hosts the store: it leaves only once every other rank is done with it.
    if rank == 0:
        store.wait([f"surface/bye/{r}" for r in range(1, size)], timedelta(seconds=60))
    else:
        store.set(f"surface/bye/{rank}", "1")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--md")
    args = ap.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    by_rank = dict(queue.get(timeout=600) for _ in procs)
    for p in procs:
        p.join(timeout=30)
    rows = []
    for a, b in zip(by_rank[0], by_rank[1]):
        outcome = a[2] if a[2] == b[2] else "fail"
        rows.append({"area": a[0], "call": a[1], "outcome": outcome, "why": a[3] or b[3]})
    total = len(rows)
    passed = sum(r["outcome"] == "pass" for r in rows)
    lines = ["| area | call | outcome | why |", "|---|---|---|---|"]
    lines += [f"| {r['area']} | `{r['call']}` | {r['outcome']} | {r['why']} |" for r in rows]
    lines.append("")
    lines.append(f"{passed} of {total} calls pass "
                 f"({sum(r['outcome'] == 'missing' for r in rows)} missing, "
                 f"{sum(r['outcome'] == 'fail' for r in rows)} failing): "
                 f"{100.0 * passed / total:.1f}%")
    text = "\n".join(lines)
    print(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows, "passed": passed, "total": total,
                       "torch": torch.__version__, "commx": commx.__version__}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
