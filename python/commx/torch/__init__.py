"""commx as a torch.distributed process-group backend: `init_process_group(backend="commx")`.

Importing this module (or calling `register()`, which the `torch.distributed.backends` entry
point does) registers the backend "commx" for CPU and CUDA tensors. Each process group gets one
commx comm per device type, created on the first op for that device over the group's c10d store
(a torchrun/TCPStore store is joined natively under its own commx prefix). The commx backend used
per device type comes from COMMX_TORCH_BACKEND_CPU (default "cpu") and COMMX_TORCH_BACKEND_CUDA
(default "cuda"), or set_device_backend(). Layer: PyTorch integration (Python, over commx).
"""

import os
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
# c10d's types from torch._C, not torch.distributed: torch.distributed imports this package
# (through torchcomms' module names) while it is itself still being imported.
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import ProcessGroup as _C10dProcessGroup
from torch._C._distributed_c10d import Work as _C10dWork
from torch._C._distributed_c10d import _create_work_from_future
from torch.futures import Future

import commx

from . import _store
from ._store import CommxStore  # noqa: F401

BACKEND_NAME = "commx"
_DEVICE_BACKENDS = {}


def _error(cls, message):
    """A commx error of class `cls` that is also torch's DistError/DistBackendError."""
    return commx._C._torch_flavour(cls)(message)


def set_device_backend(device_type, backend):
    """Chooses the commx backend for tensors of `device_type` ("cpu" or "cuda") in process
    groups created after this call."""
    _DEVICE_BACKENDS[device_type] = backend


def device_backend(device_type):
    if device_type in _DEVICE_BACKENDS:
        return _DEVICE_BACKENDS[device_type]
    env = os.environ.get(f"COMMX_TORCH_BACKEND_{device_type.upper()}")
    return env or ("cpu" if device_type == "cpu" else "cuda")


def monitored_barrier_failure(where, missing, timeout, wait_all_ranks):
    """gloo's monitoredBarrier error, which tools and tests match: rank 0 names the ranks that
    did not check in ("Ranks 1, 3 failed ..." with wait_all_ranks, else the first one)."""
    ms = int(timeout.total_seconds() * 1000)
    who = (f"Ranks {', '.join(map(str, missing))}" if wait_all_ranks
           else f"Rank {missing[0]}")
    return _error(commx.TimeoutError, f"Timeout: [Rank 0]: {who} failed to pass "
                                      f"monitoredBarrier in {ms} ms ({where})")


def _reduce_op(op):
    R, D = commx.ReduceOp, dist.ReduceOp
    table = [(D.SUM, R.SUM), (D.PRODUCT, R.PRODUCT), (D.MIN, R.MIN), (D.MAX, R.MAX),
             (D.BAND, R.BAND), (D.BOR, R.BOR), (D.BXOR, R.BXOR), (D.AVG, R.AVG)]
    for theirs, ours in table:
        if op == theirs:
            return ours
    if getattr(op, "op", None) == D.RedOpType.PREMUL_SUM and getattr(op, "factor", None) is not None:
        return R.PREMUL_SUM(op.factor)  # e.g. FSDP's gradient divide factor: PREMUL_SUM(1/f)
    raise _error(commx.UnsupportedError, f"Unsupported: torch reduce op {op} has no commx counterpart "
                                 "(a PREMUL_SUM whose factor torch does not expose)")


def _done(result=None):
    fut = Future()
    fut.set_result(result)
    return _create_work_from_future(fut)


def _nothing():
    pass


class _CommxWork(_C10dWork):
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
        """A torch Future completed (with the op's tensors, or its error) once the op ends,
        without blocking the caller."""
        fut = Future()

        def complete():
            try:
                self.wait()
                fut.set_result(self._result)
            except Exception as e:  # noqa: BLE001 - handed to the future's waiter
                fut.set_exception(e)
        if self.is_completed():
            complete()
        else:
            threading.Thread(target=complete, name="commx-work-future", daemon=True).start()
        return fut


