"""Hypothesis strategies for random IR programs, reusable by any test.

``programs()`` builds :class:`Program` objects through the IR API (ops through the
loaders' unchecked path, as a file may hold them, whatever their schemas say): up to four
nested blocks (BLOCK/BLOCKS attributes refer to them), variables of every
:class:`VarKind` (LoD levels, channel capacities, every flag), ops of
registered and unregistered types with 0..3 variables per slot, and attributes
of every :class:`AttrType` with edge values (int32/int64 bounds, float32
values, doubles, inf, nan, -0.0, unicode strings, empty lists, variable names,
scalars of every kind), and op versions. Names are sometimes ones the text form has
to quote.

Options restrict programs to what another format can hold:
``channels=False`` leaves out channel kinds, ``dtypes`` limits the element types
(Paddle's legacy schema has neither addition).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from blockir.ir import AttrType, Block, Operator, Program, Variable, VarKind
from blockir.ir.attrs import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, normalize
from blockir.ir.dtypes import DTYPES

PLAIN_NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.@/:-]{0,10}", fullmatch=True)
# Names that must be quoted: spaces, quotes, escapes, unicode, control characters.
ODD_NAMES = st.one_of(
    st.sampled_from(
        [
            "a b",
            'q"uote',
            "back\\slash",
            "new\nline",
            "tab\t",
            "é",
            "名字",
            "x=1",
            "%p",
            "{}",
            "#c",
            "\u2028",
            "\x00",
            "emoji\U0001f600",
            "var",
            "}",
            "is_target",
        ]
    ),
    st.text(min_size=1, max_size=6),
)
NAMES = st.one_of(PLAIN_NAMES, PLAIN_NAMES, PLAIN_NAMES, ODD_NAMES)
OP_TYPES = st.one_of(
    st.sampled_from(
        ["mul", "relu", "elementwise_add", "feed", "fetch", "sum", "reshape2", "go", "while", "test_unregistered_op"]
    ),
    NAMES,
)
DEVICES = st.sampled_from(["cpu", "cpu:1", "cuda", "cuda:0", "cuda:12", "cuda:x", "gpu:-1", "weird device"])
FLOAT32 = st.one_of(
    st.floats(width=32, allow_nan=False),
    st.sampled_from([math.nan, -math.nan, 0.1, -0.0, 3.4028234663852886e38, 1e-45]),
)
FLOAT64 = st.one_of(
    st.floats(allow_nan=False), st.sampled_from([math.nan, -math.nan, 0.1, -0.0, 1.7976931348623157e308, 5e-324])
)
TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["", '"', "\\", "\n", "ümlaut", "\U0001f600"]))

_SCALARS: dict[AttrType, Any] = {
    AttrType.INT: st.one_of(st.integers(INT32_MIN, INT32_MAX), st.sampled_from([INT32_MIN, INT32_MAX, 0, -1])),
    AttrType.LONG: st.one_of(st.integers(INT64_MIN, INT64_MAX), st.sampled_from([INT64_MIN, INT64_MAX, 0])),
    AttrType.FLOAT: FLOAT32,
    AttrType.FLOAT64: FLOAT64,
    AttrType.STRING: TEXT,
    AttrType.BOOLEAN: st.booleans(),
    AttrType.VAR: NAMES,
    AttrType.SCALAR: st.one_of(
        st.booleans(),
        st.integers(INT64_MIN, INT64_MAX),
        FLOAT64,
        st.builds(complex, FLOAT64, FLOAT64),
    ),
}
_LISTS = {
    AttrType.INTS: AttrType.INT,
    AttrType.LONGS: AttrType.LONG,
    AttrType.FLOATS: AttrType.FLOAT,
    AttrType.FLOAT64S: AttrType.FLOAT64,
    AttrType.STRINGS: AttrType.STRING,
    AttrType.BOOLEANS: AttrType.BOOLEAN,
    AttrType.VARS: AttrType.VAR,
    AttrType.SCALARS: AttrType.SCALAR,
}


@functools.cache
def attr_values(t: AttrType, num_blocks: int) -> st.SearchStrategy[Any]:
    """Values of attribute type ``t``; BLOCK/BLOCKS values index one of ``num_blocks`` blocks."""
    block_idx = st.integers(0, num_blocks - 1)
    if t is AttrType.BLOCK:
        return block_idx
    if t is AttrType.BLOCKS:
        return st.lists(block_idx, max_size=3)
    if t in _LISTS:
        return st.lists(_SCALARS[_LISTS[t]], max_size=4)
    return _SCALARS[t]


_KINDS = {
    channels: st.sampled_from([k for k in VarKind if channels or k not in (VarKind.CHANNEL, VarKind.CHANNEL_LIST)])
    for channels in (True, False)
}
_ATTR_TYPES = st.sampled_from(list(AttrType))
_ATTR_NAMES = st.lists(st.one_of(PLAIN_NAMES, ODD_NAMES).filter(lambda n: n != "op_device"), max_size=5, unique=True)
_OP_DEVICES = st.one_of(st.none(), DEVICES, st.just(""), st.integers(0, 3))
_SHAPES = st.lists(st.integers(-1, 2**40), max_size=4)
_BLOCK_DEVICES = st.one_of(st.just(""), DEVICES)
_VAR_NAMES = st.lists(NAMES, max_size=5, unique=True)


@st.composite
def variables(
    draw: st.DrawFn, block: Block, name: str, channels: bool = True, dtypes: Sequence[str] = DTYPES
) -> Variable:
    """Declare a variable ``name`` of a random kind (and one of ``dtypes``) in ``block``."""
    kind = draw(_KINDS[channels])
    fields: dict[str, Any] = {
        "dtype": draw(st.sampled_from(dtypes)),
        "shape": draw(_SHAPES),
        "persistable": draw(st.booleans()),
        "stop_gradient": draw(st.booleans()),
        "is_parameter": draw(st.booleans()),
        "need_check_feed": draw(st.booleans()),
        "device": draw(_BLOCK_DEVICES),
    }
    if kind in (VarKind.LOD_TENSOR, VarKind.LOD_TENSOR_ARRAY):
        fields["lod_level"] = draw(st.integers(0, 3))
    if kind in (VarKind.CHANNEL, VarKind.CHANNEL_LIST):
        fields["capacity"] = draw(st.integers(0, 2**40))
    return block.create_var(name, kind=kind, **fields)


def slot_maps(var_names: list[str]) -> st.SearchStrategy[dict[str, list[str]]]:
    """Slot name -> 0..3 variable names, mostly of ``var_names``."""
    name = st.one_of(st.sampled_from(var_names), NAMES) if var_names else NAMES
    return st.dictionaries(
        st.one_of(st.sampled_from(["X", "Y", "Out", "XShape"]), NAMES), st.lists(name, max_size=3), max_size=3
    )


@st.composite
def ops(draw: st.DrawFn, block: Block, slots: st.SearchStrategy[dict[str, list[str]]]) -> Operator:
    """Append a random op to ``block`` with slots drawn from ``slots`` (see :func:`slot_maps`)."""
    num_blocks = len(block.program.blocks)
    outputs = draw(slots)
    if draw(st.booleans()):  # the `%v = op(...)` shorthand
        outputs = {"Out": (outputs.get("X") or ["out"])[:1]}
    attrs: dict[str, Any] = {}
    attr_types: dict[str, AttrType] = {}
    for attr_name in draw(_ATTR_NAMES):
        t = draw(_ATTR_TYPES)
        attrs[attr_name], attr_types[attr_name] = normalize(draw(attr_values(t, num_blocks)), t), t
    device = draw(_OP_DEVICES)
    if device is not None:  # last, as the DSL sets it
        attrs["op_device"] = device
        attr_types["op_device"] = AttrType.INT if isinstance(device, int) else AttrType.STRING
    # The loaders' unchecked path: a program as a file may hold it, attributes of types their schemas
    # do not declare included (the verifier's to judge).
    return block._load_op(
        draw(OP_TYPES),
        {slot: tuple(names) for slot, names in draw(slots).items()},
        {slot: tuple(names) for slot, names in outputs.items()},
        attrs,
        attr_types,
        draw(st.booleans()),
    )


@st.composite
def programs(draw: st.DrawFn, channels: bool = True, max_blocks: int = 4, dtypes: Sequence[str] = DTYPES) -> Program:
    """A random program (see the module docstring)."""
    program = Program()
    program.version = draw(st.integers(0, INT64_MAX))
    program.random_seed = draw(st.one_of(st.just(0), st.integers(INT64_MIN, INT64_MAX)))
    program.device = draw(_BLOCK_DEVICES)
    program.op_versions = draw(st.dictionaries(OP_TYPES, st.integers(INT32_MIN, INT32_MAX), max_size=3))
    for i in range(1, draw(st.integers(1, max_blocks))):
        block = program.create_block(draw(st.integers(0, i - 1)))
        block.forward_block_idx = draw(st.one_of(st.just(-1), st.integers(0, i)))
    program.current_block_idx = 0
    for block in program.blocks:
        block.device = draw(_BLOCK_DEVICES)
        names = draw(_VAR_NAMES)
        for name in names:
            draw(variables(block, name, channels, dtypes))
        slots = slot_maps(names)
        for _ in range(draw(st.integers(0, 4))):
            draw(ops(block, slots))
    return program
