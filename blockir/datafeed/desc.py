"""``DataFeedDesc``: how a data feed reads its files, in protobuf text format (Paddle's ``data.prototxt``).

    desc = bir.DataFeedDesc("train_data/data.prototxt")
    desc.set_batch_size(128)
    desc.set_use_slots(["words", "label"])
    print(desc.desc())

The schema is ``proto/blockir/data_feed.proto`` (Paddle's field numbers, so Paddle's files load).
:class:`~blockir.datafeed.multislot.MultiSlotReader` reads the files such a description describes.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from google.protobuf import text_format

from blockir.errors import DataFeedError
from blockir.ir.proto_io import open_regular
from blockir.proto import data_feed_pb2 as pb

__all__ = ["DataFeedDesc", "SLOT_TYPES"]

SLOT_TYPES = ("uint64", "float")


class DataFeedDesc:
    """A ``DataFeedDesc`` message loaded from a text-format file or from the text itself.

    ``DataFeedDesc(path_or_text)``: a ``Path``, or a string naming an existing file or holding
    no newline, brace or colon, is read as a file; any other string is the text. ``proto`` is the
    message; the setters change it in place and check what they are given.
    """

    def __init__(self, path_or_text: str | os.PathLike[str]) -> None:
        text, self.source = _read(path_or_text)
        self.proto = pb.DataFeedDesc()
        try:
            text_format.Parse(text, self.proto)
        except text_format.ParseError as e:
            raise DataFeedError(f"{self.source}:{e}") from None
        missing = self.proto.FindInitializationErrors()  # type: ignore[attr-defined]  # on every Message; not in the stubs
        if missing:
            raise DataFeedError(f"{self.source}: missing required fields: {', '.join(missing)}")
        self._check()

    def _check(self) -> None:
        names = [slot.name for slot in self.slots]
        for slot in self.slots:
            where = f"{self.source}: slot '{slot.name}'"
            if names.count(slot.name) > 1:
                raise DataFeedError(f"{where} is declared {names.count(slot.name)} times")
            if slot.type not in SLOT_TYPES:
                raise DataFeedError(f"{where} has type '{slot.type}', expected 'uint64' or 'float'")
            dims = list(slot.shape)
            if any(d <= 0 for d in dims[1:]) or (dims and dims[0] <= 0 and dims[0] != -1):
                raise DataFeedError(
                    f"{where} has shape {dims}: dimensions must be positive (only the first may be -1, the batch)"
                )
        if self.proto.batch_size <= 0:
            raise DataFeedError(f"{self.source}: batch_size must be positive, got {self.proto.batch_size}")
        if self.proto.thread_num < 0:
            raise DataFeedError(f"{self.source}: thread_num must not be negative, got {self.proto.thread_num}")

    # -- read access -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.proto.name

    @property
    def slots(self) -> list[pb.Slot]:
        """The slots in ``multi_slot_desc`` order (the order of the values on a line)."""
        return list(self.proto.multi_slot_desc.slots)

    @property
    def batch_size(self) -> int:
        return self.proto.batch_size

    @property
    def pipe_command(self) -> str:
        return self.proto.pipe_command

    @property
    def thread_num(self) -> int:
        return self.proto.thread_num

    # -- setters (Paddle's fluid.DataFeedDesc API) -------------------------------------------------

    def set_batch_size(self, batch_size: int) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise DataFeedError(f"set_batch_size: the batch size must be a positive int, got {batch_size!r}")
        self.proto.batch_size = batch_size

    def set_use_slots(self, names: Iterable[str]) -> None:
        """Use exactly the slots ``names``; the others are parsed and dropped."""
        chosen = self._known("set_use_slots", names)
        for slot in self.proto.multi_slot_desc.slots:
            slot.is_used = slot.name in chosen

    def set_dense_slots(self, names: Iterable[str]) -> None:
        """Mark the slots ``names`` dense (each needs a ``shape``); the others are left as they are."""
        chosen = self._known("set_dense_slots", names)
        for slot in self.proto.multi_slot_desc.slots:
            if slot.name in chosen:
                slot.is_dense = True

    def _known(self, method: str, names: Iterable[str]) -> set[str]:
        if isinstance(names, str):
            raise DataFeedError(f"{method} takes a list of slot names, got the string {names!r}")
        chosen = set(names)
        declared = [slot.name for slot in self.slots]
        unknown = sorted(chosen.difference(declared))
        if unknown:
            raise DataFeedError(
                f"{method}: no slot named {', '.join(map(repr, unknown))}; "
                f"{self.source} declares {', '.join(declared) or 'no slots'}"
            )
        return chosen

    def desc(self) -> str:
        """The description in protobuf text format (what ``DataFeedDesc(text)`` reads back)."""
        return text_format.MessageToString(self.proto)

    def __repr__(self) -> str:
        slots = ", ".join(f"{s.name}:{s.type}" for s in self.slots)
        return f"DataFeedDesc({self.source!r}, batch_size={self.batch_size}, slots=[{slots}])"


def _read(path_or_text: str | os.PathLike[str]) -> tuple[str, str]:
    """(text, source): the source is the file's path or ``<text>``."""
    if isinstance(path_or_text, str) and any(c in path_or_text for c in "\n{:") and not os.path.isfile(path_or_text):
        return path_or_text, "<text>"
    path = os.fspath(path_or_text)
    try:
        with open_regular(path) as f:  # a regular file: a FIFO or a device is refused, not waited on
            return f.read().decode("utf-8"), path
    except OSError as e:
        raise DataFeedError(f"cannot read data feed description {path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise DataFeedError(f"{path}: not UTF-8 text ({e})") from None
