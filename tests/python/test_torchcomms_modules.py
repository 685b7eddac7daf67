"""torchcomms' module names that programs and torch.distributed import, on commx:
hooks.FlightRecorderHook, _backend_wrapper._BackendWrapper, _store_manager._create_prefixed_store,
device_mesh._create_torchcomm_process_group / _flatten_with_comm, and torchcomms' rank variables
TORCHCOMM_RANK/TORCHCOMM_SIZE (which torch sets around each group's new_comm). Values checked
against references, 1-2 ranks. Layer: tests (Python)."""

import json
import os
from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=30)


def _comm(rank, size, store, name):
    return commx.new_comm("cpu", "cpu", name, store=store, rank=rank, size=size, timeout=T)


def _flight_recorder(rank, size, store):
    import pickle
    from commx.hooks import FlightRecorderHook
    comm = _comm(rank, size, store, "fr")
    recorder, off = FlightRecorderHook(max_entries=3), FlightRecorderHook(max_entries=0)
    out = {"enabled_before": recorder.is_enabled()}
    recorder.register_with_comm(comm)
    off.register_with_comm(comm)
    out["enabled"] = recorder.is_enabled()
    for n in (1, 2, 3, 4):
        comm.all_reduce(torch.ones(n, 2), commx.ReduceOp.SUM)
    comm.broadcast(torch.ones(5, dtype=torch.int64), 0)
    out["dump"] = json.loads(recorder.dump_json())
    recorder.reset()
    out["after_reset"] = recorder.size()
    child = comm.split([0, 1], "fr_child")  # recorded, and the child is registered
    out_t = torch.zeros(2 * size)
    child.all_gather_single(out_t, torch.full((2,), float(rank)))
    peer = 1 - rank
    t = torch.full((3,), float(rank))
    if rank == 0:
        comm.send(t, peer)
    else:
        comm.recv(t, peer)
    out["second"] = recorder.entries()
    path = os.path.join(os.environ["TC_TMP"], f"fr{rank}")
    os.environ["TORCHCOMM_FR_DUMP_TEMP_FILE"] = path
    recorder.dump_file(rank)
    with open(path, "rb") as f:
        out["file"] = pickle.load(f)
    recorder.unregister()
    comm.all_reduce(torch.ones(1), commx.ReduceOp.SUM)
    out["after_unregister"] = (recorder.size(), recorder.is_enabled())
    out["off"] = off.entries()
    child.finalize()
    comm.finalize()
    return out


