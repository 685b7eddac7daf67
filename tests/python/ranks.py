"""Runs a function on N ranks in separate processes with a rendezvous store, and reports each
rank's result or traceback. Layer: tests (Python)."""

import importlib.util
import multiprocessing as mp
import os
import socket
import time
import traceback
from datetime import timedelta

import pytest

HOST = "127.0.0.1"


def free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def has_torch():
    return importlib.util.find_spec("torch") is not None


_NATIVE_TCP = None


def native_tcp_store():
    """Whether this libcommx has the TCP store (it may predate it)."""
    global _NATIVE_TCP
    if _NATIVE_TCP is None:
        import commx
        try:
            commx.TCPStore(HOST, 0, is_server=True, timeout=5)
            _NATIVE_TCP = True
        except commx.UnsupportedError:
            _NATIVE_TCP = False
    return _NATIVE_TCP


def require_store():
    if not native_tcp_store() and not has_torch():
        pytest.skip("no multi-process store: libcommx has no TCPStore and torch is absent")


def make_store(rank, size, port, timeout=60):
    """A commx TCPStore when libcommx has one, else torch's TCPStore adapted by commx."""
    import commx
    if native_tcp_store():
        return commx.TCPStore(HOST, port, world_size=size, is_server=(rank == 0),
                              timeout=timeout)
    import torch.distributed as dist
    return dist.TCPStore(HOST, port, size, rank == 0, timedelta(seconds=timeout))


def gpu_count():
    """GPUs torch sees, without initialising CUDA in this (forking) parent where torch can (NVML);
    0 without torch or a driver."""
    try:
        import torch
        return torch.cuda.device_count()
    except Exception:  # noqa: BLE001 - no torch, no driver
        return 0


def gpu_env():
    """Environment for GPU ranks (inherited by spawned ranks and torchrun): NCCL for the nccl
    backend and the cuda backend's delegated ops (COMMX_NCCL_LIBRARY, else the `nvidia.nccl` pip
    package torch uses), and never NVLink multicast."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    if os.environ.get("COMMX_NCCL_LIBRARY"):
        return
    try:
        import nvidia.nccl as m
    except ImportError:
        return  # the library path may still have libnccl.so.2
    for d in m.__path__:
        lib = os.path.join(d, "lib", "libnccl.so.2")
        if os.path.exists(lib):
            os.environ["COMMX_NCCL_LIBRARY"] = lib
            return


def init_agent_store_env(rank, size, port):
    """torchrun's variables for a store hosted by the parent: init_process_group("env://")."""
    os.environ.update(MASTER_ADDR=HOST, MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(size), TORCHELASTIC_USE_AGENT_STORE="True")


def init_commx_process_group(rank, size, port, timeout):
    """torch.distributed on backend "commx" (cpu tensors) over the parent's store on `port`:
    env:// through torchrun's agent-store variables where torch's TCPStore can join a native
    store, else tcp://."""
    import torch.distributed as dist
    import commx.torch as ct
    ct.set_device_backend("cpu", "cpu")
    if native_tcp_store():
        init_agent_store_env(rank, size, port)
        dist.init_process_group("commx", timeout=timeout)
    else:
        dist.init_process_group("commx", init_method=f"tcp://{HOST}:{port}", rank=rank,
                                world_size=size, timeout=timeout)


def _entry(fn, rank, size, port, queue, args, with_store):
    try:
        os.environ.pop("MASTER_ADDR", None)
        if not with_store:  # the function sets up its own rendezvous on `port`
            queue.put((rank, True, fn(rank, size, port, *args)))
            return
        store = make_store(rank, size, port)
        result = fn(rank, size, store, *args)
        # Rank 0 hosts the store: it leaves only after every rank is done with it.
        store.add("ranks/done", 1)
        if rank == 0:
            deadline = time.monotonic() + 60
            while store.add("ranks/done", 0) < size and time.monotonic() < deadline:
                time.sleep(0.01)
        queue.put((rank, True, result))
    except BaseException:  # noqa: BLE001 - report everything to the parent
        queue.put((rank, False, traceback.format_exc()))


def run_ranks(size, fn, *args, timeout=90, method="fork", with_store=True):
    """Runs fn(rank, size, store, *args) on `size` processes (fn(rank, size, port, *args) with
    with_store=False); returns the results by rank and fails the test with every failing rank's
    traceback."""
    if with_store:
        require_store()
    if not native_tcp_store():
        import torch.distributed  # noqa: F401 - imported once here, not in every forked rank
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    port = free_port()
    host = None
    if not with_store and native_tcp_store():
        # The parent hosts the store, as torchrun's agent does, so no rank can take it away
        # while others still use it; ranks join it with init_agent_store_env().
        import commx
        host = commx.TCPStore(HOST, 0, is_server=True, timeout=timeout)
        port = host.port
    procs = [ctx.Process(target=_entry, args=(fn, r, size, port, queue, args, with_store),
                         daemon=True) for r in range(size)]
    for p in procs:
        p.start()
    results, errors = {}, {}
    try:
        for _ in range(size):
            rank, ok, value = queue.get(timeout=timeout)
            (results if ok else errors)[rank] = value
    except Exception:  # noqa: BLE001 - queue.Empty: some rank hung
        errors["timeout"] = f"ranks {sorted(set(range(size)) - set(results) - set(errors))} " \
                            f"did not finish within {timeout} s"
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        pytest.fail("\n".join(f"--- rank {r} ---\n{e}" for r, e in sorted(
            errors.items(), key=lambda kv: str(kv[0]))), pytrace=False)
    del host
    return [results[r] for r in range(size)]
