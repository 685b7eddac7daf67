"""The rest of torchcomms' Python surface on commx.Comm: creation options (get_options,
CommOptions), per-comm defaults (set_timeout, set_hints), hooks with removal handles, persistent
all-gather, RedOpType, BatchSendRecv.ops and the backend queries. Layer: Python bindings (pure
Python over commx._C)."""

import enum
from datetime import timedelta

from . import _C
from . import _memory, _observers, _windows, coalescing
from ._options import OPTIONS_BY_OP, BatchP2POptions, merge, with_options

__all__ = [
    "AllGatherPHandle", "BatchP2POptions", "CommOptions", "HookArgs", "OpName", "P2POpType",
    "RedOpType", "RemovableHandle", "available_backends", "is_backend_built",
    "_is_backend_registered",
]

# Every op taking `timeout=`/`hints=`, as torchcomms' TorchComm has them.
_OPS = ("send", "recv", "broadcast", "all_reduce", "reduce", "all_gather", "all_gather_v",
        "all_gather_single", "reduce_scatter", "reduce_scatter_v", "reduce_scatter_single",
        "all_to_all_single", "all_to_all_v_single", "all_to_all", "barrier", "scatter", "gather",
        "gather_single", "all_to_all_v_dynamic", "device_alltoallv_single", "dispatch", "combine")


class RedOpType(enum.Enum):
    """The kind of a ReduceOp (`ReduceOp.SUM.type is RedOpType.SUM`)."""
    SUM = enum.auto()
    PRODUCT = enum.auto()
    MIN = enum.auto()
    MAX = enum.auto()
    BAND = enum.auto()
    BOR = enum.auto()
    BXOR = enum.auto()
    PREMUL_SUM = enum.auto()
    AVG = enum.auto()


class OpName(enum.Enum):
    """The op a hook is called for; values are commx's op names."""
    send = "send"
    recv = "recv"
    broadcast = "broadcast"
    all_reduce = "all_reduce"
    reduce = "reduce"
    all_gather = "all_gather"
    all_gather_v = "all_gather_v"
    all_gather_single = "all_gather_single"
    reduce_scatter = "reduce_scatter"
    reduce_scatter_v = "reduce_scatter_v"
    reduce_scatter_single = "reduce_scatter_single"
    all_to_all_single = "all_to_all_single"
    all_to_all_v_single = "all_to_all_v_single"
    all_to_all = "all_to_all"
    barrier = "barrier"
    scatter = "scatter"
    gather = "gather"
    gather_single = "gather_single"
    batch_p2p = "batch_p2p"
    all_to_all_v_dynamic = "all_to_all_v_dynamic"


class P2POpType(enum.Enum):
    SEND = enum.auto()
    RECV = enum.auto()


class CommOptions:
    """What a comm was created with (Comm.get_options()); the arguments of new_comm."""

    def __init__(self, abort_process_on_timeout_or_error=False, timeout=timedelta(seconds=600),
                 high_priority_stream=False, store=None, enable_reconfigure=False, hints=None):
        self.abort_process_on_timeout_or_error = abort_process_on_timeout_or_error
        self.timeout = timeout
        self.high_priority_stream = high_priority_stream
        self.store = store
        self.enable_reconfigure = enable_reconfigure
        self.hints = dict(hints or {})

    def __repr__(self):
        return (f"CommOptions(abort_process_on_timeout_or_error="
                f"{self.abort_process_on_timeout_or_error}, timeout={self.timeout!r}, "
                f"enable_reconfigure={self.enable_reconfigure}, hints={self.hints})")


class HookArgs:
    """What a hook learns of an op: its dtype name, element count and root (-1 if none)."""

    def __init__(self, dtype, count, root):
        self.dtype, self.count, self.root = dtype, count, root

    def __repr__(self):
        return f"HookArgs(dtype={self.dtype!r}, count={self.count}, root={self.root})"


class RemovableHandle:
    """Removes a registered hook (`handle.remove()`); removing twice is harmless."""

    def __init__(self, hooks, callback):
        self._hooks, self._callback = hooks, callback

    def remove(self):
        if self._callback in self._hooks:
            self._hooks.remove(self._callback)


class _BatchOp:
    """One entry of BatchSendRecv.ops."""

    def __init__(self, is_send, tensor, peer):
        self.type = P2POpType.SEND if is_send else P2POpType.RECV
        self.tensor, self.peer = tensor, peer

    def __repr__(self):
        return f"P2POp({self.type.name}, peer={self.peer})"


