"""all_to_all_v_dynamic (and device_alltoallv_single, dispatch, combine) through the bindings on
1-3 CPU ranks of the native cpu backend: counts as int64 tensors, rows taken from dim 0 of the
input (or row_size=), random counts with zeros against a numpy reference, dispatch + combine
bringing every token back, and the capacity error on every rank. Layer: tests (Python)."""

import numpy as np
import pytest

import commx
from ranks import run_ranks

pytestmark = pytest.mark.skipif(not commx._C.has_backend("cpu"), reason="native cpu backend not built")


def _counts(size, seed):
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 5, size=(size, size)).astype(np.int64)
    c[rng.random((size, size)) < 0.3] = 0
    return c  # c[k, j]: rows rank k sends to rank j


def _rows(rank, n, width, dtype, salt=0):
    base = np.arange(n * width).reshape(n, width)
    return ((base * 3 + rank * 1000 + salt) % 127).astype(dtype)


def _plain(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "dyn", store=store, rank=rank, size=size, timeout=30)
    checked = 0
    for seed, (width, dtype) in enumerate([(3, np.float32), (1, np.int8), (5, np.float64)]):
        c = _counts(size, seed)
        sent = int(c[rank].sum())
        inp = _rows(rank, sent, width, dtype)
        out = np.full((int(c[:, rank].sum()) + 2, width), -1, dtype)
        got = np.full(size, -7, np.int64)
        op = comm.all_to_all_v_dynamic if seed % 2 == 0 else comm.device_alltoallv_single
        if op == comm.device_alltoallv_single and width != 1:
            op = comm.all_to_all_v_dynamic
        op(out, inp, got, c[rank].copy())
        want = []
        for k in range(size):
            first = int(c[k, :rank].sum())
            want.append(_rows(k, int(c[k].sum()), width, dtype)[first:first + c[k, rank]])
        want = np.concatenate(want)
        np.testing.assert_array_equal(got, c[:, rank])
        np.testing.assert_array_equal(out[:len(want)], want)
        assert (out[len(want):] == -1).all(), "rows past the received ones were written"
        checked += 1
    # Flat tensors with an explicit row size.
    flat_in = np.arange(4 * size * 2, dtype=np.float32) + 100 * rank
    flat_out = np.zeros(4 * size * 2, np.float32)
    got = np.zeros(size, np.int64)
    comm.all_to_all_v_dynamic(flat_out, flat_in, got, np.full(size, 2, np.int64), row_size=4)
    np.testing.assert_array_equal(got, np.full(size, 2))
    for k in range(size):
        np.testing.assert_array_equal(flat_out[k * 8:(k + 1) * 8],
                                      np.arange(rank * 8, rank * 8 + 8, dtype=np.float32) + 100 * k)
    comm.finalize()
    return checked


def test_all_to_all_v_dynamic_plain():
    for size in (1, 2, 3):
        assert run_ranks(size, _plain) == [3] * size


def _moe_round_trip(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "moe", store=store, rank=rank, size=size, timeout=30)
    experts = 2 * size
    rng = np.random.default_rng(rank)
    counts = rng.integers(0, 4, size=experts).astype(np.int64)
    tokens = _rows(rank, int(counts.sum()), 6, np.float32, salt=rank)
    cap = 4 * experts * size
    at_experts = np.zeros((cap, 6), np.float32)
    received = np.zeros(experts, np.int64)
    comm.dispatch(at_experts, tokens, received, counts)
    n = int(received.sum())
    back = np.zeros((cap, 6), np.float32)
    returned = np.zeros(experts, np.int64)
    comm.combine(back, at_experts[:n], returned, received)
    np.testing.assert_array_equal(returned, counts)
    np.testing.assert_array_equal(back[:len(tokens)], tokens)
    comm.finalize()
    return True


def test_dispatch_combine_round_trip():
    for size in (2, 3):
        assert all(run_ranks(size, _moe_round_trip))


def _capacity(rank, size, store):
    comm = commx.new_comm("cpu", "cpu", "cap", store=store, rank=rank, size=size, timeout=30)
    inp = np.ones(8, np.float32)
    out = np.zeros(3 if rank == 1 else 8, np.float32)
    with pytest.raises(commx.InvalidArgumentError, match="capacity exceeded: rank 1 would receive"):
        comm.all_to_all_v_dynamic(out, inp, np.zeros(size, np.int64), np.full(size, 2, np.int64))
    with pytest.raises(commx.InvalidArgumentError, match="expected int64"):
        comm.all_to_all_v_dynamic(out, inp, np.zeros(size, np.int64), np.full(size, 2, np.int32))
    comm.finalize()
    return True


def test_capacity_exceeded_fails_every_rank():
    assert all(run_ranks(2, _capacity))
