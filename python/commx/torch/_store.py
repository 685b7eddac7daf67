"""torch.distributed rendezvous through commx's store client, so a job whose store requires the
job token (commx-run's default, docs/security.md) can run init_process_group: torch's own TCPStore
client cannot answer the store's challenge and is refused.

- init_method="commx://" (any job): the launcher's store as commx finds it (MASTER_ADDR/
  MASTER_PORT, COMMX_STORE_FILE, mpirun), with the token when there is one.
- env:// (torch's default) while COMMX_AUTH_TOKEN or COMMX_AUTH_TOKEN_FILE is set: the same, in
  place of torch's TCPStore client, which the store would refuse.

Layer: PyTorch integration (Python, over commx)."""

import os
import sys
from datetime import timedelta
from urllib.parse import parse_qs, urlparse

import torch.distributed as dist
from torch._C._distributed_c10d import Store as _C10dStore  # not dist.Store: see __init__.py

import commx

SCHEME = "commx"
# torch keeps only the C++ half of a Store written in Python: once the Python object is gone, its
# methods are "pure virtual". The stores handed to torch live as long as the process.
_HANDED_TO_TORCH = []


def _as_bytes(value):
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


class CommxStore(_C10dStore):
    """A torch.distributed Store over a commx store (a TCP store client with the job's token,
    a FileStore, ...): what torch and its process groups read and write goes through commx."""

    def __init__(self, store, timeout=timedelta(seconds=300)):
        super().__init__()
        self.commx_store = store
        self.set_timeout(timeout)

    def set(self, key, value):
        self.commx_store.set(key, _as_bytes(value))

    def get(self, key):
        return bytes(self.commx_store.get(key))

    def add(self, key, value):
        return self.commx_store.add(key, value)

    def compare_set(self, key, expected_value, desired_value):
        return bytes(self.commx_store.compare_set(key, _as_bytes(expected_value),
                                                  _as_bytes(desired_value)))

    def check(self, keys):
        return self.commx_store.check(list(keys))

    def wait(self, keys, timeout=None):
        self.commx_store.wait(list(keys), timeout if timeout is not None else self.timeout)

    def delete_key(self, key):
        return self.commx_store.delete_key(key)

    def num_keys(self):
        return self.commx_store.num_keys()

    def append(self, key, value):
        self.commx_store.append(key, _as_bytes(value))

    def multi_get(self, keys):
        return [bytes(v) for v in self.commx_store.multi_get(list(keys))]

    def multi_set(self, keys, values):
        self.commx_store.multi_set(list(keys), [_as_bytes(v) for v in values])


def _rank_and_size(url):
    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    for rank_var, size_var in (("rank", "world_size"), ("RANK", "WORLD_SIZE"),
                               ("COMMX_RANK", "COMMX_WORLD_SIZE")):
        source = query if rank_var == "rank" else os.environ
        if source.get(rank_var) is not None and source.get(size_var) is not None:
            return int(source[rank_var]), int(source[size_var])
    raise commx.InvalidArgumentError(
        f"InvalidArgument: {url}: no rank/world size (set RANK and WORLD_SIZE, or give "
        "?rank=&world_size= in the URL)")


def commx_rendezvous(url, timeout=timedelta(seconds=300), **kwargs):
    """torch rendezvous handler: (store, rank, world_size) with the store reached through commx."""
    rank, size = _rank_and_size(url)
    os.environ.setdefault("RANK", str(rank))  # commx finds the launcher's rank where torch does
    os.environ.setdefault("WORLD_SIZE", str(size))
    store = CommxStore(commx.launcher_store(timeout), timeout)
    _HANDED_TO_TORCH.append(store)
    yield store, rank, size
    raise RuntimeError(f"{url}: commx rendezvous cannot re-rendezvous")


def _has_token():
    return bool(os.environ.get("COMMX_AUTH_TOKEN") or os.environ.get("COMMX_AUTH_TOKEN_FILE"))


def register():
    """Registers commx:// and, under a job token, routes env:// through commx (idempotent)."""
    rendezvous = sys.modules["torch.distributed.rendezvous"]
    handlers = rendezvous._rendezvous_handlers
    if SCHEME not in handlers:
        dist.register_rendezvous_handler(SCHEME, commx_rendezvous)
    if _has_token() and handlers.get("env") is not commx_rendezvous:
        # torch's env:// would connect its own TCPStore client, which a store with a token
        # refuses; there is no public way to replace a registered scheme.
        handlers["env"] = commx_rendezvous
