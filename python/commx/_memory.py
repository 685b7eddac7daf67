"""Memory as torchcomms exposes it: TorchComm.tensor_register/tensor_deregister and the
backends' memory allocators (get_mem_allocator, comm.mem_allocator). Layer: Python bindings
(pure Python over commx._C and torch)."""

from . import _C


def _torch():
    import torch
    return torch


def _invalid(comm, op, what):
    return _C.InvalidArgumentError(
        f"InvalidArgument: [comm '{comm.get_name()}' rank {comm.get_rank()}] {op}: {what}")


def _registered(comm):
    reg = getattr(comm, "_registered_tensors", None)
    if reg is None:
        reg = comm._registered_tensors = {}
    return reg


def _key(tensor):
    return (tensor.data_ptr(), tensor.numel() * tensor.element_size())


def tensor_register(self, tensor):
    """Registers `tensor` with the comm for later ops. commx's transports copy through shared
    memory or sockets whatever the tensor, so registration checks the tensor (contiguous, on the
    comm's device) and holds it until tensor_deregister; it changes no op's path."""
    torch = _torch()
    if not tensor.is_contiguous():
        raise _invalid(self, "tensor_register", "the tensor is not contiguous")
    if tensor.device != torch.device(str(self.get_device())):
        raise _invalid(self, "tensor_register", f"the tensor is on {tensor.device}, the comm on "
                       f"{self.get_device()}")
    reg = _registered(self)
    if _key(tensor) in reg:
        raise _invalid(self, "tensor_register", "this tensor's memory is already registered")
    reg[_key(tensor)] = tensor


def tensor_deregister(self, tensor):
    reg = _registered(self)
    if reg.pop(_key(tensor), None) is None:
        raise _invalid(self, "tensor_deregister", "this tensor's memory is not registered")


# -- the memory allocators ----------------------------------------------------------------------

class HostMemAllocator:
    """The cpu backend's allocator: tensors in shared memory (torch's share_memory_), which
    processes of the host can map (torch.multiprocessing passes them without a copy). Windows
    take any CPU tensor (see tensor_register), so none needs this allocator."""

    backend = "cpu"

    def allocate(self, nbytes):
        """An untyped storage of `nbytes` in shared memory."""
        torch = _torch()
        return torch.UntypedStorage(int(nbytes)).share_memory_()

    def empty(self, *size, dtype=None):
        """An uninitialised tensor of `size` in shared memory."""
        torch = _torch()
        if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
            size = tuple(size[0])
        return torch.empty(size, dtype=dtype).share_memory_()

    def __repr__(self):
        return "<commx HostMemAllocator (shared memory)>"


_HOST_BACKENDS = ("cpu", "gloo", "mpi")
_CUDA_BACKENDS = ("cuda", "nccl")


def get_mem_allocator(backend):
    """The memory allocator of `backend`: HostMemAllocator for the host backends (cpu, gloo,
    mpi); for cuda and nccl, torch's CUDA allocator (what torch.cuda.MemPool takes: commx's GPU
    backends need no special memory). Unknown backend: InvalidArgumentError."""
    if backend in _HOST_BACKENDS:
        return HostMemAllocator()
    if backend in _CUDA_BACKENDS:
        torch = _torch()
        if not torch.cuda.is_available():
            raise _C.UnsupportedError(f"Unsupported: get_mem_allocator({backend!r}): torch sees "
                                      "no GPU")
        return torch.cuda.memory._get_current_allocator()
    raise _C.InvalidArgumentError(
        f"InvalidArgument: get_mem_allocator({backend!r}): no allocator for that backend; "
        f"backends with one: {', '.join(_HOST_BACKENDS + _CUDA_BACKENDS)}")


def comm_get_mem_allocator(self):
    return get_mem_allocator(self.get_backend())
