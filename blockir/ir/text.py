"""The text form of the IR: a deterministic printer and its parser.

One line per op, every attribute typed by its spelling, so the parser needs no
op schema (it parses ops whose type is not registered)::

    program version=0 random_seed=7
    block 0 parent=-1 {
      var %x : lod_tensor<float32>[-1, 784] lod_level=1 need_check_feed
      var %fc_0.w_0 : lod_tensor<float32>[784, 256] persistable parameter
      var %ch : channel<float32> capacity=4
      %h = mul(X=%x, Y=%fc_0.w_0) {x_num_col_dims=1, y_num_col_dims=1} @cuda:0
      (Out=%r, XShape=%xs) = reshape2(X=%h) {shape=[-1, 2]}
      (Out=%s) = sum(X=[%a, %b, %c])
      go(X=%h) {sub_block=^1} is_target
    }
    block 1 parent=0 {
    }

Variables: ``var %NAME : KIND<DTYPE>[DIMS]`` (dtype and dims printed when set)
then ``lod_level=N`` and ``capacity=N`` when non-zero, ``device=D`` when set, and
the flags ``persistable parameter stop_gradient need_check_feed``.

Ops: ``%v = type(...)`` when the only output slot is ``Out`` holding exactly one
variable, else ``(Slot=..., ...) = type(...)``, or no ``=`` without outputs. A
slot prints ``X=%a``, ``X=[%a, %b]`` or ``X=[]``. Attributes keep their order.
A non-empty STRING ``op_device`` prints as the ``@DEVICE`` suffix (any other
``op_device`` stays in the braces); a target op ends with ``is_target``.

Attribute values: INT ``3``, LONG ``3L``, FLOAT ``0.5`` (shortest text that
round-trips float32), FLOAT64 ``0.1d`` (shortest round-trip double), both with
``inf``/``-inf``/``nan``/``-nan``; STRING ``"s"`` (JSON escapes); BOOLEAN
``true``/``false``; BLOCK ``^1``; lists ``[1, 2]``, ``[1L]``, ``[0.5]``,
``[0.5d]``, ``["a"]``, ``[true]``, ``[^1, ^2]``; empty lists carry their type:
``ints[] longs[] floats[] float64s[] strings[] bools[] blocks[]``.

Names made only of letters, digits and ``_ . @ / - :`` print as they are, any
other name is quoted: ``%"a b"``. Lines starting with ``#`` are comments.

``print -> parse -> print`` is the identity, and ``parse(print(p)).to_proto()``
equals ``p.to_proto()`` with one exception: the parser appends the ``@DEVICE``
suffix as the op's last attribute, so an op whose non-empty ``op_device`` was
not its last attribute comes back with ``op_device`` moved to the end (the DSL
and the passes always set it last). Parsed ops get fresh ids in order.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from blockir.errors import BlockirError, ParseError
from blockir.ir.attrs import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN, LIST_TYPES, AttrType, normalize
from blockir.ir.core import TOO_DEEP, Block, Operator, Program, Variable, too_deep
from blockir.ir.dtypes import VarKind, to_dtype

__all__ = [
    "block_lines",
    "format_attr_value",
    "format_block",
    "format_op",
    "format_program",
    "format_var",
    "parse",
    "parse_program",
    "program_lines",
]

_PLAIN = re.compile(r"[A-Za-z0-9_.@/:-]+")
_NUMBER = re.compile(r"-?(?:inf|nan|[0-9]+(\.[0-9]*)?([eE][+-]?[0-9]+)?)([Ld]?)")
_INTEGER = re.compile(r"-?[0-9]+")
_MAX_DIGITS = 40  # longer integer literals cannot fit any attribute or dimension

_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}
# The spelling of an empty list of each list type.
_EMPTY_LIST = {t: t.name.lower() for t in LIST_TYPES}
_EMPTY_LIST[AttrType.BOOLEANS] = "bools"
_EMPTY_LIST_OF = {spelling: t for t, spelling in _EMPTY_LIST.items()}
_LIST_OF = {scalar: lst for lst, scalar in LIST_TYPES.items()}
_DEVICE_ATTR = "op_device"
_VAR_FLAGS = (
    ("persistable", "persistable"),
    ("parameter", "is_parameter"),
    ("stop_gradient", "stop_gradient"),
    ("need_check_feed", "need_check_feed"),
)


# -- printer ---------------------------------------------------------------------


def _quote(s: str) -> str:
    out = ['"']
    for ch in s:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ch.isprintable():
            out.append(ch)
        else:  # JSON escapes: UTF-16 code units, astral characters as surrogate pairs
            units = ch.encode("utf-16-be", "surrogatepass")
            out.extend(f"\\u{units[i]:02x}{units[i + 1]:02x}" for i in range(0, len(units), 2))
    out.append('"')
    return "".join(out)


def _name(s: str) -> str:
    return s if _PLAIN.fullmatch(s) else _quote(s)


def _ref(name: str) -> str:
    return "%" + _name(name)


def _float(v: float, single: bool) -> str:
    if math.isnan(v):
        return "-nan" if math.copysign(1.0, v) < 0 else "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    text = str(np.float32(v)) if single else repr(float(v))
    return text if "." in text or "e" in text else text + ".0"


def _scalar(value: Any, t: AttrType) -> str:
    if t is AttrType.INT:
        return str(value)
    if t is AttrType.LONG:
        return f"{value}L"
    if t is AttrType.FLOAT:
        return _float(value, single=True)
    if t is AttrType.FLOAT64:
        return _float(value, single=False) + "d"
    if t is AttrType.STRING:
        return _quote(value)
    if t is AttrType.BOOLEAN:
        return "true" if value else "false"
    if t is AttrType.VAR:
        return _ref(value)
    if t is AttrType.SCALAR:
        return f"scalar({_scalar_body(value)})"
    return f"^{value}"  # BLOCK


def _scalar_body(value: bool | int | float | complex) -> str:
    """A SCALAR's value as its kind's literal: ``true``, ``3L``, ``0.5d``, ``complex(1.0d, -2.0d)``."""
    if isinstance(value, bool):
        return _scalar(value, AttrType.BOOLEAN)
    if isinstance(value, int):
        return _scalar(value, AttrType.LONG)
    if isinstance(value, float):
        return _scalar(value, AttrType.FLOAT64)
    return f"complex({_scalar(value.real, AttrType.FLOAT64)}, {_scalar(value.imag, AttrType.FLOAT64)})"


def format_attr_value(value: Any, t: AttrType) -> str:
    """The text of an attribute value of type ``t`` (its type is visible in the text)."""
    t = AttrType(t)
    if t in LIST_TYPES:
        if not value:
            return _EMPTY_LIST[t] + "[]"
        return "[" + ", ".join(_scalar(v, LIST_TYPES[t]) for v in value) + "]"
    return _scalar(value, t)


def _slots(slots: Mapping[str, tuple[str, ...]]) -> str:
    parts = []
    for slot, names in slots.items():
        value = _ref(names[0]) if len(names) == 1 else "[" + ", ".join(map(_ref, names)) + "]"
        parts.append(f"{_name(slot)}={value}")
    return ", ".join(parts)


def _suffix_device(op: Operator) -> str:
    """The op's device when it prints as the ``@`` suffix, else ''."""
    if op.attr_types.get(_DEVICE_ATTR) is AttrType.STRING:
        return op.attrs[_DEVICE_ATTR]
    return ""


