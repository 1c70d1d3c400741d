"""How deep blocks may nest (``MAX_BLOCK_DEPTH``): the proto reader and the text parser refuse a program nesting
deeper, naming the first such block; the verifier reports one built deeper in memory; parents forming a cycle
are left to the verifier, as before. ``block_chains`` (what all of them use) against a plain walk."""

from __future__ import annotations

import random

import pytest

from blockir.errors import ParseError, ProgramFormatError, VerifyError
from blockir.ir import Program, parse_program, verify
from blockir.ir.core import MAX_BLOCK_DEPTH, TOO_DEEP, block_chains, too_deep
from blockir.ir.proto_io import program_from_bytes
from blockir.proto import framework_pb2 as pb


def desc_bytes(parents: list[int]) -> bytes:
    """A ProgramDesc of empty blocks whose ``parent_idx`` are ``parents``."""
    d = pb.ProgramDesc()
    for i, parent in enumerate(parents):
        d.blocks.add(idx=i, parent_idx=parent)
    return d.SerializeToString()


def chain(depth: int) -> list[int]:
    """Parents of blocks 0..depth, each the child of the one before: block ``depth`` is ``depth`` levels deep."""
    return [-1, *range(depth)]


def test_the_limit_is_64_levels_below_the_global_block() -> None:
    assert MAX_BLOCK_DEPTH == 64
    program = program_from_bytes(desc_bytes(chain(64)))  # block 64 has 64 ancestors: fine
    assert program.num_blocks == 65
    verify(program)
    with pytest.raises(ProgramFormatError) as e:
        program_from_bytes(desc_bytes(chain(65)), "deep.pb")
    assert str(e.value) == f"deep.pb: block 65: {TOO_DEEP}"
    assert "nested more than 64 blocks deep, the limit of block nesting" in str(e.value)


def test_the_first_block_too_deep_by_index_is_named_whatever_the_order_of_parents() -> None:
    # Block k's parent is k + 1, block 70's the global block: block 1 is 70 levels deep, block 6 is 65.
    parents = [-1, *range(2, 71), 0]
    with pytest.raises(ProgramFormatError, match=f"block 1: {TOO_DEEP}"):
        program_from_bytes(desc_bytes(parents))
    assert too_deep(parents) == 1
    assert too_deep([-1, *range(2, 65), 0]) is None  # 64 levels at most


def test_parents_forming_a_cycle_are_read_and_left_to_the_verifier() -> None:
    # Blocks 1..100 form one long cycle: endless, but not a nesting depth; the verifier names the cycle.
    parents = [-1, *range(2, 101), 1]
    program = program_from_bytes(desc_bytes(parents))
    with pytest.raises(VerifyError) as e:
        verify(program)
    assert e.value.problems[0] == "block 1: its parents form a cycle through block 1"
    assert len(e.value.problems) == 100
    assert not any("nested" in p for p in e.value.problems)


def test_the_text_parser_refuses_the_same_pointing_at_the_block() -> None:
    text = _text(chain(70))
    with pytest.raises(ParseError) as e:
        parse_program(text, "deep.txt")
    first, line, caret = str(e.value).splitlines()
    assert first == f"deep.txt:132:10: block 65: {TOO_DEEP}"
    assert line.strip() == "block 65 parent=64 {"
    assert caret.index("^") == line.index("parent=")
    assert parse_program(_text(chain(64))).num_blocks == 65


def _text(parents: list[int]) -> str:
    return "program version=0\n" + "\n".join(f"block {i} parent={p} {{\n}}" for i, p in enumerate(parents))


def test_the_verifier_reports_a_program_built_too_deep_once_per_block_past_the_limit() -> None:
    program = Program()
    for _ in range(70):
        program.create_block()
    side = program.create_block(1)  # 2 levels deep: fine
    program.create_block(side.idx)
    with pytest.raises(VerifyError) as e:
        verify(program)
    assert e.value.problems == [f"block 65: {TOO_DEEP} (and so are the blocks below it)"]


def _walk(parents: list[int]) -> tuple[list[int], list[int | None]]:
    """The chains as the verifier walked them before: per block, until an invalid parent or a block seen."""
    n, lengths, cycles = len(parents), [], []
    for i in range(n):
        seen, b = {i}, i
        while 0 <= parents[b] < n and parents[b] not in seen:
            b = parents[b]
            seen.add(b)
        lengths.append(len(seen))
        cycles.append(parents[b] if 0 <= parents[b] < n else None)
    return lengths, cycles


def test_block_chains_agree_with_walking_each_chain() -> None:
    rng = random.Random(0)
    for _ in range(3000):
        n = rng.randint(0, 12)
        parents = [rng.choice([-1, rng.randint(-2, n + 1), rng.randint(0, max(n - 1, 0))]) for _ in range(n)]
        assert block_chains(parents) == _walk(parents), parents
