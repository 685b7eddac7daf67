"""torchcomms' wait ops, torch.ops.torchcomms.torchcomm_wait_tensors and
torchcomm_wait_tensors_, under torchcomms' own op namespace.

The namespace is a compatibility surface: programs written for torchcomms call these ops by
that name (torch.ops.torchcomms.X), so a drop-in must answer to it; commx's own ops are
torch.ops.commx.*. Registering the `torchcomms` namespace fails (and commx leaves it alone) when
torchcomms itself is loaded in the same process.

What they do on commx: a commx op has completed when its call returns (eager and compiled), so
waiting has nothing left to wait for; both ops return the tensors' values as new tensors and
differentiate as the identity. As in torchcomms, every output requires grad when any input
does (one autograd node over the list). torchcomm_wait_tensors_ is torchcomms' in-place
spelling; on commx it mutates nothing and returns new tensors too.
Layer: PyTorch integration (Python, over commx)."""

import torch
from torch.library import custom_op, register_autograd

__all__ = ["wait_tensors"]


def _copies(tensors):
    return [t.clone() for t in tensors]


def _fake_copies(tensors):
    return [torch.empty_like(t) for t in tensors]


def _identity_backward(ctx, grads):
    return (list(grads),)


def _register(name):
    op = custom_op(f"torchcomms::{name}", mutates_args=())(_annotated(name))
    op.register_fake(_fake_copies)
    register_autograd(op, _identity_backward)
    return op


def _annotated(name):
    def impl(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return _copies(tensors)
    impl.__name__ = name
    return impl


try:
    wait_tensors = _register("torchcomm_wait_tensors")
    wait_tensors_ = _register("torchcomm_wait_tensors_")
except RuntimeError:  # torchcomms is loaded here and owns the namespace
    wait_tensors = wait_tensors_ = None
