"""The MultiSlot text format and its reader: training files of sparse ids and values into batches.

One instance per line; for every slot of the description's ``multi_slot_desc``, in that order,
``<n> v1 ... vn`` with ``n > 0``: unsigned integer ids for ``uint64`` slots, numbers for ``float``
slots. Tokens are separated by spaces or tabs (any ASCII whitespace)::

    3 12 7 981 1 0        <- slot "words": 3 ids; slot "label": 1 id

    desc = bir.DataFeedDesc("data.prototxt")
    for batch in MultiSlotReader(desc, ["part-0", "part-1"]):
        batch["words"]   # LoDTensor of int64 ids, shape [total, 1], one LoD level (per instance)
        batch["label"]   # dense slot with shape [1]: int64 array [batch, 1]

Ids are decimal, at most 19 digits, below 2**63 (they become int64). Parsing is vectorised over a
chunk of lines (``chunk_size`` bytes) with numpy: tokens are found from a whitespace mask of the
bytes, numbers are computed one character position at a time over all tokens (integers from their
last digit back, floats from a matrix of their characters), and each slot is one step over all
lines of the chunk at once; only floats outside the fast path (more than 19 significant digits,
exponents beyond 22, ``nan``, ``inf``) go through Python's ``float``.
Files are streamed: memory is bounded by the chunk size (or the longest line), whatever the
size of the files.
"""

from __future__ import annotations

import math
import operator
import os
import signal
import subprocess
import tempfile
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import IO, Any, cast

import numpy as np

from blockir.datafeed.desc import DataFeedDesc
from blockir.datafeed.staged import staged
from blockir.errors import DataFeedError
from blockir.ir.devices import HOST
from blockir.ir.proto_io import open_regular
from blockir.ops.values import LoDTensor

__all__ = ["MultiSlotReader", "write_multislot"]

CHUNK_SIZE = 1 << 19
_INT64_MAX = np.uint64(2**63 - 1)
_FLOAT_EXACT = np.uint64(2**53)  # mantissas below this are exact in float64
_POW10_INT = 10 ** np.arange(20, dtype=np.uint64)
_POW10_FLOAT = 10.0 ** np.arange(23)  # exact in float64
_INT_WIDTH = 20  # an int64 has at most 19 digits: longer runs are out of range
_FLOAT_WIDTH = 24  # longer float tokens take the slow path
_SPACE, _ZERO, _PLUS, _MINUS, _DOT, _E_LOWER, _E_UPPER = b" 0+-.eE"

# Why a line is bad: the kinds of problem, reported with the slot and the token concerned.
_MISSING, _COUNT, _VALUE, _DENSE, _TRAILING = range(5)


@dataclass(frozen=True)
class _Slot:
    name: str
    is_float: bool
    used: bool
    shape: tuple[int, ...] | None  # a dense slot's shape per instance; None: sparse

    @property
    def width(self) -> int:
        if self.shape is None:
            raise TypeError(f"{self.describe()} is sparse: it has no width")
        return math.prod(self.shape)

    def describe(self) -> str:
        return f"slot '{self.name}' ({'float' if self.is_float else 'uint64'})"


def slot_layout(desc: DataFeedDesc) -> list[_Slot]:
    """The slots of ``desc`` as the reader parses them; a DataFeedError for a slot it cannot read."""
    slots = []
    for s in desc.slots:
        shape = None
        if s.is_dense:
            dims = list(s.shape)
            if not dims:
                raise DataFeedError(
                    f"{desc.source}: dense slot '{s.name}' has no shape; give the values "
                    f"per instance (`shape: 1` for one value)"
                )
            shape = tuple(dims[1:] if dims[0] == -1 else dims)
        slots.append(_Slot(s.name, s.type == "float", s.is_used, shape))
    return slots


# -- parsing one chunk ------------------------------------------------------------------------------


