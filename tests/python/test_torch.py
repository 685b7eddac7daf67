"""The PyTorch side: torch CPU tensors through the bindings, and the "commx" torch.distributed
backend (process-group collectives, DeviceMesh/DTensor, an FSDP2 loop matching gloo, torchrun);
with 2 GPUs the same on CUDA tensors (ranks spawned), FSDP2 matching NCCL under torchrun and the
CUDA quick start. Skipped where torch is absent. Layer: tests (Python)."""

import json
import os
import re
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

import commx  # noqa: E402
import fsdp2_worker  # noqa: E402
import store_backend  # noqa: E402
from ranks import gpu_count, gpu_env, run_ranks  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
NATIVE_CPU = commx._C.has_backend("cpu")
# Until the native cpu backend exists, the reference Python backend stands in for it.
CPU_BACKEND = "cpu" if NATIVE_CPU else "pystore"


def _use_commx_backend():
    import commx.torch as ct
    if not NATIVE_CPU:
        store_backend.register()
    ct.set_device_backend("cpu", CPU_BACKEND)


# -- torch tensors straight through the bindings ----------------------------------------------

def _bindings_with_torch(rank, size, store):
    if not NATIVE_CPU:
        store_backend.register()
    comm = commx.new_comm(CPU_BACKEND, torch.device("cpu"), "tt", store=store, rank=rank,
                          size=size)
    assert comm.get_device() == torch.device("cpu")
    dtypes = [torch.float32, torch.float64, torch.int32, torch.int64, torch.uint8]
    if NATIVE_CPU:
        dtypes += [torch.bfloat16, torch.float16, torch.int8, torch.bool]
    for dt in dtypes:
        t = (torch.arange(6) % 3 + rank).to(dt).reshape(2, 3)
        want = sum((torch.arange(6) % 3 + r).to(torch.float64) for r in range(size))
        op = commx.ReduceOp.MAX if dt == torch.bool else commx.ReduceOp.SUM
        comm.all_reduce(t, op)
        if dt != torch.bool:
            torch.testing.assert_close(t.reshape(-1).to(torch.float64), want.to(dt).to(
                torch.float64), msg=f"all_reduce {dt}")
    out = torch.zeros(3 * size)
    comm.all_gather_single(out, torch.full((3,), float(rank)), async_op=True).wait()
    assert out.tolist() == [float(r) for r in range(size) for _ in range(3)]
    # A non-contiguous tensor is bad input.
    with pytest.raises(commx.InvalidArgumentError, match="not contiguous"):
        comm.all_reduce(torch.zeros(4, 4).t(), commx.ReduceOp.SUM)
    comm.finalize()
    return True


def test_torch_tensors_through_bindings():
    run_ranks(2, _bindings_with_torch)


def test_cuda_device_without_index_is_rank_modulo_gpus(monkeypatch):
    # torchcomms' rule, checked without GPUs: "cuda" -> cuda:(rank % GPUs), made current.
    from commx import _comm
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: calls.append(str(d)))
    for var in ("COMMX_RANK", "COMMX_WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    assert _comm._resolve_device("cuda", 3) == "cuda:1"
    assert _comm._resolve_device(torch.device("cuda"), 2) == "cuda:0"
    assert _comm._resolve_device("cuda:1", 0) == "cuda:1"  # an explicit index is kept
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    assert _comm._resolve_device("cuda", None) == "cuda:1"  # rank from torchrun's variables
    assert _comm._resolve_device("cpu", 1) == "cpu"
    assert calls == ["cuda:1", "cuda:0", "cuda:1", "cuda:1"]


# -- the torch.distributed backend ------------------------------------------------------------

needs_2_gpus = pytest.mark.skipif(gpu_count() < 2, reason="needs 2 GPUs")
# CUDA ranks are spawned (a forked child cannot use CUDA once a parent has) and import torch.
# Spawned ranks import torch (slow) and init CUDA; a hang must still end well inside a GPU call.
CUDA_RANKS = dict(with_store=False, method="spawn", timeout=150)


def _init_pg(rank, size, port, backend="commx", device="cpu"):
    if backend == "commx":
        _use_commx_backend()
    if device == "cuda":
        torch.cuda.set_device(rank)
        torch.set_default_device(torch.device("cuda", rank))  # the tests' tensors go there
    from ranks import init_agent_store_env, native_tcp_store
    if native_tcp_store():  # the parent hosts a commx TCPStore: torch joins it as a client
        init_agent_store_env(rank, size, port)
        dist.init_process_group(backend)
    else:
        dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=size)