class _Coalesced:
    """What a process group collects between start_coalescing and end_coalescing: the Works of
    the collectives issued meanwhile, and the sends/receives to issue together at the end."""

    def __init__(self):
        self.works, self.finishes, self.results, self.p2p = [], [], [], []
        self.has_collective = False

    def add(self, works, finish, tensors):
        self.works += works
        self.finishes.append(finish)
        self.results += list(tensors)

    def finish(self):
        for f in self.finishes:
            f()


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

    def staged(self, t):
        """A fresh buffer for output `t`, copied into `t` on exit in the order staged (for
        outputs that overlap, where a direct write would race: the last one wins, as in c10d)."""
        u = torch.empty_like(t, memory_format=torch.contiguous_format)
        self.copy_back.append((t, u))
        return u

    def finish(self):
        with torch.no_grad():  # outputs may be leaves that require grad
            for t, u in self.copy_back:
                t.copy_(torch.view_as_complex(u) if t.is_complex() else u)


def _overlapping(tensors):
    """Whether any two of `tensors` share memory (e.g. the list [buf] * world_size)."""
    spans = sorted((t.data_ptr(), t.data_ptr() + t.numel() * t.element_size())
                   for t in tensors if t.numel())
    return any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:]))


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


def _collective(method):
    """Counts the call as one collective of the group (c10d's sequence number): at once, or,
    inside a coalescing block, once for the whole block when it ends."""
    def counted(self, *args, **kwargs):
        if self._coalescing is None:
            self._seq_collective += 1
        else:
            self._coalescing.has_collective = True
        return method(self, *args, **kwargs)
    counted.__name__, counted.__doc__ = method.__name__, method.__doc__
    return counted


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
    return _C10dProcessGroup


