#!/usr/bin/env python3
"""Training quality of FP8 gradient all-reduce: a 2-layer MLP learns a fixed random teacher
network on synthetic data with 2 data-parallel ranks, its gradients averaged each step by commx in
bf16, in FP8 (E4M3, per-block scales, FP32 sums) and in FP8 with the two-term gather (fp8x2).
Every run starts from the same weights and sees the same batches, so the runs differ only in how
the gradients were reduced. Backend `cuda` (GPUs) or `cpu` (the host path, whose FP8 results
the cuda kernels reproduce bit for bit: lowp_cuda_test). Writes the loss table (markdown + JSON)
and the curves (SVG, and PNG when matplotlib is present). Layer: tools.

  python3 tools/gpu_bench/fp8_training.py --ranks 2 --steps 200 --out bench/results/local
  python3 tools/gpu_bench/fp8_training.py --backend cpu --dim 256 --hidden 1024 --batch 128
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

VARIANTS = {  # name -> commx comm hints (the op is an AVG all_reduce of one flat bf16 bucket)
    "bf16": {},
    "fp8": {"low_precision": "fp8e4m3", "low_precision_min_bytes": "0"},
    "fp8x2": {"low_precision": "fp8e4m3", "low_precision_min_bytes": "0",
              "low_precision_gather": "fp8x2"},
}


def batch(step, rank, args, teacher, dev):
    """Rank `rank`'s batch of step `step`: inputs ~ N(0, 1), targets from the teacher + noise."""
    g = torch.Generator(device=dev).manual_seed(7919 * step + 104729 * (rank + 1))
    x = torch.randn(args.batch, args.dim, generator=g, device=dev)
    with torch.no_grad():
        y = teacher(x) + 0.01 * torch.randn(args.batch, args.dim, generator=g, device=dev)
    return x, y


def mlp(dim, hidden):
    return torch.nn.Sequential(torch.nn.Linear(dim, hidden), torch.nn.GELU(),
                               torch.nn.Linear(hidden, dim))


def train(variant, comm, rank, args, dev):
    """Loss of rank 0's model after each step (identical models on every rank)."""
    import commx
    torch.manual_seed(1234)
    teacher = mlp(args.dim, args.hidden).to(dev)
    torch.manual_seed(42)
    model = mlp(args.dim, args.hidden).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    params = list(model.parameters())
    numel = sum(p.numel() for p in params)
    bucket = torch.empty(numel, dtype=torch.bfloat16, device=dev)
    losses = []
    for step in range(args.steps):
        x, y = batch(step, rank, args, teacher, dev)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=False)
        loss.backward()
        # One flat bf16 bucket of every gradient (as DDP buckets), averaged over the ranks.
        off = 0
        for p in params:
            bucket[off:off + p.numel()].copy_(p.grad.reshape(-1))
            off += p.numel()
        comm.all_reduce(bucket, commx.ReduceOp.AVG, False)
        off = 0
        for p in params:
            p.grad.copy_(bucket[off:off + p.numel()].view_as(p.grad))
            off += p.numel()
        opt.step()
        # The mean loss over the ranks' batches, in f32 on the plain path (the op hint keeps the
        # comm's low precision off it).
        lt = loss.detach().reshape(1).float()
        comm.all_reduce(lt, commx.ReduceOp.AVG, False, hints={"low_precision": "off"})
        losses.append(lt.item())
    return losses, numel


def worker(rank, args, port, result_path):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if args.backend == "cuda":
        dev = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=args.ranks)
    import commx
    store = dist.distributed_c10d._get_default_store()
    results = {}
    for name in args.variants.split(","):
        comm = commx.new_comm(args.backend, dev, name=f"train_{name}", store=store, rank=rank,
                              size=args.ranks, hints=VARIANTS[name])
        losses, numel = train(name, comm, rank, args, dev)
        comm.finalize()
        results[name] = losses
        if rank == 0:
            print(f"{name}: final loss {losses[-1]:.6f} ({numel} parameters, "
                  f"{numel * 2 / 2**20:.1f} MiB of bf16 gradients per step)", flush=True)
    if rank == 0:
        with open(result_path, "w") as f:
            json.dump({"args": vars(args), "losses": results}, f)
    dist.destroy_process_group()


