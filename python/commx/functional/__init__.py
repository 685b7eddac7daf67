"""Functional collectives on commx comms: each returns a new tensor (the input is left alone),
is a torch custom op (torch.ops.commx.*) with a fake implementation, so torch.compile traces it
into the graph (fullgraph), and has a registered backward, so autograd differentiates through it:

    import commx.functional as fc
    y = fc.all_reduce(x, "sum", comm)          # eager, under torch.compile, and in backward
    g = fc.all_gather_single(x, comm)          # concatenated along dim 0
    s = fc.reduce_scatter_single(x, "sum", comm)
    a = fc.all_to_all_single(x, comm, output_split_sizes, input_split_sizes)   # rows of dim 0
    b = fc.broadcast(x, root, comm)

Backwards: all_reduce(sum/avg) -> all_reduce of the gradient; all_gather_single ->
reduce_scatter_single(sum); reduce_scatter_single(sum/avg) -> all_gather_single; all_to_all_single
-> all_to_all_single with the split sizes swapped; broadcast -> the gradients summed on the root
(zero elsewhere). max/min/product have no gradient here (an error names the op).

The ops complete before they return (commx runs them synchronously), so no wait is needed.
Inside the graph a comm is named by a key (group_key(comm)); a compiled function is specialised
on the comms it was traced with, as torch's own functional collectives are on their groups.
Layer: PyTorch integration (Python, over commx)."""

import itertools
from typing import Optional

import torch
from torch.library import custom_op, register_autograd

import commx
from commx import _tracing
from commx.functional._keys import key_of

__all__ = ["all_gather_single", "all_reduce", "all_to_all_single", "broadcast", "group_key",
           "is_torch_compile_supported_and_enabled",
           "reduce_scatter_single"]

_REDUCE_OPS = {"sum": commx.ReduceOp.SUM, "avg": commx.ReduceOp.AVG, "max": commx.ReduceOp.MAX,
               "min": commx.ReduceOp.MIN, "product": commx.ReduceOp.PRODUCT}

_comms = {}  # key -> comm; a comm keeps its key for life (comm._functional_key)


@torch._dynamo.assume_constant_result
def group_key(comm):
    """The name a comm has inside traced graphs (given once, kept for the comm's life)."""
    return key_of(comm, _comms, comm.get_name())


def _comm(key):
    comm = _comms.get(key)
    if comm is None:
        raise commx.InvalidArgumentError(f"InvalidArgument: commx.functional: no comm '{key}' in "
                                         "this process (a graph traced with another process's "
                                         "comm?)")
    return comm


def _reduce_op(key, op):
    if op.startswith("premul_sum:"):  # comm methods' PREMUL_SUM(factor), factor after the colon
        return commx.ReduceOp.PREMUL_SUM(float(op.split(":", 1)[1]))
    if op not in _REDUCE_OPS:
        raise commx.InvalidArgumentError(
            f"InvalidArgument: [comm '{_comm(key).get_name()}'] functional collective: reduce op "
            f"{op!r}; ops: {', '.join(_REDUCE_OPS)}")
    return _REDUCE_OPS[op]


def _rows(t, n):
    """An empty tensor like t with n rows of dim 0."""
    return t.new_empty((n, *t.shape[1:]))


# -- the ops --------------------------------------------------------------------------------------

@custom_op("commx::all_reduce", mutates_args=())
def _all_reduce(input: torch.Tensor, op: str, comm: str) -> torch.Tensor:
    out = input.contiguous().clone()
    _comm(comm).all_reduce(out, _reduce_op(comm, op), False)
    return out


@_all_reduce.register_fake
def _(input, op, comm):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


@custom_op("commx::all_gather_single", mutates_args=())
def _all_gather_single(input: torch.Tensor, comm: str) -> torch.Tensor:
    c = _comm(comm)
    input = input.contiguous()
    out = _rows(input, input.shape[0] * c.get_size())
    c.all_gather_single(out, input, False)
    return out


@_all_gather_single.register_fake
def _(input, comm):
    return _rows(input, input.shape[0] * _comm(comm).get_size())


def _scattered_rows(input, c):
    size = c.get_size()
    if input.dim() == 0 or input.shape[0] % size:
        raise commx.InvalidArgumentError(
            f"InvalidArgument: [comm '{c.get_name()}' rank {c.get_rank()}] reduce_scatter_single: "
            f"dim 0 of the input ({tuple(input.shape)}) is not a multiple of the {size} ranks")
    return input.shape[0] // size


@custom_op("commx::reduce_scatter_single", mutates_args=())
def _reduce_scatter_single(input: torch.Tensor, op: str, comm: str) -> torch.Tensor:
    c = _comm(comm)
    input = input.contiguous()
    out = _rows(input, _scattered_rows(input, c))
    c.reduce_scatter_single(out, input, _reduce_op(comm, op), False)
    return out


@_reduce_scatter_single.register_fake
def _(input, op, comm):
    return _rows(input, _scattered_rows(input, _comm(comm)))


@custom_op("commx::all_to_all_single", mutates_args=())
def _all_to_all_single(input: torch.Tensor, output_split_sizes: Optional[list[int]],
                       input_split_sizes: Optional[list[int]], comm: str) -> torch.Tensor:
    c = _comm(comm)
    input = input.contiguous()
    if output_split_sizes is None and input_split_sizes is None:
        out = torch.empty_like(input)
        c.all_to_all_single(out, input, False)
        return out
    out = _rows(input, sum(output_split_sizes))
    c.all_to_all_v_single(out, input, list(output_split_sizes), list(input_split_sizes), False)
    return out


