"""Single-process checks of the bindings: errors (code and message), bad input, ReduceOp, Work,
stores, Python backends and entry points, abort, unsafe_get_backend.
Layer: tests (Python)."""

import datetime
import types

import numpy as np
import pytest

import commx
import store_backend
from ranks import run_ranks


@pytest.fixture
def comm():
    store_backend.register()
    c = commx.new_comm("pystore", "cpu", "api", store=commx.HashStore(), rank=0, size=1,
                       timeout=datetime.timedelta(seconds=20))
    yield c
    if not c.is_aborted():
        c.finalize()


def test_comm_accessors(comm):
    assert comm.get_rank() == 0 and comm.get_size() == 1
    assert comm.get_name() == "api" and comm.get_backend() == "pystore"
    assert str(comm.get_device()) == "cpu"
    assert comm.get_timeout() == datetime.timedelta(seconds=20)
    assert isinstance(comm.unsafe_get_backend(), store_backend.StoreBackend)
    assert "pystore" in repr(comm)


def test_reduce_op():
    R = commx.ReduceOp
    assert R.SUM == R.SUM and R.SUM != R.MAX
    p = R.PREMUL_SUM(0.25)
    assert p.type is commx.RedOpType.PREMUL_SUM and p.factor == 0.25
    assert repr(p) == "ReduceOp.PREMUL_SUM(0.25)"
    assert R.AVG.type is commx.RedOpType.AVG and repr(R.BXOR) == "ReduceOp.BXOR"
    assert len({R.SUM, R.SUM, R.MIN}) == 2


def test_flight_record(comm, tmp_path, monkeypatch):
    import json
    comm.all_reduce(np.ones(8, np.float32), commx.ReduceOp.SUM)
    record = json.loads(comm.flight_record_json())
    assert record["comm"] == "api" and record["rank"] == 0 and record["size"] == 1
    assert [o["op"] for o in record["ops"]] == ["all_reduce"]
    assert record["ops"][0]["count"] == 8 and record["ops"][0]["state"] == "completed"
    monkeypatch.delenv("COMMX_TRACE_DIR", raising=False)
    assert comm.dump_flight_record() is None
    monkeypatch.setenv("COMMX_TRACE_DIR", str(tmp_path))
    path = comm.dump_flight_record()
    assert path and path.startswith(str(tmp_path))
    with open(path) as f:
        assert json.load(f)["ops"] == record["ops"]


def test_bad_timeouts_are_errors(comm):
    t = np.ones(4, np.float32)
    for bad in (float("nan"), float("inf"), 1e30, -1.0):
        with pytest.raises(commx.InvalidArgumentError, match="timeout"):
            comm.all_reduce(t, commx.ReduceOp.SUM, timeout=bad)
    comm.all_reduce(t, commx.ReduceOp.SUM, timeout=5.0)


def test_bad_input_raises_commx_errors(comm):
    t = np.zeros(4, np.float32)
    # Root out of range: the core's message names comm, rank, op and sequence number.
    with pytest.raises(commx.InvalidArgumentError) as e:
        comm.broadcast(t, 3)
    assert e.value.code == commx.ErrorCode.INVALID_ARGUMENT
    msg = str(e.value)
    assert "[comm 'api' rank 0/1]" in msg and "broadcast" in msg and "root 3" in msg
    assert isinstance(e.value, commx.Error) and isinstance(e.value, RuntimeError)
    # Mismatched dtypes.
    with pytest.raises(commx.InvalidArgumentError, match="dtype"):
        comm.all_gather_single(np.zeros(4, np.float64), t)
    # Wrong output size.
    with pytest.raises(commx.InvalidArgumentError, match="expected size"):
        comm.all_gather_single(np.zeros(3, np.float32), t)
    # Not a tensor at all.
    with pytest.raises(commx.InvalidArgumentError, match="no __dlpack__"):
        comm.all_reduce([1, 2, 3], commx.ReduceOp.SUM)
    # Not contiguous.
    with pytest.raises(commx.InvalidArgumentError, match="not contiguous"):
        comm.all_reduce(np.zeros((4, 4), np.float32)[:, 1], commx.ReduceOp.SUM)
    # Read-only arrays cannot be exported by numpy.
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    with pytest.raises(commx.InvalidArgumentError, match="__dlpack__ failed"):
        comm.all_reduce(ro, commx.ReduceOp.SUM)
    # A list where one tensor is expected to be a list.
    with pytest.raises(commx.InvalidArgumentError, match="list"):
        comm.all_gather(t, t)
    # A reduction that is not defined for the dtype.
    with pytest.raises(commx.UnsupportedError, match="bxor"):
        comm.all_reduce(t, commx.ReduceOp.BXOR)
    # Negative timeout.
    with pytest.raises(commx.InvalidArgumentError, match="timeout"):
        comm.barrier(timeout=-1)
    # A p2p op to itself.
    with pytest.raises(commx.InvalidArgumentError):
        comm.send(t, 0)


