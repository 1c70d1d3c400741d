"""BLAS's gemm as numpy does not expose it: ``c = alpha * (a @ b) + beta * c`` in place, on operands read where
they lie (a column slice of a wider matrix is read through its leading dimension, not copied).

numpy computes ``a @ b`` into a new array, of contiguous copies of operands it cannot hand to BLAS as they are;
adding it into ``c`` is then a second pass over ``c`` and a product-sized temporary. :func:`gemm` calls the gemm
of the BLAS library numpy itself uses (the OpenBLAS its wheels ship, found in ``numpy.libs``), so that the
thread settings of numpy's BLAS (``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, threadpoolctl) apply to it too,
and answers False where it cannot (another BLAS, another array module such as CuPy, a dtype other than
float32/float64, strides, overlap): its callers then compute with ``xp``. The kernels that update a parameter by
a product (``fc_grad_sgd``'s ``W -= lr * (Input^T @ dPre)``) call :func:`subtract_product`, gemm with beta = 1;
the convolutions of ``blockir.ops.conv`` sum their filter taps' products with it
(``blockir.ops.conv._grid_product``).
"""

from __future__ import annotations

import ctypes
import functools
import math
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
    """(transpose flag, leading dimension) with which gemm reads the matrix of ``x``'s last two axes where it lies:
    one axis of unit stride (or of size 1), the other's stride a whole number of elements at least the first's
    size (a row-major matrix, a column slice of a wider one, their transposes); else None."""
    item = x.itemsize
    for flag, outer, inner in ((_NO_TRANS, -2, -1), (_TRANS, -1, -2)):
        size, stride = x.shape[inner], x.strides[outer]
        if size > 1 and x.strides[inner] != item:
            continue
        if x.shape[outer] <= 1:
            return flag, max(1, size)
        if stride % item == 0 and stride // item >= max(1, size):
            return flag, stride // item
    return None


def _usable(*arrays: Any) -> bool:
    """Whether gemm can read (and, the first, write) ``arrays`` as numpy keeps them."""
    if not all(type(x) is np.ndarray and x.ndim >= 2 and x.flags.aligned for x in arrays):
        return False
    c = arrays[0]
    return c.dtype.isnative and all(x.dtype == c.dtype for x in arrays) and c.flags.writeable


def gemm(c: Any, a: Any, b: Any, alpha: float = 1.0, beta: float = 0.0) -> bool:
    """``c = alpha * (a @ b) + beta * c`` in place by numpy's own BLAS, every operand read where it lies; False,
    with nothing done, where it cannot.

    The matrices are the last two axes: ``a`` [..., m, k], ``b`` [..., k, n], ``c`` [..., m, n], of one dtype
    (float32 or float64). Each is read in place where one of its two axes has unit stride and the other a
    leading dimension (:func:`_operand`: a view ``x[:, j : j + n]`` of a wider row-major matrix, a transposed
    view); ``c`` must have unit stride along n. The leading axes broadcast (numpy's rules) and run one gemm per
    index, in row-major order: a ``c`` of size 1 along an axis is one matrix receiving every product along it
    in turn, so that with ``beta = 1`` they add up. Refused: other array modules, other dtypes, byte-swapped or
    unaligned arrays, a read-only ``c``, a ``c`` sharing memory with ``a`` or ``b``, numpy's BLAS not found."""
    if not _usable(c, a, b) or np.may_share_memory(c, a) or np.may_share_memory(c, b):
        return False
    fn, ta, tb, tc = _gemms().get(c.dtype), _operand(a), _operand(b), _operand(c)
    if fn is None or ta is None or tb is None or tc is None or tc[0] != _NO_TRANS:
        return False
    (m, k), n = a.shape[-2:], b.shape[-1]
    if b.shape[-2] != k or c.shape[-2:] != (m, n):
        raise ValueError(f"gemm: shapes {a.shape} @ {b.shape} into {c.shape}")
    if a.ndim == b.ndim == c.ndim == 2:  # one product: no pointers to work out (a per-call cost of small gemms)
        if m and n:
            fn(
                _ROW_MAJOR,
                ta[0],
                tb[0],
                m,
                n,
                k,
                alpha,
                a.ctypes.data,
                ta[1],
                b.ctypes.data,
                tb[1],
                beta,
                c.ctypes.data,
                tc[1],
            )
        return True
    batch = np.broadcast_shapes(c.shape[:-2], a.shape[:-2], b.shape[:-2])
    count = math.prod(batch)
    if count == 0 or m == 0 or n == 0:
        return True
    index = np.indices(batch).reshape(len(batch), count)
    pointers = [
        (x.ctypes.data + np.asarray(np.broadcast_to(x, (*batch, *x.shape[-2:])).strides[:-2], np.int64) @ index)
        for x in (a, b, c)
    ]
    for pa, pb, pc in zip(*(p.tolist() for p in pointers)):
        fn(_ROW_MAJOR, ta[0], tb[0], m, n, k, alpha, pa, ta[1], pb, tb[1], beta, pc, tc[1])
    return True


def subtract_product(xp: Any, c: Any, a: Any, b: Any, scale: Any) -> None:
    """``c -= scale * (a @ b)`` in place, for matrices ``a`` [m, k], ``b`` [k, n] and ``c`` [m, n] of one float
    dtype; ``scale``, a number or an array of one element (read on the host only for numpy's BLAS), is rounded
    to that dtype: :func:`gemm` with beta = 1 from ``MIN_ELEMENTS`` elements of ``c`` on, else with ``xp``."""
    if isinstance(c, np.ndarray) and c.size >= MIN_ELEMENTS:
        alpha = -(scale.item() if isinstance(scale, np.ndarray) else float(scale))
        if gemm(c, a, b, alpha, 1.0):
            return
    c -= xp.matmul(a, xp.multiply(b, scale))
