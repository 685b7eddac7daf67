"""Coalescing blocks (comm.start_coalescing/end_coalescing, commx.coalesce), as torchcomms
documents them: the ops of a block are one Work, an empty block has none, blocks do not nest,
barrier cannot join one, a manager is waited on once. 2 ranks, values checked.
Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _blocks(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "coalesce", store=store, rank=rank, size=size, timeout=T)
    total = sum(range(1, size + 1))
    out = {}

    # start/end around async ops: one Work over both
    a, b = torch.full((10,), rank + 1.0), torch.full((3, 5), rank + 1.0)
    comm.start_coalescing()
    comm.all_reduce(a, commx.ReduceOp.SUM, async_op=True)
    comm.all_reduce(b, commx.ReduceOp.SUM, async_op=True)
    work = comm.end_coalescing()
    out["work_len"] = len(work)
    work.wait()
    out["a"], out["b"] = a.tolist(), b.flatten().tolist()

    # the context manager, mixed ops
    r = torch.full((4,), rank + 1.0)
    g_in, g_out = torch.full((2,), float(rank)), torch.zeros(2 * size)
    bc = torch.full((3,), 7.0 if rank == 0 else 0.0)
    with commx.coalesce(comm) as cm:
        comm.all_reduce(r, commx.ReduceOp.SUM, async_op=True)
        comm.all_gather_single(g_out, g_in, async_op=True)
        comm.broadcast(bc, 0, async_op=True)
    cm.wait()
    out["r"], out["g"], out["bc"] = r.tolist(), g_out.tolist(), bc.tolist()
    with pytest.raises(RuntimeError, match="already been called"):
        cm.wait()

    # sync ops in a block are done when the block ends
    s = torch.full((2,), rank + 1.0)
    with commx.coalescing.coalesce(comm):
        comm.all_reduce(s, commx.ReduceOp.SUM, async_op=False)
    out["s"] = s.tolist()

    # an empty block has no Work
    comm.start_coalescing()
    out["empty"] = comm.end_coalescing()

    with pytest.raises(RuntimeError, match="no coalescing block is open"):
        comm.end_coalescing()
    comm.start_coalescing()
    with pytest.raises(RuntimeError, match="do not nest"):
        comm.start_coalescing()
    comm.end_coalescing()
    with pytest.raises(RuntimeError, match="barrier does not support coalescing"):
        with commx.coalesce(comm):
            comm.barrier(async_op=True)
    # the failed block is closed: the comm works on, outside blocks
    x = torch.ones(3)
    comm.all_reduce(x, commx.ReduceOp.SUM)
    out["after"] = x.tolist()
    comm.finalize()
    return out, total


def test_coalescing_blocks():
    for out, total in run_ranks(2, _blocks):
        assert out["work_len"] == 2
        assert out["a"] == [float(total)] * 10
        assert out["b"] == [float(total)] * 15
        assert out["r"] == [float(total)] * 4
        assert out["g"] == [0.0, 0.0, 1.0, 1.0]
        assert out["bc"] == [7.0] * 3
        assert out["s"] == [float(total)] * 2
        assert out["empty"] is None
        assert out["after"] == [2.0] * 3
