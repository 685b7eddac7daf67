#!/usr/bin/env python3
"""Kernel timeline of back-to-back eager all_reduce from Python (commx cuda backend), per rank,
from torch.profiler (CUPTI): each commx kernel's start (relative to the first) and duration, to
tell a kernel that spins from host gaps. Experiment, not a benchmark.

  python3 bench/experiments/stall_profile.py --algo ll128 --bytes 1M --ops 30 [--skew-us 0]
"""
import argparse
import os
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, a, port):
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks,
                            device_id=dev)
    import commx
    comm = commx.new_comm("cuda", dev, name="stall", store=dist.distributed_c10d._get_default_store(),
                          rank=rank, size=a.ranks)
    n = a.bytes // 2
    x = torch.ones(n, dtype=torch.bfloat16, device=dev)
    hints = {"algorithm": a.algo} if a.algo != "default" else None
    stream = torch.cuda.Stream() if a.side_stream else torch.cuda.current_stream()
    for _ in range(5):
        comm.all_reduce(x, commx.ReduceOp.SUM, False, hints=hints)
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        with torch.cuda.stream(stream):
            for _ in range(a.ops):
                if rank == a.ranks - 1 and a.skew_us:
                    end = time.perf_counter() + a.skew_us * 1e-6
                    while time.perf_counter() < end:
                        pass
                elif a.gap_us:
                    end = time.perf_counter() + a.gap_us * 1e-6
                    while time.perf_counter() < end:
                        pass
                comm.all_reduce(x, commx.ReduceOp.SUM, False, hints=hints)
        torch.cuda.synchronize()
    ev = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    ev.sort(key=lambda e: e.time_range.start)
    t0 = ev[0].time_range.start if ev else 0
    lines = [f"rank {rank} algo {a.algo} bytes {a.bytes} skew {a.skew_us} gap {a.gap_us} side {a.side_stream}"]
    for e in ev:
        lines.append(f"  {e.time_range.start - t0:10.1f} {e.time_range.elapsed_us():9.1f} us {e.name[:60]}")
    durs = [e.time_range.elapsed_us() for e in ev if "kernel" in e.name.lower()]
    if durs:
        durs.sort()
        lines.append(f"  rank {rank}: {len(durs)} kernels, median {durs[len(durs)//2]:.1f} us, max {durs[-1]:.1f} us, "
                     f"span {(ev[-1].time_range.end - t0):.1f} us")
    time.sleep(0.2 * rank)
    print("\n".join(lines if a.verbose else lines[:1] + lines[-1:]), flush=True)
    dist.barrier()
    comm.finalize()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--algo", default="default")
    p.add_argument("--bytes", type=lambda s: int(float(s[:-1]) * {"K": 1024, "M": 1 << 20}[s[-1]]) if s[-1] in "KM" else int(s), default=1 << 20)
    p.add_argument("--ops", type=int, default=30)
    p.add_argument("--skew-us", type=float, default=0)
    p.add_argument("--gap-us", type=float, default=0)
    p.add_argument("--side-stream", action="store_true")
    p.add_argument("--verbose", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    mp.spawn(worker, args=(a, 29700 + os.getpid() % 1000), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    main()
