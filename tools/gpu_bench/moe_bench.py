#!/usr/bin/env python3
"""An MoE layer step (router -> dispatch -> per-expert MLP -> combine) over expert-parallel
ranks, with its token exchange provided by torch's NCCL, commx's host-split all_to_all_v_single
or commx's device-count dispatch/combine: time per step end to end and for the exchange alone,
eager and CUDA-graph captured. Layer: tools.

Each rank holds `--tokens` tokens (hidden 4096, bf16) and E/ranks experts (a SiLU MLP each, run
as grouped GEMMs over device-resident group offsets). Top-2 routing; the two copies of each
token are sorted by expert, sent to the experts' ranks, transformed, sent back and summed with
the router weights. Providers:
  nccl        torch's all_to_all_single: the per-expert counts are exchanged on the device, then
              read with .tolist() (a host sync), as PyTorch MoE code does; not capturable
  commx_host  the same with commx's all_to_all_v_single (host splits); not capturable
  commx       commx's dispatch/combine on the cuda backend (native kernels): the counts never
              leave the device; eager and graph
  commx_nccl  the same op on commx's nccl backend (its fallback: counts all-gathered and checked
              on the device, max-sized windows through grouped ncclSend/ncclRecv); eager and graph
"comm" times only the exchange (the count exchange, the host read where there is one, dispatch
and combine) on the step's tensors. Every provider's layer output is checked against NCCL's.

  python3 tools/gpu_bench/moe_bench.py --ranks 2 --json moe.json --md moe.md
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


def grouped_mm(a, b, offs):
    """a (M, K) rows grouped by offs (int32 ends), b (G, K, N) -> (M, N); rows past offs[-1]
    are left undefined."""
    if hasattr(torch, "_grouped_mm"):
        return torch._grouped_mm(a, b, offs=offs)
    out = torch.zeros(a.shape[0], b.shape[2], device=a.device, dtype=a.dtype)
    rows = torch.arange(a.shape[0], device=a.device)
    start = torch.zeros((), device=a.device, dtype=offs.dtype)
    for g in range(b.shape[0]):
        mask = ((rows >= start) & (rows < offs[g])).unsqueeze(1)
        out = torch.where(mask, a @ b[g], out)
        start = offs[g]
    return out


class Layer:
    """One rank's part of an MoE layer: the router (replicated) and its local experts."""

    def __init__(self, a, rank, world, dev):
        self.a, self.world, self.dev = a, world, dev
        self.E, self.L = a.experts, a.experts // world
        g = torch.Generator(device=dev).manual_seed(4321)
        self.router = torch.randn(a.hidden, self.E, generator=g, device=dev, dtype=torch.bfloat16) * a.hidden ** -0.5
        g = torch.Generator(device=dev).manual_seed(100 + rank)
        w = lambda *s: torch.randn(*s, generator=g, device=dev, dtype=torch.bfloat16) * s[1] ** -0.5  # noqa: E731
        self.w1 = w(self.L, a.hidden, a.ffn)
        self.w2 = w(self.L, a.ffn, a.hidden)

    def route(self, x):
        """-> (rows sorted by expert, per-expert counts on the device, token of each row, weight
        of each row)."""
        probs = torch.softmax((x @ self.router).float(), dim=-1)
        weight, expert = probs.topk(2, dim=-1)
        expert = expert.view(-1)
        order = torch.argsort(expert, stable=True)
        token = order // 2
        # A histogram that never syncs (bincount reads the maximum on the host): capturable.
        counts = torch.zeros(self.E, device=x.device, dtype=torch.int64)
        counts.scatter_add_(0, expert, torch.ones_like(expert))
        return x[token], counts, token, weight.view(-1)[order].to(x.dtype)

    def experts(self, rows, offs):
        return grouped_mm(F.silu(grouped_mm(rows, self.w1, offs)), self.w2, offs)

    def finish(self, x, back, token, weight):
        out = torch.zeros_like(x)
        return out.index_add_(0, token, back[: token.numel()] * weight.unsqueeze(1))


