#!/usr/bin/env python3
"""Compares commx-bench GPU sweeps of two builds ("base" and "new"), each run several times.

Usage: latency_ab.py --md ab.md --json ab.json base=run1.json new=run2.json base=run3.json ...
For every (backend, op, dtype, mode, bytes) row: the median time over each side's runs, the new
side's change in percent, and the per-run times, so run-to-run noise shows next to the change.
Rows with wrong elements are flagged. Summary lines: the mean change per backend, dtype and mode,
over all sizes.
"""
import argparse
import json
import statistics
from collections import defaultdict


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--md", required=True)
    ap.add_argument("--json", required=True)
    ap.add_argument("runs", nargs="+", help="side=file.json")
    a = ap.parse_args()
    times = defaultdict(lambda: defaultdict(list))  # key -> side -> [us]
    wrong = defaultdict(int)
    for spec in a.runs:
        side, path = spec.split("=", 1)
        try:
            with open(path) as f:
                rows = json.load(f)["rows"]
        except (OSError, ValueError, KeyError):
            continue  # a run that failed: its log says why
        for r in rows:
            key = (r["backend"], r["op"], r["dtype"], r["mode"], int(r["bytes"]))
            times[key][side].append(float(r["time_us"]))
            wrong[key] += int(r.get("wrong", 0))
    out, lines = [], []
    lines.append("| backend | op | dtype | mode | bytes | base us | new us | change | base runs | new runs | wrong |")
    lines.append("|---|---|---|---|---:|---:|---:|---:|---|---|---:|")
    per_mode = defaultdict(list)
    for key in sorted(times, key=lambda k: (k[0], k[1], k[2], k[3], k[4])):
        base, new = times[key].get("base", []), times[key].get("new", [])
        if not base or not new:
            continue
        mb, mn = statistics.median(base), statistics.median(new)
        change = (mn - mb) / mb * 100.0
        per_mode[(key[0], key[2], key[3])].append(change)
        out.append({"backend": key[0], "op": key[1], "dtype": key[2], "mode": key[3],
                    "bytes": key[4], "base_us": mb, "new_us": mn, "change_pct": change,
                    "base_runs": base, "new_runs": new, "wrong": wrong[key]})
        lines.append(f"| {key[0]} | {key[1]} | {key[2]} | {key[3]} | {key[4]} | {mb:.2f} | {mn:.2f} | "
                     f"{change:+.1f}% | {' '.join(f'{t:.2f}' for t in base)} | "
                     f"{' '.join(f'{t:.2f}' for t in new)} | {wrong[key]} |")
    lines.append("")
    for (backend, dtype, mode), ch in sorted(per_mode.items()):
        lines.append(f"- {backend} {dtype} {mode}: mean change {statistics.mean(ch):+.2f}% over {len(ch)} "
                     f"sizes (min {min(ch):+.1f}%, max {max(ch):+.1f}%)")
    with open(a.md, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(a.json, "w") as f:
        json.dump({"rows": out}, f, indent=1)
    return 0 if out else 1


if __name__ == "__main__":
    raise SystemExit(main())
