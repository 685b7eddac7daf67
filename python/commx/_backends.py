"""Backend discovery for Python: native backends registered in libcommx, plugins found by the C++
registry, backends written in Python (register_backend), and out-of-tree packages that announce
themselves in the `commx.backends` entry-point group."""

import inspect
from importlib import metadata

from . import _C

ENTRY_POINT_GROUP = "commx.backends"


def register_backend(name, backend_class):
    """Registers a backend written in Python under `name`.

    `backend_class()` must return an object with `init(ctx)` (ctx: commx.BackendContext) and
    `run(op, async_op)` (op: commx.OpDesc; its TensorViews convert with numpy.from_dlpack or
    torch.from_dlpack), and optionally `supports(collective_name, dtype_name, reduce_kind_name)`,
    `abort()`, `finalize()` and `accepts_device(device_str)`. Errors raised in Python reach the
    caller as commx errors (a commx.Error keeps its code).
    """
    if not callable(backend_class):
        raise TypeError(f"register_backend({name!r}): backend_class must be callable")
    _C.register_python_backend(name, backend_class)


def registered_backends():
    """Names of the backends registered so far (plugins appear once loaded)."""
    return list(_C.registered_backends())


def _entry_point(name):
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in eps:
        if ep.name == name:
            return ep
    return None


def load_backend(name):
    """Makes `name` available if an installed package provides it through the `commx.backends`
    entry-point group. The entry point may name a module (importing it registers the backend, e.g.
    a native extension calling commx::register_backend), a Python backend class, or a callable
    that registers. Returns True if something was loaded."""
    if _C.has_backend(name):
        return False
    ep = _entry_point(name)
    if ep is None:
        return False  # the C++ registry still tries its plugin paths
    obj = ep.load()
    if _C.has_backend(name):
        return True
    if inspect.isclass(obj):
        register_backend(name, obj)
    elif callable(obj):
        obj()
    if not _C.has_backend(name):
        raise _C.UnsupportedError(
            f"Unsupported: the '{ENTRY_POINT_GROUP}' entry point '{name}' ({ep.value}) was "
            f"loaded but registered no backend named '{name}'"
        )
    return True


class BackendHandle:
    """What unsafe_get_backend() returns for a native backend: its name and the address of the
    commx::Backend object (for native code that knows the concrete type)."""

    def __init__(self, name, address):
        self.name = name
        self.address = address

    def __repr__(self):
        return f"<commx backend {self.name!r} at {self.address:#x}>"


class TorchCommBackend:
    """The base of a backend written in Python (torchcomms' name): subclass it, override `run`
    for the ops the backend has (and `supports` to decline the others, so the comm reports them
    Unsupported before calling), and pass the class to register_backend. init keeps the
    BackendContext as `self.ctx` (rank, size, store, timeout, device); abort and finalize do
    nothing unless overridden; the device is the CPU unless accepts_device says otherwise."""

    def init(self, ctx):
        self.ctx = ctx

    def run(self, op, async_op):
        raise _C.UnsupportedError(
            f"Unsupported: backend {type(self).__name__} (rank {self.ctx.rank}) has no "
            f"implementation of {op.name}")

    def supports(self, op_type, dtype_name, reduce_kind_name):
        return True

    def accepts_device(self, device):
        return device == "cpu"

    def abort(self):
        pass

    def finalize(self):
        pass