class HostSplitExchange:
    """torch's (or commx's host-split) all_to_all_v: counts read on the host, rows permuted
    between (source, expert) and (expert, source) order around the experts."""

    def __init__(self, layer, a2a_v, a2a_counts):
        self.l, self.a2a_v, self.a2a_counts = layer, a2a_v, a2a_counts

    def dispatch(self, rows, counts):
        n, L = self.l.world, self.l.L
        recv_counts = torch.empty_like(counts)
        self.a2a_counts(recv_counts, counts)  # [source][local expert]
        both = torch.stack([counts, recv_counts]).tolist()  # the host sync
        send = [sum(both[0][j * L:(j + 1) * L]) for j in range(n)]
        recv_by = both[1]
        recv = [sum(recv_by[k * L:(k + 1) * L]) for k in range(n)]
        got = rows.new_empty(sum(recv), rows.shape[1])
        self.a2a_v(got, rows, recv, send)
        pieces = got.split(recv_by)  # (k, l) -> (l, k)
        by_expert = torch.cat([pieces[k * L + l] for l in range(L) for k in range(n)])
        per_expert = [sum(recv_by[k * L + l] for k in range(n)) for l in range(L)]
        offs = torch.tensor(per_expert, device=rows.device).cumsum(0).to(torch.int32)
        return by_expert, offs, (send, recv, recv_by)

    def combine(self, y, state):
        send, recv, recv_by = state
        n, L = self.l.world, self.l.L
        pieces = y.split([recv_by[k * L + l] for l in range(L) for k in range(n)])
        by_source = torch.cat([pieces[l * n + k] for k in range(n) for l in range(L)])
        back = y.new_empty(sum(send), y.shape[1])
        self.a2a_v(back, by_source, send, recv)
        return back


class DeviceCountExchange:
    """commx's dispatch/combine: fixed-capacity buffers, counts on the device only."""

    def __init__(self, layer, comm, tokens):
        n, E = layer.world, layer.E
        self.l, self.comm = layer, comm
        cap = 2 * tokens * n  # every token of every rank may pick this rank's experts
        self.at_experts = torch.empty(cap, layer.a.hidden, device=layer.dev, dtype=torch.bfloat16)
        self.back = torch.empty(2 * tokens, layer.a.hidden, device=layer.dev, dtype=torch.bfloat16)
        self.recv_counts = torch.zeros(E, device=layer.dev, dtype=torch.int64)
        self.returned = torch.zeros(E, device=layer.dev, dtype=torch.int64)

    def dispatch(self, rows, counts):
        self.comm.dispatch(self.at_experts, rows, self.recv_counts, counts)
        offs = self.recv_counts.view(self.l.L, self.l.world).sum(1).cumsum(0).to(torch.int32)
        return self.at_experts, offs, None

    def combine(self, y, state):
        self.comm.combine(self.back, y, self.returned, self.recv_counts)
        return self.back


def step(layer, ex, x):
    rows, counts, token, weight = layer.route(x)
    got, offs, state = ex.dispatch(rows, counts)
    return layer.finish(x, ex.combine(layer.experts(got, offs), state), token, weight)


def time_eager(fn, iters, reps):
    samples = []
    for _ in range(reps + 1):
        ready_all()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(iters):
            fn()
        e1.record()
        e1.synchronize()
        samples.append(e0.elapsed_time(e1) * 1e3 / iters)
    return statistics.median(samples[1:])


def time_graph(fn, iters, reps):
    g, out = capture(fn, warmup=2)
    samples = []
    for _ in range(reps + 1):
        ready_all()
        samples.append(time_replays(g, iters))
    del g
    return statistics.median(samples[1:])


def worker(rank, a, port):
    os.environ.update(NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=a.ranks)
    import commx
    store = dist.distributed_c10d._get_default_store()
    names = a.providers.split(",")
    comm = commx.new_comm("cuda", dev, name="moe", store=store, rank=rank, size=a.ranks)
    nccl_comm = (commx.new_comm("nccl", dev, name="moe_nccl", store=store, rank=rank, size=a.ranks)
                 if "commx_nccl" in names else None)
    layer = Layer(a, rank, a.ranks, dev)
    rows_out = []

    def nccl_v(out, inp, recv, send):
        dist.all_to_all_single(out, inp, recv, send)

    def commx_v(out, inp, recv, send):
        comm.all_to_all_v_single(out, inp, recv, send)

    def nccl_counts(out, inp):
        dist.all_to_all_single(out, inp)

    def commx_counts(out, inp):
        comm.all_to_all_single(out, inp)

    for tokens in [int(t) for t in a.tokens.split(",")]:
        g = torch.Generator(device=dev).manual_seed(17 + tokens + rank)
        x = torch.randn(tokens, a.hidden, generator=g, device=dev, dtype=torch.bfloat16)
        ref = None
        for name in names:
            if name == "nccl":
                ex = HostSplitExchange(layer, nccl_v, nccl_counts)
            elif name == "commx_host":
                ex = HostSplitExchange(layer, commx_v, commx_counts)
            elif name == "commx":
                ex = DeviceCountExchange(layer, comm, tokens)
            elif name == "commx_nccl":
                ex = DeviceCountExchange(layer, nccl_comm, tokens)
            else:
                raise ValueError(name)
            out = step(layer, ex, x).float()
            torch.cuda.synchronize()
            if ref is None:
                ref = out
            err = float(((out - ref).norm() / ref.norm().clamp_min(1e-30)).item())
            rows, counts, _, _ = layer.route(x)

            def exchange_once(ex=ex, rows=rows, counts=counts):
                got, _, state = ex.dispatch(rows, counts)
                return ex.combine(got[: got.shape[0]], state)
            res = dict(provider=name, ranks=a.ranks, tokens=tokens, rel_err_vs_first=err,
                       step_eager_us=time_eager(lambda: step(layer, ex, x), a.iters, a.reps),
                       comm_eager_us=time_eager(exchange_once, a.iters, a.reps))
            if name in ("commx", "commx_nccl"):
                res["step_graph_us"] = time_graph(lambda: step(layer, ex, x), a.iters, a.reps)
                res["comm_graph_us"] = time_graph(exchange_once, a.iters, a.reps)
            rows_out.append(res)
            if rank == 0:
                print(f"ranks {a.ranks} tokens {tokens:5d} {name:10s} " + " ".join(
                    f"{k} {v:9.1f}" for k, v in res.items() if k.endswith("_us")) + f" err {err:.1e}", flush=True)
            ex = None  # its buffers go before the next provider allocates
            torch.cuda.empty_cache()
        if rank == 0:  # after every token count: a run cut short keeps what it measured
            info = dict(device=torch.cuda.get_device_name(dev), ranks=a.ranks, torch=torch.__version__,
                        nccl=".".join(map(str, torch.cuda.nccl.version())), experts=a.experts, top_k=2,
                        hidden=a.hidden, ffn=a.ffn, grouped_mm=hasattr(torch, "_grouped_mm"),
                        command="python3 tools/gpu_bench/moe_bench.py " + " ".join(sys.argv[1:]),
                        rows=rows_out)
            with open(a.json, "w") as f:
                json.dump(info, f, indent=1)
            if a.md:
                write_md(info, a.md)
    dist.barrier()
    comm.finalize()
    if nccl_comm is not None:
        nccl_comm.finalize()
    dist.destroy_process_group()


