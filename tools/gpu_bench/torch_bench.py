#!/usr/bin/env python3
"""all_reduce through PyTorch, the way training and serving loops call it: commx's Python API
(backend "cuda"), torch.distributed on backend "commx", torch's NCCL process group and torch
symm_mem, in the same processes on the same tensors. Layer: tools.

Modes: eager back-to-back from Python (GPU time per op from CUDA events, host time per call),
eager with one rank spinning SKEW us on the host before each op (--skews), and graphs captured
with torch.cuda.graph's default settings, replayed. Every client's result is checked against the
exact sum (integer-valued inputs); the FP8 clients (cuda+fp8, cuda+fp8x2: the per-op
low-precision hint, for --clients) against FP8_ERROR_BOUND, with their relative error in the row.
JSON rows as commx-bench's GPU sweep writes them (backend, op, dtype, mode, bytes, time_us,
busbw_gbps, wrong, error) plus client, skew_us and host_us.

  python3 tools/gpu_bench/torch_bench.py --ranks 2 --json out.json --md out.md
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch_timing import capture, ready_all, size_arg, sizes, time_replays

CLIENTS = {  # backend name in the rows -> how it is called
    "cuda": "commx Python API",
    "cuda+fp8": "commx Python API, FP8 per-op hint",
    "cuda+fp8x2": "commx Python API, FP8 two-term per-op hint",
    "commx": "torch.distributed backend commx",
    "nccl": "torch.distributed backend nccl",
    "symm_mem": "torch symm_mem one_shot/two_shot",
}
DTYPES = {"bf16": torch.bfloat16, "f32": torch.float32}
# FP8 clients are lossy: their result counts as wrong past this relative L2 error (two E4M3
# roundings, each within 1/16 of the value; a broken kernel is off by O(1)).
FP8_ERROR_BOUND = 0.125


def spin_us(us):
    if us > 0:
        end = time.perf_counter() + us * 1e-6
        while time.perf_counter() < end:
            pass


def check(name, result, ref):
    """(wrong, error) of a client's result: exact clients count the values that differ from the
    sum; FP8 clients report the relative L2 error and count as wrong past FP8_ERROR_BOUND."""
    if "+fp8" in name:
        diff = torch.linalg.vector_norm(result.float() - ref)
        err = float(diff / torch.linalg.vector_norm(ref).clamp_min(1e-30))
        return int(err > FP8_ERROR_BOUND), err
    return int((result.float() != ref).sum().item()), 0.0


def inputs(rank, n, dtype, dev):
    """Rank r's input: integers in [-4, 4] (sums of up to 8 ranks are exact in bf16)."""
    g = torch.Generator(device=dev).manual_seed(1000003 * (rank + 1) + n)
    return torch.randint(-4, 5, (n,), generator=g, device=dev).to(dtype)


class Clients:
    """The all_reduce callables of one rank, for one buffer."""

    def __init__(self, args, rank, dev):
        self.args, self.rank, self.dev = args, rank, dev
        self.names = args.clients.split(",")
        self.comm = None
        self.pg = None
        if any(c == "cuda" or c.startswith(("cuda:", "cuda+")) for c in self.names):
            import commx
            store = dist.distributed_c10d._get_default_store()
            self.comm = commx.new_comm("cuda", dev, name="torch_bench", store=store, rank=rank,
                                       size=args.ranks)
            self.SUM = commx.ReduceOp.SUM
        if "commx" in self.names:
            import commx.torch  # noqa: F401 - registers the backend
            self.pg = dist.new_group(backend="commx")
        self.group_name = dist.group.WORLD.group_name

    def make(self, name, buf):
        """(callable, result tensor) of client `name` over `buf`, or None where it cannot run."""
        if name == "nccl":
            return (lambda: dist.all_reduce(buf)), buf
        if name == "commx":
            return (lambda: dist.all_reduce(buf, group=self.pg)), buf
        if name == "cuda" or name.startswith("cuda:"):
            hints = {"algorithm": name.split(":", 1)[1]} if ":" in name else None
            return (lambda: self.comm.all_reduce(buf, self.SUM, False, hints=hints)), buf
        if name in ("cuda+fp8", "cuda+fp8x2"):
            hints = {"low_precision": "fp8e4m3", "low_precision_min_bytes": "0",
                     "low_precision_gather": name.split("+", 1)[1]}
            return (lambda: self.comm.all_reduce(buf, self.SUM, False, hints=hints)), buf
        if name == "symm_mem":
            return self.symm(buf)
        raise ValueError(f"unknown client {name}")

    def symm(self, buf):
        import torch.distributed._symmetric_memory as symm_mem
        nbytes = buf.numel() * buf.element_size()
        if nbytes % 16:
            return None  # its kernels take 16-byte multiples
        sbuf = symm_mem.empty(buf.numel(), dtype=buf.dtype, device=self.dev)
        symm_mem.rendezvous(sbuf, self.group_name)
        sbuf.copy_(buf)
        self._symm_src = (buf, sbuf)
        if nbytes <= self.args.symm_one_shot_max and hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
            out = torch.empty_like(buf)
            return (lambda: torch.ops.symm_mem.one_shot_all_reduce_out(sbuf, "sum", self.group_name, out)), out
        return (lambda: torch.ops.symm_mem.two_shot_all_reduce_(sbuf, "sum", self.group_name)), sbuf


