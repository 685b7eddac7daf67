#!/usr/bin/env python3
"""PyTorch SymmetricMemory one-shot / two-shot all-reduce timing (no multicast), for reference
beside commx-bench's GPU sweep. Layer: tools. Usage: symm_mem_bench.py --ranks 2 --json out.json
Same method as that sweep: median of batches of back-to-back calls, eager and graph."""
import argparse, json, os, sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch_timing import size_arg, sizes


def worker(rank, args, port):
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks, device_id=torch.device("cuda", rank))
    import torch.distributed._symmetric_memory as symm_mem
    group = dist.group.WORLD.group_name
    rows = []
    stream = torch.cuda.Stream()
    for dtype_name in args.dtypes.split(","):
        dtype = {"bf16": torch.bfloat16, "f32": torch.float32}[dtype_name]
        es = torch.tensor([], dtype=dtype).element_size()
        for nbytes in sizes(args.min, args.max, args.factor):
            n = max(nbytes // es, 16 // es)
            n = (n + 15) // 16 * 16  # the kernels want 16-byte multiples
            try:
                buf = symm_mem.empty(n, dtype=dtype, device=f"cuda:{rank}")
                symm_mem.rendezvous(buf, group)
                pristine = (torch.arange(n, device=f"cuda:{rank}", dtype=torch.float32) % 17 + 1 + rank).to(dtype) * 1e-12
                for algo in ("one_shot", "two_shot"):
                    def call():
                        if algo == "one_shot":
                            torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group)
                        else:
                            torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group)
                    # correctness
                    buf.copy_(pristine * 1e12)
                    ref = buf.float().clone()
                    dist.all_reduce(ref)
                    if algo == "one_shot":
                        out = torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group).float()
                    else:
                        torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group)
                        out = buf.float()
                    wrong = int(((out - ref).abs() > 1e-2 * ref.abs() + 1e-6).sum().item())
                    batch = 5 if nbytes >= (64 << 20) else (10 if nbytes >= (1 << 20) else 20)
                    for mode in ("eager", "graph"):
                        with torch.cuda.stream(stream):
                            graph = None
                            if mode == "graph":
                                call()
                                torch.cuda.synchronize()
                                graph = torch.cuda.CUDAGraph()
                                with torch.cuda.graph(graph, stream=stream):
                                    for _ in range(batch):
                                        call()
                            samples = []
                            for rep in range(-1, args.reps):
                                buf.copy_(pristine)
                                torch.cuda.synchronize()
                                dist.barrier()
                                e0 = torch.cuda.Event(enable_timing=True)
                                e1 = torch.cuda.Event(enable_timing=True)
                                e0.record()
                                if graph is not None:
                                    graph.replay()
                                else:
                                    for _ in range(batch):
                                        call()
                                e1.record()
                                e1.synchronize()
                                if rep >= 0:
                                    samples.append(e0.elapsed_time(e1) * 1000 / batch)
                            samples.sort()
                            us = samples[len(samples) // 2]
                            bw = n * es / (us * 1e-6) / 1e9
                            row = dict(backend="symm_mem_" + algo, op="all_reduce", dtype=dtype_name,
                                       mode=mode, bytes=n * es, time_us=us, algbw_gbps=bw,
                                       busbw_gbps=bw * 2 * (args.ranks - 1) / args.ranks, wrong=wrong)
                            rows.append(row)
                            if rank == 0:
                                print(f"{row['backend']:18s} {dtype_name} {mode:5s} {n*es:12d} {us:10.2f} us busbw {row['busbw_gbps']:8.2f} wrong {wrong}", flush=True)
                del buf
            except Exception as e:  # noqa: BLE001 - report and go on with the next size
                if rank == 0:
                    print(f"symm_mem {dtype_name} {nbytes}: {type(e).__name__}: {e}", flush=True)
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(0), "ranks": args.ranks, "rows": rows}, f, indent=1)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--min", type=size_arg, default=8)
    p.add_argument("--max", type=size_arg, default=256 << 20)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--factor", type=int, default=2)
    p.add_argument("--json", default="symm_mem.json")
    args = p.parse_args()
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