def write_md(info, path):
    by = {(r["provider"], r["tokens"]): r for r in info["rows"]}
    toks = sorted({r["tokens"] for r in info["rows"]})
    provs = [p for p in ("nccl", "commx_host", "commx", "commx_nccl") if any(q == p for q, _ in by)]
    device = [p for p in provs if p in ("commx", "commx_nccl")]
    lines = [f"MoE layer step on {info['ranks']}x {info['device']}: {info['experts']} experts, top-2, "
             f"hidden {info['hidden']}, ffn {info['ffn']}, bf16, torch {info['torch']}, NCCL {info['nccl']}. "
             f"us per step (median); nccl and commx_host read the counts on the host (not capturable), "
             f"commx (cuda backend) and commx_nccl (nccl backend) keep them on the device; "
             f"\"vs nccl\": nccl eager / that graph. Command: `{info['command']}`", ""]
    cols = [f"{p} eager" for p in provs] + [f"{p} graph" for p in device] + \
        [f"{p} graph vs nccl" for p in device] + [f"comm: {p} eager" for p in provs] + \
        [f"comm: {p} graph" for p in device] + [f"comm: {p} graph vs nccl" for p in device]
    lines += ["| tokens/rank | " + " | ".join(cols) + " |", "|" + "---:|" * (len(cols) + 1)]

    def cell(p, t, k):
        r = by.get((p, t))
        return f"{r[k]:.1f}" if r and k in r else "-"

    def ratio(p, t, k_fast, k_slow):
        f, s = by.get((p, t)), by.get(("nccl", t))
        return f"{s[k_slow] / f[k_fast]:.2f}x" if f and s and k_fast in f else "-"
    for t in toks:
        cells = [cell(p, t, "step_eager_us") for p in provs] + \
            [cell(p, t, "step_graph_us") for p in device] + \
            [ratio(p, t, "step_graph_us", "step_eager_us") for p in device] + \
            [cell(p, t, "comm_eager_us") for p in provs] + \
            [cell(p, t, "comm_graph_us") for p in device] + \
            [ratio(p, t, "comm_graph_us", "comm_eager_us") for p in device]
        lines.append(f"| {t} | " + " | ".join(cells) + " |")
    errs = max((r["rel_err_vs_first"] for r in info["rows"]), default=0.0)
    lines += ["", f"Largest relative difference of a provider's layer output from the first provider's: {errs:.1e}."]
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=int, default=2, help="expert-parallel ranks (one GPU each)")
    p.add_argument("--providers", default="nccl,commx_host,commx,commx_nccl")
    p.add_argument("--tokens", default="1,8,32,128,512,4096", help="tokens per rank")
    p.add_argument("--experts", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--ffn", type=int, default=1536)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--json", default="moe.json")
    p.add_argument("--md", default="")
    a = p.parse_args()
    assert a.experts % a.ranks == 0, "--experts must be a multiple of --ranks"
    mp.spawn(worker, args=(a, 29700 + os.getpid() % 1000), nprocs=a.ranks, join=True)


if __name__ == "__main__":
    sys.exit(main())
