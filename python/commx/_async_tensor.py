"""TorchCommsAsyncTensor: the result of a collective still in flight, as a tensor. Any use of it
(an op, .tolist(), printing) first waits for the collective, once; wait() does so explicitly and
returns the plain tensor. torchcomms' functional collectives return it in eager mode when no
gradient is needed, so the program overlaps the collective with its own work until the first use.
Layer: PyTorch integration (Python)."""

import torch
from torch.utils._pytree import tree_map_only

__all__ = ["TorchCommsAsyncTensor", "wrap_in_flight"]


class TorchCommsAsyncTensor(torch.Tensor):
    """`elem` (the output buffer) becomes valid once `work` (a commx Work) completes."""

    __slots__ = ["elem", "work", "completed"]

    @staticmethod
    def __new__(cls, elem, work):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=elem.requires_grad)
        r.elem, r.work, r.completed = elem, work, False
        return r

    def wait(self):
        """Waits for the collective (once) and returns its output as a plain tensor."""
        if not self.completed:
            if self.work is not None:
                self.work.wait()
            self.work, self.completed = None, True
        return self.elem

    def tolist(self):
        return self.wait().tolist()

    def numpy(self):
        return self.wait().numpy()

    def __repr__(self):
        return f"TorchCommsAsyncTensor({self.wait()})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        unwrap = lambda t: t.wait()  # noqa: E731
        return func(*tree_map_only(TorchCommsAsyncTensor, unwrap, args),
                    **tree_map_only(TorchCommsAsyncTensor, unwrap, kwargs or {}))


class _WaitOnce:
    """The Works of several outputs issued together (a coalesced block): waited at most once."""

    def __init__(self, works):
        self._works = list(works)

    def wait(self):
        works, self._works = self._works, []
        for w in works:
            w.wait()


def wrap_in_flight(outputs, works):
    """`outputs` (one tensor or a list) as TorchCommsAsyncTensors that wait for `works` (one
    commx Work or a list of them)."""
    shared = _WaitOnce(works if isinstance(works, (list, tuple)) else [works])
    if isinstance(outputs, torch.Tensor):
        return TorchCommsAsyncTensor(outputs, shared)
    return [TorchCommsAsyncTensor(t, shared) for t in outputs]
