"""PaddlePaddle's legacy model files: ``.pdmodel`` programs and ``.pdiparams`` / per-variable parameter files.

A ``.pdmodel`` is a binary ``ProgramDesc``, which blockir's wire format reads
as it is (:func:`read_program` adds what a foreign file needs: a PIR ``.json``
program or an empty file named as such, and the ops blockir lacks, all listed
at once). A parameter file holds tensors one after the other, each as Paddle's
``SerializeToStream`` writes a DenseTensor, in little-endian:

- ``u32`` version (0), ``u64`` the number of LoD levels, and per level a
  ``u64`` byte size followed by that many bytes of ``u64`` offsets;
- ``u32`` tensor version (0), ``i32`` the size of a ``TensorDesc`` message
  (``data_type``, ``dims``), the message, then the elements, raw, row-major.

``.pdiparams`` (``save_combine``) holds every persistable variable of the
program, feed and fetch lists excluded, in sorted-name order; Paddle's
one-file-per-variable form (``save_vars`` without a file name) one tensor in a
file named as its variable. Every read is checked against the bytes there
before anything is allocated: a header that promises more than the file holds,
a dtype or shape that is not the program's, bytes left over, are errors
naming the file and the variable.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import numpy as np
from google.protobuf.message import DecodeError

from blockir.errors import BlockirError
from blockir.ir import Program, Variable
from blockir.ir.dtypes import DTYPE_TO_PROTO, PROTO_TO_DTYPE
from blockir.ir.proto_io import atomic_file, load_program, open_regular, os_errors
from blockir.ir.schema import find
from blockir.ops.fused_conv import NOT_IN_PADDLE
from blockir.ops.values import LoDTensor
from blockir.ops.vision import PADDLE_LACKS
from blockir.proto import framework_pb2 as pb

__all__ = [
    "PDIPARAMS",
    "PDMODEL",
    "check_exportable",
    "check_ops",
    "check_paddle_attrs",
    "read_combined",
    "read_program",
    "read_tensor_file",
    "write_combined",
    "write_tensor_file",
]

PDMODEL, PDIPARAMS = ".pdmodel", ".pdiparams"
_U32, _U64, _I32 = struct.Struct("<I"), struct.Struct("<Q"), struct.Struct("<i")
_MAX_DESC_BYTES = 1 << 16  # a TensorDesc is a dtype and a few dims


def read_program(path: str | os.PathLike[str]) -> Program:
    """A Paddle ``.pdmodel``: its program (a PIR ``.json`` program is named as such by :func:`load_program`),
    or an error listing every op type of it that blockir lacks (with how often each occurs)."""
    program = load_program(path)
    check_ops(program, str(path))
    return program


def check_ops(program: Program, where: str) -> None:
    """An error listing, all at once, every op type of ``program`` blockir lacks (with how often each occurs)."""
    missing: dict[str, int] = {}
    for op in program.ops():
        if find(op.type) is None:
            missing[op.type] = missing.get(op.type, 0) + 1
    if missing:
        listed = ", ".join(f"{t} ({n})" for t, n in sorted(missing.items()))
        raise BlockirError(f"{where}: the program has ops blockir lacks: {listed}")


def check_exportable(program: Program, where: str) -> None:
    """An error naming the ops of ``program`` that are blockir's own, with no Paddle op to stand for them
    (``batch_norm_act``, what the ``fuse-bn-act`` pass makes: the executor fuses its own copy of a program, so
    export the program as built, unfused)."""
    found = sorted({op.type for op in program.ops() if op.type in NOT_IN_PADDLE})
    if found:
        raise BlockirError(
            f"{where}: {', '.join(found)} are blockir's own fused ops, which Paddle lacks; export the program "
            "unfused (as built: the executor fuses only its own copy), or run `blockir opt` without the fuse "
            "pipeline (BuildStrategy.fuse_bn_act_ops, fuse_conv_bn)"
        )


def check_paddle_attrs(program: Program, where: str) -> None:
    """An error naming the ops of ``program`` whose attribute values are blockir's extensions of Paddle's ops
    (``PADDLE_LACKS``: ONNX's semantics, such as grid_sampler's bicubic mode), which Paddle's kernels lack."""
    found = sorted(
        {
            f"{op.type} ({attr}={op.attr(attr)!r})"
            for op in program.ops()
            for attr, values in PADDLE_LACKS.get(op.type, {}).items()
            if op.attr(attr) in values
        }
    )
    if found:
        raise BlockirError(f"{where}: {', '.join(found)}: blockir's extensions, which Paddle's ops lack")


# -- writing -------------------------------------------------------------------------------------


def _write_tensor(f: IO[bytes], value: Any, name: str) -> None:
    lod: list[list[int]] = []
    if isinstance(value, LoDTensor):
        value, lod = value.data, value.lod
    array = np.ascontiguousarray(np.asarray(value))
    code = DTYPE_TO_PROTO.get(array.dtype.name)
    if code is None:
        raise BlockirError(f"variable {name!r}: Paddle's format has no {array.dtype} tensors")
    f.write(_U32.pack(0) + _U64.pack(len(lod)))
    for level in lod:
        offsets = np.asarray(level, "<u8").tobytes()
        f.write(_U64.pack(len(offsets)) + offsets)
    desc = pb.VarType.TensorDesc(data_type=code, dims=array.shape).SerializeToString()  # type: ignore[arg-type]
    f.write(_U32.pack(0) + _I32.pack(len(desc)) + desc)
    f.write(array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes())


