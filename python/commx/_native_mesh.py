"""A DeviceMesh that holds commx comms directly, and torch's functional collectives dispatched to
them (torchcomms' init_native_device_mesh):

    mesh = commx.device_mesh.init_native_device_mesh((dp, tp), ("dp", "tp"))
    y = funcol.all_reduce(x, "sum", (mesh, 1))       # runs on tp
    mesh.get_comm_object("torchcomms", "tp") is tp

No process group is made. Each mesh dimension's comm is registered on the mesh under a backend
name; a functional collective (torch.distributed._functional_collectives) whose group is
(mesh, dim) of such a mesh runs on that comm, any other group runs as torch has it. torch 2.15
has neither a comm registry on DeviceMesh nor a backend hook in the functional collectives, so
both are added here: DeviceMesh gets register_comm_backend / get_comm_object where it lacks
them, and the functional collectives of the module are replaced by functions that check the
group first. funcol.scatter and funcol.gather, which torch 2.15 lacks, are added the same way.

What a dispatched collective returns:
- eager, no gradient needed: a TorchCommsAsyncTensor (commx.functional.async_tensor) over the
  output of the comm's async op, waited on first use or by .wait();
- a gradient needed, or under torch.compile: the result of commx.functional's custom ops
  (torch.ops.commx.*), which complete before returning, trace into the graph (fullgraph) and
  have backwards (all_reduce <-> all_reduce, all_gather <-> reduce_scatter, all_to_all <->
  all_to_all with the splits swapped). gather has no backward; scatter does not trace.
Layer: PyTorch integration (Python)."""

import math

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch.fx.node import has_side_effect
from torch.library import custom_op

import commx
from . import functional as _fc
from .functional.async_tensor import TorchCommsAsyncTensor, wrap_result

DEFAULT_BACKEND = "torchcomms"  # the name torchcomms registers its comms under

__all__ = ["init_native_device_mesh", "install_funcol_dispatch"]

_REDUCE_OPS = {"sum": commx.ReduceOp.SUM, "avg": commx.ReduceOp.AVG, "max": commx.ReduceOp.MAX,
               "min": commx.ReduceOp.MIN, "product": commx.ReduceOp.PRODUCT}


# -- the comm registry on DeviceMesh -------------------------------------------------------------

def _register_comm_backend(self, backend, dim_comms):
    """Registers one comm per mesh dimension under `backend`: dim_comms maps each dimension's
    name to its comm (or is a sequence of comms in dimension order)."""
    if isinstance(dim_comms, dict):
        names = self.mesh_dim_names or ()
        missing = [n for n in names if n not in dim_comms]
        if missing or len(dim_comms) != self.ndim:
            raise commx.InvalidArgumentError(
                f"InvalidArgument: register_comm_backend('{backend}'): comms for dimensions "
                f"{sorted(dim_comms)}, the mesh has {list(names)}")
        comms = [dim_comms[n] for n in names]
    else:
        comms = list(dim_comms)
    if len(comms) != self.ndim:
        raise commx.InvalidArgumentError(
            f"InvalidArgument: register_comm_backend('{backend}'): {len(comms)} comms for a mesh "
            f"of {self.ndim} dimensions")
    if getattr(self, "_comm_backends", None) is None:
        self._comm_backends = {}
    self._comm_backends[backend] = comms


def _get_comm_object(self, backend, mesh_dim):
    """The comm registered under `backend` for mesh_dim (an index or a dimension name); None
    where none is."""
    comms = (getattr(self, "_comm_backends", None) or {}).get(backend)
    if comms is None:
        return None
    if isinstance(mesh_dim, str):
        names = list(self.mesh_dim_names or ())
        if mesh_dim not in names:
            raise commx.InvalidArgumentError(
                f"InvalidArgument: get_comm_object('{backend}', '{mesh_dim}'): the mesh's "
                f"dimensions are {names}")
        mesh_dim = names.index(mesh_dim)
    return comms[mesh_dim]


def _install_mesh_registry():
    # Newer torch has these on DeviceMesh itself; theirs are kept.
    if not hasattr(dist.DeviceMesh, "register_comm_backend"):
        dist.DeviceMesh.register_comm_backend = _register_comm_backend
    if not hasattr(dist.DeviceMesh, "get_comm_object"):
        dist.DeviceMesh.get_comm_object = _get_comm_object


