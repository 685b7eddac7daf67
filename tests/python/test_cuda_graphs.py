"""CUDA graphs captured the way PyTorch users capture them, on 2 GPUs with the `cuda` backend:
torch.cuda.graph in every capture_error_mode, with the Works of earlier eager ops dropped (their
clean-up runs inside the capture), 100 captures in a row, graphs of many sizes in one process
(as serving engines capture one per batch size), thousands of replays, eager ops between
captures, async ops inside a capture, make_graphed_callables. Each replay's result is checked
against the exact sum. Skipped without torch or 2 GPUs. Layer: tests (Python)."""

import gc

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import gpu_count, gpu_env, run_ranks  # noqa: E402

pytestmark = pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
SUM = commx.ReduceOp.SUM


def _run(fn, *args):
    gpu_env()
    return run_ranks(2, fn, *args, timeout=300, method="spawn")


def _setup(rank, size, store, name="graphs"):
    comm = commx.new_comm("cuda", torch.device("cuda"), name, store=store, rank=rank, size=size,
                          timeout=60)
    return comm, torch.device("cuda", rank)


def _input(rank, n, dev, salt=0, dtype=torch.bfloat16):
    g = torch.Generator(device=dev).manual_seed(31 * rank + 1009 * salt + n)
    return torch.randint(-4, 5, (n,), generator=g, device=dev).to(dtype)


def _expected(size, n, dev, salt=0, dtype=torch.bfloat16):
    return sum(_input(r, n, dev, salt, dtype).float() for r in range(size))


def _eager_then_capture(rank, size, store, mode, rounds):
    """Each round: one eager all_reduce whose Work is dropped at once, a collection (the Work's
    clean-up runs), then capture three all_reduces and replay; every replay checked."""
    comm, dev = _setup(rank, size, store)
    n = 64 * 1024 + 3  # odd: the tail path too
    x = torch.empty(n, dtype=torch.bfloat16, device=dev)
    failures = 0
    for r in range(rounds):
        x.copy_(_input(rank, n, dev, r))
        comm.all_reduce(x, SUM, False)  # Work dropped unseen
        comm.all_reduce(x, SUM, True)  # an async Work dropped before it ends
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            comm.all_reduce(torch.zeros(8, device=dev), SUM, False)
        torch.cuda.current_stream().wait_stream(side)
        gc.collect()
        g = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(g, capture_error_mode=mode):
                for _ in range(3):
                    comm.all_reduce(x, SUM, False)
        except Exception as e:  # noqa: BLE001 - counted, then reported
            failures += 1
            raise AssertionError(f"round {r}: capture failed: {e}") from e
        base = _input(rank, n, dev, r).float()
        x.copy_(base.to(torch.bfloat16))
        g.replay()
        torch.cuda.synchronize()
        # One eager op sums the inputs (x2 per all_reduce of 2 ranks after the first).
        want = _expected(size, n, dev, r) * (size ** 2)
        assert torch.equal(x.float(), want), f"round {r}: wrong replay result"
        del g
    comm.finalize()
    return failures


@pytest.mark.parametrize("mode", ["global", "thread_local", "relaxed"])
def test_capture_after_dropped_works(mode):
    assert _run(_eager_then_capture, mode, 10) == [0, 0]


def _capture_100(rank, size, store):
    comm, dev = _setup(rank, size, store)
    n = 1 << 18  # 512 KiB of bf16: the LL128 range
    x = torch.empty(n, dtype=torch.bfloat16, device=dev)
    for r in range(100):
        comm.all_reduce(x, SUM, r % 2 == 1)  # eager between captures, Works dropped
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            comm.all_reduce(x, SUM, False)
        if r % 10 == 0:
            x.copy_(_input(rank, n, dev, r))
            g.replay()
            torch.cuda.synchronize()
            assert torch.equal(x.float(), _expected(size, n, dev, r)), f"capture {r}: wrong result"
        del g
    comm.finalize()
    return True


def test_capture_100_in_a_row():
    assert _run(_capture_100) == [True, True]


def _many_sizes(rank, size, store):
    """One graph per batch size (4 B .. 8 MiB, every all_reduce algorithm), replayed in turns
    thousands of times; async ops inside the capture; eager ops between replays."""
    comm, dev = _setup(rank, size, store)
    sizes = [2, 100, 4096, 40_000, 300_000, 1_500_000, 4_000_000]
    bufs = {n: torch.empty(n, dtype=torch.bfloat16, device=dev) for n in sizes}
    graphs = {}
    for n, b in bufs.items():
        comm.all_reduce(b, SUM, False)  # warm-up, eager
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            w = comm.all_reduce(b, SUM, True)  # async inside a capture: wait() orders the stream
            w.wait()
        graphs[n] = g
    for it in range(2000):
        n = sizes[it % len(sizes)]
        if it % 250 == 0 or it >= 2000 - len(sizes):
            bufs[n].copy_(_input(rank, n, dev, it))
            graphs[n].replay()
            torch.cuda.synchronize()
            assert torch.equal(bufs[n].float(), _expected(size, n, dev, it)), f"replay {it} of {n}"
        else:
            bufs[n].zero_()
            graphs[n].replay()
        if it % 100 == 50:
            comm.all_reduce(bufs[sizes[0]], SUM, False)  # the comm used eagerly between replays
    torch.cuda.synchronize()
    graphs.clear()
    comm.finalize()
    return True