def format_op(op: Operator) -> str:
    """One line: ``outputs = type(inputs) {attrs} @device is_target``."""
    outputs = op.outputs
    if list(outputs) == ["Out"] and len(outputs["Out"]) == 1:
        lhs = _ref(outputs["Out"][0]) + " = "
    elif outputs:
        lhs = f"({_slots(outputs)}) = "
    else:
        lhs = ""
    line = f"{lhs}{_name(op.type)}({_slots(op.inputs)})"
    device = _suffix_device(op)
    attrs = [
        f"{_name(k)}={format_attr_value(v, op.attr_types[k])}"
        for k, v in op.attrs.items()
        if not (device and k == _DEVICE_ATTR)
    ]
    if attrs:
        line += " {" + ", ".join(attrs) + "}"
    if device:
        line += " @" + _name(device)
    if op.is_target:
        line += " is_target"
    return line


def format_var(var: Variable) -> str:
    """``var %name : kind<dtype>[dims] lod_level=N capacity=N device=D flags``."""
    text = f"var {_ref(var.name)} : {var.kind.text}"
    if var.dtype is not None:
        text += f"<{var.dtype}>"
    if var.shape is not None:
        text += "[" + ", ".join(map(str, var.shape)) + "]"
    if var.lod_level:
        text += f" lod_level={var.lod_level}"
    if var.capacity:
        text += f" capacity={var.capacity}"
    if var.device:
        text += f" device={_name(var.device)}"
    for word, field in _VAR_FLAGS:
        if getattr(var, field):
            text += " " + word
    return text


