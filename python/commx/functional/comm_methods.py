"""Comm methods that torch.compile traces and autograd records, as torchcomms' compile mode
has them:

    @torch.compile(fullgraph=True)
    def step(t):
        work = comm.all_reduce(t, ReduceOp.SUM, async_op=True)
        work.wait()
        return t * 2

Each collective method of commx.Comm is wrapped in Python. While torch.compile traces it, the
wrapper issues the functional ops (commx.functional and its comm_ops) and copies their results
into the caller's tensors, so the graph holds the collective and the in-place update as the
method promised. Outside tracing, with the compile mode off (the default), the wrapper calls
the method as before. With the mode on (TORCHCOMMS_PATCH_FOR_COMPILE=1 or
COMMX_PATCH_FOR_COMPILE=1 at import):
- an op whose tensors require grad (with grad enabled) runs through the differentiable ops, so
  backward reaches the inputs (all_reduce sum/avg, all_gather*, reduce_scatter* sum/avg,
  all_to_all*, broadcast; the others have no gradient);
- async_op=True returns the op's result as async tensors (commx.functional.async_tensor): the
  output tensor, or the output list, that wait for the Work on first use; barrier and send
  return the Work.

Traced ops complete when the graph moves past them, so a traced async_op=True returns a
completed Work (wait() returns at once). hints and timeout are accepted; a traced op runs under
the comm's timeout. all_gather_v and reduce_scatter_v are traced as all_to_all_single of the
blocks (reduce_scatter_v then reduces locally). Layer: PyTorch integration (Python, over commx).
"""

import inspect

import torch

from commx import _C, _tracing

from . import (_all_gather_single, _all_reduce, _all_to_all_single, _broadcast,
               _reduce_scatter_single, group_key)
from . import comm_ops
from .async_tensor import wrap_result


class CompletedWork:
    """What a traced async op returns: its op is done by the time the graph moves on."""

    def __init__(self, result=None):
        self.result = result

    def wait(self, timeout=None):
        return self.result

    def is_completed(self):
        return True


@torch._dynamo.assume_constant_result
def _op_spec(op):
    """A ReduceOp as the functional ops name it ("sum", ..., "premul_sum:<factor>")."""
    kind = op.kind if isinstance(op, _C.ReduceOp) else str(op).lower()
    if kind == "premulsum":
        return f"premul_sum:{op.factor!r}"
    return {"prod": "product"}.get(kind, kind)


@torch._dynamo.assume_constant_result
def _rank(comm):
    return comm.get_rank()


def _done(result, async_op):
    return CompletedWork(result) if async_op else None


def _rows_of(tensors):
    return [t.shape[0] for t in tensors]


def _reduce_blocks(blocks, op, dtype):
    """The local reduction of rank-stacked blocks, for reduce_scatter_v."""
    stacked = torch.stack(blocks)
    if op in ("sum", "avg") or op.startswith("premul_sum:"):
        total = stacked.sum(0)
        if op == "avg":
            total = total / len(blocks)
        elif op != "sum":
            total = total * float(op.split(":", 1)[1])
    elif op == "max":
        total = stacked.amax(0)
    elif op == "min":
        total = stacked.amin(0)
    elif op == "product":
        total = stacked.prod(0)
    else:
        raise _C.UnsupportedError(f"Unsupported: reduce_scatter_v under torch.compile: reduce "
                                  f"op {op!r}")
    return total.to(dtype)


# -- the traced forms (self: the comm; same parameters as the methods) ---------------------------

def all_reduce(self, tensor, op, async_op=False, hints=None, timeout=None):
    tensor.copy_(_all_reduce(tensor, _op_spec(op), group_key(self)))
    return _done(tensor, async_op)


def reduce(self, tensor, root, op, async_op=False, hints=None, timeout=None):
    tensor.copy_(comm_ops.reduce(tensor, root, _op_spec(op), group_key(self)))
    return _done(tensor, async_op)


def broadcast(self, tensor, root, async_op=False, hints=None, timeout=None):
    tensor.copy_(_broadcast(tensor, root, group_key(self)))
    return _done(tensor, async_op)


def all_gather(self, tensor_list, tensor, async_op=False, hints=None, timeout=None):
    gathered = _all_gather_single(tensor, group_key(self))
    for out, block in zip(tensor_list, gathered.split(tensor.shape[0])):
        out.copy_(block)
    return _done(tensor_list, async_op)


def all_gather_v(self, tensor_list, tensor, async_op=False, hints=None, timeout=None):
    size = len(tensor_list)
    rows = tensor.shape[0]
    gathered = _all_to_all_single(torch.cat([tensor] * size), _rows_of(tensor_list),
                                  [rows] * size, group_key(self))
    for out, block in zip(tensor_list, gathered.split(_rows_of(tensor_list))):
        out.copy_(block)
    return _done(tensor_list, async_op)


def all_gather_single(self, output, input, async_op=False, hints=None, timeout=None):
    output.copy_(_all_gather_single(input, group_key(self)).view(output.shape))
    return _done(output, async_op)


def reduce_scatter(self, output, input_list, op, async_op=False, hints=None, timeout=None):
    output.copy_(_reduce_scatter_single(torch.cat(list(input_list)), _op_spec(op),
                                        group_key(self)).view(output.shape))
    return _done(output, async_op)


