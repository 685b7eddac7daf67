"""The custom ops behind comm methods that commx.functional's differentiable collectives do not
cover: reduce, gather, scatter, send, recv, barrier (torch.ops.commx.*). Each returns new
tensors (the methods copy them into the caller's tensors), so the graph stays functional.
All of them, and commx.functional's ops, are registered as side-effecting, so no compiler pass
drops one whose result is unused. They have no gradient (an error names the op when one is needed).
Layer: PyTorch integration (Python, over commx)."""

import torch
from torch.library import custom_op

from . import (_all_gather_single, _all_reduce, _all_to_all_single, _broadcast,
               _reduce_scatter_single, _comm, _reduce_op, _rows)


@custom_op("commx::reduce", mutates_args=())
def reduce(input: torch.Tensor, root: int, op: str, comm: str) -> torch.Tensor:
    """The reduction on `root`; other ranks get their input back."""
    c = _comm(comm)
    out = input.contiguous().clone()
    c.reduce(out, root, _reduce_op(comm, op), False)
    return out if c.get_rank() == root else input.clone()


@reduce.register_fake
def _(input, root, op, comm):
    return torch.empty_like(input, memory_format=torch.contiguous_format)


@custom_op("commx::gather", mutates_args=())
def gather(input: torch.Tensor, root: int, comm: str) -> torch.Tensor:
    """On `root`, every rank's input concatenated along dim 0; elsewhere no rows."""
    c = _comm(comm)
    input = input.contiguous()
    if c.get_rank() != root:
        c.gather([], input, root, False)
        return _rows(input, 0)
    out = _rows(input, input.shape[0] * c.get_size())
    c.gather(list(out.chunk(c.get_size())), input, root, False)
    return out


@gather.register_fake
def _(input, root, comm):
    c = _comm(comm)
    return _rows(input, input.shape[0] * c.get_size() if c.get_rank() == root else 0)


@custom_op("commx::scatter", mutates_args=())
def scatter(inputs: list[torch.Tensor], like: torch.Tensor, root: int,
            comm: str) -> torch.Tensor:
    """This rank's tensor of root's `inputs` (shaped as `like`)."""
    c = _comm(comm)
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    sources = [t.contiguous() for t in inputs] if c.get_rank() == root else []
    c.scatter(out, sources, root, False)
    return out


@scatter.register_fake
def _(inputs, like, root, comm):
    return torch.empty_like(like, memory_format=torch.contiguous_format)


@custom_op("commx::recv", mutates_args=())
def recv(like: torch.Tensor, src: int, comm: str) -> torch.Tensor:
    """The tensor rank `src` sends (shaped as `like`)."""
    out = torch.empty_like(like, memory_format=torch.contiguous_format)
    _comm(comm).recv(out, src, False)
    return out


@recv.register_fake
def _(like, src, comm):
    return torch.empty_like(like, memory_format=torch.contiguous_format)


@custom_op("commx::send", mutates_args=())
def send(input: torch.Tensor, dst: int, comm: str) -> None:
    _comm(comm).send(input.contiguous(), dst, False)


@send.register_fake
def _(input, dst, comm):
    return None


@custom_op("commx::barrier", mutates_args=())
def barrier(anchor: torch.Tensor, comm: str) -> None:
    """A barrier; `anchor` (any tensor) only gives the op a device to dispatch on."""
    _comm(comm).barrier(False)


@barrier.register_fake
def _(anchor, comm):
    return None


# Every rank must issue every collective of its graph, used or not: a rank whose compiler
# dropped an op with an unused result (gather off the root, say) would pair its next op with
# the peers' dropped one. Side-effecting ops are never eliminated as dead code.
for _op in (reduce, gather, scatter, recv, send, barrier, _all_reduce, _all_gather_single,
            _reduce_scatter_single, _all_to_all_single, _broadcast):
    torch.fx.node.has_side_effect(_op._opoverload)
