"""Windows as torchcomms makes them, on commx's cpu backend: new_window() then tensor_register,
new_window(tensor), a ring of puts read from the registered tensor itself, the window's
attributes, deregistration keeping values, the errors torchcomms documents (double register,
deregister without register), TorchComm.tensor_register and the memory allocator. 3 ranks, every
value checked against a reference. Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=20)
A = commx.TorchCommWinAccessType


def _comm(rank, size, store, name):
    return commx.new_comm("cpu", "cpu", name, store=store, rank=rank, size=size, timeout=T)


def _ring(rank, size, store, dtype, with_tensor):
    comm = _comm(rank, size, store, "win_ring")
    count = 5
    buf = torch.ones(count * size, dtype=dtype)
    if with_tensor:
        win = comm.new_window(buf)
    else:
        win = comm.new_window()
        assert win.get_tensor() is None and win.get_size() == 0 and win.dtype is None
        win.tensor_register(buf)
    assert win.get_tensor() is buf and win.dtype == dtype and win.shape == [count * size]
    assert win.get_size() == count * size * buf.element_size()
    assert win.device == torch.device("cpu")
    # values kept; registration returns once every rank's values are in its buffer, so puts
    # may start at once
    torch.testing.assert_close(buf, torch.ones(count * size, dtype=dtype))
    torch.testing.assert_close(win.map_remote_tensor((rank + 1) % size),
                               torch.ones(count * size, dtype=dtype))
    comm.barrier(False)  # every rank checked the values before the first put
    dst, src = (rank + 1) % size, (rank - 1) % size
    for it in range(4):
        data = (torch.arange(count) + 100 * rank + it).to(dtype)
        async_op = it % 2 == 1
        work = win.put(data, dst, dst * count, async_op)
        if async_op:
            work.wait()
        win.signal(dst, async_op).wait()
        win.wait_signal(src, async_op).wait()
        want = (torch.arange(count) + 100 * src + it).to(dtype)
        # the registered tensor is the window's buffer: the put landed in it
        torch.testing.assert_close(buf[rank * count:(rank + 1) * count], want)
        torch.testing.assert_close(win.map_remote_tensor(rank)[rank * count:(rank + 1) * count],
                                   want)
        comm.barrier(False)
    # a peer's buffer, loaded directly (ranks of one host: UNIFIED)
    assert win.get_attr(dst).access_type == A.WIN_ACCESS_TYPE_UNIFIED
    peer = win.map_remote_tensor(dst)
    torch.testing.assert_close(peer[dst * count:(dst + 1) * count],
                               (torch.arange(count) + 100 * rank + 3).to(dtype))
    comm.barrier(False)
    win.tensor_deregister()
    # deregistered: private memory again, values kept; the peer's puts no longer reach it
    torch.testing.assert_close(buf[rank * count:(rank + 1) * count],
                               (torch.arange(count) + 100 * src + 3).to(dtype))
    assert win.get_tensor() is None and win.get_size() == 0
    comm.finalize()
    return True


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bfloat16])
def test_put_ring_into_registered_tensors(dtype):
    run_ranks(3, _ring, dtype, False)


def test_new_window_with_tensor():
    run_ranks(3, _ring, torch.float32, True)


def _shapes_and_errors(rank, size, store):
    comm = _comm(rank, size, store, "win_errors")
    buf = torch.arange(6, dtype=torch.float32).view(2, 3) + 10 * rank
    win = comm.new_window()
    win.tensor_register(buf)
    assert win.shape == [2, 3]
    torch.testing.assert_close(win.map_remote_tensor((rank + 1) % size),
                               torch.arange(6, dtype=torch.float32).view(2, 3)
                               + 10 * ((rank + 1) % size))
    with pytest.raises(RuntimeError, match="already has a tensor registered"):
        win.tensor_register(buf)
    comm.barrier(False)
    win.tensor_deregister()
    with pytest.raises(RuntimeError, match="no tensor is registered"):
        win.tensor_deregister()
    with pytest.raises(commx.InvalidArgumentError, match="has no tensor registered"):
        win.put(buf, 0, 0, False)
    with pytest.raises(commx.InvalidArgumentError, match=r"win_errors' rank \d\] tensor_register:"
                       " the tensor is not contiguous"):
        comm.new_window(torch.zeros(4, 4).t())
    # owning=False: the window holds no reference to the tensor object
    loose = torch.zeros(3)
    win2 = comm.new_window()
    win2.tensor_register(loose, owning=False)
    assert win2.get_tensor() is loose
    del loose
    assert win2.get_tensor() is None
    comm.barrier(False)
    win2.tensor_deregister()
    comm.finalize()
    return True


def test_window_shapes_and_errors():
    run_ranks(3, _shapes_and_errors)


def _comm_registration(rank, size, store):
    comm = _comm(rank, size, store, "win_register")
    for count, dtype in ((4, torch.float32), (1024, torch.int32), (1 << 16, torch.int8)):
        t = (torch.ones(count) * 99).to(dtype) if rank == 0 else torch.zeros(count, dtype=dtype)
        comm.tensor_register(t)
        try:
            work = comm.broadcast(t, 0, False)
            assert work.is_completed()
            torch.testing.assert_close(t, (torch.ones(count) * 99).to(dtype))
        finally:
            comm.tensor_deregister(t)
    t = torch.zeros(4)
    comm.tensor_register(t)
    with pytest.raises(commx.InvalidArgumentError, match="already registered"):
        comm.tensor_register(t)
    comm.tensor_deregister(t)
    with pytest.raises(commx.InvalidArgumentError, match="not registered"):
        comm.tensor_deregister(t)
    with pytest.raises(commx.InvalidArgumentError, match="not contiguous"):
        comm.tensor_register(torch.zeros(3, 3).t())

    # The allocator: tensors in shared memory, used like any other.
    alloc = comm.mem_allocator
    assert isinstance(alloc, commx.HostMemAllocator) and isinstance(
        commx.get_mem_allocator("cpu"), commx.HostMemAllocator)
    x = alloc.empty(2, 3, dtype=torch.float64)
    assert x.is_shared() and x.shape == (2, 3) and x.dtype == torch.float64
    x.fill_(rank + 1)
    comm.all_reduce(x, commx.ReduceOp.SUM, False)
    torch.testing.assert_close(x, torch.full((2, 3), float(size * (size + 1) // 2),
                                             dtype=torch.float64))
    assert alloc.allocate(128).nbytes() == 128
    comm.finalize()
    return True


def test_comm_tensor_register_and_allocator():
    run_ranks(3, _comm_registration)


def test_mem_allocator_for_unknown_backend():
    with pytest.raises(commx.InvalidArgumentError, match="get_mem_allocator\\('nccl2'\\)"):
        commx.get_mem_allocator("nccl2")
