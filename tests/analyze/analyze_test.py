"""commx-analyze on synthetic dumps: a rank that never entered an op, a mismatch, a timeout;
malformed and truncated dumps reported as such (exit 3), never with a traceback."""
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


def run(d, with_err=False):
    p = subprocess.run([sys.executable, TOOL, d], capture_output=True, text=True, timeout=30)
    assert "Traceback" not in p.stderr, p.stderr
    return (p.returncode, p.stdout, p.stderr) if with_err else (p.returncode, p.stdout)


GOOD = {"comm": "world", "rank": 0, "size": 1, "backend": "cpu", "ops": []}
# (file content, part of the message): each a dump commx-analyze must refuse by name.
MALFORMED = [
    (b"", "truncated or not JSON"),
    (json.dumps({**GOOD, "ops": [{"seq": 1}]}).encode()[:40], "truncated or not JSON"),
    (b"\xff\xfe\x00garbage", "truncated or not JSON"),
    (b"[1, 2, 3]", "not a JSON object"),
    (b"[" * 100000, "truncated or not JSON"),
    (json.dumps({"rank": 0, "size": 1, "ops": []}).encode(), "no 'comm'"),
    (json.dumps({**GOOD, "rank": "0"}).encode(), "'rank' is '0', not an integer"),
    (json.dumps({**GOOD, "rank": 3, "size": 2}).encode(), "rank 3 of size 2"),
    (json.dumps({**GOOD, "ops": {"seq": 1}}).encode(), "'ops'"),
    (json.dumps({**GOOD, "ops": [None]}).encode(), "op 0: not a JSON object"),
    (json.dumps({**GOOD, "ops": [{"seq": 1, "op": "all_reduce"}]}).encode(), "op 0: no 'dtype'"),
    (json.dumps({**GOOD, "ops": [op(1, count="many")]}).encode(), "'count' is 'many'"),
    (json.dumps({**GOOD, "ops": [op(1, state="dancing")]}).encode(), "unknown state 'dancing'"),
]


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
    for content, why in MALFORMED:
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "world.rank0.json"), "wb") as f:
                f.write(content)
            code, out, err = run(d, with_err=True)
            assert code == 3, (content[:60], code, out, err)
            assert "malformed dump" in err and "world.rank0.json" in err and why in err, (why, err)

    # One rank's dump truncated (it died while writing): the others are still analysed.
    with tempfile.TemporaryDirectory() as d:
        write(d, 0, [op(1), op(2, state="timed_out", error="Timeout")], size=2)
        with open(os.path.join(d, "world.rank1.json"), "w") as f:
            f.write('{"comm": "world", "rank": 1, "size": 2, "ops": [{"seq": 1, "op": "all_red')
        code, out, err = run(d, with_err=True)
        assert code == 3, (code, out, err)
        assert "rank 0 timed out in all_reduce #2" in out and "truncated" in err, (out, err)
    print(f"analyze_test: {5 + len(MALFORMED)} passed, 0 failed")


if __name__ == "__main__":
    main()
