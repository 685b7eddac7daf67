"""Whether the caller is being traced by torch.compile, for the pure-Python layers (coalescing,
comm methods) that must not import torch. commx.functional points `is_compiling` at
torch.compiler.is_compiling when it loads; dynamo folds that call to a constant while tracing.
Also the mode switch of torchcomms' compile support (TORCHCOMMS_PATCH_FOR_COMPILE).
Layer: Python bindings (pure Python)."""

import os
import sys


def _never():
    return False


is_compiling = _never

# The opt-in mode of torchcomms (its variable, or commx's own name for it): comm methods called
# eagerly with async_op=True return async tensors (commx.functional.async_tensor), and ops whose
# tensors require grad are recorded by autograd. Read once, at import.
_TRUE = ("1", "true", "yes", "on")
patch_mode = any(os.environ.get(v, "").strip().lower() in _TRUE
                 for v in ("TORCHCOMMS_PATCH_FOR_COMPILE", "COMMX_PATCH_FOR_COMPILE"))


def load_functional():
    """Loads commx.functional (which makes comm methods traceable) once torch is fully imported:
    called when commx is imported and again by new_comm, since torch.distributed may import
    commx (as torchcomms) while torch itself is still importing. Without torch, nothing."""
    if "commx.functional" in sys.modules:
        return
    torch = sys.modules.get("torch")
    if torch is None and not patch_mode:
        return
    if torch is not None and getattr(torch, "_dynamo", None) is None:
        return  # torch still importing
    from . import functional  # noqa: F401
