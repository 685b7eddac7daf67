#!/usr/bin/env python3
"""Small-message latency of several commx builds, side by side.

Runs each build's commx-bench in turn (a, b, c, a, b, c, ...) so that load changes hit every build
alike, and prints per size the median and minimum time of each build and the change of each
build's median against the first build's, plus the geometric mean of those changes.

usage: compare_builds.py [--json FILE] REPS NAME=BENCH [NAME=BENCH ...] -- <commx-bench arguments>
"""
import json
import statistics
import subprocess
import sys


def run(bench, args):
    out = subprocess.run([bench] + args, capture_output=True, text=True, timeout=600).stdout
    times = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            # in-place time where the out-of-place column is N/A (all_reduce, broadcast)
            t = f[9] if f[5] == "N/A" else f[5]
            times[int(f[0])] = float(t)
    return times


def main():
    argv = sys.argv[1:]
    json_path = None
    if argv[:1] == ["--json"]:
        json_path, argv = argv[1], argv[2:]
    sep = argv.index("--")
    reps, builds, args = int(argv[0]), [b.split("=", 1) for b in argv[1:sep]], argv[sep + 1:]
    res = {name: {} for name, _ in builds}
    for _ in range(reps):
        for name, bench in builds:
            for size, t in run(bench, args).items():
                res[name].setdefault(size, []).append(t)
    base = builds[0][0]
    print("# commx-bench " + " ".join(args) + f"  ({reps} repetitions each, alternating)")
    head = f"{'size(B)':>8}" + "".join(f" {n + ' med':>12} {n + ' min':>12}" for n, _ in builds)
    head += "".join(f" {n + ' vs ' + base:>14}" for n, _ in builds[1:])
    print(head)
    ratios = {n: [] for n, _ in builds[1:]}
    rows = []
    for size in sorted(res[base]):
        med = {n: statistics.median(res[n][size]) for n, _ in builds if res[n].get(size)}
        low = {n: min(res[n][size]) for n, _ in builds if res[n].get(size)}
        if len(med) != len(builds):
            continue
        line = f"{size:>8}" + "".join(f" {med[n]:>12.2f} {low[n]:>12.2f}" for n, _ in builds)
        for n, _ in builds[1:]:
            ratios[n].append(med[n] / med[base])
            line += f" {100 * (med[n] / med[base] - 1):>+13.1f}%"
        print(line)
        rows.append({"bytes": size, "median_us": med, "min_us": low})
    for n, r in ratios.items():
        print(f"geometric mean of the median ratios, {n} vs {base}: "
              f"{100 * (statistics.geometric_mean(r) - 1):+.1f}%")
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"args": args, "reps": reps, "builds": [n for n, _ in builds], "rows": rows,
                       "geomean_change_vs_first": {n: statistics.geometric_mean(r) - 1
                                                   for n, r in ratios.items()}}, f, indent=1)


if __name__ == "__main__":
    main()
