"""Conversion between the IR objects and the ProgramDesc protobuf; load and save.

Also the file primitives persistence builds on: :func:`atomic_file` (write
through a temporary file and a rename, honouring the umask),
:func:`open_regular` (open a file to read, refusing a FIFO, a device or a
socket), :func:`read_limited` (read an untrusted file without ever holding
more than a limit) and :func:`os_errors` (an ``OSError`` as one
:class:`BlockirError` naming the file).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO, cast

from google.protobuf.message import DecodeError
from google.protobuf.unknown_fields import UnknownFieldSet

from blockir.errors import BlockirError, ProgramFormatError
from blockir.ir.attrs import LIST_TYPES, AttrType
from blockir.ir.core import TOO_DEEP, Operator, Program, Variable, too_deep
from blockir.ir.dtypes import DTYPE_TO_PROTO, PROTO_TO_DTYPE, VarKind
from blockir.proto import framework_pb2 as pb

# AttrType -> the Attr field holding its value.
ATTR_FIELD = {
    AttrType.INT: "i",
    AttrType.FLOAT: "f",
    AttrType.STRING: "s",
    AttrType.INTS: "ints",
    AttrType.FLOATS: "floats",
    AttrType.STRINGS: "strings",
    AttrType.BOOLEAN: "b",
    AttrType.BOOLEANS: "bools",
    AttrType.BLOCK: "block_idx",
    AttrType.LONG: "l",
    AttrType.BLOCKS: "blocks_idx",
    AttrType.LONGS: "longs",
    AttrType.FLOAT64S: "float64s",
    AttrType.VAR: "var_name",
    AttrType.VARS: "vars_name",
    AttrType.FLOAT64: "float64",
    AttrType.SCALAR: "scalar",
    AttrType.SCALARS: "scalars",
}


def _scalar_to_proto(value: bool | int | float | complex, d: pb.Scalar) -> None:
    if isinstance(value, bool):
        d.type, d.b = pb.Scalar.BOOLEAN, value
    elif isinstance(value, int):
        d.type, d.i = pb.Scalar.LONG, value
    elif isinstance(value, float):
        d.type, d.r = pb.Scalar.FLOAT64, value
    else:
        d.type = pb.Scalar.COMPLEX128
        d.c.r, d.c.i = value.real, value.imag


def _scalar_from_proto(d: pb.Scalar) -> bool | int | float | complex:
    if d.type == pb.Scalar.BOOLEAN:
        return d.b
    if d.type == pb.Scalar.LONG:
        return d.i
    if d.type == pb.Scalar.FLOAT64:
        return d.r
    return complex(d.c.r, d.c.i)


# -- objects -> proto ----------------------------------------------------------


def _tensor_desc(desc: Any, var: Variable) -> None:
    desc.data_type = DTYPE_TO_PROTO[var.dtype or "float32"]
    desc.dims.extend(var.shape or ())


def var_to_proto(var: Variable) -> pb.VarDesc:
    d = pb.VarDesc(name=var.name)
    d.type.type = cast("pb.VarType.Type", int(var.kind))
    if var.kind is VarKind.LOD_TENSOR:
        _tensor_desc(d.type.lod_tensor.tensor, var)
        d.type.lod_tensor.lod_level = var.lod_level
    elif var.kind is VarKind.LOD_TENSOR_ARRAY:
        _tensor_desc(d.type.tensor_array.tensor, var)
        d.type.tensor_array.lod_level = var.lod_level
    elif var.kind is VarKind.SELECTED_ROWS:
        _tensor_desc(d.type.selected_rows, var)
    elif var.kind in (VarKind.CHANNEL, VarKind.CHANNEL_LIST):
        d.type.channel.data_type = cast("pb.VarType.Type", DTYPE_TO_PROTO[var.dtype or "float32"])
        d.type.channel.capacity = var.capacity
    for flag in ("persistable", "need_check_feed", "is_parameter", "stop_gradient"):
        if getattr(var, flag):
            setattr(d, flag, True)
    if var.device:
        d.device = var.device
    return d


def set_attr_value(a: pb.OpDesc.Attr, value: Any, t: AttrType) -> None:
    """Put ``value`` (in memory form, of type ``t``) into the field of ``a`` that type ``t`` uses."""
    field = ATTR_FIELD[t]
    if t is AttrType.SCALAR:
        _scalar_to_proto(value, a.scalar)
    elif t is AttrType.SCALARS:
        for v in value:
            _scalar_to_proto(v, a.scalars.add())
    elif t in LIST_TYPES:
        getattr(a, field).extend(value)
    else:
        setattr(a, field, value)


def op_to_proto(op: Operator) -> pb.OpDesc:
    d = pb.OpDesc(type=op.type)
    for slot, names in op.inputs.items():
        d.inputs.add(parameter=slot, arguments=names)
    for slot, names in op.outputs.items():
        d.outputs.add(parameter=slot, arguments=names)
    for name, value in op.attrs.items():
        t = op.attr_types[name]
        set_attr_value(d.attrs.add(name=name, type=int(t)), value, t)
    if op.is_target:
        d.is_target = True
    return d


def program_to_proto(program: Program) -> pb.ProgramDesc:
    d = pb.ProgramDesc()
    d.version.version = program.version
    for op_type, version in program.op_versions.items():
        d.op_version_map.pair.add(op_name=op_type).op_version.version = version
    if program.random_seed:
        d.random_seed = program.random_seed
    if program.device:
        d.device = program.device
    for block in program.blocks:
        b = d.blocks.add(idx=block.idx, parent_idx=block.parent_idx)
        if block.forward_block_idx != -1:
            b.forward_block_idx = block.forward_block_idx
        if block.device:
            b.device = block.device
        b.vars.extend(var_to_proto(v) for v in block.vars.values())
        b.ops.extend(op_to_proto(op) for op in block.ops)
    return d


# -- proto -> objects ----------------------------------------------------------


def _dtype(code: int, where: str) -> str:
    try:
        return PROTO_TO_DTYPE[code]
    except KeyError:
        raise ProgramFormatError(f"{where}: data type {code} is not a tensor element type") from None


def var_from_proto(d: pb.VarDesc, where: str) -> Variable:
    try:
        kind = VarKind(d.type.type)
    except ValueError:
        raise ProgramFormatError(f"{where}: variable {d.name!r} has unknown kind {d.type.type}") from None
    fields: dict[str, Any] = {"dtype": None, "shape": None}
    tensor = None
    if kind is VarKind.LOD_TENSOR:
        tensor, fields["lod_level"] = d.type.lod_tensor.tensor, d.type.lod_tensor.lod_level
    elif kind is VarKind.LOD_TENSOR_ARRAY:
        tensor, fields["lod_level"] = d.type.tensor_array.tensor, d.type.tensor_array.lod_level
    elif kind is VarKind.SELECTED_ROWS:
        tensor = d.type.selected_rows
    elif kind in (VarKind.CHANNEL, VarKind.CHANNEL_LIST):
        fields["dtype"] = _dtype(d.type.channel.data_type, where)
        fields["capacity"] = d.type.channel.capacity
    if tensor is not None:
        fields["dtype"] = _dtype(tensor.data_type, f"{where}: variable {d.name!r}")
        fields["shape"] = tuple(tensor.dims)
    return Variable(
        d.name,
        kind,
        persistable=d.persistable,
        stop_gradient=d.stop_gradient,
        is_parameter=d.is_parameter,
        need_check_feed=d.need_check_feed,
        device=d.device,
        **fields,
    )


def _attr_value(a: Any, where: str) -> tuple[Any, AttrType]:
    try:
        t = AttrType(a.type)
    except ValueError:
        raise ProgramFormatError(f"{where}: attribute {a.name!r} has unsupported type {a.type}") from None
    value = getattr(a, ATTR_FIELD[t])
    if t is AttrType.SCALAR:
        return _scalar_from_proto(value), t
    if t is AttrType.SCALARS:
        return tuple(_scalar_from_proto(v) for v in value), t
    return (tuple(value) if t in LIST_TYPES else value), t


def _check_text(msg: Any, source: str) -> None:
    """Refuse string fields that are not valid UTF-8 (proto2 decoding hands them over as bytes)."""
    for field, value in msg.ListFields():
        values = value if field.is_repeated else [value]
        if field.type == field.TYPE_MESSAGE:
            for m in values:
                _check_text(m, source)
        elif field.type == field.TYPE_STRING and any(isinstance(v, bytes) for v in values):
            raise ProgramFormatError(f"{source}: not a ProgramDesc (field {field.full_name} is not valid UTF-8)")


def program_from_proto(d: pb.ProgramDesc, source: str = "<proto>") -> Program:
    _check_text(d, source)
    program = Program._bare()
    for i, b in enumerate(d.blocks):
        where = f"{source}: block {i}"
        if b.idx != i:
            raise ProgramFormatError(f"{where}: has idx {b.idx}, expected {i}")
        if not -1 <= b.parent_idx < len(d.blocks) or b.parent_idx == i:
            raise ProgramFormatError(f"{where}: invalid parent_idx {b.parent_idx}")
        block = program._load_block(b.parent_idx, b.forward_block_idx, b.device)
        for vd in b.vars:
            if vd.name in block.vars:
                raise ProgramFormatError(f"{where}: variable {vd.name!r} declared twice")
            try:
                block.add_var(var_from_proto(vd, where))
            except ProgramFormatError:
                raise
            except BlockirError as e:
                raise ProgramFormatError(f"{where}: {e}") from None
        for j, od in enumerate(b.ops):
            attrs: dict[str, Any] = {}
            types: dict[str, AttrType] = {}
            for a in od.attrs:
                attrs[a.name], types[a.name] = _attr_value(a, f"{where}, op {j} ({od.type})")
            block._load_op(
                od.type or "?",
                {v.parameter: tuple(v.arguments) for v in od.inputs},
                {v.parameter: tuple(v.arguments) for v in od.outputs},
                attrs,
                types,
                od.is_target,
            )
    if not program.blocks:
        raise ProgramFormatError(f"{source}: program has no blocks")
    deep = too_deep([b.parent_idx for b in program.blocks])
    if deep is not None:
        raise ProgramFormatError(f"{source}: block {deep}: {TOO_DEEP}")
    program.version = d.version.version
    program.op_versions = {p.op_name: p.op_version.version for p in d.op_version_map.pair}
    program.random_seed = d.random_seed
    program.device = d.device
    return program


def program_from_bytes(data: bytes, source: str = "<bytes>") -> Program:
    """Decode a binary ProgramDesc; any malformation is a :class:`ProgramFormatError`."""
    if not data:
        raise ProgramFormatError(f"{source}: file is empty")
    text = data.strip()
    if text[:1] == b"{" and text[-1:] == b"}":
        raise ProgramFormatError(
            f"{source}: a JSON file, not a ProgramDesc: Paddle 3 writes its PIR programs so (model.json, "
            f"by default); blockir reads the legacy ProgramDesc format (.pdmodel: save with FLAGS_enable_pir_api=0)"
        )
    desc = pb.ProgramDesc()
    try:
        desc.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError):
        raise ProgramFormatError(f"{source}: not a ProgramDesc (corrupt or truncated protobuf data)") from None
    if not desc.blocks:
        # Another message type parses as a ProgramDesc made only of unknown fields.
        what = "only fields a ProgramDesc does not have" if UnknownFieldSet(desc) else "no blocks"
        raise ProgramFormatError(f"{source}: not a ProgramDesc (it has {what}; another kind of protobuf message?)")
    if not desc.IsInitialized():
        missing = ", ".join(desc.FindInitializationErrors())  # type: ignore[attr-defined]  # on every Message; not in the stubs
        raise ProgramFormatError(f"{source}: not a ProgramDesc (missing required fields: {missing})")
    return program_from_proto(desc, source)


MAX_PROGRAM_BYTES = 256 << 20
"""The largest program file :func:`load_program` reads (256 MiB; real programs are a few MiB)."""

_CHUNK = 1 << 20  # how much a read of a stream (standard input) asks for at a time


class NotRegularFileError(OSError):
    """What :func:`open_regular` raises for a FIFO, a device or a socket; ``strerror`` says which."""


@contextlib.contextmanager
def os_errors(path: str | os.PathLike[str], doing: str, error: type[BlockirError] = BlockirError) -> Iterator[None]:
    """Turn an ``OSError`` raised in the ``with`` block into ``error("PATH: REASON")``.

    ``doing`` is what failed (``"read"``, ``"write"``). The reason is the
    operating system's (``cannot write (Permission denied)``), or ``is a
    directory`` / ``not a directory`` / (reading) ``no such file`` where those
    say it better.
    """
    try:
        yield
    except OSError as e:
        reasons = {errno.EISDIR: "is a directory", errno.ENOTDIR: "not a directory (a file is in the way)"}
        if doing == "read":
            reasons[errno.ENOENT] = "no such file"
        reason = reasons.get(e.errno or 0, f"cannot {doing} ({e.strerror or e})")
        if isinstance(e, NotRegularFileError):
            reason = str(e.strerror)
        raise error(f"{path}: {reason}") from None


_SPECIAL = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def _is_socket(path: str | os.PathLike[str]) -> bool:
    try:
        return stat.S_ISSOCK(os.stat(path).st_mode)
    except OSError:
        return False


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` opened to read (binary) when it is a regular file.

    Anything else is refused before a byte is read, as an ``OSError`` that
    the callers' handling of ``OSError`` reports like any other: a directory
    is an ``IsADirectoryError``, a FIFO, a device or a socket a
    :class:`NotRegularFileError` (``strerror``: ``"a FIFO, not a regular
    file"``). Reading those could wait forever (a FIFO no one writes, which
    is opened here without waiting for a writer) or never end
    (``/dev/zero``). The loaders of programs, saves, feeds, data feed
    descriptions and data files and traces open their files here; the one
    stream blockir reads is standard input, the command line's PROGRAM ``-``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENXIO and _is_socket(path):  # what opening a socket says
            raise NotRegularFileError(errno.EINVAL, "a socket, not a regular file", os.fspath(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _SPECIAL if test(mode)), "a special file")
            raise NotRegularFileError(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(f: BinaryIO, limit: int, where: str, error: type[BlockirError] = BlockirError) -> bytes:
    """All of ``f``'s bytes; an error naming ``where`` when there are more than ``limit``.

    A regular file is refused by its size before anything is read; a stream
    (standard input) is read in chunks of 1 MiB until the limit is passed, so
    no more than ``limit`` plus a chunk is ever held.
    """
    info = os.fstat(f.fileno())
    if stat.S_ISREG(info.st_mode) and info.st_size > limit:
        raise error(f"{where}: {info.st_size} bytes, more than the {limit} bytes a file of this kind may have")
    data = bytearray()
    while chunk := f.read(_CHUNK):
        data += chunk
        if len(data) > limit:
            raise error(f"{where}: more than the {limit} bytes a file of this kind may have")
    return bytes(data)


def load_program(path: str | os.PathLike[str]) -> Program:
    """Read a binary ProgramDesc from the regular file ``path`` (at most :data:`MAX_PROGRAM_BYTES`)."""
    p = Path(path)
    with os_errors(p, "read", ProgramFormatError), open_regular(p) as f:
        data = read_limited(f, MAX_PROGRAM_BYTES, str(p), ProgramFormatError)
    return program_from_bytes(data, str(p))


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Create directory ``path`` and its parents where missing; ``NotADirectoryError`` when a file is in the way."""
    try:
        Path(path).mkdir(parents=True, exist_ok=True)
    except FileExistsError:  # what mkdir says when ``path`` itself is a file
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)) from None