def test_graphs_of_many_sizes_replayed_thousands_of_times():
    assert _run(_many_sizes) == [True, True]


def _graphed_callables(rank, size, store):
    """torch.cuda.make_graphed_callables over a module whose forward all_reduces its output (as
    tensor-parallel layers do); forward and backward replayed, gradients checked."""
    comm, dev = _setup(rank, size, store)
    torch.manual_seed(0)

    class AllReduceLinear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(64, 64, device=dev)

        def forward(self, x):
            y = self.lin(x)
            out = y.detach().clone()
            comm.all_reduce(out, SUM, False)
            return y + (out - y.detach())  # the reduced value, the local gradient

    mod = AllReduceLinear()
    sample = torch.randn(8, 64, device=dev, requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(mod, (sample,))
    def step_input(r, step):
        return (torch.arange(8 * 64, device=dev, dtype=torch.float32).reshape(8, 64) % 7 + r + step) / 8

    for step in range(5):
        x = step_input(rank, step).requires_grad_(True)
        y = graphed(x)
        with torch.no_grad():  # every rank holds the same weights: the peers' outputs recomputed
            want = sum(mod.lin(step_input(r, step)) for r in range(size))
        assert torch.allclose(y, want, atol=1e-4), f"step {step}: forward"
        y.sum().backward()
        assert torch.allclose(x.grad, mod.lin.weight.sum(0).expand(8, 64), atol=1e-5), f"step {step}: grad"
    comm.finalize()
    return True


def test_make_graphed_callables():
    assert _run(_graphed_callables) == [True, True]


def _dynamic_replays(rank, size, store):
    """device_alltoallv_single and dispatch/combine captured in one torch.cuda.graph, replayed
    with new counts each time (the host never reads them): every replay checked."""
    comm, dev = _setup(rank, size, store, "dynamic")
    width, experts, rows_max = 8, 4, 16
    x = torch.zeros(rows_max, width, dtype=torch.bfloat16, device=dev)
    counts = torch.zeros(size, dtype=torch.int64, device=dev)
    got = torch.zeros(size, dtype=torch.int64, device=dev)
    out = torch.zeros(size * rows_max, width, dtype=torch.bfloat16, device=dev)
    ecounts = torch.zeros(experts, dtype=torch.int64, device=dev)
    at_experts = torch.zeros(size * rows_max, width, dtype=torch.bfloat16, device=dev)
    received = torch.zeros(experts, dtype=torch.int64, device=dev)
    back = torch.zeros(rows_max, width, dtype=torch.bfloat16, device=dev)
    returned = torch.zeros(experts, dtype=torch.int64, device=dev)
    comm.barrier()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        comm.device_alltoallv_single(out, x, got, counts)
        comm.dispatch(at_experts, x, received, ecounts)
        comm.combine(back, at_experts, returned, received)
    for rep in range(6):
        gen = torch.Generator().manual_seed(rep)
        table = torch.randint(0, 4, (size, size), generator=gen)  # table[k, j]: rows k -> j
        etable = torch.randint(0, 3, (size, experts), generator=gen)
        vals = (torch.arange(rows_max * width).view(rows_max, width) + 1000 * rank + 7 * rep) % 251
        x.copy_(vals.to(torch.bfloat16))
        counts.copy_(table[rank])
        ecounts.copy_(etable[rank])
        g.replay()
        torch.cuda.synchronize()
        assert got.cpu().tolist() == table[:, rank].tolist(), f"replay {rep}: counts"
        want = []
        for k in range(size):
            theirs = (torch.arange(rows_max * width).view(rows_max, width) + 1000 * k + 7 * rep) % 251
            first = int(table[k, :rank].sum())
            want.append(theirs[first:first + int(table[k, rank])])
        want = torch.cat(want).to(torch.bfloat16)
        assert torch.equal(out[:len(want)].cpu(), want), f"replay {rep}: rows"
        sent = int(etable[rank].sum())
        assert returned.cpu().tolist() == etable[rank].tolist(), f"replay {rep}: combine counts"
        assert torch.equal(back[:sent].cpu(), x[:sent].cpu()), f"replay {rep}: dispatch + combine"
    comm.finalize()
    return True


def test_dynamic_all_to_all_replays_with_new_counts():
    assert _run(_dynamic_replays) == [True, True]
