"""BatchSendRecv.send/recv inside torch.compile: a traced function may add ops to a batch made
outside it (batch = comm.batch_op_create()), and batch.issue() outside runs them, as torchcomms
allows. While tracing, send/recv become commx::batch_add, a side-effecting op that adds the
tensor to the batch each time the graph runs (the batch is named by a key, as comms are).
Layer: PyTorch integration (Python, over commx)."""

import weakref

import torch
from torch.library import custom_op

from commx import _C, _tracing
from commx.functional._keys import key_of

_batches = weakref.WeakValueDictionary()  # key -> batch


@torch._dynamo.assume_constant_result
def batch_key(batch):
    return key_of(batch, _batches, "batch")


@custom_op("commx::batch_add", mutates_args=())
def _batch_add(tensor: torch.Tensor, peer: int, is_send: bool, batch: str) -> None:
    target = _batches.get(batch)
    if target is None:
        raise _C.InvalidArgumentError(
            f"InvalidArgument: BatchSendRecv {batch} no longer exists (a graph traced with a "
            "batch runs only while that batch lives)")
    (_NATIVE_SEND if is_send else _NATIVE_RECV)(target, tensor, peer)


@_batch_add.register_fake
def _(tensor, peer, is_send, batch):
    return None


torch.fx.node.has_side_effect(_batch_add._opoverload)

_NATIVE_SEND = _C.BatchSendRecv.send
_NATIVE_RECV = _C.BatchSendRecv.recv


def _send(self, tensor, dst):
    if _tracing.is_compiling():
        _batch_add(tensor, dst, True, batch_key(self))
        return self
    return _NATIVE_SEND(self, tensor, dst)


def _recv(self, tensor, src):
    if _tracing.is_compiling():
        _batch_add(tensor, src, False, batch_key(self))
        return self
    return _NATIVE_RECV(self, tensor, src)


def install():
    if _C.BatchSendRecv.send is _NATIVE_SEND:
        _C.BatchSendRecv.send = _send
        _C.BatchSendRecv.recv = _recv
