"""Async tensors: what a comm method returns for async_op=True in the compile mode
(TORCHCOMMS_PATCH_FOR_COMPILE=1), as torchcomms' TorchCommsAsyncTensor.

An async tensor is the op's result tensor together with the op's Work. Using it as a tensor
(any torch function or aten op) first waits for the Work; wait() does so explicitly and returns
the plain tensor. To autograd it is transparent: grad_fn, is_leaf and grad are the wrapped
tensor's, so a loss computed from it differentiates back through the collective.

    out = comm.all_reduce(x, ReduceOp.SUM, async_op=True)   # an AsyncTensor
    y = out * 2                                             # waits, then multiplies

Tensors of one op share its Work through OnceWork, which waits once.
Layer: PyTorch integration (Python, over commx)."""

import torch
from torch.utils._pytree import tree_map

__all__ = ["OnceWork", "TorchCommsAsyncTensor", "wrap_result"]


class OnceWork:
    """A Work shared by several async tensors (the outputs of one list op): waits once."""

    __slots__ = ("_work", "_done")

    def __init__(self, work):
        self._work = work
        self._done = work is None

    def wait(self):
        if not self._done:
            self._work.wait()
            self._done = True
        return True

    def is_completed(self):
        return self._done or self._work.is_completed()


class TorchCommsAsyncTensor(torch.Tensor):
    """`elem` (the op's result) whose first use waits for `work` (None: already complete)."""

    __slots__ = ("elem", "work", "completed")

    @staticmethod
    def __new__(cls, elem, work):
        wrapper = torch.Tensor._make_wrapper_subclass(
            cls, elem.size(), strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, layout=elem.layout, device=elem.device,
            requires_grad=elem.requires_grad)
        wrapper.elem = elem
        wrapper.work = work
        wrapper.completed = work is None
        return wrapper

    # autograd sees the wrapped tensor
    @property
    def grad_fn(self):
        return self.elem.grad_fn

    @property
    def is_leaf(self):
        return self.elem.is_leaf

    @property
    def grad(self):
        return self.elem.grad

    @grad.setter
    def grad(self, value):
        self.elem.grad = value

    def wait(self):
        """Waits for the op and returns the result as a plain tensor."""
        if not self.completed:
            self.work.wait()
            self.completed = True
        return self.elem

    def is_completed(self):
        return self.completed or self.work.is_completed()

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        return self.wait().backward(gradient, retain_graph, create_graph, inputs)

    def __repr__(self):
        return f"TorchCommsAsyncTensor({self.wait()!r})"

    # dynamo sees through the wrapper to `elem`
    def __tensor_flatten__(self):
        return ["elem"], (self.work, self.completed)

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        work, completed = meta
        result = TorchCommsAsyncTensor(inner["elem"], work)
        result.completed = completed
        return result

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return func(*_waited(args), **_waited(kwargs or {}))

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return func(*_waited(args), **_waited(kwargs or {}))


def _waited(tree):
    return tree_map(lambda x: x.wait() if isinstance(x, TorchCommsAsyncTensor) else x, tree)


def wrap_result(result, work):
    """The async form of an op's result (a tensor or a list of tensors) completing with `work`
    (None: already complete)."""
    if isinstance(result, torch.Tensor):
        return TorchCommsAsyncTensor(result, work)
    if isinstance(result, (list, tuple)):
        once = OnceWork(work)
        return type(result)(TorchCommsAsyncTensor(t, once) for t in result)
    return result
