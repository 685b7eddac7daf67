"""torchcomms' per-op option classes (SendOptions ... AllGatherPExecOptions, ReconfigureOptions):
each carries one op's timeout and hints, and that op (and only that op) takes it as `options=`.
A timeout or hints given to the call itself win over the options'. Layer: Python bindings (pure
Python over commx._C)."""

from datetime import timedelta

from . import _C

__all__ = []  # filled below, one name per class


def _as_timedelta(timeout):
    if timeout is None or isinstance(timeout, timedelta):
        return timeout
    return timedelta(seconds=float(timeout))


class _OpOptions:
    """timeout: datetime.timedelta (or seconds), None for the comm's; hints: str -> str."""

    ops = ()  # the ops that take this class as `options=`

    def __init__(self, timeout=None, hints=None):
        self.timeout = timeout
        self.hints = dict(hints or {})

    @property
    def timeout(self):
        return self._timeout

    @timeout.setter
    def timeout(self, value):
        self._timeout = _as_timedelta(value)

    def __repr__(self):
        return f"{type(self).__name__}(timeout={self.timeout!r}, hints={self.hints})"

    def __eq__(self, other):
        return type(self) is type(other) and (self.timeout, self.hints) == (other.timeout,
                                                                            other.hints)


def _define(name, ops):
    cls = type(name, (_OpOptions,), {
        "ops": ops, "__doc__": f"Options of {' / '.join(ops)}: timeout and hints.",
        "__module__": "commx"})
    globals()[name] = cls
    __all__.append(name)
    return cls


# torchcomms' class for each op (an op of the `_v` family shares its base op's class).
OPTIONS_BY_OP = {}
for _name, _ops in (
        ("SendOptions", ("send",)),
        ("RecvOptions", ("recv",)),
        ("BroadcastOptions", ("broadcast",)),
        ("AllReduceOptions", ("all_reduce",)),
        ("ReduceOptions", ("reduce",)),
        ("AllGatherOptions", ("all_gather", "all_gather_v")),
        ("AllGatherSingleOptions", ("all_gather_single",)),
        ("ReduceScatterOptions", ("reduce_scatter", "reduce_scatter_v")),
        ("ReduceScatterSingleOptions", ("reduce_scatter_single",)),
        ("AllToAllOptions", ("all_to_all",)),
        ("AllToAllSingleOptions", ("all_to_all_single",)),
        ("AllToAllvSingleOptions", ("all_to_all_v_single",)),
        ("BarrierOptions", ("barrier",)),
        ("ScatterOptions", ("scatter",)),
        ("GatherOptions", ("gather", "gather_single")),
        ("AllGatherPInitOptions", ("all_gather_p_init",)),
        ("AllGatherPExecOptions", ("all_gather_p_exec",)),
        ("BatchP2POptions", ("issue",))):
    _cls = _define(_name, _ops)
    for _op in _ops:
        OPTIONS_BY_OP[_op] = _cls


class ReconfigureOptions(_OpOptions):
    """Options of reconfigure: the uuid and init handles too (reconfigure(options))."""

    ops = ("reconfigure",)
    __module__ = "commx"

    def __init__(self, uuid=0, init_handles=(), timeout=None, hints=None):
        super().__init__(timeout, hints)
        self.uuid = uuid
        self.init_handles = init_handles

    def __repr__(self):
        return (f"ReconfigureOptions(uuid={self.uuid}, init_handles={self.init_handles!r}, "
                f"timeout={self.timeout!r}, hints={self.hints})")


__all__.append("ReconfigureOptions")


def merge(comm, op, options, timeout, hints):
    """(timeout, hints) for `op` given `options=`: the call's own values win; a class of
    another op is an InvalidArgumentError naming both."""
    want = OPTIONS_BY_OP.get(op)
    if want is None or not isinstance(options, want):
        given = type(options).__name__
        raise _C.InvalidArgumentError(
            f"InvalidArgument: [comm '{comm.get_name()}' rank {comm.get_rank()}] {op}: "
            f"options is a {given}; {op} takes {want.__name__ if want else 'no options'}")
    if timeout is None:
        timeout = options.timeout
    if options.hints:
        hints = {**options.hints, **(hints or {})}
    return timeout, hints


def with_options(op, method):
    """`method` (a Comm op taking timeout=/hints=) that also takes options=."""

    def call(self, *args, options=None, **kwargs):
        if options is not None:
            kwargs["timeout"], kwargs["hints"] = merge(self, op, options, kwargs.get("timeout"),
                                                       kwargs.get("hints"))
        return method(self, *args, **kwargs)
    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = method.__doc__
    return call
