"""Windows as torchcomms makes them: comm.new_window() (or new_window(tensor)) gives a window
without memory; window.tensor_register(tensor) makes the tensor the window's buffer on every rank
(collective: each rank registers a tensor of the same element count and dtype), so other ranks'
puts land in it. Layer: Python bindings (pure Python over commx._C and torch).

A cpu window's buffers are shared memory that every rank of the host maps (commx._C.Window). A
torch tensor's storage is private to its process, so registration moves the tensor into the
window: its values are copied into this rank's shared buffer and the tensor object is re-pointed
at that buffer (torch's Tensor.set_), so the tensor the caller holds sees every put. Views of the
tensor taken before registration keep the old memory. tensor_deregister moves it back into
private memory, values kept."""

import enum
import weakref

from . import _C


class TorchCommWinAccessType(enum.Enum):
    """How this rank reaches a peer's buffer: UNIFIED, loads and stores (map_remote_tensor);
    SEPARATE, only through put/signal (a peer on another host)."""
    WIN_ACCESS_TYPE_UNIFIED = enum.auto()
    WIN_ACCESS_TYPE_SEPARATE = enum.auto()


class TorchCommWindowAttr:
    """What window.get_attr(peer) reports of one peer's buffer."""

    def __init__(self, access_type=TorchCommWinAccessType.WIN_ACCESS_TYPE_SEPARATE):
        self.access_type = access_type

    def __repr__(self):
        return f"TorchCommWindowAttr(access_type={self.access_type.name})"


def _torch():
    import torch
    return torch


def _where(comm, op):
    return f"[comm '{comm.get_name()}' rank {comm.get_rank()}] {op}"


def _invalid(comm, op, what):
    return _C.InvalidArgumentError(f"InvalidArgument: {_where(comm, op)}: {what}")


def _as_torch(array, dtype):
    """A torch tensor over a window buffer (numpy array): bfloat16/FP8 come as raw bits."""
    torch = _torch()
    t = torch.from_numpy(array)
    return t if t.dtype == dtype else t.view(dtype)


def _point_at(tensor, source):
    """Re-points `tensor` (contiguous) at `source`'s memory, shape kept."""
    torch = _torch()
    with torch.no_grad():
        tensor.set_(source.untyped_storage(), 0, tensor.shape, tensor.stride())


class TensorWindow:
    """torchcomms' TorchCommWindow over commx: made by comm.new_window() / new_window(tensor)."""

    def __init__(self, comm):
        self._comm = comm
        self._native = None  # commx._C.Window while a tensor is registered
        self._tensor = None  # the registered tensor (a weak reference when owning=False)
        self._shape = None
        self._dtype = None

    # -- the registered buffer -------------------------------------------------------------------
    @property
    def dtype(self):
        return self._dtype

    @property
    def shape(self):
        return list(self._shape) if self._shape is not None else None

    @property
    def device(self):
        return self._comm.get_device()

    def get_size(self):
        """The buffer's size in bytes (0 while nothing is registered)."""
        if self._native is None:
            return 0
        return self._native.count * _torch().empty((), dtype=self._dtype).element_size()

    def get_tensor(self):
        """The registered tensor (None before registration, or once a non-owned one is gone)."""
        t = self._tensor
        return t() if isinstance(t, weakref.ref) else t

    def tensor_register(self, tensor, owning=True):
        """Collective: `tensor` becomes this rank's buffer of the window (see the module's
        docstring). Every rank registers the same element count and dtype; on return every
        rank's buffer holds its tensor's values. owning=False keeps
        only a weak reference to the tensor object (the buffer lives while the window does)."""
        torch = _torch()
        comm = self._comm
        if self._native is not None:
            raise _invalid(comm, "tensor_register", "the window already has a tensor registered "
                           "(tensor_deregister() first)")
        if not isinstance(tensor, torch.Tensor):
            raise _invalid(comm, "tensor_register", f"expects a torch.Tensor, got "
                           f"{type(tensor).__name__}")
        if not tensor.is_contiguous():
            raise _invalid(comm, "tensor_register", "the tensor is not contiguous (the window's "
                           "buffer is one dense range; pass tensor.contiguous())")
        if tensor.device != torch.device(str(comm.get_device())):
            raise _invalid(comm, "tensor_register", f"the tensor is on {tensor.device}, the comm "
                           f"on {comm.get_device()}")
        native = comm.new_window(tensor.numel(), tensor.dtype)
        local = _as_torch(native.local(), tensor.dtype)
        with torch.no_grad():
            local.copy_(tensor.reshape(-1))
        _point_at(tensor, local)
        self._native, self._shape, self._dtype = native, tuple(tensor.shape), tensor.dtype
        self._tensor = tensor if owning else weakref.ref(tensor)
        # Every rank's values are in its buffer before any rank may put into it or read it.
        comm.barrier(False)

    def tensor_deregister(self):
        """Releases the buffer: the registered tensor (if still alive) gets private memory with
        the buffer's current values."""
        if self._native is None:
            raise _invalid(self._comm, "tensor_deregister", "no tensor is registered")
        tensor = self.get_tensor()
        if tensor is not None:
            _point_at(tensor, tensor.detach().clone())
        self._native, self._tensor, self._shape, self._dtype = None, None, None, None

    def _need(self, op):
        if self._native is None:
            raise _invalid(self._comm, op, "the window has no tensor registered "
                           "(window.tensor_register(tensor) or comm.new_window(tensor))")
        return self._native

    # -- one-sided ops (commx._C.Window's) -------------------------------------------------------
    def put(self, tensor, dst_rank, target_offset_nelems, async_op, hints=None, timeout=None):
        """Copies `tensor` into dst_rank's buffer at element target_offset_nelems."""
        return self._need("put").put(tensor.contiguous(), dst_rank, target_offset_nelems,
                                     async_op)

    def signal(self, dst_rank, async_op, hints=None, timeout=None):
        return self._need("signal").signal(dst_rank, async_op)

    def wait_signal(self, peer_rank, async_op, hints=None, timeout=None):
        return self._need("wait_signal").wait_signal(peer_rank, async_op, timeout=timeout)

    def map_remote_tensor(self, rank):
        """Rank `rank`'s buffer as a tensor of the registered shape (loads and stores go straight
        to it); an error for a peer reached only through put (get_attr says SEPARATE)."""
        native = self._need("map_remote_tensor")
        return _as_torch(native.map_remote_tensor(rank), self._dtype).view(self._shape)

    def get_attr(self, peer_rank):
        native = self._need("get_attr")
        try:
            native.map_remote_tensor(peer_rank)
            kind = TorchCommWinAccessType.WIN_ACCESS_TYPE_UNIFIED
        except _C.UnsupportedError:
            kind = TorchCommWinAccessType.WIN_ACCESS_TYPE_SEPARATE
        return TorchCommWindowAttr(kind)

    def __repr__(self):
        return (f"<commx window of comm {self._comm.get_name()!r} dtype={self._dtype} "
                f"shape={self.shape}>")


# -- on commx.Comm -------------------------------------------------------------------------------

def new_window(native_new_window):
    """comm.new_window(tensor=None) in torchcomms' form; comm.new_window(count, dtype) stays
    commx's own (a window that owns its zeroed buffer)."""

    def call(self, tensor=None, dtype=None, *, count=None):
        if dtype is not None or count is not None:  # commx's (count, dtype) form
            return native_new_window(self, tensor if count is None else count, dtype)
        win = TensorWindow(self)
        if tensor is not None:
            win.tensor_register(tensor)
        return win
    call.__name__ = "new_window"
    call.__doc__ = native_new_window.__doc__
    return call