class CommxProcessGroup(_base_class()):
    """A c10d Backend (or, on older torch, ProcessGroup) whose collectives run on commx comms
    (one per device type)."""

    def __init__(self, store, rank, size, timeout, group_name="", global_ranks=None):
        ensure_registered()
        super().__init__(rank, size)
        self._store = store
        self._rank, self._size = rank, size
        self._timeout = timeout
        self._group_name = group_name
        self._global_ranks = list(global_ranks) if global_ranks else list(range(size))
        self._comms = {}
        self._coalescing = None  # _Coalesced while between start_coalescing and end_coalescing
        self._barriers = 0  # monitored barriers so far (their store keys are numbered)
        self._seq_collective = 0  # collectives issued so far (sends and receives not counted)

    # Queried by c10d through Python attribute lookup: plain properties here, or the lookup
    # reaches the C++ property again and recurses.
    @property
    def supports_splitting(self):
        return True

    @property
    def supports_coalescing(self):
        return True

    @property
    def _supports_time_estimate(self):
        return False

    @property
    def supports_shrinking(self):
        return False

    @property
    def supports_reconfigure(self):
        return False

    @property
    def supports_window(self):
        return False

    @property
    def options(self):
        return _C10dBackend.Options(BACKEND_NAME, self._timeout)

    # -- plumbing -----------------------------------------------------------------------------
    def _get_sequence_number_for_group(self):
        """ProcessGroup._get_sequence_number_for_group(): the collectives this group issued so
        far, as ProcessGroupNCCL counts them (one per collective or coalesced block of
        collectives, none for send/recv); equal on every member while they stay in step."""
        return self._seq_collective

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

    def _comm_name(self, kind):
        # torch derives the group name identically on every member (new_group is called by all
        # ranks in the same order; split_group hashes the member list): the comm's identity.
        return f"pg{self._group_name or ''}_{kind}"

    def comm_for(self, device):
        """The commx comm for tensors on `device` (created collectively on first use)."""
        kind = device.type
        comm = self._comms.get(kind)
        if comm is None:
            dev = device
            if kind == "cuda" and device.index is None:
                dev = torch.device("cuda", torch.cuda.current_device())
            # world_ranks: the group's members in its dumps (commx.flight_recorder maps them).
            comm = commx.new_comm(device_backend(kind), str(dev), self._comm_name(kind),
                                  timeout=self._timeout, store=self._store, rank=self._rank,
                                  size=self._size,
                                  hints={"world_ranks": ",".join(map(str, self._global_ranks))})
            self._comms[kind] = comm
        return comm

    def _run(self, tensors, fn):
        """Issues fn(comm, fix) where fn calls comm ops (which get async_op=True through
        _AsyncComm) and returns a torch Work that waits for all of them. Between
        start_coalescing and end_coalescing the ops join the coalesced Work instead."""
        dev = tensors[0].device if tensors else torch.device("cpu")
        fix = _Contiguous()
        comm = _AsyncComm(self.comm_for(dev))
        fn(comm, fix)
        if self._coalescing is not None:
            self._coalescing.add(comm.works, fix.finish, tensors)
            return _done(tensors)
        return _CommxWork(comm.works, fix.finish, tensors)

    def _p2p(self, tensors, peer, is_send):
        """send/recv: issued at once, or, while coalescing, collected and issued together at
        end_coalescing (one commx batch, so paired sends and receives cannot block each other)."""
        if self._coalescing is None:
            return self._run(tensors, lambda c, f: [c.send(f(t), peer) if is_send
                                                   else c.recv(f(t, True), peer)
                                                   for t in tensors])
        for t in tensors:
            self._coalescing.p2p.append((is_send, t, peer))
        return _done(tensors)

    # -- coalescing (batch_isend_irecv, _coalescing_manager) ------------------------------------
    def start_coalescing(self):
        if self._coalescing is not None:
            raise _error(commx.InvalidArgumentError,
                f"InvalidArgument: process group '{self._group_name}' rank {self._rank}: "
                "start_coalescing called twice without end_coalescing")
        self._coalescing = _Coalesced()

    def end_coalescing(self):
        group, self._coalescing = self._coalescing, None
        if group is None:
            raise _error(commx.InvalidArgumentError,
                f"InvalidArgument: process group '{self._group_name}' rank {self._rank}: "
                "end_coalescing without start_coalescing")
        if group.has_collective:
            self._seq_collective += 1
        if group.p2p:
            tensors = [t for _, t, _ in group.p2p]

            def go(c, f):
                batch = c._comm.batch_op_create()
                for is_send, t, peer in group.p2p:
                    batch.send(f(t), peer) if is_send else batch.recv(f(t, True), peer)
                c.works.append(batch.issue(async_op=True))
            fix = _Contiguous()
            comm = _AsyncComm(self.comm_for(tensors[0].device))
            go(comm, fix)
            group.add(comm.works, fix.finish, tensors)
        return _CommxWork(group.works, group.finish, group.results)

    # -- groups ------------------------------------------------------------------------------
    def split(self, store, ranks, opts=None):
        """dist.split_group: a child backend over the members `ranks` (group ranks of this
        group), rendezvousing on the child's store; None where this rank is not a member."""
        ranks = list(ranks)
        if self._rank not in ranks:
            return None
        timeout = getattr(opts, "_timeout", None) or self._timeout
        name = getattr(opts, "group_name", "") or ""
        child = CommxProcessGroup(store, ranks.index(self._rank), len(ranks), timeout,
                                  group_name=name,
                                  global_ranks=[self._global_ranks[r] for r in ranks])
        return child

    def monitored_barrier(self, opts, wait_all_ranks=False):
        """gloo's monitored barrier over the group's store: rank 0 waits for every rank within
        the timeout and names the ranks that did not arrive (all of them with wait_all_ranks),
        then releases the others; every wait is bounded by the timeout."""
        timeout = getattr(opts, "timeout", None) or self._timeout
        n = self._barriers
        self._barriers += 1
        key = f"commx/monitored_barrier/{n}"
        self._store.set(f"{key}/arrived/{self._rank}", "1")
        if self._rank == 0:
            missing = []
            deadline = time.monotonic() + timeout.total_seconds()
            for r in range(1, self._size):
                left = max(deadline - time.monotonic(), 0.001)
                try:
                    self._store.wait([f"{key}/arrived/{r}"], timedelta(seconds=left))
                except Exception:  # noqa: BLE001 - the store's timeout error
                    missing.append(r)
                    if not wait_all_ranks:
                        break
            if missing:
                self._store.set(f"{key}/failed", ",".join(map(str, missing)))
                raise monitored_barrier_failure(
                    f"process group '{self._group_name}' monitored_barrier #{n}", missing,
                    timeout, wait_all_ranks)
            self._store.set(f"{key}/released", "1")
            return
        self._store.wait([f"{key}/released"], timeout)

    # -- collectives --------------------------------------------------------------------------
    @_collective
    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts.reduceOp) if opts is not None else commx.ReduceOp.SUM
        if len(tensors) == 1 and self._coalescing is None:
            t = tensors[0]
            if t.is_contiguous() and not t.is_complex():
                # The common call, without stand-ins and collectors: eager loops pay this host
                # time on every step.
                w = self.comm_for(t.device).all_reduce(t, op, async_op=True)
                return _CommxWork([w], _nothing, tensors)
        return self._run(tensors, lambda c, f: [c.all_reduce(f(t, True), op) for t in tensors])

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    @_collective
    def reduce(self, tensors, opts):
        op, root = _reduce_op(opts.reduceOp), opts.rootRank
        return self._run(tensors, lambda c, f: [c.reduce(f(t, True), root, op) for t in tensors])

    @_collective
    def broadcast(self, tensors, opts):
        root = opts.rootRank
        return self._run(tensors, lambda c, f: [c.broadcast(f(t, True), root) for t in tensors])

    @_collective
    def allgather(self, output_lists, inputs, opts=None):
        def go(c, f):
            for outs, t in zip(output_lists, inputs):
                put = f.staged if _overlapping(outs) else (lambda o: f(o, True))
                c.all_gather([put(o) for o in outs], f(t))
        return self._run(inputs, go)

    @_collective
    def all_gather_single(self, output, input, opts=None):
        return self._run([output], lambda c, f: c.all_gather_single(f(output, True), f(input)))

    _allgather_base = all_gather_single

    @_collective
    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        def go(c, f):
            for o, i in zip(outputs, inputs):
                c.all_gather_single(f(o, True), f(i))
        return self._run(outputs, go)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    @_collective
    def reduce_scatter(self, outputs, input_lists, opts):
        op = _reduce_op(opts.reduceOp)

        def go(c, f):
            for o, ins in zip(outputs, input_lists):
                c.reduce_scatter(f(o, True), [f(i) for i in ins], op)
        return self._run(outputs, go)

    @_collective
    def reduce_scatter_single(self, output, input, opts):
        op = _reduce_op(opts.reduceOp)
        return self._run([output],
                         lambda c, f: c.reduce_scatter_single(f(output, True), f(input), op))

    _reduce_scatter_base = reduce_scatter_single

    @_collective
    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts):
        op = _reduce_op(opts.reduceOp)

        def go(c, f):
            for o, i in zip(outputs, inputs):
                c.reduce_scatter_single(f(o, True), f(i), op)
        return self._run(outputs, go)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    @_collective
    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        def go(c, f):
            if not output_split_sizes and not input_split_sizes:
                c.all_to_all_single(f(output, True), f(input))
                return
            # Split sizes count rows of dim 0 in torch and in commx alike.
            def rows(t, splits):
                return list(splits) if splits else [t.shape[0] // self._size] * self._size
            c.all_to_all_v_single(f(output, True), f(input), rows(output, output_split_sizes),
                                  rows(input, input_split_sizes))
        return self._run([output], go)

    alltoall_base = all_to_all_single

    @_collective
    def alltoall(self, outputs, inputs, opts=None):
        return self._run(outputs, lambda c, f: c.all_to_all([f(o, True) for o in outputs],
                                                            [f(i) for i in inputs]))

    @_collective
    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank

        def go(c, f):
            outs = [f(o, True) for o in output_lists[0]] if self._rank == root else []
            c.gather(outs, f(inputs[0]), root)
        return self._run(inputs, go)

    @_collective
    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank

        def go(c, f):
            ins = [f(i) for i in input_lists[0]] if self._rank == root else []
            c.scatter(f(outputs[0], True), ins, root)
        return self._run(outputs, go)

    @_collective
    def barrier(self, opts=None):
        # Blocks the host when waited, on GPUs too (as torch's barrier does).
        comm = next(iter(self._comms.values()), None) or self.comm_for(torch.device("cpu"))
        return _CommxWork([comm.barrier(async_op=True)], lambda: None, None, blocking=True)

    def send(self, tensors, dst, tag=0):
        return self._p2p(tensors, dst, True)

    def recv(self, tensors, src, tag=0):
        return self._p2p(tensors, src, False)

    def recv_anysource(self, tensors, tag=0):
        raise _error(commx.UnsupportedError, "Unsupported: commx has no receive from any source")


# -- all_to_all_v_dynamic on a process group ----------------------------------------------------
# torch.distributed has no collective whose split sizes stay on the device, so a backend cannot
# plug one in: these functions take the process group (default: the world) and run commx's op on
# the group's commx comm for the tensors' device, ordered with the group's other ops.

def _commx_group(group, device):
    group = group or dist.group.WORLD
    # On torch whose Backend cannot be subclassed from Python the group is ours itself.
    backend = group if isinstance(group, CommxProcessGroup) else group._get_backend(device)
    if not isinstance(backend, CommxProcessGroup):
        raise _error(commx.InvalidArgumentError,
                     f"InvalidArgument: all_to_all_v_dynamic needs a process group of the 'commx' "
                     f"backend, not '{dist.get_backend(group)}'")
    return backend


def _dynamic(method, output, input, output_split_sizes, input_split_sizes, group, async_op,
             row_size):
    pg = _commx_group(group, input.device)

    def go(c, f):
        # Counts are written in place on the device: they must be contiguous int64 already.
        getattr(c, method)(f(output, True), f(input), output_split_sizes, input_split_sizes,
                           row_size=row_size)
    work = pg._run([output], go)
    if async_op:
        return work
    work.wait()
    return None


def all_to_all_v_dynamic(output, input, output_split_sizes, input_split_sizes, group=None,
                         async_op=False, row_size=None):
    """commx's all_to_all_v_dynamic over a 'commx' process group: `input_split_sizes[j]` rows go to
    group rank j and `output_split_sizes[k]` receives the rows that came from rank k, both int64
    tensors on the input's device that the host never reads (a row: dim 0 of the input, or
    `row_size` elements). `output` is the capacity; a receive larger than it fails the op on every
    rank alike (commx.InvalidArgumentError) and nothing is written. Returns a Work if async_op."""
    return _dynamic("all_to_all_v_dynamic", output, input, output_split_sizes, input_split_sizes,
                    group, async_op, row_size)


def device_alltoallv_single(output, input, output_split_sizes, input_split_sizes, group=None,
                            async_op=False):
    """NCCLX's name for all_to_all_v_dynamic (splits in rows of dim 0)."""
    return all_to_all_v_dynamic(output, input, output_split_sizes, input_split_sizes, group,
                                async_op)


def dispatch(output, input, output_split_sizes, expert_counts, group=None, async_op=False,
             row_size=None):
    """MoE dispatch over a 'commx' process group (commx.Comm.dispatch): token rows sorted by
    global expert, `expert_counts` a router's per-expert histogram on the device."""
    return _dynamic("dispatch", output, input, output_split_sizes, expert_counts, group, async_op,
                    row_size)


def combine(output, input, output_split_sizes, input_split_sizes, group=None, async_op=False,
            row_size=None):
    """MoE combine over a 'commx' process group (commx.Comm.combine): the reverse of dispatch."""
    return _dynamic("combine", output, input, output_split_sizes, input_split_sizes, group,
                    async_op, row_size)


def _check_device_backends():
    """The commx backends chosen for torch's device types must exist: said at
    init_process_group/new_group, not at the first collective. The cuda one is checked where it
    was chosen explicitly (the default is only needed once CUDA tensors are used)."""
    for kind in ("cpu", "cuda"):
        env = os.environ.get(f"COMMX_TORCH_BACKEND_{kind.upper()}")
        if kind == "cuda" and kind not in _DEVICE_BACKENDS and not env:
            continue
        name = device_backend(kind)
        commx.load_backend(name)
        if name not in commx.available_backends():
            where = (f"set_device_backend({kind!r}, {name!r})" if kind in _DEVICE_BACKENDS
                     else f"COMMX_TORCH_BACKEND_{kind.upper()}={name}")
            raise _error(commx.InvalidArgumentError,
                         f"InvalidArgument: process group backend 'commx': {where} names no "
                         f"commx backend; backends here: {', '.join(commx.available_backends())}")


def _create(opts, backend_options=None):
    """c10d's extended creator: the group's store, rank, size, timeout, name and members."""
    _check_device_backends()
    return CommxProcessGroup(opts.store, opts.group_rank, opts.group_size,
                             opts.timeout or timedelta(seconds=600),
                             group_name=str(opts.group_id or ""),
                             global_ranks=opts.global_ranks_in_group)


def register():
    """Registers "commx" with torch.distributed, and the commx:// rendezvous (idempotent)."""
    _store.register()
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True,
                                      devices=["cpu", "cuda"])


def _torch_distributed_ready():
    """False while torch.distributed is itself being imported: it imports torchcomms' module
    names, which may be commx's, before its own registration functions exist."""
    return hasattr(dist, "register_rendezvous_handler") and hasattr(dist, "Backend")


def ensure_registered():
    """register(), once torch.distributed can take it (a group made through a BackendWrapper
    calls this, so an import that came too early registers on first use)."""
    if _torch_distributed_ready():
        register()


ensure_registered()
