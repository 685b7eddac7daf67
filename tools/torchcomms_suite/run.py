"""Runs torchcomms' own Python integration tests on commx, from outside.

    python3 tools/torchcomms_suite/run.py /path/to/torchcomms/tests/integration/py \
        --out results_dir [--nproc 2] [--timeout 300] [--only AllReduceTest,SplitTest]

Each `*Test.py` file of the folder runs under `python -m torch.distributed.run` on --nproc ranks
with TEST_BACKEND=gloo TEST_DEVICE=cpu, as torchcomms' CI runs it, with a shim first on the path
(shim/torchcomms) that only renames: `torchcomms` and its submodules are commx's,
`torchcomms.tests.*` is the tests folder two levels above the given one, and the backend names passed to
new_comm / get_mem_allocator / is_backend_built go through --rename (default gloo=cpu). A file
that runs past --timeout is killed; its unfinished tests count as errored. --summarize-only
rebuilds the report from the logs of an earlier run in --out (e.g. with another
--not-applicable).

A test counts once, over all ranks: failed if it failed on any rank (subtests included), errored
if it errored in setup/teardown on any rank or never finished, skipped if it skipped itself,
passed otherwise. Skipped tests do not apply. --not-applicable names a JSON file
{"File.py::Class::test": "reason"} of failures judged specific to torchcomms' own backends; they
are listed apart with their reason and leave the pass rate's denominator.

Writes <out>/results.json, <out>/results.md and the per-rank logs (<file>.rank<N>.jsonl,
<file>.log). Layer: tools (Python; needs torch, pytest and commx importable)."""

import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_PYTHON = os.path.join(os.path.dirname(os.path.dirname(HERE)), "python")
OUTCOMES = ("passed", "failed", "errored", "skipped")


