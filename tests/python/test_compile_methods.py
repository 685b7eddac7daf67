"""Comm methods under torch.compile(fullgraph=True) and autograd (torchcomms' compile mode):
the traced methods against eager references on 2 ranks, async tensors, and the
torch.ops.torchcomms wait ops. Compiled with aot_eager (dynamo + functionalization + autograd,
no C++ codegen) so each test stays in seconds. Layer: tests (Python)."""

import os
import subprocess
import sys
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
import commx.functional  # noqa: E402,F401
from commx import ReduceOp  # noqa: E402
from commx.functional.async_tensor import OnceWork, TorchCommsAsyncTensor  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _comm(rank, size, store, name):
    return commx.new_comm("cpu", "cpu", name, store=store, rank=rank, size=size, timeout=T)


def _v(rank, n=4, dtype=torch.float32):
    return (torch.arange(n) + 10 * (rank + 1)).to(dtype)


class _GraphRecorder:
    """A backend that records the ops of each graph, then runs it through aot_eager."""

    def __init__(self):
        self.targets = []

    def __call__(self, gm, example_inputs):
        self.targets += [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)


# -- async tensors (no comm) ----------------------------------------------------------------------

class _CountingWork:
    def __init__(self):
        self.waits = 0

    def wait(self):
        self.waits += 1
        return True

    def is_completed(self):
        return self.waits > 0


def test_async_tensor_waits_on_first_use_and_once_per_op():
    work = _CountingWork()
    t = TorchCommsAsyncTensor(torch.arange(3.0), work)
    assert not t.is_completed()
    assert torch.equal(t * 2, torch.tensor([0.0, 2.0, 4.0]))  # a torch function waits
    assert work.waits == 1
    assert torch.equal(t.wait(), torch.arange(3.0)) and work.waits == 1
    # the outputs of one list op share its Work: one wait for all of them
    work = _CountingWork()
    once = OnceWork(work)
    a, b = TorchCommsAsyncTensor(torch.ones(2), once), TorchCommsAsyncTensor(torch.zeros(2), once)
    assert torch.equal(torch.add(a, b), torch.ones(2))
    a.wait()
    b.wait()
    assert work.waits == 1


def test_async_tensor_is_transparent_to_autograd():
    x = torch.randn(3, requires_grad=True)
    y = x * 3
    wrapped = TorchCommsAsyncTensor(y, None)
    assert wrapped.grad_fn is y.grad_fn and not wrapped.is_leaf
    assert TorchCommsAsyncTensor(x, None).is_leaf
    wrapped.sum().backward()
    assert torch.equal(x.grad, torch.full((3,), 3.0))
    leaf = TorchCommsAsyncTensor(x, None)
    leaf.grad = torch.arange(3.0)
    assert torch.equal(x.grad, torch.arange(3.0)) and torch.equal(leaf.grad, x.grad)
    z = torch.randn(2, requires_grad=True)
    TorchCommsAsyncTensor((z * z).sum(), None).backward()  # backward() on the wrapper
    assert torch.allclose(z.grad, 2 * z.detach())


# -- torch.ops.torchcomms wait ops (no comm) ------------------------------------------------------

@pytest.mark.parametrize("name", ["torchcomm_wait_tensors", "torchcomm_wait_tensors_"])
def test_wait_ops_values_and_gradients(name):
    op = getattr(torch.ops.torchcomms, name)
    x = torch.randn(3, requires_grad=True)
    y = torch.randn(3)
    out = op([x * 2, y])
    assert torch.equal(out[0], x.detach() * 2) and torch.equal(out[1], y)
    assert all(t.requires_grad for t in out)  # one autograd node: all outputs require grad
    assert not op([y])[0].requires_grad
    (out[0].sum() + out[1].sum()).backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))

    x.grad = None
    compiled = torch.compile(lambda a: op([a * 2])[0].sum(), fullgraph=True, backend="aot_eager")
    compiled(x).backward()
    assert torch.equal(x.grad, torch.full((3,), 2.0))
    # second order: the identity keeps the graph of its input
    w = torch.randn(3, requires_grad=True)
    (g,) = torch.autograd.grad(op([w * w])[0].sum(), w, create_graph=True)
    (g2,) = torch.autograd.grad(g.sum(), w)
    assert torch.equal(g2, torch.full((3,), 2.0))


