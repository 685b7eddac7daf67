"""torch DeviceMesh over commx comms the program made (torchcomms' init_device_mesh):

    tp = world.split(...); dp = world.split(...)
    mesh = commx.device_mesh.init_device_mesh((dp, tp), ("dp", "tp"), _global_comm=world)

Each comm becomes a torch process group (a BackendWrapper over it) registered under its mesh
dimension's name, so DeviceMesh, DTensor and torch's functional collectives run on the comms as
they are; no init_process_group is needed. Layer: PyTorch integration (Python)."""

import math

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import commx
from commx.torch._wrapper import BackendWrapper
from commx._native_mesh import init_native_device_mesh  # noqa: F401  (comms without groups)

BACKEND_NAME = "commx_comm"  # the backend name torch reports for these groups

__all__ = ["init_device_mesh", "init_native_device_mesh"]


def _process_group(comm, group_name, global_ranks, store=None):
    """A ProcessGroup over `comm`, registered with c10d as `group_name`; global_ranks: the
    global rank of each group rank."""
    if store is None:
        store = dist.HashStore()  # never used for rendezvous: the comm exists already
    pg = dist.ProcessGroup(store, comm.get_rank(), comm.get_size())
    device = comm.get_device()
    pg._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, BackendWrapper(comm))
    # The wrapper is the group's default backend too, which c10d asks for what is not per device
    # (the group's sequence number).
    pg._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
    pg._set_group_name(group_name)
    world = c10d._world
    world.pg_map[pg] = (BACKEND_NAME, store)
    world.pg_names[pg] = group_name
    world.pg_backend_config[pg] = f"{device.type}:{BACKEND_NAME}"
    world.pg_group_ranks[pg] = {g: i for i, g in enumerate(global_ranks)}
    tag = f"ptd:{group_name}"
    world.tags_to_pg.setdefault(tag, []).append(pg)
    world.pg_to_tag[pg] = tag
    c10d._register_process_group(group_name, pg)
    return pg


def init_device_mesh(mesh_dim_comms, mesh_dim_names, _global_comm=None):
    """A DeviceMesh whose dimension i is `mesh_dim_comms[i]` (named mesh_dim_names[i]).

    The mesh is row-major over the global ranks: this process's global rank is the mesh entry at
    its rank in each dimension's comm. With more than one dimension, `_global_comm` (the comm of
    all of them) becomes torch's default group; with one, that dimension's comm does."""
    comms, names = tuple(mesh_dim_comms), tuple(mesh_dim_names)
    if not comms or len(comms) != len(names):
        raise commx.InvalidArgumentError(
            f"InvalidArgument: init_device_mesh: {len(comms)} comms and {len(names)} dimension "
            "names (one name per comm, at least one)")
    if len(comms) > 1 and _global_comm is None:
        raise commx.InvalidArgumentError(
            "InvalidArgument: init_device_mesh: a mesh of more than one dimension needs "
            "_global_comm (the comm of all its ranks) for torch's default group")
    shape = tuple(c.get_size() for c in comms)
    world_size = math.prod(shape)
    if _global_comm is not None and _global_comm.get_size() != world_size:
        raise commx.InvalidArgumentError(
            f"InvalidArgument: init_device_mesh: the mesh {shape} has {world_size} ranks, "
            f"_global_comm '{_global_comm.get_name()}' {_global_comm.get_size()}")
    mesh = torch.arange(world_size, dtype=torch.int).view(shape)
    rank = int(mesh[tuple(c.get_rank() for c in comms)].item())

    world_pg = None
    if _global_comm is not None:
        world_pg = _process_group(_global_comm, _global_comm.get_name(), range(world_size))
    for dim, (comm, name) in enumerate(zip(comms, names)):
        # The row of the mesh along `dim` through this rank: the dimension's members in order.
        rows = mesh.movedim(dim, -1).reshape(-1, shape[dim])
        row = rows[(rows == rank).any(dim=1)][0].tolist()
        pg = _process_group(comm, name, row)
        if world_pg is None:
            world_pg = pg
    c10d.GroupMember.WORLD = world_pg

    dm = dist.DeviceMesh(comms[0].get_device().type, mesh, mesh_dim_names=names,
                         _init_backend=False, _rank=rank)
    dm._dim_group_names = list(names)
    return dm


def _create_torchcomm_process_group(comm, group_name, backend_str=BACKEND_NAME,
                                    global_ranks_mapping=None, prefix_store=None):
    """torchcomms' helper: `comm` as a torch process group registered as `group_name`.

    global_ranks_mapping: {global rank: group rank} (default: the identity, a group of all
    ranks). prefix_store: the store the group keeps for torch (dist.HashStore() if none); the
    comm needs no rendezvous. backend_str is accepted for torchcomms' signature; commx's groups
    report BACKEND_NAME."""
    if global_ranks_mapping is None:
        global_ranks = range(comm.get_size())
    else:
        by_group_rank = sorted(global_ranks_mapping.items(), key=lambda kv: kv[1])
        if [g for _, g in by_group_rank] != list(range(comm.get_size())):
            raise commx.InvalidArgumentError(
                f"InvalidArgument: [comm '{comm.get_name()}' rank {comm.get_rank()}] "
                f"_create_torchcomm_process_group: global_ranks_mapping {global_ranks_mapping} "
                f"must map onto group ranks 0..{comm.get_size() - 1} once each")
        global_ranks = [g for g, _ in by_group_rank]
    return _process_group(comm, group_name, global_ranks, store=prefix_store)


def _flatten_with_comm(mesh, mesh_dim_name, comm, global_ranks, layout):
    """torchcomms' helper: registers `comm` (over `global_ranks`, in that order) as the
    flattened dimension `mesh_dim_name` of `mesh`, whose layout is `layout` (a torch
    _MeshLayout of the dimensions it merges), and returns that 1-D DeviceMesh."""
    if len(global_ranks) != comm.get_size():
        raise commx.InvalidArgumentError(
            f"InvalidArgument: [comm '{comm.get_name()}' rank {comm.get_rank()}] "
            f"_flatten_with_comm('{mesh_dim_name}'): {len(global_ranks)} global ranks for a comm "
            f"of {comm.get_size()}")
    _process_group(comm, mesh_dim_name, list(global_ranks))
    if hasattr(layout, "coalesce"):
        flat_layout = layout.coalesce()
    else:  # torch >= 2.13: collapse(), and _MeshLayout coalesces flat layouts itself
        from torch.distributed._mesh_layout import _MeshLayout
        flat_layout = _MeshLayout([layout.collapse()])
    root = mesh._get_root_mesh()
    flat = dist.DeviceMesh(comm.get_device().type, mesh_dim_names=(mesh_dim_name,),
                           _init_backend=False, _rank=comm.get_rank(), _layout=flat_layout,
                           _rank_map=root._rank_map, _root_mesh=root)
    flat._dim_group_names = [mesh_dim_name]
    root._flatten_mapping[mesh_dim_name] = flat
    return flat
