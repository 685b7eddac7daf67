"""commx-analyze on synthetic dumps: a rank that never entered an op, a mismatch, a timeout."""
import json
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1]


def op(seq, name="all_reduce", count=1024, state="completed", root=-1, error=None):
    o = {"seq": seq, "op": name, "dtype": "float", "count": count, "root": root, "start_us": seq, "state": state}
    if error:
        o["error"] = error
    return o


def write(d, rank, ops, size=3, comm="world"):
    with open(os.path.join(d, f"{comm}.rank{rank}.json"), "w") as f:
        json.dump({"comm": comm, "rank": rank, "size": size, "backend": "cpu", "ops": ops}, f)


def run(d):
    p = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True)
    return p.returncode, p.stdout


def main():
    with tempfile.TemporaryDirectory() as d:
        for r in range(3):
            write(d, r, [op(1), op(2)])
        code, out = run(d)
        assert code == 0, out
        assert "ok" in out

    with tempfile.TemporaryDirectory() as d:
        write(d, 0, [op(1), op(2, state="timed_out", error="Timeout: waiting for rank 2")])
        write(d, 1, [op(1), op(2, state="timed_out", error="Timeout: waiting for rank 2")])
        write(d, 2, [op(1)])
        code, out = run(d)
        assert code == 1, out
        assert "ranks [2] never entered all_reduce #2" in out, out
        assert "rank 0 timed out in all_reduce #2" in out, out

    with tempfile.TemporaryDirectory() as d:
        write(d, 0, [op(1, count=10)], size=2)
        write(d, 1, [op(1, count=12)], size=2)
        code, out = run(d)
        assert code == 1 and "op #1 disagrees" in out, out

    with tempfile.TemporaryDirectory() as d:
        write(d, 0, [op(1, state="started")], size=2)
        code, out = run(d)
        assert code == 1 and "ranks [1] left no dump" in out and "rank 0 is stuck" in out, out
    print("analyze_test: 4 passed, 0 failed")


if __name__ == "__main__":
    main()