class AllGatherPHandle:
    """A persistent all-gather: the output buffer every exec fills."""

    def __init__(self, comm, output, hints, timeout):
        self.comm, self.output, self.hints, self.timeout = comm, output, hints, timeout


def available_backends():
    """Backends this installation can create: registered ones and plugin files found."""
    return list(_C.available_backends())


def is_backend_built(name):
    """Whether `name` is a backend this installation can create (see available_backends)."""
    return name in _C.available_backends()


def _is_backend_registered(name):
    """torchcomms' name: whether a backend of that name is registered (loaded) in this process."""
    return name in _C.registered_backends()


# -- methods added to commx.Comm ----------------------------------------------------------------

def _get_options(self):
    opts = getattr(self, "_options", None)
    if opts is None:  # a comm made by split/shrink: its parent's options, its own timeout
        opts = CommOptions()
    opts.timeout = self.get_timeout()
    if getattr(self, "_default_hints", None):
        opts.hints = {**opts.hints, **self._default_hints}
    return opts


def _wrap_ops_with_defaults(comm):
    """Ops of `comm` that fill in the defaults of set_timeout/set_hints when a call gives none
    (installed on the object, so comms that never set a default call the bindings directly)."""
    if getattr(comm, "_defaults_installed", False):
        return
    for name in _OPS:
        method = getattr(type(comm), name)

        def op(*args, _method=method, _name=name, **kwargs):
            # precedence: the call's own timeout/hints, then its options=, then these defaults
            options = kwargs.pop("options", None)
            if options is not None:
                kwargs["timeout"], kwargs["hints"] = merge(comm, _name, options,
                                                           kwargs.get("timeout"),
                                                           kwargs.get("hints"))
            if kwargs.get("timeout") is None and comm._default_timeout is not None:
                kwargs["timeout"] = comm._default_timeout
            if comm._default_hints:
                kwargs["hints"] = {**comm._default_hints, **(kwargs.get("hints") or {})}
            return _method(comm, *args, **kwargs)
        op.__name__ = name
        setattr(comm, name, op)
    comm._defaults_installed = True


def _set_timeout(self, timeout):
    """The timeout of this comm's later ops that give none (datetime.timedelta or seconds)."""
    self._default_timeout = timeout if isinstance(timeout, timedelta) else timedelta(
        seconds=float(timeout))
    if not hasattr(self, "_default_hints"):
        self._default_hints = {}
    _wrap_ops_with_defaults(self)


def _set_hints(self, hints):
    """Hints merged into every later op of this comm (an op's own hints win)."""
    self._default_hints = dict(hints or {})
    if not hasattr(self, "_default_timeout"):
        self._default_timeout = None
    _wrap_ops_with_defaults(self)


def _get_timeout(self):
    t = getattr(self, "_default_timeout", None)
    return t if t is not None else self._native_timeout()


def _hooks(self):
    """The comm's hook lists, with the native hooks calling them installed on first use."""
    lists = getattr(self, "_hook_lists", None)
    if lists is None:
        pre, post, on_abort = [], [], []
        lists = self._hook_lists = (pre, post, on_abort)

        def op_name(name):
            try:
                return OpName(name)
            except ValueError:
                return name

        def call_pre(info):
            name, seq, dtype, count, root = info
            for cb in list(pre):
                cb(op_name(name), seq, HookArgs(dtype, count, root))

        def call_post(info):
            _, seq, dtype, count, root = info
            for cb in list(post):
                cb(seq, HookArgs(dtype, count, root))

        def call_abort():
            for cb in list(on_abort):
                cb()
        self._install_hooks(call_pre, call_post, call_abort)
    return lists


def _register_pre_hook(self, callback):
    """callback(op: OpName, op_id: int, args: HookArgs) before each op is issued."""
    hooks = _hooks(self)[0]
    hooks.append(callback)
    return RemovableHandle(hooks, callback)


def _register_post_hook(self, callback):
    """callback(op_id: int, args: HookArgs) after each op is issued."""
    hooks = _hooks(self)[1]
    hooks.append(callback)
    return RemovableHandle(hooks, callback)


def _register_abort_hook(self, callback):
    """callback() when the comm aborts (abort(), or a timeout/peer failure the comm aborts on)."""
    hooks = _hooks(self)[2]
    hooks.append(callback)
    return RemovableHandle(hooks, callback)