def block_lines(block: Block) -> Iterator[tuple[str, Operator | None]]:
    """The lines of :func:`format_block`, each with the op it prints (None for the others)."""
    header = f"block {block.idx} parent={block.parent_idx}"
    if block.forward_block_idx != -1:
        header += f" forward_block_idx={block.forward_block_idx}"
    if block.device:
        header += f" device={_name(block.device)}"
    yield header + " {", None
    for v in block.vars.values():
        yield "  " + format_var(v), None
    for op in block.ops:
        yield "  " + format_op(op), op
    yield "}", None


def format_block(block: Block) -> str:
    """The block's header, its variables, its ops (indented) and a closing brace."""
    return "\n".join(line for line, _ in block_lines(block))


def program_lines(program: Program) -> Iterator[tuple[str, Operator | None]]:
    """The lines of :func:`format_program`, each with the op it prints (None for the others)."""
    header = f"program version={program.version}"
    if program.random_seed:
        header += f" random_seed={program.random_seed}"
    if program.device:
        header += f" device={_name(program.device)}"
    if program.op_versions:
        header += " op_versions={" + ", ".join(f"{_name(t)}={v}" for t, v in program.op_versions.items()) + "}"
    yield header, None
    for block in program.blocks:
        yield from block_lines(block)


def format_program(program: Program) -> str:
    """The whole program (no trailing newline); :func:`parse_program` reads it back."""
    return "\n".join(line for line, _ in program_lines(program))


# -- parser ----------------------------------------------------------------------


