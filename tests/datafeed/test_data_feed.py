"""DataFeedDesc (Paddle's data.prototxt) and the MultiSlot reader, against a plain-Python reference parse."""

from __future__ import annotations

import gzip
import math
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.datafeed.multislot import MultiSlotReader, write_multislot
from blockir.errors import DataFeedError
from blockir.ops.values import LoDTensor
from blockir.proto import data_feed_pb2 as pb

# Modelled on Paddle's text-classification example (train_data/data.prototxt), with the label dense.
PADDLE_PROTOTXT = """\
name: "MultiSlotDataFeed"
batch_size: 2
multi_slot_desc {
    slots {
        name: "words"
        type: "uint64"
        is_dense: false
        is_used: true
    }
    slots {
        name: "label"
        type: "uint64"
        is_dense: true
        is_used: true
        shape: 1
    }
}
"""

# words (uint64, sparse, used), label (uint64, dense [1], used), f (float, sparse, unused)
THREE_SLOTS = PADDLE_PROTOTXT[:-2] + '    slots { name: "f" type: "float" is_used: false }\n}\n'


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return path


def batches(desc: bir.DataFeedDesc, files: Any, **kwargs: Any) -> list[dict[str, Any]]:
    return list(MultiSlotReader(desc, files, **kwargs))


# -- DataFeedDesc -----------------------------------------------------------------------------------


