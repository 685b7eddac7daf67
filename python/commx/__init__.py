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
from ._backends import BackendHandle, load_backend, register_backend, registered_backends
from ._comm import new_comm
from ._reconfigure import ReconfigurableComm
from ._stores import as_commx_store
from . import _torchcomms
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

_torchcomms.install()

# torchcomms' type names, so code written against torchcomms reads the same.
TorchComm = Comm
TorchWork = Work
TorchCommWindow = Window

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
    "is_backend_built", "launcher_store", "ReconfigurableComm",
]
# commx.objcol (object collectives, needs torch) is imported as `from commx import objcol`.

