"""BackendWrapper: a c10d Backend over a commx comm the program already made (torchcomms'
_BackendWrapper), so torch.distributed's process groups, DeviceMesh and DTensor run on it. Its
collectives are those of the "commx" process-group backend. Layer: PyTorch integration."""

from datetime import timedelta

import commx

from . import CommxProcessGroup, monitored_barrier_failure


class BackendWrapper(CommxProcessGroup):
    """c10d Backend whose ops run on `comm` (for tensors on the comm's device type)."""

    def __init__(self, comm):
        timeout = comm.get_timeout() or timedelta(seconds=600)
        super().__init__(None, comm.get_rank(), comm.get_size(), timeout,
                         group_name=comm.get_name())
        self._wrapped = comm
        self._comms[comm.get_device().type] = comm

    def get_comm(self):
        return self._wrapped

    def get_mem_allocator(self):
        return self._wrapped.get_mem_allocator()

    def comm_for(self, device):
        comm = self._comms.get(device.type)
        if comm is None:
            raise commx.InvalidArgumentError(
                f"InvalidArgument: [comm '{self._wrapped.get_name()}' rank {self._rank}] the "
                f"wrapped comm is on {self._wrapped.get_device()}; a tensor on {device} has no "
                "comm here")
        return comm

    def split(self, store, ranks, opts=None):
        """dist.split_group over the wrapped comm: the members' comm.split (no store needed)."""
        name = getattr(opts, "group_name", "") or f"{self._wrapped.get_name()}_split"
        child = self._wrapped.split(list(ranks), name)
        return None if child is None else BackendWrapper(child)

    def monitored_barrier(self, opts, wait_all_ranks=False):
        """gloo's monitored barrier over the wrapped comm's point-to-point ops: every rank checks
        in with rank 0 within the timeout; rank 0 names the ranks that did not (every one with
        wait_all_ranks, else the first), then releases the others."""
        import torch
        timeout = getattr(opts, "timeout", None) or self._timeout
        comm = self._wrapped
        token = torch.zeros(1, dtype=torch.int32, device=comm.get_device())
        if self._rank != 0:
            comm.send(token, 0, False, timeout=timeout)
            comm.recv(token, 0, False, timeout=timeout)
            return
        missing = []
        for r in range(1, self._size):
            try:
                comm.recv(token, r, False, timeout=timeout)
            except commx.Error:
                missing.append(r)
                if not wait_all_ranks:
                    break
        if missing:
            raise monitored_barrier_failure(f"comm '{comm.get_name()}'", missing, timeout,
                                            wait_all_ranks)
        for r in range(1, self._size):
            comm.send(token, r, False, timeout=timeout)
