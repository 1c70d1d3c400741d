"""Places: where values live and kernels run.

A place is a device kind and an index, written as a device string (``cpu``,
``cpu:1``, ``cuda:0``) like the ``op_device`` attribute. It owns the array
module its kernels compute with (``xp``). This runtime runs on the host CPU
(``cpu`` = ``cpu:0``), on virtual CPU devices (``cpu:N``) and on CUDA devices
(``cuda:N``) when the machine has them (see :mod:`blockir.runtime.device`).
Any well-formed device string is a place; whether the machine has it is checked
when a program is compiled for it.
"""

from __future__ import annotations

from typing import Any

from blockir.ir.devices import HOST, format_device, parse_device

__all__ = ["CPUPlace", "Place", "as_place"]


class Place:
    """A device: ``kind`` (``"cpu"`` or ``"cuda"``) and ``index``. Equal places compare and hash equal."""

    __slots__ = ("kind", "index")

    def __init__(self, kind: str, index: int = 0) -> None:
        self.kind = kind
        self.index = index

    @property
    def xp(self) -> Any:
        """The array module kernels on this place compute with; an error when this machine lacks the device."""
        from blockir.runtime.device import get_device  # the device layer imports this module

        return get_device(str(self), f"place {self}").xp

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Place) and (self.kind, self.index) == (other.kind, other.index)

    def __hash__(self) -> int:
        return hash((self.kind, self.index))

    def __str__(self) -> str:
        return format_device(self.kind, self.index)

    def __repr__(self) -> str:
        return f"Place({str(self)!r})"


class CPUPlace(Place):
    """The host CPU (``cpu``, ``cpu:0``), Fluid's ``CPUPlace()``."""

    __slots__ = ()

    def __init__(self) -> None:
        super().__init__("cpu", 0)


def as_place(spec: str | Place) -> Place:
    """The place ``spec`` names (a :class:`Place` or a device string); an error for anything else."""
    if isinstance(spec, Place):
        return spec
    kind, index = parse_device(spec, "a place (a device string or a Place)")
    return CPUPlace() if format_device(kind, index) == HOST else Place(kind, index)
