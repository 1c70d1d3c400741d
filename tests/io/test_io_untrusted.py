"""Untrusted files: ``.npy`` files and bundles, crafted, random or mutated, load as a value or fail with one
BlockirError, and never make blockir allocate more than the file justifies."""

from __future__ import annotations

import io
import json
import os
import tracemalloc
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import VarKind
from blockir.ops.values import LoDTensor, SelectedRows


def _npy(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    f = io.BytesIO()
    np.lib.format.write_array(f, array, version=version, allow_pickle=False)
    return f.getvalue()


def _header(header: str, version: int = 1) -> bytes:
    """A .npy prefix: magic, version, header length and ``header`` (padded as numpy pads it)."""
    width = 2 if version == 1 else 4
    text = header.encode("latin1")
    text += b" " * (-(len(text) + 8 + width + 1) % 64) + b"\n"
    return b"\x93NUMPY" + bytes([version, 0]) + len(text).to_bytes(width, "little") + text


_HUGE = _header("{'descr': '<f4', 'fortran_order': False, 'shape': (1099511627776,), }")  # 2^40 float32


def _measured(load: Callable[[], Any]) -> tuple[Any, int]:
    """``load()``'s value or BlockirError, and the peak of memory allocated meanwhile."""
    tracemalloc.start()
    try:
        return load(), tracemalloc.get_traced_memory()[1]
    except BlockirError as e:
        return e, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _justified(size: int) -> int:
    """The most a file of ``size`` bytes may make blockir allocate: the arrays it holds, twice, and some change."""
    return 3 * size + (256 << 10)


def _mutated(data: bytes, draw: st.DrawFn) -> bytes:
    raw = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "cut", "insert", "delete", "overwrite"]))
        i = draw(st.integers(0, max(len(raw) - 1, 0)))
        if op == "flip" and raw:
            raw[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "cut":
            del raw[i:]
        elif op == "insert":
            raw[i:i] = draw(st.binary(min_size=1, max_size=8))
        elif op == "overwrite":
            patch = draw(st.sampled_from([b"\xff\xff\xff\xff", b"\x00\x00\x00\x00", b"\xff\xff\xff\x7f", b"9" * 8]))
            raw[i : i + len(patch)] = patch
        elif raw:
            del raw[i]
    return bytes(raw)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("untrusted")


# -- .npy files ---------------------------------------------------------------------------------


def _load_npy_bytes(workdir: Path, data: bytes) -> tuple[Any, int]:
    path = workdir / "x.npy"
    path.write_bytes(data)
    return _measured(lambda: bir.io.load_array(path, "--feed x"))


@pytest.mark.parametrize("fortran", [False, True])
@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", ["bool", "int8", "uint8", ">i4", "int64", "float16", "float32", ">f8", "complex64"])
def test_arrays_load_as_numpy_saves_them(workdir, dtype, version, fortran):
    array = np.arange(24).reshape(2, 3, 4).astype(dtype)
    array = np.asfortranarray(array) if fortran else array
    loaded, _ = _load_npy_bytes(workdir, _npy(array, version))
    assert isinstance(loaded, np.ndarray) and loaded.dtype == array.dtype
    np.testing.assert_array_equal(loaded, array)
    assert loaded.flags.writeable


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _HUGE + b"\0" * 64,
            (
                "truncated .npy file (its header declares float32[1099511627776], "
                "4398046511104 bytes of data, and 64 follow)"
            ),
        ),
        (
            _npy(np.zeros((4, 4)))[:-3],
            ("truncated .npy file (its header declares float64[4, 4], 128 bytes of data, and 125 follow)"),
        ),
        (_npy(np.zeros(3))[:40], "truncated .npy file (its header is cut short or longer than the file)"),
        (b"\x93NUMPY\x02\x00\xff\xff\xff\xff{'descr'", "truncated .npy file (its header is cut short"),
        (b"\x93NUMPY\x04\x00" + b"\0" * 120, ".npy format version 4.0, which numpy does not write"),
        (b"PK\x03\x04 a zip, say", "not a .npy array file"),
        (b"", "not a .npy array file"),
        (
            _header("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }") + b"\x80\x04N.",
            "holds Python objects, which are never loaded (they would need pickle)",
        ),
        (
            _header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }") + b"\0" * 4,
            "holds [('a', '<f4')][1], not a tensor of numbers",
        ),
        (_header("{'descr': '|S0', 'fortran_order': False, 'shape': (1099511627776,), }"), "not a tensor of numbers"),
        (
            _header("{'descr': ('<f4', (1000000,)), 'fortran_order': False, 'shape': (1024,), }"),
            "not a tensor of numbers",
        ),
        (_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }") + b"\0" * 8, "not a tensor of numbers"),
        (_header("{'descr': '<f4', 'fortran_order': 'yes', 'shape': (2,), }") + b"\0" * 8, "bad header"),
        (_header("__import__('os').system('false')") + b"\0" * 8, "bad header"),
    ],
)
def test_bad_npy_files_are_one_error_naming_the_file(workdir, data, message):
    error, peak = _load_npy_bytes(workdir, data)
    assert isinstance(error, BlockirError)
    assert str(error).startswith(f"--feed x: {workdir / 'x.npy'}: ") and message in str(error)
    assert peak < _justified(len(data))


