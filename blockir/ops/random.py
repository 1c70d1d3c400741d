"""Random initializers: ``uniform_random`` and ``gaussian_random`` (Fluid 1.x attributes).

Values are drawn on the host with a numpy ``Generator`` and moved to the
kernel's array module, so a seed gives the same values on every device kind.
A non-zero ``seed`` gives the same values at every run; ``seed=0`` draws fresh
randomness each time. The DSL derives each op's seed from the program's
``random_seed`` so results never depend on execution order.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import FLOATS, dtype_attr, np_dtype

_COMMON = (AttrDef("shape", AttrType.LONGS), AttrDef("dtype", AttrType.INT, 5), AttrDef("seed", AttrType.INT, 0))


def _infer_random(ctx: InferContext) -> None:
    dtype, shape = dtype_attr(ctx, "dtype"), list(ctx.attr("shape"))
    if dtype not in FLOATS:
        ctx.fail(f"dtype {ctx.attr('dtype')} ({dtype}) is not a floating-point type code (FP16=4, FP32=5, FP64=6)")
    if any(d < 0 for d in shape):
        ctx.fail(f"shape {shape} must not have negative dimensions")
    if ctx.attr("seed") < 0:
        ctx.fail(f"seed {ctx.attr('seed')} must not be negative (0: fresh randomness at every run)")
    ctx.set_output("Out", shape, dtype)


def _infer_uniform_random(ctx: InferContext) -> None:
    if ctx.attr("min") > ctx.attr("max"):
        ctx.fail(f"min {ctx.attr('min')} is greater than max {ctx.attr('max')}")
    _infer_random(ctx)


def _infer_gaussian_random(ctx: InferContext) -> None:
    if ctx.attr("std") < 0:
        ctx.fail(f"std {ctx.attr('std')} is negative")
    _infer_random(ctx)


def _draw(ctx: KernelContext, sample: Callable[[np.random.Generator, tuple[int, ...], Any], np.ndarray]) -> Any:
    """Sample on the host (float32 or float64, then cast to the target dtype) and move to ``ctx.xp``."""
    attrs = ctx.attrs
    dtype = np_dtype(attrs["dtype"])
    rng = np.random.default_rng(attrs["seed"] or None)
    values = sample(rng, tuple(attrs["shape"]), dtype if dtype in (np.float32, np.float64) else np.float32)
    return ctx.xp.asarray(values.astype(dtype, copy=False))


def _uniform_random(ctx: KernelContext) -> Any:
    """Uniform values in [min, max)."""
    low, high = ctx.attrs["min"], ctx.attrs["max"]

    def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        values = rng.random(shape, dtype=dtype)
        values *= high - low
        values += low
        return values

    return _draw(ctx, sample)


def _gaussian_random(ctx: KernelContext) -> Any:
    """Normal values with mean ``mean`` and standard deviation ``std``."""
    mean, std = ctx.attrs["mean"], ctx.attrs["std"]

    def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        values = rng.standard_normal(shape, dtype=dtype)
        values *= std
        values += mean
        return values

    return _draw(ctx, sample)


UNIFORM_RANDOM = OpSchema(
    "uniform_random",
    outputs=(Slot("Out"),),
    attrs=(*_COMMON, AttrDef("min", AttrType.FLOAT, -1.0), AttrDef("max", AttrType.FLOAT, 1.0)),
    infer=_infer_uniform_random,
    kernel=_uniform_random,
    random=True,
    doc="A tensor of `shape` and `dtype` filled with uniform values in [min, max).",
)

GAUSSIAN_RANDOM = OpSchema(
    "gaussian_random",
    outputs=(Slot("Out"),),
    attrs=(*_COMMON, AttrDef("mean", AttrType.FLOAT, 0.0), AttrDef("std", AttrType.FLOAT, 1.0)),
    infer=_infer_gaussian_random,
    kernel=_gaussian_random,
    random=True,
    doc="A tensor of `shape` and `dtype` filled with normal values N(mean, std^2).",
)

SCHEMAS: tuple[OpSchema, ...] = (UNIFORM_RANDOM, GAUSSIAN_RANDOM)
