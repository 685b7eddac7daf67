"""torchcomms' module path of _BackendWrapper (`torchcomms._backend_wrapper`), where
torch.distributed looks for it when `dist.config.use_torchcomms` routes process groups through
torchcomms: the c10d Backend over one comm. Layer: PyTorch integration (Python)."""

from .torch._wrapper import BackendWrapper as _BackendWrapper

__all__ = ["_BackendWrapper"]
