"""Coalescing blocks, as torchcomms has them: ops issued between comm.start_coalescing() and
comm.end_coalescing() are one unit whose single Work waits for all of them.

    with commx.coalesce(comm) as cm:          # or commx.coalescing.coalesce
        comm.all_reduce(a, ReduceOp.SUM, async_op=True)
        comm.all_reduce(b, ReduceOp.SUM, async_op=True)
    cm.wait()

commx issues each op as it is called (ops of one comm run in issue order, so nothing is gained
by holding them back); end_coalescing returns a Work over the block's ops, or None for an empty
block. Sync ops in a block have finished when their call returns. barrier cannot join a block
(torchcomms' rule); blocks do not nest. Layer: Python bindings (pure Python over commx._C)."""

import contextlib

from . import _C, _tracing

__all__ = ["CoalescedWork", "CoalescingManager", "coalesce"]

# Ops that cannot be part of a coalescing block.
_NOT_COALESCIBLE = frozenset({"barrier"})


class CoalescedWork:
    """The Work of a coalescing block: done when every op of the block is."""

    def __init__(self, works):
        self._works = list(works)

    def wait(self, timeout=None):
        for work in self._works:
            work.wait() if timeout is None else work.wait(timeout)
        return True

    def is_completed(self):
        return all(work.is_completed() for work in self._works)

    def __len__(self):
        return len(self._works)

    def __repr__(self):
        return f"<commx.CoalescedWork of {len(self._works)} ops>"


class CoalescingManager:
    """What coalesce() yields: after the block, `work` is the block's Work (None if empty)."""

    def __init__(self):
        self.work = None
        self.tensors = []
        self._waited = False

    def wait(self):
        """Waits for the block's ops; a second call is an error (one wait per block)."""
        if self._waited:
            raise _C.InvalidArgumentError(
                "InvalidArgument: CoalescingManager.wait() has already been called; each "
                "coalescing block is waited on once")
        self._waited = True
        if self.work is not None:
            self.work.wait()


@contextlib.contextmanager
def coalesce(comm):
    """A coalescing block on `comm` (see the module's doc); yields a CoalescingManager."""
    manager = CoalescingManager()
    if _tracing.is_compiling():
        # Under torch.compile every op of the block is in the graph and has completed when the
        # graph moves past it (commx.functional.comm_methods), so the block is only a scope.
        yield manager
        return
    comm.start_coalescing()
    try:
        yield manager
    finally:
        manager.work = comm.end_coalescing()


def _where(comm):
    return f"[comm '{comm.get_name()}' rank {comm.get_rank()}]"


def start_coalescing(self):
    """Starts a coalescing block: the ops issued until end_coalescing() form one Work."""
    if getattr(self, "_coalesced", None) is not None:
        raise _C.InvalidArgumentError(
            f"InvalidArgument: {_where(self)} start_coalescing: a coalescing block is already "
            "open on this comm (blocks do not nest; end_coalescing() first)")
    self._coalesced = []


def end_coalescing(self):
    """Ends the block: a Work over its ops, or None when none was issued."""
    works = getattr(self, "_coalesced", None)
    if works is None:
        raise _C.InvalidArgumentError(
            f"InvalidArgument: {_where(self)} end_coalescing: no coalescing block is open "
            "(start_coalescing() first)")
    self._coalesced = None
    return CoalescedWork(works) if works else None


def joins_blocks(op, method):
    """`method` (a Comm op) whose Work joins the comm's open coalescing block, if any."""

    def call(self, *args, **kwargs):
        works = getattr(self, "_coalesced", None)
        if works is None:
            return method(self, *args, **kwargs)
        if op in _NOT_COALESCIBLE:
            raise _C.InvalidArgumentError(
                f"InvalidArgument: {_where(self)} {op} does not support coalescing; issue it "
                "outside the coalescing block")
        work = method(self, *args, **kwargs)
        if work is not None:
            works.append(work)
        return work
    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = method.__doc__
    return call