def init_native_device_mesh(mesh_dim_comms, mesh_dim_names, backend=DEFAULT_BACKEND):
    """A DeviceMesh whose dimension i runs on mesh_dim_comms[i] (named mesh_dim_names[i]),
    without process groups: the comms are registered on the mesh under `backend`, and torch's
    functional collectives on (mesh, dim) run on them. The mesh is row-major over the global
    ranks: this rank is the entry at its rank in each dimension's comm."""
    comms, names = tuple(mesh_dim_comms), tuple(mesh_dim_names)
    if not comms or len(comms) != len(names):
        raise ValueError(f"init_native_device_mesh: {len(comms)} comms and {len(names)} "
                         "dimension names (one name per comm, at least one)")
    shape = tuple(c.get_size() for c in comms)
    ranks = torch.arange(math.prod(shape), dtype=torch.int).view(shape)
    rank = int(ranks[tuple(c.get_rank() for c in comms)].item())
    _install_mesh_registry()
    install_funcol_dispatch()
    mesh = dist.DeviceMesh(comms[0].get_device().type, ranks, mesh_dim_names=names,
                           _init_backend=False, _rank=rank)
    mesh.register_comm_backend(backend, dict(zip(names, comms)))
    mesh._dim_group_names = list(names)
    return mesh


# -- which comm a functional collective's group names --------------------------------------------

_comm_by_key = {}  # commx.functional key -> comm, for the ops below


def _mesh_comm(group):
    """The comm registered for `group` when it is (mesh, dim), or a 1-D mesh, of a mesh holding
    comms; else None (the group is torch's)."""
    if isinstance(group, tuple) and len(group) == 2 and isinstance(group[0], dist.DeviceMesh):
        mesh, dim = group
    elif isinstance(group, dist.DeviceMesh) and group.ndim == 1:
        mesh, dim = group, 0
    else:
        return None
    backends = getattr(mesh, "_comm_backends", None)
    if not backends:
        return None
    comms = backends.get(DEFAULT_BACKEND) or next(iter(backends.values()))
    return comms[dim]


@torch._dynamo.assume_constant_result
def _comm_key(group) -> str:
    """The commx.functional key of `group`'s comm ("" for torch's groups): a constant of the
    traced graph, as torch's own group names are."""
    comm = _mesh_comm(group)
    if comm is None:
        return ""
    key = _fc.group_key(comm)
    _comm_by_key[key] = comm
    return key


@torch._dynamo.assume_constant_result
def _key_size(key: str) -> int:
    return _comm_by_key[key].get_size()


def _in_flight(*tensors):
    """Whether the result may be returned in flight: eager, and no gradient to track."""
    if torch.compiler.is_compiling():
        return False
    return not (torch.is_grad_enabled() and any(t.requires_grad for t in tensors))


def _op(key, reduce_op):
    name = reduce_op.lower() if isinstance(reduce_op, str) else str(reduce_op)
    if name not in _REDUCE_OPS:
        raise commx.InvalidArgumentError(
            f"InvalidArgument: [comm '{key}'] functional collective: reduce op {reduce_op!r}; "
            f"ops: {', '.join(_REDUCE_OPS)}")
    return name


def _fold_to_dim0(t, size, dim):
    """Dim `dim`'s size blocks stacked along dim 0 (the layout the comms scatter)."""
    return t if dim == 0 else torch.cat(torch.chunk(t, size, dim=dim), dim=0)


def _unfold_from_dim0(t, size, dim):
    return t if dim == 0 else torch.cat(torch.chunk(t, size, dim=0), dim=dim)


def _rows(t, n):
    return t.new_empty((n, *t.shape[1:]))


class _Works:
    """The Works of a coalesced block, as one: waits for all of them."""

    def __init__(self, works):
        self._works = list(works)

    def wait(self):
        for w in self._works:
            w.wait()
        return True

    def is_completed(self):
        return all(w.is_completed() for w in self._works)


def wrap_in_flight(outputs, works):
    """`outputs` (a tensor or a list) in flight: TorchCommsAsyncTensors that wait for `works`
    (one Work or a list of them) on first use."""
    return wrap_result(outputs, _Works(works) if isinstance(works, list) else works)


