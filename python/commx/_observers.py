"""Observers of a comm's ops, called in Python around each op: before(comm, op, args, kwargs)
returns a token, after(comm, token, result, failed) gets it back with the op's result (its Work,
or the child comm of a split). commx.hooks.FlightRecorderHook is one; they see the op's tensors,
which the native hooks (register_pre_hook) do not pass. A comm without observers pays one
attribute lookup per op. Layer: Python bindings (pure Python over commx._C)."""

# The ops observed: every op that takes tensors, and split (whose result is a comm).
OBSERVED_EXTRA = ("split",)


def add(comm, observer):
    observers = getattr(comm, "_op_observers", None)
    if observers is None:
        observers = comm._op_observers = []
    if observer not in observers:
        observers.append(observer)


def remove(comm, observer):
    observers = getattr(comm, "_op_observers", None)
    if observers and observer in observers:
        observers.remove(observer)


def observed(op, method):
    """`method` (a Comm method) with the comm's observers called around it."""

    def call(self, *args, **kwargs):
        observers = getattr(self, "_op_observers", None)
        if not observers:
            return method(self, *args, **kwargs)
        observers = list(observers)
        tokens = [o.before(self, op, args, kwargs) for o in observers]
        try:
            result = method(self, *args, **kwargs)
        except BaseException:
            for o, token in zip(observers, tokens):
                o.after(self, token, None, True)
            raise
        for o, token in zip(observers, tokens):
            o.after(self, token, result, False)
        return result
    call.__name__ = op
    call.__qualname__ = f"Comm.{op}"
    call.__doc__ = method.__doc__
    return call
