"""Pickling of commx objects inside one process, as torchcomms allows it (torch.compile's
caches and graph capture pickle what a graph holds). A Comm or BatchSendRecv pickles to a
reference: unpickled in the same process it is the same live object (a BatchSendRecv that is
gone comes back empty on its comm); a comm is never re-created from a pickle, since making one
is collective. A window (comm.new_window()) pickles to a reference as well; its registered
buffer is kept with its comm from the first pickling on, so a pickle whose window is gone
unpickles to a window over the same buffer (same size, dtype and memory). ReduceOp pickles by
value. Layer: Python bindings (pure Python over commx._C)."""

import itertools
import pickle
import threading
import weakref

from . import _C

_live = {}  # key -> weakref to the object pickled under it
_lock = threading.Lock()
_counter = itertools.count()


def _key(obj, kind):
    key = getattr(obj, "_pickle_key", None)
    if key is None:
        with _lock:
            key = f"{kind}:{next(_counter)}"
            obj._pickle_key = key
            _live[key] = weakref.ref(obj)
    return key


def _alive(key):
    ref = _live.get(key)
    return ref() if ref is not None else None


def _comm_reduce(comm):
    return _comm_from_key, (_key(comm, "comm"), comm.get_name())


def _comm_from_key(key, name):
    comm = _alive(key)
    if comm is None:
        raise pickle.UnpicklingError(
            f"comm '{name}' no longer exists in this process; a pickled comm refers to a live "
            "comm (making a comm is collective, so unpickling never makes one)")
    return comm


def _batch_reduce(batch):
    return _batch_from_key, (_key(batch, "batch"), batch._comm)


def _batch_from_key(key, comm):
    batch = _alive(key)
    if batch is None:  # gone: an empty one on the same comm, found again under the same key
        batch = comm.batch_op_create()
        with _lock:
            batch._pickle_key = key
            _live[key] = weakref.ref(batch)
    return batch


def _window_reduce(window):
    key = _key(window, "window")
    # The buffer outlives the window object: its comm keeps what a re-made window needs.
    kept = getattr(window._comm, "_pickled_windows", None)
    if kept is None:
        kept = window._comm._pickled_windows = {}
    if window._native is not None or key not in kept:
        kept[key] = (window._native, window._tensor, window._shape, window._dtype)
    return _window_from_key, (key, window._comm)


def _window_from_key(key, comm):
    window = _alive(key)
    if window is None:  # gone: a window over the buffer it had, found again under the same key
        from ._windows import TensorWindow
        window = TensorWindow(comm)
        native, tensor, shape, dtype = getattr(comm, "_pickled_windows", {}).get(
            key, (None, None, None, None))
        window._native, window._tensor, window._shape, window._dtype = \
            native, tensor, shape, dtype
        with _lock:
            window._pickle_key = key
            _live[key] = weakref.ref(window)
    return window


def _reduce_op_reduce(op):
    return _reduce_op_from, (op._type_name, op.factor if op._type_name == "PREMUL_SUM" else None)


def _reduce_op_from(type_name, factor):
    return _C.ReduceOp.PREMUL_SUM(factor) if type_name == "PREMUL_SUM" else \
        getattr(_C.ReduceOp, type_name)


def _backend_of(comm):
    """comm.unsafe_get_backend(), the same object every time (torchcomms' get_comm_backend)."""
    backend = getattr(comm, "_backend_object", None)
    if backend is None:
        backend = comm._backend_object = comm.unsafe_get_backend()
    return backend


def install():
    C = _C.Comm
    C.__reduce__ = _comm_reduce
    native_create = C.batch_op_create

    def batch_op_create(self):
        batch = native_create(self)
        batch._comm = self
        return batch
    batch_op_create.__doc__ = native_create.__doc__
    C.batch_op_create = batch_op_create
    B = _C.BatchSendRecv
    B.__reduce__ = _batch_reduce
    B.get_comm_backend = lambda self: _backend_of(self._comm)
    _C.ReduceOp.__reduce__ = _reduce_op_reduce
    from ._windows import TensorWindow
    TensorWindow.get_comm_backend = lambda self: _backend_of(self._comm)
    TensorWindow.__reduce__ = _window_reduce
