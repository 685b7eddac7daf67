"""pytest setup for the Python tests: finds the commx package (installed with pip, or an in-place
development build in python/commx) and skips everything cleanly when it is not built.
Layer: tests (Python)."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)


def _find_commx():
    try:
        import commx  # noqa: F401
        return None
    except ImportError:
        pass
    inplace = os.path.join(ROOT, "python")
    if any(f.startswith("_C") for f in os.listdir(os.path.join(inplace, "commx"))):
        sys.path.insert(0, inplace)
        os.environ["PYTHONPATH"] = inplace + os.pathsep + os.environ.get("PYTHONPATH", "")
        try:
            import commx  # noqa: F401,F811
            return None
        except ImportError as e:
            return f"commx in-place build does not import: {e}"
    return "commx is not built: run `pip install ./python` (see docs/python.md)"


_SKIP_REASON = _find_commx()


def pytest_collection_modifyitems(config, items):
    if _SKIP_REASON is None:
        return
    import pytest
    mark = pytest.mark.skip(reason=_SKIP_REASON)
    for item in items:
        item.add_marker(mark)


def pytest_ignore_collect(collection_path, config):
    # Test modules import commx at the top: do not even import them when it is missing.
    if _SKIP_REASON is not None and collection_path.name.startswith("test_"):
        return True
    return None