def sync_dir(path: str | os.PathLike[str]) -> None:
    """Make the entries of directory ``path`` (files created, renamed, removed) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        with contextlib.suppress(OSError):  # some file systems cannot sync a directory; nothing more to do there
            os.fsync(fd)
    finally:
        os.close(fd)


def check_output_file(path: str | os.PathLike[str], option: str = "") -> None:
    """Check, before any work, that a file can be written at ``path``: not a directory, in a directory that
    exists and takes files; a :class:`BlockirError` naming ``path`` (after ``option``, a command line's) if not."""
    target, where = Path(path), f"{option} {path}".lstrip()
    if target.is_dir():
        raise BlockirError(f"{where}: is a directory, not a file")
    if not target.parent.is_dir():
        state = "is not a directory" if target.parent.exists() else "does not exist"
        raise BlockirError(f"{where}: the directory {str(target.parent)!r} {state}")
    check_writable_dir(target.parent, where)


def check_writable_dir(directory: Path, where: str) -> None:
    """Create and remove an unnamed file in ``directory``: the one sure test that it can be written."""
    try:
        tempfile.TemporaryFile(dir=directory).close()
    except OSError as e:
        raise BlockirError(f"{where}: cannot write in {str(directory)!r} ({e.strerror or e})") from None


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike[str], make_parents: bool = True) -> Iterator[BinaryIO]:
    """A binary file to write that replaces ``path`` only when the ``with`` block succeeds.

    It is a temporary file in the same directory (made first, with its parents, when ``make_parents``), created
    with the mode the umask gives (``-rw-r--r--`` under umask 022, as ``open`` would), synced, renamed over
    ``path`` and the rename synced. On any error it is removed and ``path`` left as it was; an ``OSError`` (in
    the block too: a write that fails; a missing directory without ``make_parents``) becomes a
    :class:`BlockirError` naming ``path``.
    """
    p = Path(path)
    tmp = p.parent / f".{p.name}.{secrets.token_hex(6)}.tmp"  # the pattern stale_temporaries knows
    with os_errors(p, "write"):
        if make_parents:
            make_dirs(p.parent)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(fd, "wb") as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, p)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        sync_dir(p.parent)


def stale_temporaries(path: str | os.PathLike[str]) -> list[Path]:
    """The temporary files of :func:`atomic_file` beside ``path``: what writers killed mid-write left,
    to remove where no other writer of ``path`` can be at work."""
    p = Path(path)
    return sorted(p.parent.glob(f".{glob.escape(p.name)}.*.tmp"))


def atomic_write(path: str | os.PathLike[str], data: bytes, make_parents: bool = True) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same directory and a rename (:func:`atomic_file`)."""
    with atomic_file(path, make_parents) as f:
        f.write(data)


def save_program(program: Program, path: str | os.PathLike[str]) -> None:
    atomic_write(path, program.serialize())