def _is_abort_supported(self):
    return True  # Comm.abort() works on every commx backend (the core fails pending work)


def _get_backend_version(self):
    from . import __version__
    return f"commx {__version__} ({self.get_backend()})"


def _all_gather_p_init(self, output, hints=None, timeout=None, options=None):
    """Persistent all-gather: `output` (size x the input) is fixed once; each
    all_gather_p_exec(handle, input) gathers into it."""
    if options is not None:
        timeout, hints = merge(self, "all_gather_p_init", options, timeout, hints)
    return AllGatherPHandle(self, output, hints, timeout)


def _all_gather_p_exec(self, handle, input, async_op=False, hints=None, timeout=None,
                       options=None):
    if options is not None:
        timeout, hints = merge(self, "all_gather_p_exec", options, timeout, hints)
    if handle.comm is not self:
        raise _C.InvalidArgumentError(
            f"InvalidArgument: [comm '{self.get_name()}'] all_gather_p_exec: the handle belongs "
            f"to comm '{handle.comm.get_name()}'")
    return self.all_gather_single(handle.output, input, async_op=async_op,
                                  hints=hints if hints is not None else handle.hints,
                                  timeout=timeout if timeout is not None else handle.timeout)


def _all_gather_p_free(self, handle):
    handle.output = None


def _not_reconfigurable(self, *args, **kwargs):
    raise _C.InvalidArgumentError(
        f"InvalidArgument: [comm '{self.get_name()}' rank {self.get_rank()}] get_init_handle/"
        "reconfigure: this comm was created without enable_reconfigure=True (new_comm(..., "
        "enable_reconfigure=True) makes a comm whose members reconfigure() sets); to drop dead "
        "ranks from this one, use shrink(exclude, name)")


def _batch_ops(self):
    return [_BatchOp(*entry) for entry in self._added]


_native_issue = _C.BatchSendRecv.issue


def _batch_issue(self, async_op=False, options=None, hints=None, timeout=None):
    if options is not None:
        if not isinstance(options, BatchP2POptions):
            raise _C.InvalidArgumentError(
                f"InvalidArgument: BatchSendRecv.issue: options is a {type(options).__name__}; "
                "issue takes BatchP2POptions")
        timeout = options.timeout if timeout is None else timeout
        hints = {**options.hints, **(hints or {})} if options.hints else hints
    return _native_issue(self, async_op, hints=hints, timeout=timeout)


def _reduce_op_type(self):
    return RedOpType[self._type_name]


def install():
    C = _C.Comm
    if hasattr(C, "_native_timeout"):
        return  # installed by an earlier import of commx (one that failed after this point)
    C._native_timeout = C.get_timeout
    C.get_timeout = _get_timeout
    C.get_options = _get_options
    C.set_timeout = _set_timeout
    C.set_hints = _set_hints
    C.register_pre_hook = _register_pre_hook
    C.register_post_hook = _register_post_hook
    C.register_abort_hook = _register_abort_hook
    C.is_abort_supported = _is_abort_supported
    C.get_backend_version = _get_backend_version
    C.all_gather_p_init = _all_gather_p_init
    C.all_gather_p_exec = _all_gather_p_exec
    C.all_gather_p_free = _all_gather_p_free
    for name in _OPS:
        if name in OPTIONS_BY_OP:
            setattr(C, name, with_options(name, getattr(C, name)))
        setattr(C, name, coalescing.joins_blocks(name, getattr(C, name)))
    for name in _OPS + _observers.OBSERVED_EXTRA:
        setattr(C, name, _observers.observed(name, getattr(C, name)))
    C.start_coalescing = coalescing.start_coalescing
    C.end_coalescing = coalescing.end_coalescing
    C.new_window = _windows.new_window(C.new_window)
    C.tensor_register = _memory.tensor_register
    C.tensor_deregister = _memory.tensor_deregister
    C.get_mem_allocator = _memory.comm_get_mem_allocator
    C.mem_allocator = property(_memory.comm_get_mem_allocator)
    C.get_init_handle = _not_reconfigurable
    C.reconfigure = _not_reconfigurable
    _C.BatchSendRecv.ops = property(_batch_ops)
    _C.BatchSendRecv.issue = _batch_issue
    R = _C.ReduceOp
    if not hasattr(R, "_type_name"):
        R._type_name = R.type
        R.type = property(_reduce_op_type)