def reduce_scatter_v(self, output, input_list, op, async_op=False, hints=None, timeout=None):
    size = len(input_list)
    rows = output.shape[0]
    received = _all_to_all_single(torch.cat(list(input_list)), [rows] * size,
                                  _rows_of(input_list), group_key(self))
    output.copy_(_reduce_blocks(list(received.split(rows)), _op_spec(op), output.dtype))
    return _done(output, async_op)


def reduce_scatter_single(self, output, input, op, async_op=False, hints=None, timeout=None):
    output.copy_(_reduce_scatter_single(input, _op_spec(op), group_key(self)).view(output.shape))
    return _done(output, async_op)


def all_to_all(self, output_tensor_list, input_tensor_list, async_op=False, hints=None,
               timeout=None):
    out_rows = _rows_of(output_tensor_list)
    received = _all_to_all_single(torch.cat(list(input_tensor_list)), out_rows,
                                  _rows_of(input_tensor_list), group_key(self))
    for out, block in zip(output_tensor_list, received.split(out_rows)):
        out.copy_(block)
    return _done(output_tensor_list, async_op)


def all_to_all_single(self, output, input, async_op=False, hints=None, timeout=None):
    output.copy_(_all_to_all_single(input, None, None, group_key(self)))
    return _done(output, async_op)


def all_to_all_v_single(self, output, input, output_split_sizes, input_split_sizes,
                        async_op=False, hints=None, timeout=None):
    output.copy_(_all_to_all_single(input, list(output_split_sizes), list(input_split_sizes),
                                    group_key(self)))
    return _done(output, async_op)


def gather(self, output_tensor_list, input_tensor, root, async_op=False, hints=None,
           timeout=None):
    gathered = comm_ops.gather(input_tensor, root, group_key(self))
    if _rank(self) == root:
        for out, block in zip(output_tensor_list, gathered.split(input_tensor.shape[0])):
            out.copy_(block)
    return _done(output_tensor_list, async_op)


def scatter(self, output_tensor, input_tensor_list, root, async_op=False, hints=None,
            timeout=None):
    output_tensor.copy_(comm_ops.scatter(list(input_tensor_list), output_tensor, root,
                                         group_key(self)))
    return _done(output_tensor, async_op)


def send(self, tensor, dst, async_op=False, hints=None, timeout=None):
    comm_ops.send(tensor, dst, group_key(self))
    return _done(None, async_op)


def recv(self, tensor, src, async_op=False, hints=None, timeout=None):
    tensor.copy_(comm_ops.recv(tensor, src, group_key(self)))
    return _done(tensor, async_op)


def barrier(self, async_op=False, hints=None, timeout=None):
    comm_ops.barrier(torch.empty(0), group_key(self))
    return _done(None, async_op)


TRACED = {f.__name__: f for f in (
    all_reduce, reduce, broadcast, all_gather, all_gather_v, all_gather_single, reduce_scatter,
    reduce_scatter_v, reduce_scatter_single, all_to_all, all_to_all_single, all_to_all_v_single,
    gather, scatter, send, recv, barrier)}

# Ops whose result, in the compile mode, is their first tensor argument (the output).
_NO_TENSOR_RESULT = frozenset({"send", "barrier"})


# -- the methods ----------------------------------------------------------------------------------

def _needs_grad(args):
    if not torch.is_grad_enabled():
        return False
    for a in args:
        if isinstance(a, torch.Tensor) and a.requires_grad:
            return True
        if isinstance(a, (list, tuple)) and any(
                isinstance(t, torch.Tensor) and t.requires_grad for t in a):
            return True
    return False


def _eager_in_mode(name, method, traced, self, args, kwargs):
    """An eager call in the compile mode: autograd-recorded when needed, async tensors back."""
    bound = inspect.signature(traced).bind(self, *args, **kwargs)
    bound.apply_defaults()
    async_op = bound.arguments.get("async_op", False)
    values = list(bound.arguments.values())[1:]
    if _needs_grad(values):
        traced(*bound.args, **bound.kwargs)
        work = None
    else:
        work = method(self, *args, **kwargs)
        if not async_op:
            return work
    if name in _NO_TENSOR_RESULT:
        return work if work is not None else CompletedWork()
    result = values[0]
    return wrap_result(result, work) if async_op else None


def _method(name, method, traced):
    def call(self, *args, **kwargs):
        if _tracing.is_compiling():
            kwargs.pop("options", None)
            return traced(self, *args, **kwargs)
        if not _tracing.patch_mode:
            return method(self, *args, **kwargs)
        return _eager_in_mode(name, method, traced, self, args, kwargs)
    call.__name__ = name
    call.__qualname__ = f"Comm.{name}"
    call.__doc__ = method.__doc__
    call._commx_traceable = True
    return call


def _constant(name, method):
    """A getter whose answer is fixed for the comm's life, read once while tracing."""
    def get(self):
        return method(self)
    get.__name__ = name
    get.__qualname__ = f"Comm.{name}"
    get.__doc__ = method.__doc__
    get._commx_traceable = True
    return torch._dynamo.assume_constant_result(get)


def install():
    """Wraps commx.Comm's collective methods (once); rank, size and name read inside a traced
    function become constants of the graph."""
    for name in ("get_rank", "get_size", "get_name"):
        method = getattr(_C.Comm, name)
        if not getattr(method, "_commx_traceable", False):
            setattr(_C.Comm, name, _constant(name, method))
    for name, traced in TRACED.items():
        method = getattr(_C.Comm, name)
        if not getattr(method, "_commx_traceable", False):
            setattr(_C.Comm, name, _method(name, method, traced))