# -- traced comm methods (2 ranks) ----------------------------------------------------------------

def _traced_methods(rank, size, store):
    torch._dynamo.reset()
    comm = _comm(rank, size, store, "traced")
    peer = 1 - rank
    premul = ReduceOp.PREMUL_SUM(0.5)
    splits = [1, 2] if rank == 0 else [2, 1]  # rows each rank sends, and receives, per peer

    def step(x, lst, v_in, rs_in, a2a_in, recv_buf, s_out, s_in, batch, b_send, b_recv):
        batch.send(b_send, peer)  # added each time the graph runs; issued outside
        batch.recv(b_recv, peer)
        work = comm.all_reduce(x, ReduceOp.SUM, async_op=True)
        work.wait()
        comm.barrier(async_op=False)
        r = x.clone()
        comm.reduce(r, 1, ReduceOp.MAX, async_op=False)
        b = x + rank
        comm.broadcast(b, 1, async_op=True).wait()
        comm.all_gather(lst, x * (rank + 1), async_op=False)
        v_out = [torch.zeros(2 + i) for i in range(size)]
        comm.all_gather_v(v_out, v_in, async_op=False)
        rs = torch.zeros(2)
        comm.reduce_scatter(rs, [rs_in[:2], rs_in[2:]], ReduceOp.SUM, async_op=False)
        rsv = torch.zeros(1 + rank, dtype=torch.int32)
        comm.reduce_scatter_v(rsv, [torch.full((1 + i,), rank + 1, dtype=torch.int32)
                                    for i in range(size)], ReduceOp.MAX, async_op=False)
        a2a = [torch.zeros(2) for _ in range(size)]
        comm.all_to_all(a2a, [a2a_in[:2], a2a_in[2:]], async_op=False)
        a2av = torch.zeros(3)
        comm.all_to_all_v_single(a2av, a2a_in[:3], splits, splits, async_op=False)
        g = [torch.zeros(4) for _ in range(size)]
        comm.gather(g, x, 0, async_op=False)
        comm.scatter(s_out, s_in, 1, async_op=False)
        if rank == 0:
            comm.send(x, peer, async_op=False)
            comm.recv(recv_buf, peer, async_op=False)
        else:
            comm.recv(recv_buf, peer, async_op=False)
            comm.send(x, peer, async_op=False)
        p = torch.ones(2) * (rank + 1)
        comm.all_reduce(p, premul, async_op=False)
        with commx.coalescing.coalesce(comm) as cm:
            comm.all_reduce(p, ReduceOp.SUM, async_op=True)
        cm.wait()
        return x * 10, r, b, v_out, rs, rsv, a2a, a2av, g, p

    recorder = _GraphRecorder()
    compiled = torch.compile(step, fullgraph=True, backend=recorder)
    lst = [torch.zeros(4) for _ in range(size)]
    recv_buf = torch.zeros(4)
    s_out = torch.zeros(3)
    batch = comm.batch_op_create()
    b_recv = torch.zeros(2)
    out = compiled(_v(rank), lst, torch.full((2 + rank,), float(rank + 1)),
                   torch.arange(4.0) * (rank + 1), torch.arange(4.0) + 100 * rank, recv_buf,
                   s_out, [torch.full((3,), 7.0 * (i + 1) + rank) for i in range(size)],
                   batch, torch.full((2,), 50.0 + rank), b_recv)
    added = len(batch.ops)
    batch.issue(async_op=False)
    comm.finalize()
    x10, r, b, v_out, rs, rsv, a2a, a2av, g, p = out
    return dict(x10=x10.tolist(), r=r.tolist(), b=b.tolist(), lst=[t.tolist() for t in lst],
                v_out=[t.tolist() for t in v_out], rs=rs.tolist(), rsv=rsv.tolist(),
                a2a=[t.tolist() for t in a2a], a2av=a2av.tolist(),
                g=[t.tolist() for t in g], recv=recv_buf.tolist(), s_out=s_out.tolist(),
                p=p.tolist(), batch_ops=added, b_recv=b_recv.tolist(),
                targets=recorder.targets)


