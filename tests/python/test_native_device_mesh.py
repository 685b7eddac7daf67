"""commx.device_mesh.init_native_device_mesh: a DeviceMesh holding commx comms (no process
groups), the comm registry on it, and torch's functional collectives on (mesh, dim) dispatched to
those comms: in flight (TorchCommsAsyncTensor) in eager mode, differentiable, and traced by
torch.compile (fullgraph). 2 ranks for a 1-D mesh, 4 for a 2x2 mesh; every value checked
against a reference. Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed._functional_collectives as funcol  # noqa: E402

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _mesh(rank, size, store, name):
    from commx.device_mesh import init_native_device_mesh
    comm = commx.new_comm("cpu", "cpu", name, store=store, rank=rank, size=size, timeout=T)
    return comm, init_native_device_mesh((comm,), ("main",))


def _registry_and_eager(rank, size, store):
    from commx.functional.async_tensor import TorchCommsAsyncTensor
    comm, mesh = _mesh(rank, size, store, "nm_eager")
    g = (mesh, 0)
    assert mesh.get_comm_object("torchcomms", "main") is comm
    assert mesh.get_comm_object("torchcomms", 0) is comm
    assert "torchcomms" in mesh._comm_backends and mesh.get_comm_object("other", 0) is None
    assert list(mesh.get_coordinate()) == [rank] and mesh.size() == size and mesh.mesh_dim_names == ("main",)

    x = torch.arange(6.0) + 10 * rank
    y = funcol.all_reduce(x, "sum", g)
    assert isinstance(y, TorchCommsAsyncTensor) and not y.completed
    plain = y.wait()
    assert y.completed and type(plain) is torch.Tensor
    want = sum(torch.arange(6.0) + 10 * r for r in range(size))
    torch.testing.assert_close(plain, want)
    torch.testing.assert_close(x, torch.arange(6.0) + 10 * rank)  # the input is left alone
    # used without wait(): the first op waits
    torch.testing.assert_close(funcol.all_reduce(x, "avg", g) * 1, want / size)
    torch.testing.assert_close(funcol.all_reduce(x, "max", g) + 0, x - 10 * rank + 10 * (size - 1))

    m = torch.full((2, 3), float(rank)) + torch.arange(3.0)
    got = funcol.all_gather_tensor(m, 0, g)
    torch.testing.assert_close(got * 1, torch.cat([torch.full((2, 3), float(r)) + torch.arange(3.0)
                                                   for r in range(size)]))
    got = funcol.all_gather_tensor(m, 1, g)  # along dim 1
    torch.testing.assert_close(got * 1, torch.cat([torch.full((2, 3), float(r)) + torch.arange(3.0)
                                                   for r in range(size)], dim=1))

    full = torch.arange(4.0 * size).view(2 * size, 2) * (rank + 1)
    total = torch.arange(4.0 * size).view(2 * size, 2) * sum(range(1, size + 1))
    rs = funcol.reduce_scatter_tensor(full, "sum", 0, g)
    torch.testing.assert_close(rs * 1, total[2 * rank:2 * rank + 2])
    wide = full.t().contiguous()  # scatter along dim 1
    rs = funcol.reduce_scatter_tensor(wide, "sum", 1, g)
    torch.testing.assert_close(rs * 1, total.t()[:, 2 * rank:2 * rank + 2])

    b = funcol.broadcast(torch.full((3,), float(rank + 5)), 1, g)
    torch.testing.assert_close(b * 1, torch.full((3,), 6.0))

    # rows of dim 0: block j goes to rank j; uneven splits: rank r sends j + 1 rows to rank j
    rows = torch.arange(2.0 * size).view(size, 2) + 100 * rank
    a = funcol.all_to_all_single(rows, None, None, g)
    torch.testing.assert_close(a * 1, torch.stack([torch.arange(2.0 * size).view(size, 2)[rank]
                                                   + 100 * r for r in range(size)]))
    send = [j + 1 for j in range(size)]
    src = torch.cat([torch.full((j + 1, 2), float(10 * rank + j)) for j in range(size)])
    a = funcol.all_to_all_single(src, [rank + 1] * size, send, g)
    torch.testing.assert_close(a * 1, torch.cat([torch.full((rank + 1, 2), float(10 * r + rank))
                                                 for r in range(size)]))

    outs = funcol.all_reduce_coalesced([torch.ones(3) * (rank + 1), torch.ones(2) * rank], "sum", g)
    assert all(isinstance(o, TorchCommsAsyncTensor) for o in outs)
    torch.testing.assert_close(outs[0] * 1, torch.full((3,), float(sum(range(1, size + 1)))))
    torch.testing.assert_close(outs[1] * 1, torch.full((2,), float(sum(range(size)))))
    outs = funcol.all_gather_into_tensor_coalesced([torch.full((1,), float(rank))], g)
    torch.testing.assert_close(outs[0] * 1, torch.arange(float(size)))
    outs = funcol.reduce_scatter_tensor_coalesced([torch.arange(2.0 * size)], "sum", [0], g)
    torch.testing.assert_close(outs[0] * 1, torch.arange(2.0 * size)[2 * rank:2 * rank + 2] * size)

    # scatter and gather (torch 2.15's functional collectives have neither)
    out = torch.zeros(2)
    pieces = [torch.full((2,), 7.0 + j) for j in range(size)] if rank == 1 else []
    torch.testing.assert_close(funcol.scatter(out, pieces, 1, g) * 1, torch.full((2,), 7.0 + rank))
    got = funcol.gather(torch.full((2, 2), float(rank)), [], 0, g)
    if rank == 0:
        assert len(got) == size
        for r, t in enumerate(got):
            torch.testing.assert_close(t * 1, torch.full((2, 2), float(r)))
    else:
        assert got == []

    # a group that is not a comm mesh keeps torch's own functions (and their errors)
    with pytest.raises(Exception):
        funcol.all_reduce(x, "sum", [0, 1])
    comm.finalize()
    return True


def test_native_mesh_registry_and_eager_collectives():
    assert run_ranks(2, _registry_and_eager, timeout=120) == [True, True]


def _autograd(rank, size, store):
    comm, mesh = _mesh(rank, size, store, "nm_grad")
    g = (mesh, 0)
    x = torch.full((4,), rank + 1.0, requires_grad=True)
    y = funcol.all_reduce(x, "sum", g)
    y.backward(torch.full((4,), rank + 1.0))  # the gradient is summed over the ranks
    torch.testing.assert_close(x.grad, torch.full((4,), float(sum(range(1, size + 1)))))

    x = torch.full((3,), rank + 1.0, requires_grad=True)
    gathered = funcol.all_gather_tensor(x, 0, g)
    (gathered * torch.arange(1.0, 3 * size + 1)).sum().backward()
    # each rank's block collects every rank's weights for it: size * its block of weights
    torch.testing.assert_close(x.grad, torch.arange(1.0, 3 * size + 1)[3 * rank:3 * rank + 3] * size)

    x = torch.full((2 * size,), rank + 1.0, requires_grad=True)
    rs = funcol.reduce_scatter_tensor(x, "sum", 0, g)
    rs.backward(torch.full((2,), rank + 1.0))  # backward: all_gather of the gradients
    torch.testing.assert_close(x.grad, torch.arange(1.0, size + 1).repeat_interleave(2))

    x = torch.arange(2.0 * size, requires_grad=True)
    a = funcol.all_to_all_single(x, None, None, g)
    (a * (rank + 1)).sum().backward()  # block j goes to rank j, weighted j + 1
    torch.testing.assert_close(x.grad, torch.arange(1.0, size + 1).repeat_interleave(2))
    comm.finalize()
    return True


def test_native_mesh_funcol_autograd():
    assert run_ranks(2, _autograd, timeout=120) == [True, True]


def _compiled(rank, size, store):
    from torch._dynamo.testing import CompileCounterWithBackend
    comm, mesh = _mesh(rank, size, store, "nm_compile")

    def step(t, u, mesh):
        h = funcol.all_reduce(t, "sum", (mesh, 0)) * 2
        g = funcol.all_gather_tensor(h, 0, (mesh, 0))
        pair = funcol.reduce_scatter_tensor_coalesced([g, u], "sum", [0, 0], (mesh, 0))
        return pair[0].sum() + pair[1].sum(), funcol.gather(u, [], 0, (mesh, 0))

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(step, backend=counter, fullgraph=True)
    for k in range(2):
        x = (torch.arange(4.0) + rank + k).requires_grad_()
        u = torch.full((size,), rank + 1.0)
        loss, gathered = compiled(x, u, mesh)
        x_ref = x.detach().clone().requires_grad_()
        ref, _ = step(x_ref, u, mesh)
        torch.testing.assert_close(loss, ref)
        loss.backward()
        ref.backward()
        torch.testing.assert_close(x.grad, x_ref.grad)
        if rank == 0:
            assert len(gathered) == size
            for r, t in enumerate(gathered):
                torch.testing.assert_close(t, torch.full((size,), r + 1.0))
        else:
            assert gathered == []
    # the reference itself, by hand: loss = sum over my block of size * 2 * sum_r(x_r)
    #                                     + my element of u summed over the ranks
    assert counter.frame_count == 1, counter.frame_count
    graph = str(counter.graphs[0].graph)
    assert "commx.all_reduce" in graph and "commx.all_gather_single" in graph, graph
    assert "commx.funcol_gather" in graph, graph
    comm.finalize()
    return float(loss)


def test_native_mesh_funcol_compiles_fullgraph():
    n = 2
    losses = run_ranks(n, _compiled, timeout=240)
    for rank, loss in enumerate(losses):
        x_sum = sum(torch.arange(4.0) + r + 1 for r in range(n))  # k = 1 on the last step
        g = torch.cat([x_sum * 2] * n)  # every rank's block of the gathered sum
        want = float(g.view(n, -1)[rank].sum() * n) + float(sum(r + 1.0 for r in range(n)))
        assert loss == pytest.approx(want), (rank, loss, want)


def _two_dims(rank, size, store):
    from commx.device_mesh import init_native_device_mesh
    world = commx.new_comm("cpu", "cpu", "nm_world", store=store, rank=rank, size=size, timeout=T)
    # mesh [[0, 1], [2, 3]]: tp = the row, dp = the column
    tp_ranks = [rank - rank % 2, rank - rank % 2 + 1]
    dp_ranks = [rank % 2, rank % 2 + 2]
    tp, dp = world.split(tp_ranks, "nm_tp"), world.split(dp_ranks, "nm_dp")
    mesh = init_native_device_mesh((dp, tp), ("dp", "tp"))
    assert list(mesh.get_coordinate()) == [rank // 2, rank % 2] and tuple(mesh.shape) == (2, 2)
    assert mesh.get_comm_object("torchcomms", "tp") is tp
    x = torch.full((2,), rank + 1.0)
    on_tp = funcol.all_reduce(x, "sum", (mesh, 1)).wait()
    on_dp = funcol.all_reduce(x, "sum", (mesh, 0)).wait()
    for c in (tp, dp, world):
        c.finalize()
    return on_tp.tolist(), on_dp.tolist(), tp_ranks, dp_ranks


def test_native_mesh_two_dimensions():
    for on_tp, on_dp, tp_ranks, dp_ranks in run_ranks(4, _two_dims, timeout=120):
        assert on_tp == [float(sum(r + 1 for r in tp_ranks))] * 2
        assert on_dp == [float(sum(r + 1 for r in dp_ranks))] * 2
