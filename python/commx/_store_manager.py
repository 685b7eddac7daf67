"""torchcomms' _create_prefixed_store: a store for one named purpose, under the launcher's
rendezvous (MASTER_ADDR/MASTER_PORT, COMMX_STORE_FILE, ...). Layer: Python bindings."""

from datetime import timedelta

from . import _C


def _create_prefixed_store(backend_name, name_str, timeout=timedelta(seconds=600)):
    """The launcher store with every key under `<backend_name>/<name_str>/`, so two purposes
    sharing one rendezvous never read each other's keys."""
    return _C.PrefixStore(f"{backend_name}/{name_str}", _C.launcher_store(timeout))


def _get_store(backend_name, name_str, timeout=timedelta(seconds=600)):
    """torchcomms' older name of _create_prefixed_store."""
    return _create_prefixed_store(backend_name, name_str, timeout)
