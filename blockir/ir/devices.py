"""Device names: the one place that parses them.

A device is written ``KIND`` or ``KIND:N`` (``N`` a non-negative integer without
leading zeros), ``KIND`` being ``cpu`` or ``cuda``: the ``op_device`` attribute,
``Block.device``, ``Program.device``, ``Variable.device``, ``device_guard``, the
executor's place and the pass options all use this grammar. ``cpu`` (= ``cpu:0``)
is the host; ``cpu:N`` are virtual CPU devices; ``cuda`` is ``cuda:0``.

Each device has one canonical spelling (:func:`format_device`): ``cpu`` for the
host, ``cpu:N`` and ``cuda:N`` otherwise. Two devices are the same device when
their canonical spellings are equal. Passes and the runtime work on canonical
spellings (:func:`checked_device`); the DSL keeps what the user wrote
(:func:`require_device`), which the placement pass canonicalises.
"""

from __future__ import annotations

import re
from typing import TypeGuard

from blockir.errors import BlockirError

__all__ = [
    "DEVICE_FORMS",
    "HOST",
    "checked_device",
    "device_kind",
    "format_device",
    "is_valid_device",
    "parse_device",
    "require_device",
]

HOST = "cpu"
"""The host's canonical spelling."""

DEVICE_FORMS = "cpu, cpu:N, cuda or cuda:N"
"""The forms a device may take, as error messages list them."""

_DEVICE = re.compile(r"(cpu|cuda)(?::(0|[1-9][0-9]*))?")


def is_valid_device(device: object) -> TypeGuard[str]:
    """Whether ``device`` is a string of the form ``cpu``, ``cpu:N``, ``cuda`` or ``cuda:N``."""
    return isinstance(device, str) and _DEVICE.fullmatch(device) is not None


def parse_device(device: object, where: object) -> tuple[str, int]:
    """``(kind, index)`` of ``device``: ``("cpu", 0)`` for ``cpu``, ``("cuda", 0)`` for ``cuda``; an error
    naming ``where`` (an op, a variable, an option: anything printable) when it is not a device."""
    m = _DEVICE.fullmatch(device) if isinstance(device, str) else None
    if m is None:
        raise _not_a_device(device, where)
    return m.group(1), int(m.group(2) or 0)


def format_device(kind: str, index: int) -> str:
    """The canonical spelling of device ``index`` of ``kind``: ``cpu`` for the host, else ``KIND:N``."""
    return HOST if kind == HOST and index == 0 else f"{kind}:{index}"


def checked_device(device: object, where: object) -> str:
    """The canonical spelling of ``device``; an error naming ``where`` when it is not a device."""
    return format_device(*parse_device(device, where))


def require_device(device: object, where: object) -> str:
    """``device`` as written when it is a device; an error naming ``where`` when it is not."""
    if not is_valid_device(device):
        raise _not_a_device(device, where)
    return device


def _not_a_device(device: object, where: object) -> BlockirError:
    return BlockirError(f"{device!r} is not a device (expected {DEVICE_FORMS}): {where}")


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda``: the kind of a well-formed device string."""
    return device.partition(":")[0]