class _Parser:
    """A cursor over the lines of the text; every failure is a :class:`ParseError`."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.lines = text.split("\n")
        self.row = -1
        self.line = ""
        self.pos = 0

    # -- errors --------------------------------------------------------------
    def fail(self, message: str, pos: int | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        return ParseError(f"{self.source}:{self.row + 1}:{pos + 1}: {message}\n  {self.line}\n  {' ' * pos}^")

    def expected(self, what: str, pos: int | None = None) -> ParseError:
        pos = self.pos if pos is None else pos
        if pos >= len(self.line):
            found = "end of line"
        else:
            m = _PLAIN.match(self.line, pos)
            found = repr(m.group() if m else self.line[pos])
        return self.fail(f"expected {what}, found {found}", pos)

    # -- lines ---------------------------------------------------------------
    def next_line(self, what: str) -> bool:
        """Move to the next line that is not blank or a comment; False at the end of input."""
        while self.row + 1 < len(self.lines):
            self.row += 1
            self.line, self.pos = self.lines[self.row], 0
            self.ws()
            if not self.at_end() and self.line[self.pos] != "#":
                return True
        if what:
            self.pos = len(self.line)
            raise self.fail(f"expected {what}, found end of input")
        return False

    def end_of_line(self) -> None:
        self.ws()
        if not self.at_end():
            raise self.expected("end of line")

    # -- tokens --------------------------------------------------------------
    def ws(self) -> None:
        while self.pos < len(self.line) and self.line[self.pos] in " \t\r":
            self.pos += 1

    def mark(self) -> int:
        """The position of the next token (whitespace skipped)."""
        self.ws()
        return self.pos

    def at_end(self) -> bool:
        return self.pos >= len(self.line)

    def peek(self) -> str:
        self.ws()
        return self.line[self.pos] if self.pos < len(self.line) else ""

    def eat(self, token: str) -> bool:
        self.ws()
        if self.line.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def expect(self, token: str) -> None:
        if not self.eat(token):
            raise self.expected(repr(token))

    def word(self) -> str | None:
        """A plain (unquoted) name at the cursor, consumed; None when there is none."""
        self.ws()
        m = _PLAIN.match(self.line, self.pos)
        if m is None:
            return None
        self.pos = m.end()
        return m.group()

    def keyword(self, word: str) -> None:
        start = self.mark()
        if self.word() != word:
            raise self.expected(repr(word), start)

    def string(self) -> str:
        """A quoted string literal with JSON escapes."""
        start = self.mark()
        i = start + 1
        while i < len(self.line) and self.line[i] != '"':
            i += 2 if self.line[i] == "\\" else 1
        if i >= len(self.line):
            raise self.fail("unterminated string", start)
        try:
            value = json.loads(self.line[start : i + 1])
        except ValueError as e:
            raise self.fail(f"invalid string literal ({e.args[0].split(':')[0]})", start) from None
        self.pos = i + 1
        return value

    def name(self, what: str) -> str:
        """A plain or quoted name."""
        if self.peek() == '"':
            return self.string()
        start = self.mark()
        value = self.word()
        if value is None:
            raise self.expected(what, start)
        return value

    def ref(self) -> str:
        if self.peek() != "%":
            raise self.expected("a variable (%name)")
        self.pos += 1
        return self.name("a variable name after '%'")

    def integer(self, what: str = "an integer", lo: int = INT64_MIN, hi: int = INT64_MAX) -> int:
        start = self.mark()
        m = _INTEGER.match(self.line, start)
        if m is None or len(m.group()) > _MAX_DIGITS or _PLAIN.match(self.line, m.end()):
            raise self.expected(what)
        self.pos = m.end()
        value = int(m.group())
        if not lo <= value <= hi:
            raise self.fail(f"{value} is out of range [{lo}, {hi}]", start)
        return value

    def int32(self) -> int:
        return self.integer(lo=INT32_MIN, hi=INT32_MAX)

    def sequence(self, close: str, item: Callable[[], Any]) -> list[Any]:
        """Comma-separated items up to ``close``; the opening bracket is consumed."""
        items: list[Any] = []
        if self.eat(close):
            return items
        while True:
            items.append(item())
            if self.eat(close):
                return items
            if not self.eat(","):
                raise self.expected(f"',' or {close!r}")

    # -- attribute values ------------------------------------------------------
    def scalar(self) -> tuple[Any, AttrType]:
        """One attribute scalar (no lists) and the type its spelling says."""
        c = self.peek()
        if c == '"':
            return self.string(), AttrType.STRING
        if c == "^":
            self.pos += 1
            return self.integer("a block index after '^'"), AttrType.BLOCK
        if c == "%":
            return self.ref(), AttrType.VAR
        if self.line.startswith("scalar(", self.pos):
            self.pos += len("scalar(")
            return self.scalar_body(), AttrType.SCALAR
        m = _NUMBER.match(self.line, self.pos)
        if m is not None and not _PLAIN.match(self.line, m.end()):
            self.pos = m.end()
            body = m.group()[: m.start(3) - m.start()]
            is_int = _INTEGER.fullmatch(body) is not None
            if is_int and len(body) > _MAX_DIGITS:
                raise self.fail("integer literal out of range", m.start())
            if m.group(3) == "L":
                if not is_int:
                    raise self.fail("a LONG literal (NL) must be an integer", m.start())
                return int(body), AttrType.LONG
            if m.group(3) == "d":
                return float(body), AttrType.FLOAT64
            return (int(body), AttrType.INT) if is_int else (float(body), AttrType.FLOAT)
        start = self.mark()
        word = self.word()
        if word in ("true", "false"):
            return word == "true", AttrType.BOOLEAN
        raise self.expected(
            'an attribute value (3, 3L, 0.5, 0.5d, "s", true, ^1, %var, scalar(0.5d), [...], ints[])', start
        )

    def scalar_body(self) -> bool | int | float | complex:
        """A SCALAR's value after ``scalar(``, to the closing parenthesis: ``true``, ``3L``, ``0.5d`` or
        ``complex(1.0d, -2.0d)``."""
        start = self.mark()
        if self.line.startswith("complex(", start):
            self.pos += len("complex(")
            parts = []
            for close in (",", ")"):
                pos = self.mark()
                value, t = self.scalar()
                if t is not AttrType.FLOAT64:
                    raise self.fail(f"a complex scalar's parts are FLOAT64 (0.5d), got {t.name}", pos)
                parts.append(value)
                self.expect(close)
            self.expect(")")
            return complex(parts[0], parts[1])
        value, t = self.scalar()
        if t not in (AttrType.BOOLEAN, AttrType.LONG, AttrType.FLOAT64):
            raise self.fail(f"a scalar is a BOOLEAN, LONG (3L), FLOAT64 (0.5d) or complex(...), got {t.name}", start)
        self.expect(")")
        return value

    def attr_value(self, name: str) -> tuple[Any, AttrType]:
        start = self.mark()
        m = _PLAIN.match(self.line, start)
        if m and m.group() in _EMPTY_LIST_OF and self.line.startswith("[]", m.end()):
            self.pos = m.end() + 2
            return (), _EMPTY_LIST_OF[m.group()]
        if self.eat("["):
            items: list[tuple[Any, AttrType]] = []

            def item() -> None:
                pos = self.mark()
                value, t = self.scalar()
                if items and t is not items[0][1]:
                    raise self.fail(f"list element is {t.name}, the list's first element is {items[0][1].name}", pos)
                items.append((value, t))

            self.sequence("]", item)
            if not items:
                raise self.fail(
                    "an empty list needs its type: " + ", ".join(f"{v}[]" for v in _EMPTY_LIST.values()), start
                )
            value, t = tuple(v for v, _ in items), _LIST_OF[items[0][1]]
        else:
            value, t = self.scalar()
        try:
            return normalize(value, t, name), t
        except BlockirError as e:
            raise self.fail(str(e), start) from None

    # -- key=value options (headers, variable declarations) --------------------
    def options(self, spec: dict[str, Callable[[], Any] | None], stop: str = "") -> dict[str, Any]:
        """``key=value`` pairs (and bare flags, whose spec is None) up to ``stop`` or the line's end."""
        found: dict[str, Any] = {}
        while True:
            c = self.peek()
            if not c or c == stop:
                return found
            start = self.mark()
            key = self.word()
            if key not in spec:
                allowed = " ".join(k if f is None else k + "=" for k, f in spec.items())
                end = f" or {stop!r}" if stop else ""
                raise self.expected(f"one of: {allowed}{end}", start)
            if key in found:
                raise self.fail(f"{key} given twice", start)
            parse_value = spec[key]
            if parse_value is None:
                found[key] = True
            else:
                if self.line.startswith("=", self.pos):
                    self.pos += 1
                else:
                    raise self.expected("'='")
                found[key] = parse_value()

    # -- program structure -----------------------------------------------------
    def device_name(self) -> str:
        return self.name("a device name (cpu, cpu:1, cuda:0)")

    def program(self) -> Program:
        self.next_line("the program header 'program version=N ...'")
        self.keyword("program")
        opts = self.options(
            {
                "version": self.integer,
                "random_seed": self.integer,
                "device": self.device_name,
                "op_versions": self.op_versions,
            }
        )
        program = Program._bare()
        program.version = opts.get("version", 0)
        program.random_seed = opts.get("random_seed", 0)
        program.device = opts.get("device", "")
        program.op_versions = opts.get("op_versions", {})
        headers: list[tuple[int, str]] = []  # per block: the row and text of its header
        while self.next_line("" if program.blocks else "block 0"):
            headers.append((self.row, self.line))
            self.block(program)
        deep = too_deep([b.parent_idx for b in program.blocks])
        if deep is not None:
            self.row, self.line = headers[deep]
            raise self.fail(f"block {deep}: {TOO_DEEP}", self.line.find("parent="))
        return program

    def op_versions(self) -> dict[str, int]:
        """``{conv2d=1, ...}``: Paddle's op_version_map."""
        self.expect("{")
        versions: dict[str, int] = {}

        def item() -> None:
            start = self.mark()
            op_type = self.name("an op type")
            if op_type in versions:
                raise self.fail(f"op type {op_type!r} has two versions", start)
            self.expect("=")
            versions[op_type] = self.int32()

        self.sequence("}", item)
        return versions

    def block(self, program: Program) -> None:
        start = self.mark()
        self.keyword("block")
        idx_pos = self.mark()
        idx = self.integer("a block index", 0, INT32_MAX)
        if idx != len(program.blocks):
            raise self.fail(
                f"block {idx} out of order: blocks are numbered from 0, expected block {len(program.blocks)}", idx_pos
            )
        opts = self.options(
            {"parent": self.int32, "forward_block_idx": self.int32, "device": self.device_name}, stop="{"
        )
        if "parent" not in opts:
            raise self.fail("the block header needs parent=N", start)
        self.expect("{")
        self.end_of_line()
        block = program._load_block(opts["parent"], opts.get("forward_block_idx", -1), opts.get("device", ""))
        while True:
            self.next_line(f"'}}' closing block {idx}")
            if self.eat("}"):
                self.end_of_line()
                return
            if self.is_var_decl():
                self.var(block)
            else:
                self.op(block)

    def is_var_decl(self) -> bool:
        m = _PLAIN.match(self.line, self.pos)
        if m is None or m.group() != "var":
            return False
        rest = self.line[m.end() :].lstrip(" \t\r")
        return rest.startswith("%")

    def var(self, block: Block) -> None:
        self.keyword("var")
        name_pos = self.mark()
        name = self.ref()
        self.expect(":")
        kind_pos = self.mark()
        kind_text = self.word()
        kinds = {k.text: k for k in VarKind}
        if kind_text not in kinds:
            raise self.expected("a variable kind (" + ", ".join(kinds) + ")", kind_pos)
        try:
            var = Variable(name, kinds[kind_text], dtype=None, shape=None)
        except BlockirError as e:
            raise self.fail(str(e), name_pos) from None
        if self.line.startswith("<", self.pos):
            self.pos += 1
            dtype_pos = self.mark()
            try:
                var.dtype = to_dtype(self.name("a dtype"))
            except BlockirError as e:
                raise self.fail(str(e), dtype_pos) from None
            self.expect(">")
        if self.line.startswith("[", self.pos):
            self.pos += 1
            var.shape = tuple(self.sequence("]", lambda: self.integer("a dimension")))
        spec: dict[str, Callable[[], Any] | None] = {
            "lod_level": self.int32,
            "capacity": self.integer,
            "device": self.device_name,
        }
        spec.update((word, None) for word, _ in _VAR_FLAGS)
        opts = self.options(spec)
        var.lod_level = opts.get("lod_level", 0)
        var.capacity = opts.get("capacity", 0)
        var.device = opts.get("device", "")
        for word, field in _VAR_FLAGS:
            setattr(var, field, opts.get(word, False))
        if name in block.vars:
            raise self.fail(f"variable {name!r} declared twice in block {block.idx}", name_pos)
        block.add_var(var)

    def key(self, what: str, seen: dict[str, Any]) -> str:
        """``NAME=`` of a slot or attribute not in ``seen``; returns NAME."""
        start = self.mark()
        key = self.name(f"a {what} name")
        if key in seen:
            raise self.fail(f"{what} {key!r} given twice", start)
        self.expect("=")
        return key

    def slot_list(self, close: str) -> dict[str, tuple[str, ...]]:
        slots: dict[str, tuple[str, ...]] = {}

        def item() -> None:
            slot = self.key("slot", slots)
            slots[slot] = tuple(self.sequence("]", self.ref)) if self.eat("[") else (self.ref(),)

        self.sequence(close, item)
        return slots

    def op(self, block: Block) -> None:
        outputs: dict[str, tuple[str, ...]] = {}
        if self.peek() == "%":
            outputs = {"Out": (self.ref(),)}
            self.expect("=")
        elif self.eat("("):
            outputs = self.slot_list(")")
            self.expect("=")
        type_pos = self.mark()
        op_type = self.name("an op type, 'var %name : ...', or '}'")
        if not op_type:
            raise self.fail("op type must be a non-empty string", type_pos)
        self.expect("(")
        inputs = self.slot_list(")")
        attrs: dict[str, Any] = {}
        types: dict[str, AttrType] = {}
        if self.eat("{"):

            def attr() -> None:
                key = self.key("attribute", attrs)
                attrs[key], types[key] = self.attr_value(key)

            self.sequence("}", attr)
        if self.eat("@"):
            start = self.mark()
            device = self.device_name()
            if _DEVICE_ATTR in attrs:
                raise self.fail(f"{_DEVICE_ATTR} given both in the braces and as '@'", start)
            attrs[_DEVICE_ATTR], types[_DEVICE_ATTR] = device, AttrType.STRING
        is_target = False
        if self.peek():
            start = self.mark()
            if self.word() != "is_target":
                raise self.expected("attributes {...}, a device @name, 'is_target' or end of line", start)
            is_target = True
        self.end_of_line()
        block._load_op(op_type, inputs, outputs, attrs, types, is_target)


def parse_program(text: str, source: str = "<text>") -> Program:
    """Parse the text form back into a :class:`Program`.

    Any malformation raises :class:`ParseError` naming ``source:line:col``, the
    offending line and what was expected there.
    """
    if not isinstance(text, str):
        raise TypeError(f"parse_program expects str, got {type(text).__name__}")
    return _Parser(text, source).program()


parse = parse_program
