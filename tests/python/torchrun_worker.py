"""Run by test_torch.py under `python -m torch.distributed.run --nproc-per-node 2`: the "commx"
process group on the store torchrun hosts, and a commx comm bootstrapped from torchrun's
variables alone. Layer: tests (Python)."""

import os

import torch
import torch.distributed as dist

import commx

backend = os.environ.get("COMMX_TEST_CPU_BACKEND", "cpu")
if backend == "pystore":
    import store_backend
    store_backend.register()
import commx.torch  # noqa: E402,F401

commx.torch.set_device_backend("cpu", backend)
dist.init_process_group("commx")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t)
assert t.item() == size * (size + 1) / 2, t
# A plain commx comm from the environment (MASTER_ADDR/MASTER_PORT: torchrun's store).
comm = commx.new_comm(backend, "cpu", "from_env")
u = torch.tensor([float(rank)])
comm.all_reduce(u, commx.ReduceOp.MAX)
assert u.item() == size - 1
comm.finalize()
dist.destroy_process_group()
print("commx torchrun ok", rank)
