"""Parameter initializers: each appends the op that fills a variable to a (startup) block.

Names and arguments follow Fluid 1.x (``Constant``/``ConstantInitializer``, ...).
Random initializers get a ``seed`` derived from the startup program's
``random_seed`` and the variable name unless one is given.
"""

from __future__ import annotations

import math
from typing import Any

from blockir.dsl import framework
from blockir.dsl.variable import tensor_dtype
from blockir.errors import BlockirError
from blockir.ir.core import Block, Variable
from blockir.ir.dtypes import DTYPE_TO_PROTO, FLOAT_DTYPES

__all__ = [
    "Constant",
    "ConstantInitializer",
    "Initializer",
    "Normal",
    "NormalInitializer",
    "Uniform",
    "UniformInitializer",
    "Xavier",
    "XavierInitializer",
]


class Initializer:
    """Base class: ``init(var, block, device=None)`` appends the op that initialises ``var``.

    ``device`` places the op (a pinned parameter's device); None: the current device guard.
    """

    op_type = ""

    def attrs(self, var: Variable) -> dict[str, Any]:
        """The op's attributes other than ``shape`` and ``dtype``."""
        raise NotImplementedError

    def __call__(self, var: Variable, block: Block, device: str | None = None) -> None:
        shape = var.shape or ()
        if any(d < 0 for d in shape):
            raise BlockirError(f"cannot initialise {var.name!r}: its shape {list(shape)} is not fully known")
        attrs = {"shape": list(shape), "dtype": DTYPE_TO_PROTO[tensor_dtype(var)], **self.attrs(var)}
        framework.append_op(block, self.op_type, outputs={"Out": [var.name]}, attrs=attrs, device=device)

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"{type(self).__name__}({fields})"


class ConstantInitializer(Initializer):
    """Fill with ``value`` (``fill_constant``)."""

    op_type = "fill_constant"

    def __init__(self, value: float = 0.0, force_cpu: bool = False) -> None:
        self.value = float(value)
        self.force_cpu = bool(force_cpu)

    def attrs(self, var: Variable) -> dict[str, Any]:
        return {"value": self.value, "force_cpu": self.force_cpu}


class _RandomInitializer(Initializer):
    def __init__(self, seed: int) -> None:
        if not isinstance(seed, int) or seed < 0:
            raise BlockirError(f"{type(self).__name__}: seed must be a non-negative int, got {seed!r}")
        self.seed = seed

    def seed_attr(self) -> dict[str, int]:
        return {"seed": self.seed} if self.seed else {}  # 0: derived by framework.append_op

    def __call__(self, var: Variable, block: Block, device: str | None = None) -> None:
        if var.dtype not in FLOAT_DTYPES:
            raise BlockirError(f"{type(self).__name__} cannot initialise {var.name!r} of dtype {var.dtype}")
        super().__call__(var, block, device)


class UniformInitializer(_RandomInitializer):
    """Uniform on [low, high) (``uniform_random``)."""

    op_type = "uniform_random"

    def __init__(self, low: float = -1.0, high: float = 1.0, seed: int = 0) -> None:
        if not low <= high:
            raise BlockirError(f"UniformInitializer: low {low} is greater than high {high}")
        super().__init__(seed)
        self.low, self.high = float(low), float(high)

    def attrs(self, var: Variable) -> dict[str, Any]:
        return {"min": self.low, "max": self.high, **self.seed_attr()}


class NormalInitializer(_RandomInitializer):
    """Gaussian with mean ``loc`` and standard deviation ``scale`` (``gaussian_random``)."""

    op_type = "gaussian_random"

    def __init__(self, loc: float = 0.0, scale: float = 1.0, seed: int = 0) -> None:
        if not scale >= 0:
            raise BlockirError(f"NormalInitializer: scale must be non-negative, got {scale}")
        super().__init__(seed)
        self.loc, self.scale = float(loc), float(scale)

    def attrs(self, var: Variable) -> dict[str, Any]:
        return {"mean": self.loc, "std": self.scale, **self.seed_attr()}


class XavierInitializer(_RandomInitializer):
    """Glorot/Xavier: uniform on +-sqrt(6 / (fan_in + fan_out)), or normal with std sqrt(2 / (fan_in + fan_out)).

    Fans come from the shape as in Fluid ([in, out] for a matrix; for more dims
    the receptive field multiplies both) unless given.
    """

    def __init__(
        self, uniform: bool = True, fan_in: float | None = None, fan_out: float | None = None, seed: int = 0
    ) -> None:
        super().__init__(seed)
        self.uniform = bool(uniform)
        self.fan_in, self.fan_out = fan_in, fan_out

    @property
    def op_type(self) -> str:  # type: ignore[override]
        return "uniform_random" if self.uniform else "gaussian_random"

    def attrs(self, var: Variable) -> dict[str, Any]:
        fan_in: float
        fan_out: float
        fan_in, fan_out = compute_fans(var.shape or ())
        fan_in = fan_in if self.fan_in is None else self.fan_in
        fan_out = fan_out if self.fan_out is None else self.fan_out
        if fan_in + fan_out <= 0:
            raise BlockirError(f"XavierInitializer: fan_in + fan_out must be positive for {var.name!r}")
        if self.uniform:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
            return {"min": -limit, "max": limit, **self.seed_attr()}
        return {"mean": 0.0, "std": math.sqrt(2.0 / (fan_in + fan_out)), **self.seed_attr()}


def compute_fans(shape: tuple[int, ...]) -> tuple[int, int]:
    """(fan_in, fan_out) of a parameter shape, Fluid's rule."""
    if not shape:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
Xavier = XavierInitializer