def test_unknown_backend():
    with pytest.raises(commx.UnsupportedError) as e:
        commx.new_comm("no_such_backend", "cpu", "x", store=commx.HashStore(), rank=0, size=1)
    assert e.value.code == commx.ErrorCode.UNSUPPORTED and "no_such_backend" in str(e.value)


def test_bad_device_and_rank():
    store_backend.register()
    with pytest.raises(commx.InvalidArgumentError):
        commx.new_comm("pystore", "tpu:0", "x", store=commx.HashStore(), rank=0, size=1)
    with pytest.raises(commx.InvalidArgumentError, match="rank 2"):
        commx.new_comm("pystore", "cpu", "x", store=commx.HashStore(), rank=2, size=2)


class _Failing(store_backend.StoreBackend):
    def run(self, op, async_op):
        if op.name == "all_reduce":
            raise commx.PeerFailureError("peer 3 vanished")
        if op.name == "broadcast":
            raise ValueError("python-side bad value")
        super().run(op, async_op)


def test_python_backend_errors_keep_their_code():
    commx.register_backend("failing", _Failing)
    c = commx.new_comm("failing", "cpu", "f", store=commx.HashStore(), rank=0, size=1)
    with pytest.raises(commx.PeerFailureError, match="peer 3 vanished") as e:
        c.all_reduce(np.zeros(2, np.float32), commx.ReduceOp.SUM)
    assert e.value.code == commx.ErrorCode.PEER_FAILURE
    with pytest.raises(commx.InvalidArgumentError, match="ValueError: python-side bad value"):
        c.broadcast(np.zeros(2, np.float32), 0)
    c.barrier()  # the comm is still usable
    c.finalize()


def test_abort(comm):
    assert not comm.is_aborted()
    comm.abort()
    assert comm.is_aborted()
    with pytest.raises(commx.AbortedError) as e:
        comm.barrier()
    assert e.value.code == commx.ErrorCode.ABORTED


def test_work_api(comm):
    t = np.arange(5, dtype=np.int64)
    w = comm.all_reduce(t, commx.ReduceOp.SUM, async_op=True, hints={"algorithm": "any"},
                        timeout=datetime.timedelta(seconds=5))
    w.wait_blocking()
    assert w.is_completed() and w.status() == commx.WorkStatus.COMPLETED
    assert w.exception() is None
    np.testing.assert_array_equal(t, np.arange(5))


def test_split_single_rank(comm):
    assert comm.split([], "none") is None
    sub = comm.split([0], "self", timeout=5)
    assert sub.get_size() == 1 and sub.get_name() == "self"
    t = np.ones(3, np.float32)
    sub.all_reduce(t, commx.ReduceOp.SUM)
    np.testing.assert_array_equal(t, np.ones(3, np.float32))
    with pytest.raises(commx.InvalidArgumentError, match="out of range"):
        comm.split([0, 1], "bad")


def test_entry_point_backend(monkeypatch):
    class FakeEntryPoint:
        name = "ep_backend"
        value = "fake_pkg:Backend"

        def load(self):
            return store_backend.StoreBackend

    monkeypatch.setattr(commx._backends, "_entry_point",
                        lambda name: FakeEntryPoint() if name == "ep_backend" else None)
    c = commx.new_comm("ep_backend", "cpu", "ep", store=commx.HashStore(), rank=0, size=1)
    assert "ep_backend" in commx.registered_backends()
    c.barrier()
    c.finalize()


