"""What the PyTorch benchmarks share: size arguments, torch's graph-capture recipe, and timing of
graph replays after every rank is ready. Layer: tools."""
import torch
import torch.distributed as dist


def size_arg(s):
    """'8', '64K', '1.5M', '1G' -> bytes."""
    mul = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1].upper(), 1)
    return int(float(s[:-1] if mul > 1 else s) * mul)


def sizes(lo, hi, factor):
    s = lo
    while s <= hi:
        yield s
        s *= factor


def capture(fn, warmup=3):
    """torch's documented recipe: warm up on a side stream, then capture fn() in a graph with
    torch.cuda.graph's default settings. Returns (graph, what fn returned while captured)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fn()
    return g, out


def ready_all():
    """Every rank idle and past a barrier (the timed work then starts together)."""
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()


def time_replays(g, replays):
    """GPU microseconds per replay of `g`, replayed `replays` times back to back."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(replays):
        g.replay()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1) * 1e3 / replays