def test_comm_methods_compile_fullgraph_and_match_references():
    results = run_ranks(2, _traced_methods, timeout=240)
    total = (_v(0) + _v(1))  # all_reduce SUM of x
    for rank, res in enumerate(results):
        assert res["x10"] == (total * 10).tolist()
        # reduce MAX to rank 1 of the summed x (equal on both ranks): rank 0 keeps its copy
        assert res["r"] == total.tolist()
        assert res["b"] == (total + 1).tolist()  # broadcast from rank 1 of x + rank
        assert res["lst"] == [(total * (i + 1)).tolist() for i in range(2)]
        assert res["v_out"] == [[1.0, 1.0], [2.0, 2.0, 2.0]]
        # reduce_scatter of arange(4) * (rank + 1): block `rank` summed over ranks
        assert res["rs"] == (torch.arange(4.0)[2 * rank: 2 * rank + 2] * 3).tolist()
        assert res["rsv"] == [2] * (1 + rank)
        assert res["a2a"] == [(torch.arange(4.0)[2 * rank: 2 * rank + 2] + 100 * i).tolist()
                              for i in range(2)]
        # all_to_all_v_single: rank 0 sends [a0] to 0 and [a1, a2] to 1; rank 1 sends
        # [b0, b1] to 0 and [b2] to 1 (rows of dim 0)
        a, bb = torch.arange(4.0), torch.arange(4.0) + 100
        want = [a[0], bb[0], bb[1]] if rank == 0 else [a[1], a[2], bb[2]]
        assert res["a2av"] == [float(w) for w in want]
        if rank == 0:
            assert res["g"] == [total.tolist(), total.tolist()]
        else:
            assert res["g"] == [[0.0] * 4, [0.0] * 4]  # not the root: untouched
        assert res["recv"] == total.tolist()  # the peer's x after the all_reduce
        assert res["s_out"] == [7.0 * (rank + 1) + 1] * 3  # root 1's block `rank`
        assert res["p"] == [(0.5 * 1 + 0.5 * 2) * 2] * 2  # premul sum, then sum
        assert res["batch_ops"] == 2 and res["b_recv"] == [50.0 + (1 - rank)] * 2
        ops = [t for t in res["targets"] if t.startswith("commx.")]
        for op in ("all_reduce", "barrier", "reduce", "broadcast", "all_gather_single",
                   "all_to_all_single", "reduce_scatter_single", "gather", "scatter", "send",
                   "recv", "batch_add"):
            assert f"commx.{op}.default" in ops, (op, ops)


# -- the compile mode: eager async tensors and autograd (2 ranks) --------------------------------

