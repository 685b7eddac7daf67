"""`torchcomms` for programs written against torchcomms, served by commx: a rename and nothing
else. `torchcomms.X` is `commx.X` (the same objects), `torchcomms.tests.*` is torchcomms' tests
folder named by TORCHCOMMS_SUITE_ROOT (holding integration/py, integration/helpers, helpers/py),
and backend names given to the calls that take one are translated by TORCHCOMMS_BACKEND_RENAMES
("gloo=cpu,..."). No behaviour of commx is changed.
Layer: tools (put on PYTHONPATH by tools/torchcomms_suite/run.py)."""

import importlib
import importlib.abc
import importlib.util
import os
import sys

import commx as _commx

_SUITE_ROOT = os.environ.get("TORCHCOMMS_SUITE_ROOT", "")
_RENAMES = dict(
    pair.split("=", 1)
    for pair in os.environ.get("TORCHCOMMS_BACKEND_RENAMES", "gloo=cpu").split(",")
    if "=" in pair
)


def _backend_name(name):
    return _RENAMES.get(name, name) if isinstance(name, str) else name


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """torchcomms.<sub> -> commx.<sub>; torchcomms.tests.<...> -> files under the suite root."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("torchcomms."):
            return None
        rest = fullname[len("torchcomms."):]
        if rest == "tests" or rest.startswith("tests."):
            return self._suite_spec(rest.split(".")[1:], fullname)
        if importlib.util.find_spec("commx." + rest) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def _suite_spec(self, parts, fullname):
        # torchcomms.tests.integration.py.X -> <root>/integration/py/X.py (root: the tests
        # folder, two levels above the folder the runner was given).
        if not _SUITE_ROOT:
            return None
        base = os.path.join(_SUITE_ROOT, *parts)
        if os.path.isdir(base):
            init = os.path.join(base, "__init__.py")
            if os.path.exists(init):
                return importlib.util.spec_from_file_location(
                    fullname, init, submodule_search_locations=[base])
            return importlib.util.spec_from_loader(fullname, None, is_package=True)
        if os.path.exists(base + ".py"):
            return importlib.util.spec_from_file_location(fullname, base + ".py")
        return None

    def create_module(self, spec):
        return importlib.import_module("commx." + spec.name[len("torchcomms."):])

    def exec_module(self, module):
        pass  # already imported as commx.<sub>


def __getattr__(name):
    return getattr(_commx, name)


def __dir__():
    return sorted(set(dir(_commx)) | set(globals()))


def new_comm(backend, *args, **kwargs):
    return _commx.new_comm(_backend_name(backend), *args, **kwargs)


def get_mem_allocator(backend, *args, **kwargs):
    return _commx.get_mem_allocator(_backend_name(backend), *args, **kwargs)


def is_backend_built(backend, *args, **kwargs):
    return _commx.is_backend_built(_backend_name(backend), *args, **kwargs)


__path__ = []  # a package: submodules come from _Alias
sys.meta_path.insert(0, _Alias())