def test_flight_recorder_hook_in_torchs_entry_format(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_TMP", str(tmp_path))
    for rank, out in enumerate(run_ranks(2, _flight_recorder)):
        assert out["enabled"] and not out["enabled_before"]
        entries = out["dump"]["entries"]
        assert out["dump"]["version"] == "2.10" and "pg_config" in out["dump"]
        assert len(entries) == 3  # bounded: the last 3 of 5 ops
        assert [e["profiling_name"] for e in entries] == \
            ["nccl:all_reduce", "nccl:all_reduce", "nccl:broadcast"]
        assert [e["input_sizes"] for e in entries] == [[[3, 2]], [[4, 2]], [[5]]]
        assert [e["input_dtypes"] for e in entries] == [["Float"], ["Float"], ["Long"]]
        assert [e["collective_seq_id"] for e in entries] == [3, 4, 5]
        assert all(e["state"] == "completed" and e["process_group"] == ["fr", "fr"]
                   and not e["is_p2p"] and e["timeout_ms"] == 30000 for e in entries)
        ids = [e["record_id"] for e in entries]
        assert ids == sorted(ids) and len(set(ids)) == 3
        assert out["after_reset"] == 0
        second = out["second"]
        assert [e["profiling_name"] for e in second] == [
            "nccl:split", "nccl:all_gather_single",
            "nccl:send 0->1" if rank == 0 else "nccl:recv 1<-0"]
        assert second[1]["process_group"][0] == "fr_child"
        assert second[1]["output_sizes"] == [[4]] and second[1]["input_sizes"] == [[2]]
        assert second[2]["is_p2p"] and second[2]["p2p_seq_id"] == 1
        assert [e["profiling_name"] for e in out["file"]["entries"]] == \
            [e["profiling_name"] for e in second] and out["file"]["rank"] == rank
        assert out["after_unregister"] == (3, False)
        assert out["off"] == []


def test_backend_wrapper_module_path():
    from commx._backend_wrapper import _BackendWrapper
    from commx.torch._wrapper import BackendWrapper
    assert _BackendWrapper is BackendWrapper is commx._BackendWrapper


def test_create_prefixed_store_puts_keys_under_its_prefix(tmp_path, monkeypatch):
    from commx._store_manager import _create_prefixed_store
    path = str(tmp_path / "store")
    for k in ("MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("COMMX_STORE_FILE", path)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    store = _create_prefixed_store("torchcomm", "store_test", timedelta(seconds=5))
    store.set("k", b"v")
    plain = commx._C.launcher_store(timedelta(seconds=5))  # the same store, unprefixed
    assert bytes(plain.get("torchcomm/store_test/k")) == b"v"
    assert not plain.check(["k"])


def _mesh_helpers(rank, size, store):
    from commx.device_mesh import (_create_torchcomm_process_group, _flatten_with_comm,
                                   init_device_mesh)
    from torch.distributed._mesh_layout import _MeshLayout
    world = _comm(rank, size, store, "world")
    out = {}

    # a group over the comm, ranks given as {global: group}: the reverse order
    rev = world.split([1, 0], "reversed")
    pg = _create_torchcomm_process_group(rev, "reversed", global_ranks_mapping={1: 0, 0: 1})
    out["pg_rank"], out["pg_ranks"] = pg.rank(), c10d.get_process_group_ranks(pg)
    t = torch.full((3,), rank + 1.0)
    dist.all_reduce(t, group=pg)
    out["pg_sum"] = t.tolist()
    with pytest.raises(commx.InvalidArgumentError, match="once each"):
        _create_torchcomm_process_group(rev, "bad", global_ranks_mapping={0: 0, 1: 0})

    # a 1 x 2 mesh whose two dimensions flatten into one of both ranks
    alone, pair = world.split([rank], f"alone{rank}"), world.split([0, 1], "pair")
    mesh = init_device_mesh((alone, pair), ("a", "b"), _global_comm=world)
    flat_comm = world.split([0, 1], "ab")
    layout = _MeshLayout([axis for d in ("a", "b") for axis in mesh[d]._layout])
    flat = _flatten_with_comm(mesh, "ab", flat_comm, [0, 1], layout)
    out["flat_size"], out["flat_rank"] = flat.size(), flat.get_rank()
    out["group"] = mesh["ab"].get_group().group_name
    t = torch.full((2,), rank + 1.0)
    dist.all_reduce(t, group=mesh["ab"].get_group())
    out["flat_sum"] = t.tolist()
    with pytest.raises(commx.InvalidArgumentError, match="1 global ranks for a comm of 2"):
        _flatten_with_comm(mesh, "bad", flat_comm, [0], layout)
    return out


def test_device_mesh_helpers():
    for rank, out in enumerate(run_ranks(2, _mesh_helpers)):
        assert out["pg_rank"] == 1 - rank
        assert out["pg_ranks"] == [1, 0]
        assert out["pg_sum"] == [3.0] * 3
        assert out["flat_size"] == 2 and out["flat_rank"] == rank and out["group"] == "ab"
        assert out["flat_sum"] == [3.0] * 2


def _torchcomm_rank_vars(rank, size, port):
    # The launcher says rank/size; TORCHCOMM_RANK/SIZE (a group of this rank alone) win.
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), TORCHCOMM_RANK="0", TORCHCOMM_SIZE="1")
    store = commx.FileStore(os.path.join(os.environ["TC_TMP"], f"alone{rank}"))
    comm = commx.new_comm("cpu", "cpu", "alone", store=store, timeout=T)
    got = (comm.get_rank(), comm.get_size())
    comm.finalize()
    del os.environ["TORCHCOMM_SIZE"]
    with pytest.raises(commx.InvalidArgumentError, match="TORCHCOMM_RANK and TORCHCOMM_SIZE"):
        commx.new_comm("cpu", "cpu", "half", store=store, timeout=T)
    return got


def test_torchcomm_rank_variables(tmp_path, monkeypatch):
    monkeypatch.setenv("TC_TMP", str(tmp_path))
    assert run_ranks(2, _torchcomm_rank_vars, with_store=False) == [(0, 1), (0, 1)]


def _wrapper_monitored_barrier(rank, size, store):
    import time
    from commx.device_mesh import _create_torchcomm_process_group
    out = []
    comm = _comm(rank, size, store, "mb")
    pg = _create_torchcomm_process_group(comm, "mb")
    pg.monitored_barrier(timeout=timedelta(seconds=20), wait_all_ranks=True)  # all arrive
    for wait_all in (True, False):
        straggler = _comm(rank, size, store, f"mb_{wait_all}")
        spg = _create_torchcomm_process_group(straggler, f"mb_{wait_all}")
        if rank == 0:
            with pytest.raises(RuntimeError) as err:
                spg.monitored_barrier(timeout=timedelta(seconds=1), wait_all_ranks=wait_all)
            out.append(str(err.value))
        else:
            time.sleep(2)  # never checks in
        straggler.finalize()
    comm.finalize()
    return out


