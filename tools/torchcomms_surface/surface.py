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

for _name in ("SendOptions", "RecvOptions", "BroadcastOptions", "AllReduceOptions",
              "ReduceOptions", "AllGatherOptions", "AllGatherSingleOptions",
              "ReduceScatterOptions", "ReduceScatterSingleOptions", "AllToAllOptions",
              "AllToAllSingleOptions", "AllToAllvSingleOptions", "BarrierOptions",
              "ScatterOptions", "GatherOptions", "AllGatherPInitOptions", "AllGatherPExecOptions",
              "ReconfigureOptions", "TorchCommWinAccessType", "TorchCommWindowAttr",
              "TorchCommBackend", "_BackendWrapper", "get_mem_allocator",
              "_is_backend_registered"):
    row("module", _name)(lambda c, _n=_name: need(commx, _n))


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


for _name in ("get_mem_allocator", "mem_allocator", "tensor_register", "tensor_deregister"):
    row("TorchComm", _name)(lambda c, _n=_name: need(type(c.comm), _n))


@row("TorchComm", "new_window() / new_window(tensor)")
def _(c):
    win = c.comm.new_window()  # torchcomms: a window without memory, then tensor_register
    need(win, "tensor_register")


@row("TorchCommWindow", "put / signal / wait_signal / map_remote_tensor")
def _(c):
    # commx's form of the window: new_window(count, dtype) owns its buffer.
    win = c.comm.new_window(4, torch.float32)
    if c.rank == 0:
        win.put(v(7), 1, 0, False)
        win.signal(1, False)
    else:
        win.wait_signal(0, False)
        eq(torch.from_numpy(win.local()), v(7), "window after put")
    c.comm.barrier(False)


for _name in ("dtype", "shape", "device", "get_size", "get_tensor", "get_attr"):
    row("TorchCommWindow", _name)(lambda c, _n=_name: need(commx.Window, _n))


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
    mod = importlib.import_module("commx.device_mesh")
    need(mod, "init_device_mesh")


@row("functional", "torch.compile/autograd-aware collectives")
def _(c):
    import importlib
    importlib.import_module("commx.functional")


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
    _together(store, "surface/done", size)  # rank 0 hosts the store: it leaves last
    queue.put((rank, results))


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