def test_paddle_prototxt_loads(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(str(write(tmp_path / "data.prototxt", PADDLE_PROTOTXT)))
    assert (desc.name, desc.batch_size, desc.pipe_command, desc.thread_num) == ("MultiSlotDataFeed", 2, "cat", 0)
    assert [(s.name, s.type, s.is_dense, s.is_used, list(s.shape)) for s in desc.slots] == [
        ("words", "uint64", False, True, []),
        ("label", "uint64", True, True, [1]),
    ]
    assert isinstance(desc.proto, pb.DataFeedDesc)
    assert desc.source.endswith("data.prototxt")


def test_defaults_follow_paddle() -> None:
    desc = bir.DataFeedDesc('multi_slot_desc { slots { name: "a" type: "float" } }')
    slot = desc.slots[0]
    assert (desc.batch_size, desc.pipe_command, slot.is_dense, slot.is_used) == (32, "cat", False, False)
    assert desc.source == "<text>"
    assert desc.proto.SerializeToString() == b"\x1a\x0c\x0a\x0a\x0a\x01a\x12\x05float"  # defaults are not sent


def test_field_numbers_on_the_wire() -> None:
    slot = pb.Slot(name="w", type="uint64", is_dense=True, is_used=True, shape=[3, 2])
    # tag = field number << 3 | wire type: name=1, type=2 (length-delimited); is_dense=3, is_used=4,
    # shape=5 (varint, proto2 repeated: unpacked)
    assert slot.SerializeToString() == b"\x0a\x01w\x12\x06uint64\x18\x01\x20\x01\x28\x03\x28\x02"
    desc = pb.DataFeedDesc(
        name="n",
        batch_size=7,
        multi_slot_desc=pb.MultiSlotDesc(slots=[pb.Slot(name="a", type="f")]),
        pipe_command="zcat",
        thread_num=3,
    )
    slots = b"\x0a\x06\x0a\x01a\x12\x01f"  # MultiSlotDesc.slots = 1
    assert desc.SerializeToString() == (b"\x0a\x01n\x10\x07\x1a\x08" + slots + b"\x22\x04zcat\x28\x03")


def test_setters_and_desc_round_trip(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(write(tmp_path / "data.prototxt", THREE_SLOTS))
    desc.set_batch_size(128)
    desc.set_use_slots(["f", "words"])
    desc.set_dense_slots(["f"])
    assert [(s.name, s.is_used, s.is_dense) for s in desc.slots] == [
        ("words", True, False),
        ("label", False, True),
        ("f", True, True),
    ]
    text = desc.desc()
    assert "batch_size: 128" in text
    again = bir.DataFeedDesc(text)
    assert again.proto == desc.proto and again.desc() == text


@pytest.mark.parametrize("value", [0, -1, 1.5, True, "8"])
def test_set_batch_size_rejects(value: Any) -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    with pytest.raises(DataFeedError, match="positive int"):
        desc.set_batch_size(value)
    assert desc.batch_size == 2


def test_setters_name_unknown_slots() -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    with pytest.raises(DataFeedError, match=r"set_use_slots: no slot named 'word'; <text> declares words, label"):
        desc.set_use_slots(["word"])
    with pytest.raises(DataFeedError, match="set_dense_slots: no slot named 'x', 'y'"):
        desc.set_dense_slots(["y", "x", "label"])
    with pytest.raises(DataFeedError, match="takes a list of slot names, got the string 'words'"):
        desc.set_use_slots("words")
    assert [s.is_used for s in desc.slots] == [True, True]


@pytest.mark.parametrize(
    "text, message",
    [
        (
            'batch_size: 2\nmulti_slot_desc { slot { name: "a" } }',
            r"data.prototxt:2:19 : Message type \"blockir.framework.MultiSlotDesc\" has no field named \"slot\"",
        ),
        ("batch_size: two", r"data.prototxt:1:13 : .*Couldn't parse integer"),
        (
            'multi_slot_desc { slots { name: "a" } }',
            r"data.prototxt: missing required fields: multi_slot_desc.slots\[0\].type",
        ),
        (
            'multi_slot_desc { slots { name: "a" type: "int64" } }',
            r"data.prototxt: slot 'a' has type 'int64', expected 'uint64' or 'float'",
        ),
        (
            'multi_slot_desc { slots { name: "a" type: "float" } slots { name: "a" type: "float" } }',
            r"slot 'a' is declared 2 times",
        ),
        ('multi_slot_desc { slots { name: "a" type: "float" shape: 2 shape: 0 } }', r"slot 'a' has shape \[2, 0\]"),
        ('multi_slot_desc { slots { name: "a" type: "float" shape: 2 shape: -1 } }', r"only the first may be -1"),
        ("batch_size: 0", "data.prototxt: batch_size must be positive, got 0"),
        ("thread_num: -2", "data.prototxt: thread_num must not be negative, got -2"),
    ],
)
def test_bad_descriptions_name_file_and_problem(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path / "data.prototxt", text)
    with pytest.raises(DataFeedError, match=message):
        bir.DataFeedDesc(str(path))


def test_missing_and_unreadable_description(tmp_path: Path) -> None:
    with pytest.raises(DataFeedError, match=r"cannot read data feed description .*nope.prototxt: No such file"):
        bir.DataFeedDesc(str(tmp_path / "nope.prototxt"))
    with pytest.raises(DataFeedError, match="Is a directory"):
        bir.DataFeedDesc(tmp_path)
    with pytest.raises(DataFeedError, match="not UTF-8"):
        bir.DataFeedDesc(write(tmp_path / "bin.prototxt", b"\xff\xfe"))


# -- reading: examples ------------------------------------------------------------------------------


def test_reads_paddle_style_files(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    a = write(tmp_path / "part-0", "3 1 2 3 1 0\n1 7 1 1\n")
    b = write(tmp_path / "part-1", "2 5 5\t1 1\r\n")  # batches run on across files; tabs, CRLF
    got = batches(desc, [a, str(b)])
    assert len(got) == 2 and list(got[0]) == ["words", "label"]
    words = got[0]["words"]
    assert isinstance(words, LoDTensor) and words.data.dtype == np.int64
    assert words.data.tolist() == [[1], [2], [3], [7]] and words.lod == [[0, 3, 4]]
    assert got[0]["label"].dtype == np.int64 and got[0]["label"].tolist() == [[0], [1]]
    assert got[1]["words"].lod == [[0, 2]] and got[1]["label"].tolist() == [[1]]  # the last, partial batch


def test_files_from_an_iterator_are_taken_as_needed_and_batches_name_their_files(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(
        'batch_size: 4 multi_slot_desc { slots { name: "x" type: "float" is_dense: true is_used: true shape: 1 } }'
    )
    sizes = {"a": 3, "b": 6, "c": 1, "d": 0}
    paths = {
        n: write(tmp_path / n, "".join(f"1 {10 * i + k}\n" for k in range(size)))
        for i, (n, size) in enumerate(sizes.items())
    }
    taken: list[str] = []

    def files() -> Any:  # a worker's share of a queue: the next file only once the reader asks for it
        for name, path in paths.items():
            taken.append(name)
            yield path

    reader = MultiSlotReader(desc, files())
    seen = []
    for batch in reader:
        seen.append((batch["x"][:, 0].tolist(), [Path(f).name for f in reader.batch_files], "".join(taken)))
    assert seen == [
        ([0, 1, 2, 10], ["a", "b"], "ab"),
        ([11, 12, 13, 14], ["b"], "ab"),
        ([15, 20], ["b", "c"], "abcd"),
    ]  # the last batch, smaller, once every file is read
    assert reader.file == str(paths["d"]) and reader.instances == 10
    assert list(reader) == []  # an iterator of files is read once


def test_dense_float_slots_take_their_shape(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(
        'batch_size: 2 multi_slot_desc { slots { name: "x" type: "float" is_dense: true '
        'is_used: true shape: -1 shape: 2 shape: 3 } slots { name: "y" type: "float" '
        "is_dense: true is_used: true shape: -1 } }"
    )
    path = write(tmp_path / "d", "".join(f"6 {' '.join(str(i + k) for k in range(6))} 1 {i}.5\n" for i in range(3)))
    got = batches(desc, path)
    assert got[0]["x"].shape == (2, 2, 3) and got[0]["x"].dtype == np.float32
    assert got[0]["x"][1].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert got[0]["y"].tolist() == [0.5, 1.5] and got[1]["y"].tolist() == [2.5]


def test_float_forms(tmp_path: Path) -> None:
    tokens = [
        "1",
        "-2.5",
        "+.5",
        "5.",
        "1e3",
        "-1.25E-2",
        "0.10000000149011612",
        "1" * 30,
        "nan",
        "-inf",
        "123456789.123456789123",
        "1e-320",
        "3.4e39",
        "1e18446744073709551617",
    ]
    desc = bir.DataFeedDesc('multi_slot_desc { slots { name: "f" type: "float" is_used: true } }')
    values = batches(desc, write(tmp_path / "f", f"{len(tokens)} {' '.join(tokens)}\n"))[0]["f"].data[:, 0]
    with np.errstate(over="ignore"):
        expected = np.array([float(t) for t in tokens]).astype(np.float32)
    np.testing.assert_array_equal(values, expected)


# -- reading: hypothesis against a plain-Python reference -------------------------------------------

SLOT_NAMES = ("a", "b", "c", "d")


@st.composite
def feeds(draw: st.DrawFn) -> tuple[str, list[tuple[str, bool, bool, tuple[int, ...] | None]]]:
    """A DataFeedDesc text and its slots: (name, is_float, used, dense shape or None)."""
    slots = []
    for name in SLOT_NAMES[: draw(st.integers(1, 4))]:
        shape = draw(st.none() | st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple))
        slots.append((name, draw(st.booleans()), draw(st.booleans()), shape))
    if not any(used for _, _, used, _ in slots):
        slots[0] = (slots[0][0], slots[0][1], True, slots[0][3])
    text = (
        "multi_slot_desc {\n"
        + "".join(
            f'slots {{ name: "{n}" type: "{"float" if f else "uint64"}" is_used: {str(u).lower()} '
            f"is_dense: {str(s is not None).lower()} {' '.join(f'shape: {d}' for d in s or ())} }}\n"
            for n, f, u, s in slots
        )
        + "}\n"
    )
    return text, slots


FLOAT_FORMATS = (repr, "{:e}".format, "{:.9g}".format, "{:.3f}".format, "{:+.2E}".format)


@st.composite
def lines(draw: st.DrawFn, slots: list[Any], bad: bool) -> str:
    """One instance written with random spacing; with ``bad``, maybe made malformed."""
    fields = []
    for _, is_float, _, shape in slots:
        n = math.prod(shape) if shape is not None else draw(st.integers(1, 4))
        if is_float:
            values = [draw(st.sampled_from(FLOAT_FORMATS))(draw(st.floats(width=32))) for _ in range(n)]
        else:
            values = [str(draw(st.integers(0, 2**63 - 1) | st.integers(0, 99))) for _ in range(n)]
        fields += [str(n), *values]
    if bad and draw(st.booleans()):
        i = draw(st.integers(0, len(fields) - 1))
        fields[i] = draw(st.sampled_from(["0", "x", "1.5", "-3", "9223372036854775808", "1_0", "99", "", "2"]))
        if draw(st.booleans()):
            fields = fields[: draw(st.integers(0, len(fields)))] + draw(
                st.lists(st.sampled_from(["7", "0.5"]), max_size=2)
            )
    sep = draw(st.sampled_from([" ", "  ", "\t", " \t"]))
    return draw(st.sampled_from(["", " "])) + sep.join(fields) + draw(st.sampled_from(["", " ", "\r"]))


def reference(text: bytes, slots: list[Any]) -> tuple[list[dict[str, list[Any]]], list[int]]:
    """Plain Python: the good instances (used slots only) and the 1-based numbers of the bad lines."""
    instances, bad = [], []
    lines = text.split(b"\n")
    if lines[-1] == b"":  # the end of the last line, or an empty file
        lines.pop()
    for number, line in enumerate(lines, 1):
        tokens, pos, instance = line.split(), 0, {}
        try:
            for name, is_float, used, shape in slots:
                count = tokens[pos]
                assert count.isdigit() and 1 <= int(count) <= len(tokens) - pos - 1
                values = tokens[pos + 1 : pos + 1 + int(count)]
                assert shape is None or len(values) == math.prod(shape)
                if is_float:
                    assert all(b"_" not in v for v in values)
                    parsed = [np.float32(float(v)) for v in values]
                else:
                    assert all(v.isdigit() and len(v) <= 19 and int(v) < 2**63 for v in values)
                    parsed = [int(v) for v in values]
                if used:
                    instance[name] = parsed
                pos += 1 + int(count)
            assert pos == len(tokens)
        except (AssertionError, IndexError, ValueError):
            bad.append(number)
            continue
        instances.append(instance)
    return instances, bad


def assert_batches_equal(
    got: list[dict[str, Any]], instances: list[dict[str, list[Any]]], slots: list[Any], batch_size: int
) -> None:
    expected = [instances[i : i + batch_size] for i in range(0, len(instances), batch_size)]
    assert len(got) == len(expected)
    for batch, want in zip(got, expected):
        assert list(batch) == [name for name, _, used, _ in slots if used]
        for name, is_float, used, shape in slots:
            if not used:
                continue
            dtype = np.float32 if is_float else np.int64
            flat = np.array([v for inst in want for v in inst[name]], dtype=dtype)
            value = batch[name]
            if shape is None:
                assert isinstance(value, LoDTensor) and value.data.shape == (len(flat), 1)
                assert value.lod == [np.cumsum([0] + [len(inst[name]) for inst in want]).tolist()]
                value = value.data[:, 0]
            else:
                assert value.shape == (len(want), *shape)
                value = value.reshape(-1)
            assert value.dtype == dtype
            np.testing.assert_array_equal(value, flat)


@settings(max_examples=150)
@given(
    data=st.data(),
    feed=feeds(),
    batch_size=st.integers(1, 5),
    chunk_size=st.sampled_from([1, 7, 64, 1 << 19]),
    final_newline=st.booleans(),
)
def test_batches_equal_reference_parse(
    tmp_path_factory: pytest.TempPathFactory,
    data: st.DataObject,
    feed: Any,
    batch_size: int,
    chunk_size: int,
    final_newline: bool,
) -> None:
    text, slots = feed
    body = "\n".join(data.draw(st.lists(lines(slots, bad=False), max_size=12)))
    raw = (body + "\n" if final_newline and body else body).encode()
    path = write(tmp_path_factory.mktemp("feed") / "part", raw)
    desc = bir.DataFeedDesc(text)
    desc.set_batch_size(batch_size)
    instances, bad = reference(raw, slots)
    assert bad == []
    reader = MultiSlotReader(desc, path, chunk_size=chunk_size)
    assert_batches_equal(list(reader), instances, slots, batch_size)
    assert (reader.instances, reader.skipped_lines) == (len(instances), 0)


@settings(max_examples=150)
@given(data=st.data(), feed=feeds(), batch_size=st.integers(1, 4), chunk_size=st.sampled_from([3, 50, 1 << 19]))
def test_bad_lines_against_reference(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, feed: Any, batch_size: int, chunk_size: int
) -> None:
    text, slots = feed
    raw = "".join(line + "\n" for line in data.draw(st.lists(lines(slots, bad=True), max_size=12))).encode()
    path = write(tmp_path_factory.mktemp("feed") / "part", raw)
    desc = bir.DataFeedDesc(text)
    desc.set_batch_size(batch_size)
    instances, bad = reference(raw, slots)
    skipping = MultiSlotReader(desc, path, skip_bad_lines=True, chunk_size=chunk_size)
    assert_batches_equal(list(skipping), instances, slots, batch_size)
    assert (skipping.instances, skipping.skipped_lines) == (len(instances), len(bad))
    strict = MultiSlotReader(desc, path, chunk_size=chunk_size)
    if bad:
        with pytest.raises(DataFeedError, match=f"^{path}:{bad[0]}: "):
            list(strict)
    else:
        assert_batches_equal(list(strict), instances, slots, batch_size)


# -- bad input --------------------------------------------------------------------------------------

BAD_LINES = [
    ("", "expected the count of slot 'words' (uint64), found the end of the line"),
    ("2 1 2 1 0", "expected the count of slot 'f' (float), found the end of the line"),
    ("x 1 1 0 1 0.5", "expected the count of slot 'words' (uint64), a positive integer, found 'x'"),
    ("0 1 0 1 0.5", "slot 'words' (uint64) has count 0; every slot needs at least one value"),
    ("9 1 2 1 0 1 0.5", "slot 'words' (uint64) has count 9 but only 6 tokens are left on the line"),
    ("2 1 1.5 1 0 1 0.5", "value '1.5' of slot 'words' (uint64) is a float, expected an unsigned integer id"),
    ("2 1 -3 1 0 1 0.5", "value '-3' of slot 'words' (uint64) is not an unsigned integer id"),
    ("2 1 abc 1 0 1 0.5", "value 'abc' of slot 'words' (uint64) is not an unsigned integer id"),
    ("\u0663 1 1 0 1 0.5", "expected the count of slot 'words' (uint64), a positive integer, found '\u0663'"),
    ("1 9223372036854775808 1 0 1 0.5", "value '9223372036854775808' of slot 'words' (uint64) does not fit int64"),
    ("1 99999999999999999999 1 0 1 0.5", "value '99999999999999999999' of slot 'words' (uint64) does not fit int64"),
    ("2 1 2 2 0 1 1 0.5", r"dense slot 'label' \(uint64\) has 2 values, expected 1 \(shape \[1\]\)"),
    ("2 1 2 1 0 1 zz", "value 'zz' of slot 'f' (float) is not a number"),  # unused slots are parsed too
    ("2 1 2 1 0 1 0.5 7 8", "2 tokens after the last slot 'f', starting with '7'"),
]


@pytest.mark.parametrize("line, message", BAD_LINES)
def test_bad_line_names_file_line_and_problem(tmp_path: Path, line: str, message: str) -> None:
    path = write(tmp_path / "part-0", f"1 5 1 1 1 0.5\n{line}\n1 6 1 0 1 0.5\n")
    with pytest.raises(DataFeedError) as e:
        batches(bir.DataFeedDesc(THREE_SLOTS), path)
    assert str(e.value) == f"{path}:2: {message.replace(chr(92), '')}"


def test_skip_bad_lines_counts_them(tmp_path: Path) -> None:
    text = "1 5 1 1 1 0.5\n" + "".join(line + "\n" for line, _ in BAD_LINES) + "1 6 1 0 1 0.5"
    reader = MultiSlotReader(bir.DataFeedDesc(THREE_SLOTS), write(tmp_path / "part-0", text), skip_bad_lines=True)
    got = list(reader)
    assert (reader.instances, reader.skipped_lines) == (2, len(BAD_LINES))
    assert [b["words"].data.tolist() for b in got] == [[[5], [6]]]
    list(reader)  # a second pass counts afresh
    assert (reader.instances, reader.skipped_lines) == (2, len(BAD_LINES))


def test_line_numbers_count_across_chunks(tmp_path: Path) -> None:
    path = write(tmp_path / "part-0", "1 5 1 1\n" * 999 + "1 5 1\n")
    with pytest.raises(DataFeedError, match=r"part-0:1000: slot 'label' \(uint64\) has count 1 but only 0 tokens"):
        batches(bir.DataFeedDesc(PADDLE_PROTOTXT), path, chunk_size=10)


def test_prefetching_chunks_gives_the_same_batches_and_errors_in_order(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    lines = [f"{1 + i % 3} {' '.join(str(i + k) for k in range(1 + i % 3))} 1 {i % 2}\n" for i in range(500)]
    paths = [write(tmp_path / f"part-{j}", "".join(lines[j * 100 : (j + 1) * 100])) for j in range(5)]
    threads = threading.active_count()
    plain = batches(desc, paths, chunk_size=64)
    ahead = batches(desc, paths, chunk_size=64, prefetch=2)
    assert len(plain) == len(ahead) == 250
    assert all(
        a["words"].lod == b["words"].lod
        and np.array_equal(a["words"].data, b["words"].data)
        and np.array_equal(a["label"], b["label"])
        for a, b in zip(plain, ahead)
    )
    bad = write(tmp_path / "part-5", "1 7 1 0\n1 x 1 0\n")
    taken = []
    with pytest.raises(DataFeedError, match=r"part-5:2: value 'x'"):
        for batch in MultiSlotReader(desc, [*paths, bad], chunk_size=64, prefetch=2):
            taken.append(batch)
    assert len(taken) == 250  # every batch before the bad line, then its error (the last, partial one is lost)
    assert threading.active_count() == threads
    with pytest.raises(DataFeedError, match="prefetch must be >= 0, got -1"):
        MultiSlotReader(desc, paths, prefetch=-1)


def test_missing_and_unreadable_data_files(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    good = write(tmp_path / "part-0", "1 5 1 1\n")
    with pytest.raises(DataFeedError, match=r"cannot read data file .*part-9: No such file or directory"):
        batches(desc, [good, tmp_path / "part-9"])
    with pytest.raises(DataFeedError, match=rf"cannot read data file {tmp_path}: Is a directory"):
        batches(desc, tmp_path)


def test_reader_rejects_unusable_descriptions(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    desc.set_dense_slots(["words"])
    with pytest.raises(DataFeedError, match=r"dense slot 'words' has no shape; .*`shape: 1`"):
        MultiSlotReader(desc, [])
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    desc.set_use_slots([])
    with pytest.raises(DataFeedError, match="no slot is used"):
        MultiSlotReader(desc, [])
    with pytest.raises(DataFeedError, match="chunk_size must be positive"):
        MultiSlotReader(bir.DataFeedDesc(PADDLE_PROTOTXT), [], chunk_size=0)


# -- pipe_command -----------------------------------------------------------------------------------


def test_pipe_command_zcat(tmp_path: Path) -> None:
    text = "".join(f"2 {i} {i + 1} 1 {i % 2}\n" for i in range(50))
    plain = write(tmp_path / "part-0", text)
    packed = write(tmp_path / "part-0.gz", gzip.compress(text.encode()))
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT + 'pipe_command: "zcat"\n')
    assert desc.pipe_command == "zcat"
    piped, direct = batches(desc, packed, chunk_size=64), batches(bir.DataFeedDesc(PADDLE_PROTOTXT), plain)
    assert len(piped) == len(direct) == 25
    for p, d in zip(piped, direct):
        assert p["words"].lod == d["words"].lod and np.array_equal(p["words"].data, d["words"].data)
        assert np.array_equal(p["label"], d["label"])


def test_failing_pipe_command_reports_its_stderr(tmp_path: Path) -> None:
    plain = write(tmp_path / "part-0", "1 5 1 1\n")
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT + 'pipe_command: "zcat"\n')
    with pytest.raises(DataFeedError, match=r"part-0: pipe_command 'zcat' failed with exit status 1: .*not in gzip"):
        batches(desc, plain)
    desc.proto.pipe_command = "echo boom >&2; exit 3"
    with pytest.raises(DataFeedError, match="failed with exit status 3: boom"):
        batches(desc, plain)


def test_bad_line_in_piped_output_says_so(tmp_path: Path) -> None:
    packed = write(tmp_path / "part-0.gz", gzip.compress(b"1 5 1 1\n1 5\n"))
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT + 'pipe_command: "zcat"\n')
    with pytest.raises(DataFeedError, match=r"part-0.gz:2 \(output of pipe_command 'zcat'\): expected the count"):
        batches(desc, packed)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.timeout(30)
def test_stopping_early_ends_the_pipe_command(tmp_path: Path, prefetch: int) -> None:
    pid_file = tmp_path / "pid"
    path = write(tmp_path / "part-0", "1 5 1 1\n" * 100)
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT + f'pipe_command: "cat; sleep 60 & echo $! > {pid_file}; wait"\n')
    threads = threading.active_count()
    it = iter(MultiSlotReader(desc, path, chunk_size=16, prefetch=prefetch))
    assert next(it)["words"].data.tolist() == [[5], [5]]
    while not pid_file.exists() or not pid_file.read_text().strip():
        time.sleep(0.01)
    it.close()  # the consumer stops: the command and its children are killed (the prefetching thread waits
    pid = int(pid_file.read_text())  # on the command's output: killing it is what lets that thread end)
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not alive(pid) and threading.active_count() == threads


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


# -- streaming --------------------------------------------------------------------------------------


def test_memory_does_not_grow_with_file_size(tmp_path: Path) -> None:
    path = write(tmp_path / "big", b"3 11 12 13 1 1\n" * 600_000)  # 9 MB
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    desc.set_batch_size(4096)
    reader = MultiSlotReader(desc, path, chunk_size=1 << 16)
    tracemalloc.start()
    try:
        total = sum(len(batch["label"]) for batch in reader)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert total == reader.instances == 600_000
    assert peak < 3_000_000, peak


def test_a_file_of_20000_random_instances_reads_whole(tmp_path: Path) -> None:
    """(Its throughput: benchmarks/bench_reader.py.)"""
    rng = np.random.default_rng(0)
    desc = bir.DataFeedDesc(PADDLE_PROTOTXT)
    desc.set_batch_size(128)
    path = tmp_path / "part-0"
    write_multislot(
        path,
        (
            {"words": rng.integers(0, 100_000, rng.integers(1, 40)), "label": int(rng.integers(0, 2))}
            for _ in range(20_000)
        ),
        desc,
    )
    reader = MultiSlotReader(desc, path)
    assert sum(len(batch["label"]) for batch in reader) == reader.instances == 20_000


# -- write_multislot --------------------------------------------------------------------------------


def test_write_multislot_round_trips(tmp_path: Path) -> None:
    desc = bir.DataFeedDesc(THREE_SLOTS)
    desc.set_use_slots(["words", "label", "f"])
    instances = [
        {"words": [3, 2**63 - 1], "label": np.array([1]), "f": np.float32(0.1)},
        {"words": range(4), "label": 0, "f": [1e-7, -2.5, float("inf")]},
    ]
    assert write_multislot(tmp_path / "p", instances, desc) == 2
    got = batches(desc, tmp_path / "p")[0]
    assert got["words"].data[:, 0].tolist() == [3, 2**63 - 1, 0, 1, 2, 3] and got["words"].lod == [[0, 2, 6]]
    assert got["label"].tolist() == [[1], [0]]
    assert got["f"].data[:, 0].tolist() == np.array([0.1, 1e-7, -2.5, np.inf], np.float32).tolist()


@pytest.mark.parametrize(
    "instance, message",
    [
        ({"words": [1]}, "no slot 'label'"),
        ({"words": [], "label": 1, "f": 1.0}, r"slot 'words' \(uint64\) has 0 values, expected at least 1"),
        ({"words": [1], "label": [1, 2], "f": 1.0}, r"slot 'label' \(uint64\) has 2 values, expected 1"),
        ({"words": [1.5], "label": 1, "f": 1.0}, r"slot 'words' \(uint64\) takes integer ids, got \[1.5\]"),
        ({"words": [-1], "label": 1, "f": 1.0}, r"slot 'words' \(uint64\) ids must be in \[0, 2\*\*63\), got \[-1\]"),
    ],
)
def test_write_multislot_rejects(tmp_path: Path, instance: dict[str, Any], message: str) -> None:
    good = {"words": [1], "label": 1, "f": 1.0}
    with pytest.raises(DataFeedError, match=f"write_multislot: instance 1: {message}"):
        write_multislot(tmp_path / "p", [good, instance], bir.DataFeedDesc(THREE_SLOTS))
