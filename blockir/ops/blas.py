"""``c -= scale * (a @ b)`` in place: BLAS's gemm with beta = 1, which numpy does not expose.

numpy computes ``a @ b`` into a new array; subtracting it from ``c`` is then a second pass over ``c`` and a
product-sized temporary. The kernels that update a parameter by a product (``fc_grad_sgd``'s
``W -= lr * (Input^T @ dPre)``) call :func:`subtract_product` instead, which calls the gemm of the BLAS
library numpy itself uses (the OpenBLAS its wheels ship, found in ``numpy.libs``), so that the thread
settings of numpy's BLAS (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, threadpoolctl) apply to it too.
Where that library is not found (another BLAS, another array module such as CuPy) or the arrays do not suit
gemm (dtype other than float32/float64, strides, overlap, a small product), it computes
``c -= a @ (scale * b)`` with ``xp``.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_ROW_MAJOR, _NO_TRANS, _TRANS = 101, 111, 112
# (symbol name with {t} for s/d, integer type): numpy 2's wheels (scipy-openblas, 64-bit ints), numpy 1.26's
# (64-bit ints, suffixed), an OpenBLAS built with plain names and 32-bit ints.
_SYMBOLS = (
    ("scipy_cblas_{t}gemm64_", ctypes.c_int64),
    ("cblas_{t}gemm64_", ctypes.c_int64),
    ("cblas_{t}gemm", ctypes.c_int),
)
# Below this many elements of c, the call through ctypes costs more than the pass over c that it saves.
MIN_ELEMENTS = 16384


def _bind(function: Any, integer: type, real: type) -> Callable[..., None]:
    n, p = integer, ctypes.c_void_p
    function.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, n, n, n, real, p, n, p, n, real, p, n]
    function.restype = None
    return function


@functools.cache
def _gemms() -> dict[np.dtype, Callable[..., None]]:
    """numpy's own BLAS gemm per dtype, or nothing where it is not found."""
    libs = Path(np.__file__).resolve().parent.parent / "numpy.libs"
    for path in sorted(libs.glob("lib*openblas*.so*")) if libs.is_dir() else ():
        try:
            lib = ctypes.CDLL(str(path))  # already loaded by numpy: the same library, the same thread pool
        except OSError:
            continue
        for name, integer in _SYMBOLS:
            try:
                single, double = getattr(lib, name.format(t="s")), getattr(lib, name.format(t="d"))
            except AttributeError:
                continue
            return {
                np.dtype("float32"): _bind(single, integer, ctypes.c_float),
                np.dtype("float64"): _bind(double, integer, ctypes.c_double),
            }
    return {}


def _operand(x: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) of a row-major view of ``x``, or None if gemm cannot read it."""
    if x.flags.c_contiguous:
        return _NO_TRANS, max(1, x.shape[1])
    if x.flags.f_contiguous:  # the transpose of a row-major array
        return _TRANS, max(1, x.shape[0])
    return None


def _blas(c: Any, a: Any, b: Any) -> Callable[..., None] | None:
    """The gemm that can compute into ``c`` from ``a`` and ``b`` as they are, or None."""
    if not (type(c) is type(a) is type(b) is np.ndarray) or c.size < MIN_ELEMENTS:
        return None
    if not (c.dtype == a.dtype == b.dtype and c.ndim == a.ndim == b.ndim == 2 and c.dtype.isnative):
        return None
    if not (c.flags.c_contiguous and c.flags.writeable and c.flags.aligned and a.flags.aligned and b.flags.aligned):
        return None
    if np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return None
    return _gemms().get(c.dtype)


def subtract_product(xp: Any, c: Any, a: Any, b: Any, scale: Any) -> None:
    """``c -= scale * (a @ b)`` in place, for matrices ``a`` [m, k], ``b`` [k, n] and ``c`` [m, n] of one float
    dtype; ``scale``, a number or an array of one element (read on the host only for numpy's BLAS), is rounded
    to that dtype."""
    gemm = _blas(c, a, b)
    ta, tb = (_operand(a), _operand(b)) if gemm is not None else (None, None)
    if gemm is None or ta is None or tb is None:
        c -= xp.matmul(a, xp.multiply(b, scale))
        return
    (m, k), n = a.shape, b.shape[1]
    if k == 0:
        return
    alpha = -(scale.item() if isinstance(scale, np.ndarray) else float(scale))
    gemm(_ROW_MAJOR, ta[0], tb[0], m, n, k, alpha, a.ctypes.data, ta[1], b.ctypes.data, tb[1], 1.0, c.ctypes.data, n)
