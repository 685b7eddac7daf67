"""torchcomms.hooks.FlightRecorderHook on commx: a bounded record of the ops of the comms it is
registered with, in the entry format of torch's flight recorder (`version` 2.10, what
`torch.distributed.flight_recorder` reads), so the same analysis runs on it:

    recorder = commx.hooks.FlightRecorderHook(max_entries=1024)
    recorder.register_with_comm(comm)          # comms split from it are registered too
    ...
    trace = json.loads(recorder.dump_json())   # or recorder.dump_file(rank): a pickle

Each entry has the op's name as torchcomms writes it ("nccl:all_reduce", "nccl:send 0->1"),
its input/output shapes and dtypes, its sequence numbers in its comm (collectives and
point-to-point counted apart, as torch does) and its state (scheduled, started, completed).
torch.distributed attaches one to every comm it makes when `dist.config.use_torchcomms` is on
(max_entries from TORCH_FR_BUFFER_SIZE, 0 = off). commx's own dumps of failed ops
(COMMX_TRACE_DIR, commx.flight_recorder) need no hook. Layer: Python bindings."""

import collections
import itertools
import json
import os
import pickle
import threading
import time

from . import _observers
from .flight_recorder import FR_VERSION

__all__ = ["FlightRecorderHook"]

_P2P = frozenset({"send", "recv"})
# Ops whose first argument is the output (a tensor or a list of them), the second the input.
_OUTPUT_FIRST = frozenset({
    "all_gather", "all_gather_v", "all_gather_single", "reduce_scatter", "reduce_scatter_v",
    "reduce_scatter_single", "all_to_all", "all_to_all_single", "all_to_all_v_single", "gather",
    "gather_single", "scatter"})
# TORCHCOMM_FR_DUMP_TEMP_FILE names the file dump_file writes (torchcomms' variable).
DUMP_FILE_ENV = "TORCHCOMM_FR_DUMP_TEMP_FILE"


def _tensors(value):
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return [value] if hasattr(value, "shape") and hasattr(value, "dtype") else []


def _dtype_name(t):
    # torch's ScalarType names ("Float", "Long", "BFloat16"), as torch's recorder writes them
    try:
        return t.type().rsplit(".", 1)[-1].replace("Tensor", "")
    except (AttributeError, TypeError):
        return str(t.dtype)


def _inputs_outputs(op, args):
    if not args:
        return [], []
    if op in _OUTPUT_FIRST:
        return _tensors(args[1] if len(args) > 1 else []), _tensors(args[0])
    if op == "recv":
        return [], _tensors(args[0])
    if op == "send":
        return _tensors(args[0]), []
    if op in ("all_reduce", "reduce", "broadcast"):
        return _tensors(args[0]), _tensors(args[0])
    return [], []


def _peer(op, args, kwargs):
    for key in ("dst", "src", "peer"):
        if key in kwargs:
            return kwargs[key]
    return args[1] if len(args) > 1 else "?"


class _CommState:
    def __init__(self, pg_id):
        self.pg_id = pg_id
        self.ops = itertools.count()
        self.collectives = itertools.count(1)
        self.p2p = itertools.count(1)