def write_combined(path: str | os.PathLike[str], values: dict[str, Any]) -> None:
    """Write ``values`` (name -> array or LoDTensor) as a ``.pdiparams`` file, in sorted-name order, atomically."""
    with atomic_file(path) as f:
        for name in sorted(values):
            _write_tensor(f, values[name], name)


def write_tensor_file(path: str | os.PathLike[str], value: Any, name: str) -> None:
    """Write variable ``name``'s ``value`` alone to ``path`` (Paddle's one-file-per-variable form), atomically."""
    with atomic_file(path) as f:
        _write_tensor(f, value, name)


# -- reading -------------------------------------------------------------------------------------


class _Reader:
    """A parameter file read from the start, every size checked against what is left before it is read."""

    def __init__(self, f: IO[bytes], size: int, where: str) -> None:
        self.f, self.left, self.where = f, size, where

    def take(self, n: int, what: str, name: str) -> bytes:
        if n > self.left:
            raise BlockirError(
                f"{self.where}: variable {name!r}: its {what} needs {n} bytes, the file has {self.left} left "
                f"(truncated, or not the program's parameters)"
            )
        self.left -= n
        return self.f.read(n)

    def number(self, form: struct.Struct, what: str, name: str) -> int:
        return int(form.unpack(self.take(form.size, what, name))[0])

    def tensor(self, var: Variable) -> Any:
        name = var.name
        if (version := self.number(_U32, "version", name)) != 0:
            raise BlockirError(f"{self.where}: variable {name!r}: tensor format version {version}, expected 0")
        lod = []
        for _ in range(self.number(_U64, "LoD level count", name)):
            size = self.number(_U64, "LoD level size", name)
            if size % 8:
                raise BlockirError(f"{self.where}: variable {name!r}: a LoD level of {size} bytes (not 8-byte offsets)")
            lod.append(np.frombuffer(self.take(size, "LoD level", name), "<u8").astype(np.int64).tolist())
        if (version := self.number(_U32, "tensor version", name)) != 0:
            raise BlockirError(f"{self.where}: variable {name!r}: tensor version {version}, expected 0")
        size = self.number(_I32, "TensorDesc size", name)
        if not 0 <= size <= _MAX_DESC_BYTES:
            raise BlockirError(f"{self.where}: variable {name!r}: a TensorDesc of {size} bytes")
        desc = pb.VarType.TensorDesc()
        try:
            desc.ParseFromString(self.take(size, "TensorDesc", name))
        except DecodeError:
            raise BlockirError(f"{self.where}: variable {name!r}: its TensorDesc is not one") from None
        dtype_name = PROTO_TO_DTYPE.get(desc.data_type)
        dims = list(desc.dims)
        if dtype_name is None or any(d < 0 for d in dims):
            raise BlockirError(f"{self.where}: variable {name!r}: a tensor of type {desc.data_type} and dims {dims}")
        if var.dtype is not None and dtype_name != var.dtype:
            raise BlockirError(
                f"{self.where}: variable {name!r} is saved as {dtype_name}{dims}, the program declares "
                f"{var.dtype}{list(var.shape or ())}"
            )
        try:
            dtype = np.dtype(dtype_name).newbyteorder("<")
        except TypeError:
            raise BlockirError(f"{self.where}: variable {name!r}: numpy has no {dtype_name}") from None
        data = self.take(math.prod(dims) * dtype.itemsize, f"data ({dtype_name}{dims})", name)
        array = np.frombuffer(data, dtype).astype(dtype.newbyteorder("="), copy=True).reshape(dims)
        if not lod:
            return array
        try:
            return LoDTensor(array, lod)
        except BlockirError as e:
            raise BlockirError(f"{self.where}: variable {name!r}: {e}") from None


def read_combined(path: str | os.PathLike[str], variables: Iterable[Variable]) -> dict[str, Any]:
    """The values of ``variables`` from a ``.pdiparams`` file holding exactly them, in sorted-name order."""
    chosen = sorted(variables, key=lambda v: v.name)
    if not Path(path).exists():  # anything else there (a directory, a FIFO) is named by open_regular
        raise BlockirError(f"{path}: no such parameter file (the program reads {len(chosen)} persistable variables)")
    with os_errors(path, "read"), open_regular(path) as f:
        reader = _Reader(f, os.fstat(f.fileno()).st_size, str(path))
        values = {var.name: reader.tensor(var) for var in chosen}
        if reader.left:
            raise BlockirError(
                f"{path}: {reader.left} bytes left after the {len(chosen)} variables the program saves "
                f"(the parameters of another program?)"
            )
    return values


def read_tensor_file(path: str | os.PathLike[str], var: Variable) -> Any:
    """The value of ``var`` from a file holding it alone (Paddle's one-file-per-variable form)."""
    with os_errors(path, "read"), open_regular(path) as f:
        reader = _Reader(f, os.fstat(f.fileno()).st_size, str(path))
        value = reader.tensor(var)
        if reader.left:
            raise BlockirError(f"{path}: {reader.left} bytes left after variable {var.name!r}")
    return value
