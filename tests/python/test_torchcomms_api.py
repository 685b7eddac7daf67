"""torchcomms' documented Python API on commx's cpu backend, written from its docs and type stubs:
the quick start, new_comm's defaults and get_options, split, batched send/recv, hooks, per-comm
timeout and hints, persistent all-gather, object collectives (objcol), RedOpType, split sizes in
rows, and errors in Python's and torch's exception classes. Ranks are processes meeting through
a store, every result checked against a reference. Skipped where torch is absent.
Layer: tests (Python)."""

import time
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402


def _comm(rank, size, store, **kw):
    return commx.new_comm("cpu", torch.device("cpu"), store=store, rank=rank, size=size, **kw)


def _quick_start(rank, size, store):
    comm = _comm(rank, size, store, name="main_comm")
    t = torch.full((1024,), float(rank + 1))
    comm.all_reduce(t, commx.ReduceOp.SUM, async_op=False)
    want = float(size * (size + 1) // 2)
    torch.testing.assert_close(t, torch.full((1024,), want))
    work = comm.all_reduce(t, commx.ReduceOp.SUM, async_op=True)
    work.wait()
    assert work.is_completed()
    torch.testing.assert_close(t, torch.full((1024,), want * size))
    assert (comm.get_rank(), comm.get_size(), comm.get_name()) == (rank, size, "main_comm")
    assert comm.get_device() == torch.device("cpu") and comm.get_backend() == "cpu"
    comm.finalize()

    # name is optional; get_options reports what the comm was made with, defaults included.
    plain = _comm(rank, size, store)
    opts = plain.get_options()
    assert isinstance(opts, commx.CommOptions)
    assert opts.timeout == timedelta(seconds=600) and opts.hints == {}
    assert opts.abort_process_on_timeout_or_error is False and opts.enable_reconfigure is False
    tuned = _comm(rank, size, store, name="tuned", timeout=timedelta(seconds=42),
                  hints={"transport": "tcp"}, high_priority_stream=True)
    opts = tuned.get_options()
    assert opts.timeout == timedelta(seconds=42) and opts.hints == {"transport": "tcp"}
    assert opts.high_priority_stream is True and opts.store is store
    assert tuned.is_abort_supported() and "cpu" in tuned.get_backend_version()
    x = torch.arange(6, dtype=torch.float32).reshape(2, 3) * (rank + 1)
    tuned.all_reduce(x, commx.ReduceOp.MAX)
    torch.testing.assert_close(x, torch.arange(6, dtype=torch.float32).reshape(2, 3) * size)
    for c in (plain, tuned):
        c.finalize()
    return True


def test_quick_start_and_options():
    run_ranks(2, _quick_start)


def _split_and_batch(rank, size, store):
    comm = _comm(rank, size, store, name="parent")
    # split: new rank = position in the list; a rank outside an empty list gets None.
    order = list(reversed(range(size)))
    child = comm.split(order, "reversed")
    assert child.get_rank() == order.index(rank) and child.get_size() == size
    t = torch.tensor([float(child.get_rank())])
    child.broadcast(t, 0)
    assert t.item() == 0.0
    assert comm.split([], "nobody") is None

    # batched send/recv around the ring, 2-D tensors; ops are listed before issue.
    right, left = (rank + 1) % size, (rank - 1) % size
    send = torch.arange(12, dtype=torch.float32).reshape(3, 4) + 100 * rank
    recv = torch.zeros(3, 4)
    batch = comm.batch_op_create()
    batch.send(send, right)
    batch.recv(recv, left)
    assert [(op.type, op.peer) for op in batch.ops] == [(commx.P2POpType.SEND, right),
                                                       (commx.P2POpType.RECV, left)]
    assert batch.ops[0].tensor is send
    batch.issue(async_op=True, options=commx.BatchP2POptions(timeout=timedelta(seconds=30))).wait()
    torch.testing.assert_close(recv, torch.arange(12, dtype=torch.float32).reshape(3, 4) +
                               100 * left)
    assert batch.ops == []

    # all_to_all_v_single: split sizes count rows of dim 0.
    in_rows = [d + 1 for d in range(size)]
    inp = torch.cat([torch.full((n, 2), float(10 * rank + d)) for d, n in enumerate(in_rows)])
    out = torch.zeros((rank + 1) * size, 2)
    comm.all_to_all_v_single(out, inp, [rank + 1] * size, in_rows)
    want = torch.cat([torch.full((rank + 1, 2), float(10 * s + rank)) for s in range(size)])
    torch.testing.assert_close(out, want)

    # persistent all-gather: one output, several inputs.
    gathered = torch.zeros(size, 3)
    handle = comm.all_gather_p_init(gathered)
    for step in range(2):
        comm.all_gather_p_exec(handle, torch.full((1, 3), float(rank + step)),
                               async_op=True).wait()
        torch.testing.assert_close(gathered, torch.tensor(
            [[float(r + step)] * 3 for r in range(size)]))
    comm.all_gather_p_free(handle)
    for c in (child, comm):
        c.finalize()
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_split_batch_p2p_rows_and_persistent_all_gather(size):
    run_ranks(size, _split_and_batch)


def _hooks_and_defaults(rank, size, store):
    comm = _comm(rank, size, store, name="hooked")
    seen = []
    pre = comm.register_pre_hook(lambda op, op_id, args: seen.append(("pre", op, op_id,
                                                                      args.count)))
    comm.register_post_hook(lambda op_id, args: seen.append(("post", op_id)))
    aborted = []
    comm.register_abort_hook(lambda: aborted.append(True))
    comm.all_reduce(torch.ones(5), commx.ReduceOp.SUM)
    comm.barrier()
    assert seen == [("pre", commx.OpName.all_reduce, 1, 5), ("post", 1),
                    ("pre", commx.OpName.barrier, 2, 0), ("post", 2)], seen
    pre.remove()
    pre.remove()  # harmless
    comm.all_reduce(torch.ones(2), commx.ReduceOp.SUM)
    assert seen[-1] == ("post", 3) and len(seen) == 5

    # set_hints joins every later op's hints; a bad algorithm hint is reported by the backend.
    comm.set_hints({"algorithm": "no_such_algorithm"})
    with pytest.raises(commx.Error, match="no_such_algorithm"):
        comm.all_reduce(torch.ones(2), commx.ReduceOp.SUM)
    comm.finalize()

    # set_timeout bounds later ops: rank 1 never joins, rank 0 times out in about a second.
    late = _comm(rank, size, store, name="late")
    late.barrier()
    late.set_timeout(timedelta(seconds=1))
    assert late.get_timeout() == timedelta(seconds=1)
    assert late.get_options().timeout == timedelta(seconds=1)
    if rank == 0:
        t0 = time.monotonic()
        with pytest.raises(TimeoutError) as info:  # the builtin class
            late.all_reduce(torch.ones(2), commx.ReduceOp.SUM)
        assert time.monotonic() - t0 < 10
        assert isinstance(info.value, commx.TimeoutError)
        assert isinstance(info.value, dist.DistBackendError)  # torch.distributed is imported
        assert "all_reduce" in str(info.value) and "late" in str(info.value)
    else:
        time.sleep(2.5)
    late.abort()
    assert not aborted  # the abort hook belongs to the first comm
    return True


def test_hooks_set_hints_set_timeout():
    run_ranks(2, _hooks_and_defaults)


def _object_collectives(rank, size, store):
    from commx import objcol
    comm = _comm(rank, size, store, name="objects")
    mine = {"rank": rank, "name": "x" * (10 * rank + 1), "t": torch.arange(rank + 2)}
    every = [None] * size
    objcol.all_gather_object(comm, every, mine)
    for r, got in enumerate(every):
        assert got["rank"] == r and got["name"] == "x" * (10 * r + 1)
        torch.testing.assert_close(got["t"], torch.arange(r + 2))

    root = size - 1
    at_root = [None] * size if rank == root else None
    objcol.gather_object(comm, ("g", rank), root, at_root)
    if rank == root:
        assert at_root == [("g", r) for r in range(size)]

    objs = [{"k": [1, 2, 3]}, "two", 3.5] if rank == 0 else [None, None, None]
    objcol.broadcast_object_list(comm, objs, 0)
    assert objs == [{"k": [1, 2, 3]}, "two", 3.5]

    out = [None]
    objcol.scatter_object_list(comm, out, [f"for {r}" * (r + 1) for r in range(size)]
                               if rank == 0 else None, 0)
    assert out == [f"for {rank}" * (rank + 1)]

    if rank == 0:
        objcol.send_object_list(comm, ["a", {"b": 2}], 1)
    elif rank == 1:
        got = [None, None]
        objcol.recv_object_list(comm, got, 0)
        assert got == ["a", {"b": 2}]
    comm.finalize()
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_object_collectives(size):
    run_ranks(size, _object_collectives)


def test_reduce_op_types_and_backends():
    assert commx.ReduceOp.SUM.type is commx.RedOpType.SUM
    assert commx.ReduceOp.PREMUL_SUM(2.0).type is commx.RedOpType.PREMUL_SUM
    assert commx.ReduceOp.AVG.type is commx.RedOpType.AVG
    assert "cpu" in commx.available_backends() and commx.is_backend_built("cpu")
    assert not commx.is_backend_built("no_such_backend")


def _input_errors(rank, size, store):
    comm = _comm(rank, size, store, name="errors")
    with pytest.raises(commx.InvalidArgumentError) as info:
        comm.all_reduce(torch.zeros(4, 4).t(), commx.ReduceOp.SUM)
    msg = str(info.value)
    assert msg.count("InvalidArgument") == 1, msg
    assert "all_reduce tensor: " in msg and "not contiguous" in msg and ".contiguous()" in msg
    assert isinstance(info.value, dist.DistError)
    comm.finalize()
    return True


def test_input_errors_in_python_terms():
    run_ranks(2, _input_errors)


def test_surface_table_is_true():
    """Every row of docs/python.md's torchcomms surface table against the bindings."""
    import importlib.util
    import os
    import re
    doc = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "python.md")
    with open(doc) as f:
        section = f.read().split("## torchcomms surface")[1].split("\n## ")[0]
    rows = re.findall(r"^\| `([\w.]+)` \| (yes|no) \|", section, re.M)
    assert len(rows) > 30, rows
    for name, status in rows:
        if name.startswith("Comm."):
            present = hasattr(commx.Comm, name.split(".", 1)[1])
        elif name in ("objcol", "device_mesh", "functional"):
            present = importlib.util.find_spec(f"commx.{name}") is not None
        else:
            present = hasattr(commx, name)
        assert present == (status == "yes"), f"docs say {name}: {status}"
