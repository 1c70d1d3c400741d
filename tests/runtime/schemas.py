"""Small op schemas of the runtime tests (type names start with ``rt_``), registered by the ``rt_ops`` fixture.

They exercise the executor's calling convention independently of the op library.
"""

from __future__ import annotations

import weakref

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import REQUIRED, AttrDef, InferContext, OpRole, OpSchema, Slot
from blockir.ops.values import LoDTensor

# Weak references to every array rt_scale produced, in order (tests clear it).
PRODUCED: list[weakref.ref] = []
# What rt_probe saw: per call, whether each PRODUCED array was still alive.
ALIVE: list[list[bool]] = []
# ctx.wants of every rt_split call.
WANTS: list[tuple[bool, ...]] = []


def _same(slot: str, out: str = "Out"):
    def infer(ctx: InferContext) -> None:
        x = ctx.input(slot)
        ctx.set_output(out, x.shape, x.dtype, x.lod_level)

    return infer


def _scale(ctx, x):
    out = x * ctx.attrs["scale"] + ctx.attrs["bias"]
    PRODUCED.append(weakref.ref(out))
    return out


def _probe(ctx, x):
    ALIVE.append([r() is not None for r in PRODUCED])
    return x + 0


def _split(ctx, x):
    WANTS.append(ctx.wants)
    return x * 2, x * 3


def _sgd(ctx, param, grad, lr):
    param -= lr * grad  # in place, as the optimizer ops do
    return param


def _fail(ctx, x):
    raise ValueError("boom")


def _seq_lengths(ctx, x):
    assert isinstance(x, LoDTensor), "rt_seq_len's X slot has lod=True"
    return np.asarray(x.lengths(), dtype=np.int64)


def _plain_relu(ctx, x):
    assert isinstance(x, np.ndarray), "rt_plain_relu's X slot has lod=False"
    return np.maximum(x, 0)


def _fill(ctx):
    return np.full(ctx.attrs["shape"], ctx.attrs["value"], dtype=np.float32)


SCHEMAS = (
    OpSchema("rt_add", (Slot("X"), Slot("Y")), (Slot("Out"),), kernel=lambda ctx, x, y: x + y, infer=_same("X")),
    OpSchema("rt_matmul", (Slot("X"), Slot("Y")), (Slot("Out"),), kernel=lambda ctx, x, y: x @ y),
    OpSchema(
        "rt_scale",
        (Slot("X"),),
        (Slot("Out"),),
        (AttrDef("scale", AttrType.FLOAT, 1.0), AttrDef("bias", AttrType.FLOAT, 0.0)),
        kernel=_scale,
        infer=_same("X"),
    ),
    OpSchema("rt_probe", (Slot("X"),), (Slot("Out"),), kernel=_probe, infer=_same("X")),
    OpSchema("rt_split", (Slot("X"),), (Slot("A"), Slot("B")), kernel=_split),
    OpSchema("rt_sum", (Slot("X", duplicable=True),), (Slot("Out"),), kernel=lambda ctx, xs: sum(xs)),
    OpSchema(
        "rt_opt_add",
        (Slot("X"), Slot("Y", optional=True)),
        (Slot("Out"),),
        kernel=lambda ctx, x, y: x if y is None else x + y,
    ),
    OpSchema(
        "rt_sgd",
        (Slot("Param"), Slot("Grad"), Slot("LearningRate")),
        (Slot("ParamOut"),),
        kernel=_sgd,
        side_effects=True,
    ),
    OpSchema("rt_fail", (Slot("X"),), (Slot("Out"),), kernel=_fail),
    OpSchema(
        "rt_need_attr",
        (Slot("X"),),
        (Slot("Out"),),
        (AttrDef("factor", AttrType.FLOAT, REQUIRED),),
        kernel=lambda ctx, x: x * ctx.attrs["factor"],
    ),
    OpSchema("rt_seq_len", (Slot("X", lod=True),), (Slot("Out"),), kernel=_seq_lengths),
    OpSchema("rt_plain_relu", (Slot("X"),), (Slot("Out"),), kernel=_plain_relu, share_lod=(("X", "Out"),)),
    OpSchema(
        "rt_fill",
        (),
        (Slot("Out"),),
        (AttrDef("shape", AttrType.LONGS, REQUIRED), AttrDef("value", AttrType.FLOAT, 0.0)),
        kernel=_fill,
    ),
    OpSchema("rt_no_kernel", (Slot("X"),), (Slot("Out"),)),
)

OPTIMIZE = OpRole.OPTIMIZE