def _mode_eager(rank, size, store):
    from commx import _tracing
    _tracing.patch_mode = True  # what TORCHCOMMS_PATCH_FOR_COMPILE=1 sets at import
    comm = _comm(rank, size, store, "mode")
    res = {}
    t = _v(rank)
    out = comm.all_reduce(t, ReduceOp.SUM, async_op=True)  # no grad: the real Work inside
    res["async_type"] = type(out).__name__
    res["async_sum"] = (out + 0).tolist()
    res["barrier"] = type(comm.barrier(async_op=True)).__name__
    grads = {}

    def grad_of(make_loss, n=4):
        x = torch.arange(float(n), requires_grad=True)
        make_loss(x * 1.0).backward()
        return x.grad.tolist()

    grads["all_reduce"] = grad_of(lambda b: comm.all_reduce(b, ReduceOp.SUM, async_op=True).sum())
    grads["all_gather"] = grad_of(lambda b: sum(
        o.sum() for o in comm.all_gather([torch.zeros(4) for _ in range(size)], b * (rank + 1),
                                         async_op=True)))
    grads["all_gather_single"] = grad_of(lambda b: comm.all_gather_single(
        torch.zeros(8), b, async_op=True).sum())
    grads["reduce_scatter_single"] = grad_of(lambda b: comm.reduce_scatter_single(
        torch.zeros(2), b * (rank + 1), ReduceOp.SUM, async_op=True).sum())
    grads["reduce_scatter"] = grad_of(lambda b: comm.reduce_scatter(
        torch.zeros(2), list(b.chunk(2)), ReduceOp.SUM, async_op=True).sum())
    grads["all_to_all_single"] = grad_of(lambda b: (comm.all_to_all_single(
        torch.zeros(4), b, async_op=True) * torch.arange(4.0)).sum())

    # compiled: the sync method inside the graph, backward through it
    x = torch.arange(4.0, requires_grad=True)

    def f(a):
        b = a * 2.0
        comm.all_reduce(b, ReduceOp.SUM, async_op=False)
        return b.sum()
    torch.compile(f, fullgraph=True, backend="aot_eager")(x).backward()
    grads["compiled_all_reduce"] = x.grad.tolist()
    comm.finalize()
    res["grads"] = grads
    return res


def test_compile_mode_eager_async_tensors_and_autograd():
    results = run_ranks(2, _mode_eager, timeout=240)
    for rank, res in enumerate(results):
        assert res["async_type"] == "TorchCommsAsyncTensor"
        assert res["async_sum"] == (_v(0) + _v(1)).tolist()
        assert res["barrier"] == "Work"
        g = res["grads"]
        assert g["all_reduce"] == [2.0] * 4  # backward: all_reduce of the ones
        assert g["all_gather"] == [2.0 * (rank + 1)] * 4  # (rank+1) x the sum over 2 ranks
        assert g["all_gather_single"] == [2.0] * 4
        # reduce_scatter: each block's gradient is the sum over ranks of its (rank+1) scale
        assert g["reduce_scatter_single"] == [float(rank + 1)] * 4
        assert g["reduce_scatter"] == [1.0] * 4
        # all_to_all: row j of the input lands at row (rank-block) of rank j's output
        w = torch.arange(4.0)
        assert g["all_to_all_single"] == [w[2 * rank], w[2 * rank + 1],
                                          w[2 * rank], w[2 * rank + 1]]
        assert g["compiled_all_reduce"] == [4.0] * 4


def _mode_off(rank, size, store):
    comm = _comm(rank, size, store, "off")
    t = _v(rank)
    work = comm.all_reduce(t, ReduceOp.SUM, async_op=True)
    kind = type(work).__name__
    work.wait()
    comm.finalize()
    return kind, t.tolist()


def test_mode_off_keeps_work_results():
    for kind, values in run_ranks(2, _mode_off):
        assert kind == "Work" and values == (_v(0) + _v(1)).tolist()


def test_mode_switch_from_environment(monkeypatch):
    # the switch is read when commx is imported: a fresh interpreter for each value (commx only,
    # no torch, so this stays fast)
    code = "import commx._tracing as t; print(t.patch_mode)"
    for var, value, want in (("TORCHCOMMS_PATCH_FOR_COMPILE", "1", "True"),
                             ("COMMX_PATCH_FOR_COMPILE", "true", "True"),
                             ("TORCHCOMMS_PATCH_FOR_COMPILE", "0", "False")):
        env = {k: v for k, v in os.environ.items() if not k.endswith("_PATCH_FOR_COMPILE")}
        env[var] = value
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, timeout=60)
        assert out.stdout.strip() == want, (var, value, out.stderr)
    from commx import _tracing
    monkeypatch.setattr(_tracing, "patch_mode", True)
    assert commx.functional.is_torch_compile_supported_and_enabled()
    assert not commx.functional.is_torch_compile_supported_and_enabled("99.0")
    monkeypatch.setattr(_tracing, "patch_mode", False)
    assert not commx.functional.is_torch_compile_supported_and_enabled()
