"""Bootstrap mistakes a user makes from the environment, each run in a fresh interpreter: half a
launcher's rank/size pair, an unknown backend (named with the ones that exist, before any store
is awaited), a missing store (told in Python terms), a 1-rank job with MASTER_PORT=0 (hosts
nothing, waits for nothing), and a bad COMMX_TORCH_BACKEND_CPU (reported by
init_process_group). Each must end within seconds. Layer: tests (Python)."""

import os
import subprocess
import sys
import time

import pytest

from ranks import free_port

HERE = os.path.dirname(os.path.abspath(__file__))
PYPATH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
LAUNCH_VARS = ("COMMX_RANK", "COMMX_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
               "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "COMMX_STORE_FILE",
               "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
               "COMMX_TORCH_BACKEND_CPU", "TORCHELASTIC_USE_AGENT_STORE")


def _run(code, env_vars, limit=30):
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env.update(env_vars)
    env["PYTHONPATH"] = PYPATH + os.pathsep + env.get("PYTHONPATH", "")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=limit)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - t0


NEW_COMM = "import commx; c = commx.new_comm({!r}, 'cpu'); print('made', c.get_size())"


def test_world_size_without_rank_is_an_error():
    rc, out, _ = _run(NEW_COMM.format("cpu"), {"WORLD_SIZE": "2"})
    assert rc != 0 and "WORLD_SIZE=2 is set but RANK is not" in out, out


def test_unknown_backend_is_named_before_waiting_for_a_store():
    # Rank 1 of 2 with nobody serving the store: the backend name is checked first.
    rc, out, took = _run(NEW_COMM.format("nccl2"), {
        "RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()), "COMMX_TIMEOUT_SECONDS": "20"})
    assert rc != 0 and "no backend named 'nccl2'" in out, out
    assert "backends here: " in out and "cpu" in out.split("backends here: ")[1], out
    assert took < 15, f"took {took:.1f} s: it waited for the store"


def test_missing_store_is_told_in_python_terms():
    rc, out, _ = _run(NEW_COMM.format("cpu"), {"COMMX_RANK": "0", "COMMX_WORLD_SIZE": "2"})
    assert rc != 0 and "store=" in out and "new_comm" in out, out


def test_world_size_mismatch_is_named():
    # Rank 0 believes in 2 ranks and hosts the store, rank 1 in 3: the one that meets the other's
    # size names both; the other gives up within the comm timeout.
    port = str(free_port())
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port, "COMMX_TIMEOUT_SECONDS": "8"}
    procs = []
    for rank, size in ((0, 2), (1, 3)):
        e = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
        e.update(env, RANK=str(rank), WORLD_SIZE=str(size))
        e["PYTHONPATH"] = PYPATH + os.pathsep + e.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-c", NEW_COMM.format("cpu")], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
        time.sleep(0.5)  # rank 0 hosts the store first
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert all(p.returncode != 0 for p in procs), outs
    named = [o for o in outs if "world size" in o and "another rank of this comm has world size"
             in o]
    assert named, outs
    assert ("world size 3" in named[0] and "world size 2" in named[0]), named


def test_one_rank_job_with_master_port_0_needs_no_store():
    rc, out, took = _run(NEW_COMM.format("cpu"), {
        "RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "0"})
    assert rc == 0 and "made 1" in out, out
    assert took < 20, f"took {took:.1f} s"


def test_bad_torch_cpu_backend_is_reported_at_init():
    pytest.importorskip("torch")
    code = ("import torch.distributed as dist, commx.torch\n"
            f"dist.init_process_group('commx', init_method='tcp://127.0.0.1:{free_port()}', "
            "rank=0, world_size=1)\n")
    rc, out, _ = _run(code, {"COMMX_TORCH_BACKEND_CPU": "nope"}, limit=60)
    assert rc != 0 and "COMMX_TORCH_BACKEND_CPU=nope names no commx backend" in out, out
    assert "init_process_group" in out, out  # raised there, not at a later collective


def _launch(ranks, env, code=NEW_COMM.format("cpu")):
    procs = []
    for rank in ranks:
        e = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
        e.update(env, RANK=str(rank))
        e["PYTHONPATH"] = PYPATH + os.pathsep + e.get("PYTHONPATH", "")
        procs.append(subprocess.Popen([sys.executable, "-c", code], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    t0 = time.monotonic()
    outs = [p.communicate(timeout=60)[0] for p in procs]
    return [p.returncode for p in procs], outs, time.monotonic() - t0


def _agent_store():
    """A store hosted outside the ranks (as torchrun's agent does), so that no rank's exit
    takes it away from the others."""
    import commx
    host = commx.TCPStore("127.0.0.1", 0, is_server=True, timeout=30)
    return host, {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(host.port),
                  "TORCHELASTIC_USE_AGENT_STORE": "True", "WORLD_SIZE": "2"}


def test_duplicate_rank_is_named_and_the_job_goes_on():
    # Ranks 0, 0 and 1 of 2: one rank-0 process is told at once that another holds its rank;
    # the other two make the comm.
    host, env = _agent_store()
    codes, outs, _ = _launch([0, 0, 1], dict(env, COMMX_TIMEOUT_SECONDS="30"))
    failed = [o for c, o in zip(codes, outs) if c != 0]
    assert len(failed) == 1 and sum("made 2" in o for o in outs) == 2, outs
    assert "rank 0 is already taken by another process (pid " in failed[0], failed[0]
    assert "started with the same rank" in failed[0], failed[0]
    del host


def test_duplicate_rank_without_its_peer_is_named_by_both():
    # Two processes claim rank 0 and none rank 1: the second is told at once, the first when its
    # wait for rank 1 times out, and neither blames a store key alone.
    host, env = _agent_store()
    codes, outs, took = _launch([0, 0], dict(env, COMMX_TIMEOUT_SECONDS="4"))
    assert all(c != 0 for c in codes), outs
    assert sum("already taken by another process" in o for o in outs) == 1, outs
    assert sum("was also claimed by another process" in o for o in outs) == 1, outs
    assert took < 30, f"took {took:.1f} s"
    del host
