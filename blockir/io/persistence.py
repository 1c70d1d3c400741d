"""Saving and loading variables and inference models (Fluid's ``fluid.io``), as ``bir.io``.

Files are numpy's ``.npy`` and zip archives of them, written without pickle and
read without ever executing code from a file. Two layouts:

* **one file per variable** (no ``filename``): ``dirname`` holds a manifest,
  ``manifest.json``, naming each variable's file in the directory of the save
  that wrote it, ``gen-NNNNNN/`` (``N`` the save's generation number)::

      dirname/manifest.json            {"format": "blockir.save", "version": 1, "generation": 2,
                                        "vars": {"fc.w_0": {"kind": "dense", "file": "gen-000002/fc.w_0.npy"},
                                                 "seq": {"kind": "lod_tensor", "file": "gen-000002/seq.npz"}}}
      dirname/gen-000002/fc.w_0.npy    a dense tensor: a .npy file
      dirname/gen-000002/seq.npz       a LoDTensor or SelectedRows: a bundle (below) of one variable

  A ``/`` in a name makes subdirectories of the generation's directory, as in
  Fluid. ``kind`` is ``dense``, ``lod_tensor`` or ``selected_rows``; ``file``
  is relative to ``dirname``, with ``/`` separators. A parameter server's save
  (:func:`save_sharded`) adds ``tables``: per sparse table its shape, dtype,
  sharding rule, the optimizer state saved with its rows, and its shards (file,
  arrays, rows, the CRC-32 of each 16 MiB part), written by the servers into the
  same generation.
* **a bundle** (``filename``): one zip archive of stored (uncompressed) ``.npy``
  members, so ``np.load`` opens it as an ``.npz``, plus ``index.json`` telling
  each variable's kind and members: a LoDTensor's data and one array per LoD
  level, a SelectedRows' rows, values and height.

A save is atomic as a whole. A bundle is written to a temporary file renamed
over the old one. One file per variable, a save writes its files into a new
generation directory (never touching the previous save's files), syncs them,
then replaces the manifest atomically (temporary file, sync, rename, sync of
the directory); only then does it remove the files of the previous save that
the new manifest no longer names, and generation directories no manifest names
(left by a save that was interrupted). Killed at any moment, a save leaves the
old or the new save loadable. A save of some variables keeps the manifest's
entries of the others (as Fluid's files of other variables stay). One process
saves into a directory at a time; a save by several writers (a parameter
server's shards) is to build on the same manifest: each writer's files anywhere
inside the directory, one manifest naming them all written last, its
``format`` and ``version`` telling a reader what it must understand.

Saves made before the manifest (``dirname/NAME.npy``, ``dirname/NAME.npz``)
still load: a variable the manifest does not name, or every variable where
there is no manifest, is looked for there. A save removes those old files of
the variables it writes. Directories named ``gen-`` and digits belong to saves.

Untrusted files are read within declared limits: only regular files are read
(a FIFO, a device or a socket is refused before anything is read), a ``.npy``
header is checked against the size of its file (or bundle member) before
anything is allocated, and a manifest or bundle index may have at most
:data:`MAX_INDEX_BYTES`. A manifest's tables are checked for what they claim
(types, ranges) as it is read, and each shard against those claims. Names and
file names (also those a manifest gives) that would lead outside ``dirname``
are refused. Every problem with a file, the operating system's too
(permissions, a file where a directory should be), is a :class:`BlockirError`
naming the file.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import math
import os
import re
import shutil
import struct
import tokenize
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any, cast

import numpy as np

from blockir.errors import BlockirError
from blockir.io import onnx, paddle
from blockir.io.manifest import ELEMENT_KINDS as _ELEMENT_KINDS
from blockir.io.manifest import SHARD_EXTRAS, ShardEntry, TableEntry
from blockir.ir.core import Program, Variable
from blockir.ir.defaults import default_main_program
from blockir.ir.dtypes import VarKind
from blockir.ir.proto_io import (
    atomic_file,
    load_program,
    make_dirs,
    open_regular,
    os_errors,
    read_limited,
    stale_temporaries,
    sync_dir,
)
from blockir.ops.transfer import FEED, FETCH, map_arrays
from blockir.ops.values import LoDTensor, SelectedRows
from blockir.passes import InferencePipeline, Instrument
from blockir.passes import run as run_pipeline
from blockir.passes.feed_fetch import is_framing
from blockir.runtime.executor import Executor
from blockir.runtime.plan import describe_value, shape_matches
from blockir.runtime.scope import Scope, global_scope

try:  # ISA-L's CRC-32 (the fast extra): zlib's checksum, its values the same, several times faster
    from isal.isal_zlib import crc32 as _crc32_of
except ImportError:
    _crc32_of = zlib.crc32

__all__ = [
    "MANIFEST_FILE",
    "MAX_INDEX_BYTES",
    "PARAMS_DIR",
    "PROGRAM_FILE",
    "FLUID_MODEL_FILE",
    "MODEL_FORMATS",
    "is_parameter",
    "is_persistable",
    "load_array",
    "load_inference_model",
    "load_params",
    "load_persistables",
    "load_vars",
    "model_format",
    "read_paddle_params",
    "read_shard",
    "check_distinct",
    "check_shard",
    "SHARD_EXTRAS",
    "SHARD_PART_BYTES",
    "ArrayParts",
    "ShardEntry",
    "TableEntry",
    "save_inference_model",
    "save_sharded",
    "incomplete_saves",
    "saved_info",
    "saved_tables",
    "saved_values",
    "write_shard",
    "save_params",
    "save_persistables",
    "save_vars",
]

PROGRAM_FILE = "program.pb"  # save_inference_model's default model_filename
PARAMS_DIR = "params"  # where save_inference_model puts one file per parameter by default
FLUID_MODEL_FILE = "__model__"  # Fluid 1.x's model file in its inference model directory
MODEL_FORMATS = ("blockir", "paddle", "fluid", "onnx")  # save_inference_model's formats
MANIFEST_FILE = "manifest.json"  # names the files of the last save, one file per variable
TableWriter = Callable[[Path], Mapping[str, TableEntry | dict[str, Any]]]
"""What writes a save's sparse tables into its generation directory and returns their entries (:func:`save_sharded`)."""
MAX_INDEX_BYTES = 64 << 20
"""The largest manifest or bundle ``index.json`` read (64 MiB)."""
SHARD_PART_BYTES = 16 << 20
"""The bytes of a table shard's file checksummed apart (16 MiB: :class:`ShardEntry`), so that a load reads and checks
its parts on several threads at once."""
_SHARD_BLOCK = 1 << 20  # a part is read and checksummed this much at a time, while its bytes are in the cache
_INDEX = "index.json"
_FORMAT, _VERSION = "blockir.vars", 1
_MANIFEST_FORMAT, _MANIFEST_VERSION = "blockir.save", 1
_KINDS = ("dense", "lod_tensor", "selected_rows")
_GENERATION = re.compile(r"gen-(\d+)")
_NPY_MAGIC = b"\x93NUMPY"
_NPY_MAX_HEADER = 10000  # the longest header numpy itself parses
_NOT_SAVED = frozenset(
    {
        VarKind.FEED_MINIBATCH,
        VarKind.FETCH_LIST,
        VarKind.READER,
        VarKind.RAW,
        VarKind.STEP_SCOPES,
        VarKind.CHANNEL,
        VarKind.CHANNEL_LIST,
    }
)


def is_persistable(var: Variable) -> bool:
    """Whether ``save_persistables`` saves ``var``: persistable and holding a tensor."""
    return var.persistable and var.kind not in _NOT_SAVED


def is_parameter(var: Variable) -> bool:
    """Whether ``save_params`` saves ``var``."""
    return var.is_parameter and is_persistable(var)


# -- paths ------------------------------------------------------------------------