def svg(curves, path, title):
    """The loss curves (log scale) as a small standalone SVG."""
    import math
    w, h, m = 640, 400, 50
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"]
    allv = [v for c in curves.values() for v in c if v > 0]
    lo, hi = math.log10(min(allv)), math.log10(max(allv))
    n = max(len(c) for c in curves.values())
    sx = lambda i: m + (w - 2 * m) * i / max(1, n - 1)
    sy = lambda v: h - m - (h - 2 * m) * (math.log10(v) - lo) / max(1e-9, hi - lo)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{m}" y1="{h - m}" x2="{w - m}" y2="{h - m}" stroke="black"/>',
           f'<line x1="{m}" y1="{m}" x2="{m}" y2="{h - m}" stroke="black"/>',
           f'<text x="{w / 2}" y="{h - 10}" text-anchor="middle" font-size="12">step</text>',
           f'<text x="12" y="{h / 2}" font-size="12" transform="rotate(-90 12 {h / 2})">'
           f'loss (log)</text>']
    for e in range(math.floor(lo), math.ceil(hi) + 1):
        for k in (1, 2, 5):
            v = k * 10 ** e
            if lo <= math.log10(v) <= hi:
                out.append(f'<text x="{m - 4}" y="{sy(v) + 4:.1f}" text-anchor="end" '
                           f'font-size="10">{v:g}</text>')
    for i in range(0, n, max(1, n // 5)):
        out.append(f'<text x="{sx(i):.1f}" y="{h - m + 14}" text-anchor="middle" '
                   f'font-size="10">{i}</text>')
    for k, (name, c) in enumerate(curves.items()):
        pts = " ".join(f"{sx(i):.1f},{sy(v):.1f}" for i, v in enumerate(c) if v > 0)
        col = colors[k % len(colors)]
        out.append(f'<polyline fill="none" stroke="{col}" stroke-width="1.5" points="{pts}"/>')
        out.append(f'<text x="{w - m - 60}" y="{m + 16 * k}" font-size="12" fill="{col}">'
                   f'{name}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def png(curves, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for name, c in curves.items():
        ax.plot(range(len(c)), c, label=name, linewidth=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--backend", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--variants", default="bf16,fp8,fp8x2")
    ap.add_argument("--port", type=int, default=29533)
    ap.add_argument("--out", default="bench/results/local")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    result_path = os.path.join(args.out, "fp8_training.json")
    mp.spawn(worker, args=(args, args.port, result_path), nprocs=args.ranks, join=True)
    with open(result_path) as f:
        losses = json.load(f)["losses"]
    names = list(losses)
    title = (f"2-layer MLP {args.dim}-{args.hidden}-{args.dim}, {args.ranks} ranks, "
             f"gradients all-reduced by commx ({args.backend} backend)")
    lines = [f"{title}; mean loss over the ranks' batches.", "",
             "| step | " + " | ".join(names) + " |", "|---:|" + "---:|" * len(names)]
    for i in list(range(0, args.steps, max(1, args.steps // 10))) + [args.steps - 1]:
        lines.append(f"| {i + 1} | " + " | ".join(f"{losses[n][i]:.6f}" for n in names) + " |")
    ref = losses.get("bf16")
    if ref:
        lines.append("")
        for n in names:
            if n != "bf16":
                rel = (losses[n][-1] - ref[-1]) / ref[-1]
                lines.append(f"- {n}: final loss {losses[n][-1]:.6f} vs bf16 {ref[-1]:.6f} "
                             f"({100 * rel:+.2f}%)")
    with open(os.path.join(args.out, "fp8_training.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    svg(losses, os.path.join(args.out, "fp8_training.svg"), title)
    png(losses, os.path.join(args.out, "fp8_training.png"), title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