def run_file(path, args):
    stem = os.path.splitext(os.path.basename(path))[0]
    env = dict(os.environ)
    env.update({
        "TEST_BACKEND": args.backend,
        "TEST_DEVICE": args.device,
        "TORCHCOMMS_SUITE_ROOT": os.path.dirname(os.path.dirname(os.path.abspath(args.folder))),
        "TORCHCOMMS_BACKEND_RENAMES": args.rename,
        "PYTHONPATH": os.pathsep.join(
            [os.path.join(HERE, "shim"), REPO_PYTHON] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])),
        "OMP_NUM_THREADS": "1",
        "PYTHONUNBUFFERED": "1",
    })
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc_per_node={args.nproc}", os.path.join(HERE, "rank_worker.py"),
           os.path.abspath(path), os.path.abspath(args.out)]
    start = time.monotonic()
    with open(os.path.join(args.out, f"{stem}.log"), "w") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=args.out)
        try:
            proc.wait(timeout=args.timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            timed_out = True
    return stem, proc.returncode, timed_out, time.monotonic() - start


def merge_ranks(stem, out_dir, nproc):
    """{test: {"outcome", "error", "ranks_reported"}} over every rank's jsonl."""
    tests = {}
    for rank in range(nproc):
        path = os.path.join(out_dir, f"{stem}.rank{rank}.jsonl")
        if not os.path.exists(path):
            continue
        for line in open(path):
            row = json.loads(line)
            name = row["test"].split("::", 1)[-1] if "::" in row["test"] else row["test"]
            entry = tests.setdefault(name, {"outcome": None, "error": "", "reported": set()})
            if row["event"] == "collected":
                continue
            outcome, when = row["outcome"], row["when"]
            if outcome == "failed" and when != "call":
                verdict = "errored"
            elif outcome == "failed":
                verdict = "failed"
            elif outcome == "skipped":
                verdict = "skipped"
            else:
                verdict = "passed"
            if when == "call" and not row.get("subtest"):
                entry["reported"].add(rank)
            if when == "setup" and outcome == "skipped":
                entry["reported"].add(rank)
            if when in ("setup", "teardown") and outcome == "failed":
                entry["reported"].add(rank)
            rank_order = {"passed": 0, "skipped": 1, "failed": 2, "errored": 3}
            if entry["outcome"] is None or rank_order[verdict] > rank_order[entry["outcome"]]:
                entry["outcome"] = verdict
                if verdict in ("failed", "errored", "skipped"):
                    entry["error"] = f"rank {rank}: {row.get('error', '')}"
    for entry in tests.values():
        if len(entry["reported"]) < nproc and entry["outcome"] not in ("failed", "errored"):
            missing = sorted(set(range(nproc)) - entry["reported"])
            entry["outcome"] = "errored"
            entry["error"] = f"ranks {missing} never finished the test (timeout or crash)"
        entry["reported"] = sorted(entry["reported"])
    return tests


def first_log_error(stem, out_dir):
    """For a file whose tests never ran: the last exception line of its log."""
    try:
        lines = open(os.path.join(out_dir, f"{stem}.log")).read().splitlines()
    except OSError:
        return ""
    for line in reversed(lines):
        if "Error" in line or "Exception" in line:
            return line.strip()[:400]
    return lines[-1].strip()[:400] if lines else ""


def summarize(files, not_applicable):
    totals = dict.fromkeys(OUTCOMES + ("not_applicable",), 0)
    for name, f in files.items():
        counts = dict.fromkeys(OUTCOMES + ("not_applicable",), 0)
        for test, entry in f["tests"].items():
            key = f"{name}::{test}"
            if entry["outcome"] in ("failed", "errored") and key in not_applicable:
                entry["not_applicable"] = not_applicable[key]
                counts["not_applicable"] += 1
            else:
                counts[entry["outcome"]] += 1
        f["counts"] = counts
        for k, v in counts.items():
            totals[k] += v
    applicable = totals["passed"] + totals["failed"] + totals["errored"]
    totals["applicable"] = applicable
    totals["pass_rate"] = round(totals["passed"] / applicable, 4) if applicable else None
    return totals


def write_markdown(path, files, totals, meta):
    lines = [f"# torchcomms integration suite on commx (TEST_BACKEND={meta['backend']}, "
             f"TEST_DEVICE={meta['device']}, backend renames {meta['rename']}, "
             f"{meta['nproc']} ranks)", "",
             f"Command: `{meta['command']}`", "",
             "| file | passed | failed | errored | skipped | n/a | seconds |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for name in sorted(files):
        f = files[name]
        c = f["counts"]
        note = " (timed out)" if f["timed_out"] else ""
        lines.append(f"| {name}{note} | {c['passed']} | {c['failed']} | {c['errored']} | "
                     f"{c['skipped']} | {c['not_applicable']} | {f['seconds']:.0f} |")
    t = totals
    lines += [f"| **total** | **{t['passed']}** | **{t['failed']}** | **{t['errored']}** | "
              f"**{t['skipped']}** | **{t['not_applicable']}** | |", "",
              f"Applicable (not skipped, not n/a): {t['applicable']}; passed "
              f"{t['passed']} = {100 * (t['pass_rate'] or 0):.1f}%.", ""]
    bad = [(n, t_, e) for n, f in sorted(files.items()) for t_, e in sorted(f["tests"].items())
           if e["outcome"] in ("failed", "errored") and "not_applicable" not in e]
    if bad:
        lines += ["## Failures and errors (first error line)", ""]
        lines += [f"- `{n}::{t_}` ({e['outcome']}): {e['error']}" for n, t_, e in bad]
        lines.append("")
    na = [(n, t_, e) for n, f in sorted(files.items()) for t_, e in sorted(f["tests"].items())
          if "not_applicable" in e]
    if na:
        lines += ["## Not applicable to commx (failed; torchcomms-specific)", ""]
        lines += [f"- `{n}::{t_}`: {e['not_applicable']} (it said: {e['error']})"
                  for n, t_, e in na]
        lines.append("")
    open(path, "w").write("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="torchcomms' tests/integration/py folder")
    ap.add_argument("--out", required=True)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=300, help="seconds per file")
    ap.add_argument("--only", default="", help="comma-separated file stems")
    ap.add_argument("--backend", default="gloo", help="TEST_BACKEND the tests see")
    ap.add_argument("--device", default="cpu", help="TEST_DEVICE the tests see")
    ap.add_argument("--rename", default="gloo=cpu", help="backend renames, a=b,c=d")
    ap.add_argument("--not-applicable", default="", help="JSON {file::class::test: reason}")
    ap.add_argument("--summarize-only", action="store_true",
                    help="run nothing: rebuild the report from the logs already in --out")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    only = {s for s in args.only.split(",") if s}
    paths = sorted(p for p in glob.glob(os.path.join(args.folder, "*Test.py"))
                   if not only or os.path.splitext(os.path.basename(p))[0] in only)
    not_applicable = json.load(open(args.not_applicable)) if args.not_applicable else {}

    files = {}
    earlier = {}
    if args.summarize_only:
        with open(os.path.join(args.out, "results.json")) as f:
            earlier = json.load(f)["files"]
    for path in paths:
        if args.summarize_only:
            before = earlier.get(os.path.basename(path))
            if before is None:
                continue
            stem = os.path.splitext(os.path.basename(path))[0]
            rc, timed_out, seconds = before["rc"], before["timed_out"], before["seconds"]
        else:
            stem, rc, timed_out, seconds = run_file(path, args)
        tests = merge_ranks(stem, args.out, args.nproc)
        if not tests:
            tests = {"<file>": {"outcome": "errored", "reported": [],
                                "error": first_log_error(stem, args.out)}}
        files[os.path.basename(path)] = {"rc": rc, "timed_out": timed_out,
                                         "seconds": round(seconds, 1), "tests": tests}
        c = {o: sum(e["outcome"] == o for e in tests.values()) for o in OUTCOMES}
        print(f"{os.path.basename(path)}: {c} in {seconds:.0f}s"
              f"{' TIMED OUT' if timed_out else ''}", flush=True)

    totals = summarize(files, not_applicable)
    meta = {"folder": os.path.abspath(args.folder), "nproc": args.nproc,
            "backend": args.backend, "device": args.device, "rename": args.rename,
            "timeout_s": args.timeout, "command": " ".join([os.path.basename(sys.executable)] + sys.argv)}
    json.dump({"meta": meta, "totals": totals, "files": files},
              open(os.path.join(args.out, "results.json"), "w"), indent=1, sort_keys=True)
    write_markdown(os.path.join(args.out, "results.md"), files, totals, meta)
    print(json.dumps(totals))


if __name__ == "__main__":
    main()
