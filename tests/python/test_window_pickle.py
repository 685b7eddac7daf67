"""Pickling a window (comm.new_window()) inside one process, as comms pickle: a reference to the
live window; once the window object is gone, a window over the same buffer (same size, dtype and
memory, still usable for puts), the same object on every later unpickling. 2 ranks, values
checked. Layer: tests (Python)."""

from datetime import timedelta

import pytest

torch = pytest.importorskip("torch")

import commx  # noqa: E402
from ranks import run_ranks  # noqa: E402

T = timedelta(seconds=20)


def _window_pickle(rank, size, store):
    import gc
    import pickle
    comm = commx.new_comm("cpu", "cpu", "win_pickle", store=store, rank=rank, size=size, timeout=T)
    win = comm.new_window()
    buf = torch.zeros(8, dtype=torch.float32)
    win.tensor_register(buf)
    data = pickle.dumps(win)
    same = pickle.loads(data)
    out = {"same": same is win, "backend": same.get_comm_backend() is win.get_comm_backend()}
    mine_ptr = win.map_remote_tensor(rank).data_ptr()
    size_bytes = win.get_size()
    del win, same
    gc.collect()
    again = pickle.loads(data)  # the window object is gone: one over the same buffer
    out["again"] = (again.get_size() == size_bytes, again.dtype, again.shape,
                    again.map_remote_tensor(rank).data_ptr() == mine_ptr,
                    pickle.loads(data) is again)
    # still a working window: each rank puts its values into the peer's buffer
    peer = (rank + 1) % size
    again.put(torch.full((4,), 10.0 + rank), peer, 4 * rank, False)
    comm.barrier(False)
    out["buf"] = buf.tolist()
    comm.barrier(False)
    comm.finalize()
    return out


def test_window_pickles_to_a_reference_kept_with_its_comm():
    for rank, out in enumerate(run_ranks(2, _window_pickle)):
        assert out["same"] and out["backend"]
        assert out["again"] == (True, torch.float32, [8], True, True)
        src = (rank - 1) % 2
        want = [0.0] * 8
        want[4 * src:4 * src + 4] = [10.0 + src] * 4
        assert out["buf"] == want, (rank, out["buf"])