def test_the_files_of_a_save_are_checked_the_same(tmp_path, exe):
    """A crafted .npy file among the files of a save, old layout and manifest alike: an error, not a MemoryError."""
    program = bir.Program()
    program.global_block().create_var("w", shape=(-1,), dtype="float32", persistable=True)
    (tmp_path / "w.npy").write_bytes(_HUGE + b"\0" * 64)
    assert len(_HUGE + b"\0" * 64) == 192  # the size of the file the issue reports
    with pytest.raises(BlockirError, match=r"w.npy: truncated .npy file \(its header declares float32\[1099511627776"):
        bir.io.load_persistables(exe, tmp_path, program, scope=bir.Scope())
    scope = bir.Scope()
    scope.set("w", np.zeros(3, "float32"))
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    (tmp_path / "gen-000001" / "w.npy").write_bytes(_HUGE + b"\0" * 64)
    with pytest.raises(BlockirError, match=r"gen-000001/w.npy: truncated .npy file"):
        bir.io.load_persistables(exe, tmp_path, program, scope=bir.Scope())


@pytest.mark.timeout(30)
def test_arrays_from_pipes_and_devices_are_refused(tmp_path):
    with pytest.raises(BlockirError, match="x: /dev/zero: a character device, not a regular file$"):
        bir.io.load_array("/dev/zero", "x")
    with pytest.raises(BlockirError, match="x: /dev/null: a character device, not a regular file$"):
        bir.io.load_array("/dev/null", "x")
    os.mkfifo(tmp_path / "fifo.npy")  # no writer: opening it to read would wait for one
    with pytest.raises(BlockirError, match=r"x: .*fifo.npy: a FIFO, not a regular file$"):
        bir.io.load_array(tmp_path / "fifo.npy", "x")
    with pytest.raises(BlockirError, match=r"x: .*missing.npy: no such file$"):
        bir.io.load_array(tmp_path / "missing.npy", "x")
    with pytest.raises(BlockirError, match="is a directory"):
        bir.io.load_array(tmp_path, "x")
    with pytest.raises(BlockirError, match=r"x: /proc/self/stat: not a .npy array file"):
        bir.io.load_array("/proc/self/stat", "x")


_DESCRS = [
    "<f4",
    ">i8",
    "|b1",
    "<c16",
    "<f2",
    "|u1",
    "O",
    "|O",
    "<U3",
    "|S0",
    "|V0",
    "V8",
    "<M8[s]",
    "bogus",
    [("a", "<f4")],
    ("<f4", (3,)),
    4,
    None,
]


@st.composite
def _npy_files(draw: st.DrawFn) -> bytes:
    """A .npy file, valid or not: numpy's own, a header made of random parts, or random bytes after the magic."""
    kind = draw(st.sampled_from(["array", "header", "magic"]))
    if kind == "array":
        dtype = draw(st.sampled_from(["bool", "int16", "uint8", "float32", ">f8", "complex128"]))
        shape = draw(st.lists(st.integers(0, 4), max_size=3))
        array = np.arange(int(np.prod(shape))).reshape(shape).astype(dtype)
        data = _npy(
            np.asfortranarray(array) if draw(st.booleans()) else array, draw(st.sampled_from([(1, 0), (2, 0), (3, 0)]))
        )
    elif kind == "header":
        shape = tuple(draw(st.lists(st.one_of(st.integers(-1, 8), st.integers(0, 2**64)), max_size=4)))
        fortran = draw(st.sampled_from([False, True, 0, "x"]))
        text = f"{{'descr': {draw(st.sampled_from(_DESCRS))!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"
        data = _header(text, draw(st.sampled_from([1, 2, 3]))) + draw(st.binary(max_size=64))
    else:
        data = b"\x93NUMPY" + draw(st.binary(max_size=200))
    return _mutated(data, draw) if draw(st.booleans()) else data