def _tokens(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and end (exclusive) offsets of the whitespace-separated tokens of the bytes ``a``."""
    word = ~((a == _SPACE) | ((a >= 9) & (a <= 13)))
    edges = np.flatnonzero(np.diff(word, prepend=False, append=False))
    return edges[0::2], edges[1::2]


def _window(a: np.ndarray, first: np.ndarray, starts: np.ndarray, ends: np.ndarray, width: int, pad: int) -> np.ndarray:
    """The bytes ``first + j`` for ``j < width``: row ``j``, one column per token (so that the work per
    position runs over contiguous rows), ``pad`` outside the token."""
    at = first + np.arange(width)[:, None]
    return np.where((at >= starts) & (at < ends), a.take(at, mode="clip"), pad)


def _digit_runs(a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value as uint64, ok) of the bytes ``[starts, ends)`` of each run: ok where they are decimal
    digits, at most 19 of them (an empty run is 0). One step per position from the end, over all runs
    (positions before a run's start count as leading zeros)."""
    length = ends - starts
    value, bad = np.zeros(len(starts), np.uint64), length >= _INT_WIDTH
    for back in range(min(int(length.max(initial=1)), _INT_WIDTH), 0, -1):
        at = ends - back
        digit = a.take(at, mode="clip") - np.uint8(_ZERO)  # other bytes wrap around to 10 or more
        digit *= at >= starts
        bad |= digit >= 10
        value *= np.uint64(10)
        value += digit
    return value, ~bad


def _parse_ids(a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64, ok): ok where the token is a decimal unsigned integer that fits int64."""
    values, ok = _digit_runs(a, starts, ends)
    return values.view(np.int64), ok & (values <= _INT64_MAX)


def _first(found: np.ndarray, starts: np.ndarray, otherwise: np.ndarray) -> np.ndarray:
    """Per column of the window ``found``, the offset of its first true row, or ``otherwise``."""
    return np.where(found.any(axis=0), starts + found.argmax(axis=0), otherwise)


def _parse_floats(a: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values as float32, ok). ``[+-]digits[.digits][(e|E)[+-]digits]`` with at most 19 significant
    digits is computed exactly here (Clinger's fast path); other tokens go through Python's float."""
    width = min(int((ends - starts).max(initial=1)), _FLOAT_WIDTH)
    c = _window(a, starts, starts, ends, width, pad=_SPACE)
    body = starts + ((c[0] == _MINUS) | (c[0] == _PLUS))
    e_at = _first((c == _E_LOWER) | (c == _E_UPPER), starts, ends)
    dot_at = np.minimum(_first(c == _DOT, starts, ends), e_at)  # a dot after the e: in the exponent, bad
    frac_at = np.minimum(dot_at + 1, e_at)
    after_e = a.take(e_at + 1, mode="clip")
    exp_sign = (e_at + 1 < ends) & ((after_e == _MINUS) | (after_e == _PLUS))
    exp_at = np.minimum(e_at + 1 + exp_sign, ends)
    whole, ok_whole = _digit_runs(a, body, dot_at)
    frac, ok_frac = _digit_runs(a, frac_at, e_at)
    exp, ok_exp = _digit_runs(a, exp_at, ends)
    n_frac = e_at - frac_at
    n_digits = dot_at - body + n_frac
    n_exp = ends - exp_at
    fast = (
        ok_whole
        & ok_frac
        & ok_exp
        & (ends - starts <= width)
        & (n_digits >= 1)
        & (n_digits <= 19)
        & ((e_at == ends) | ((n_exp >= 1) & (n_exp <= 3)))
    )
    mant = whole * _POW10_INT[np.minimum(n_frac, 19)] + frac
    exp10 = np.where(exp_sign & (after_e == _MINUS), -exp.astype(np.int64), exp.astype(np.int64)) - n_frac
    fast &= (mant < _FLOAT_EXACT) & (np.abs(exp10) <= 22)
    scale = _POW10_FLOAT[np.minimum(np.abs(exp10), 22)]
    values = np.where(exp10 >= 0, mant.astype(np.float64) * scale, mant.astype(np.float64) / scale)
    values = np.where(c[0] == _MINUS, -values, values)
    ok = fast.copy()
    for i in np.flatnonzero(~fast):
        token = a[starts[i] : ends[i]].tobytes()
        with suppress(ValueError):  # not a number: stays not ok
            values[i] = float(token) if b"_" not in token else math.nan  # Python reads 1_0 as 10
            ok[i] = b"_" not in token
    with np.errstate(over="ignore"):
        return values.astype(np.float32), ok


def _ranges(first: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """The concatenation of ``range(first[i], first[i] + counts[i])`` for every ``i``."""
    return np.repeat(first - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))


@dataclass
class _Chunk:
    """The instances of a chunk of lines: per used slot (counts per instance, values), and the bad lines."""

    lines: int
    columns: list[tuple[np.ndarray, np.ndarray]]
    instances: int
    bad: int
    first_bad: tuple[int, str] | None  # (line in the chunk, 0-based; what is wrong)


def _parse(data: bytes, slots: list[_Slot]) -> _Chunk:
    """Parse whole lines (``data`` ends with a newline, or is the end of the file)."""
    a = np.frombuffer(data, np.uint8)
    starts, ends = _tokens(a)
    newlines = np.flatnonzero(a == ord("\n"))
    if not data.endswith(b"\n"):
        newlines = np.append(newlines, len(a))
    # A line's tokens start after its first byte and before the next line's (the newline is no token).
    first_tok = np.searchsorted(starts, np.concatenate(([0], newlines[:-1] + 1)))
    end_tok = np.append(first_tok[1:], len(starts))
    # The lines still good, where each is (its next token), and the problems found so far.
    lines = np.arange(len(newlines))
    pos, end = first_tok, end_tok
    problems: list[tuple[np.ndarray, int, int, np.ndarray]] = []  # (lines, kind, slot, token)
    parsed: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []  # used slots: (lines, counts, values)

    def drop(bad: np.ndarray, kind: int, k: int, token: np.ndarray) -> np.ndarray:
        nonlocal lines, pos, end
        if bad.any():
            problems.append((lines[bad], kind, k, token[bad]))
            keep = ~bad
            lines, pos, end = lines[keep], pos[keep], end[keep]
            return keep
        return np.ones(len(lines), bool)

    for k, slot in enumerate(slots):
        drop(pos >= end, _MISSING, k, pos)
        counts, ok = _parse_ids(a, starts[pos], ends[pos])
        keep = drop(~ok | (counts == 0) | (counts > end - pos - 1), _COUNT, k, pos)
        counts = counts[keep]
        if slot.shape is not None:
            counts = counts[drop(counts != slot.width, _DENSE, k, pos)]
        idx = _ranges(pos + 1, counts)
        values, ok = (_parse_floats if slot.is_float else _parse_ids)(a, starts[idx], ends[idx])
        if not ok.all():
            owner = np.repeat(np.arange(len(lines)), counts)[~ok]
            first = np.unique(owner, return_index=True)[1]
            bad = np.zeros(len(lines), bool)
            bad[owner[first]] = True
            first_bad_token = np.zeros(len(lines), np.int64)
            first_bad_token[owner[first]] = idx[~ok][first]
            values = values[np.repeat(~bad, counts)]
            counts = counts[drop(bad, _VALUE, k, first_bad_token)]
        pos = pos + 1 + counts
        if slot.used:
            parsed.append((lines, counts, values))
    drop(pos != end, _TRAILING, len(slots) - 1, pos)

    columns = []
    for slot_lines, counts, values in parsed:
        if len(slot_lines) != len(lines):
            keep = np.isin(slot_lines, lines, assume_unique=True)
            counts, values = counts[keep], values[np.repeat(keep, counts)]
        columns.append((counts, values))
    bad_lines = sum(len(p[0]) for p in problems)
    first_bad = None
    if problems:
        found, kind, k, token = min(problems, key=lambda p: int(p[0].min()))
        i = int(found.argmin())
        line = int(found[i])
        first_bad = (line, _explain(kind, slots, k, data, starts, ends, int(token[i]), int(end_tok[line])))
    return _Chunk(len(newlines), columns, len(lines), bad_lines, first_bad)


def _explain(
    kind: int, slots: list[_Slot], k: int, data: bytes, starts: np.ndarray, ends: np.ndarray, token: int, end: int
) -> str:
    """What is wrong with a bad line, from the kind of problem, the slot and the token concerned."""
    slot = slots[k]
    if kind == _MISSING:
        return f"expected the count of {slot.describe()}, found the end of the line"
    text = data[starts[token] : ends[token]].decode("utf-8", "replace")
    if kind == _COUNT:
        left = end - token - 1
        if not _is_digits(text):
            return f"expected the count of {slot.describe()}, a positive integer, found '{text}'"
        if int(text) == 0:
            return f"{slot.describe()} has count 0; every slot needs at least one value"
        return f"{slot.describe()} has count {text} but only {left} tokens are left on the line"
    if kind == _DENSE:
        return f"dense {slot.describe()} has {text} values, expected {slot.width} (shape {list(slot.shape or ())})"
    if kind == _TRAILING:
        return f"{end - token} tokens after the last slot '{slot.name}', starting with '{text}'"
    if slot.is_float:
        return f"value '{text}' of {slot.describe()} is not a number"
    if _is_digits(text):
        return f"value '{text}' of {slot.describe()} does not fit int64"
    if any(c in text for c in ".eE") and _is_float(text):
        return f"value '{text}' of {slot.describe()} is a float, expected an unsigned integer id"
    return f"value '{text}' of {slot.describe()} is not an unsigned integer id"


def _is_digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# -- reading files ----------------------------------------------------------------------------------


@contextmanager
def _open(path: str, pipe_command: str, running: list[subprocess.Popen[bytes]]) -> Iterator[IO[bytes]]:
    """The file's bytes, or the output of ``pipe_command`` run with the file on its stdin (in ``running``
    while it runs)."""
    try:
        file = open_regular(path)  # a FIFO or a device is refused, not waited on
    except OSError as e:
        raise DataFeedError(f"cannot read data file {path}: {e.strerror or e}") from None
    with file:
        if pipe_command.strip() in ("", "cat"):
            yield file
            return
        with tempfile.TemporaryFile() as stderr:
            # Its own process group, so that stopping early ends the whole command (pipelines too).
            proc = subprocess.Popen(
                pipe_command, shell=True, stdin=file, stdout=subprocess.PIPE, stderr=stderr, start_new_session=True
            )
            out = cast(IO[bytes], proc.stdout)  # stdout=PIPE: never None
            running.append(proc)
            try:
                yield out
            except BaseException:
                _kill(proc)
                raise
            finally:
                running.remove(proc)
                out.close()
                proc.wait()
            if proc.returncode != 0:
                stderr.seek(0)
                said = stderr.read()[-4000:].decode("utf-8", "replace").strip()
                raise DataFeedError(
                    f"{path}: pipe_command '{pipe_command}' failed with exit status "
                    f"{proc.returncode}: {said or '(no stderr)'}"
                )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill a pipe_command's whole process group (pipelines, background children)."""
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def _blocks(stream: IO[bytes], chunk_size: int) -> Iterator[bytes]:
    """The stream in blocks of about ``chunk_size`` bytes, each made of whole lines."""
    rest = b""
    while data := stream.read(chunk_size):
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut:
            yield data[:cut]
        rest = data[cut:]
    if rest:
        yield rest


class MultiSlotReader:
    """Batches of ``desc.batch_size`` instances from MultiSlot files, as dicts slot name -> value.

    Only used slots are in a batch, in ``multi_slot_desc`` order. A sparse slot is a ``LoDTensor``
    of shape ``[total, 1]`` with one LoD level (the instances' lengths): int64 ids for ``uint64``,
    float32 for ``float``. A dense slot is an array ``[batch, *shape]`` (int64 or float32). Batches
    run on across files; the last one may be smaller. ``files`` is a path, a sequence of paths, or an
    iterator of paths, taken one at a time as the previous file is done (a worker's share of a queue);
    ``file`` is the one being read, ``batch_files`` the files the last batch's instances came from.

    A malformed line raises :class:`~blockir.errors.DataFeedError` naming file and line (1-based);
    with ``skip_bad_lines`` it is skipped and counted. ``instances`` and ``skipped_lines`` count the
    current (or last) pass. ``chunk_size`` is how many bytes are parsed at once; with ``prefetch`` > 0
    a background thread reads and parses up to that many chunks ahead of the batches taken (parsing
    is numpy work on whole chunks, so it overlaps training that runs meanwhile).
    """

    def __init__(
        self,
        desc: DataFeedDesc,
        files: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
        skip_bad_lines: bool = False,
        *,
        chunk_size: int = CHUNK_SIZE,
        prefetch: int = 0,
    ) -> None:
        if chunk_size <= 0:
            raise DataFeedError(f"chunk_size must be positive, got {chunk_size}")
        if prefetch < 0:
            raise DataFeedError(f"prefetch must be >= 0, got {prefetch}")
        self._slots = slot_layout(desc)
        if not any(s.used for s in self._slots):
            raise DataFeedError(f"{desc.source}: no slot is used (is_used: true, or set_use_slots)")
        self.batch_size = desc.batch_size
        self.pipe_command = desc.pipe_command
        self.files: Iterable[str | os.PathLike[str]] = (
            [files] if isinstance(files, (str, os.PathLike)) else files if isinstance(files, Iterator) else list(files)
        )
        self.file: str | None = None
        self.batch_files: list[str] = []
        self.skip_bad_lines = skip_bad_lines
        self.chunk_size = chunk_size
        self.prefetch = prefetch
        self._commands: list[subprocess.Popen[bytes]] = []  # the pipe_command running, if any
        self.instances = 0
        self.skipped_lines = 0

    def __iter__(self) -> Generator[dict[str, Any]]:
        self.instances = self.skipped_lines = 0
        batcher = _Batcher([s for s in self._slots if s.used], self.batch_size)
        parsed = self._parsed()
        chunks = staged(parsed, HOST, capacity=self.prefetch) if self.prefetch else parsed
        try:
            for path, chunk in chunks:
                batcher.add(chunk, path)
                yield from self._batches(batcher)
        finally:  # also when the consumer stops early: no thread or command is left running
            if chunks is not parsed:
                for proc in list(self._commands):  # the prefetching thread may wait on its output
                    _kill(proc)
                chunks.close()  # joins the prefetching thread
            parsed.close()
        yield from self._batches(batcher, final=True)

    def _parsed(self) -> Generator[tuple[str, _Chunk]]:
        for path in self.files:
            self.file = path = os.fspath(path)
            for chunk in self._chunks(path):
                yield path, chunk

    def _batches(self, batcher: _Batcher, final: bool = False) -> Iterator[dict[str, Any]]:
        for self.batch_files, batch in batcher.take(final):
            yield batch

    def _chunks(self, path: str) -> Iterator[_Chunk]:
        line = 0
        with _open(path, self.pipe_command, self._commands) as stream:
            try:
                for data in _blocks(stream, self.chunk_size):
                    chunk = _parse(data, self._slots)
                    if chunk.first_bad is not None and not self.skip_bad_lines:
                        at, what = chunk.first_bad
                        piped = (
                            ""
                            if self.pipe_command.strip() in ("", "cat")
                            else f" (output of pipe_command '{self.pipe_command}')"
                        )
                        raise DataFeedError(f"{path}:{line + at + 1}{piped}: {what}")
                    self.instances += chunk.instances
                    self.skipped_lines += chunk.bad
                    line += chunk.lines
                    yield chunk
            except OSError as e:
                raise DataFeedError(f"cannot read data file {path}: {e.strerror or e}") from None


class _Batcher:
    """Gathers parsed chunks and cuts them into batches."""

    def __init__(self, slots: list[_Slot], batch_size: int) -> None:
        self.slots = slots
        self.batch_size = batch_size
        self.parts: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in slots]
        self.size = 0
        self.sources: list[list[Any]] = []  # [file, instances of it not yet in a batch], in order

    def add(self, chunk: _Chunk, path: str) -> None:
        for parts, column in zip(self.parts, chunk.columns):
            parts.append(column)
        self.size += chunk.instances
        if self.sources and self.sources[-1][0] == path:
            self.sources[-1][1] += chunk.instances
        elif chunk.instances:
            self.sources.append([path, chunk.instances])

    def _files(self, n: int) -> list[str]:
        """The files of the next ``n`` instances, which leave the sources."""
        files = []
        while n:
            source = self.sources[0]
            files.append(source[0])
            used = min(n, source[1])
            source[1] -= used
            n -= used
            if not source[1]:
                self.sources.pop(0)
        return files

    def take(self, final: bool = False) -> Iterator[tuple[list[str], dict[str, Any]]]:
        """The batches ready (``final``: also a last, smaller one), each with the files it came from."""
        bs = self.batch_size
        n = self.size if final else self.size - self.size % bs
        if n == 0:
            return
        merged = [
            (np.concatenate([c for c, _ in parts]), np.concatenate([v for _, v in parts])) for parts in self.parts
        ]
        offsets = [np.concatenate(([0], np.cumsum(counts))) for counts, _ in merged]
        for lo in range(0, n, bs):
            hi = min(lo + bs, n)
            yield (
                self._files(hi - lo),
                {
                    slot.name: _value(slot, values[off[lo] : off[hi]], off[lo : hi + 1] - off[lo])
                    for slot, (_, values), off in zip(self.slots, merged, offsets)
                },
            )
        self.parts = [[(counts[n:], values[off[n] :])] for (counts, values), off in zip(merged, offsets)]
        self.size -= n


