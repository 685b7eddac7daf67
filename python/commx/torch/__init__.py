"""commx as a torch.distributed process-group backend: `init_process_group(backend="commx")`.

Importing this module (or calling `register()`, which the `torch.distributed.backends` entry
point does) registers the backend "commx" for CPU and CUDA tensors. Each process group gets one
commx comm per device type, created on the first op for that device over the group's c10d store
(a torchrun/TCPStore store is joined natively under its own commx prefix). The commx backend used
per device type comes from COMMX_TORCH_BACKEND_CPU (default "cpu") and COMMX_TORCH_BACKEND_CUDA
(default "cuda"), or set_device_backend(). Layer: PyTorch integration (Python, over commx).
"""

import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

import commx

BACKEND_NAME = "commx"
_DEVICE_BACKENDS = {}


def set_device_backend(device_type, backend):
    """Chooses the commx backend for tensors of `device_type` ("cpu" or "cuda") in process
    groups created after this call."""
    _DEVICE_BACKENDS[device_type] = backend


def device_backend(device_type):
    if device_type in _DEVICE_BACKENDS:
        return _DEVICE_BACKENDS[device_type]
    env = os.environ.get(f"COMMX_TORCH_BACKEND_{device_type.upper()}")
    return env or ("cpu" if device_type == "cpu" else "cuda")


def _reduce_op(op):
    R, D = commx.ReduceOp, dist.ReduceOp
    table = [(D.SUM, R.SUM), (D.PRODUCT, R.PRODUCT), (D.MIN, R.MIN), (D.MAX, R.MAX),
             (D.BAND, R.BAND), (D.BOR, R.BOR), (D.BXOR, R.BXOR), (D.AVG, R.AVG)]
    for theirs, ours in table:
        if op == theirs:
            return ours
    raise commx.UnsupportedError(f"Unsupported: torch reduce op {op} has no commx counterpart "
                                 "(PREMUL_SUM factors are not visible from Python)")


def _done(result=None):
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


class _CommxWork(dist.Work):
    """A torch Work over commx Works issued with async_op=True: wait() waits for them (on CUDA:
    makes torch's current stream wait, as ProcessGroupNCCL does; `blocking`: blocks the host, for
    barrier), then copies results out of contiguous stand-ins (on the current stream)."""

    def __init__(self, works, finish, result, blocking=False):
        super().__init__()
        self._works, self._finish, self._result = works, finish, result
        self._blocking = blocking
        self._waited = False

    def wait(self, timeout=None):
        if not self._waited:
            for w in self._works:
                w.wait_blocking() if self._blocking else w.wait()
            self._finish()
            self._waited = True
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)

    def is_success(self):
        return self.is_completed() and all(w.exception() is None for w in self._works)

    def exception(self):
        for w in self._works:
            if w.exception() is not None:
                return w.exception()
        return None

    def get_future(self):
        self.wait()
        fut = Future()
        fut.set_result(self._result)
        return fut


class _Contiguous:
    """Contiguous stand-ins for tensors commx cannot take as they are (non-contiguous, complex);
    copies results back on exit for outputs."""

    def __init__(self):
        self.copy_back = []

    def __call__(self, t, output=False):
        u = t
        if u.is_complex():
            u = torch.view_as_real(u) if u.is_contiguous() else torch.view_as_real(u.contiguous())
        if not u.is_contiguous():
            u = u.contiguous()
        if output and u is not t and not (t.is_complex() and u.data_ptr() == t.data_ptr()):
            self.copy_back.append((t, u))
        return u

    def finish(self):
        with torch.no_grad():  # outputs may be leaves that require grad
            for t, u in self.copy_back:
                t.copy_(torch.view_as_complex(u) if t.is_complex() else u)


class _AsyncComm:
    """Forwards op calls to a commx comm with async_op=True and collects their Works."""

    def __init__(self, comm):
        self._comm, self.works = comm, []

    def __getattr__(self, name):
        op = getattr(self._comm, name)

        def issue(*args, **kwargs):
            work = op(*args, async_op=True, **kwargs)
            self.works.append(work)
            return work
        return issue


def _base_class():
    """c10d Backend where Python may subclass it (torch >= 2.12); else ProcessGroup (torch 2.11
    and older, where init_process_group takes a ProcessGroup subclass as the group itself).
    COMMX_TORCH_PG_BASE=process_group forces the latter (tests)."""
    if os.environ.get("COMMX_TORCH_PG_BASE") != "process_group":
        try:
            _C10dBackend(0, 1)
            return _C10dBackend
        except TypeError:  # "No constructor defined!"
            pass
    return dist.ProcessGroup


