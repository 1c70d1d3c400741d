"""Attribute types and the normalisation of attribute values.

In memory an attribute is a plain Python value plus its :class:`AttrType`:
INT/LONG -> int, FLOAT/FLOAT64 -> float (a FLOAT is rounded to float32 when set,
so it survives the wire format exactly), STRING -> str, BOOLEAN -> bool, the
list types -> tuple of those (immutable, so that an attribute changes only
through ``Operator.set_attr``), BLOCK -> block index (int), BLOCKS -> tuple of
block indices. Paddle 2.5+'s types: VAR -> the name of the variable the value
is read from when the op runs (str), VARS -> tuple of names, SCALAR -> bool,
int (int64), float (double) or complex, SCALARS -> tuple of those.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import numpy as np

from blockir.errors import BlockirError

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


class AttrType(enum.IntEnum):
    """Proto ``AttrType`` values (Paddle's numbering)."""

    INT = 0
    FLOAT = 1
    STRING = 2
    INTS = 3
    FLOATS = 4
    STRINGS = 5
    BOOLEAN = 6
    BOOLEANS = 7
    BLOCK = 8
    LONG = 9
    BLOCKS = 10
    LONGS = 11
    FLOAT64S = 12
    VAR = 13
    VARS = 14
    FLOAT64 = 15
    SCALAR = 16
    SCALARS = 17


LIST_TYPES = {
    AttrType.INTS: AttrType.INT,
    AttrType.FLOATS: AttrType.FLOAT,
    AttrType.STRINGS: AttrType.STRING,
    AttrType.BOOLEANS: AttrType.BOOLEAN,
    AttrType.LONGS: AttrType.LONG,
    AttrType.FLOAT64S: AttrType.FLOAT64,
    AttrType.BLOCKS: AttrType.BLOCK,
    AttrType.VARS: AttrType.VAR,
    AttrType.SCALARS: AttrType.SCALAR,
}


def _scalar(value: Any, t: AttrType, name: str) -> Any:
    if t is AttrType.BOOLEAN:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
    elif t in (AttrType.INT, AttrType.LONG, AttrType.BLOCK):
        if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
            lo, hi = (INT64_MIN, INT64_MAX) if t is AttrType.LONG else (INT32_MIN, INT32_MAX)
            if not lo <= int(value) <= hi:
                raise BlockirError(f"attribute {name!r}: {value} does not fit {t.name}")
            if t is AttrType.BLOCK and value < 0:
                raise BlockirError(f"attribute {name!r}: block index {value} is negative")
            return int(value)
        if t is AttrType.BLOCK and hasattr(value, "idx"):
            return int(value.idx)
    elif t in (AttrType.FLOAT, AttrType.FLOAT64):
        if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_)):
            try:
                double = float(value)
            except OverflowError:  # a Python int beyond the double range
                raise BlockirError(f"attribute {name!r}: {value!r} does not fit {t.name}") from None
            if t is AttrType.FLOAT64:
                return double
            with np.errstate(over="ignore"):
                single = float(np.float32(double))
            if math.isinf(single) and math.isfinite(double):
                raise BlockirError(f"attribute {name!r}: {value!r} does not fit FLOAT (float32); use FLOAT64")
            return single
    elif t is AttrType.STRING:
        if isinstance(value, str):
            return value
    elif t is AttrType.VAR:
        if isinstance(value, str) and value:
            return value
    elif t is AttrType.SCALAR:
        return _scalar_value(value, name)
    raise BlockirError(f"attribute {name!r}: {value!r} is not a valid {t.name}")


def _scalar_value(value: Any, name: str) -> bool | int | float | complex:
    """A SCALAR's value: a bool, an int64, a double or a complex (Paddle's ``Scalar``)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(_scalar(value, AttrType.LONG, name))
    if isinstance(value, (float, np.floating)):
        return float(value)
    if isinstance(value, (complex, np.complexfloating)):
        return complex(value)
    raise BlockirError(f"attribute {name!r}: {value!r} is not a valid SCALAR (a bool, int, float or complex)")


def normalize(value: Any, t: AttrType, name: str = "?") -> Any:
    """Return ``value`` converted to the in-memory form of type ``t``; raise if it does not fit."""
    t = AttrType(t)
    if t in LIST_TYPES:
        if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
            raise BlockirError(f"attribute {name!r}: {value!r} is not a list for {t.name}")
        return tuple(_scalar(v, LIST_TYPES[t], name) for v in value)
    return _scalar(value, t, name)


def infer_type(value: Any, name: str = "?") -> AttrType:
    """The attribute type a Python value gets when no schema says otherwise."""

    def scalar_type(v: Any) -> AttrType:
        if isinstance(v, (bool, np.bool_)):
            return AttrType.BOOLEAN
        if isinstance(v, (int, np.integer)):
            return AttrType.INT if INT32_MIN <= int(v) <= INT32_MAX else AttrType.LONG
        if isinstance(v, np.float32):
            return AttrType.FLOAT
        if isinstance(v, (float, np.floating)):
            return AttrType.FLOAT64 if isinstance(v, np.float64) else AttrType.FLOAT
        if isinstance(v, str):
            return AttrType.STRING
        if hasattr(v, "idx") and hasattr(v, "ops"):
            return AttrType.BLOCK
        raise BlockirError(f"attribute {name!r}: cannot store a value of type {type(v).__name__}")

    if isinstance(value, (list, tuple)):
        if not value:
            raise BlockirError(f"attribute {name!r}: the type of an empty list must be given")
        kinds = {scalar_type(v) for v in value}
        if kinds <= {AttrType.INT, AttrType.LONG}:
            return AttrType.LONGS if AttrType.LONG in kinds else AttrType.INTS
        if kinds <= {AttrType.FLOAT, AttrType.FLOAT64}:
            return AttrType.FLOAT64S if AttrType.FLOAT64 in kinds else AttrType.FLOATS
        if len(kinds) != 1:
            raise BlockirError(f"attribute {name!r}: mixed list {value!r}")
        single = kinds.pop()
        return {v: k for k, v in LIST_TYPES.items()}[single]
    return scalar_type(value)
