#!/usr/bin/env python3
"""Instructions per small op of several commx builds, counted by valgrind (callgrind).

A count does not depend on the machine's load, so it compares the host-side cost of builds on a
shared machine where timings cannot. For each build, runs `commx-bench OP --np 1 -b 8 -e 8` at
two iteration counts and reports (count(N2) - count(N1)) / (N2 - N1) for the op's Comm entry
point (validation, lowering, selection, fingerprint, flight record, backend; one rank, so no
waiting on peers).

usage: count_instructions.py [--json FILE] OP[,OP...] NAME=BENCH [NAME=BENCH ...]
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

ENTRY = {"broadcast": "broadcast", "all_gather": "all_gather_single", "alltoall": "all_to_all_single",
         "all_to_all": "all_to_all_single", "all_reduce": "all_reduce",
         "reduce_scatter": "reduce_scatter_single", "reduce": "reduce"}


def count(bench, op, iters):
    # One op per timed iteration: "-m 1" where the build has batches (older builds time each op).
    help_text = subprocess.run([bench, "--help"], capture_output=True, text=True).stdout
    batch = ["-m", "1"] if "-m N" in help_text else []
    with tempfile.TemporaryDirectory() as d:
        subprocess.run(["valgrind", "--tool=callgrind", "--trace-children=yes",
                        f"--callgrind-out-file={d}/cg.%p", bench, op, "--np", "1", "-b", "8", "-e", "8",
                        "--backend", "cpu", "-n", str(iters), "-w", "10", *batch, "-c", "0",
                        "--inplace", "1"], capture_output=True, timeout=900)
        rank = max(glob.glob(d + "/cg.*"), key=os.path.getsize)  # the rank, not the launcher
        out = subprocess.run(["callgrind_annotate", "--threshold=100", "--auto=no", "--inclusive=yes", rank],
                             capture_output=True, text=True).stdout
    pat = re.compile(r"^\s*([\d,]+) .*commx::Comm::" + re.escape(ENTRY.get(op, op)) + r"\(")
    for line in out.splitlines():
        m = pat.match(line)
        if m:
            return int(m.group(1).replace(",", ""))
    raise SystemExit(f"no commx::Comm::{ENTRY.get(op, op)} in the profile of {bench}")


def main():
    argv = sys.argv[1:]
    json_path = None
    if argv[:1] == ["--json"]:
        json_path, argv = argv[1], argv[2:]
    ops, builds = argv[0].split(","), [b.split("=", 1) for b in argv[1:]]
    n1, n2 = 1000, 3000
    result = {}
    print(f"{'op':<12}" + "".join(f"{n:>14}" for n, _ in builds) +
          "".join(f"{n + ' vs ' + builds[0][0]:>22}" for n, _ in builds[1:]))
    for op in ops:
        per = {n: (count(b, op, n2) - count(b, op, n1)) / (n2 - n1) for n, b in builds}
        result[op] = per
        base = per[builds[0][0]]
        print(f"{op:<12}" + "".join(f"{per[n]:>14.0f}" for n, _ in builds) +
              "".join(f"{100 * (per[n] / base - 1):>+21.1f}%" for n, _ in builds[1:]))
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"unit": "instructions per op (commx::Comm entry, inclusive, 1 rank)",
                       "builds": [n for n, _ in builds], "ops": result}, f, indent=1)


if __name__ == "__main__":
    main()
