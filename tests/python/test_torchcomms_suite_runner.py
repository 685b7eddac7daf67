"""tools/torchcomms_suite/run.py on a two-file suite written here in torchcomms' layout: the
rename-only shim (`torchcomms` -> commx, `torchcomms.tests.integration.*` -> the suite, backend
gloo -> cpu), torch.distributed routing a "gloo" group through it (dist.config.use_torchcomms),
and the report: passed/failed/errored/skipped per test over both ranks, the first error line, a
file that does not import, and --not-applicable. Layer: tests (Python)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(REPO, "tools", "torchcomms_suite", "run.py")

HELPERS = '''
import os
from torchcomms import new_comm


def make_comm(name):
    return new_comm(os.environ["TEST_BACKEND"], os.environ["TEST_DEVICE"], name=name)
'''

SUITE = '''
import os
import unittest

import torch
import torch.distributed as dist
import torchcomms
from torchcomms import ReduceOp
from torchcomms.tests.integration.helpers.MiniHelpers import make_comm


class MiniTest(unittest.TestCase):
    def setUp(self):
        self.comm = make_comm(self.id().split(".")[-1])

    def tearDown(self):
        self.comm.finalize()

    def test_all_reduce(self):
        t = torch.full((4,), float(self.comm.get_rank() + 1))
        self.comm.all_reduce(t, ReduceOp.SUM, False)
        self.assertEqual(t.tolist(), [3.0] * 4)

    def test_wrong_on_rank_1(self):
        self.assertEqual(self.comm.get_rank(), 0, "rank 1 disagrees")

    @unittest.skipIf(os.getenv("TEST_BACKEND") == "gloo", "not for gloo")
    def test_skipped_for_gloo(self):
        raise AssertionError("must not run")

    def test_backend_is_renamed(self):
        self.assertEqual(self.comm.get_backend(), "cpu")
        self.assertIs(torchcomms.ReduceOp, __import__("commx").ReduceOp)


class C10dRoutingTest(unittest.TestCase):
    def test_gloo_group_runs_on_commx(self):
        dist.config.use_torchcomms = True
        dist.init_process_group(backend=os.environ["TEST_BACKEND"])
        try:
            backend = dist.group.WORLD._get_backend(torch.device("cpu"))
            self.assertEqual(type(backend).__module__, "commx.torch._wrapper")
            t = torch.full((3,), float(dist.get_rank() + 1))
            dist.all_reduce(t)
            self.assertEqual(t.tolist(), [3.0] * 3)
        finally:
            dist.destroy_process_group()
'''


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(textwrap.dedent(text))


def test_runner_reports_a_small_suite(tmp_path):
    root = tmp_path / "integration"
    for pkg in ("py", "helpers"):
        _write(str(root / pkg / "__init__.py"), "")
    _write(str(root / "helpers" / "MiniHelpers.py"), HELPERS)
    _write(str(root / "py" / "MiniTest.py"), SUITE)
    _write(str(root / "py" / "BrokenTest.py"), "from torchcomms import no_such_name\n")
    na = tmp_path / "na.json"
    na.write_text(json.dumps({"MiniTest.py::MiniTest::test_wrong_on_rank_1": "judged so here"}))
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, RUN, str(root / "py"), "--out", str(out),
                           "--timeout", "120", "--not-applicable", str(na)],
                          env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((out / "results.json").read_text())
    mini = result["files"]["MiniTest.py"]["tests"]
    assert mini["MiniTest::test_all_reduce"]["outcome"] == "passed"
    assert mini["MiniTest::test_backend_is_renamed"]["outcome"] == "passed"
    assert mini["C10dRoutingTest::test_gloo_group_runs_on_commx"]["outcome"] == "passed"
    assert mini["MiniTest::test_skipped_for_gloo"]["outcome"] == "skipped"
    wrong = mini["MiniTest::test_wrong_on_rank_1"]
    assert wrong["outcome"] == "failed" and "rank 1 disagrees" in wrong["error"]
    assert wrong["not_applicable"] == "judged so here"
    broken = result["files"]["BrokenTest.py"]["tests"]
    assert [e["outcome"] for e in broken.values()] == ["errored"]
    assert "no_such_name" in next(iter(broken.values()))["error"]
    t = result["totals"]
    assert (t["passed"], t["failed"], t["errored"], t["skipped"], t["not_applicable"]) == \
        (3, 0, 1, 1, 1)
    assert t["applicable"] == 4 and t["pass_rate"] == 0.75
    md = (out / "results.md").read_text()
    assert "| MiniTest.py | 3 | 0 | 0 | 1 | 1 |" in md
    assert "no_such_name" in md and "judged so here" in md