def _pg_collectives(rank, size, port, device="cpu"):
    _init_pg(rank, size, port, device=device)
    assert dist.get_backend() == "commx"
    r, n = rank, size
    t = torch.tensor([r + 1.0, 2.0 * r])
    dist.all_reduce(t)
    torch.testing.assert_close(t, torch.tensor([n * (n + 1) / 2, float(n * (n - 1))]))
    t = torch.tensor([float(r)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert t.item() == n - 1
    t = torch.tensor([float(r)])
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    torch.testing.assert_close(t, torch.tensor([(n - 1) / 2]))
    # all_gather (list and into one tensor), reduce_scatter_tensor.
    outs = [torch.zeros(2) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), float(r)))
    assert [o.tolist() for o in outs] == [[float(i)] * 2 for i in range(n)]
    big = torch.zeros(n, 2)
    dist.all_gather_into_tensor(big, torch.full((2,), float(r)))
    assert big.tolist() == [[float(i)] * 2 for i in range(n)]
    rs = torch.zeros(2)
    dist.reduce_scatter_tensor(rs, torch.arange(2.0 * n) + r)
    want = sum(torch.arange(2.0 * n) + i for i in range(n))[2 * r:2 * r + 2]
    torch.testing.assert_close(rs, want)
    rs_list = torch.zeros(2)
    dist.reduce_scatter(rs_list, list((torch.arange(2.0 * n) + r).chunk(n)))
    torch.testing.assert_close(rs_list, want)
    # broadcast / reduce / gather / scatter from the last rank.
    root = n - 1
    b = torch.full((3,), float(r))
    dist.broadcast(b, src=root)
    assert b.tolist() == [float(root)] * 3
    red = torch.tensor([float(r + 1)])
    dist.reduce(red, dst=root)
    if r == root:
        assert red.item() == n * (n + 1) / 2
    g = [torch.zeros(1) for _ in range(n)] if r == root else None
    dist.gather(torch.tensor([float(r)]), g, dst=root)
    if r == root:
        assert [x.item() for x in g] == list(map(float, range(n)))
    s = torch.zeros(1)
    dist.scatter(s, [torch.tensor([10.0 + i]) for i in range(n)] if r == root else None, src=root)
    assert s.item() == 10.0 + r
    # all_to_all_single with and without row splits; all_to_all with lists.
    a_in = torch.arange(n * 2.0).reshape(n, 2) + 100 * r
    a_out = torch.zeros(n, 2)
    dist.all_to_all_single(a_out, a_in)
    assert a_out.tolist() == [[100.0 * s_ + 2 * r, 100.0 * s_ + 2 * r + 1] for s_ in range(n)]
    in_splits = [d + 1 for d in range(n)]  # rank r sends d+1 rows to d
    out_splits = [r + 1] * n
    v_in = torch.cat([torch.full((d + 1, 3), float(10 * r + d)) for d in range(n)])
    v_out = torch.zeros(sum(out_splits), 3)
    dist.all_to_all_single(v_out, v_in, out_splits, in_splits)
    want = torch.cat([torch.full((r + 1, 3), float(10 * s_ + r)) for s_ in range(n)])
    torch.testing.assert_close(v_out, want)
    lo = [torch.zeros(1) for _ in range(n)]
    dist.all_to_all(lo, [torch.tensor([float(10 * r + d)]) for d in range(n)])
    assert [x.item() for x in lo] == [float(10 * s_ + r) for s_ in range(n)]
    # Point to point and barrier; async_op through torch's Work.
    if n > 1:
        p = torch.tensor([float(r)])
        if r == 0:
            dist.send(p + 5, dst=1)
        elif r == 1:
            dist.recv(p, src=0)
            assert p.item() == 5.0
    w = dist.all_reduce(torch.ones(1), async_op=True)
    w.wait()
    dist.barrier()
    # Non-contiguous and complex tensors.
    nc = torch.ones(4, 4).t()
    dist.all_reduce(nc)
    assert nc.sum().item() == 16 * n
    cx = torch.tensor([1 + 2j, 3 - 1j])
    dist.all_reduce(cx)
    torch.testing.assert_close(cx, torch.tensor([1 + 2j, 3 - 1j]) * n)
    # Functional collectives (what DTensor uses).
    import torch.distributed._functional_collectives as fc
    got = fc.all_reduce(torch.ones(2), "sum", dist.group.WORLD)
    torch.testing.assert_close(got.wait() if hasattr(got, "wait") else got, torch.full((2,),
                                                                                       float(n)))
    dist.destroy_process_group()
    return True


