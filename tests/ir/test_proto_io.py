"""The wire format: lossless round trips, load/save, and what bad bytes produce."""

from __future__ import annotations

import os
import re
import stat
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockir.errors import BlockirError, ProgramFormatError
from blockir.ir import Program, load_program
from blockir.ir.proto_io import MAX_PROGRAM_BYTES, read_limited
from blockir.proto import framework_pb2 as pb
from tests.ir.strategies import programs


def wire(p: Program) -> bytes:
    return p.to_proto().SerializeToString(deterministic=True)


@given(programs())
def test_proto_objects_proto_is_identity(p: Program) -> None:
    desc = p.to_proto()
    data = desc.SerializeToString(deterministic=True)
    assert Program.from_proto(desc).to_proto().SerializeToString(deterministic=True) == data
    back = Program.parse(data)
    assert wire(back) == data
    assert str(back) == str(p)  # nothing of the objects is lost either


def test_save_and_load(tmp_path: Path) -> None:
    p = Program()
    p.random_seed = 3
    p.global_block().create_var("x", shape=[-1, 2], lod_level=1)
    p.global_block().append_op("relu", {"X": "x"}, {"Out": "x"}, {"op_device": "cpu"}, infer=False)
    path = tmp_path / "sub" / "p.pb"
    p.save(str(path))
    assert path.read_bytes() == p.serialize()
    assert str(load_program(path)) == str(p)
    assert os.listdir(path.parent) == ["p.pb"]  # the temporary file was renamed away


def _message(m: object) -> bytes:
    return m.SerializeToString()  # type: ignore[attr-defined, no-any-return]


def _var_desc() -> bytes:
    v = pb.VarDesc(name="x")
    v.type.type = pb.VarType.LOD_TENSOR
    v.type.lod_tensor.tensor.data_type = pb.VarType.FP32
    return _message(v)


def _op_desc() -> bytes:
    o = pb.OpDesc(type="mul")
    o.inputs.add(parameter="X", arguments=["x"])
    return _message(o)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        (b"", "file is empty"),
        (b"\xff\xfe\x00garbage", "not a ProgramDesc (corrupt or truncated protobuf data)"),
        ("truncated", "not a ProgramDesc (corrupt or truncated protobuf data)"),
        (_var_desc(), "not a ProgramDesc"),
        (_op_desc(), "not a ProgramDesc (missing required fields: blocks[0].idx"),
        (_message(pb.BlockDesc(idx=0, parent_idx=-1)), "not a ProgramDesc (it has only fields a ProgramDesc does not"),
        (_message(pb.ProgramDesc(version=pb.Version(version=1))), "not a ProgramDesc (it has no blocks"),
    ],
)
def test_bad_files_give_one_clear_error(tmp_path: Path, content: bytes | str | None, message: str) -> None:
    path = tmp_path / "bad.pb"
    if content == "truncated":
        p = Program()
        p.global_block().create_var("a_long_variable_name", shape=[1, 2, 3])
        content = p.serialize()[:-5]
    if content is not None:
        path.write_bytes(content)  # type: ignore[arg-type]
    with pytest.raises(ProgramFormatError) as info:
        load_program(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ProgramFormatError, match="is a directory"):
        load_program(tmp_path)


def _desc_with_block() -> pb.ProgramDesc:
    d = pb.ProgramDesc()
    d.blocks.add(idx=0, parent_idx=-1)
    return d


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: setattr(d.blocks[0], "idx", 3), "block 0: has idx 3, expected 0"),
        (lambda d: setattr(d.blocks[0], "parent_idx", 4), "block 0: invalid parent_idx 4"),
        (lambda d: setattr(d.blocks[0], "parent_idx", 0), "block 0: invalid parent_idx 0"),
        (
            lambda d: [d.blocks[0].vars.add(name="v").type.__setattr__("type", pb.VarType.RAW) for _ in range(2)],
            "variable 'v' declared twice",
        ),
        (lambda d: d.blocks[0].vars.add(name="v").type.__setattr__("type", 5), "variable 'v' has unknown kind 5"),
        (
            lambda d: d.blocks[0].vars.add(name="").type.__setattr__("type", pb.VarType.RAW),
            "variable name must be a non-empty",
        ),
    ],
)
def test_malformed_programs(mutate: object, message: str) -> None:
    d = _desc_with_block()
    mutate(d)  # type: ignore[operator]
    with pytest.raises(ProgramFormatError, match="^f.pb: ") as info:
        Program.parse(d.SerializeToString(), "f.pb")
    assert message in str(info.value)