def time_eager(call, reset, ops, skew, rank, world):
    reset()
    ready_all()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    late = rank == world - 1
    e0.record()
    t0 = time.perf_counter()
    for _ in range(ops):
        if late:
            spin_us(skew)
        call()
    t1 = time.perf_counter()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / ops, (t1 - t0) * 1e6 / ops


def capture_ops(call, graph_ops):
    g, _ = capture(lambda: [call() for _ in range(graph_ops)])
    return g


def time_graph(g, reset, graph_ops, replays):
    reset()
    ready_all()
    return time_replays(g, replays) / graph_ops


def worker(rank, args, port):
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    # No device_id: a group bound to a device makes new_group() ask every backend of the new
    # group about splitting on that device, which the plugin-backend path of torch 2.11 fails.
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=args.ranks)
    clients = Clients(args, rank, dev)
    world = args.ranks
    rows = []
    skews = [0.0] + [float(s) for s in args.skews.split(",") if s]
    for dname in args.dtypes.split(","):
        dtype = DTYPES[dname]
        es = torch.tensor([], dtype=dtype).element_size()
        for nbytes in sizes(args.min, args.max, args.factor):
            n = max(nbytes // es, 1)
            pristine = inputs(rank, n, dtype, dev)
            ref = sum(inputs(r, n, torch.float32, dev) for r in range(world))
            buf = pristine.clone()
            # Ops per timed batch: args.ops up to 16 MiB, fewer (at least 5) above, so that a
            # batch stays long enough for its start (the first call's host time and the ranks'
            # skew after the barrier, while the GPU waits) to weigh little.
            ops = args.ops if nbytes <= (16 << 20) else max(args.ops * (16 << 20) // nbytes, 5)
            for name in clients.names:
                made = clients.make(name, buf)
                if made is None:
                    continue
                call, result = made
                src = clients._symm_src[1] if name == "symm_mem" else buf

                def reset(src=src):
                    src.copy_(pristine)
                reset()
                call()
                torch.cuda.synchronize()
                wrong, error = check(name, result, ref)
                base = dict(backend=name, client=CLIENTS.get(name.split(":")[0], name), op="all_reduce",
                            dtype=dname, bytes=n * es, wrong=wrong, error=error)
                for mode in args.modes.split(","):
                    todo = [(s, None) for s in skews if s == 0 or nbytes <= args.skew_max] if mode == "eager" else [(0.0, None)]
                    for skew, _ in todo:
                        if mode == "eager":
                            samples = [time_eager(call, reset, ops, skew, rank, world) for _ in range(args.reps + 1)][1:]
                            us = statistics.median(s[0] for s in samples)
                            host = statistics.median(s[1] for s in samples)
                        else:
                            try:
                                g = capture_ops(call, args.graph_ops)
                            except Exception as e:  # noqa: BLE001 - a client that cannot capture is a result
                                if rank == 0:
                                    print(f"{name} {dname} {nbytes}: capture failed: {e}", flush=True)
                                continue
                            replays = max(1, ops // args.graph_ops)
                            samples = [time_graph(g, reset, args.graph_ops, replays) for _ in range(args.reps + 1)][1:]
                            us, host = statistics.median(samples), None
                            # The replayed graph must still compute the right sum.
                            reset()
                            ready_all()
                            one = capture_ops(call, 1)
                            reset()
                            ready_all()
                            one.replay()
                            torch.cuda.synchronize()
                            base["wrong"] = max(base["wrong"], check(name, result, ref)[0])
                            del g, one
                        bw = n * es / (us * 1e-6) / 1e9
                        row = dict(base, mode=mode, skew_us=skew, time_us=us, host_us=host,
                                   algbw_gbps=bw, busbw_gbps=bw * 2 * (world - 1) / world)
                        rows.append(row)
                        if rank == 0:
                            print(f"{name:10s} {dname:4s} {mode:5s} skew {skew:5.0f} {n*es:11d} B "
                                  f"{us:10.2f} us host {host or 0:7.2f} us busbw {row['busbw_gbps']:7.2f} "
                                  f"wrong {row['wrong']}" + (f" error {error:.2e}" if error else ""), flush=True)
            del buf
    if rank == 0:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(dev), "ranks": world,
                       "torch": torch.__version__, "rows": rows}, f, indent=1)
        if args.md:
            write_md(rows, args, torch.cuda.get_device_name(dev))
    dist.barrier()
    dist.destroy_process_group()


def write_md(rows, args, device):
    """One table per (dtype, mode, skew): each client's time and its ratio to NCCL's."""
    names = args.clients.split(",")
    keys = sorted({(r["dtype"], r["mode"], r["skew_us"]) for r in rows}, key=lambda k: (k[0], k[1] != "eager", k[2]))
    lines = [f"all_reduce through PyTorch on {device} x{args.ranks}; us per op (GPU time; eager also "
             f"host us per call); ratio = client / nccl. Command: python3 tools/gpu_bench/torch_bench.py "
             + " ".join(sys.argv[1:]), ""]
    for dt, mode, skew in keys:
        sel = [r for r in rows if (r["dtype"], r["mode"], r["skew_us"]) == (dt, mode, skew)]
        lines += [f"### {dt} {mode}" + (f", rank {args.ranks - 1} {skew:g} us late per op" if skew else ""), ""]
        head = "| bytes | " + " | ".join(names) + " | " + " | ".join(f"{c}/nccl" for c in names if c != "nccl") + " | wrong |"
        lines += [head, "|" + "---:|" * (head.count("|") - 1)]
        for b in sorted({r["bytes"] for r in sel}):
            by = {r["backend"]: r for r in sel if r["bytes"] == b}
            nccl = by.get("nccl")
            cells = []
            for c in names:
                r = by.get(c)
                cells.append("-" if r is None else f"{r['time_us']:.2f}" + (f" ({r['host_us']:.1f})" if r.get("host_us") else ""))
            ratios = [("-" if c not in by or not nccl else f"{by[c]['time_us'] / nccl['time_us']:.2f}") for c in names if c != "nccl"]
            wrong = sum(r["wrong"] for r in by.values())
            lines.append(f"| {b} | " + " | ".join(cells) + " | " + " | ".join(ratios) + f" | {wrong} |")
        lines.append("")
    with open(args.md, "w") as f:
        f.write("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--clients", default="nccl,cuda,commx,symm_mem",
                   help="nccl, cuda (commx Python API; cuda:ALGO forces an algorithm), cuda+fp8, cuda+fp8x2 "
                        "(FP8 per-op hint), commx, symm_mem")
    p.add_argument("--dtypes", default="bf16,f32")
    p.add_argument("--modes", default="eager,graph")
    p.add_argument("--skews", default="5,20,100", help="us the last rank spins before each eager op")
    p.add_argument("--skew-max", type=size_arg, default=64 << 20, help="largest size run with skew")
    p.add_argument("--min", type=size_arg, default=8)
    p.add_argument("--max", type=size_arg, default=256 << 20)
    p.add_argument("--factor", type=int, default=4)
    p.add_argument("--ops", type=int, default=100, help="eager ops per timed batch")
    p.add_argument("--graph-ops", type=int, default=10, help="ops captured per graph")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--symm-one-shot-max", type=size_arg, default=256 << 10,
                   help="symm_mem: one_shot up to this size, two_shot above")
    p.add_argument("--json", default="torch_bench.json")
    p.add_argument("--md", default="")
    args = p.parse_args()
    port = 29500 + os.getpid() % 2000
    mp.spawn(worker, args=(args, port), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