def _pg_dynamic(rank, size, port, device="cpu"):
    """commx.torch's all_to_all_v_dynamic / dispatch / combine on the group's comm, against a
    reference; a capacity error on every rank, then the group goes on."""
    import commx.torch as ct
    _init_pg(rank, size, port, device=device)
    dev = torch.device(device, rank) if device == "cuda" else torch.device("cpu")
    n, width = size, 3
    # References on the CPU (a CUDA rank's default device is its GPU).
    cpu = torch.device("cpu")
    # Rank k sends c[k, j] rows to rank j.
    c = torch.tensor([[(3 * k + 2 * j) % 4 for j in range(n)] for k in range(n)], device=cpu)

    def rows_of(k):
        rows = torch.arange(int(c[k].sum()) * width, dtype=torch.float32, device=cpu)
        return rows.reshape(-1, width) + 100 * k

    inp = rows_of(rank).to(dev)
    out = torch.full((int(c[:, rank].sum()) + 2, width), -1.0, device=dev)
    got = torch.full((n,), -1, dtype=torch.int64, device=dev)
    ct.all_to_all_v_dynamic(out, inp, got, c[rank].to(dev))
    want = torch.cat([rows_of(k)[int(c[k, :rank].sum()):int(c[k, :rank + 1].sum())]
                      for k in range(n)])
    assert got.cpu().tolist() == c[:, rank].tolist()
    torch.testing.assert_close(out[:want.shape[0]].cpu(), want)
    assert (out[want.shape[0]:] == -1).all()
    # NCCLX's name, async: the Work completes the op.
    out2 = torch.zeros_like(out)
    ct.device_alltoallv_single(out2, inp, got, c[rank].to(dev), async_op=True).wait()
    torch.testing.assert_close(out2[:want.shape[0]].cpu(), want)
    # MoE: 2 experts per rank, dispatch then combine brings every row back.
    L = 2
    experts = torch.tensor([(rank + e) % 3 for e in range(n * L)], dtype=torch.int64, device=cpu)
    tokens = torch.arange(int(experts.sum()) * width, dtype=torch.float32, device=cpu)
    tokens = tokens.reshape(-1, width) + rank
    at = torch.zeros(3 * n * L * 2, width, device=dev)
    at_counts = torch.zeros(n * L, dtype=torch.int64, device=dev)
    ct.dispatch(at, tokens.to(dev), at_counts, experts.to(dev))
    back = torch.zeros_like(tokens, device=dev)
    back_counts = torch.zeros(n * L, dtype=torch.int64, device=dev)
    ct.combine(back, at, back_counts, at_counts)
    torch.testing.assert_close(back.cpu(), tokens)
    assert back_counts.cpu().tolist() == experts.tolist()
    # Rank 0's output holds one row too few: every rank fails alike, then the group goes on.
    small = torch.zeros(max(int(c[:, rank].sum()) - (1 if rank == 0 else 0), 0), width, device=dev)
    if int(c[:, 0].sum()) > 0:
        with pytest.raises(commx.InvalidArgumentError, match="capacity exceeded: rank 0"):
            w = ct.all_to_all_v_dynamic(small if rank == 0 else out, inp, got, c[rank].to(dev),
                                        async_op=True)
            w.wait()
            # On CUDA wait() orders the stream only (as ProcessGroupNCCL's): once the device ran
            # the op, its Work holds the error.
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
                error = w.exception()
                if error is not None:
                    raise error
    t = torch.ones(2, device=dev)
    dist.all_reduce(t)
    assert t.cpu().tolist() == [float(n)] * 2
    dist.destroy_process_group()
    return True


def test_process_group_all_to_all_v_dynamic():
    run_ranks(2, _pg_dynamic, with_store=False)


@needs_2_gpus
def test_process_group_all_to_all_v_dynamic_cuda():
    run_ranks(2, _pg_dynamic, "cuda", **CUDA_RANKS)


@pytest.mark.parametrize("size", [1, 2])  # 3 ranks: covered by test_collectives.py
def test_process_group_collectives(size):
    run_ranks(size, _pg_collectives, with_store=False)


@needs_2_gpus
def test_process_group_collectives_cuda():
    gpu_env()
    run_ranks(2, _pg_collectives, "cuda", **CUDA_RANKS)


