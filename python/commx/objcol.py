"""Collectives of picklable Python objects over a commx comm (torchcomms' `objcol`): each object
travels as its serialized bytes (torch.save; torch.load with weights_only on receipt), padded to
the largest of the ranks for the gathering ones. Blocking; needs torch. Layer: Python (over
commx.Comm)."""

import io

import torch

__all__ = ["all_gather_object", "broadcast_object_list", "gather_object", "recv_object_list",
           "scatter_object_list", "send_object_list"]


def _to_bytes(obj):
    f = io.BytesIO()
    torch.save(obj, f)
    return torch.frombuffer(bytearray(f.getvalue()), dtype=torch.uint8)


def _from_bytes(data, weights_only):
    return torch.load(io.BytesIO(data.numpy().tobytes()), weights_only=weights_only)


def _sizes(comm, n, timeout):
    """Every rank's byte count."""
    sizes = torch.zeros(comm.get_size(), dtype=torch.int64)
    comm.all_gather_single(sizes, torch.tensor([n], dtype=torch.int64), timeout=timeout)
    return sizes.tolist()


def _padded(data, width):
    out = torch.zeros(width, dtype=torch.uint8)
    out[:data.numel()] = data
    return out


def all_gather_object(comm, object_list, obj, timeout=None, weights_only=True):
    """object_list[r] = the object of rank r, on every rank (object_list has comm size items)."""
    data = _to_bytes(obj)
    sizes = _sizes(comm, data.numel(), timeout)
    width = max(sizes)
    out = torch.empty(width * comm.get_size(), dtype=torch.uint8)
    comm.all_gather_single(out, _padded(data, width), timeout=timeout)
    for r, n in enumerate(sizes):
        object_list[r] = _from_bytes(out[r * width:r * width + n], weights_only)


def gather_object(comm, obj, root, object_gather_list=None, timeout=None, weights_only=True):
    """On `root`, object_gather_list[r] = the object of rank r; other ranks pass None."""
    data = _to_bytes(obj)
    sizes = _sizes(comm, data.numel(), timeout)
    width = max(sizes)
    is_root = comm.get_rank() == root
    outs = [torch.empty(width, dtype=torch.uint8) for _ in sizes] if is_root else []
    comm.gather(outs, _padded(data, width), root, timeout=timeout)
    if is_root:
        if object_gather_list is None:
            raise ValueError(f"gather_object: rank {root} is the root and needs "
                             "object_gather_list")
        for r, n in enumerate(sizes):
            object_gather_list[r] = _from_bytes(outs[r][:n], weights_only)


def broadcast_object_list(comm, object_list, root, timeout=None, weights_only=True):
    """The objects of `root`'s object_list replace those of every rank's (lists of equal
    length)."""
    is_root = comm.get_rank() == root
    parts = [_to_bytes(o) for o in object_list] if is_root else []
    sizes = torch.tensor([p.numel() for p in parts] if is_root else [0] * len(object_list),
                         dtype=torch.int64)
    comm.broadcast(sizes, root, timeout=timeout)
    data = torch.cat(parts) if is_root else torch.empty(int(sizes.sum()), dtype=torch.uint8)
    comm.broadcast(data, root, timeout=timeout)
    if not is_root:
        offset = 0
        for i, n in enumerate(sizes.tolist()):
            object_list[i] = _from_bytes(data[offset:offset + n], weights_only)
            offset += n


def scatter_object_list(comm, scatter_object_output_list, scatter_object_input_list, root,
                        timeout=None, weights_only=True):
    """scatter_object_output_list[0] = root's scatter_object_input_list[this rank]."""
    is_root = comm.get_rank() == root
    if is_root:
        parts = [_to_bytes(o) for o in scatter_object_input_list]
        width = torch.tensor([max(p.numel() for p in parts)], dtype=torch.int64)
    else:
        width = torch.zeros(1, dtype=torch.int64)
    comm.broadcast(width, root, timeout=timeout)
    w = int(width.item())
    size_out = torch.zeros(1, dtype=torch.int64)
    sizes_in = [torch.tensor([p.numel()], dtype=torch.int64) for p in parts] if is_root else []
    comm.scatter(size_out, sizes_in, root, timeout=timeout)
    out = torch.empty(w, dtype=torch.uint8)
    comm.scatter(out, [_padded(p, w) for p in parts] if is_root else [], root, timeout=timeout)
    scatter_object_output_list[0] = _from_bytes(out[:int(size_out.item())], weights_only)


def send_object_list(comm, object_list, dst, timeout=None):
    """Sends the objects to `dst`, which calls recv_object_list with a list as long."""
    parts = [_to_bytes(o) for o in object_list]
    comm.send(torch.tensor([p.numel() for p in parts], dtype=torch.int64), dst, timeout=timeout)
    comm.send(torch.cat(parts), dst, timeout=timeout)


def recv_object_list(comm, object_list, src, timeout=None, weights_only=True):
    """Fills object_list with the objects `src` sent with send_object_list."""
    sizes = torch.zeros(len(object_list), dtype=torch.int64)
    comm.recv(sizes, src, timeout=timeout)
    data = torch.empty(int(sizes.sum()), dtype=torch.uint8)
    comm.recv(data, src, timeout=timeout)
    offset = 0
    for i, n in enumerate(sizes.tolist()):
        object_list[i] = _from_bytes(data[offset:offset + n], weights_only)
        offset += n