@given(data=st.one_of(_npy_files(), st.binary(max_size=300)))
def test_npy_fuzz_gives_a_value_or_an_error_within_the_file_size(workdir, data):
    result, peak = _load_npy_bytes(workdir, data)
    assert isinstance(result, (np.ndarray, BlockirError))
    if isinstance(result, np.ndarray):
        assert result.nbytes <= len(data)
    assert peak < _justified(len(data))


# -- bundles ------------------------------------------------------------------------------------


def _program() -> bir.Program:
    program = bir.Program()
    block = program.global_block()
    block.create_var("w", shape=(2, 3), dtype="float32", persistable=True)
    block.create_var("seq", shape=(-1, 2), dtype="float64", lod_level=1, persistable=True)
    block.create_var("emb", kind=VarKind.SELECTED_ROWS, shape=(10, 2), dtype="float32", persistable=True)
    return program


_VALUES = {
    "w": np.arange(6, dtype="float32").reshape(2, 3),
    "seq": LoDTensor(np.arange(6, dtype="float64").reshape(3, 2), [[0, 1, 3]]),
    "emb": SelectedRows(np.array([1, 7], "int64"), np.ones((2, 2), "float32"), 10),
}


@pytest.fixture(scope="module")
def bundle(workdir: Path) -> bytes:
    scope = bir.Scope()
    for name, value in _VALUES.items():
        scope.set(name, value)
    bir.io.save_persistables(bir.Executor("cpu"), workdir, _program(), filename="valid.bundle", scope=scope)
    return (workdir / "valid.bundle").read_bytes()


def _load_bundle_bytes(workdir: Path, data: bytes) -> tuple[Any, int]:
    (workdir / "x.bundle").write_bytes(data)
    exe, scope = bir.Executor("cpu"), bir.Scope()

    def load() -> dict[str, Any]:
        bir.io.load_persistables(exe, workdir, _program(), filename="x.bundle", scope=scope)
        return {name: scope.get(name) for name in scope.names()}

    return _measured(load)


