"""Random draws keyed by a table's seed and an id: a batch of ids at a time, each id's the same in any batch.

A parameter server makes a sparse table's rows on first use, a batch of new ids at a time, and draws whether an
entry policy admits an id at each sighting. Both must depend on nothing but the table's seed and the id (and
the sighting), never on the batch an id came in, its order there, or the number of servers. A generator per
id would do (one ``numpy.random.Generator`` seeded by the pair), at the cost of a Python call per id; this
module draws them for a whole batch in a few numpy passes instead, as a counter-based generator: the key of
an id is SplitMix64's finaliser of the id mixed with the seed (a bijection of the id: distinct ids, distinct
keys), and the ``k``-th number of its stream the finaliser of ``key + k * golden`` (SplitMix64's stream
from that key, which passes BigCrush). ``purpose`` separates the streams of one seed and id (the row's first
value, the entry's draws), so that the two never correlate.

Paddle's servers draw a new row from a thread's engine (its values depend on which thread made it and when);
blockir's are reproducible across runs, orders and shardings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.ops.common import np_dtype

__all__ = ["ROW", "SIGHTING", "SAMPLERS", "first_rows", "uniforms"]

ROW, SIGHTING = 1, 2  # the purposes: a row's first value, an entry policy's draw at a sighting

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def _mix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser of ``x`` (uint64), in place (integer arithmetic wraps modulo 2**64)."""
    x ^= x >> _S30
    x *= _M1
    x ^= x >> _S27
    x *= _M2
    x ^= x >> _S31
    return x


def _keys(seed: int, purpose: int, ids: np.ndarray) -> np.ndarray:
    salt = _mix(_mix(np.array([seed % 2**64], np.uint64)) ^ np.uint64(purpose))
    return _mix(np.asarray(ids, np.int64).astype(np.uint64) ^ salt)


def uniforms(seed: int, purpose: int, ids: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """Numbers in [0, 1) (float64, 53 random bits): at ``[i, j]`` the ``counters[i, j]``-th of id ``ids[i]``'s
    stream (``counters`` broadcast against ``[len(ids), 1]``: a row of counters for every id, or a column of
    one counter per id)."""
    x = _keys(seed, purpose, ids)[:, None] + np.asarray(counters, np.uint64) * _GOLDEN
    return (_mix(x) >> _S11) * (1.0 / 2**53)


def _uniform(attrs: dict[str, Any], u: Callable[[int], np.ndarray]) -> np.ndarray:
    low, high = float(attrs["min"]), float(attrs["max"])
    return low + u(1) * (high - low)


def _gaussian(attrs: dict[str, Any], u: Callable[[int], np.ndarray]) -> np.ndarray:
    """Box-Muller: a radius from one uniform (in (0, 1]) and an angle from another."""
    radius = np.sqrt(-2.0 * np.log1p(-u(1)))
    return float(attrs["mean"]) + float(attrs["std"]) * radius * np.cos(2 * np.pi * u(2))


SAMPLERS: dict[str, Callable[[dict[str, Any], Callable[[int], np.ndarray]], np.ndarray]] = {
    "uniform_random": _uniform,
    "gaussian_random": _gaussian,
}
"""The random initializer ops a server draws rows of, by op type: from the op's attributes and ``u(k)``, the
``k``-th uniform of each element (a row of ``dim`` elements uses counters ``1..k * dim``)."""


def first_rows(op_type: str, attrs: dict[str, Any], ids: np.ndarray, dim: int) -> np.ndarray:
    """The first values of the rows of ``ids`` that the random initializer op ``op_type`` with ``attrs`` (its
    ``seed`` and ``dtype`` among them) makes: ``[len(ids), dim]`` in the op's dtype, each row the same
    whatever the ids beside it."""
    base = np.arange(1, dim + 1, dtype=np.uint64)

    def u(k: int) -> np.ndarray:
        return uniforms(int(attrs["seed"]), ROW, ids, base + np.uint64((k - 1) * dim))

    return SAMPLERS[op_type](attrs, u).astype(np_dtype(attrs["dtype"]))
