"""torchcomms' reconfigure contract on commx (new_comm(..., enable_reconfigure=True),
get_init_handle, reconfigure with a list or a set of handles): a comm without members until
reconfigure, ranks in the order of the list (sorted for a set), collectives checked against a
reference afterwards, a second reconfigure by a subset of the processes (the survivors of a
failure), the launcher's store found from the environment, and the errors (ops before
reconfigure, a handle missing or listed twice, reconfigure on an ordinary comm).
Layer: tests (Python)."""

from datetime import timedelta

import pytest

import commx
from ranks import init_agent_store_env, native_tcp_store, run_ranks

np = pytest.importorskip("numpy")


def _exchange_handles(store, key, rank, size, handle):
    store.set(f"{key}/{rank}", handle)
    return [bytes(store.get(f"{key}/{r}")).decode() for r in range(size)]


def _sum_check(comm, tag):
    x = np.full(5, comm.get_rank() + 1.0, dtype=np.float32)
    comm.all_reduce(x, commx.ReduceOp.SUM)
    n = comm.get_size()
    np.testing.assert_allclose(x, np.full(5, n * (n + 1) / 2), err_msg=tag)


def _lifecycle(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "elastic", store=store, enable_reconfigure=True)
    assert isinstance(comm, commx.ReconfigurableComm)
    assert comm.get_options().enable_reconfigure is True and comm.get_name() == "elastic"
    with pytest.raises(commx.InvalidArgumentError, match="reconfigure"):
        comm.all_reduce(np.zeros(2, dtype=np.float32), commx.ReduceOp.SUM)
    handle = comm.get_init_handle()
    assert isinstance(handle, str) and handle == comm.get_init_handle()

    # A list: ranks in its order (reversed here, so rank r becomes size-1-r).
    handles = _exchange_handles(store, "h", rank, size, handle)
    with pytest.raises(commx.InvalidArgumentError, match="listed twice"):
        comm.reconfigure(0, handles + handles[:1])
    with pytest.raises(commx.InvalidArgumentError, match="not among"):
        comm.reconfigure(0, [h for h in handles if h != handle])
    work = comm.reconfigure(uuid=0, init_handles=list(reversed(handles)),
                            timeout=timedelta(seconds=30))
    work.wait()
    assert (comm.get_rank(), comm.get_size()) == (size - 1 - rank, size)
    _sum_check(comm, "after reconfigure(list)")
    # Point-to-point in the new numbering, checked by value.
    me, n = comm.get_rank(), comm.get_size()
    out, got = np.full(3, 100.0 + me, dtype=np.float32), np.zeros(3, dtype=np.float32)
    b = comm.batch_op_create()
    b.send(out, (me + 1) % n)
    b.recv(got, (me - 1) % n)
    b.issue(async_op=False)
    np.testing.assert_allclose(got, np.full(3, 100.0 + (me - 1) % n))

    # A set: sorted order, the same on every process.
    comm.reconfigure(uuid=1, init_handles=set(handles)).wait()
    assert comm.get_rank() == sorted(handles).index(handle)
    _sum_check(comm, "after reconfigure(set)")

    # The survivors of a "failure" (the last process leaves): a new comm of the others.
    if rank < size - 1:
        comm.reconfigure(uuid=2, init_handles=handles[:-1]).wait()
        assert (comm.get_rank(), comm.get_size()) == (rank, size - 1)
        _sum_check(comm, "after reconfigure without the last process")
    comm.finalize()

    plain = commx.new_comm("cpu", "cpu", "plain", store=store, rank=rank, size=size)
    for call in (plain.get_init_handle, lambda: plain.reconfigure(0, [])):
        with pytest.raises(commx.InvalidArgumentError, match="enable_reconfigure=True"):
            call()
    plain.finalize()
    return True


def test_reconfigure_lifecycle():
    run_ranks(3, _lifecycle)


def _from_launcher(rank, size, port):
    # torchrun's variables with the store hosted by the parent (its agent): the comm finds it.
    init_agent_store_env(rank, size, port)
    comm = commx.new_comm("cpu", "cpu", enable_reconfigure=True)
    store = commx.launcher_store(timedelta(seconds=30))
    handles = _exchange_handles(store, "launcher/h", rank, size, comm.get_init_handle())
    comm.reconfigure(7, handles).wait()
    assert (comm.get_rank(), comm.get_size()) == (rank, size)
    _sum_check(comm, "launcher store")
    comm.finalize()
    return True


def test_reconfigure_over_the_launchers_store():
    if not native_tcp_store():
        pytest.skip("libcommx has no TCP store")
    run_ranks(2, _from_launcher, with_store=False)


def _own_handle_repeated(rank, size, store):
    # torchcomms' gloo convention: each process lists its own handle once per member.
    comm = commx.new_comm("cpu", "cpu", "alike", store=store, enable_reconfigure=True)
    comm.reconfigure(uuid=7, init_handles=[comm.get_init_handle()] * size,
                     timeout=timedelta(seconds=30)).wait()
    assert comm.get_size() == size
    _sum_check(comm, "own handle repeated")
    got = comm.get_rank()
    comm.finalize()
    return got


def test_reconfigure_with_the_own_handle_repeated():
    assert sorted(run_ranks(3, _own_handle_repeated)) == [0, 1, 2]  # ranks in arrival order
