"""commx: collective communication with a torchcomms-shaped API.

    import commx
    comm = commx.new_comm("cpu", "cpu", name="main")
    comm.all_reduce(tensor, commx.ReduceOp.SUM, async_op=False)

Tensors are taken zero-copy through DLPack (numpy arrays, torch CPU/CUDA tensors). Layer: Python
bindings over the public C++ API (the native part is commx._C).
"""

from . import _C
from ._C import (  # noqa: F401
    AbortedError,
    BackendContext,
    BatchSendRecv,
    Comm,
    CudaError,
    Error,
    ErrorCode,
    FileStore,
    HashStore,
    InternalError,
    InvalidArgumentError,
    NcclError,
    OpDesc,
    OpType,
    P2POp,
    PeerFailureError,
    PrefixStore,
    PythonStore,
    ReduceOp,
    Store,
    SystemCallError,
    TCPStore,
    TensorView,
    TimeoutError,
    UnsupportedError,
    Window,
    Work,
    WorkStatus,
    launcher_store,
)
from ._backends import (  # noqa: F401
    BackendHandle,
    TorchCommBackend,
    load_backend,
    register_backend,
    registered_backends,
)
from ._comm import new_comm
from ._reconfigure import ReconfigurableComm
from ._stores import as_commx_store
from . import _pickle, _torchcomms
from ._torchcomms import (  # noqa: F401
    AllGatherPHandle,
    BatchP2POptions,
    CommOptions,
    HookArgs,
    OpName,
    P2POpType,
    RedOpType,
    RemovableHandle,
    _is_backend_registered,
    available_backends,
    is_backend_built,
)

from ._options import *  # noqa: F401,F403 - SendOptions ... ReconfigureOptions
from ._options import __all__ as _option_names
from ._memory import HostMemAllocator, get_mem_allocator  # noqa: F401
from ._windows import TensorWindow, TorchCommWinAccessType, TorchCommWindowAttr  # noqa: F401
from . import coalescing  # noqa: F401
from .coalescing import coalesce  # noqa: F401
from ._timeout import Timeout  # noqa: F401

_torchcomms.install()
_pickle.install()


from ._tracing import load_functional as _load_functional  # noqa: E402

_load_functional()

# torchcomms' type names, so code written against torchcomms reads the same.
TorchComm = Comm
TorchWork = Work
TorchCommWindow = TensorWindow  # comm.new_window() / new_window(tensor); Window: commx's own


def __getattr__(name):
    # torch-dependent names load on first use, so `import commx` works without torch.
    if name == "_BackendWrapper":
        from .torch._wrapper import BackendWrapper
        return BackendWrapper
    raise AttributeError(f"module 'commx' has no attribute {name!r}")


__version__ = "0.1.0"

__all__ = [
    "AbortedError", "BackendHandle", "BatchSendRecv", "Comm", "CudaError", "Error", "ErrorCode",
    "FileStore", "HashStore", "InternalError", "InvalidArgumentError", "NcclError", "OpDesc",
    "OpType", "PeerFailureError", "PrefixStore", "PythonStore", "ReduceOp", "Store",
    "SystemCallError", "TCPStore", "TimeoutError", "TorchComm", "TorchCommWindow", "TorchWork",
    "UnsupportedError",
    "Window", "Work", "WorkStatus", "as_commx_store", "load_backend", "new_comm", "register_backend",
    "registered_backends", "AllGatherPHandle", "BatchP2POptions", "CommOptions", "HookArgs",
    "OpName", "P2POpType", "RedOpType", "RemovableHandle", "available_backends",
    "is_backend_built", "launcher_store", "ReconfigurableComm", "TorchCommBackend", "coalesce",
    "HostMemAllocator", "TensorWindow", "TorchCommWinAccessType", "TorchCommWindowAttr",
    "get_mem_allocator", "Timeout", *_option_names,
]
# Needing torch, imported by name: commx.objcol (object collectives), commx.device_mesh
# (init_device_mesh over comms), commx.functional (compile/autograd-aware collectives).