def _device_mesh(rank, size, port, device="cpu"):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    _init_pg(rank, size, port, device=device)
    dp_size = size // 2  # a (size/2, 2) mesh: 2x2 on 4 CPU ranks, 1x2 on 2 GPUs
    mesh = init_device_mesh(device, (dp_size, 2), mesh_dim_names=("dp", "tp"))
    dp, tp = mesh["dp"].get_group(), mesh["tp"].get_group()
    assert dist.get_world_size(dp) == dp_size and dist.get_world_size(tp) == 2
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=tp)  # tp groups: {0,1}, {2,3}
    assert t.item() == 4 * (rank // 2) + 1.0
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=dp)  # dp groups: {0,2}, {1,3} (one rank each on 2 GPUs)
    assert t.item() == sum(rank % 2 + 2 * j for j in range(dp_size))
    # DTensor: shard a matrix over the 2-D mesh, redistribute, gather it back.
    torch.manual_seed(0)
    full = torch.randn(8, 6, device="cpu").to(torch.get_default_device())
    d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
    assert d.to_local().shape == (8 // dp_size, 3)
    torch.testing.assert_close(d.redistribute(mesh, [Replicate(), Replicate()]).to_local(), full)
    torch.testing.assert_close((d * 2).sum().full_tensor(), full.sum() * 2)
    dist.destroy_process_group()
    return True


def test_device_mesh_and_dtensor():
    run_ranks(4, _device_mesh, with_store=False, timeout=150)


@needs_2_gpus
def test_device_mesh_and_dtensor_cuda():
    gpu_env()
    run_ranks(2, _device_mesh, "cuda", **CUDA_RANKS)


def _fsdp2_losses(rank, size, port, backend):
    _init_pg(rank, size, port, backend)
    losses = fsdp2_worker.train(torch.device("cpu"))
    dist.destroy_process_group()
    return losses


def _assert_same_losses(ours, theirs, name):
    for r in range(2):
        assert len(ours[r]) == fsdp2_worker.STEPS, ours
        for a, b in zip(ours[r], theirs[r]):
            assert abs(a - b) <= 1e-5, (r, "commx", ours[r], name, theirs[r])
    assert ours[0][-1] < ours[0][0]  # it trains


def test_fsdp2_loss_matches_gloo():
    ours = run_ranks(2, _fsdp2_losses, "commx", with_store=False, timeout=150)
    gloo = run_ranks(2, _fsdp2_losses, "gloo", with_store=False, timeout=150)
    _assert_same_losses(ours, gloo, "gloo")


def _run_torchrun(script, *args, timeout=180, extra_env=None):
    env = dict(os.environ)
    env.update(extra_env or {})
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # never NVLink multicast (shared machines)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(ROOT, "python"), HERE, env.get("PYTHONPATH", "")])
    env["COMMX_TEST_CPU_BACKEND"] = CPU_BACKEND
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
           "--master-port", str(__import__("ranks").free_port()), script, *args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"torchrun failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p.stdout


def test_torchrun_process_group():
    out = _run_torchrun(os.path.join(HERE, "torchrun_worker.py"))
    assert out.count("commx torchrun ok") == 2, out


@pytest.mark.skipif(not NATIVE_CPU, reason="the quick start uses the native cpu backend")
def test_quickstart_cpu_under_torchrun():
    out = _run_torchrun(os.path.join(ROOT, "examples", "python", "quickstart_cpu.py"))
    assert out.count("quickstart ok") == 2, out


@needs_2_gpus
def test_quickstart_cuda_under_torchrun():
    gpu_env()
    out = _run_torchrun(os.path.join(ROOT, "examples", "python", "quickstart.py"))
    print(out)
    assert out.count("quickstart ok") == 2, out
    # Each rank on its own GPU: "cuda" without an index is cuda:(rank % GPUs), as in torchcomms.
    assert "Rank 0/2: Running on device 0" in out and "Rank 1/2: Running on device 1" in out, out


def _torchrun_losses(backend, device="cuda", extra_env=None):
    out = _run_torchrun(os.path.join(HERE, "fsdp2_worker.py"), "--backend", backend,
                        "--device", device, timeout=300, extra_env=extra_env)
    # Both ranks print to one pipe: their lines may interleave, so match the records anywhere.
    losses = {int(r): json.loads(v) for r, v in re.findall(r"fsdp2 losses (\d+) (\[[^\]]*\])", out)}
    assert sorted(losses) == [0, 1], out
    print(f"fsdp2 {backend} losses: {losses}")
    return losses


def test_fsdp2_on_the_process_group_base_of_older_torch():
    # torch 2.11 cannot subclass c10d Backend from Python: the group is then a ProcessGroup
    # subclass (COMMX_TORCH_PG_BASE forces that path on newer torch).
    ours = _torchrun_losses("commx", "cpu", {"COMMX_TORCH_PG_BASE": "process_group"})
    _assert_same_losses(ours, _torchrun_losses("gloo", "cpu"), "gloo")


@needs_2_gpus
def test_fsdp2_cuda_loss_matches_nccl_under_torchrun():
    gpu_env()
    _assert_same_losses(_torchrun_losses("commx"), _torchrun_losses("nccl"), "nccl")
