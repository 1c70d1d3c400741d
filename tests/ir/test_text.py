"""The text form: exact spelling, round trips, and parse errors."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.errors import BlockirError, ParseError
from blockir.ir import AttrType, Program, VarKind, parse, parse_program
from blockir.ir.attrs import INT32_MIN, INT64_MAX
from blockir.ir.text import format_attr_value, format_op, format_program, format_var
from tests.ir.strategies import programs

EXAMPLE = """\
program version=0 random_seed=7
block 0 parent=-1 {
  var %x : lod_tensor<float32>[-1, 784] lod_level=1 need_check_feed
  var %fc_0.w_0 : lod_tensor<float32>[784, 256] persistable parameter
  var %feed : feed_minibatch persistable
  var %ch : channel<float32> capacity=4
  var %"a b" : selected_rows<int64>[10, 3] stop_gradient
  %h = mul(X=%x, Y=%fc_0.w_0) {x_num_col_dims=1, y_num_col_dims=1} @cuda:0
  (Out=%r, XShape=%xs) = reshape2(X=%h) {shape=[-1, 2]}
  (Out=%s) = sum(X=[%a, %b, %c])
  %o = f(X=[]) {op_device=""}
  go(X=%h) {sub_block=^1}
  fetch(X=%"a b") is_target
}
block 1 parent=0 forward_block_idx=0 device=cpu:1 {
  %y = relu(X=%h)
}"""


def build_example() -> Program:
    p = Program()
    p.random_seed = 7
    b = p.global_block()
    b.create_var("x", shape=[-1, 784], lod_level=1, need_check_feed=True)
    b.create_var("fc_0.w_0", shape=[784, 256], persistable=True, is_parameter=True)
    b.create_var("feed", kind=VarKind.FEED_MINIBATCH, persistable=True)
    b.create_var("ch", kind=VarKind.CHANNEL, capacity=4)
    b.create_var("a b", kind=VarKind.SELECTED_ROWS, dtype="int64", shape=[10, 3], stop_gradient=True)
    b.append_op(
        "mul",
        {"X": "x", "Y": "fc_0.w_0"},
        {"Out": "h"},
        {"x_num_col_dims": 1, "y_num_col_dims": 1, "op_device": "cuda:0"},
        infer=False,
    )
    b.append_op("reshape2", {"X": "h"}, {"Out": "r", "XShape": "xs"}, {"shape": [-1, 2]}, infer=False)
    b.append_op("sum", {"X": ["a", "b", "c"]}, {"Out": ["s"]}, infer=False)
    b.append_op("f", {"X": []}, {"Out": "o"}, {"op_device": ""}, infer=False)
    b.append_op("go", {"X": "h"}, None, {"sub_block": p.create_block(0)}, infer=False)
    p.rollback()
    b.append_op("fetch", {"X": "a b"}, infer=False).is_target = True
    sub = p.block(1)
    sub.forward_block_idx, sub.device = 0, "cpu:1"
    sub.append_op("relu", {"X": "h"}, {"Out": "y"}, infer=False)
    return p


def test_example_prints_exactly() -> None:
    text = str(build_example())
    # `(Out=%s) = sum(...)` is the long form of the shorthand; the printer picks the shorthand.
    assert text == EXAMPLE.replace("(Out=%s) = sum", "%s = sum")


def test_example_parses_back() -> None:
    p = parse_program(EXAMPLE)
    assert str(p) == EXAMPLE.replace("(Out=%s) = sum", "%s = sum")
    mul = p.global_block().ops[0]
    assert (mul.type, mul.inputs, mul.outputs) == ("mul", {"X": ("x",), "Y": ("fc_0.w_0",)}, {"Out": ("h",)})
    assert mul.attrs == {"x_num_col_dims": 1, "y_num_col_dims": 1, "op_device": "cuda:0"}
    assert list(mul.attrs) == ["x_num_col_dims", "y_num_col_dims", "op_device"]
    assert mul.attr_types["op_device"] is AttrType.STRING and mul.device == "cuda:0"
    assert p.global_block().ops[3].inputs == {"X": ()}
    assert p.global_block().ops[3].attrs == {"op_device": ""}
    assert [op.is_target for op in p.global_block().ops] == [False] * 5 + [True]
    x = p.global_block().var("x")
    assert (x.kind, x.dtype, x.shape, x.lod_level, x.need_check_feed) == (
        VarKind.LOD_TENSOR,
        "float32",
        (-1, 784),
        1,
        True,
    )
    ch = p.global_block().var("ch")
    assert (ch.kind, ch.dtype, ch.shape, ch.capacity) == (VarKind.CHANNEL, "float32", None, 4)
    assert p.global_block().var("a b").kind is VarKind.SELECTED_ROWS
    assert (p.block(1).parent_idx, p.block(1).forward_block_idx, p.block(1).device) == (0, 0, "cpu:1")
    assert p.random_seed == 7


def test_parsed_ops_get_fresh_ids_in_order() -> None:
    p = build_example()
    q = parse(str(p))
    assert [op.id for op in q.ops()] == list(range(7))
    assert q.global_block().append_op("relu", {"X": "h"}, {"Out": "z"}, infer=False).id == 7


def test_parser_needs_no_schema() -> None:
    p = parse('program version=3\nblock 0 parent=-1 {\n  %y = "not registered op"(In=%x) {k=1L}\n}')
    op = p.global_block().ops[0]
    assert (op.type, op.attrs, op.attr_types) == ("not registered op", {"k": 1}, {"k": AttrType.LONG})
    assert p.version == 3


@pytest.mark.parametrize(
    ("t", "value", "text"),
    [
        (AttrType.INT, 3, "3"),
        (AttrType.INT, INT32_MIN, "-2147483648"),
        (AttrType.LONG, 3, "3L"),
        (AttrType.LONG, INT64_MAX, "9223372036854775807L"),
        (AttrType.FLOAT, 0.1, "0.1"),
        (AttrType.FLOAT, 3, "3.0"),
        (AttrType.FLOAT, 1e20, "1e+20"),
        (AttrType.FLOAT, 16777216, "1.6777216e+07"),
        (AttrType.FLOAT, math.inf, "inf"),
        (AttrType.FLOAT, -math.inf, "-inf"),
        (AttrType.FLOAT, math.nan, "nan"),
        (AttrType.FLOAT, -0.0, "-0.0"),
        (AttrType.FLOAT64, 0.1, "0.1d"),
        (AttrType.FLOAT64, 3, "3.0d"),
        (AttrType.FLOAT64, 1e300, "1e+300d"),
        (AttrType.FLOAT64, -math.inf, "-infd"),
        (AttrType.FLOAT64, math.nan, "nand"),
        (AttrType.FLOAT64, -math.nan, "-nand"),
        (AttrType.STRING, 'a"b\\c\nd\té', '"a\\"b\\\\c\\nd\\té"'),
        (AttrType.STRING, "\x00\u2028\U000e0001", '"\\u0000\\u2028\\udb40\\udc01"'),
        (AttrType.BOOLEAN, True, "true"),
        (AttrType.BOOLEAN, False, "false"),
        (AttrType.BLOCK, 1, "^1"),
        (AttrType.INTS, [1, -2], "[1, -2]"),
        (AttrType.LONGS, [1], "[1L]"),
        (AttrType.FLOATS, [0.5], "[0.5]"),
        (AttrType.FLOAT64S, [0.5, math.inf], "[0.5d, infd]"),
        (AttrType.STRINGS, ["a", ""], '["a", ""]'),
        (AttrType.BOOLEANS, [True, False], "[true, false]"),
        (AttrType.BLOCKS, [1, 2], "[^1, ^2]"),
        (AttrType.INTS, [], "ints[]"),
        (AttrType.LONGS, [], "longs[]"),
        (AttrType.FLOATS, [], "floats[]"),
        (AttrType.FLOAT64S, [], "float64s[]"),
        (AttrType.STRINGS, [], "strings[]"),
        (AttrType.BOOLEANS, [], "bools[]"),
        (AttrType.BLOCKS, [], "blocks[]"),
    ],
)
def test_attribute_spelling(t: AttrType, value: object, text: str) -> None:
    p = Program()
    for _ in range(2):
        p.create_block(0)
    op = p.global_block().append_op("t", attrs={}, infer=False)
    op.set_attr("a", value, t)
    assert format_attr_value(op.attrs["a"], t) == text
    assert format_op(op) == f"t() {{a={text}}}"
    back = parse(str(p)).global_block().ops[0]
    assert back.attr_types == {"a": t}
    assert format_attr_value(back.attrs["a"], t) == text
    if t is AttrType.FLOAT64 and math.isnan(value):  # type: ignore[arg-type]
        assert math.copysign(1, back.attrs["a"]) == math.copysign(1, value)  # type: ignore[arg-type]


def test_float_is_shortest_float32_text() -> None:
    p = Program()
    op = p.global_block().append_op("t", attrs={"f": 0.1}, infer=False)
    assert op.attrs["f"] != 0.1  # stored as the float32 nearest to 0.1
    assert format_op(op) == "t() {f=0.1}"


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("x", "%x"),
        ("fc_0.w_0@GRAD", "%fc_0.w_0@GRAD"),
        ("a/b-c:d", "%a/b-c:d"),
        ("1", "%1"),
        ("a b", '%"a b"'),
        ('q"', '%"q\\""'),
        ("é", '%"é"'),
        ("%", '%"%"'),
    ],
)
def test_variable_names_quote_when_not_plain(name: str, text: str) -> None:
    p = Program()
    var = p.global_block().create_var(name, shape=[2])
    assert format_var(var) == f"var {text} : lod_tensor<float32>[2]"
    assert list(parse(str(p)).global_block().vars) == [name]


def test_variable_without_dtype_or_shape() -> None:
    p = Program()
    p.global_block().create_var("t", dtype=None, shape=None)
    p.global_block().create_var("r", kind=VarKind.READER)
    assert str(p).splitlines()[2:4] == ["  var %t : lod_tensor", "  var %r : reader"]
    q = parse(str(p))
    assert (q.global_block().var("t").dtype, q.global_block().var("t").shape) == (None, None)


def test_op_device_not_last_moves_to_the_end() -> None:
    """The documented exception: `@device` parses back as the last attribute."""
    p = Program()
    p.global_block().append_op("t", attrs={"op_device": "cuda:1", "k": 2}, infer=False)
    text = str(p)
    assert text.endswith("t() {k=2} @cuda:1\n}")
    q = parse(text)
    assert list(q.global_block().ops[0].attrs) == ["k", "op_device"]
    assert str(q) == text


def test_program_header_and_comments() -> None:
    text = "# a comment\n\nprogram version=2 random_seed=-5 device=cuda:0\n  # another\nblock 0 parent=-1 {\n}\n\n"
    p = parse(text)
    assert (p.version, p.random_seed, p.device, p.num_blocks) == (2, -5, "cuda:0", 1)
    assert format_program(p) == "program version=2 random_seed=-5 device=cuda:0\nblock 0 parent=-1 {\n}"


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("", "1:1", "expected the program header"),
        ("progam", "1:1", "expected 'program', found 'progam'"),
        ("program version=x", "1:17", "expected an integer, found 'x'"),
        ("program\n", "2:1", "expected block 0, found end of input"),
        ("program\nblock 1 parent=-1 {\n}", "2:7", "block 1 out of order"),
        ("program\nblock 0 {\n}", "2:1", "needs parent=N"),
        ("program\nblock 0 parent=-1 {\n  %x = f()", "3:11", "expected '}' closing block 0, found end of input"),
        ("program\nblock 0 parent=-1 {\n  %x = f()\n\n# c", "5:4", "expected '}' closing block 0, found end of input"),
        ("program\nblock 0 parent=-1 {\n  var %x : tensor\n}", "3:12", "expected a variable kind"),
        ("program\nblock 0 parent=-1 {\n  var %x : lod_tensor<f32>\n}", "3:23", "unknown dtype 'f32'"),
        ('program\nblock 0 parent=-1 {\n  var %x : lod_tensor<",">\n}', "3:23", "unknown dtype ','"),
        ("program\nblock 0 parent=-1 {\n  var %x : lod_tensor oops\n}", "3:23", "expected one of: lod_level="),
        ("program\nblock 0 parent=-1 {\n  var %x : raw\n  var %x : raw\n}", "4:7", "declared twice"),
        ("program\nblock 0 parent=-1 {\n  f(X=%a, X=%b)\n}", "3:11", "slot 'X' given twice"),
        ("program\nblock 0 parent=-1 {\n  f(X=a)\n}", "3:7", "expected a variable (%name), found 'a'"),
        ("program\nblock 0 parent=-1 {\n  f() {a=1, a=2}\n}", "3:13", "attribute 'a' given twice"),
        ("program\nblock 0 parent=-1 {\n  f() {a=[1, 2L]}\n}", "3:14", "list element is LONG"),
        ("program\nblock 0 parent=-1 {\n  f() {a=[]}\n}", "3:10", "an empty list needs its type"),
        ("program\nblock 0 parent=-1 {\n  f() {a=2147483648}\n}", "3:10", "does not fit INT"),
        ("program\nblock 0 parent=-1 {\n  f() {a=1.5L}\n}", "3:10", "must be an integer"),
        ("program\nblock 0 parent=-1 {\n  f() {a=^-1}\n}", "3:10", "block index -1 is negative"),
        ('program\nblock 0 parent=-1 {\n  f() {a="x}\n}', "3:10", "unterminated string"),
        ('program\nblock 0 parent=-1 {\n  f() {a="\\x"}\n}', "3:10", "invalid string literal"),
        ("program\nblock 0 parent=-1 {\n  f() {a=yes}\n}", "3:10", "expected an attribute value"),
        ('program\nblock 0 parent=-1 {\n  f() {op_device=""} @cpu\n}', "3:23", "op_device given both"),
        ("program\nblock 0 parent=-1 {\n  f() extra\n}", "3:7", "'is_target' or end of line"),
        ("program\nblock 0 parent=-1 {\n  f() is_target x\n}", "3:17", "expected end of line, found 'x'"),
        ('program\nblock 0 parent=-1 {\n  %y = ""()\n}', "3:8", "op type must be a non-empty string"),
        ("program\nblock 0 parent=-1 {\n}\nstray", "4:1", "expected 'block', found 'stray'"),
    ],
)
def test_parse_errors_name_location_line_and_expectation(text: str, where: str, message: str) -> None:
    with pytest.raises(ParseError) as info:
        parse(text, source="prog.txt")
    msg = str(info.value)
    assert msg.startswith(f"prog.txt:{where}:"), msg
    assert message in msg
    row, col = map(int, where.split(":"))  # the offending line and a caret under the column
    assert msg.split("\n")[1:] == ["  " + text.split("\n")[row - 1], "  " + " " * (col - 1) + "^"]


def test_parse_rejects_non_text() -> None:
    with pytest.raises(TypeError):
        parse(b"program")  # type: ignore[arg-type]


@given(programs())
def test_print_parse_print_is_identity(p: Program) -> None:
    text = str(p)
    q = parse(text)
    assert str(q) == text
    # Programs built like the DSL builds them (op_device last) also keep their wire form.
    assert q.to_proto().SerializeToString(deterministic=True) == p.to_proto().SerializeToString(deterministic=True)


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_parser_fuzz_random_text(text: str) -> None:
    try:
        parse("program\n" + text)
    except ParseError:
        pass


@given(programs(max_blocks=2), st.data())
def test_parser_fuzz_mutated_text(p: Program, data: st.DataObject) -> None:
    text = str(p)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(text)))
        j = data.draw(st.integers(i, min(len(text), i + 4)))
        text = (
            text[:i]
            + data.draw(
                st.sampled_from(
                    [
                        "",
                        "%",
                        '"',
                        "[",
                        "]",
                        "{",
                        "}",
                        "(",
                        ")",
                        "=",
                        ",",
                        "^",
                        " ",
                        "\n",
                        "L",
                        "d",
                        "-",
                        "1",
                        "\\",
                        "@",
                        "x",
                    ]
                )
            )
            + text[j:]
        )
    try:
        q = parse(text)
    except ParseError:
        return
    assert parse(str(q)) is not None  # whatever parses prints back into parsable text


def test_parse_error_is_a_blockir_error() -> None:
    assert issubclass(ParseError, BlockirError)
