"""commx flight-recorder dumps -> the trace files of torch's flight-recorder tooling.

    python -m commx.flight_recorder $COMMX_TRACE_DIR OUT_DIR
    python -m torch.distributed.flight_recorder.fr_trace OUT_DIR

commx writes one JSON dump per comm and rank (`<comm>.rank<r>.json`: the comm's last ops with
their state); torch's `fr_trace` reads one pickle per launcher rank (`rank_<r>`) holding every
group's entries and the groups' members. Each comm becomes a group named after the comm, its
members the launcher ranks in the dump's `world_ranks`. commx numbers every op of a comm in one
sequence; torch counts collectives and point-to-point ops apart, so the converter does. Layer:
Python (tools; reads files, needs no comm).
"""

import argparse
import glob
import json
import os
import pickle
import sys

FR_VERSION = "2.10"
_P2P = {"send", "recv"}
# commx op names that torch's tooling knows under another name.
_TORCH_NAMES = {"batch_p2p": "coalesced"}
_STATES = {"enqueued": "scheduled", "started": "started", "completed": "completed",
           "failed": "completed", "timed_out": "started"}


def _entries(dump, pg_id, first_record_id):
    """torch flight-recorder entries for one commx dump (a comm on one rank)."""
    out, collectives, p2p = [], 0, 0
    rank = dump["rank"]
    for i, op in enumerate(dump["ops"]):
        name = _TORCH_NAMES.get(op["op"], op["op"])
        profiling = f"commx:{name}"
        if name in _P2P:
            p2p += 1
            peer = op["root"]
            profiling += f" {rank}->{peer}" if name == "send" else f" {rank}<-{peer}"
        elif name != "coalesced":
            collectives += 1
        sizes = [[op["count"]]] if op["count"] else [[0]]
        dtype = op["dtype"]
        state = _STATES.get(op["state"], "started")
        start_ns = int(op.get("start_us", 0)) * 1000
        out.append({
            "record_id": first_record_id + i,
            "pg_id": pg_id,
            "process_group": (dump["comm"], dump["comm"]),
            "collective_seq_id": collectives,
            "p2p_seq_id": p2p,
            "op_id": op["seq"],
            "profiling_name": profiling,
            "time_created_ns": start_ns,
            "time_discovered_started_ns": start_ns if state != "scheduled" else None,
            "time_discovered_completed_ns": start_ns if state == "completed" else None,
            "input_sizes": sizes,
            "input_dtypes": [dtype],
            "output_sizes": sizes,
            "output_dtypes": [dtype],
            "state": state,
            "retired": state == "completed",
            "timeout_ms": 0,
            "is_p2p": name in _P2P,
            "frames": [],
            "commx_state": op["state"],
            "commx_error": op.get("error", ""),
        })
    return out


def convert(trace_dir, out_dir):
    """Writes `out_dir/rank_<r>` for every launcher rank with a dump; returns the paths."""
    per_rank = {}
    paths = sorted(glob.glob(os.path.join(trace_dir, "*.rank*.json")))
    if not paths:
        raise FileNotFoundError(f"no commx dumps (<comm>.rank<r>.json) in {trace_dir}")
    for pg_id, path in enumerate(paths):
        with open(path) as f:
            dump = json.load(f)
        members = dump.get("world_ranks") or list(range(dump["size"]))
        me = members[dump["rank"]]
        slot = per_rank.setdefault(me, {"entries": [], "pg_config": {}})
        slot["entries"] += _entries(dump, pg_id, len(slot["entries"]))
        slot["pg_config"][dump["comm"]] = {"name": dump["comm"], "desc": dump["comm"],
                                           "ranks": str(members)}
    os.makedirs(out_dir, exist_ok=True)
    written = []
    for rank, slot in sorted(per_rank.items()):
        path = os.path.join(out_dir, f"rank_{rank}")
        with open(path, "wb") as f:
            pickle.dump({"version": FR_VERSION, "pg_config": slot["pg_config"],
                         "pg_status": {}, "entries": slot["entries"]}, f)
        written.append(path)
    return written


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m commx.flight_recorder",
        description="Converts commx flight-recorder dumps (COMMX_TRACE_DIR) into the trace files "
                    "of torch.distributed.flight_recorder (fr_trace).")
    parser.add_argument("trace_dir", help="directory of commx dumps (<comm>.rank<r>.json)")
    parser.add_argument("out_dir", help="where to write rank_<r> files for fr_trace")
    args = parser.parse_args(argv)
    for path in convert(args.trace_dir, args.out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
