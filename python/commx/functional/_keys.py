"""Names that live objects (comms, batches) carry inside traced graphs: a graph holds the name,
and a registry maps it back to the object when the op runs."""

import itertools
import threading

_lock = threading.Lock()
_counter = itertools.count()


def key_of(obj, registry, prefix):
    """The name `obj` has in traced graphs: given once (`<prefix>#<n>`), kept for its life."""
    key = getattr(obj, "_functional_key", None)
    if key is None:
        with _lock:
            key = f"{prefix}#{next(_counter)}"
            obj._functional_key = key
            registry[key] = obj
    return key
