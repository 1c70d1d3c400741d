"""Stopping at the first op that produces NaN or inf: the executor's ``check_nan_inf`` option (Fluid's
``FLAGS_check_nan_inf``).

With the option on, the plan compiler (:func:`blockir.runtime.plan.compile_plan`) wraps the kernel of
each op in :func:`checked`: after the kernel ran, each output variable the op binds is tested on its
device, with the op's array module (numpy or cupy), and the first op with a NaN or inf in one raises
:class:`~blockir.errors.NanInfError` naming the op, each such output with its counts, and its inputs'
statistics. With the option off a plan holds the kernels themselves: the check costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.errors import NanInfError
from blockir.ir.schema import EMPTY_VAR, KernelContext
from blockir.ops.common import to_host
from blockir.ops.values import LoDTensor, SelectedRows, describe_value

__all__ = ["checked", "value_stats"]

Slots = list[tuple[str, bool, list[str]]]  # per schema slot, in order: (slot name, duplicable, variable names)


def _array(value: Any) -> Any:
    """The array of a dense, LoDTensor or SelectedRows value (anything else as it is)."""
    if isinstance(value, LoDTensor):
        return value.data
    if isinstance(value, SelectedRows):
        return value.values
    return value


def _inexact(array: Any) -> bool:
    """Whether ``array`` is an array that can hold NaN or inf (floating point or complex)."""
    dtype = getattr(array, "dtype", None)
    return isinstance(dtype, np.dtype) and dtype.kind in "fc"


def _per_variable(slots: Slots, values: Any, one_slot: bool) -> list[tuple[str, str, Any]]:
    """(slot name, variable name, value) of each bound variable, from a kernel's arguments or result:
    one value per slot (``one_slot``: ``values`` is the only slot's value), a list for a duplicable one."""
    found = []
    for k, (slot, duplicable, names) in enumerate(slots):
        if not names:  # absent, or an output nobody reads (the kernel may give None for it)
            continue
        value = values if one_slot else values[k]
        for name, v in zip(names, value if duplicable else [value]):
            if name != EMPTY_VAR:
                found.append((slot, name, v))
    return found


def checked(kernel: Callable[..., Any], op_text: str, inputs: Slots, outputs: Slots) -> Callable[..., Any]:
    """``kernel``, raising :class:`~blockir.errors.NanInfError` when an output variable it binds holds NaN
    or inf. ``inputs`` and ``outputs`` describe the op's schema slots; the kernel's arguments follow
    ``inputs`` (each slot's value, a list for a duplicable slot, None for an absent one)."""
    one_output = len(outputs) == 1

    def kernel_checked(ctx: KernelContext, *args: Any, **kwargs: Any) -> Any:
        result = kernel(ctx, *args, **kwargs)
        xp = ctx.xp
        counts = {}
        for slot, name, value in _per_variable(outputs, result, one_output):
            array = _array(value)
            if _inexact(array) and not bool(xp.isfinite(array).all()):
                counts[name] = (slot, int(xp.isnan(array).sum()), int(xp.isinf(array).sum()), value)
        if counts:
            raise _error(op_text, counts, _per_variable(inputs, args, False))
        return result

    return kernel_checked


def _error(op_text: str, bad: dict[str, tuple[str, int, int, Any]], inputs: list[tuple[str, str, Any]]) -> NanInfError:
    outputs = "\n".join(
        f"    {slot}={name}: {nan} NaN, {inf} inf among the {_array(value).size} values of {describe_value(value)}"
        for name, (slot, nan, inf, value) in bad.items()
    )
    stats = "\n".join(f"    {slot}={name}: {value_stats(value)}" for slot, name, value in inputs) or "    none"
    return NanInfError(
        f"op produced NaN or inf (check_nan_inf)\n  in op: {op_text}\n  outputs:\n{outputs}\n  inputs:\n{stats}",
        op_text,
        {name: (nan, inf) for name, (_, nan, inf, _) in bad.items()},
    )


def value_stats(value: Any) -> str:
    """``float32[2, 3] min -1 max 4 mean 0.5, 0 NaN, 1 inf``: what a value is, with its array's statistics
    (min, max and mean of its finite elements); LoD tensors and selected rows name their kind first."""
    if isinstance(value, list):
        return "[" + "; ".join(map(value_stats, value)) + "]"
    array = _array(value)
    if not hasattr(array, "dtype") or not hasattr(array, "shape"):
        return describe_value(value)
    host = to_host(array)
    if host.size == 0:
        return f"{describe_value(value)} empty"
    nan = int(np.isnan(host).sum()) if _inexact(host) else 0
    inf = int(np.isinf(host).sum()) if _inexact(host) else 0
    finite = host[np.isfinite(host)] if _inexact(host) else host.ravel()
    if finite.size == 0:
        return f"{describe_value(value)} no finite element, {nan} NaN, {inf} inf"
    mean = finite.mean() if finite.dtype.kind == "c" else finite.mean(dtype=np.float64)
    return (
        f"{describe_value(value)} min {_number(finite.min())} max {_number(finite.max())} "
        f"mean {_number(mean)}, {nan} NaN, {inf} inf"
    )


def _number(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, (float, np.floating)) else str(x)
