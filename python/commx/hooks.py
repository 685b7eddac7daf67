"""torchcomms.hooks.FlightRecorderHook on commx: a bounded record of a comm's last ops, kept
from its pre/post hooks, dumped in the entry shape of torch's flight recorder. torch.distributed
attaches one to every comm it makes when `dist.config.use_torchcomms` is on (max_entries from
TORCH_FR_BUFFER_SIZE, 0 = off). commx's own dumps of failed ops (COMMX_TRACE_DIR,
commx.flight_recorder) do not need this hook. Layer: Python bindings."""

import collections
import json
import threading

from .flight_recorder import FR_VERSION

__all__ = ["FlightRecorderHook"]


class FlightRecorderHook:
    """Records the last `max_entries` ops of each comm it is registered with."""

    def __init__(self, max_entries=2048):
        if max_entries < 0:
            raise ValueError(f"FlightRecorderHook: max_entries must be >= 0, not {max_entries}")
        self.max_entries = int(max_entries)
        self._entries = collections.deque(maxlen=self.max_entries or None)
        self._by_op = {}  # (comm name, op id) -> entry, until its post hook
        self._handles = []
        self._lock = threading.Lock()
        self._next_record_id = 0

    def register_with_comm(self, comm):
        """Starts recording `comm`'s ops (a no-op when max_entries is 0)."""
        if self.max_entries == 0:
            return
        name, rank = comm.get_name(), comm.get_rank()

        def pre(op, op_id, args):
            op_name = getattr(op, "value", op)
            entry = {"record_id": None, "pg_id": name, "process_group": (name, name),
                     "collective_seq_id": op_id, "profiling_name": f"commx:{op_name}",
                     "input_dtypes": [args.dtype], "input_sizes": [[args.count]],
                     "root": args.root, "rank": rank, "state": "scheduled"}
            with self._lock:
                entry["record_id"] = self._next_record_id
                self._next_record_id += 1
                self._entries.append(entry)
                self._by_op[(name, op_id)] = entry

        def post(op_id, args):
            with self._lock:
                entry = self._by_op.pop((name, op_id), None)
                if entry is not None:
                    entry["state"] = "started"  # issued; a Work's completion is not a hook

        self._handles += [comm.register_pre_hook(pre), comm.register_post_hook(post)]

    def unregister(self):
        """Stops recording every comm this hook was registered with."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def entries(self):
        with self._lock:
            return [dict(e) for e in self._entries]

    def dump_json(self):
        """{"version", "entries"} as a JSON string, oldest entry first."""
        return json.dumps({"version": FR_VERSION, "entries": self.entries()})
