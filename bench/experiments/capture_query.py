#!/usr/bin/env python3
"""Does querying an eager op's CUDA event while torch captures a graph invalidate the capture?
(What a dropped Work's clean-up did.) One GPU; prints the outcome per capture_error_mode."""
import torch

x = torch.ones(1024, device="cuda")
for mode in ("global", "thread_local", "relaxed"):
    ev = torch.cuda.Event()
    x.add_(1)
    ev.record()  # an eager op's completion event, recorded before the capture
    g = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(g, capture_error_mode=mode):
            x.mul_(2)
            ev.query()  # cudaEventQuery on the capturing thread
            x.mul_(2)
        print(f"{mode}: captured")
    except Exception as e:  # noqa: BLE001 - the outcome is the result
        print(f"{mode}: capture failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    torch.cuda.synchronize()