def _value(slot: _Slot, values: np.ndarray, offsets: np.ndarray) -> Any:
    if slot.shape is not None:
        return values.reshape(len(offsets) - 1, *slot.shape)
    return LoDTensor(values.reshape(-1, 1), [offsets])  # type: ignore[list-item]  # LoDTensor takes offset arrays


# -- writing ----------------------------------------------------------------------------------------


def write_multislot(path: str | os.PathLike[str], instances: Iterable[Mapping[str, Any]], desc: DataFeedDesc) -> int:
    """Write ``instances`` (dicts slot name -> values, every slot of ``desc``) as a MultiSlot file.

    A slot's values are a number, a sequence or an array (flattened). Returns how many were written.
    """
    slots = slot_layout(desc)
    written = 0
    with open(path, "w", encoding="ascii") as f:
        for instance in instances:
            try:
                f.write(" ".join(_field(slot, instance) for slot in slots) + "\n")
            except ValueError as e:
                raise DataFeedError(f"write_multislot: instance {written}: {e}") from None
            written += 1
    return written


def _field(slot: _Slot, instance: Mapping[str, Any]) -> str:
    """``<n> v1 ... vn`` for ``slot`` of ``instance``."""
    if slot.name not in instance:
        raise ValueError(f"no slot '{slot.name}'")
    value = instance[slot.name]
    values = (
        value.ravel().tolist()
        if isinstance(value, np.ndarray)
        else list(value)
        if isinstance(value, (list, tuple, range))
        else [value]
    )
    if not values or (slot.shape is not None and len(values) != slot.width):
        expected = "at least 1" if slot.shape is None else str(slot.width)
        raise ValueError(f"{slot.describe()} has {len(values)} values, expected {expected}")
    if slot.is_float:
        return f"{len(values)} {' '.join(map(repr, map(float, values)))}"
    try:
        ids = [operator.index(v) for v in values]
    except TypeError:
        raise ValueError(f"{slot.describe()} takes integer ids, got {values}") from None
    if min(ids) < 0 or max(ids) > 2**63 - 1:
        raise ValueError(f"{slot.describe()} ids must be in [0, 2**63), got {values}")
    return f"{len(values)} {' '.join(map(str, ids))}"