def _inside(dirname: str | os.PathLike[str], relative: str, what: str) -> Path:
    """``dirname/relative``; an error when ``relative`` is absolute or leads outside ``dirname``."""
    if not isinstance(relative, str) or not relative or "\0" in relative:
        raise BlockirError(f"{what} {relative!r} is not a usable file name")
    parts = relative.replace("\\", "/").split("/")
    base = Path(dirname).resolve()
    target = (base / relative).resolve()
    if (
        PurePosixPath(relative.replace("\\", "/")).is_absolute()
        or any(p in ("", ".", "..") for p in parts)
        or not target.is_relative_to(base)
        or target == base
    ):
        raise BlockirError(f"{what} {relative!r} would lead outside the directory {str(dirname)!r}; refused")
    return target


# -- values <-> arrays ------------------------------------------------------------------


def _host(array: Any, name: str) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.hasobject:
        raise BlockirError(f"variable {name!r} holds Python objects ({a.dtype}), which are never saved")
    return a


def _arrays(name: str, value: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A value as (index entry, arrays by role)."""
    if isinstance(value, LoDTensor):
        lod = {f"lod.{i}": np.asarray(level, dtype=np.int64) for i, level in enumerate(value.lod)}
        return {"kind": "lod_tensor", "lod_levels": len(value.lod)}, {"data": _host(value.data, name), **lod}
    if isinstance(value, SelectedRows):
        return (
            {"kind": "selected_rows", "height": int(value.height)},
            {"rows": np.asarray(value.rows, dtype=np.int64), "values": _host(value.values, name)},
        )
    return {"kind": "dense"}, {"data": _host(value, name)}


def _value(name: str, entry: dict[str, Any], read: Callable[[str], np.ndarray], where: str) -> Any:
    """The value an index entry describes, its arrays read with ``read(role)``."""
    kind = entry.get("kind")
    try:
        if kind == "dense":
            return read("data")
        if kind == "lod_tensor":
            levels = entry["lod_levels"]
            return LoDTensor(read("data"), [read(f"lod.{i}").tolist() for i in range(int(levels))])
        if kind == "selected_rows":
            return _selected_rows(read("rows"), read("values"), int(entry["height"]))
    except (KeyError, TypeError, ValueError, OverflowError) as e:
        raise BlockirError(f"{where}: variable {name!r} is stored incompletely ({e})") from None
    except BlockirError as e:
        raise BlockirError(f"{where}: variable {name!r}: {e}") from None
    raise BlockirError(f"{where}: variable {name!r} has unknown kind {kind!r}")


def _selected_rows(rows: np.ndarray, values: np.ndarray, height: int) -> SelectedRows:
    if rows.ndim != 1 or rows.dtype.kind not in "iu" or values.ndim < 1 or len(values) != len(rows):
        raise BlockirError(
            f"selected rows need one integer row index per row of values, got rows "
            f"{rows.dtype}{list(rows.shape)} and values {values.dtype}{list(values.shape)}"
        )
    if height < 0 or rows.size and not 0 <= rows.min() <= rows.max() < height:
        raise BlockirError(f"selected rows index rows outside [0, {height})")
    return SelectedRows(rows, values, height)


# -- .npy files ----------------------------------------------------------------------------------


def _npy_header(f: io.BufferedIOBase, size: int, where: str) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, Fortran order, dtype, bytes of data) of the ``.npy`` data at ``f``'s position, ``size`` bytes
    from there; ``f`` is left at the start of the data. The header is checked against ``size``: the data it
    declares must fit."""
    start = f.read(8)
    if len(start) < 8 or start[:6] != _NPY_MAGIC:
        raise BlockirError(f"{where}: not a .npy array file")
    width = {(1, 0): 2, (2, 0): 4, (3, 0): 4}.get((start[6], start[7]))  # bytes of the header length
    if width is None:
        raise BlockirError(f"{where}: .npy format version {start[6]}.{start[7]}, which numpy does not write")
    length_field = f.read(width)
    length = int.from_bytes(length_field, "little")
    offset = 8 + width + length
    if len(length_field) < width or length > _NPY_MAX_HEADER or offset > size:
        raise BlockirError(f"{where}: truncated .npy file (its header is cut short or longer than the file)")
    read_header = np.lib.format.read_array_header_1_0 if width == 2 else np.lib.format.read_array_header_2_0
    try:  # version 3.0 is 2.0 with a UTF-8 header; headers of tensors are ASCII
        shape, fortran_order, dtype = read_header(
            io.BytesIO(length_field + f.read(length)), max_header_size=_NPY_MAX_HEADER
        )
    except (ValueError, TypeError, SyntaxError, RecursionError, tokenize.TokenError) as e:  # what parsing it raises
        raise BlockirError(f"{where}: not a .npy array file (bad header: {e})") from None
    if dtype.hasobject:
        raise BlockirError(f"{where}: holds Python objects, which are never loaded (they would need pickle)")
    if dtype.kind not in _ELEMENT_KINDS or any(d < 0 for d in shape):
        raise BlockirError(f"{where}: holds {dtype}{list(shape)}, not a tensor of numbers")
    if math.prod(d or 1 for d in shape) * dtype.itemsize > np.iinfo(np.intp).max:  # numpy refuses even empty ones
        raise BlockirError(f"{where}: not a .npy array file (bad header: shape {list(shape)} is too large)")
    nbytes, available = math.prod(shape) * dtype.itemsize, size - offset
    if nbytes > available:
        raise BlockirError(
            f"{where}: truncated .npy file (its header declares {dtype}{list(shape)}, {nbytes} bytes "
            f"of data, and {available} follow)"
        )
    return shape, fortran_order, dtype, nbytes


def _read_npy(f: io.BufferedIOBase, size: int, where: str) -> np.ndarray:
    """The array of the ``.npy`` data ``f`` holds (``size`` bytes from its position), read without pickle.

    The header is checked against ``size`` before anything is allocated: a
    header cannot make this allocate more than the file holds.
    """
    shape, fortran_order, dtype, nbytes = _npy_header(f, size, where)
    array = np.empty(math.prod(shape), dtype)
    view, filled = array.view(np.uint8).data, 0
    while filled < nbytes:
        n = f.readinto(view[filled:])
        if not n:
            raise BlockirError(f"{where}: truncated .npy file (data ends after {filled} of {nbytes} bytes)")
        filled += n
    return array.reshape(shape[::-1]).T if fortran_order else array.reshape(shape)


def _load_npy(path: Path, where: str) -> np.ndarray:
    """A ``.npy`` file's array (a regular file's: a FIFO or a device is refused)."""
    with os_errors(where, "read"), open_regular(path) as f:
        return _read_npy(cast(io.BufferedIOBase, f), os.fstat(f.fileno()).st_size, where)


def load_array(path: str | os.PathLike[str], what: str) -> np.ndarray:
    """The array of the ``.npy`` file ``path``, read without pickle (``blockir run --feed NAME=FILE.npy``).

    Every problem (no such file, not a regular file, not a ``.npy`` file,
    Python objects, a header declaring more data than the file holds,
    truncated data) is a :class:`BlockirError` starting ``"WHAT: PATH: "``.
    Nothing larger than the file is allocated.
    """
    return _load_npy(Path(path), f"{what}: {path}")


# -- bundles ----------------------------------------------------------------------------


def _write_bundle(f: IO[bytes], values: dict[str, Any]) -> None:
    index: dict[str, Any] = {"format": _FORMAT, "version": _VERSION, "vars": {}}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        for name, value in values.items():
            entry, arrays = _arrays(name, value)
            entry["arrays"] = {}
            for role, array in arrays.items():
                member = f"{len(zf.namelist())}.npy"
                with zf.open(member, "w", force_zip64=True) as m:
                    np.lib.format.write_array(m, array, allow_pickle=False)
                entry["arrays"][role] = member
            index["vars"][name] = entry
        zf.writestr(_INDEX, json.dumps(index, indent=1))


@contextlib.contextmanager
def _zip_errors(where: str) -> Iterator[None]:
    """A damaged archive as one error naming it: what ``zipfile`` raises for a bad structure, CRC or version,
    data cut short, sizes or offsets out of range, names that do not decode."""
    try:
        yield
    except (zipfile.BadZipFile, EOFError, NotImplementedError, ValueError, OverflowError, struct.error) as e:
        raise BlockirError(f"{where}: damaged bundle ({e})") from None


class _Bundle:
    """A bundle opened for reading: every member stored, its sizes within the file's."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        with os_errors(path, "read"):
            self.file = open_regular(path)
        try:
            with os_errors(path, "read"), _zip_errors(self.where):
                try:
                    self.zip = zipfile.ZipFile(self.file)
                except zipfile.BadZipFile:
                    raise BlockirError(f"{path}: not a blockir variables file (a zip with {_INDEX})") from None
                self.vars = self._index(os.fstat(self.file.fileno()).st_size)
        except BaseException:
            self.file.close()
            raise

    def _index(self, size: int) -> dict[str, Any]:
        for info in self.zip.infolist():
            if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:
                raise BlockirError(
                    f"{self.where}: member {info.filename!r} is compressed or encrypted; "
                    f"bundles store their members as they are"
                )
            if info.file_size != info.compress_size or info.header_offset + info.compress_size > size:
                raise BlockirError(
                    f"{self.where}: damaged bundle (member {info.filename!r} claims "
                    f"{info.file_size} bytes, more than the file holds)"
                )
        try:
            info = self.zip.getinfo(_INDEX)
        except KeyError:
            raise BlockirError(f"{self.where}: not a blockir variables file (a zip with {_INDEX})") from None
        if info.file_size > MAX_INDEX_BYTES:
            raise BlockirError(
                f"{self.where}: its {_INDEX} has {info.file_size} bytes, more than the {MAX_INDEX_BYTES} allowed"
            )
        try:
            index = json.loads(self.zip.read(info))
        except (ValueError, RecursionError):
            raise BlockirError(f"{self.where}: not a blockir variables file (bad {_INDEX})") from None
        if not isinstance(index, dict) or index.get("format") != _FORMAT or not isinstance(index.get("vars"), dict):
            raise BlockirError(f"{self.where}: not a blockir variables file (bad {_INDEX})")
        if index.get("version") != _VERSION:
            raise BlockirError(f"{self.where}: format version {index.get('version')!r}, this blockir reads {_VERSION}")
        return index["vars"]

    def load(self, name: str) -> Any:
        entry = self.vars.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("arrays"), dict):
            raise BlockirError(f"{self.where}: holds no variable {name!r}")
        members = entry["arrays"]

        def read(role: str) -> np.ndarray:
            try:
                info = self.zip.getinfo(members[role])
            except (KeyError, TypeError):
                raise BlockirError(f"{self.where}: variable {name!r} lacks its {role!r} array") from None
            where = f"{self.where}[{info.filename}]"
            with os_errors(self.where, "read"), _zip_errors(where), self.zip.open(info) as m:
                return _read_npy(cast(io.BufferedIOBase, m), info.file_size, where)  # a ZipExtFile

        return _value(name, entry, read, self.where)

    def close(self) -> None:
        self.zip.close()
        self.file.close()


def _load_from_bundle(path: Path, name: str) -> Any:
    bundle = _Bundle(path)
    try:
        return bundle.load(name)
    finally:
        bundle.close()


# -- one file per variable: the manifest and the generations ------------------------------------


@dataclass
class _Manifest:
    """A directory's manifest: the generation of the save that wrote it, each variable's entry, and the
    sparse tables a parameter server's shards hold (:func:`save_sharded`)."""

    generation: int
    vars: dict[str, dict[str, str]]  # name -> {"kind": one of _KINDS, "file": path relative to the directory}
    tables: dict[str, TableEntry] = field(default_factory=dict)  # name -> its entry (save_sharded)
    info: dict[str, Any] = field(default_factory=dict)  # what the writer records about the save (save_sharded)

    def files(self) -> set[str]:
        shards = {file for entry in self.tables.values() for file in entry.files()}
        return {entry["file"] for entry in self.vars.values()} | shards


def _read_manifest(base: Path) -> _Manifest | None:
    """``base``'s manifest, None where it has none; every file it names is checked to lie inside ``base``."""
    path = base / MANIFEST_FILE
    where = str(path)
    with os_errors(path, "read"):
        try:
            f = open_regular(path)
        except FileNotFoundError:
            return None
        with f:
            data = read_limited(f, MAX_INDEX_BYTES, where)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        raise BlockirError(f"{where}: not a blockir manifest (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("format") != _MANIFEST_FORMAT:
        raise BlockirError(f"{where}: not a blockir manifest (no format {_MANIFEST_FORMAT!r})")
    if doc.get("version") != _MANIFEST_VERSION:
        raise BlockirError(f"{where}: manifest version {doc.get('version')!r}, this blockir reads {_MANIFEST_VERSION}")
    generation, entries = doc.get("generation"), doc.get("vars")
    if not isinstance(generation, int) or generation < 0 or not isinstance(entries, dict):
        raise BlockirError(f"{where}: not a blockir manifest (bad generation or vars)")
    for name, entry in entries.items():
        if not isinstance(entry, dict) or entry.get("kind") not in _KINDS or not isinstance(entry.get("file"), str):
            raise BlockirError(f"{where}: bad entry for variable {name!r}: {entry!r}")
        _inside(base, entry["file"], f"{where}: the file of variable {name!r},")
    tables = doc.get("tables", {})
    if not isinstance(tables, dict):
        raise BlockirError(f"{where}: not a blockir manifest (bad tables)")
    info = doc.get("info", {})
    if not isinstance(info, dict):
        raise BlockirError(f"{where}: not a blockir manifest (bad info)")
    checked = {name: _table_entry(base, where, name, table) for name, table in tables.items()}
    return _Manifest(generation, entries, checked, info)


def _table_entry(base: Path, where: str, name: str, table: Any) -> TableEntry:
    """The entry ``table`` (JSON, or a :class:`TableEntry`) of the table ``name`` as read from ``where``, checked
    (:meth:`TableEntry.from_json`), every shard file it names inside ``base``."""
    entry = TableEntry.from_json(table, where, name)
    for file in sorted(entry.files()):
        _inside(base, file, f"{where}: a shard of table {name!r},")
    return entry


def _write_manifest(base: Path, manifest: _Manifest) -> None:
    doc = {
        "format": _MANIFEST_FORMAT,
        "version": _MANIFEST_VERSION,
        "generation": manifest.generation,
        "vars": manifest.vars,
        **({"tables": {name: t.to_json() for name, t in manifest.tables.items()}} if manifest.tables else {}),
        **({"info": manifest.info} if manifest.info else {}),
    }
    with atomic_file(base / MANIFEST_FILE) as f:
        f.write(json.dumps(doc, indent=1).encode())


def _files(dirname: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """A variable's file when dense (``NAME.npy``) and when a LoDTensor or SelectedRows (``NAME.npz``)."""
    base = _inside(dirname, name, "variable name")
    return base.with_name(base.name + ".npy"), base.with_name(base.name + ".npz")


@contextlib.contextmanager
def _new_file(path: Path) -> Iterator[IO[bytes]]:
    """A file of a new generation to write: created (never replacing a file), synced when written."""
    with os_errors(path, "write"):
        make_dirs(path.parent)
        with open(path, "xb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())


def _generations(base: Path) -> dict[int, Path]:
    """The generation directories in ``base`` by number."""
    with os_errors(base, "read"):
        return {int(m[1]): p for p in base.iterdir() if (m := _GENERATION.fullmatch(p.name))}


def _save_files(
    dirname: str | os.PathLike[str],
    values: dict[str, Any],
    shards: TableWriter | None = None,
    info: dict[str, Any] | None = None,
) -> None:
    """Save ``values`` one file each as a new generation, then point the manifest at it (see the module doc);
    ``shards`` (:func:`save_sharded`) writes the tables' shards into the generation's directory and returns
    their manifest entries; ``info`` is recorded in the manifest as it is."""
    base = Path(dirname).resolve()  # as _inside gives paths
    legacy = {name: _files(base, name) for name in values}  # every name is checked before anything is written
    with os_errors(base, "write"):
        make_dirs(base)
    old = _read_manifest(base)
    generation = max([old.generation if old else 0, *_generations(base)]) + 1
    new = _Manifest(generation, dict(old.vars) if old else {}, dict(old.tables) if old else {}, dict(info or {}))
    gen_dir = base / f"gen-{generation:06d}"
    with os_errors(gen_dir, "write"):
        gen_dir.mkdir()
    try:
        written = []
        for name, value in values.items():
            entry, arrays = _arrays(name, value)
            dense = entry["kind"] == "dense"
            target = _inside(gen_dir, name, "variable name")
            path = target.with_name(target.name + (".npy" if dense else ".npz"))
            with _new_file(path) as f:
                if dense:
                    np.lib.format.write_array(f, arrays["data"], allow_pickle=False)
                else:
                    _write_bundle(f, {name: value})
            new.vars[name] = {"kind": entry["kind"], "file": path.relative_to(base).as_posix()}
            written.append(path)
        if shards is not None:
            for name, table in shards(gen_dir).items():
                checked = _table_entry(base, f"{base / MANIFEST_FILE} (being written)", name, table)
                for shard in checked.chain()[-1]:
                    path = _inside(base, shard.file, f"a shard of table {name!r}")
                    if not path.is_relative_to(gen_dir):
                        raise BlockirError(f"a shard of table {name!r} was written outside the save: {path}")
                    written.append(path)
                new.tables[name] = checked
        with os_errors(gen_dir, "write"):
            for directory in {d for path in written for d in path.parents if d.is_relative_to(gen_dir)} | {base}:
                sync_dir(directory)
    except BaseException:
        shutil.rmtree(gen_dir, ignore_errors=True)
        raise
    _write_manifest(base, new)  # the save is complete from here on
    stale = (
        []
        if old is None
        else [base / file for file in old.files() - new.files() if _GENERATION.fullmatch(PurePosixPath(file).parts[0])]
    )
    _remove_stale(base, new, stale + [path for pair in legacy.values() for path in pair])


def save_sharded(
    dirname: str | os.PathLike[str],
    values: dict[str, Any],
    shards: TableWriter,
    info: dict[str, Any] | None = None,
) -> None:
    """A save by several writers (a parameter server's): ``values`` (name -> value) one file each as
    :func:`save_vars` writes them, and the sparse tables ``shards(gen_dir)`` writes into the save's new
    generation directory (each writer its shard files, synced), returning each table's manifest entry
    (a :class:`TableEntry`, or its JSON, checked as a manifest's is read: its shards' files relative to
    ``dirname``, each holding the arrays ``ids``, the table's and each state's rows and :data:`SHARD_EXTRAS`).
    ``info`` (JSON values) is recorded in the manifest (:func:`saved_info`). The manifest, naming everything,
    is written last: until then the previous save is the one that loads. Every reader checks the entries'
    claims as it reads the manifest, and each shard against them (:func:`check_shard`, :func:`read_shard`)."""
    _save_files(dirname, values, shards, info)


def _save_manifest(dirname: str | os.PathLike[str]) -> _Manifest:
    """A save's manifest; an error naming the directory when it is not a save (no manifest: an interrupted save
    is never loaded)."""
    base = Path(dirname).resolve()
    manifest = _read_manifest(base)
    if manifest is None:
        left = sorted(p.name for p in _generations(base).values()) if base.is_dir() else []
        held = f"; it holds only the incomplete save {', '.join(left)}, which did not finish" if left else ""
        raise BlockirError(
            f"{str(dirname)!r} is not a save: it has no {MANIFEST_FILE} (an interrupted save has none){held}"
        )
    return manifest


def incomplete_saves(dirname: str | os.PathLike[str]) -> list[str]:
    """The generation directories of a save that its manifest names no file in: saves that did not finish
    (killed half way), never loaded, removed by the next save."""
    base = Path(dirname).resolve()
    named = {PurePosixPath(file).parts[0] for file in _save_manifest(base).files()}
    return sorted(p.name for p in _generations(base).values() if p.name not in named)


def saved_tables(dirname: str | os.PathLike[str]) -> dict[str, TableEntry]:
    """The sparse tables a save holds (:func:`save_sharded`'s entries)."""
    return _save_manifest(dirname).tables


def saved_info(dirname: str | os.PathLike[str]) -> dict[str, Any]:
    """What the writer of a save recorded about it (:func:`save_sharded`'s ``info``; ``{}`` when nothing)."""
    return _save_manifest(dirname).info


def saved_values(dirname: str | os.PathLike[str]) -> dict[str, Any]:
    """Every variable a save's manifest names (its dense part: the tables' shards are :func:`saved_tables`)."""
    manifest = _save_manifest(dirname)
    return {name: _load_file(dirname, manifest, name) for name in manifest.vars}


def _crc32(pieces: Iterable[Any]) -> str:
    """The CRC-32 of ``pieces`` (buffers) one after the other, as 8 hexadecimal digits."""
    crc = 0
    for piece in pieces:
        crc = _crc32_of(piece, crc)
    return f"{crc:08x}"


class _PartChecksums:
    """A shard file's writes, the CRC-32 of each ``part_bytes`` bytes of it computed on ``pool``'s threads while the
    file is written on (the CRC and the file's writes release the GIL): the parts are checksummed side by side, and a
    write waits while more than two per thread are waiting (what they hold stays bounded). The bytes written are
    the writer's arrays, kept alive and unchanged until their part is checksummed."""

    def __init__(self, f: IO[bytes], part_bytes: int, pool: ThreadPoolExecutor, threads: int) -> None:
        self.f, self.part_bytes, self.pool, self.most = f, part_bytes, pool, 2 * threads
        self.pieces: list[memoryview] = []  # of the part being written
        self.filled = 0  # its bytes so far
        self.parts: list[Future[str]] = []
        self.known = 0  # the parts (the first ones) whose checksum is known

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.f.write(view)
        at = 0
        while at < len(view):
            piece = view[at : at + self.part_bytes - self.filled]
            self.pieces.append(piece)
            self.filled += len(piece)
            at += len(piece)
            if self.filled == self.part_bytes:
                self._close()
        return len(view)

    def _close(self) -> None:
        self.parts.append(self.pool.submit(_crc32, self.pieces))
        self.pieces, self.filled = [], 0
        while len(self.parts) - self.known > self.most:
            self.parts[self.known].result()
            self.known += 1

    def checksums(self) -> list[str]:
        """The checksum of every part, the last one (shorter) closed."""
        if self.pieces or not self.parts:
            self._close()
        return [part.result() for part in self.parts]


@dataclass
class ArrayParts:
    """An array :func:`write_shard` writes a part at a time, as its parts come (a parameter server's full save
    reads each part of a table under the table's lock, so that pushes go on between parts): its ``dtype`` and
    ``shape``, and ``parts``, arrays of rows that together hold its ``shape[0]`` rows, in order."""

    dtype: np.dtype
    shape: tuple[int, ...]
    parts: Iterable[np.ndarray]


def write_shard(path: Path, arrays: Mapping[str, np.ndarray | ArrayParts]) -> dict[str, Any]:
    """Write a table shard: ``arrays`` (``ids``, one array per saved array of the rows, and others; each whole or
    in :class:`ArrayParts`) as ``.npy`` arrays one after the other, in a file created and synced, the CRC-32 of
    each :data:`SHARD_PART_BYTES` bytes computed on threads as it is written; its ``arrays`` (their order),
    ``rows``, ``crc32`` (a checksum per part) and ``part_bytes`` for the manifest (:class:`ShardEntry`)."""
    threads = _shard_threads()
    with _new_file(path) as f, ThreadPoolExecutor(threads, thread_name_prefix="blockir-checksum") as pool:
        hashing = _PartChecksums(f, SHARD_PART_BYTES, pool, threads)
        for name, array in arrays.items():
            dtype, shape = np.dtype(array.dtype), tuple(array.shape)
            if dtype.hasobject:
                raise BlockirError(f"{path}: a shard holds numbers, not {dtype}")
            header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(hashing, header)
            rows = 0
            for part in [array] if isinstance(array, np.ndarray) else array.parts:
                part = np.ascontiguousarray(part, dtype)
                hashing.write(part.reshape(-1).view(np.uint8).data)  # the data as it is: no copy
                rows += len(part)
            if rows != shape[0]:
                raise BlockirError(f"{path}: {name!r} came in parts of {rows} rows, not the {shape[0]} of its header")
        checksums = hashing.checksums()
    rows = int(arrays["ids"].shape[0])
    return {"arrays": list(arrays), "rows": rows, "crc32": checksums, "part_bytes": SHARD_PART_BYTES}


def _check_arrays(
    dirname: str | os.PathLike[str], name: str, table: TableEntry, shard: ShardEntry, held: dict[str, Any]
) -> None:
    """The dtypes and shapes of a shard's arrays (``held``: name -> (dtype, shape), from their headers or as read)
    against the claims of its manifest: ``rows`` ids, rows of the table's ``dim`` values of its ``dtype``."""
    manifest, file = Path(dirname) / MANIFEST_FILE, shard.file
    dtype = np.dtype(table.dtype)
    for array, (kind, shape) in held.items():
        holds = f"its shard {file} holds {array!r} as {kind}{list(shape)}"
        if array == "ids" or array in SHARD_EXTRAS:
            if len(shape) != 1 or kind.kind not in "iu":
                raise BlockirError(
                    f"{_inside(dirname, file, 'a table shard')}: {array!r} is {kind}{list(shape)}, "
                    f"not a list of integer ids"
                )
        elif array == name or array in table.states:
            if kind != dtype:
                raise BlockirError(f"{manifest}: table {name!r} has dtype {dtype}, but {holds}")
            if len(shape) != 2 or shape[1] != table.dim:
                raise BlockirError(f"{manifest}: table {name!r} has dim {table.dim}, but {holds}")
        if array == "ids" or array == name or array in table.states:
            if shape[0] != shard.rows:
                raise BlockirError(f"{manifest}: table {name!r}: shard {file} has {shard.rows} rows, but {holds}")
    pending, counts = held["pending_ids"][1], held["pending_counts"][1]
    if pending != counts:
        raise BlockirError(
            f"{_inside(dirname, file, 'a table shard')}: {pending[0]} pending ids and {counts[0]} counts of their "
            f"sightings"
        )


@dataclass
class _ShardLayout:
    """Where a shard file's arrays lie: its ``size``, each array's header (its offset and bytes) and its data (its
    offset, shape, Fortran order and dtype), by name."""

    size: int
    headers: list[tuple[int, bytes]]
    data: dict[str, tuple[int, tuple[int, ...], bool, np.dtype]]


def _shard_layout(dirname: str | os.PathLike[str], name: str, table: TableEntry, shard: ShardEntry) -> _ShardLayout:
    """:func:`check_shard`'s checks; where the shard's arrays lie."""
    path = _inside(dirname, shard.file, "a table shard")
    where = str(path)
    headers, data = [], {}
    with os_errors(path, "read"), open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        for array in shard.arrays:
            start = f.tell()
            shape, fortran, dtype, nbytes = _npy_header(cast(io.BufferedIOBase, f), size - start, f"{where}: {array}")
            at = f.tell()
            f.seek(start)
            headers.append((start, f.read(at - start)))
            data[array] = (at, shape, fortran, dtype)
            f.seek(at + nbytes)
        left = size - f.tell()
    if left:
        raise BlockirError(f"{where}: {left} bytes after the arrays its manifest names ({', '.join(shard.arrays)})")
    if shard.parts(size) != len(shard.crc32):
        raise BlockirError(
            f"{where}: its {size} bytes make {shard.parts(size)} parts of {shard.part_bytes} bytes, and its manifest "
            f"checksums {len(shard.crc32)} parts"
        )
    _check_arrays(dirname, name, table, shard, {a: (dtype, shape) for a, (_, shape, _, dtype) in data.items()})
    return _ShardLayout(size, headers, data)


def check_shard(dirname: str | os.PathLike[str], name: str, table: TableEntry, shard: ShardEntry) -> int:
    """Check a shard of the table ``name`` (its manifest entry ``table``, the shard's ``shard``) against what the
    manifest claims, without reading its data: a regular file of exactly the arrays the manifest names, their
    headers giving its ``rows``, ``dim`` and ``dtype``, as many parts as it has checksums. Its size in bytes; a
    :class:`BlockirError` naming the first claim it belies. (:func:`read_shard` also checks the checksums and the
    ids.)"""
    return _shard_layout(dirname, name, table, shard).size


def _shard_threads() -> int:
    """The threads that checksum a shard's parts as it is written, or read and checksum them as it is read."""
    return min(8, os.cpu_count() or 1)


def _fill(fd: int, block: memoryview, offset: int, where: str) -> None:
    """Read ``block`` from the file ``fd`` at ``offset`` (the file's reads release the GIL)."""
    done = 0
    while done < len(block):
        got = os.preadv(fd, [block[done:]], offset + done)
        if not got:
            raise BlockirError(f"{where}: cut short while it was read (it ends at byte {offset + done})")
        done += got


def _read_parts(fd: int, segments: list[tuple[int, memoryview]], shard: ShardEntry, size: int, where: str) -> list[str]:
    """Read the file ``fd`` of ``size`` bytes into ``segments`` (each the offset of some of its bytes and the buffer
    they go to, together covering the file), its parts (``shard.part_bytes`` bytes each; or the whole file) on
    threads side by side, each part a block at a time, checksummed while its bytes are in the cache; the CRC-32
    of each part."""
    step = shard.part_bytes or size

    def part(k: int) -> str:
        begin, end, crc = k * step, min(size, (k + 1) * step), 0
        for offset, buffer in segments:
            low, high = max(begin, offset), min(end, offset + len(buffer))
            for at in range(low, high, _SHARD_BLOCK):
                block = buffer[at - offset : min(high, at + _SHARD_BLOCK) - offset]
                _fill(fd, block, at, where)
                crc = _crc32_of(block, crc)
        return f"{crc:08x}"

    count = shard.parts(size)
    if count == 1:
        return [part(0)]
    with ThreadPoolExecutor(min(count, _shard_threads()), thread_name_prefix="blockir-read") as pool:
        return list(pool.map(part, range(count)))


def read_shard(
    dirname: str | os.PathLike[str],
    name: str,
    table: TableEntry,
    shard: ShardEntry,
    distinct: bool = True,
) -> dict[str, np.ndarray]:
    """A shard of the table ``name`` (its manifest entry ``table``, the shard's ``shard``): its arrays by name
    (``ids``, the rows of the table and of each state in ``table.states``, :data:`SHARD_EXTRAS`). Checked
    as :func:`check_shard` does, then read once, straight into the arrays returned, its parts side by side on
    threads, each checksummed as it is read (a checksum that differs from the manifest's is an error naming the
    part, and nothing read is returned), every id in ``0..height-1`` and (unless ``distinct`` is False: the caller
    checks it, :func:`check_distinct`) none twice."""
    layout = _shard_layout(dirname, name, table, shard)
    path = _inside(dirname, shard.file, "a table shard")
    where = str(path)
    flat = {a: np.empty(math.prod(shape), dtype) for a, (_, shape, _, dtype) in layout.data.items()}
    heads = [bytearray(len(raw)) for _, raw in layout.headers]
    segments = sorted(
        [(offset, memoryview(head)) for (offset, _), head in zip(layout.headers, heads, strict=True)]
        + [(layout.data[a][0], array.view(np.uint8).data) for a, array in flat.items()],
        key=lambda segment: segment[0],
    )
    with os_errors(path, "read"), open_regular(path) as f:
        if os.fstat(f.fileno()).st_size != layout.size:
            raise BlockirError(f"{where}: changed while it was read (its size is no longer {layout.size} bytes)")
        checksums = _read_parts(f.fileno(), segments, shard, layout.size, where)
    wrong = [k for k, (got, want) in enumerate(zip(checksums, shard.crc32, strict=True)) if got != want]
    if wrong:
        step = shard.part_bytes or layout.size
        first, last = wrong[0] * step, min(layout.size, (wrong[0] + 1) * step)
        raise BlockirError(
            f"{where}: checksum mismatch in bytes {first}..{last - 1} (part {wrong[0] + 1} of {len(checksums)}"
            f"{f', and {len(wrong) - 1} more' if len(wrong) > 1 else ''}: the shard changed or was cut short since "
            f"it was saved)"
        )
    if any(bytes(head) != raw for head, (_, raw) in zip(heads, layout.headers, strict=True)):
        raise BlockirError(f"{where}: changed while it was read (an array's header is not the one checked)")
    arrays = {}
    for array, (_, shape, fortran, _) in layout.data.items():
        arrays[array] = flat[array].reshape(shape[::-1]).T if fortran else flat[array].reshape(shape)
    for array in ("ids", "pending_ids", "removed_ids"):
        ids = arrays[array]
        if ids.size and not 0 <= ids.min() <= ids.max() < table.height:
            bad = ids.min() if ids.min() < 0 else ids.max()
            raise BlockirError(
                f"{Path(dirname) / MANIFEST_FILE}: table {name!r} has height {table.height}, but its shard "
                f"{shard.file} holds id {bad} ({array!r})"
            )
    if distinct:
        check_distinct(dirname, shard, arrays["ids"])
    return arrays


def check_distinct(dirname: str | os.PathLike[str], shard: ShardEntry, ids: np.ndarray) -> None:
    """An error naming the shard ``shard`` (its manifest entry) when its ``ids`` hold an id twice."""
    ids = np.sort(ids)
    twice = ids[1:][ids[1:] == ids[:-1]]
    if twice.size:
        raise BlockirError(f"{_inside(dirname, shard.file, 'a table shard')}: holds the row of id {twice[0]} twice")


def _remove_stale(base: Path, manifest: _Manifest, files: list[Path]) -> None:
    """Remove ``files`` (and directories they leave empty), every generation directory ``manifest`` does
    not name and the manifest's stale temporary files: the previous save and what interrupted saves left.
    A failure leaves them to the next save."""
    keep = {base / file for file in manifest.files()}
    for path in files + stale_temporaries(base / MANIFEST_FILE):
        if path in keep:
            continue
        with contextlib.suppress(OSError):
            path.unlink(missing_ok=True)
            for parent in path.parents:
                if parent == base or not parent.is_relative_to(base):
                    break
                parent.rmdir()
    used = {PurePosixPath(file).parts[0] for file in manifest.files()}
    for directory in _generations(base).values():
        if directory.name not in used and directory.is_dir() and not directory.is_symlink():
            shutil.rmtree(directory, ignore_errors=True)


def _load_file(dirname: str | os.PathLike[str], manifest: _Manifest | None, name: str) -> Any:
    entry = manifest.vars.get(name) if manifest is not None else None
    if entry is not None:
        path = _inside(dirname, entry["file"], f"the file of variable {name!r}")
        return _load_npy(path, str(path)) if entry["kind"] == "dense" else _load_from_bundle(path, name)
    npy, npz = _files(dirname, name)
    if npy.exists():  # a FIFO there is refused by name, not passed over
        return _load_npy(npy, str(npy))
    if npz.exists():
        return _load_from_bundle(npz, name)
    raise BlockirError(
        f"no saved value for variable {name!r} in {str(dirname)!r} (looked for {npy.name}, {npz.name}"
        f"{', ' + MANIFEST_FILE if manifest is None else ''})"
    )


# -- save / load variables --------------------------------------------------------------------


def _default_program(program: Program | None) -> Program:
    if program is not None:
        return program
    return default_main_program()


def _check_executor(executor: Executor) -> Executor:
    if not isinstance(executor, Executor):
        raise BlockirError(f"expected an Executor, got {type(executor).__name__}")
    return executor


def _select(
    program: Program, vars: Iterable[Variable | str] | None, predicate: Callable[[Variable], bool] | None
) -> list[Variable]:
    block = program.global_block()
    if vars is not None:
        chosen = []
        for v in vars:
            name = v if isinstance(v, str) else getattr(v, "name", None)
            if not isinstance(name, str) or not block.has_var(name):
                raise BlockirError(f"variable {name if name is not None else v!r} is not in the program's global block")
            chosen.append(block.var(name))
        return chosen
    return [v for v in block.vars.values() if predicate is None or predicate(v)]


def _scope_values(chosen: list[Variable], scope: Scope | None) -> dict[str, Any]:
    """The values of ``chosen`` in ``scope`` (default: the global scope); an error naming one without a value."""
    scope = global_scope() if scope is None else scope
    values = {}
    for var in chosen:
        holder = scope.find_var(var.name)
        if holder is None or holder.value is None:
            raise BlockirError(
                f"cannot save variable {var.name!r}: it has no value in the scope (run the startup program first)"
            )
        values[var.name] = holder.value
    return values


def save_vars(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    vars: Iterable[Variable | str] | None = None,
    predicate: Callable[[Variable], bool] | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Save variables of ``main_program`` from ``scope`` (default: the global scope) under ``dirname``.

    The variables are ``vars`` if given, else those of the global block that
    ``predicate`` accepts (all when None). Each goes to its own file, named by
    the directory's manifest, or all to the bundle ``dirname/filename``; either
    way the save is atomic as a whole (see the module's documentation).
    ``executor`` is the one whose place holds the values. Returns the names
    saved.
    """
    _check_executor(executor)
    values = _scope_values(_select(_default_program(main_program), vars, predicate), scope)
    bundle = _inside(dirname, filename, "filename") if filename is not None else None
    if bundle is None:
        _save_files(dirname, values)
    else:
        with atomic_file(bundle) as f:
            _write_bundle(f, values)
    return list(values)


def save_params(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Save the parameters (``is_parameter`` variables) of ``main_program``; see :func:`save_vars`."""
    return save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename, scope=scope)


def save_persistables(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Save every persistable variable (parameters, optimizer state, ...); see :func:`save_vars`."""
    return save_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename, scope=scope)


def _check_loaded(var: Variable, value: Any, where: str) -> None:
    """The loaded value must have the variable's dtype and shape (-1 matches any size; rows of selected rows)."""
    if isinstance(value, SelectedRows):
        array, declared = value.values, None if var.shape is None else (-1, *var.shape[1:])
    else:
        array, declared = (value.data if isinstance(value, LoDTensor) else value), var.shape
    fits_dtype = var.dtype is None or array.dtype == np.dtype(var.dtype)
    fits_shape = declared is None or shape_matches(declared, array.shape)
    if not (fits_dtype and fits_shape):
        raise BlockirError(
            f"{where}: variable {var.name!r} is saved as {describe_value(value)}, but the program "
            f"declares {var.dtype}{list(var.shape or ())}"
        )


def load_vars(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    vars: Iterable[Variable | str] | None = None,
    predicate: Callable[[Variable], bool] | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Load variables saved by :func:`save_vars` into ``scope`` (default: the global scope).

    The variables are chosen as in :func:`save_vars`; each loaded value must
    have the dtype and shape (-1: any size) its variable declares. Values are
    put on ``executor``'s place. Returns the names loaded.
    """
    xp = _check_executor(executor).place.xp
    scope = global_scope() if scope is None else scope
    chosen = _select(_default_program(main_program), vars, predicate)
    bundle = _Bundle(_inside(dirname, filename, "filename")) if filename is not None else None
    manifest = _read_manifest(Path(dirname)) if bundle is None else None
    try:
        loaded = {}
        for var in chosen:
            if bundle is not None:
                value, where = bundle.load(var.name), bundle.where
            else:
                value, where = _load_file(dirname, manifest, var.name), str(dirname)
            _check_loaded(var, value, where)
            loaded[var.name] = map_arrays(value, xp.asarray)
    finally:
        if bundle is not None:
            bundle.close()
    for name, value in loaded.items():  # all or nothing: the scope changes only once every file has been read
        scope.set(name, value)
    return list(loaded)


def load_params(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Load the parameters of ``main_program``; see :func:`load_vars`."""
    return load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename, scope=scope)


def load_persistables(
    executor: Executor,
    dirname: str | os.PathLike[str],
    main_program: Program | None = None,
    filename: str | None = None,
    scope: Scope | None = None,
) -> list[str]:
    """Load every persistable variable of ``main_program``; see :func:`load_vars`."""
    return load_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename, scope=scope)


# -- inference models ------------------------------------------------------------------------


def _names(items: str | Variable | Sequence[str | Variable], what: str) -> list[str]:
    items = [items] if isinstance(items, (str, Variable)) else list(items)
    names = [i if isinstance(i, str) else getattr(i, "name", None) for i in items]
    if any(not isinstance(n, str) for n in names):
        raise BlockirError(f"{what} must be variable names or variables, got {items!r}")
    return names  # type: ignore[return-value]


def _params_location(dirname: str | os.PathLike[str], params_filename: str | None) -> tuple[Path, str | None]:
    """Where the parameters go: (directory, bundle file name or None for one file each)."""
    if params_filename is None:
        return _inside(dirname, PARAMS_DIR, "params directory"), None
    return Path(dirname), params_filename


def _check_computable(program: Program, feeds: list[str]) -> None:
    """Every value the pruned program reads must be fed, computed or persistable (or be a tensor array, which
    starts empty)."""
    block = program.global_block()
    defined = set(feeds)
    for op in block.ops:
        if is_framing(op):
            continue
        for name in op.input_names():
            var = block.find_var_recursive(name)
            if name not in defined and not var.persistable and var.kind is not VarKind.LOD_TENSOR_ARRAY:
                raise BlockirError(
                    f"the targets need {name!r}, which is neither fed ({', '.join(feeds) or 'no feeds'}) "
                    f"nor computed from the feeds and parameters; read by: {op}"
                )
        defined.update(op.output_names())


def _program_of(targets: Variable | str | Sequence[Variable | str]) -> Program | None:
    """The program the variables among ``targets`` belong to; None when there are none."""
    items = targets if isinstance(targets, Sequence) and not isinstance(targets, str) else [targets]
    programs = {id(v.block.program): v.block.program for v in items if isinstance(v, Variable) and v.block}
    if len(programs) > 1:
        raise BlockirError("target_vars belong to different programs; say which to save with main_program")
    return next(iter(programs.values()), None)


def save_inference_model(
    dirname: str | os.PathLike[str],
    feeded_var_names: str | Sequence[str],
    target_vars: Variable | str | Sequence[Variable | str],
    executor: Executor,
    main_program: Program | None = None,
    model_filename: str | None = None,
    params_filename: str | None = None,
    scope: Scope | None = None,
    *,
    instruments: Sequence[Instrument] = (),
    format: str = "blockir",
) -> list[str]:
    """Save the part of ``main_program`` computing ``target_vars`` from ``feeded_var_names``, with its parameters.

    The program is transformed by the named pipeline
    ``inference-pipeline{feeds=FEEDS targets=TARGETS}``
    (:mod:`blockir.passes.pipelines`), run by the pass manager on a clone in
    its cheap mode: turned into an inference program (backward and optimizer
    ops dropped, ``is_test`` set), pruned to what the targets need given the
    feeds, and framed by ``feed`` ops (reading the ``feed`` list, col i = the
    i-th feed) and ``fetch`` ops (writing the ``fetch`` list), the ones it had
    replaced. ``instruments`` (:class:`blockir.passes.Instrument`) see that run:
    ``after_pipeline(report, program)`` receives its
    :class:`~blockir.passes.PassReport`. The result is written to
    ``dirname/model_filename`` (default ``program.pb``), after the persistable
    variables it reads, which go to ``dirname/params/`` one file each (with a
    manifest: see :func:`save_vars`), or to the bundle
    ``dirname/params_filename``. Returns the target names.

    ``format="paddle"`` writes Paddle 2+'s legacy inference format instead:
    ``dirname`` is a path prefix, the program goes to ``PREFIX.pdmodel`` and
    the persistable variables to ``PREFIX.pdiparams`` (:mod:`blockir.io.paddle`;
    no ``model_filename`` or ``params_filename``). ``format="fluid"``
    writes Fluid 1.x's: ``dirname/__model__`` (or ``model_filename``) and one
    file per variable in ``dirname`` (or all in ``dirname/params_filename``).
    Paddle loads both. ``format="onnx"`` writes ``PREFIX.onnx`` (:mod:`blockir.io.onnx_export`; the
    parameters inside it as initializers), checked by ``onnx.checker``.

    Without ``main_program``, the program is the one ``target_vars`` belong to
    when they are variables (so a program built in ``program_guard(main,
    startup)`` needs no ``main_program=main``), else the default main program.
    """
    _check_executor(executor)
    if format not in MODEL_FORMATS:
        raise BlockirError(f"save_inference_model: format must be one of {', '.join(MODEL_FORMATS)}, got {format!r}")
    if format == "paddle" and (model_filename is not None or params_filename is not None):
        raise BlockirError(
            "save_inference_model: format='paddle' writes PREFIX.pdmodel and PREFIX.pdiparams (dirname is the "
            "prefix); model_filename and params_filename are for the blockir and fluid formats"
        )
    if format == "onnx" and (model_filename is not None or params_filename is not None):
        raise BlockirError(
            "save_inference_model: format='onnx' writes PREFIX.onnx, parameters inside (dirname is the prefix); "
            "model_filename and params_filename are for the blockir and fluid formats"
        )
    feeds, targets = _names(feeded_var_names, "feeded_var_names"), _names(target_vars, "target_vars")
    if not targets:
        raise BlockirError("save_inference_model needs at least one target variable")
    if main_program is None:
        main_program = _program_of(target_vars) or _default_program(None)
    block = main_program.global_block()
    for name in feeds:
        if not block.has_var(name):
            raise BlockirError(f"feed {name!r} is not a variable of the program's global block")
    for name in targets:
        if not block.has_var(name):
            raise BlockirError(f"target {name!r} is not a variable of the program's global block")
    pipeline = InferencePipeline(feeds=tuple(feeds), targets=tuple(targets))
    program, _ = run_pipeline(main_program, [pipeline], verify=False, instruments=instruments, snapshots=False)
    _check_computable(program, feeds)
    if format == "blockir":
        program_path = _inside(dirname, model_filename or PROGRAM_FILE, "model_filename")
        params_dir, params_file = _params_location(dirname, params_filename)
        save_vars(executor, params_dir, program, predicate=is_persistable, filename=params_file, scope=scope)
        program.save(str(program_path))
        return targets
    paddle.check_exportable(program, f"save_inference_model(format={format!r})")
    stored = _scope_values(_select(program, None, is_persistable), scope)
    values = {name: map_arrays(value, functools.partial(_host, name=name)) for name, value in stored.items()}
    if format == "onnx":
        from blockir.io.onnx_export import write_model

        write_model(f"{os.fspath(dirname)}{onnx.ONNX_SUFFIX}", program, values)
        return targets
    paddle.check_paddle_attrs(program, f"save_inference_model(format={format!r})")
    if format == "paddle":
        program_path = Path(f"{os.fspath(dirname)}{paddle.PDMODEL}")
        paddle.write_combined(f"{os.fspath(dirname)}{paddle.PDIPARAMS}", values)
    else:
        program_path = _inside(dirname, model_filename or FLUID_MODEL_FILE, "model_filename")
        if params_filename is not None:
            paddle.write_combined(_inside(dirname, params_filename, "params_filename"), values)
        for name, value in values.items() if params_filename is None else ():
            paddle.write_tensor_file(_inside(dirname, name, "variable name"), value, name)
    program.save(str(program_path))
    return targets


def _framing(block: Any, op_type: str, slot: str, path: Path) -> list[str]:
    """The variables the ``feed`` (slot ``Out``) or ``fetch`` (slot ``X``) ops name, in the order of their ``col``."""
    found = []
    for op in block.ops:
        if op.type == op_type:
            names, col = op.output(slot) + op.input(slot), op.attrs.get("col", 0)
            if len(names) != 1 or not isinstance(col, int):
                raise BlockirError(f"{path}: a {op_type} op without one {slot} variable and an integer col: {op}")
            found.append((col, names[0]))
    return [name for _, name in sorted(found)]


def load_inference_model(
    dirname: str | os.PathLike[str],
    executor: Executor,
    model_filename: str | None = None,
    params_filename: str | None = None,
    scope: Scope | None = None,
) -> tuple[Program, list[str], list[Variable]]:
    """Load a model saved by :func:`save_inference_model` (the same file name arguments), or by Paddle.

    Loads its parameters into ``scope`` (default: the global scope) and returns
    ``(program, feed names, fetch variables)``, feeds and fetches in the order
    they were saved; ``executor.run(program, feed=...)`` then fetches the
    targets. Which form ``dirname`` is (:func:`model_format`): blockir's
    directory (``program.pb``, ``params/``), Paddle 2+'s ``PREFIX.pdmodel`` and
    ``PREFIX.pdiparams`` (``dirname`` the prefix, or the ``.pdmodel`` itself),
    or Fluid 1.x's directory (``__model__`` and one file per variable, or
    ``params_filename``), or an ONNX model (``PREFIX.onnx``, named by the
    prefix or itself: :func:`blockir.io.onnx.read_model`; the feed and fetch
    names are blockir's names of its inputs and outputs, the same unless the
    file's names hold characters blockir's names do not). Nothing is loaded into
    the scope unless every value was read and checked.
    """
    xp = _check_executor(executor).place.xp
    form = model_format(dirname, model_filename, params_filename)
    if form == "onnx":
        imported = onnx.read_model(f"{_prefix(dirname, onnx.ONNX_SUFFIX)}{onnx.ONNX_SUFFIX}")
        target = global_scope() if scope is None else scope
        for name, value in imported.params.items():
            target.set(name, xp.asarray(value))
        block = imported.program.global_block()
        return imported.program, list(imported.feeds), [block.var(n) for n in imported.fetches]
    if form == "blockir":
        path = _inside(dirname, model_filename or PROGRAM_FILE, "model_filename")
        program = load_program(path)
    elif form == "paddle":
        path = _prefix(dirname, paddle.PDMODEL).with_suffix(paddle.PDMODEL)
        program = paddle.read_program(path)
    else:
        path = _inside(dirname, model_filename or FLUID_MODEL_FILE, "model_filename")
        program = paddle.read_program(path)
    block = program.global_block()
    feeds, fetches = _framing(block, FEED.type, "Out", path), _framing(block, FETCH.type, "X", path)
    if not fetches:
        raise BlockirError(f"{dirname}: not an inference model (its program has no fetch ops)")
    if form == "blockir":
        params_dir, params_file = _params_location(dirname, params_filename)
        load_vars(executor, params_dir, program, predicate=is_persistable, filename=params_file, scope=scope)
    else:
        combined = None if params_filename is None else _inside(path.parent, params_filename, "params_filename")
        values = read_paddle_params(program, path, combined)
        target = global_scope() if scope is None else scope
        for name, value in values.items():
            target.set(name, map_arrays(value, xp.asarray))
    return program, feeds, [block.var(n) for n in fetches]


def _prefix(path: str | os.PathLike[str], suffix: str) -> Path:
    """The path prefix of a model named by its prefix or by its file (``.pdmodel``, ``.onnx``)."""
    p = Path(path)
    return p.with_suffix("") if p.suffix == suffix else p


def model_format(
    dirname: str | os.PathLike[str], model_filename: str | None = None, params_filename: str | None = None
) -> str:
    """Which form of inference model ``dirname`` names: ``"paddle"`` (``PREFIX.pdmodel``, named by the prefix
    or itself), ``"onnx"`` (``PREFIX.onnx``, the same), ``"blockir"`` (a directory with ``program.pb`` and
    ``params/`` or a bundle) or ``"fluid"`` (a directory with ``__model__`` and Paddle's parameter files); an
    error when it names none, or both a directory and a ``.pdmodel``."""
    p = Path(dirname)
    if p.suffix == paddle.PDMODEL:
        return "paddle"
    if p.suffix == onnx.ONNX_SUFFIX or (not p.is_dir() and Path(f"{p}{onnx.ONNX_SUFFIX}").is_file()):
        return "onnx"
    pdmodel = p.with_suffix(paddle.PDMODEL)
    if p.is_dir() and pdmodel.is_file():
        raise BlockirError(
            f"{dirname}: both a blockir model directory {str(p)!r} and a Paddle model {str(pdmodel)!r} are there; "
            f"name the one to load ({str(p)}/ or {pdmodel.name})"
        )
    if pdmodel.is_file():
        return "paddle"
    if not p.is_dir():
        raise BlockirError(f"{dirname}: no model there (neither a directory nor {pdmodel.name})")
    if model_filename is None:
        return "fluid" if not (p / PROGRAM_FILE).exists() and (p / FLUID_MODEL_FILE).exists() else "blockir"
    if params_filename is not None:  # blockir's bundle is a zip; Paddle's combined file a tensor stream
        with os_errors(p / params_filename, "read"), open_regular(_inside(p, params_filename, "params_filename")) as f:
            return "blockir" if f.read(4) == b"PK\x03\x04" else "fluid"
    return "blockir" if (p / PARAMS_DIR).is_dir() else "fluid"


def read_paddle_params(
    program: Program, model_path: str | os.PathLike[str], params: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """The persistable variables of ``program``, read from a Paddle model's parameters: ``params`` (a combined
    file like ``.pdiparams``, or a directory of one file per variable), by default where Paddle saves them
    beside ``model_path``: ``PREFIX.pdiparams`` for ``PREFIX.pdmodel``, the files beside ``__model__``."""
    chosen = _select(program, None, is_persistable)
    model = Path(model_path)
    if params is not None:
        where = Path(params)
    else:
        where = model.with_suffix(paddle.PDIPARAMS) if model.suffix == paddle.PDMODEL else model.parent
    if not chosen:
        return {}
    if where.is_dir():
        values = {v.name: paddle.read_tensor_file(_inside(where, v.name, "variable name"), v) for v in chosen}
    else:
        values = paddle.read_combined(where, chosen)
    for var in chosen:
        _check_loaded(var, values[var.name], str(where))
    return values
