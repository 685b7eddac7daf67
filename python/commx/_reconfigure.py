"""Comms whose members are chosen after creation, as torchcomms' enable_reconfigure: new_comm(...,
enable_reconfigure=True) meets nobody; each process hands get_init_handle() to the others (through
the job's own channel), and reconfigure(uuid, handles) makes the comm of exactly the processes
whose handles are listed, over the launcher's store (or the one given). It can be called again
with a new uuid, e.g. by the survivors of a failure. Layer: Python bindings (pure Python over
commx._C)."""

import hashlib
import uuid as _uuid
from datetime import timedelta

from . import _C
from ._options import ReconfigureOptions

__all__ = ["ReconfigurableComm"]

# What works on a comm before its first reconfigure (everything else needs members).
_BEFORE_MEMBERS = ("get_name", "get_backend", "get_device", "get_options", "get_init_handle",
                   "reconfigure", "is_aborted", "abort", "finalize")


def _not_configured(name):
    raise _C.InvalidArgumentError(
        f"InvalidArgument: [comm '{name}'] created with enable_reconfigure=True: it has no members "
        "until reconfigure(uuid, init_handles) is called (collect get_init_handle() from every "
        "process first)")


class ReconfigurableComm:
    """A comm whose members are set by reconfigure(); once configured, every commx.Comm method
    is that of the comm of the members (get_rank() is this process's place among the handles)."""

    def __init__(self, make_comm, store, name, backend, device, options):
        self._make_comm = make_comm  # (store, rank, size, timeout) -> commx.Comm
        self._store = store
        self._name, self._backend, self._device = name, backend, device
        self._options = options
        self._handle = f"commx-init:{name}:{_uuid.uuid4().hex}"
        self._comm = None
        self._retired = []  # comms replaced by a reconfigure, kept until this one goes
        self._aborted = False

    # -- before and across reconfigures ---------------------------------------------------------
    def get_init_handle(self):
        """This process's handle in this comm (a string, unique per process and comm)."""
        return self._handle

    def get_name(self):
        return self._name

    def get_backend(self):
        return self._backend

    def get_device(self):
        if self._comm is not None:
            return self._comm.get_device()
        try:
            import torch
            return torch.device(self._device)
        except ImportError:
            return self._device

    def get_options(self):
        return self._comm.get_options() if self._comm is not None else self._options

    def is_aborted(self):
        return self._aborted or (self._comm is not None and self._comm.is_aborted())

    def abort(self):
        self._aborted = True
        if self._comm is not None:
            self._comm.abort()

    def finalize(self):
        if self._comm is not None:
            self._comm.finalize()

    def reconfigure(self, uuid, init_handles=None, timeout=None, hints=None):
        """Collective among the processes whose handles are in `init_handles` (each calls it with
        the same uuid and handles): a list gives the ranks in its order, a set in sorted order.
        Returns a Work that completes once every member has joined. The comm in use before (if
        any) is aborted: its pending ops fail. reconfigure(ReconfigureOptions(...)) gives all four
        in one object."""
        if isinstance(uuid, ReconfigureOptions):
            opts = uuid
            uuid, init_handles = opts.uuid, opts.init_handles
            timeout = opts.timeout if timeout is None else timeout
            hints = {**opts.hints, **(hints or {})}
        if init_handles is None:
            raise _C.InvalidArgumentError(
                f"InvalidArgument: [comm '{self._name}'] reconfigure(uuid={uuid}): no init_handles "
                "given")
        handles = sorted(init_handles) if isinstance(init_handles, (set, frozenset)) else list(
            init_handles)
        where = f"[comm '{self._name}'] reconfigure(uuid={uuid})"
        if len(handles) > 1 and set(handles) == {self._handle}:
            # torchcomms' gloo convention: every process lists its own handle once per member
            # (its handles are alike); the members meet by name and uuid, ranks in arrival order.
            return self._join_anonymous(uuid, len(handles), timeout, hints)
        if len(set(handles)) != len(handles):
            raise _C.InvalidArgumentError(f"InvalidArgument: {where}: a handle is listed twice")
        if self._handle not in handles:
            raise _C.InvalidArgumentError(
                f"InvalidArgument: {where}: this process's handle {self._handle!r} is not among "
                f"the {len(handles)} handles given")
        if hints:
            self._options.hints = {**self._options.hints, **hints}
        # Every member derives the same key prefix from the uuid and the member list, so a
        # reconfigure with other members (or another uuid) never meets this one.
        digest = hashlib.sha256("\n".join(handles).encode()).hexdigest()[:16]
        store = _C.PrefixStore(f"commx/reconfigure/{self._name}/{uuid}/{digest}", self._store)
        return self._configure(store, handles.index(self._handle), len(handles), timeout)

    def _join_anonymous(self, uuid, size, timeout, hints):
        """Members known only by their number: each takes the next rank from a counter under
        this comm's name and uuid (so a uuid is used by one reconfigure of `size` members)."""
        if hints:
            self._options.hints = {**self._options.hints, **hints}
        store = _C.PrefixStore(f"commx/reconfigure/{self._name}/{uuid}/anonymous{size}",
                               self._store)
        rank = store.add("arrived", 1) - 1
        if rank >= size:
            raise _C.InvalidArgumentError(
                f"InvalidArgument: [comm '{self._name}'] reconfigure(uuid={uuid}): more than the "
                f"{size} members its handle list names joined (use a new uuid per reconfigure)")
        return self._configure(store, rank, size, timeout)

    def _configure(self, store, rank, size, timeout):
        if timeout is not None and not isinstance(timeout, timedelta):
            timeout = timedelta(seconds=float(timeout))
        old, self._comm = self._comm, None
        if old is not None:
            old.abort()
            self._retired.append(old)
        self._comm = self._make_comm(store, rank, size, timeout)
        self._aborted = False
        return self._comm.barrier(async_op=True)

    # -- everything else: the configured comm's ---------------------------------------------------
    def __getattr__(self, attr):
        comm = self.__dict__.get("_comm")
        if comm is None:
            if attr.startswith("__"):
                raise AttributeError(attr)
            if hasattr(_C.Comm, attr):
                return lambda *a, **k: _not_configured(self.__dict__.get("_name"))
            raise AttributeError(attr)
        return getattr(comm, attr)

    def __repr__(self):
        if self._comm is None:
            return f"<commx.ReconfigurableComm {self._name!r} backend={self._backend!r} unconfigured>"
        return f"<commx.ReconfigurableComm {self._comm!r}>"
