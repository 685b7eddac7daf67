"""Console scripts of the wheel: `commx-run`, `commx-bench` and `commx-analyze` exec the programs
shipped in commx/bin (native ones find libcommx in commx/lib through their RPATH)."""

import os
import sys

_BIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin")


def _exec(name, interpreter=None):
    path = os.path.join(_BIN, name)
    if not os.path.isfile(path):
        sys.exit(f"{name}: not found at {path}; this commx install has no command-line tools "
                 "(an in-place development build keeps them in build/bin)")
    argv = [name] + sys.argv[1:]
    if interpreter:
        os.execv(interpreter, [interpreter, path] + sys.argv[1:])
    os.execv(path, argv)


def run():
    _exec("commx-run")


def bench():
    _exec("commx-bench")


def analyze():
    _exec("commx-analyze", interpreter=sys.executable)
