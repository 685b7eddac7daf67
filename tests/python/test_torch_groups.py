"""Process groups on the "commx" torch.distributed backend: the subgroup matrix (groups that only
some ranks use, overlapping groups, groups created in different orders where torch allows it,
split_group, new_subgroups) on 2-8 ranks, each result checked against a local reference; and the
c10d extras a backend provides (batch_isend_irecv, coalescing, get_future, monitored_barrier).
Every group has a short timeout, so a disagreement on a comm's identity fails fast instead of
hanging. Skipped where torch is absent. Layer: tests (Python)."""

import os
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from ranks import init_commx_process_group, run_ranks  # noqa: E402

# Bounds every wait; generous for 8 ranks sharing 2 busy cores, far below a hang.
GROUP_TIMEOUT = timedelta(seconds=30)


def _init(rank, size, port, timeout=GROUP_TIMEOUT):
    init_commx_process_group(rank, size, port, timeout)


def _check_sum(group, members, rank, tag):
    """all_reduce over `group` of a value per global rank; checks the sum over `members`."""
    t = torch.tensor([rank + 1.0, 10.0 * rank, 1.0])
    dist.all_reduce(t, group=group)
    want = torch.tensor([sum(r + 1.0 for r in members), sum(10.0 * r for r in members),
                         float(len(members))])
    torch.testing.assert_close(t, want, msg=f"{tag}: rank {rank}")


def _new(ranks, **kw):
    return dist.new_group(ranks, timeout=GROUP_TIMEOUT, **kw)


