#!/usr/bin/env python3
"""Small-message latency of two commx builds, side by side (the command these results were made
with). Now a front for tools/latency/compare_builds.py, which compares any number of builds.

usage: compare.py BASE_BENCH NEW_BENCH REPS -- <commx-bench arguments>
"""
import os
import sys

if __name__ == "__main__":
    base, new, reps = sys.argv[1:4]
    tool = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "..", "tools",
                        "latency", "compare_builds.py")
    os.execv(sys.executable, [sys.executable, tool, reps, "base=" + base, "new=" + new] +
             sys.argv[4:])
