"""Loading, verifying, printing and parsing cost time linear in the program (:mod:`tests.ir.complexity`): many
sibling blocks, blocks nested to the limit, many ops writing one variable; a program nesting past the limit is
refused in linear time too."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from blockir.errors import BlockirError, VerifyError
from blockir.ir import Program, parse_program, verify
from blockir.ir.core import MAX_BLOCK_DEPTH
from blockir.ir.proto_io import program_from_bytes
from blockir.ir.text import format_program
from tests.ir.complexity import assert_linear, cpu_seconds
from tests.ir.test_nesting import desc_bytes


def siblings(n: int) -> Program:
    """``x`` in the global block, then ``n`` blocks under it, each owned by a ``go`` reading ``x`` and computing its
    own ``y = scale(x)``."""
    program = Program()
    block = program.global_block()
    x = block.create_var("x", shape=[1])
    block.append_op("fill_constant", {}, {"Out": x}, {"shape": [1], "value": 1.0})
    for _ in range(n):
        sub = program.create_block(0)
        sub.append_op("scale", {"X": "x"}, {"Out": sub.create_var("y", shape=[1])}, {"scale": 2.0})
        block.append_op("go", {"X": ["x"]}, {}, {"sub_block": sub.idx})
    return program


def nested_to_the_limit(n: int) -> Program:
    """``n`` blocks in chains nested :data:`MAX_BLOCK_DEPTH` deep, each block reading ``x`` of the global block."""
    program = Program()
    program.global_block().create_var("x", shape=[1], persistable=True)
    parent, depth = 0, 0
    for _ in range(n):
        sub = program.create_block(parent)
        sub.append_op("scale", {"X": "x"}, {"Out": sub.create_var("y", shape=[1])}, {"scale": 2.0})
        depth += 1
        parent, depth = (0, 0) if depth == MAX_BLOCK_DEPTH else (sub.idx, depth)
    return program


def one_variable(n: int) -> Program:
    """``n`` times ``x = x + z_i``, each ``z_i`` made just before: ``2n + 1`` ops, ``n + 1`` of them writing ``x``."""
    program = Program()
    block = program.global_block()
    x = block.create_var("x", shape=[1])
    block.append_op("fill_constant", {}, {"Out": x}, {"shape": [1], "value": 1.0})
    for i in range(n):
        z = block.create_var(f"z{i}", shape=[1])
        block.append_op("fill_constant", {}, {"Out": z}, {"shape": [1], "value": 1.0})
        block.append_op("elementwise_add", {"X": x, "Y": z}, {"Out": x})
    return program


def loading(build: Callable[[int], Program]) -> Callable[[int], Callable[[], object]]:
    def make(n: int) -> Callable[[], object]:
        data = build(n).serialize()
        return lambda: program_from_bytes(data)

    return make


def verifying(build: Callable[[int], Program]) -> Callable[[int], Callable[[], object]]:
    def make(n: int) -> Callable[[], object]:
        program = build(n)
        verify(program)  # valid: the time is that of the checks, not of listing problems
        return lambda: verify(program)

    return make


def test_the_check_fails_quadratic_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """What every test here relies on: work costing ``n * n`` fails :func:`assert_linear`, every round (timed on
    smaller inputs than the tests' own, to fail in a second)."""
    monkeypatch.setattr("tests.ir.complexity.AT_LEAST", 0.002)

    def make(n: int) -> Callable[[], object]:
        items = list(range(n))
        return lambda: [items.index(i) for i in items]  # each index scans the items before it

    with pytest.raises(AssertionError, match="not linear"):
        assert_linear(make, 300, "quadratic work")


def test_loading_sibling_blocks_is_linear_and_costs_what_as_many_ops_cost() -> None:
    assert_linear(loading(siblings), 700, "loading sibling blocks")

    def empty(n: int) -> Callable[[], object]:
        data = desc_bytes([-1] + [0] * n)
        return lambda: program_from_bytes(data)

    assert_linear(empty, 6000, "loading empty sibling blocks")
    blocks, ops = desc_bytes([-1] + [0] * 6000), one_variable(3000).serialize()  # 6,001 ops
    assert cpu_seconds(lambda: program_from_bytes(blocks)) < 2 * cpu_seconds(lambda: program_from_bytes(ops))


def test_verifying_sibling_blocks_is_linear() -> None:
    assert_linear(verifying(siblings), 2000, "verifying sibling blocks")


def test_loading_and_verifying_blocks_nested_to_the_limit_is_linear() -> None:
    assert_linear(loading(nested_to_the_limit), 1000, "loading blocks nested to the limit")
    assert_linear(verifying(nested_to_the_limit), 2000, "verifying blocks nested to the limit")


def test_verifying_ops_writing_one_variable_is_linear() -> None:
    assert_linear(verifying(one_variable), 2000, "verifying ops writing one variable")


@pytest.mark.parametrize(
    ("build", "printed", "parsed"),
    [(siblings, 2500, 400), (one_variable, 3000, 600)],
    ids=["siblings", "one variable"],
)
def test_the_text_form_prints_and_parses_in_linear_time(
    build: Callable[[int], Program], printed: int, parsed: int
) -> None:
    def printing(n: int) -> Callable[[], object]:
        program = build(n)
        return lambda: format_program(program)

    def parsing(n: int) -> Callable[[], object]:
        text = format_program(build(n))
        return lambda: parse_program(text)

    assert_linear(printing, printed, f"printing {build.__name__}")
    assert_linear(parsing, parsed, f"parsing {build.__name__}")


def _refused(load: Callable[[], object]) -> Callable[[], object]:
    def work() -> None:
        try:
            load()
        except BlockirError:
            return
        raise AssertionError("a program nested past the limit was read")

    return work


def test_a_program_nested_past_the_limit_is_refused_in_linear_time() -> None:
    def proto(n: int) -> Callable[[], object]:
        data = desc_bytes([-1, *range(n)])
        return _refused(lambda: program_from_bytes(data))

    def text(n: int) -> Callable[[], object]:
        source = "program version=0\n" + "\n".join(f"block {i} parent={i - 1} {{\n}}" for i in range(n + 1))
        return _refused(lambda: parse_program(source))

    assert_linear(proto, 6000, "refusing a deep .pb")
    assert_linear(text, 4000, "refusing a deep text program")


def test_verifying_a_program_built_past_the_limit_is_linear() -> None:
    def make(n: int) -> Callable[[], object]:
        program = Program()
        for _ in range(n):
            program.create_block()

        def work() -> None:
            with pytest.raises(VerifyError):
                verify(program)

        return work

    assert_linear(make, 20000, "verifying deep nesting in memory")
