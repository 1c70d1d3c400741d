"""Fused ops of convolutional networks, which the passes of :mod:`blockir.passes.fuse_conv` create.

- ``conv_bn_fold`` (blockir's): a convolution's Filter and bias with an inference ``batch_norm`` after it folded
  in, as Paddle's ``conv_bn_fuse_pass`` folds them at load: per output channel ``m``, with
  ``k = Scale / sqrt(Variance + epsilon)``, ``FilterOut[m] = Filter[m] * k[m]`` and
  ``BiasOut = (ConvBias - Mean) * k + Bias`` (``ConvBias`` 0 when absent). ``MeanOut`` and ``VarianceOut`` pass
  ``Mean`` and ``Variance`` through, as ``batch_norm`` with ``is_test`` does, so that the variables keep a writer.
  Its inputs are parameters that the program never writes, so the op computes the same values at every run: it
  remembers its results for the arrays it was given and computes again when one of them is another array (a
  parameter replaced through ``Scope.set``, a load, a startup run) or was written in place since (a training
  program's optimizer step on the same scope, a load into a fused buffer: the executor counts those writes,
  :func:`blockir.ops.values.note_written`). A change written into a parameter's array by code outside the
  executor is not seen (set the variable again). The parameters themselves are never written: the folded values
  are the plan's.
- ``fused_conv2d_add_act`` (Paddle's op of that name, its slots and attributes): ``Output = act(conv2d(Input,
  Filter) + Bias + ResidualData)``, ``Bias`` of ``[M]`` on the channel axis, ``ResidualData`` (optional) of
  Output's shape, ``activation`` one of ``identity``, ``relu``, ``sigmoid``, ``tanh``. The convolution is
  ``conv2d``'s kernel; the bias, the residual and the activation are applied in its result's buffer: no other
  full-size array. ``split_channels`` (its second output, ``Outputs``) is refused. Inference only (no gradient,
  as in Paddle).
- ``batch_norm_act`` (blockir's; Paddle 3.3.1's legacy program format has no CPU op for it, so it is never
  exported: :mod:`blockir.io.paddle` refuses it): ``Y = act(batch_norm(X))`` with ``act_type`` ``relu``,
  ``sigmoid`` or ``tanh``, the slots and attributes of ``batch_norm`` (its kernel), the activation in Y's
  buffer; ``batch_norm_act_grad`` takes the activation's gradient from Y (relu's in Y@GRAD's buffer when the
  executor offers it), then ``batch_norm_grad``'s kernel, which writes X@GRAD into that gradient's buffer.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.core import Operator
from blockir.ir.schema import AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.common import FLOATS, check_dtype, compatible, fmt, kernel_error, same_dtype
from blockir.ops.conv import CONV2D
from blockir.ops.fused import ACTIVATIONS, _activation_grad, _check_activation
from blockir.ops.norm import BATCH_NORM, BATCH_NORM_GRAD
from blockir.ops.values import writes

__all__ = ["BATCH_NORM_ACT", "BATCH_NORM_ACT_GRAD", "CONV_BN_FOLD", "FUSED_CONV2D_ADD_ACT", "NOT_IN_PADDLE", "SCHEMAS"]


def _kernel(schema: OpSchema) -> Any:
    if schema.kernel is None:
        raise TypeError(f"{schema.type} has no kernel to compose")
    return schema.kernel


_CONV, _BN, _BN_GRAD = _kernel(CONV2D), _kernel(BATCH_NORM), _kernel(BATCH_NORM_GRAD)


def _channel_view(ndim: int, channel_last: bool) -> tuple[int, ...]:
    """The shape a per-channel vector broadcasts in against an NCHW (or NHWC) array of rank ``ndim``."""
    return (-1,) if channel_last else (-1,) + (1,) * (ndim - 2)


# -- conv_bn_fold ----------------------------------------------------------------------------------------

_FOLD_PARAMS = ("Scale", "Bias", "Mean", "Variance")


def _infer_conv_bn_fold(ctx: InferContext) -> None:
    w = check_dtype(ctx, "Filter", FLOATS)
    if len(w.shape) != 4:
        ctx.fail(f"Filter {fmt(w)} must be 4-D [out channels, in channels / groups, kh, kw]")
    channels = w.shape[0]
    scale = check_dtype(ctx, "Scale", FLOATS)
    for slot in (*_FOLD_PARAMS, *(("ConvBias",) if ctx.has_input("ConvBias") else ())):
        var = check_dtype(ctx, slot, FLOATS)
        if slot != "ConvBias":
            same_dtype(ctx, scale, var)
        if len(var.shape) != 1 or not compatible(var.shape[0], channels):
            ctx.fail(f"{slot} {fmt(var)} must have shape [{channels}], one value per output channel of Filter")
    ctx.set_output("FilterOut", w.shape, w.dtype)
    ctx.set_output("BiasOut", (channels,), w.dtype)
    for slot in ("Mean", "Variance"):
        var = ctx.tensor(slot)
        ctx.set_output(f"{slot}Out", var.shape, var.dtype)


# (id of each input, epsilon) -> (a weak reference to each input, their writes in place then, the folded filter
# and bias): the results for those very arrays holding those values. An entry goes when one of its arrays is
# collected.
_FOLDS: dict[tuple[Any, ...], tuple[tuple[weakref.ref[Any], ...], tuple[int, ...], tuple[Any, Any]]] = {}


def _remembered(inputs: Sequence[Any], epsilon: float) -> tuple[Any, Any] | None:
    entry = _FOLDS.get((*map(id, inputs), epsilon))
    if entry is None or any(ref() is not x for ref, x in zip(entry[0], inputs)):
        return None
    if entry[1] != tuple(map(writes, inputs)):  # a parameter updated in place since (an optimizer's step)
        return None
    return entry[2]


def _remember(inputs: Sequence[Any], epsilon: float, folded: tuple[Any, Any]) -> None:
    key = (*map(id, inputs), epsilon)
    try:
        refs = tuple(weakref.ref(x, lambda _: _FOLDS.pop(key, None)) for x in inputs)
    except TypeError:  # an array type without weak references: computed at every run
        return
    _FOLDS[key] = (refs, tuple(map(writes, inputs)), folded)


def _conv_bn_fold(
    ctx: KernelContext, w: Any, conv_bias: Any, scale: Any, bias: Any, mean: Any, variance: Any
) -> tuple[Any, Any, Any, Any]:
    """(FilterOut, BiasOut, MeanOut, VarianceOut): see the module docstring; remembered per input arrays."""
    epsilon = float(ctx.attrs["epsilon"])
    inputs = [x for x in (w, conv_bias, scale, bias, mean, variance) if x is not None]
    folded = _remembered(inputs, epsilon)
    if folded is None:
        xp = ctx.xp
        k = variance + epsilon
        xp.sqrt(k, out=k)
        xp.divide(scale, k, out=k)
        filter_out = (w * k.reshape(-1, 1, 1, 1).astype(w.dtype, copy=False)).astype(w.dtype, copy=False)
        shifted = -mean if conv_bias is None else conv_bias.astype(mean.dtype, copy=False) - mean
        bias_out = (shifted * k + bias).astype(w.dtype, copy=False)
        folded = (filter_out, bias_out)
        _remember(inputs, epsilon, folded)
    return folded[0], folded[1], mean, variance


CONV_BN_FOLD = OpSchema(
    "conv_bn_fold",
    inputs=(
        Slot("Filter", no_grad=True),
        Slot("ConvBias", optional=True, no_grad=True),
        *(Slot(s, no_grad=True) for s in _FOLD_PARAMS),
    ),
    outputs=(Slot("FilterOut"), Slot("BiasOut"), Slot("MeanOut", optional=True), Slot("VarianceOut", optional=True)),
    attrs=(AttrDef("epsilon", AttrType.FLOAT, 1e-5),),
    infer=_infer_conv_bn_fold,
    kernel=_conv_bn_fold,
    doc="A convolution's Filter and bias with an inference batch_norm folded in (Paddle's conv_bn_fuse_pass); "
    "remembered for the parameter arrays it was given.",
)

# -- fused_conv2d_add_act --------------------------------------------------------------------------------

_CONV_ACTIVATIONS = ("identity", *ACTIVATIONS)
_SHARED_CONV_ATTRS = ("strides", "paddings", "padding_algorithm", "dilations", "groups", "data_format")
_FUSED_CONV_ATTRS = (
    *(a for a in CONV2D.attrs if a.name in _SHARED_CONV_ATTRS),
    AttrDef("activation", AttrType.STRING, "relu"),
    AttrDef("split_channels", AttrType.INTS, []),
    AttrDef("exhaustive_search", AttrType.BOOLEAN, False),
    AttrDef("workspace_size_MB", AttrType.INT, 512),
    AttrDef("fuse_alpha", AttrType.FLOAT, 0.0),
)
_CONV_DEFAULTS = {a.name: a.default for a in CONV2D.attrs}


# id of a fused_conv2d_add_act's KernelContext -> the conv2d KernelContext its kernel calls conv2d's kernel with:
# one per step, as the plan makes one per op (an entry goes with its context).
_CONV_CONTEXTS: dict[int, KernelContext] = {}


def _conv_context(ctx: KernelContext) -> KernelContext:
    conv = _CONV_CONTEXTS.get(id(ctx))
    if conv is None:
        attrs = {**_CONV_DEFAULTS, **{name: ctx.attrs[name] for name in _SHARED_CONV_ATTRS}}
        conv = _CONV_CONTEXTS[id(ctx)] = KernelContext(ctx.xp, attrs, (True,), ctx.op_text, ctx.scratch)
        weakref.finalize(ctx, _CONV_CONTEXTS.pop, id(ctx), None)
    return conv


def _infer_fused_conv2d_add_act(ctx: InferContext) -> None:
    """conv2d's inference (of a shadow conv2d op with the shared attributes), then Bias, ResidualData and the
    activation."""
    if ctx.attr("split_channels"):
        ctx.fail(f"split_channels={list(ctx.attr('split_channels'))} (Outputs) is not supported; split Output instead")
    _check_activation(ctx, ctx.attr("activation"), _CONV_ACTIVATIONS)
    shadow = Operator(
        ctx.block,
        CONV2D.type,
        {"Input": ctx.op.inputs["Input"], "Filter": ctx.op.inputs["Filter"]},
        {"Output": ctx.op.outputs.get("Output", ())},
        {name: ctx.attr(name) for name in _SHARED_CONV_ATTRS},
    )
    if CONV2D.infer is not None:
        CONV2D.infer(InferContext(shadow, ctx.block))
    x, w = ctx.tensor("Input"), ctx.tensor("Filter")
    b = check_dtype(ctx, "Bias", FLOATS)
    same_dtype(ctx, x, b)
    if len(b.shape) != 1 or not compatible(b.shape[0], w.shape[0]):
        ctx.fail(f"Bias {fmt(b)} must have shape [{w.shape[0]}], one value per output channel")
    if ctx.has_input("ResidualData"):
        r = check_dtype(ctx, "ResidualData", FLOATS)
        same_dtype(ctx, x, r)
        out = ctx.outputs("Output")
        if (
            out
            and out[0].shape is not None
            and not (len(r.shape) == len(out[0].shape) and all(map(compatible, r.shape, out[0].shape)))
        ):
            ctx.fail(f"ResidualData {fmt(r)} must have Output's shape {list(out[0].shape)}")


def _fused_conv2d_add_act(ctx: KernelContext, x: Any, w: Any, bias: Any, residual: Any) -> tuple[Any, None]:
    """(Output, None): conv2d's kernel, then Bias, ResidualData and the activation in its result's buffer."""
    attrs = ctx.attrs
    out = _CONV(_conv_context(ctx), x, w, None, None)
    channel_last = attrs["data_format"] == "NHWC"
    if bias.shape != (out.shape[-1 if channel_last else 1],):
        raise kernel_error(ctx, f"Bias of shape {list(bias.shape)} does not fit Output of shape {list(out.shape)}")
    out += bias.reshape(_channel_view(out.ndim, channel_last))
    if residual is not None:
        out += residual
    activation = attrs["activation"]
    if activation != "identity":
        out = ACTIVATIONS[activation].forward(ctx, out, reuse=(True,))
    return out, None


FUSED_CONV2D_ADD_ACT = OpSchema(
    "fused_conv2d_add_act",
    inputs=(
        Slot("Input", no_grad=True),
        Slot("Filter", no_grad=True),
        Slot("Bias", no_grad=True),
        Slot("ResidualData", optional=True, no_grad=True),
    ),
    outputs=(Slot("Output"), Slot("Outputs", duplicable=True, optional=True)),
    attrs=_FUSED_CONV_ATTRS,
    infer=_infer_fused_conv2d_add_act,
    kernel=_fused_conv2d_add_act,
    doc="Paddle's fused_conv2d_add_act: act(conv2d(Input, Filter) + Bias + ResidualData), in conv2d's result.",
)

# -- batch_norm_act --------------------------------------------------------------------------------------

_BN_ACT_ATTRS = (*BATCH_NORM.attrs, AttrDef("act_type", AttrType.STRING, "relu"))


def _infer_batch_norm_act(ctx: InferContext) -> None:
    _check_activation(ctx, ctx.attr("act_type"), tuple(ACTIVATIONS))
    if BATCH_NORM.infer is not None:
        BATCH_NORM.infer(ctx)


def _batch_norm_act(
    ctx: KernelContext, x: Any, scale: Any, bias: Any, mean: Any, variance: Any, momentum: Any
) -> tuple[Any, ...]:
    """batch_norm's kernel, then the activation in Y's buffer (a copy of Y first when batch_norm passed X
    through)."""
    y, *rest = _BN(ctx, x, scale, bias, mean, variance, momentum)
    if y is x:
        y = y.copy()
    return (ACTIVATIONS[ctx.attrs["act_type"]].forward(ctx, y, reuse=(True,)), *rest)


def _batch_norm_act_grad(
    ctx: KernelContext,
    x: Any,
    scale: Any,
    bias: Any,
    mean: Any,
    variance: Any,
    saved_mean: Any,
    saved_variance: Any,
    reserve: Any,
    y: Any,
    dy: Any,
    *,
    reuse: Sequence[bool] = (),
) -> tuple[Any, Any, Any]:
    """The activation's gradient from Y: relu's (Y@GRAD times the mask Y > 0) in Y@GRAD's buffer where it may be
    overwritten (``reuse``), else (and sigmoid's, tanh's) a new array; then batch_norm_grad's kernel, which writes
    X@GRAD into that gradient's buffer."""
    d = _activation_grad(ctx, ctx.attrs["act_type"], y, dy, bool(reuse and reuse[-1]))
    offer = (False,) * 8 + (True,)  # batch_norm_grad's inputs: Y@GRAD is the last of nine
    return _BN_GRAD(ctx, x, scale, bias, mean, variance, saved_mean, saved_variance, reserve, d, reuse=offer)


