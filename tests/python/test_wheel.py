"""The wheel as a user gets it: `pip wheel ./python` over the existing native build (no second
native compile), installed into a fresh venv outside the source tree; then the console scripts
commx-run, commx-bench and commx-analyze run from that venv's bin/ and the cpu tuning table sits
beside libcommx. Costs the extension's compile when ccache has not seen it (about a minute on 2
cores), else seconds. Layer: tests (packaging)."""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NATIVE = os.path.join(ROOT, os.environ.get("BUILD_DIR", "build"))
LIMIT_S = 900


def _have_native_build():
    return os.path.isfile(os.path.join(NATIVE, "lib", "libcommx.so")) and all(
        os.path.isfile(os.path.join(NATIVE, "bin", t)) for t in ("commx-run", "commx-bench"))


pytestmark = pytest.mark.skipif(not _have_native_build(),
                                reason=f"no native build in {NATIVE} (scripts/build.sh makes it)")


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    dist, build = tmp / "dist", tmp / "build"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
         "-w", str(dist), "-C", f"build-dir={build}",
         "-C", f"cmake.define.COMMX_NATIVE_BUILD_DIR={NATIVE}", os.path.join(ROOT, "python")],
        check=True, timeout=LIMIT_S, env=_clean_env())
    wheels = glob.glob(str(dist / "commx-*.whl"))
    assert len(wheels) == 1, wheels
    # numpy comes from this interpreter's site-packages; nothing is fetched.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(tmp / "venv")],
                   check=True, timeout=120)
    pip = str(tmp / "venv" / "bin" / "pip")
    subprocess.run([pip, "install", "-q", "--no-deps", "--no-index", wheels[0]], check=True,
                   timeout=300, env=_clean_env())
    return {"wheel": wheels[0], "bin": str(tmp / "venv" / "bin"), "tmp": tmp}


def _run(venv, args, **kw):
    env = _clean_env(PATH=venv["bin"] + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run(args, capture_output=True, text=True, timeout=300, env=env,
                          cwd=venv["tmp"], **kw)


def test_wheel_carries_tools_tuning_and_no_build_paths(venv):
    names = zipfile.ZipFile(venv["wheel"]).namelist()
    for want in ("commx/bin/commx-run", "commx/bin/commx-bench", "commx/bin/commx-analyze",
                 "commx/lib/libcommx.so", "commx/lib/commx_tuning_cpu.txt", "commx/_cli.py"):
        assert want in names, f"{want} missing from the wheel: {names}"
    assert any(n.startswith("commx/_C") for n in names)
    site = glob.glob(os.path.join(os.path.dirname(venv["bin"]), "lib", "python*", "site-packages",
                                  "commx"))[0]
    with open(os.path.join(site, "lib", "commx_tuning_cpu.txt")) as got, \
            open(os.path.join(ROOT, "bench", "tuning", "cpu.txt")) as want:
        assert got.read() == want.read()
    # The native tools find libcommx in the wheel, not in the build they came from.
    if shutil.which("readelf"):
        for tool in ("commx-run", "commx-bench"):
            dyn = subprocess.run(["readelf", "-d", os.path.join(site, "bin", tool)],
                                 capture_output=True, text=True, check=True).stdout
            assert "$ORIGIN/../lib" in dyn, dyn
            assert NATIVE not in dyn, dyn


def test_console_scripts_are_on_path(venv):
    for tool in ("commx-run", "commx-bench", "commx-analyze"):
        path = shutil.which(tool, path=venv["bin"])
        assert path and os.path.dirname(path) == venv["bin"], tool
        r = _run(venv, [tool, "--help"])
        assert r.returncode == 0, (tool, r.stdout, r.stderr)
        assert "usage" in r.stdout.lower(), (tool, r.stdout)


def test_commx_run_from_the_wheel_runs_python_ranks(venv):
    prog = ("import os, numpy, commx\n"
            "c = commx.new_comm('cpu', 'cpu', name='w')\n"
            "x = numpy.full(4, float(c.get_rank() + 1), dtype=numpy.float32)\n"
            "c.all_reduce(x, commx.ReduceOp.SUM, async_op=False)\n"
            "print('sum', int(x[0]), os.environ['GROUP_RANK'], commx.__file__.startswith("
            "os.environ['VENV_BIN'].rsplit('/', 1)[0]))\n")
    script = venv["tmp"] / "rank.py"
    script.write_text(prog)
    r = _run(venv, ["commx-run", "-np", "2", "--timeout", "120", "-x",
                    f"VENV_BIN={venv['bin']}", str(script)])
    assert r.returncode == 0, (r.stdout, r.stderr)
    lines = sorted(line for line in r.stdout.splitlines() if " sum " in line)
    assert lines == ["[0] sum 3 0 True", "[1] sum 3 0 True"], r.stdout


def test_commx_bench_from_the_wheel_measures_and_checks(venv):
    out = venv["tmp"] / "b"
    r = _run(venv, ["commx-bench", "all_reduce", "--np", "2", "-b", "8", "-e", "4K", "-f", "8",
                    "-w", "1", "-n", "5", "--json", f"{out}.json", "--svg", f"{out}.svg"])
    assert r.returncode == 0, (r.stdout, r.stderr)
    assert "# nThread 1 nGpus 1 minBytes 8 maxBytes 4096" in r.stdout, r.stdout
    rows = json.loads(open(f"{out}.json").read())["rows"]
    assert [row["size"] for row in rows] == [8, 64, 512, 4096]  # all_reduce runs in place
    assert all(row["wrong"] == 0 and row["min_us"] <= row["time_us"] <= row["max_us"]
               for row in rows), rows
    if shutil.which("rsvg-convert"):
        with open(f"{out}.png", "rb") as f:
            assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_commx_analyze_from_the_wheel_reads_dumps(venv):
    # Two ranks' flight-recorder dumps: rank 1 never entered op #2, which rank 0 is stuck in.
    dumps = venv["tmp"] / "dumps"
    dumps.mkdir()

    def op(seq, state):
        return {"seq": seq, "op": "all_reduce", "dtype": "float", "count": 4, "root": -1,
                "state": state}

    for rank, ops in ((0, [op(1, "completed"), op(2, "started")]), (1, [op(1, "completed")])):
        (dumps / f"w.rank{rank}.json").write_text(
            json.dumps({"comm": "w", "rank": rank, "size": 2, "ops": ops}))
    r = _run(venv, ["commx-analyze", str(dumps)])
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "ranks [1] never entered all_reduce #2" in r.stdout, r.stdout
    assert "rank 0 is stuck in all_reduce #2" in r.stdout, r.stdout