class CommxProcessGroup(_base_class()):
    """A c10d Backend (or, on older torch, ProcessGroup) whose collectives run on commx comms
    (one per device type)."""

    def __init__(self, store, rank, size, timeout):
        super().__init__(rank, size)
        self._store = store
        self._rank, self._size = rank, size
        self._timeout = timeout
        self._comms = {}

    # -- plumbing -----------------------------------------------------------------------------
    def getBackendName(self):
        return BACKEND_NAME

    # Names kept here for the ProcessGroup base, which has no backend to keep them.
    def getGroupName(self):
        return getattr(self, "_group_name", "")

    def setGroupName(self, name):
        self._group_name = name

    def getGroupDesc(self):
        return getattr(self, "_group_desc", "")

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def comm_for(self, device):
        """The commx comm for tensors on `device` (created collectively on first use)."""
        kind = device.type
        comm = self._comms.get(kind)
        if comm is None:
            dev = device
            if kind == "cuda" and device.index is None:
                dev = torch.device("cuda", torch.cuda.current_device())
            comm = commx.new_comm(device_backend(kind), str(dev), f"torch_{kind}",
                                  timeout=self._timeout, store=self._store, rank=self._rank,
                                  size=self._size)
            self._comms[kind] = comm
        return comm

    def _run(self, tensors, fn):
        """Issues fn(comm, fix) where fn calls comm ops (which get async_op=True through
        _AsyncComm) and returns a torch Work that waits for all of them."""
        dev = tensors[0].device if tensors else torch.device("cpu")
        fix = _Contiguous()
        comm = _AsyncComm(self.comm_for(dev))
        fn(comm, fix)
        return _CommxWork(comm.works, fix.finish, tensors)

    # -- collectives --------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts.reduceOp) if opts is not None else commx.ReduceOp.SUM
        return self._run(tensors, lambda c, f: [c.all_reduce(f(t, True), op) for t in tensors])

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def reduce(self, tensors, opts):
        op, root = _reduce_op(opts.reduceOp), opts.rootRank
        return self._run(tensors, lambda c, f: [c.reduce(f(t, True), root, op) for t in tensors])

    def broadcast(self, tensors, opts):
        root = opts.rootRank
        return self._run(tensors, lambda c, f: [c.broadcast(f(t, True), root) for t in tensors])

    def allgather(self, output_lists, inputs, opts=None):
        def go(c, f):
            for outs, t in zip(output_lists, inputs):
                c.all_gather([f(o, True) for o in outs], f(t))
        return self._run(inputs, go)

    def all_gather_single(self, output, input, opts=None):
        return self._run([output], lambda c, f: c.all_gather_single(f(output, True), f(input)))

    _allgather_base = all_gather_single

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        def go(c, f):
            for o, i in zip(outputs, inputs):
                c.all_gather_single(f(o, True), f(i))
        return self._run(outputs, go)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def reduce_scatter(self, outputs, input_lists, opts):
        op = _reduce_op(opts.reduceOp)

        def go(c, f):
            for o, ins in zip(outputs, input_lists):
                c.reduce_scatter(f(o, True), [f(i) for i in ins], op)
        return self._run(outputs, go)

    def reduce_scatter_single(self, output, input, opts):
        op = _reduce_op(opts.reduceOp)
        return self._run([output],
                         lambda c, f: c.reduce_scatter_single(f(output, True), f(input), op))

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        op = _reduce_op(opts.reduceOp)

        def go(c, f):
            for o, i in zip(outputs, inputs):
                c.reduce_scatter_single(f(o, True), f(i), op)
        return self._run(outputs, go)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def go(c, f):
            if not output_split_sizes and not input_split_sizes:
                c.all_to_all_single(f(output, True), f(input))
                return
            # torch splits count rows of dim 0; commx counts elements.
            def elems(t, splits):
                row = t.numel() // t.shape[0] if t.dim() > 0 and t.shape[0] else 1
                if not splits:
                    splits = [t.shape[0] // self._size] * self._size
                return [int(s) * row for s in splits]
            c.all_to_all_v_single(f(output, True), f(input), elems(output, output_split_sizes),
                                  elems(input, input_split_sizes))
        return self._run([output], go)

    alltoall_base = all_to_all_single

    def alltoall(self, outputs, inputs, opts=None):
        return self._run(outputs, lambda c, f: c.all_to_all([f(o, True) for o in outputs],
                                                            [f(i) for i in inputs]))

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank

        def go(c, f):
            outs = [f(o, True) for o in output_lists[0]] if self._rank == root else []
            c.gather(outs, f(inputs[0]), root)
        return self._run(inputs, go)

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank

        def go(c, f):
            ins = [f(i) for i in input_lists[0]] if self._rank == root else []
            c.scatter(f(outputs[0], True), ins, root)
        return self._run(outputs, go)

    def barrier(self, opts=None):
        # Blocks the host when waited, on GPUs too (as torch's barrier does).
        comm = next(iter(self._comms.values()), None) or self.comm_for(torch.device("cpu"))
        return _CommxWork([comm.barrier(async_op=True)], lambda: None, None, blocking=True)

    def send(self, tensors, dst, tag=0):
        return self._run(tensors, lambda c, f: [c.send(f(t), dst) for t in tensors])

    def recv(self, tensors, src, tag=0):
        return self._run(tensors, lambda c, f: [c.recv(f(t, True), src) for t in tensors])

    def recv_anysource(self, tensors, tag=0):
        raise commx.UnsupportedError("Unsupported: commx has no receive from any source")


def _create(store, rank, size, timeout):
    return CommxProcessGroup(store, rank, size, timeout or timedelta(seconds=600))


def register():
    """Registers "commx" with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])


register()
