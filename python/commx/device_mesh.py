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

BACKEND_NAME = "commx_comm"  # the backend name torch reports for these groups

__all__ = ["init_device_mesh"]


def _process_group(comm, group_name, global_ranks):
    """A ProcessGroup over `comm`, registered with c10d as `group_name`; global_ranks: the
    global rank of each group rank."""
    store = dist.HashStore()  # never used for rendezvous: the comm exists already
    pg = dist.ProcessGroup(store, comm.get_rank(), comm.get_size())
    device = comm.get_device()
    pg._register_backend(device, dist.ProcessGroup.BackendType.CUSTOM, BackendWrapper(comm))
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
