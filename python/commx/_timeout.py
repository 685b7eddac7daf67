"""torchcomms' Timeout: a datetime.timedelta under the name torchcomms programs import
(`Timeout(seconds=300)`), accepted wherever commx takes a timeout. Layer: Python bindings."""

from datetime import timedelta


class Timeout(timedelta):
    """A timeout (a datetime.timedelta)."""

    __slots__ = ()
