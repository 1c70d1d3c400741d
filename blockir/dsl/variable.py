"""The variables the DSL creates: IR variables with Python arithmetic, and parameters.

``a + b``, ``a - b``, ``a * b``, ``a / b`` between DSL variables build
``elementwise_add/sub/mul/div`` (numpy-style broadcasting); with a Python or
numpy scalar they build one ``scale`` op (``2 / a`` and ``a / 0`` fill a
constant and divide). ``-a`` is ``scale(a, -1)``.
"""

from __future__ import annotations

import numbers
from typing import Any

from blockir.errors import BlockirError
from blockir.ir import core

__all__ = ["Parameter", "Variable", "tensor_dtype", "tensor_shape"]


def tensor_shape(var: core.Variable) -> tuple[int, ...]:
    """The shape of ``var``; an error naming it when it is no tensor (a channel, a feed list)."""
    if var.shape is None:
        raise BlockirError(f"{var.name!r} is a {var.kind.text}, not a tensor")
    return var.shape


def tensor_dtype(var: core.Variable) -> str:
    """The dtype of ``var``; an error naming it when it is no tensor (a channel, a feed list)."""
    if var.dtype is None:
        raise BlockirError(f"{var.name!r} is a {var.kind.text}, not a tensor")
    return var.dtype


class Variable(core.Variable):
    """A variable built by the DSL (``bir.data``, layer outputs, parameters)."""

    # numpy scalars and arrays on the left defer to our reflected operators.
    __array_ufunc__ = None

    def __add__(self, other: Any) -> Variable:
        return _arith(self, other, "add", reverse=False)

    def __radd__(self, other: Any) -> Variable:
        return _arith(self, other, "add", reverse=True)

    def __sub__(self, other: Any) -> Variable:
        return _arith(self, other, "sub", reverse=False)

    def __rsub__(self, other: Any) -> Variable:
        return _arith(self, other, "sub", reverse=True)

    def __mul__(self, other: Any) -> Variable:
        return _arith(self, other, "mul", reverse=False)

    def __rmul__(self, other: Any) -> Variable:
        return _arith(self, other, "mul", reverse=True)

    def __truediv__(self, other: Any) -> Variable:
        return _arith(self, other, "div", reverse=False)

    def __rtruediv__(self, other: Any) -> Variable:
        return _arith(self, other, "div", reverse=True)

    def __neg__(self) -> Variable:
        from blockir.dsl import layers

        return layers.scale(self, scale=-1.0)


class Parameter(Variable):
    """A trainable (or frozen) persistable variable of the global block, with its optimizer facts.

    ``trainable`` and ``optimize_attr`` (``{"learning_rate": factor}``) come from
    its ``ParamAttr``; they live in Python, as in Fluid, and are not serialised.
    ``ParamAttr(device=...)`` pins the parameter: it becomes the variable's
    ``device`` (``""`` when not pinned), which is saved with the program.
    """

    def __init__(
        self,
        name: str,
        shape: tuple[int, ...],
        dtype: str,
        *,
        trainable: bool = True,
        learning_rate: float = 1.0,
        device: str | None = None,
    ) -> None:
        super().__init__(
            name,
            dtype=dtype,
            shape=shape,
            persistable=True,
            is_parameter=True,
            stop_gradient=not trainable,
            device=device or "",
        )
        self.trainable = trainable
        self.optimize_attr = {"learning_rate": float(learning_rate)}


# (scale, bias) of ``x op c`` and of ``c op x`` for a scalar c; None: build a tensor op instead.
def _scalar_affine(kind: str, value: float, reverse: bool) -> tuple[float, float] | None:
    if kind == "add":
        return 1.0, value
    if kind == "sub":
        return (-1.0, value) if reverse else (1.0, -value)
    if kind == "mul":
        return value, 0.0
    if not reverse and value != 0:  # x / c
        return 1.0 / value, 0.0
    return None


def _arith(var: Variable, other: Any, kind: str, reverse: bool) -> Variable:
    from blockir.dsl import layers  # layers builds on this module

    binary = getattr(layers, f"elementwise_{kind}")
    if isinstance(other, core.Variable):
        return binary(other, var) if reverse else binary(var, other)
    if not isinstance(other, numbers.Real):
        return NotImplemented
    affine = _scalar_affine(kind, float(other), reverse)
    if affine is not None:
        return layers.scale(var, scale=affine[0], bias=affine[1])
    const = layers.fill_constant([1], var.dtype, float(other))
    return binary(const, var) if reverse else binary(var, const)