def _bundle(members: dict[str, bytes], index: Any, compression: int = zipfile.ZIP_STORED) -> bytes:
    f = io.BytesIO()
    with zipfile.ZipFile(f, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        zf.writestr("index.json", index if isinstance(index, (str, bytes)) else json.dumps(index))
    return f.getvalue()


def _index(**entries: Any) -> dict[str, Any]:
    return {"format": "blockir.vars", "version": 1, "vars": entries}


def test_a_valid_bundle_loads(workdir, bundle):
    loaded, peak = _load_bundle_bytes(workdir, bundle)
    np.testing.assert_array_equal(loaded["w"], _VALUES["w"])
    assert loaded["seq"].lod == [[0, 1, 3]] and loaded["emb"].rows.tolist() == [1, 7]
    assert peak < _justified(len(bundle))


_DENSE = {"kind": "dense", "arrays": {"data": "0.npy"}}
_GOOD = {"0.npy": _npy(np.zeros((2, 3), "float32"))}
_SEQ = {"kind": "lod_tensor", "lod_levels": 1, "arrays": {"data": "1.npy", "lod.0": "2.npy"}}
_EMB = {"kind": "selected_rows", "height": 10, "arrays": {"rows": "3.npy", "values": "4.npy"}}
_OTHERS = {
    "1.npy": _npy(np.zeros((3, 2))),
    "2.npy": _npy(np.array([0, 1, 3])),
    "3.npy": _npy(np.array([1, 7])),
    "4.npy": _npy(np.ones((2, 2), "float32")),
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            _bundle({"0.npy": _HUGE + b"\0" * 64}, _index(w=_DENSE)),
            "[0.npy]: truncated .npy file (its header declares float32[1099511627776]",
        ),
        (_bundle(_GOOD, _index(w=_DENSE), zipfile.ZIP_DEFLATED), "member '0.npy' is compressed or encrypted"),
        (_bundle(_GOOD, "{not json"), "not a blockir variables file (bad index.json)"),
        (_bundle(_GOOD, "[" * 100000), "not a blockir variables file (bad index.json)"),
        (
            _bundle(_GOOD, {"format": "blockir.vars", "version": 9, "vars": {}}),
            "format version 9, this blockir reads 1",
        ),
        (
            _bundle(_GOOD, _index(w={"kind": "dense", "arrays": {"data": "9.npy"}})),
            "variable 'w' lacks its 'data' array",
        ),
        (_bundle(_GOOD, _index(w={"kind": "dense", "arrays": {"data": ["0.npy"]}})), "variable 'w' lacks its 'data'"),
        (_bundle(_GOOD, _index(w={"kind": "pickle", "arrays": {}})), "variable 'w' has unknown kind 'pickle'"),
        (
            _bundle({**_GOOD, **_OTHERS}, _index(w=_DENSE, seq={**_SEQ, "lod_levels": "Infinity"}, emb=_EMB)),
            "variable 'seq' is stored incompletely",
        ),
        (
            _bundle({**_GOOD, **_OTHERS}, _index(w=_DENSE, seq=_SEQ, emb={**_EMB, "height": 5})),
            "variable 'emb': selected rows index rows outside [0, 5)",
        ),
        (
            _bundle(
                {**_GOOD, **_OTHERS},
                _index(w=_DENSE, seq={**_SEQ, "arrays": {"data": "1.npy", "lod.0": "3.npy"}}, emb=_EMB),
            ),
            "variable 'seq': LoD level 0 must start at 0",
        ),
        (
            _bundle(
                {**_GOOD, **_OTHERS},
                _index(w=_DENSE, seq=_SEQ, emb={**_EMB, "arrays": {"rows": "4.npy", "values": "4.npy"}}),
            ),
            "selected rows need one integer row index per row of values",
        ),
        (_bundle(_GOOD, _index(w=_DENSE))[:-30], "not a blockir variables file (a zip with index.json)"),
        (b"PK\x05\x06" + b"\0" * 18, "not a blockir variables file (a zip with index.json)"),
    ],
)
def test_bad_bundles_are_one_error_naming_the_file(workdir, data, message):
    error, peak = _load_bundle_bytes(workdir, data)
    assert isinstance(error, BlockirError), error
    assert str(error).startswith(str(workdir / "x.bundle")) and message in str(error)
    assert peak < _justified(len(data))


def test_a_member_claiming_more_than_the_file_holds(workdir):
    data = bytearray(_bundle(_GOOD, _index(w=_DENSE)))
    entry = data.index(b"PK\x01\x02")  # the central directory's entry of 0.npy: sizes at offsets 20 and 24
    data[entry + 20 : entry + 28] = (1 << 31).to_bytes(4, "little") * 2
    error, _ = _load_bundle_bytes(workdir, bytes(data))
    assert "damaged bundle (member '0.npy' claims 2147483648 bytes, more than the file holds)" in str(error)


def test_every_byte_flipped_gives_a_value_or_an_error(tmp_path, exe):
    """Every single-byte corruption of a bundle: the value (the byte was slack) or one error."""
    program = bir.Program()
    program.global_block().create_var("w", shape=(2, 3), dtype="float32", persistable=True)
    valid = _bundle(_GOOD, _index(w=_DENSE))
    messages = set()
    for i in range(len(valid)):
        data = bytearray(valid)
        data[i] ^= 0xFF
        (tmp_path / "x.bundle").write_bytes(data)
        try:
            bir.io.load_persistables(exe, tmp_path, program, filename="x.bundle", scope=bir.Scope())
        except BlockirError as e:
            messages.add(str(e).split(": ", 1)[1][:24])
    assert len(messages) > 5, messages  # the corruptions reach different checks


@given(data=st.data())
def test_bundle_fuzz_gives_a_value_or_an_error_within_the_file_size(workdir, bundle, data):
    raw = data.draw(
        st.one_of(st.just(bundle), st.binary(max_size=400), st.binary(max_size=400).map(lambda b: b"PK\x03\x04" + b))
    )
    raw = _mutated(raw, data.draw)
    result, peak = _load_bundle_bytes(workdir, raw)
    assert isinstance(result, (dict, BlockirError))
    assert peak < _justified(len(raw))
