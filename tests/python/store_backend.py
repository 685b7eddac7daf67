"""A reference backend written in Python over the rendezvous store (numpy, one key per piece of
data). It is slow and simple on purpose: it checks the bindings (DLPack views, OpDesc, errors)
independently of the native backends, and shows commx.register_backend at work.
Layer: tests (Python)."""

import numpy as np

import commx

NP_DTYPES = {
    "float": np.float32, "double": np.float64, "half": np.float16, "int8": np.int8,
    "uint8": np.uint8, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
    "uint32": np.uint32, "uint64": np.uint64,
}


def reduce_arrays(arrays, op, size):
    kind = op.kind
    stack = np.stack(arrays) if arrays else None
    if kind == "sum":
        return stack.sum(axis=0, dtype=stack.dtype)
    if kind == "prod":
        return stack.prod(axis=0, dtype=stack.dtype)
    if kind == "min":
        return stack.min(axis=0)
    if kind == "max":
        return stack.max(axis=0)
    if kind == "avg":
        return (stack.sum(axis=0, dtype=stack.dtype) / size).astype(stack.dtype)
    if kind == "premulsum":
        return (stack.sum(axis=0, dtype=stack.dtype) * op.factor).astype(stack.dtype)
    if kind == "band":
        return np.bitwise_and.reduce(stack, axis=0)
    if kind == "bor":
        return np.bitwise_or.reduce(stack, axis=0)
    if kind == "bxor":
        return np.bitwise_xor.reduce(stack, axis=0)
    raise commx.UnsupportedError(f"reduce op {kind}")


class StoreBackend:
    def __init__(self):
        self.collectives = 0  # not op.seq: p2p ops take sequence numbers on some ranks only
        self.p2p_sent = {}
        self.p2p_recvd = {}

    def init(self, ctx):
        self.ctx = ctx
        self.store = ctx.store
        self.rank, self.size = ctx.rank, ctx.size

    def supports(self, collective, dtype, kind):
        return dtype in NP_DTYPES

    def accepts_device(self, device):
        return device.startswith("cpu")

    # Store helpers: each value is the raw bytes of one array.
    def _put(self, key, arr):
        self.store.set(key, np.ascontiguousarray(arr).tobytes())

    def _take(self, key, dtype):
        self.store.wait([key], self.timeout)  # ends at the op's deadline with TimeoutError
        return np.frombuffer(self.store.get(key), dtype=dtype)

    def run(self, op, async_op):
        self.timeout = op.timeout
        handler = getattr(self, "_" + op.name)
        if op.name not in ("send", "recv", "batch_p2p"):
            self.collectives += 1
        handler(op, f"c{self.collectives}")

    @staticmethod
    def _arr(view):
        return np.from_dlpack(view).view(NP_DTYPES[view.dtype]) if view.count else np.empty(
            0, NP_DTYPES[view.dtype])

    def _all_reduce(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        parts = [self._take(f"{k}/{r}", a.dtype) for r in range(self.size)]
        a[:] = reduce_arrays(parts, op.op, self.size)

    def _reduce(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        if self.rank == op.root:
            parts = [self._take(f"{k}/{r}", a.dtype) for r in range(self.size)]
            a[:] = reduce_arrays(parts, op.op, self.size)

    def _broadcast(self, op, k):
        a = self._arr(op.input)
        if self.rank == op.root:
            self._put(k, a)
        else:
            a[:] = self._take(k, a.dtype)

    def _all_gather(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        for r, out in enumerate(op.outputs):
            self._arr(out)[:] = self._take(f"{k}/{r}", a.dtype)

    _all_gather_v = _all_gather

    def _all_gather_single(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        out = self._arr(op.output)
        n = a.size
        for r in range(self.size):
            out[r * n:(r + 1) * n] = self._take(f"{k}/{r}", a.dtype)

    def _reduce_scatter_lists(self, op, k, inputs):
        out = self._arr(op.output)
        for dst, piece in enumerate(inputs):
            self._put(f"{k}/{self.rank}/{dst}", piece)
        parts = [self._take(f"{k}/{r}/{self.rank}", out.dtype) for r in range(self.size)]
        out[:] = reduce_arrays(parts, op.op, self.size)

    def _reduce_scatter(self, op, k):
        self._reduce_scatter_lists(op, k, [self._arr(t) for t in op.inputs])

    _reduce_scatter_v = _reduce_scatter

    def _reduce_scatter_single(self, op, k):
        a = self._arr(op.input)
        n = op.output.count
        self._reduce_scatter_lists(op, k, [a[r * n:(r + 1) * n] for r in range(self.size)])

    def _exchange(self, k, pieces, outs, dtype):
        for dst, piece in enumerate(pieces):
            self._put(f"{k}/{self.rank}/{dst}", piece)
        for src, out in enumerate(outs):
            out[:] = self._take(f"{k}/{src}/{self.rank}", dtype)

    def _all_to_all(self, op, k):
        ins = [self._arr(t) for t in op.inputs]
        self._exchange(k, ins, [self._arr(t) for t in op.outputs], ins[0].dtype)

    def _all_to_all_single(self, op, k):
        a, out = self._arr(op.input), self._arr(op.output)
        n = a.size // self.size
        self._exchange(k, [a[r * n:(r + 1) * n] for r in range(self.size)],
                       [out[r * n:(r + 1) * n] for r in range(self.size)], a.dtype)

    # The split sizes arrive as per-rank views, as for the list form.
    _all_to_all_v_single = _all_to_all

    def _gather(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        if self.rank == op.root:
            for r, out in enumerate(op.outputs):
                self._arr(out)[:] = self._take(f"{k}/{r}", a.dtype)

    def _gather_single(self, op, k):
        a = self._arr(op.input)
        self._put(f"{k}/{self.rank}", a)
        if self.rank == op.root:
            out, n = self._arr(op.output), a.size
            for r in range(self.size):
                out[r * n:(r + 1) * n] = self._take(f"{k}/{r}", a.dtype)

    def _scatter(self, op, k):
        out = self._arr(op.output)
        if self.rank == op.root:
            for dst, t in enumerate(op.inputs):
                self._put(f"{k}/{dst}", self._arr(t))
        out[:] = self._take(f"{k}/{self.rank}", out.dtype)

    def _barrier(self, op, k):
        self.store.set(f"{k}/{self.rank}", b"")
        self.store.wait([f"{k}/{r}" for r in range(self.size)], self.timeout)

    # Point-to-point: one key per message, numbered per (src, dst) pair.
    def _send_one(self, view, dst):
        n = self.p2p_sent.get(dst, 0)
        self.p2p_sent[dst] = n + 1
        self._put(f"p2p/{self.rank}/{dst}/{n}", self._arr(view))

    def _recv_one(self, view, src):
        n = self.p2p_recvd.get(src, 0)
        self.p2p_recvd[src] = n + 1
        out = self._arr(view)
        out[:] = self._take(f"p2p/{src}/{self.rank}/{n}", out.dtype)

    def _send(self, op, k):
        self._send_one(op.input, op.root)

    def _recv(self, op, k):
        self._recv_one(op.output, op.root)

    def _batch_p2p(self, op, k):
        for p in op.p2p:  # sends never block here, so posting them first cannot deadlock
            if p.is_send:
                self._send_one(p.tensor, p.peer)
        for p in op.p2p:
            if not p.is_send:
                self._recv_one(p.tensor, p.peer)


def register(name="pystore"):
    if name not in commx.registered_backends():
        commx.register_backend(name, StoreBackend)
    return name
