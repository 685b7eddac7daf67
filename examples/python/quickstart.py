#!/usr/bin/env python3
# example.py -- torchcomms' quick start (README) with only the import and the backend name changed
# (torchcomms -> commx, "nccl" -> "cuda"), plus asserts and the README's asynchronous variant at the
# end. Run on GPUs: torchrun --nproc_per_node=2 quickstart.py
import torch
from commx import new_comm, ReduceOp

def main():
    # Initialize TorchComm with NCCLX backend
    device = torch.device("cuda")
    torchcomm = new_comm("cuda", device, name="main_comm")

    # Get rank and world size
    rank = torchcomm.get_rank()
    world_size = torchcomm.get_size()

    # Calculate device ID
    target_device = torchcomm.get_device()
    print(f"Rank {rank}/{world_size}: Running on device {target_device.index}")

    # Create a tensor with rank-specific data
    tensor = torch.full(
        (1024,),
        float(rank + 1),
        dtype=torch.float32,
        device=target_device
    )

    print(f"Rank {rank}: Before AllReduce: {tensor[0].item()}")

    # Perform synchronous AllReduce (sum across all ranks)
    torchcomm.all_reduce(tensor, ReduceOp.SUM, async_op=False)

    # Synchronize CUDA stream
    torch.cuda.current_stream().synchronize()

    print(f"Rank {rank}: After AllReduce: {tensor[0].item()}")
    assert tensor[0].item() == world_size * (world_size + 1) / 2

    # The README's asynchronous variant: wait() orders the current stream after the op.
    work = torchcomm.all_reduce(tensor, ReduceOp.SUM, async_op=True)
    print(f"Rank {rank}: Doing other work while AllReduce is in progress...")
    work.wait()
    assert tensor[0].item() == world_size * (world_size * (world_size + 1) / 2)
    print("quickstart ok", rank)

    # Cleanup
    torchcomm.finalize()

if __name__ == "__main__":
    main()
