#!/usr/bin/env python3
# The quick start of quickstart.py on CPU tensors: the same program with device "cpu", the
# backend "cpu", and no CUDA stream to synchronise.
# Run: torchrun --nproc_per_node=2 quickstart_cpu.py
import torch
from commx import new_comm, ReduceOp

def main():
    device = torch.device("cpu")
    torchcomm = new_comm("cpu", device, name="main_comm")

    rank = torchcomm.get_rank()
    world_size = torchcomm.get_size()

    target_device = torchcomm.get_device()
    print(f"Rank {rank}/{world_size}: Running on device {target_device}")

    tensor = torch.full(
        (1024,),
        float(rank + 1),
        dtype=torch.float32,
        device=target_device
    )

    print(f"Rank {rank}: Before AllReduce: {tensor[0].item()}")

    # Synchronous AllReduce: on CPU it has completed when the call returns.
    torchcomm.all_reduce(tensor, ReduceOp.SUM, async_op=False)

    print(f"Rank {rank}: After AllReduce: {tensor[0].item()}")
    assert tensor[0].item() == world_size * (world_size + 1) / 2

    # The asynchronous variant of the README.
    work = torchcomm.all_reduce(tensor, ReduceOp.SUM, async_op=True)
    work.wait()
    assert tensor[0].item() == world_size * (world_size * (world_size + 1) / 2)
    print("quickstart ok", rank)

    torchcomm.finalize()

if __name__ == "__main__":
    main()
