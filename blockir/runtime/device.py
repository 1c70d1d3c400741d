"""Devices at run time: the host, virtual CPU devices, and moving values between them.

A device is named by its canonical device string (``cpu``, ``cpu:2``,
``cuda:0``; see :func:`blockir.ir.verify.canonical_device`). ``cpu`` (=
``cpu:0``) is the host. ``cpu:N`` are virtual CPU devices: their values are
numpy arrays like the host's, computed by the same kernels, but kept apart: a
value reaches another device only as a copy (a ``memcpy`` op, or
:func:`transfer`), never as a shared buffer. So multi-device programs run, and
their copies are tested, on any machine. CUDA devices are well-formed names
that this runtime refuses with a clear error until it has a CUDA backend.

Values in a plan's slots are not tagged: when a plan is compiled it checks that
every op reads values on its own device (:func:`blockir.runtime.plan.compile_plan`).
The tags live at the boundaries: each scope value carries the device it is on
(:attr:`blockir.runtime.scope.ScopeVariable.device`), and fetched values come
back to the host.
"""

from __future__ import annotations

from typing import Any

from blockir.ops.io import copy_value
from blockir.passes.place import HOST, checked_device, device_kind
from blockir.runtime.place import as_place

__all__ = ["HOST", "array_module", "checked_device", "device_kind", "transfer"]


def array_module(device: str) -> Any:
    """The array module kernels on ``device`` compute with (numpy for the host and virtual CPUs)."""
    return as_place(device).xp


def transfer(value: Any, device: str) -> Any:
    """A copy of ``value`` (dense, LoDTensor or SelectedRows) on ``device``: new buffers, same LoD, rows, height."""
    return copy_value(value, array_module(device))
