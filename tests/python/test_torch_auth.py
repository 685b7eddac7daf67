"""torch.distributed with a store that requires the job token (commx-run's default): torch's own
TCPStore client is refused, yet init_process_group(backend="commx") works, through env:// (routed
through commx's store client while a token is set) and through init_method="commx://"; once
under commx-run itself, once with the ranks forked here around a store with a token. Collectives
and a subgroup are checked against references. Skipped without torch (and the commx-run test
without a native build). Layer: tests (Python)."""

import os
import subprocess
import sys

from datetime import timedelta

import pytest

from ranks import run_ranks

pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"), "bin", "commx-run")


RANK_PROGRAM = r"""
import os, sys
from datetime import timedelta
import torch, torch.distributed as dist
import commx.torch  # registers "commx" and the commx rendezvous

# The job's store refuses torch's own client: it cannot answer the token challenge.
try:
    dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                  timeout=timedelta(seconds=3), wait_for_workers=False)
    print("torch-store-accepted")
except Exception:
    print("torch-store-refused")

dist.init_process_group("commx", init_method=sys.argv[1], timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.arange(4, dtype=torch.float32) + rank
dist.all_reduce(t)
assert torch.equal(t, torch.arange(4, dtype=torch.float32) * size + size * (size - 1) / 2), t
out = [torch.zeros(2) for _ in range(size)]
dist.all_gather(out, torch.full((2,), float(rank)))
assert [o[0].item() for o in out] == [float(r) for r in range(size)], out
pair = dist.new_group([0, 1])
x = torch.tensor([10.0 * rank])
if rank in (0, 1):
    dist.all_reduce(x, group=pair)
    assert x.item() == 10.0, x
dist.barrier()
print("ok", rank, type(dist.distributed_c10d._get_default_store()).__name__)
dist.destroy_process_group()
"""


@pytest.mark.skipif(not os.path.isfile(RUN), reason=f"no {RUN} (scripts/build.sh)")
def test_torch_runs_under_commx_run_with_auth(tmp_path):
    script = tmp_path / "rank.py"
    script.write_text(RANK_PROGRAM)
    env = dict(os.environ)
    for var in ("COMMX_AUTH_TOKEN", "COMMX_AUTH_TOKEN_FILE", "MASTER_ADDR", "MASTER_PORT", "RANK",
                "WORLD_SIZE"):
        env.pop(var, None)
    env["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([RUN, "-np", "2", "--timeout", "120", sys.executable, str(script),
                        "env://"], env=env, capture_output=True, text=True, timeout=180)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert out.count("torch-store-refused") == 2 and "torch-store-accepted" not in out, out
    assert "ok 0 " in out and "ok 1 " in out, out


TOKEN = "0123456789abcdef0123456789abcdef"


def _rendezvous(rank, size, port, init_method):
    # As commx-run starts a rank: its variables, the job token, a store hosted outside.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(size), TORCHELASTIC_USE_AGENT_STORE="True",
                      COMMX_AUTH_TOKEN=TOKEN)
    import torch
    import torch.distributed as dist
    import commx.torch as ct
    ct._store.register()  # the token is set now: env:// goes through commx too
    ct.set_device_backend("cpu", "cpu")
    with pytest.raises(Exception):
        dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=3),
                      wait_for_workers=False)
    dist.init_process_group("commx", init_method=init_method, timeout=timedelta(seconds=60))
    t = torch.arange(4, dtype=torch.float32) + rank
    dist.all_reduce(t)
    assert torch.equal(t, torch.arange(4, dtype=torch.float32) * size + size * (size - 1) / 2)
    dist.barrier()
    dist.destroy_process_group()
    return True


@pytest.mark.parametrize("init_method", ["commx://", "env://"])
def test_commx_rendezvous_reaches_a_store_with_a_token(init_method):
    import commx
    os.environ["COMMX_AUTH_TOKEN"] = TOKEN  # the store hosted here requires it
    try:
        host = commx.TCPStore("127.0.0.1", 0, is_server=True, timeout=60)
        run_ranks(2, lambda r, n, _port: _rendezvous(r, n, host.port, init_method),
                  with_store=False)
    finally:
        os.environ.pop("COMMX_AUTH_TOKEN", None)
