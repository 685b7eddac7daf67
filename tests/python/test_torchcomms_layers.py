"""torchcomms' layers over torch, on commx's cpu backend: TorchCommBackend (a backend written
in Python), _BackendWrapper (a c10d backend over a comm), commx.device_mesh.init_device_mesh
(a 2x2 DeviceMesh from split comms, with torch's functional collectives and DTensor on it) and
commx.functional (collectives that autograd differentiates and torch.compile traces, fullgraph).
2-4 ranks, every value checked against a reference. Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _v(rank, n=4):
    return torch.arange(n, dtype=torch.float32) + 10 * rank


def _comm(rank, size, store, name):
    return commx.new_comm("cpu", "cpu", name, store=store, rank=rank, size=size, timeout=T)


# -- TorchCommBackend -----------------------------------------------------------------------------

class _StoreSum(commx.TorchCommBackend):
    """all_reduce(SUM) of float32 over the store; declines everything else."""

    def supports(self, op_type, dtype_name, reduce_kind_name):
        return str(op_type).endswith("all_reduce") and dtype_name == "float" and \
            reduce_kind_name == "sum"

    def run(self, op, async_op):
        import numpy as np
        data = np.from_dlpack(op.output)
        key = f"sum/{op.seq}"
        self.ctx.store.set(f"{key}/{self.ctx.rank}", data.tobytes())
        parts = [np.frombuffer(bytes(self.ctx.store.get(f"{key}/{r}")), dtype=np.float32)
                 for r in range(self.ctx.size)]
        data[:] = np.sum(parts, axis=0)


def _python_backend(rank, size, store):
    commx.register_backend("test_store_sum", _StoreSum)
    comm = commx.new_comm("test_store_sum", "cpu", "tcb", store=store, rank=rank, size=size,
                          timeout=T)
    t = _v(rank)
    comm.all_reduce(t, commx.ReduceOp.SUM, False)
    torch.testing.assert_close(t, sum(_v(r) for r in range(size)))
    assert isinstance(comm.unsafe_get_backend(), commx.TorchCommBackend)
    assert comm.unsafe_get_backend().ctx.rank == rank
    with pytest.raises(commx.UnsupportedError):
        comm.all_reduce(_v(rank), commx.ReduceOp.MAX, False)
    comm.finalize()
    return True


def test_torch_comm_backend_subclass():
    run_ranks(2, _python_backend)


def test_torch_comm_backend_base_refuses_ops():
    class Empty(commx.TorchCommBackend):
        pass

    commx.register_backend("test_empty_tcb", Empty)
    comm = commx.new_comm("test_empty_tcb", "cpu", "empty", store=commx.HashStore(), rank=0,
                          size=1, timeout=T)
    with pytest.raises(commx.UnsupportedError, match="Empty .rank 0. has no implementation of "
                       "barrier"):
        comm.barrier(False)
    comm.finalize()


# -- _BackendWrapper ------------------------------------------------------------------------------

def _wrapper(rank, size, store):
    comm = _comm(rank, size, store, "wrapped")
    w = commx._BackendWrapper(comm)
    assert w.get_comm() is comm and w.getBackendName() == "commx"
    assert isinstance(w.get_mem_allocator(), commx.HostMemAllocator)
    t = _v(rank)
    opts = dist.AllreduceOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    w.allreduce([t], opts).wait()
    torch.testing.assert_close(t, sum(_v(r) for r in range(size)))
    out = torch.zeros(4 * size)
    w._allgather_base(out, _v(rank)).wait() if hasattr(w, "_allgather_base") else \
        w.all_gather_single(out, _v(rank)).wait()
    torch.testing.assert_close(out, torch.cat([_v(r) for r in range(size)]))
    child = w.split(None, [1, 0])  # comm.split: the ranks in this order
    assert child.get_comm().get_rank() == 1 - rank
    t = _v(rank)
    child.allreduce([t], opts).wait()
    torch.testing.assert_close(t, sum(_v(r) for r in range(size)))
    comm.finalize()
    return True


def test_backend_wrapper():
    run_ranks(2, _wrapper)


# -- init_device_mesh -----------------------------------------------------------------------------

def _mesh(rank, size, store):
    from torch.distributed._functional_collectives import all_reduce as funcol_all_reduce
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    import commx.device_mesh as cdm
    world = _comm(rank, size, store, "mesh_world")
    # 2x2, row-major: dp groups {0,2},{1,3} (dim 0), tp groups {0,1},{2,3} (dim 1)
    dp_rank, tp_rank = divmod(rank, 2)
    dp = world.split([tp_rank, tp_rank + 2], "dp")
    tp = world.split([2 * dp_rank, 2 * dp_rank + 1], "tp")
    mesh = cdm.init_device_mesh((dp, tp), ("dp", "tp"), _global_comm=world)
    assert mesh.shape == (2, 2) and mesh.mesh_dim_names == ("dp", "tp")
    assert (mesh.get_local_rank("dp"), mesh.get_local_rank("tp")) == (dp_rank, tp_rank)
    assert dist.get_rank() == rank and dist.get_world_size() == size

    got = funcol_all_reduce(_v(rank), "sum", (mesh, 1))  # over tp
    torch.testing.assert_close(got, _v(2 * dp_rank) + _v(2 * dp_rank + 1))
    got = funcol_all_reduce(_v(rank), "sum", (mesh, 0))  # over dp
    torch.testing.assert_close(got, _v(tp_rank) + _v(tp_rank + 2))

    # DTensor: a matrix sharded over tp rows, replicated over dp, gathered back.
    full = torch.arange(16, dtype=torch.float32).view(4, 4)
    d = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
    torch.testing.assert_close(d.to_local(), full[2 * tp_rank:2 * tp_rank + 2])
    torch.testing.assert_close(d.full_tensor(), full)
    for c in (dp, tp, world):
        c.finalize()
    return True


def test_init_device_mesh_2x2():
    run_ranks(4, _mesh, timeout=120)


def _mesh_1d(rank, size, store):
    import commx.device_mesh as cdm
    comm = _comm(rank, size, store, "mesh_1d")
    mesh = cdm.init_device_mesh((comm,), ("dp",))
    t = _v(rank)
    dist.all_reduce(t, group=mesh.get_group("dp"))
    torch.testing.assert_close(t, sum(_v(r) for r in range(size)))
    with pytest.raises(commx.InvalidArgumentError, match="needs _global_comm"):
        cdm.init_device_mesh((comm, comm), ("a", "b"))
    comm.finalize()
    return True


def test_init_device_mesh_1d():
    run_ranks(2, _mesh_1d)


# -- commx.functional ----------------------------------------------------------------------------

def _functional(rank, size, store):
    import commx.functional as fc
    comm = _comm(rank, size, store, "functional")
    n = size

    # eager, with autograd: every op's backward against the hand-derived gradient
    x = _v(rank).requires_grad_()
    y = fc.all_reduce(x * 2, "sum", comm)
    torch.testing.assert_close(y, 2 * sum(_v(r) for r in range(n)))
    (y * (rank + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), 2.0 * sum(range(1, n + 1))))

    x = _v(rank, 2).requires_grad_()
    g = fc.all_gather_single(x, comm)
    torch.testing.assert_close(g, torch.cat([_v(r, 2) for r in range(n)]))
    (g * torch.arange(2.0 * n)).sum().backward()  # each rank weights block j by its indices
    torch.testing.assert_close(x.grad, n * torch.arange(2.0 * rank, 2.0 * rank + 2))

    x = _v(rank, 2 * n).requires_grad_()
    s = fc.reduce_scatter_single(x, "sum", comm)
    torch.testing.assert_close(s, sum(_v(r, 2 * n) for r in range(n))[2 * rank:2 * rank + 2])
    (s * (rank + 1)).sum().backward()  # block j of x feeds rank j's output, weight j + 1
    torch.testing.assert_close(x.grad, torch.arange(1.0, n + 1).repeat_interleave(2))

    x = _v(rank, 2 * n).reshape(n, 2).clone().requires_grad_()  # row j goes to rank j
    a = fc.all_to_all_single(x, comm, [1] * n, [1] * n)
    torch.testing.assert_close(a, torch.stack([_v(r, 2 * n).view(n, 2)[rank] for r in range(n)]))
    (a * (rank + 1)).sum().backward()  # row j lands on rank j, weight j + 1
    torch.testing.assert_close(x.grad, torch.arange(1.0, n + 1).view(n, 1).expand(n, 2))

    x = _v(rank).requires_grad_()
    b = fc.broadcast(x, 1, comm)
    torch.testing.assert_close(b, _v(1))
    (b * (rank + 1)).sum().backward()
    torch.testing.assert_close(x.grad, torch.full((4,), float(sum(range(1, n + 1))) if rank == 1
                                                  else 0.0))

    with pytest.raises(commx.UnsupportedError, match="no gradient for reduce op 'max'"):
        fc.all_reduce(_v(rank).requires_grad_(), "max", comm).sum().backward()

    # torch.compile, fullgraph: the collective is in the graph; forward and backward match eager
    def step(t, w):
        h = fc.all_reduce(t * w, "sum", comm)
        return fc.reduce_scatter_single(h.view(n, -1), "avg", comm).sum()

    from torch._dynamo.testing import CompileCounterWithBackend
    counter = CompileCounterWithBackend("aot_eager")  # aot_eager, keeping the graphs it saw
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    for k in range(2):
        x = (_v(rank, 2 * n) + k).requires_grad_()
        w = torch.full((2 * n,), 3.0, requires_grad=True)
        loss = compiled(x, w)
        x_ref = x.detach().clone().requires_grad_()
        w_ref = w.detach().clone().requires_grad_()
        ref = step(x_ref, w_ref)
        torch.testing.assert_close(loss, ref)
        loss.backward()
        ref.backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        torch.testing.assert_close(w.grad, w_ref.grad)
    # one graph, traced once, with both collectives in it as commx's ops
    assert counter.frame_count == 1, counter.frame_count
    graph = str(counter.graphs[0].graph)
    assert "commx.all_reduce" in graph and "commx.reduce_scatter_single" in graph, graph
    comm.finalize()
    return True


def test_functional_autograd_and_compile():
    run_ranks(2, _functional, timeout=180)
