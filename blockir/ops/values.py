"""Runtime value types besides dense arrays: LoDTensor, SelectedRows and TensorArray; the count of in-place
writes of an array's memory.

Both are written against any array module: ``data``/``values`` may be numpy or
cupy arrays; LoD offsets and row indices are always host ``list``/numpy int64.

:func:`note_written` and :func:`writes`: a kernel that remembers what it computed from an array (``conv_bn_fold``'s
folded filter) must see that array's values change when the array object stays the same: an optimizer updates
its parameter in place, a value loaded into a variable bound to a fused buffer is copied into it. The executor
notes each persistable an op wrote in place (:meth:`blockir.runtime.plan.Plan.run`'s write-back, and
:meth:`~blockir.runtime.scope.ScopeVariable.copy_in`), counted per memory owner (the array at the end of a
view's ``base`` chain, so that a write into a fused buffer counts for every parameter viewing it). A write into
an array by code outside the executor is not seen: set the variable again (``Scope.set``).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.errors import BlockirError


@dataclass
class LoDTensor:
    """A tensor plus level-of-detail offsets: variable-length sequences packed along axis 0.

    ``lod`` is a list of levels; each level is a non-decreasing offset list
    starting at 0. The last level's final offset equals ``data.shape[0]``; each
    higher level's final offset equals the length of the level below it minus 1.
    ``lod=[[0, 2, 5]]`` holds two sequences: rows 0..1 and rows 2..4.
    """

    data: Any
    lod: list[list[int]]

    def __post_init__(self) -> None:
        rows = int(self.data.shape[0]) if getattr(self.data, "ndim", 0) else 0
        levels = [np.asarray(level) for level in self.lod]  # checked as arrays: readers build long levels
        for i, level in enumerate(levels):
            if level.ndim != 1 or level.dtype.kind not in "iu" and level.size:
                raise BlockirError(f"LoD level {i} must be a list of integer offsets, got {self.lod[i]!r}")
            if not level.size or level[0] != 0 or (level[1:] < level[:-1]).any():
                raise BlockirError(f"LoD level {i} must start at 0 and not decrease: {level.tolist()}")
        self.lod = [level.astype(np.int64, copy=False).tolist() for level in levels]
        for i, offsets in enumerate(self.lod):
            below = len(self.lod[i + 1]) - 1 if i + 1 < len(self.lod) else rows
            if offsets[-1] != below:
                raise BlockirError(f"LoD level {i} ends at {offsets[-1]}, expected {below}: {self.lod}")

    @staticmethod
    def from_lengths(data: Any, lengths: list[list[int]] | list[int]) -> LoDTensor:
        """Build from sequence lengths (``[[2, 3]]`` or ``[2, 3]``) instead of offsets."""
        levels = lengths if lengths and isinstance(lengths[0], (list, tuple)) else [lengths]
        return LoDTensor(data, [[0, *np.cumsum(level, dtype=np.int64).tolist()] for level in levels])

    def lengths(self, level: int = -1) -> list[int]:
        off = self.lod[level]
        return [b - a for a, b in zip(off, off[1:])]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape)

    @property
    def dtype(self) -> Any:
        return self.data.dtype

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.asarray(self.data)
        return a.astype(dtype) if dtype is not None else a


def add_rows(out: Any, rows: Any, values: Any, xp: Any = np) -> None:
    """``out[rows[i]] += values[i]`` for every ``i``, in place; repeated rows accumulate.

    On a C-contiguous ``out`` this scatters over the flattened array, which
    numpy's ``add.at`` does several times faster than row by row.
    """
    rows = xp.asarray(rows)
    if not out.flags.c_contiguous or out.ndim < 2:
        xp.add.at(out, rows, values)
        return
    width = out.size // out.shape[0] if out.shape[0] else 0
    flat = (rows.reshape(-1, 1) * width + xp.arange(width)).reshape(-1)
    xp.add.at(out.reshape(-1), flat, values.reshape(-1))


@dataclass
class SelectedRows:
    """A sparse set of rows of a ``[height, ...]`` tensor: ``dense[rows[i]] += values[i]``.

    ``rows`` may repeat (two lookups of the same id); consumers must accumulate,
    never overwrite. :meth:`merged` sums duplicates.
    """

    rows: Any  # int64 array of row indices
    values: Any  # array of shape [len(rows), ...]
    height: int

    @property
    def shape(self) -> tuple[int, ...]:
        return (self.height, *self.values.shape[1:])

    @property
    def dtype(self) -> Any:
        return self.values.dtype

    def merged(self, xp: Any = np) -> SelectedRows:
        """The same rows with duplicates summed, rows sorted ascending."""
        uniq, inverse = np.unique(np.asarray(self.rows), return_inverse=True)
        out = xp.zeros((len(uniq), *self.values.shape[1:]), dtype=self.values.dtype)
        add_rows(out, inverse, self.values, xp)
        return SelectedRows(uniq, out, self.height)

    def to_dense(self, xp: Any = np) -> Any:
        out = xp.zeros(self.shape, dtype=self.values.dtype)
        add_rows(out, self.rows, self.values, xp)
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        a = np.asarray(self.to_dense())
        return a.astype(dtype) if dtype is not None else a


class TensorArray(list):
    """Paddle's LoDTensorArray (a ``lod_tensor_array`` variable): a list of tensors (dense or LoDTensor), each
    of its own shape, written by position (``write_to_array`` grows it; a position never written holds None).

    Ops write one in place (:attr:`~blockir.ir.schema.OpSchema.updates`), as Paddle's do.
    """

    def __repr__(self) -> str:
        return f"TensorArray({list.__repr__(self)})"


def describe_value(value: Any) -> str:
    """``float32[64, 784]`` for arrays, with the kind for LoD tensors and selected rows."""
    if value is None:
        return "None"
    if isinstance(value, LoDTensor):
        return f"lod_tensor<{value.dtype}>{list(value.shape)} lod_levels={len(value.lod)}"
    if isinstance(value, SelectedRows):
        return f"selected_rows<{value.dtype}>{list(value.shape)} rows={len(value.rows)}"
    if isinstance(value, TensorArray):
        return "tensor_array[" + ", ".join(map(describe_value, value)) + "]"
    if isinstance(value, list):
        return "[" + ", ".join(map(describe_value, value)) + "]"
    dtype, shape = getattr(value, "dtype", None), getattr(value, "shape", None)
    return f"{dtype}{list(shape)}" if shape is not None else type(value).__name__


# id of a memory owner -> its writes in place noted so far; an entry goes when its owner is collected.
_WRITES: dict[int, int] = {}


def _owner(array: Any) -> Any:
    """The array owning ``array``'s memory: the end of its chain of views (numpy's and cupy's ``base``)."""
    while getattr(getattr(array, "base", None), "shape", None) is not None:
        array = array.base
    return array


def note_written(array: Any) -> None:
    """Count a write into ``array``'s memory in place (module docstring)."""
    owner = _owner(array)
    key = id(owner)
    count = _WRITES.get(key)
    if count is None:
        try:
            weakref.finalize(owner, _WRITES.pop, key, None)
        except TypeError:  # no weak references (a LoDTensor): nothing remembers values of it
            return
        count = 0
    _WRITES[key] = count + 1


def writes(array: Any) -> int:
    """The writes in place noted of ``array``'s memory (module docstring)."""
    return _WRITES.get(id(_owner(array)), 0)
