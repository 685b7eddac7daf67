#!/usr/bin/env python3
"""Tensor-parallel decode step of a Llama-style transformer, end to end, with its all_reduces
provided by torch's NCCL, torch symm_mem or commx: per-token latency and the share of it spent
communicating. Layer: tools.

The step (one new token for each of `batch` sequences), per layer as Megatron-style tensor
parallelism splits it over TP ranks: RMSNorm, QKV projection (heads split), attention over a KV
cache of `--context` positions, output projection, all_reduce, residual; RMSNorm, gate/up
projection (columns split), SiLU-and-multiply, down projection, all_reduce, residual. Random bf16
weights (hidden 4096, intermediate 11008, 32 heads, 32 layers: a 7B model), no rotary or cache
update (they do not change the communication). The step is captured in a CUDA graph, as serving
engines do, once per batch size and provider, and replayed; "none" skips the all_reduces (compute
only), so comm share = (step - none) / step. Each provider's final hidden state is checked
against NCCL's.

  python3 tools/gpu_bench/decode_bench.py --ranks 2 --json decode.json --md decode.md
"""
import argparse
import json
import os
import statistics
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch_timing import capture, ready_all, time_replays


class Model:
    def __init__(self, a, tp, dev):
        h, i, heads = a.hidden, a.intermediate, a.heads
        assert heads % tp == 0 and i % tp == 0
        self.a, self.tp, self.dev = a, tp, dev
        self.nh, self.hd = heads // tp, h // heads
        g = torch.Generator(device=dev).manual_seed(1234 + dist.get_rank())
        w = lambda *s: (torch.randn(*s, generator=g, device=dev, dtype=torch.bfloat16) * s[0] ** -0.5)  # noqa: E731
        self.layers = [dict(qkv=w(h, 3 * h // tp), o=w(h // tp, h), gate_up=w(h, 2 * i // tp),
                            down=w(i // tp, h), n1=torch.ones(h, device=dev, dtype=torch.bfloat16),
                            n2=torch.ones(h, device=dev, dtype=torch.bfloat16))
                       for _ in range(a.layers)]
        self.cache = {}

    def kv(self, batch):
        if batch not in self.cache:
            g = torch.Generator(device=self.dev).manual_seed(99 + batch)
            shape = (self.a.layers, 2, batch, self.nh, self.a.context, self.hd)
            self.cache[batch] = torch.randn(*shape, generator=g, device=self.dev, dtype=torch.bfloat16)
        return self.cache[batch]

    def step(self, x, all_reduce):
        """x: (batch, hidden), the same on every rank; returns the next hidden state."""
        kv = self.kv(x.shape[0])
        for li, L in enumerate(self.layers):
            hcur = F.rms_norm(x, (x.shape[-1],), L["n1"])
            q, k, v = (hcur @ L["qkv"]).view(x.shape[0], 3, self.nh, 1, self.hd).unbind(1)
            att = F.scaled_dot_product_attention(q, kv[li, 0], kv[li, 1])
            out = att.reshape(x.shape[0], -1) @ L["o"]
            all_reduce(out)
            x = x + out
            hcur = F.rms_norm(x, (x.shape[-1],), L["n2"])
            gate, up = (hcur @ L["gate_up"]).chunk(2, dim=-1)
            out = (F.silu(gate) * up) @ L["down"]
            all_reduce(out)
            x = x + out
        return x


class Providers:
    def __init__(self, names, rank, world, dev):
        self.names, self.dev = names, dev
        self.group = dist.group.WORLD.group_name
        self.comm = None
        if "commx" in names:
            import commx
            self.comm = commx.new_comm("cuda", dev, name="decode", store=dist.distributed_c10d._get_default_store(),
                                       rank=rank, size=world)
            self.SUM = commx.ReduceOp.SUM
        self.symm = {}

    def symm_buf(self, numel):
        import torch.distributed._symmetric_memory as symm_mem
        if numel not in self.symm:
            b = symm_mem.empty(numel, dtype=torch.bfloat16, device=self.dev)
            symm_mem.rendezvous(b, self.group)
            self.symm[numel] = b
        return self.symm[numel]

    def get(self, name):
        if name == "none":
            return lambda t: None
        if name == "nccl":
            return lambda t: dist.all_reduce(t)
        if name == "commx":
            return lambda t: self.comm.all_reduce(t, self.SUM, False)
        if name == "symm_mem":
            def symm(t):
                buf = self.symm_buf(t.numel())
                buf.copy_(t.view(-1))  # into the registered buffer, as vLLM's custom all-reduce does
                if hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out"):
                    torch.ops.symm_mem.one_shot_all_reduce_out(buf, "sum", self.group, t.view(-1))
                else:
                    t.view(-1).copy_(torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", self.group))
            return symm
        raise ValueError(name)


def time_step(model, x0, ar, graph_steps, reps):
    g, y = capture(lambda: model.step(x0, ar), warmup=2)
    samples = []
    for _ in range(reps + 1):
        ready_all()
        samples.append(time_replays(g, graph_steps))
    g.replay()
    torch.cuda.synchronize()
    out = y.float().clone()
    del g
    return statistics.median(samples[1:]), out


def worker(rank, a, port):
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    names = a.providers.split(",")
    prov = Providers(names, rank, a.ranks, dev)
    model = Model(a, a.ranks, dev)
    rows = []
    for batch in [int(b) for b in a.batches.split(",")]:
        g = torch.Generator(device=dev).manual_seed(7 + batch)
        x0 = torch.randn(batch, a.hidden, generator=g, device=dev, dtype=torch.bfloat16)
        res = {}
        for name in names:
            us, out = time_step(model, x0, prov.get(name), a.graph_steps, a.reps)
            res[name] = (us, out)
        ref = res.get("nccl", (None, None))[1]
        none_us = res["none"][0] if "none" in res else None
        for name, (us, out) in res.items():
            err = None if ref is None or name == "none" else float(((out - ref).norm() / ref.norm()).item())
            rows.append(dict(provider=name, tp=a.ranks, batch=batch, step_us=us,
                             token_us=us, comm_share=None if none_us is None or name == "none" else (us - none_us) / us,
                             rel_err_vs_nccl=err))
            if rank == 0:
                share = rows[-1]["comm_share"]
                print(f"tp {a.ranks} batch {batch:3d} {name:9s} step {us:9.1f} us"
                      + (f" comm {100 * share:5.1f}%" if share is not None else "")
                      + (f" err {err:.2e}" if err is not None else ""), flush=True)
    if rank == 0:
        with open(a.json, "w") as f:
            json.dump(dict(device=torch.cuda.get_device_name(dev), tp=a.ranks, torch=torch.__version__,
                           model=dict(hidden=a.hidden, intermediate=a.intermediate, heads=a.heads,
                                      layers=a.layers, context=a.context), rows=rows), f, indent=1)
        if a.md:
            write_md(rows, a, torch.cuda.get_device_name(dev))
    dist.barrier()
    if prov.comm is not None:
        prov.comm.finalize()
    dist.destroy_process_group()


def write_md(rows, a, device):
    names = [n for n in a.providers.split(",")]
    lines = [f"Decode step, TP={a.ranks} on {device}: hidden {a.hidden}, {a.layers} layers, context "
             f"{a.context}, bf16, CUDA graph; us per step (= per token of each sequence); comm % = "
             f"share of the step over the compute-only step. Command: python3 tools/gpu_bench/decode_bench.py "
             + " ".join(sys.argv[1:]), ""]
    head = "| batch | " + " | ".join(names) + " | " + " | ".join(f"{n} comm %" for n in names if n != "none") \
        + " | commx vs nccl | commx vs symm_mem |"
    lines += [head, "|" + "---:|" * (head.count("|") - 1)]
    for b in sorted({r["batch"] for r in rows}):
        by = {r["provider"]: r for r in rows if r["batch"] == b}
        cells = [f"{by[n]['step_us']:.1f}" if n in by else "-" for n in names]
        shares = [f"{100 * by[n]['comm_share']:.1f}" if n in by and by[n]["comm_share"] is not None else "-"
                  for n in names if n != "none"]

        def gain(other):
            if "commx" not in by or other not in by:
                return "-"
            return f"{100 * (1 - by['commx']['step_us'] / by[other]['step_us']):+.1f}% faster"
        lines.append(f"| {b} | " + " | ".join(cells) + " | " + " | ".join(shares) + f" | {gain('nccl')} | {gain('symm_mem')} |")
    with open(a.md, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="tensor-parallel degree (one GPU each)")
    p.add_argument("--providers", default="none,nccl,symm_mem,commx")
    p.add_argument("--batches", default="1,4,16,64")
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--intermediate", type=int, default=11008)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--graph-steps", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default="decode.json")
    p.add_argument("--md", default="")
    a = p.parse_args()
    mp.spawn(worker, args=(a, 29600 + os.getpid() % 1000), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