def _subgroup_matrix(rank, size, port, full=True):
    _init(rank, size, port)
    done = []

    # A group only its one member uses, then a bigger group: the other ranks skipped the first
    # comm, yet agree on the second.
    first = _new([0])
    if rank == 0:
        _check_sum(first, [0], rank, "singleton [0]")
    pair = _new([0, 1])
    if rank in (0, 1):
        _check_sum(pair, [0, 1], rank, "pair after singleton")
    done.append("singleton then pair")

    # One group per rank, each used by its member only; then the world.
    own = [_new([r]) for r in range(size)]
    _check_sum(own[rank], [rank], rank, "own group")
    _check_sum(None, list(range(size)), rank, "world after own groups")
    done.append("one group per rank")
    if not full:  # the cases above are the ones a skipped group broke; the rest are the same
        dist.destroy_process_group()  # on fewer ranks
        return done

    # Overlapping groups, used in a different order by the rank they share.
    if size >= 3:
        a, b = [0, 1], [1, 2]
        ga, gb = _new(a), _new(b)
        order = [(gb, b), (ga, a)] if rank == 1 else [(ga, a), (gb, b)]
        for g, members in order:
            if rank in members:
                _check_sum(g, members, rank, f"overlapping {members}")
        done.append("overlapping groups")

    # Even and odd ranks: disjoint groups used concurrently, then a group across both.
    evens, odds = list(range(0, size, 2)), list(range(1, size, 2))
    ge, go = _new(evens), _new(odds)
    _check_sum(ge if rank % 2 == 0 else go, evens if rank % 2 == 0 else odds, rank,
               "even/odd")
    across = [0, size - 1]
    gx = _new(across)
    if rank in across:
        _check_sum(gx, across, rank, "across")
    done.append("disjoint then across")

    # Groups created by their members only (use_local_synchronization), where torch allows
    # members to create them in different orders: the pairs (r, r+1) created from each end.
    if size >= 4:
        pairs = [[r, r + 1] for r in range(0, size - 1, 2)]
        mine = [p for p in pairs if rank in p]
        for p in mine:
            g = dist.new_group(p, timeout=GROUP_TIMEOUT, use_local_synchronization=True)
            _check_sum(g, p, rank, f"local group {p}")
        done.append("local-synchronization groups")

    # split_group: members of each split get a group; broadcast from the split's last rank.
    halves = [list(range(0, size // 2)), list(range(size // 2, size))] if size >= 2 else [[0]]
    sub = dist.split_group(split_ranks=halves, timeout=GROUP_TIMEOUT)
    members = halves[0] if rank in halves[0] else halves[1]
    _check_sum(sub, members, rank, "split_group")
    t = torch.full((3, 2), float(rank))
    dist.broadcast(t, src=members[-1], group=sub)
    torch.testing.assert_close(t, torch.full((3, 2), float(members[-1])))
    done.append("split_group")

    # new_subgroups: the world cut in groups of 2.
    if size % 2 == 0:
        cur, _ = dist.new_subgroups(group_size=2, timeout=GROUP_TIMEOUT)
        base = rank - rank % 2
        _check_sum(cur, [base, base + 1], rank, "new_subgroups")
        done.append("new_subgroups")

    # Back on the world: every earlier comm left it in step.
    _check_sum(None, list(range(size)), rank, "world at the end")
    dist.destroy_process_group()
    return done


@pytest.mark.parametrize("size", [2, 3, 4])
def test_subgroup_matrix(size):
    results = run_ranks(size, _subgroup_matrix, with_store=False, timeout=120)
    assert all(r == results[0] for r in results)
    assert "split_group" in results[0] and "new_subgroups" in results[0] or size % 2
    assert size < 4 or "local-synchronization groups" in results[0]


def test_subgroup_matrix_8_ranks():
    results = run_ranks(8, _subgroup_matrix, False, with_store=False, timeout=150)
    assert results == [["singleton then pair", "one group per rank"]] * 8


def _c10d_extras(rank, size, port):
    _init(rank, size, port)
    right, left = (rank + 1) % size, (rank - 1) % size

    # batch_isend_irecv: a ring exchange of 2-D tensors, big enough not to fit in any buffer.
    send = torch.arange(64 * 1024, dtype=torch.float32).reshape(256, 256) + rank
    recv = torch.zeros_like(send)
    ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    torch.testing.assert_close(recv, torch.arange(64 * 1024, dtype=torch.float32)
                               .reshape(256, 256) + left)

    # Coalesced all_reduce through the coalescing manager.
    from torch.distributed.distributed_c10d import _coalescing_manager
    ts = [torch.full((4,), float(rank + i)) for i in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    for i, t in enumerate(ts):
        torch.testing.assert_close(t, torch.full((4,), float(sum(r + i for r in range(size)))))

    # get_future: a Future with the op's tensors, chained.
    t = torch.full((5,), float(rank))
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    torch.testing.assert_close(doubled, torch.full((5,), 2.0 * sum(range(size))))

    # all_to_all_single with uneven splits of 2-D tensors: splits count rows.
    in_splits = [r + 1 for r in range(size)]          # rank sends r+1 rows to rank r
    out_splits = [rank + 1] * size                    # and receives rank+1 rows from each
    inp = torch.cat([torch.full((n, 3), float(100 * rank + dst)) for dst, n in
                     enumerate(in_splits)])
    out = torch.zeros(sum(out_splits), 3)
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((rank + 1, 3), float(100 * src + rank)) for src in range(size)])
    torch.testing.assert_close(out, want)

    # monitored_barrier: everyone arrives.
    dist.monitored_barrier(timeout=GROUP_TIMEOUT)
    dist.destroy_process_group()
    return True


@pytest.mark.parametrize("size", [2, 3])
def test_c10d_extras(size):
    run_ranks(size, _c10d_extras, with_store=False, timeout=90)


def _monitored_barrier_names_the_missing_rank(rank, size, port):
    _init(rank, size, port)
    if rank == size - 1:
        return "skipped"  # never arrives
    if rank == 0:
        with pytest.raises(Exception,
                           match=rf"\[Rank 0\]: Rank {size - 1} failed to pass monitoredBarrier"):
            dist.monitored_barrier(timeout=timedelta(seconds=2))
        return "named"
    with pytest.raises(Exception):
        dist.monitored_barrier(timeout=timedelta(seconds=3))
    return "timed out"


def test_monitored_barrier_names_the_missing_rank():
    got = run_ranks(3, _monitored_barrier_names_the_missing_rank, with_store=False, timeout=60)
    assert got == ["named", "timed out", "skipped"]


def _failed_op_dumps(rank, size, port, trace_dir):
    import json
    import os
    import time

    import commx
    os.environ["COMMX_TRACE_DIR"] = trace_dir
    _init(rank, size, port, timeout=timedelta(seconds=2))
    t = torch.ones(8)
    dist.all_reduce(t)  # both ranks: the comm exists
    if rank == 1:
        time.sleep(4)  # alive, but skips the next all_reduce; then dumps on request
        backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
        assert backend.comm_for(torch.device("cpu")).dump_flight_record().endswith(
            "pg0_cpu.rank1.json")
        return "skipped"
    with pytest.raises(commx.TimeoutError) as info:
        dist.all_reduce(t)  # issued async by the process group, failed when waited for
    assert isinstance(info.value, dist.DistBackendError)
    with open(os.path.join(trace_dir, "pg0_cpu.rank0.json")) as f:
        dump = json.load(f)
    ops = [(op["seq"], op["op"], op["state"]) for op in dump["ops"]]
    assert ops == [(1, "all_reduce", "completed"), (2, "all_reduce", "failed")], ops
    assert "rank(s) 1" in dump["ops"][-1]["error"] and dump["world_ranks"] == [0, 1]
    return "dumped"


def test_failed_async_op_of_the_process_group_dumps_the_flight_record(tmp_path, capfd):
    got = run_ranks(2, _failed_op_dumps, str(tmp_path), with_store=False, timeout=60)
    assert got == ["dumped", "skipped"]

    # torch's flight-recorder analysis reads the dumps once converted.
    from commx import flight_recorder
    out = tmp_path / "torch_fr"
    written = flight_recorder.convert(str(tmp_path), str(out))
    assert sorted(os.path.basename(p) for p in written) == ["rank_0", "rank_1"]
    from torch.distributed.flight_recorder.fr_trace import main as fr_trace
    capfd.readouterr()
    fr_trace([str(out), "-p", "rank_"])
    report = "".join(capfd.readouterr())
    assert "all_reduce" in report and "pg0_cpu" in report, report
    assert "missing ranks: {1}" in report or "{1}" in report, report
