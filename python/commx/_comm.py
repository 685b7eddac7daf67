"""new_comm and the Python conveniences of Comm (torch.device, aliases, unsafe_get_backend)."""

import os
import sys

from . import _C
from ._backends import BackendHandle, load_backend
from ._stores import as_commx_store
from ._reconfigure import ReconfigurableComm
from ._torchcomms import CommOptions
from ._tracing import load_functional


# Where new_comm finds the rank, in order: the C++ core's variables (src/core/env.cc), with
# torchcomms' TORCHCOMM_RANK/TORCHCOMM_SIZE after COMMX_* (read here, in Python).
_RANK_VARS = [("COMMX_RANK", "COMMX_WORLD_SIZE"), ("TORCHCOMM_RANK", "TORCHCOMM_SIZE"),
              ("RANK", "WORLD_SIZE"),
              ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")]


def _torchcomm_rank_size(rank, size):
    """torchcomms' own variables, TORCHCOMM_RANK/TORCHCOMM_SIZE: what torch.distributed sets
    around each group's new_comm when it routes process groups through torchcomms (the group
    rank, not the launcher's). Explicit arguments and COMMX_RANK/COMMX_WORLD_SIZE still win."""
    if rank is not None or size is not None or os.environ.get("COMMX_RANK"):
        return rank, size
    r, n = os.environ.get("TORCHCOMM_RANK"), os.environ.get("TORCHCOMM_SIZE")
    if r is None and n is None:
        return rank, size
    if r is None or n is None:
        raise _C.InvalidArgumentError(
            "InvalidArgument: new_comm: TORCHCOMM_RANK and TORCHCOMM_SIZE go together; only "
            f"{'TORCHCOMM_RANK' if n is None else 'TORCHCOMM_SIZE'} is set")
    return int(r), int(n)


def _env_rank():
    for rank, size in _RANK_VARS:
        if os.environ.get(rank) and os.environ.get(size):
            return int(os.environ[rank])
    return 0


def _resolve_device(device, rank):
    """torchcomms' rule for GPUs: a CUDA device without an index is cuda:(rank % device count),
    and the comm's device becomes the current one (torch.cuda.set_device), so torch's current
    stream and new tensors are on it. Without torch the backend uses the current device."""
    dev = str(device)
    if not dev.startswith("cuda"):
        return dev
    try:
        import torch
    except ImportError:
        return dev
    if not torch.cuda.is_available():
        return dev  # the backend reports the missing GPU
    if dev == "cuda":
        n = torch.cuda.device_count()
        dev = f"cuda:{(rank if rank is not None else _env_rank()) % n}"
    torch.cuda.set_device(torch.device(dev))
    return dev


def new_comm(
    backend,
    device,
    name="main",
    abort_process_on_timeout_or_error=None,
    timeout=None,
    high_priority_stream=None,
    store=None,
    enable_reconfigure=False,
    hints=None,
    *,
    rank=None,
    size=None,
):
    """Creates a communicator (collective over all ranks), as torchcomms.new_comm does.

    backend: "cpu", "cuda", "nccl", "gloo", ... or one registered from Python/entry points.
    device: a torch.device or a string ("cpu", "cuda", "cuda:1"); "cuda" without an index is
    cuda:(rank % number of GPUs), and a CUDA device becomes torch's current device (as in
    torchcomms).
    timeout: datetime.timedelta or seconds (default 600 s, env COMMX_TIMEOUT_SECONDS).
    store: a commx store or a torch.distributed store (default: from the environment: torchrun's
    MASTER_ADDR/MASTER_PORT, COMMX_STORE_FILE, ...). rank/size: explicit, else from the
    environment (COMMX_RANK/COMMX_WORLD_SIZE, torchcomms' TORCHCOMM_RANK/TORCHCOMM_SIZE,
    RANK/WORLD_SIZE, MPI, PMI).
    name: the comm's name (default "main"); ranks creating comms of one name on one store in
    the same order get the same comm.
    high_priority_stream is accepted for torchcomms compatibility and ignored (get_options()
    reports it).
    enable_reconfigure: meet nobody now; returns a ReconfigurableComm whose members are set by
    reconfigure(uuid, init_handles) (handles from get_init_handle() of each process).
    """
    load_functional()  # torch may have finished importing since commx was imported
    load_backend(backend)
    rank, size = _torchcomm_rank_size(rank, size)
    cstore, owner = as_commx_store(store)
    options = CommOptions(
        abort_process_on_timeout_or_error=bool(abort_process_on_timeout_or_error),
        timeout=timeout, high_priority_stream=bool(high_priority_stream), store=store,
        enable_reconfigure=enable_reconfigure, hints=hints)
    if enable_reconfigure:
        return _reconfigurable(backend, device, name, cstore or _C.launcher_store(timeout), owner,
                               abort_process_on_timeout_or_error, timeout, hints, options)
    comm = _C.new_comm(
        backend,
        _resolve_device(device, rank),
        name,
        abort_process_on_timeout_or_error=abort_process_on_timeout_or_error,
        timeout=timeout,
        store=cstore,
        hints=hints,
        rank=rank,
        size=size,
        enable_reconfigure=enable_reconfigure,
        store_owner=owner,
    )
    options.timeout = comm.get_timeout()
    comm._options = options
    return comm


def _reconfigurable(backend, device, name, cstore, owner, abort_process, timeout, hints, options):
    """A comm without members yet (enable_reconfigure=True): reconfigure() makes them."""

    def make_comm(store, rank, size, join_timeout):
        comm = _C.new_comm(backend, _resolve_device(device, rank), name,
                           abort_process_on_timeout_or_error=abort_process,
                           timeout=join_timeout if join_timeout is not None else timeout,
                           store=store, hints=options.hints, rank=rank, size=size,
                           store_owner=owner)
        if join_timeout is not None and timeout is not None:
            comm.set_timeout(timeout)  # the reconfigure's limit is not the ops' one
        comm._options = options
        return comm
    return ReconfigurableComm(make_comm, cstore, name, backend, str(device), options)


def _get_device(self):
    """A torch.device when torch is importable, else the device string."""
    dev = self._device_str()
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F401
        except ImportError:
            return dev
    return sys.modules["torch"].device(dev)


def _unsafe_get_backend(self):
    """The backend object: the Python object for a backend written in Python, else a handle."""
    address = self._backend_address()
    impl = _C._python_backend_of(address)
    return impl if impl is not None else BackendHandle(self.get_backend(), address)


def _repr(self):
    return (f"<commx.Comm {self.get_name()!r} backend={self.get_backend()!r} "
            f"rank={self.get_rank()}/{self.get_size()} device={self._device_str()}>")


_C.Comm.get_device = _get_device
_C.Comm.unsafe_get_backend = _unsafe_get_backend
_C.Comm.get_backend_impl = _unsafe_get_backend
_C.Comm.__repr__ = _repr
# torch.distributed spellings next to torchcomms' ones.
_C.Comm.allreduce = _C.Comm.all_reduce
_C.Comm.allgather = _C.Comm.all_gather
