"""ProcessGroup._get_sequence_number_for_group() on groups routed through commx: the "commx"
torch.distributed backend and a group over a comm the program made (BackendWrapper). Counted as
c10d's ProcessGroupNCCL counts: one per collective, one per coalesced block of collectives, none
for send/recv; each group its own count, equal on every member. 2-3 ranks. Layer: tests
(Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import commx  # noqa: E402
from ranks import init_commx_process_group, run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _steps(pg, rank, size):
    """Runs ops on `pg`, returning the count after each step as a delta from the start."""
    seq = pg._get_sequence_number_for_group
    base = seq()
    seen = []
    t = torch.ones(4)
    dist.all_reduce(t, group=pg)
    seen.append(seq() - base)                        # 1
    dist.broadcast(t, src=dist.get_global_rank(pg, 0), group=pg)
    dist.reduce(t, dst=dist.get_global_rank(pg, 0), group=pg)
    dist.barrier(group=pg)
    outs = [torch.empty(4) for _ in range(size)]
    dist.all_gather(outs, t, group=pg)
    seen.append(seq() - base)                        # 5
    right, left = (rank + 1) % size, (rank - 1) % size
    g_right, g_left = dist.get_global_rank(pg, right), dist.get_global_rank(pg, left)
    recv = torch.empty(2)
    ops = [dist.P2POp(dist.isend, torch.full((2,), float(rank)), g_right, group=pg),
           dist.P2POp(dist.irecv, recv, g_left, group=pg)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert recv.tolist() == [float(left)] * 2
    seen.append(seq() - base)                        # 5: sends and receives do not count
    from torch.distributed.distributed_c10d import _coalescing_manager
    with _coalescing_manager(group=pg, async_ops=True) as cm:
        for _ in range(3):
            dist.all_reduce(torch.ones(2), group=pg)
    cm.wait()
    seen.append(seq() - base)                        # 6: one block
    return seen


WANT = [1, 5, 5, 6]


def _process_group_backend(rank, size, port):
    init_commx_process_group(rank, size, port, T)
    world = dist.group.WORLD
    out = {"world": _steps(world, rank, size)}
    # a subgroup counts its own collectives only, and the world's count is left as it was
    before = world._get_sequence_number_for_group()
    sub = dist.new_group([0, 1], timeout=T)
    if rank in (0, 1):
        out["sub"] = _steps(sub, rank, 2)
    out["world_after"] = world._get_sequence_number_for_group() - before
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("size", [2, 3])
def test_sequence_numbers_of_the_commx_backend(size):
    for rank, out in enumerate(run_ranks(size, _process_group_backend, with_store=False,
                                         timeout=90)):
        assert out["world"] == WANT, (rank, out)
        assert out.get("sub") == (WANT if rank < 2 else None), (rank, out)
        assert out["world_after"] == 0, (rank, out)


def _wrapped_comm(rank, size, store):
    from commx.device_mesh import _create_torchcomm_process_group
    comm = commx.new_comm("cpu", "cpu", "seq_wrapped", store=store, rank=rank, size=size,
                          timeout=T)
    pg = _create_torchcomm_process_group(comm, "seq_wrapped")
    # an op on the comm itself is not one of the group's
    comm.all_reduce(torch.ones(1), commx.ReduceOp.SUM)
    seen = _steps(pg, rank, size)
    comm.finalize()
    return seen, pg._get_sequence_number_for_group()


def test_sequence_numbers_of_a_group_over_a_comm():
    got = run_ranks(2, _wrapped_comm, timeout=90)
    for seen, total in got:
        assert seen == WANT and total == WANT[-1]