# -- the collectives on a mesh's comm ------------------------------------------------------------
# Each takes torch's arguments and the key; eager ones use the comm's async op, the others the
# custom ops of commx.functional.

def _all_reduce(t, reduce_op, key):
    op = _op(key, reduce_op)
    if _in_flight(t):
        comm = _comm_by_key[key]
        out = t.clone(memory_format=torch.contiguous_format)
        return wrap_in_flight(out, comm.all_reduce(out, _REDUCE_OPS[op], async_op=True))
    return torch.ops.commx.all_reduce(t, op, key)


def _all_gather(t, gather_dim, key):
    size = _key_size(key)
    if _in_flight(t):
        comm = _comm_by_key[key]
        t = t.contiguous()
        out = _rows(t, t.shape[0] * size)
        work = comm.all_gather_single(out, t, async_op=True)
        if gather_dim == 0:
            return wrap_in_flight(out, work)
        work.wait()
        return _unfold_from_dim0(out, size, gather_dim)
    return _unfold_from_dim0(torch.ops.commx.all_gather_single(t, key), size, gather_dim)


def _reduce_scatter(t, reduce_op, scatter_dim, key):
    size = _key_size(key)
    op = _op(key, reduce_op)
    t = _fold_to_dim0(t, size, scatter_dim)
    if _in_flight(t):
        comm = _comm_by_key[key]
        t = t.contiguous()
        if t.dim() == 0 or t.shape[0] % size:
            raise commx.InvalidArgumentError(
                f"InvalidArgument: [comm '{comm.get_name()}' rank {comm.get_rank()}] "
                f"reduce_scatter_tensor: scatter dim {scatter_dim} of {tuple(t.shape)} is not a "
                f"multiple of the {size} ranks")
        out = _rows(t, t.shape[0] // size)
        return wrap_in_flight(out, comm.reduce_scatter_single(out, t, _REDUCE_OPS[op],
                                                              async_op=True))
    return torch.ops.commx.reduce_scatter_single(t, op, key)


# -- funcol's functions, dispatching -------------------------------------------------------------

_torch_funcol = {}  # name -> torch's own function


def all_reduce(self, reduceOp, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["all_reduce"](self, reduceOp, group, tag)
    return _all_reduce(self, reduceOp, key)


def all_gather_tensor(self, gather_dim, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["all_gather_tensor"](self, gather_dim, group, tag)
    return _all_gather(self, gather_dim, key)


def reduce_scatter_tensor(self, reduceOp, scatter_dim, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["reduce_scatter_tensor"](self, reduceOp, scatter_dim, group, tag)
    return _reduce_scatter(self, reduceOp, scatter_dim, key)


def broadcast(self, src, group, tag=""):
    """src: the root's rank in the group's comm."""
    key = _comm_key(group)
    if not key:
        return _torch_funcol["broadcast"](self, src, group, tag)
    if _in_flight(self):
        comm = _comm_by_key[key]
        out = self.clone(memory_format=torch.contiguous_format)
        return wrap_in_flight(out, comm.broadcast(out, src, async_op=True))
    return torch.ops.commx.broadcast(self, src, key)


def all_to_all_single(self, output_split_sizes, input_split_sizes, group, tag=""):
    """Split sizes count rows of dim 0; None: equal blocks."""
    key = _comm_key(group)
    if not key:
        return _torch_funcol["all_to_all_single"](self, output_split_sizes, input_split_sizes,
                                                  group, tag)
    size = _key_size(key)
    if output_split_sizes is not None or input_split_sizes is not None:
        equal = [self.shape[0] // size] * size
        output_split_sizes = list(output_split_sizes if output_split_sizes is not None else equal)
        input_split_sizes = list(input_split_sizes if input_split_sizes is not None else equal)
    if _in_flight(self):
        comm = _comm_by_key[key]
        t = self.contiguous()
        if output_split_sizes is None:
            out = torch.empty_like(t)
            work = comm.all_to_all_single(out, t, async_op=True)
        else:
            out = _rows(t, sum(output_split_sizes))
            work = comm.all_to_all_v_single(out, t, output_split_sizes, input_split_sizes,
                                            async_op=True)
        return wrap_in_flight(out, work)
    return torch.ops.commx.all_to_all_single(self, output_split_sizes, input_split_sizes, key)


def _coalesced(results):
    """In flight: one TorchCommsAsyncTensor per output, all waiting for the block's Works."""
    if results and all(isinstance(r, TorchCommsAsyncTensor) for r in results):
        works = [r.work for r in results]
        return wrap_in_flight([r.elem for r in results], works)
    return results


def all_reduce_coalesced(self, reduceOp, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["all_reduce_coalesced"](self, reduceOp, group, tag)
    return _coalesced([_all_reduce(t, reduceOp, key) for t in self])


def all_gather_into_tensor_coalesced(self, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["all_gather_into_tensor_coalesced"](self, group, tag)
    return _coalesced([_all_gather(t, 0, key) for t in self])


def reduce_scatter_tensor_coalesced(inputs, reduceOp, scatter_dim, group, tag=""):
    key = _comm_key(group)
    if not key:
        return _torch_funcol["reduce_scatter_tensor_coalesced"](inputs, reduceOp, scatter_dim,
                                                                group, tag)
    return _coalesced([_reduce_scatter(t, reduceOp, d, key)
                       for t, d in zip(inputs, scatter_dim)])


def _no_torch_group(name, group):
    raise commx.InvalidArgumentError(
        f"InvalidArgument: funcol.{name}: group {group!r} is not (mesh, dim) of a mesh holding "
        "commx comms (init_native_device_mesh); torch's functional collectives have no "
        f"{name} of their own")


def scatter(output, scatter_list, src, group, tag=""):
    """Rank `src`'s scatter_list[i] into rank i's `output` (eager only)."""
    key = _comm_key(group)
    if not key:
        _no_torch_group("scatter", group)
    comm = _comm_by_key[key]
    ins = [t.contiguous() for t in scatter_list] if comm.get_rank() == src else []
    return wrap_in_flight(output, comm.scatter(output, ins, src, async_op=True))


@custom_op("commx::funcol_gather", mutates_args=())
def _gather_op(input: torch.Tensor, dst: int, comm: str) -> list[torch.Tensor]:
    c = _comm_by_key[comm]
    input = input.contiguous()
    outs = [torch.empty_like(input) for _ in range(c.get_size())] if c.get_rank() == dst else []
    c.gather(outs, input, dst, False)
    return outs


@_gather_op.register_fake
def _(input, dst, comm):
    c = _comm_by_key[comm]
    return ([torch.empty_like(input, memory_format=torch.contiguous_format)
             for _ in range(c.get_size())] if c.get_rank() == dst else [])


# Ranks other than dst get no output from it, so a graph would drop the op there as dead code
# (and the ranks' calls would no longer match): it is kept as a side effect.
has_side_effect(torch.ops.commx.funcol_gather.default)


def gather(input, gather_list, dst, group, tag=""):
    """Every rank's `input` on rank `dst`, as a list in rank order (gather_list's tensors when
    given); the other ranks get []. No backward."""
    key = _comm_key(group)
    if not key:
        _no_torch_group("gather", group)
    if not _in_flight(input):
        return _gather_op(input, dst, key)
    comm = _comm_by_key[key]
    t = input.contiguous()
    if comm.get_rank() != dst:
        comm.gather([], t, dst, async_op=True).wait()
        return []
    outs = list(gather_list) or [torch.empty_like(t) for _ in range(comm.get_size())]
    return wrap_in_flight(outs, comm.gather(outs, t, dst, async_op=True))


_DISPATCHED = (all_reduce, all_gather_tensor, reduce_scatter_tensor, broadcast, all_to_all_single,
               all_reduce_coalesced, all_gather_into_tensor_coalesced,
               reduce_scatter_tensor_coalesced, scatter, gather)


def install_funcol_dispatch():
    """Routes torch's functional collectives on (mesh, dim) of meshes holding commx comms to
    those comms (idempotent; other groups keep torch's functions)."""
    for fn in _DISPATCHED:
        name = fn.__name__
        if name in _torch_funcol:
            continue
        _torch_funcol[name] = getattr(funcol, name, None)
        setattr(funcol, name, fn)
