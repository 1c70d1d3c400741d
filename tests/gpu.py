"""The GPU test tier: tests marked ``gpu`` get the real CuPy here, or skip cleanly without a usable GPU."""

from __future__ import annotations

from typing import Any

import pytest

from blockir.runtime import cuda


def real_cupy() -> Any:
    """The cupy module of a machine with a CUDA GPU; skips the test where CuPy is missing or
    ``cupy.cuda.is_available()`` is false."""
    cupy = cuda._cupy()
    if cupy is None:
        pytest.skip("needs CuPy and a CUDA GPU (cupy is missing or cupy.cuda.is_available() is false)")
    return cupy