def test_bad_dtype_and_attribute_type() -> None:
    d = _desc_with_block()
    v = d.blocks[0].vars.add(name="v")
    v.type.type = pb.VarType.LOD_TENSOR
    v.type.lod_tensor.tensor.data_type = pb.VarType.FEED_MINIBATCH  # 9: a kind, not an element type
    with pytest.raises(ProgramFormatError, match="data type 9 is not a tensor element type"):
        Program.parse(d.SerializeToString())
    d = _desc_with_block()
    d.blocks[0].ops.add(type="t").attrs.add(name="a", type=11)
    data = d.SerializeToString()
    assert data.count(b"\x0a\x01a\x10\x0b") == 1
    data = data.replace(b"\x0a\x01a\x10\x0b", b"\x0a\x01a\x10\x12")  # type 18: no AttrType, Paddle's or ours
    with pytest.raises(ProgramFormatError, match=r"missing required fields: blocks\[0\].ops\[0\].attrs\[0\].type"):
        Program.parse(data)


def _load_or_error(data: bytes) -> None:
    try:
        program = Program.parse(data)
    except BlockirError:
        return
    assert str(program)  # whatever loads also prints


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_loader_fuzz_random_bytes(data: bytes) -> None:
    _load_or_error(data)


@given(programs(max_blocks=2), st.data())
def test_loader_fuzz_mutated_programs(p: Program, data: st.DataObject) -> None:
    raw = bytearray(p.serialize())
    for _ in range(data.draw(st.integers(1, 4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert", "delete"]))
        i = data.draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "cut":
            del raw[i:]
        elif op == "insert":
            raw[i:i] = data.draw(st.binary(min_size=1, max_size=4))
        elif raw:
            del raw[i]
    _load_or_error(bytes(raw))


def test_invalid_utf8_is_refused() -> None:
    d = _desc_with_block()
    d.blocks[0].vars.add(name="zz").type.type = pb.VarType.FEED_MINIBATCH
    data = d.SerializeToString()
    assert data.count(b"\x0a\x02zz") == 1
    with pytest.raises(ProgramFormatError, match="VarDesc.name is not valid UTF-8"):
        Program.parse(data.replace(b"\x0a\x02zz", b"\x0a\x02\xffz"))


# -- reading within limits, writing atomically -----------------------------------------------------


def test_a_program_file_larger_than_the_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.pb"
    with open(path, "wb") as f:
        f.truncate(MAX_PROGRAM_BYTES + 1)  # sparse: nothing of it is on disk, or read
    with pytest.raises(
        ProgramFormatError,
        match=f"huge.pb: {MAX_PROGRAM_BYTES + 1} bytes, more than the "
        f"{MAX_PROGRAM_BYTES} bytes a file of this kind may have",
    ):
        load_program(path)


def test_an_endless_stream_is_read_no_further_than_the_limit() -> None:
    """What the command line's PROGRAM ``-`` (standard input) is read with."""
    limit = 64 << 20
    tracemalloc.start()
    try:
        with open("/dev/zero", "rb") as f, pytest.raises(ProgramFormatError, match=f"<stdin>: more than the {limit}"):
            read_limited(f, limit, "<stdin>", ProgramFormatError)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1.25 * limit


@pytest.mark.timeout(30)
def test_a_fifo_or_a_device_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # no writer: opening it to read would wait for one
    with pytest.raises(ProgramFormatError, match=r"fifo: a FIFO, not a regular file$"):
        load_program(fifo)
    with pytest.raises(ProgramFormatError, match=r"^/dev/zero: a character device, not a regular file$"):
        load_program("/dev/zero")


@pytest.fixture
def umask_027() -> Iterator[None]:
    old = os.umask(0o027)
    yield
    os.umask(old)


@pytest.mark.usefixtures("umask_027")
def test_saved_programs_honour_the_umask(tmp_path: Path) -> None:
    Program().save(str(tmp_path / "new" / "p.pb"))
    assert stat.S_IMODE((tmp_path / "new" / "p.pb").stat().st_mode) == 0o640  # as open() gives it
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o750


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("a_file/p.pb", "a_file/p.pb: not a directory (a file is in the way)"),
        ("a_file/sub/p.pb", "a_file/sub/p.pb: not a directory (a file is in the way)"),
        ("a_dir", "a_dir: is a directory"),
        ("/proc/self/p.pb", "/p.pb: cannot write ("),
    ],
)
def test_write_errors_are_one_error_naming_the_file(tmp_path: Path, where: str, message: str) -> None:
    (tmp_path / "a_file").write_bytes(b"")
    (tmp_path / "a_dir").mkdir()
    with pytest.raises(BlockirError, match=re.escape(message)):
        Program().save(str(tmp_path / where))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_dir", "a_file"]  # no temporary file left
