"""Data types and variable kinds, and their proto enum values.

In memory a dtype is its numpy name (``"float32"``); a variable kind is a
:class:`VarKind` member whose value is the proto ``VarType.Type`` number.
"""

from __future__ import annotations

import enum

import numpy as np

from blockir.errors import BlockirError

# numpy name -> VarType.Type value (Paddle's numbering).
DTYPE_TO_PROTO: dict[str, int] = {
    "bool": 0,
    "int16": 1,
    "int32": 2,
    "int64": 3,
    "float16": 4,
    "float32": 5,
    "float64": 6,
    "uint8": 20,
    "int8": 21,
    "bfloat16": 22,
    "complex64": 23,
    "complex128": 24,
    "uint16": 36,
    "uint32": 37,
    "uint64": 38,
}
PROTO_TO_DTYPE: dict[int, str] = {v: k for k, v in DTYPE_TO_PROTO.items()}
DTYPES: tuple[str, ...] = tuple(DTYPE_TO_PROTO)
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})
INT_DTYPES = frozenset({"int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"})


class VarKind(enum.IntEnum):
    """What a variable holds (proto ``VarType.Type`` values that are not dtypes)."""

    LOD_TENSOR = 7
    SELECTED_ROWS = 8
    FEED_MINIBATCH = 9
    FETCH_LIST = 10
    STEP_SCOPES = 11
    LOD_RANK_TABLE = 12
    LOD_TENSOR_ARRAY = 13
    PLACE_LIST = 14
    READER = 15
    RAW = 17
    TUPLE = 18
    CHANNEL = 100
    CHANNEL_LIST = 101

    @property
    def text(self) -> str:
        return self.name.lower()


def to_dtype(dtype: object) -> str:
    """Normalise a dtype given as a name, numpy dtype or numpy scalar type to its numpy name."""
    if isinstance(dtype, str) and dtype in DTYPE_TO_PROTO:
        return dtype
    aliases = {
        "float": "float32",
        "double": "float64",
        "int": "int32",
        "long": "int64",
        "fp16": "float16",
        "fp32": "float32",
        "fp64": "float64",
        "bf16": "bfloat16",
    }
    if isinstance(dtype, str) and dtype in aliases:
        return aliases[dtype]
    try:
        name = np.dtype(dtype).name  # type: ignore[call-overload]
    except (TypeError, ValueError, SyntaxError):  # numpy parses some strings as type expressions
        name = None
    if name not in DTYPE_TO_PROTO:
        raise BlockirError(f"unknown dtype {dtype!r}; expected one of {', '.join(DTYPES)}")
    return name
