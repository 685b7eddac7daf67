#!/usr/bin/env python3
"""Small-message latency of two commx builds, side by side: runs each build's commx-bench in
turn (base, new, base, new, ...) and prints the median and minimum time per size of each, and the
change of the new build's median against the base's.

usage: compare.py BASE_BENCH NEW_BENCH REPS -- <commx-bench arguments>
"""
import statistics
import subprocess
import sys


def run(bench, args):
    out = subprocess.run([bench] + args, capture_output=True, text=True, timeout=600).stdout
    times = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) >= 13 and f[0].isdigit():
            # in-place time (the out-of-place column is N/A for all_reduce)
            t = f[9] if f[5] == "N/A" else f[5]
            times[int(f[0])] = float(t)
    return times


def main():
    base, new, reps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    args = sys.argv[sys.argv.index("--") + 1:]
    res = {"base": {}, "new": {}}
    for _ in range(reps):
        for name, bench in (("base", base), ("new", new)):
            for size, t in run(bench, args).items():
                res[name].setdefault(size, []).append(t)
    print("# commx-bench " + " ".join(args) + f"  ({reps} repetitions each, alternating)")
    print(f"{'size(B)':>8} {'base med':>9} {'new med':>9} {'change':>8} {'base min':>9} {'new min':>9}")
    ratios = []
    for size in sorted(res["base"]):
        b, n = res["base"][size], res["new"].get(size, [])
        if not n:
            continue
        bm, nm = statistics.median(b), statistics.median(n)
        ratios.append(nm / bm)
        print(f"{size:>8} {bm:>9.2f} {nm:>9.2f} {100 * (nm / bm - 1):>+7.1f}% {min(b):>9.2f} {min(n):>9.2f}")
    print(f"geometric mean of the median ratios: {100 * (statistics.geometric_mean(ratios) - 1):+.1f}%")


if __name__ == "__main__":
    main()
