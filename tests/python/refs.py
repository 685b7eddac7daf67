"""Deterministic test data and independent numpy references for the collective tests.
Layer: tests (Python)."""

import functools

import numpy as np

import commx

FLOATS = [np.float32, np.float64, np.float16]
INTS = [np.int8, np.uint8, np.int32, np.int64, np.uint32, np.uint64]
SIZES = [0, 1, 7, 33]


def data(rank, n, dtype, salt=0):
    """The input of `rank`: every rank can compute every other rank's input."""
    rng = np.random.default_rng(7919 * rank + 104729 * salt + n)
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, n).astype(np.bool_)
    if dtype.kind == "f":
        return (rng.standard_normal(n) * 0.5 + 1.0).astype(dtype)
    if dtype.kind == "u":
        return rng.integers(0, 5, n).astype(dtype)
    return rng.integers(-4, 5, n).astype(dtype)


def _fold(fn, arrays):
    return functools.reduce(lambda a, b: fn(a, b).astype(a.dtype), arrays)


def reduce_ref(arrays, op):
    """The reduction of `arrays` (one per rank) by commx.ReduceOp `op`, computed pairwise in rank
    order in the arrays' dtype (float16 in float32, like a careful backend)."""
    dtype = arrays[0].dtype
    acc = [a.astype(np.float32) for a in arrays] if dtype == np.float16 else arrays
    kind = op.kind
    if kind in ("sum", "avg", "premulsum"):
        out = _fold(np.add, acc)
        if kind == "avg":
            out = out / len(arrays)
        if kind == "premulsum":
            out = out * op.factor
    elif kind == "prod":
        out = _fold(np.multiply, acc)
    elif kind == "min":
        out = _fold(np.minimum, acc)
    elif kind == "max":
        out = _fold(np.maximum, acc)
    elif kind == "band":
        out = _fold(np.bitwise_and, acc)
    elif kind == "bor":
        out = _fold(np.bitwise_or, acc)
    elif kind == "bxor":
        out = _fold(np.bitwise_xor, acc)
    else:
        raise ValueError(kind)
    return np.asarray(out).astype(dtype)


def ops_for(dtype):
    R = commx.ReduceOp
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return [R.BAND, R.BOR, R.BXOR, R.MIN, R.MAX]
    if dtype.kind == "f":
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.PREMUL_SUM(0.5)]
    return [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR]


def assert_close(got, want, what):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if got.dtype.kind == "f":
        tol = {2: 1e-2, 4: 1e-5, 8: 1e-12}[got.dtype.itemsize]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol,
                                   atol=tol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)