def test_entry_point_that_registers_nothing(monkeypatch):
    ep = types.SimpleNamespace(name="empty_ep", value="x:y", load=lambda: (lambda: None))
    monkeypatch.setattr(commx._backends, "_entry_point",
                        lambda name: ep if name == "empty_ep" else None)
    with pytest.raises(commx.UnsupportedError, match="registered no backend"):
        commx.new_comm("empty_ep", "cpu", "x", store=commx.HashStore(), rank=0, size=1)


def test_stores():
    h = commx.HashStore()
    h.set("k", "v")
    h.set("b", b"\x00\x01")
    assert h.get("k") == b"v" and h.get("b") == b"\x00\x01"
    assert h.add("n", 2) == 2 and h.add("n", 3) == 5
    assert h.check(["k", "n"]) and not h.check(["missing"])
    assert h.compare_set("k", "v", "w") == b"w"
    p = commx.PrefixStore("pre", h)
    p.set("x", "1")
    assert h.get("pre/x") == b"1" and p.prefix == "pre"
    assert p.multi_get(["x"]) == [b"1"]
    p.multi_set(["y", "z"], ["2", "3"])
    assert h.get("pre/z") == b"3"
    assert p.delete_key("x") and not p.check(["x"])
    h.set_timeout(datetime.timedelta(milliseconds=200))
    with pytest.raises(commx.TimeoutError) as e:
        h.get("never")
    assert e.value.code == commx.ErrorCode.TIMEOUT


def test_tcp_and_file_store(tmp_path):
    server = commx.TCPStore("127.0.0.1", 0, is_server=True, timeout=10)
    client = commx.TCPStore("127.0.0.1", server.port, timeout=10)
    server.set("hello", "world")
    assert client.get("hello") == b"world" and client.add("c", 7) == 7
    f1 = commx.FileStore(str(tmp_path / "fs"))
    f2 = commx.FileStore(str(tmp_path / "fs"))
    f1.set("a", "b")
    assert f2.get("a") == b"b" and f1.path.endswith("fs")


class _DictStore:
    """A duck-typed c10d store in pure Python."""

    def __init__(self):
        self.d = {}

    def set(self, k, v):
        self.d[k] = bytes(v)

    def get(self, k):
        return self.d[k]

    def add(self, k, n):
        v = int(self.d.get(k, b"0")) + n
        self.d[k] = str(v).encode()
        return v

    def check(self, keys):
        return all(k in self.d for k in keys)

    def wait(self, keys, timeout):
        if not self.check(keys):
            raise TimeoutError(f"keys {keys} missing")

    def compare_set(self, k, e, d):
        cur = self.d.get(k)
        if (cur is None and e == b"") or cur == e:
            self.d[k] = d
            return d
        return cur if cur is not None else e

    def delete_key(self, k):
        return self.d.pop(k, None) is not None

    def num_keys(self):
        return len(self.d)


def test_python_store_adapter():
    store_backend.register()
    s = _DictStore()
    c = commx.new_comm("pystore", "cpu", "duck", store=s, rank=0, size=1)
    t = np.ones(2, np.float32)
    c.all_reduce(t, commx.ReduceOp.SUM)
    c.barrier()
    assert any(k.startswith("commx/duck") for k in s.d)
    c.finalize()
    with pytest.raises(commx.TimeoutError, match="missing"):
        commx.PythonStore(s).wait(["nope"], 0.1)


def _bootstrap_from_env(rank, size, store, port):
    # The store from MASTER_ADDR/MASTER_PORT (torchrun's variables), no store= argument.
    import os
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(size))
    store_backend.register()
    c = commx.new_comm("pystore", "cpu", "envcomm")
    t = np.array([rank + 1], np.int64)
    c.all_reduce(t, commx.ReduceOp.SUM)
    c.finalize()
    return int(t[0])


def test_bootstrap_from_torchrun_env():
    from ranks import free_port
    assert run_ranks(2, _bootstrap_from_env, free_port()) == [3, 3]