def test_backend_wrapper_monitored_barrier_names_stragglers():
    got = run_ranks(2, _wrapper_monitored_barrier, timeout=60)
    all_ranks, fast = got[0]
    assert "[Rank 0]: Ranks 1 failed to pass monitoredBarrier in 1000 ms" in all_ranks
    assert "[Rank 0]: Rank 1 failed to pass monitoredBarrier in 1000 ms" in fast
    assert got[1] == []


def _pickling(rank, size, store):
    import gc
    import pickle
    comm = _comm(rank, size, store, "pickled")
    out = {"same_comm": pickle.loads(pickle.dumps(comm)) is comm}
    for op, factor in ((commx.ReduceOp.MAX, None), (commx.ReduceOp.PREMUL_SUM(2.5), 2.5),
                       (commx.ReduceOp.PREMUL_SUM(torch.tensor(4.0)), 4.0)):
        back = pickle.loads(pickle.dumps(op))
        assert back.type == op.type and (factor is None or float(back.factor) == factor)
    # the unpickled op reduces as the original does
    t = torch.full((2,), rank + 1.0)
    comm.all_reduce(t, pickle.loads(pickle.dumps(commx.ReduceOp.PREMUL_SUM(2.0))))
    out["premul"] = t.tolist()
    batch = comm.batch_op_create()
    data = pickle.dumps(batch)
    out["same_batch"] = pickle.loads(data) is batch
    backend = batch.get_comm_backend()
    out["same_backend"] = backend is comm.batch_op_create().get_comm_backend()
    del batch
    gc.collect()
    again = pickle.loads(data)  # gone: an empty batch on the same comm, then that one again
    out["again"] = (len(again.ops), again.get_comm_backend() is backend,
                    pickle.loads(data) is again)
    comm_data = pickle.dumps(comm)
    comm.finalize()
    del comm, again  # the batch holds its comm
    gc.collect()
    with pytest.raises(pickle.UnpicklingError, match="'pickled' no longer exists"):
        pickle.loads(comm_data)
    return out


def test_pickling_within_a_process():
    for out in run_ranks(2, _pickling):
        assert out["same_comm"] and out["same_batch"] and out["same_backend"]
        assert out["premul"] == [6.0, 6.0]
        assert out["again"] == (0, True, True)


def _aliased_all_gather(rank, size, store):
    from commx.device_mesh import _create_torchcomm_process_group
    comm = _comm(rank, size, store, "aliased")
    pg = _create_torchcomm_process_group(comm, "aliased")
    shared = torch.full((3,), -1.0)
    dist.all_gather([shared] * size, torch.full((3,), float(rank)), group=pg)
    distinct = [torch.zeros(3) for _ in range(size)]
    dist.all_gather(distinct, torch.full((3,), rank + 10.0), group=pg)
    comm.finalize()
    return shared.tolist(), [d.tolist() for d in distinct]


def test_all_gather_into_aliased_outputs_keeps_the_last_rank():
    for shared, distinct in run_ranks(2, _aliased_all_gather):
        assert shared == [1.0] * 3  # outputs written in rank order: the last rank wins
        assert distinct == [[10.0] * 3, [11.0] * 3]


def _torch_premul_sum(rank, size, store):
    from commx.device_mesh import _create_torchcomm_process_group
    comm = _comm(rank, size, store, "premul")
    pg = _create_torchcomm_process_group(comm, "premul")
    t = torch.full((4,), rank + 1.0)
    dist.all_reduce(t, op=dist.ReduceOp.PREMUL_SUM(0.5), group=pg)
    out = torch.zeros(2)
    dist.reduce_scatter_tensor(out, torch.full((2 * size,), rank + 1.0),
                               op=dist.ReduceOp.PREMUL_SUM(0.25), group=pg)
    comm.finalize()
    return t.tolist(), out.tolist()


def test_torch_premul_sum_carries_its_factor():
    # FSDP's set_gradient_divide_factor reduces with PREMUL_SUM(1 / factor)
    for summed, scattered in run_ranks(2, _torch_premul_sum):
        assert summed == [1.5] * 4  # (1 + 2) * 0.5
        assert scattered == [0.75] * 2  # (1 + 2) * 0.25
