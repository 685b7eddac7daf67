"""DeviceMesh and torch's functional collectives on the "commx" torch.distributed backend:
init_device_mesh 1D and 2D (CPU), and all_reduce, all_gather_tensor, reduce_scatter_tensor and
all_to_all_single of torch.distributed._functional_collectives over the world, a mesh and each
mesh dimension, every result checked against a reference computed locally. Also a DTensor
redistribute (Shard -> Replicate) over a mesh dimension. Skipped where torch is absent.
Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed._functional_collectives as funcol  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402

from ranks import init_agent_store_env, native_tcp_store, run_ranks  # noqa: E402


def _init(rank, size, port):
    import commx.torch as ct
    ct.set_device_backend("cpu", "cpu")
    init_agent_store_env(rank, size, port)
    dist.init_process_group("commx", timeout=timedelta(seconds=60))


def _value(rank, n=8):
    """What global rank `rank` contributes: distinct per rank and position."""
    return torch.arange(n, dtype=torch.float32) * (rank + 1) + 100 * rank


def _check_functional(group, members, rank, tag):
    """The four functional collectives over `group`, whose global ranks are `members` in group
    rank order; each against the reference built from _value of every member."""
    k = len(members)
    me = members.index(rank)
    n = 4 * k
    mine = _value(rank, n)
    everyone = [_value(r, n) for r in members]

    got = funcol.all_reduce(mine, "sum", group)
    torch.testing.assert_close(funcol.wait_tensor(got), sum(everyone), msg=f"{tag} all_reduce")

    got = funcol.all_gather_tensor(mine.view(2, -1), 0, group)
    want = torch.cat([v.view(2, -1) for v in everyone], 0)
    torch.testing.assert_close(funcol.wait_tensor(got), want, msg=f"{tag} all_gather_tensor")

    got = funcol.reduce_scatter_tensor(mine, "sum", 0, group)
    want = sum(everyone).chunk(k)[me]
    torch.testing.assert_close(funcol.wait_tensor(got), want, msg=f"{tag} reduce_scatter_tensor")

    # Uneven splits: member j sends j+1 rows to member i... rows of dim 0, as torch counts them.
    rows = lambda src, dst: (src + dst) % 3 + 1  # noqa: E731
    inp = torch.cat([torch.full((rows(me, j), 2), 1000.0 * rank + j) for j in range(k)])
    got = funcol.all_to_all_single(inp, [rows(j, me) for j in range(k)],
                                   [rows(me, j) for j in range(k)], group)
    want = torch.cat([torch.full((rows(j, me), 2), 1000.0 * members[j] + me) for j in range(k)])
    torch.testing.assert_close(funcol.wait_tensor(got), want, msg=f"{tag} all_to_all_single")


def _meshes(rank, size, port):
    _init(rank, size, port)
    world = list(range(size))
    _check_functional(dist.group.WORLD, world, rank, "world")

    mesh1 = init_device_mesh("cpu", (size,), mesh_dim_names=("dp",))
    assert mesh1.get_group("dp").size() == size
    _check_functional(mesh1, world, rank, "1D mesh")

    mesh2 = init_device_mesh("cpu", (2, size // 2), mesh_dim_names=("dp", "tp"))
    layout = torch.arange(size).view(2, size // 2)
    row, col = [(i, j) for i in range(2) for j in range(size // 2) if layout[i, j] == rank][0]
    tp_members = layout[row].tolist()
    dp_members = layout[:, col].tolist()
    assert dist.get_process_group_ranks(mesh2.get_group("tp")) == tp_members
    assert dist.get_process_group_ranks(mesh2.get_group("dp")) == dp_members
    _check_functional((mesh2, 1), tp_members, rank, "2D mesh, dim 1 (tp)")
    _check_functional((mesh2, 0), dp_members, rank, "2D mesh, dim 0 (dp)")
    _check_functional(mesh2["tp"], tp_members, rank, "2D mesh, mesh['tp']")

    # DTensor over the tp dimension: each member holds one shard; Replicate gathers them.
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    full = torch.arange(4.0 * len(tp_members) * 3).view(-1, 3)
    d = distribute_tensor(full, mesh2["tp"], [Shard(0)])
    torch.testing.assert_close(d.to_local(), full.chunk(len(tp_members))[tp_members.index(rank)])
    torch.testing.assert_close(d.redistribute(mesh2["tp"], [Replicate()]).to_local(), full)
    dist.destroy_process_group()
    return True


def test_device_mesh_and_functional_collectives():
    if not native_tcp_store():
        pytest.skip("libcommx has no TCP store")
    run_ranks(4, _meshes, with_store=False, timeout=150)