@_all_to_all_single.register_fake
def _(input, output_split_sizes, input_split_sizes, comm):
    if output_split_sizes is None:
        return torch.empty_like(input, memory_format=torch.contiguous_format)
    return _rows(input, sum(output_split_sizes))


@custom_op("commx::broadcast", mutates_args=())
def _broadcast(input: torch.Tensor, root: int, comm: str) -> torch.Tensor:
    out = input.contiguous().clone()
    _comm(comm).broadcast(out, root, False)
    return out


@_broadcast.register_fake
def _(input, root, comm):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


# -- backwards ------------------------------------------------------------------------------------

def _no_gradient(what, op):
    raise commx.UnsupportedError(f"Unsupported: commx.functional.{what}: no gradient for reduce "
                                 f"op {op!r} (sum and avg have one)")


def _save_args(ctx, inputs, output):
    ctx.args = inputs[1:]  # everything but the tensor


def _all_reduce_backward(ctx, grad):
    op, comm = ctx.args
    if op not in ("sum", "avg"):
        _no_gradient("all_reduce", op)
    return _all_reduce(grad, op, comm), None, None


def _all_gather_single_backward(ctx, grad):
    (comm,) = ctx.args
    return _reduce_scatter_single(grad, "sum", comm), None


def _reduce_scatter_single_backward(ctx, grad):
    op, comm = ctx.args
    if op not in ("sum", "avg"):
        _no_gradient("reduce_scatter_single", op)
    g = _all_gather_single(grad, comm)
    return (g / _comm(comm).get_size() if op == "avg" else g), None, None


def _all_to_all_single_backward(ctx, grad):
    out_splits, in_splits, comm = ctx.args
    return _all_to_all_single(grad, in_splits, out_splits, comm), None, None, None


def _broadcast_backward(ctx, grad):
    root, comm = ctx.args
    total = _all_reduce(grad, "sum", comm)
    return (total if _comm(comm).get_rank() == root else torch.zeros_like(total)), None, None


for _op, _backward in ((_all_reduce, _all_reduce_backward),
                       (_all_gather_single, _all_gather_single_backward),
                       (_reduce_scatter_single, _reduce_scatter_single_backward),
                       (_all_to_all_single, _all_to_all_single_backward),
                       (_broadcast, _broadcast_backward)):
    register_autograd(_op, _backward, setup_context=_save_args)


# -- the functions programs call ------------------------------------------------------------------

def all_reduce(tensor, op, comm):
    """The reduction of `tensor` over the comm's ranks. op: "sum", "avg", "max", "min",
    "product" (or a commx.ReduceOp of those kinds)."""
    return _all_reduce(tensor, _op_name(op), group_key(comm))


def all_gather_single(tensor, comm):
    """Every rank's `tensor`, concatenated along dim 0 in rank order."""
    return _all_gather_single(tensor, group_key(comm))


def reduce_scatter_single(tensor, op, comm):
    """This rank's block (dim 0 split in size blocks) of the reduction of `tensor`."""
    return _reduce_scatter_single(tensor, _op_name(op), group_key(comm))


def all_to_all_single(tensor, comm, output_split_sizes=None, input_split_sizes=None):
    """Block j of dim 0 goes to rank j; split sizes count rows of dim 0 (both or neither)."""
    if (output_split_sizes is None) != (input_split_sizes is None):
        raise commx.InvalidArgumentError(
            "InvalidArgument: commx.functional.all_to_all_single: give both split size lists or "
            "neither")
    return _all_to_all_single(tensor, None if output_split_sizes is None else
                              list(output_split_sizes), None if input_split_sizes is None else
                              list(input_split_sizes), group_key(comm))


def broadcast(tensor, root, comm):
    """Rank `root`'s `tensor` on every rank."""
    return _broadcast(tensor, root, group_key(comm))


def _op_name(op):
    if isinstance(op, str):
        return op.lower()
    name = getattr(getattr(op, "type", None), "name", None)  # commx.ReduceOp -> RedOpType
    return {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min",
            "PRODUCT": "product"}.get(name, str(op))


def is_torch_compile_supported_and_enabled(min_version="2.12", _current_version=None):
    """torchcomms' test of its compile mode: comm methods (comm.all_reduce(t, op, async_op))
    traced by torch.compile and recorded by autograd. commx traces comm methods whenever
    torch.compile meets them; the switch (TORCHCOMMS_PATCH_FOR_COMPILE=1 or
    COMMX_PATCH_FOR_COMPILE=1, read at import) adds the eager half: async tensors from
    async_op=True and autograd through the methods. True when the switch is on and torch is at
    least `min_version`."""
    if not _tracing.patch_mode:
        return False
    version = _current_version or torch.__version__
    return _version_tuple(version) >= _version_tuple(min_version)


def _version_tuple(version):
    parts = []
    for piece in str(version).split("+")[0].split(".")[:3]:
        digits = "".join(itertools.takewhile(str.isdigit, piece))
        parts.append(int(digits or 0))
    return tuple(parts)


# Comm methods traceable by torch.compile, torchcomms' async tensors and wait ops.
_tracing.is_compiling = torch.compiler.is_compiling
from . import async_tensor, wait_ops, comm_ops, comm_methods, batch_methods  # noqa: E402,F401

comm_methods.install()
batch_methods.install()