class FlightRecorderHook:
    """Records the last `max_entries` ops of each comm it is registered with (and of the comms
    split from them). `isolated` is accepted for torchcomms' signature: every hook keeps its own
    buffer here."""

    def __init__(self, max_entries=2048, isolated=False):
        if max_entries < 0:
            raise ValueError(f"FlightRecorderHook: max_entries must be >= 0, not {max_entries}")
        self.max_entries = int(max_entries)
        self.isolated = isolated
        self._entries = collections.deque(maxlen=self.max_entries or None)
        self._comms = {}  # id(comm) -> (comm, _CommState)
        self._lock = threading.Lock()
        self._records = itertools.count()

    # -- registration ---------------------------------------------------------------------------
    def register_with_comm(self, comm):
        """Starts recording `comm`'s ops (a no-op when max_entries is 0)."""
        if self.max_entries == 0 or id(comm) in self._comms:
            return
        with self._lock:
            self._comms[id(comm)] = (comm, _CommState(len(self._comms)))
        _observers.add(comm, self)

    def unregister(self):
        """Stops recording every comm this hook was registered with."""
        with self._lock:
            comms = [c for c, _ in self._comms.values()]
            self._comms.clear()
        for comm in comms:
            _observers.remove(comm, self)

    def is_enabled(self):
        """Whether the hook records some comm."""
        return bool(self._comms)

    # -- what the observers call ----------------------------------------------------------------
    def before(self, comm, op, args, kwargs):
        entry_of = self._comms.get(id(comm))
        if entry_of is None:
            return None
        _, state = entry_of
        inputs, outputs = _inputs_outputs(op, args)
        is_p2p = op in _P2P
        name = f"nccl:{op}"
        if is_p2p:
            peer, rank = _peer(op, args, kwargs), comm.get_rank()
            name += f" {rank}->{peer}" if op == "send" else f" {rank}<-{peer}"
        timeout = comm.get_timeout()
        entry = {
            "record_id": None, "pg_id": state.pg_id,
            "process_group": [comm.get_name(), comm.get_name()],
            "collective_seq_id": 0 if is_p2p else next(state.collectives),
            "p2p_seq_id": next(state.p2p) if is_p2p else 0,
            "op_id": next(state.ops), "profiling_name": name,
            "input_sizes": [list(t.shape) for t in inputs],
            "input_dtypes": [_dtype_name(t) for t in inputs],
            "output_sizes": [list(t.shape) for t in outputs],
            "output_dtypes": [_dtype_name(t) for t in outputs],
            "time_created_ns": time.time_ns(), "state": "scheduled", "is_p2p": is_p2p,
            "retired": False,
            "timeout_ms": int(timeout.total_seconds() * 1000) if timeout else 600000,
            "frames": [],
        }
        with self._lock:
            entry["record_id"] = next(self._records)
            self._entries.append(entry)
        return entry, time.monotonic()

    def after(self, comm, token, result, failed):
        if token is None:
            return
        entry, started = token
        if entry["profiling_name"] == "nccl:split" and result is not None:
            self.register_with_comm(result)  # torchcomms' split hook: children are recorded
        if failed:
            entry["state"] = "started"  # issued, never completed
            return
        work = result if hasattr(result, "is_completed") else None
        if work is None or work.is_completed():
            entry["state"] = "completed"
            entry["duration_ms"] = (time.monotonic() - started) * 1000.0
        else:
            entry["state"] = "started"
            entry["_work"] = work

    # -- reading --------------------------------------------------------------------------------
    def size(self):
        """The number of entries recorded since the last reset (at most max_entries)."""
        return len(self._entries)

    def reset(self):
        """Forgets every entry recorded so far."""
        with self._lock:
            self._entries.clear()

    def entries(self, include_completed=True):
        out = []
        with self._lock:
            snapshot = list(self._entries)
        for entry in snapshot:
            work = entry.get("_work")
            if work is not None and work.is_completed():
                entry["state"] = "completed"
                entry.pop("_work", None)
            if include_completed or entry["state"] != "completed":
                out.append({k: v for k, v in entry.items() if not k.startswith("_")})
        return out

    def trace(self, include_completed=True):
        """The recorder's contents as torch's recorder lays them out."""
        with self._lock:
            comms = [c for c, _ in self._comms.values()]
        pg_config = {c.get_name(): {"name": c.get_name(), "desc": c.get_name(),
                                    "ranks": str(list(range(c.get_size())))} for c in comms}
        return {"version": FR_VERSION, "pg_config": pg_config, "pg_status": {},
                "entries": self.entries(include_completed)}

    def dump_json(self, include_completed=True):
        """trace() as a JSON string, oldest entry first."""
        return json.dumps(self.trace(include_completed))

    def dump_file(self, rank, include_completed=True):
        """Writes trace() (pickled, as torch's recorder writes its dumps) to the file named by
        TORCHCOMM_FR_DUMP_TEMP_FILE, else ./commx_fr_trace_<rank>; returns the path."""
        path = os.environ.get(DUMP_FILE_ENV) or f"commx_fr_trace_{rank}"
        trace = self.trace(include_completed)
        trace["rank"] = rank
        with open(path, "wb") as f:
            pickle.dump(trace, f)
        return path

