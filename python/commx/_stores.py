"""Store arguments for new_comm: commx stores as they are, torch.distributed stores adapted.

A torch TCPStore (possibly under PrefixStores, as torchrun and init_process_group give it) is
joined natively by a commx TCPStore client at its host and port, under a commx namespace agreed
through the torch store itself; any other object with the c10d store methods is wrapped in
commx.PythonStore, which calls back into Python."""

import uuid

from . import _C


def _innermost(store):
    prefixed = False
    while hasattr(store, "underlying_store"):
        inner = store.underlying_store
        if inner is None or inner is store:
            break
        store, prefixed = inner, True
    return store, prefixed


def _agreed_namespace(store):
    # c10d compare_set: the first rank's proposal wins, every rank reads the winner.
    proposal = uuid.uuid4().hex
    got = store.compare_set("commx/namespace", "", proposal)
    return got.decode() if isinstance(got, (bytes, bytearray)) else str(got)


def as_commx_store(store):
    """Returns (commx store or None, Python object to keep alive or None)."""
    if store is None or isinstance(store, _C.Store):
        return store, None
    inner, _ = _innermost(store)
    native = getattr(inner, "commx_store", None)  # commx.torch's store: commx's own client
    if isinstance(native, _C.Store):
        return _C.PrefixStore(f"commx/{_agreed_namespace(store)}", native), store
    host, port = getattr(inner, "host", None), getattr(inner, "port", None)
    if type(inner).__name__ == "TCPStore" and host and port:
        try:
            client = _C.TCPStore(host, int(port), timeout=getattr(store, "timeout", None))
        except _C.UnsupportedError:
            client = None  # this libcommx has no TCP store: use the torch object itself
        if client is not None:
            ns = _agreed_namespace(store)
            return _C.PrefixStore(f"commx/{ns}", client), store
    return _C.PythonStore(store), store
