"""One rank of one test file: runs pytest on it and writes every test's outcome to
<out>/<file>.rank<RANK>.jsonl as it happens (so a hang or a crash keeps what finished).
Started by run.py under torchrun. Layer: tools."""

import json
import os
import sys

import pytest


class _Recorder:
    def __init__(self, path):
        self._out = open(path, "w", buffering=1)

    def _write(self, **row):
        self._out.write(json.dumps(row) + "\n")

    def pytest_collection_modifyitems(self, items):
        for item in items:
            self._write(event="collected", test=item.nodeid)

    def pytest_collectreport(self, report):
        if report.failed:
            self._write(event="report", test=f"{report.nodeid}::<import>", when="collect",
                        outcome="failed", error=_first_error(report))

    def pytest_runtest_logreport(self, report):
        if report.when == "call" or report.outcome != "passed":
            self._write(event="report", test=report.nodeid, when=report.when,
                        outcome=report.outcome, subtest=_is_subtest(report),
                        error=_first_error(report) if report.outcome != "passed" else "")


def _is_subtest(report):
    return type(report).__name__ == "SubtestReport" or bool(getattr(report, "context", None))


def _first_error(report):
    """The line that says what went wrong: the exception line of the crash, else the last
    line of the report."""
    longrepr = report.longrepr
    if longrepr is None:
        return ""
    if isinstance(longrepr, tuple):  # skips: (file, line, reason)
        return str(longrepr[-1])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and crash.message:
        return crash.message.strip().splitlines()[0][:400]
    lines = [line for line in str(longrepr).splitlines() if line.strip()]
    return lines[-1][:400] if lines else ""


def main():
    test_file, out_dir = sys.argv[1], sys.argv[2]
    rank = os.environ.get("RANK", "0")
    stem = os.path.splitext(os.path.basename(test_file))[0]
    recorder = _Recorder(os.path.join(out_dir, f"{stem}.rank{rank}.jsonl"))
    code = pytest.main([test_file, "-q", "-p", "no:cacheprovider", "-rN",
                        "--import-mode=importlib"], plugins=[recorder])
    sys.exit(int(code))


if __name__ == "__main__":
    main()