def _infer_batch_norm_act_grad(ctx: InferContext) -> None:
    if BATCH_NORM_GRAD.infer is not None:
        BATCH_NORM_GRAD.infer(ctx)


BATCH_NORM_ACT_GRAD = OpSchema(
    "batch_norm_act_grad",
    inputs=(*BATCH_NORM_GRAD.inputs[:-1], Slot("Y"), BATCH_NORM_GRAD.inputs[-1]),
    outputs=BATCH_NORM_GRAD.outputs,
    attrs=_BN_ACT_ATTRS,
    infer=_infer_batch_norm_act_grad,
    kernel=_batch_norm_act_grad,
    share_lod=BATCH_NORM_GRAD.share_lod,
    doc="Gradient of batch_norm_act: the activation's gradient from Y, then batch_norm_grad.",
)


def _grad_batch_norm_act(g: GradContext) -> list[OpSpec]:
    """batch_norm's gradient maker, its op made batch_norm_act_grad reading Y (for the activation's gradient)."""
    if BATCH_NORM.grad is None:
        raise TypeError("batch_norm has no gradient maker to compose")
    return [
        OpSpec(
            BATCH_NORM_ACT_GRAD.type,
            {**spec.inputs, "Y": g.output("Y")},
            spec.outputs,
            {**spec.attrs, "act_type": g.op.attr("act_type")},
        )
        for spec in BATCH_NORM.grad(g)
    ]


BATCH_NORM_ACT = OpSchema(
    "batch_norm_act",
    inputs=BATCH_NORM.inputs,
    outputs=BATCH_NORM.outputs,
    attrs=_BN_ACT_ATTRS,
    infer=_infer_batch_norm_act,
    grad=_grad_batch_norm_act,
    kernel=_batch_norm_act,
    share_lod=BATCH_NORM.share_lod,
    doc="blockir's batch_norm then its activation (act_type) in Y's buffer; not a Paddle op, never exported.",
)

# blockir's own ops, which no Paddle op stands for: exports refuse them (blockir.io.paddle.check_exportable)
NOT_IN_PADDLE = frozenset({"conv_bn_fold", "batch_norm_act", "batch_norm_act_grad"})

SCHEMAS: tuple[OpSchema, ...] = (
    CONV_BN_FOLD,
    FUSED_CONV2D_ADD_ACT,
    BATCH_NORM_ACT,
    BATCH_NORM_ACT_GRAD,
)
