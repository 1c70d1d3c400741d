"""Fused ops the fusion passes create: Fluid's ``fc``, ``fused_elemwise_activation`` and their gradients, and more.

Each is one step for the two or three ops it replaces (:mod:`blockir.passes.fuse`
makes them), computes what they compute, in the same order, and keeps no
intermediate value alive (the product, the sum before the activation):

- ``fc``: ``act(flatten(Input) @ W + Bias)``, for ``mul``, ``elementwise_add``
  and an optional activation; the bias is added and the activation applied in
  the product's own buffer. ``fc_grad`` stands for the activation's gradient,
  ``elementwise_add_grad`` and ``mul_grad``, from ``Out`` (the sum before the
  activation is never needed); the activation's gradient goes into dOut's
  buffer and dInput into Out's when the executor offers them.
- ``fused_elemwise_activation`` with ``functor_list=[ACT, "elementwise_add"]``
  or ``[ACT, "elementwise_mul"]``: ``ACT(X + Y)`` or ``ACT(X * Y)`` in one
  buffer (X's when offered; Fluid's op, with only this order of its functors),
  ``fused_elemwise_activation_grad`` for the two gradient ops.

- ``fc_grad_sgd``: ``fc_grad`` then ``sgd`` on W and Bias, for an ``fc_grad``
  whose dW and dBias only those updates read (``fuse-fc-sgd``): dInput from W
  before its update, then ``W -= lr * (Input^T @ dPre)`` as one BLAS gemm that
  accumulates into W (:mod:`blockir.ops.blas`): dW, ``[K, N]``, is never kept
  nor scaled.
- ``softmax_with_cross_entropy_mean``: ``softmax_with_cross_entropy`` and the
  ``mean`` of its loss, and its gradient for ``mean_grad`` and the loss's
  gradient op: dLoss / rows broadcast rather than filled.

Activations: ``relu``, ``sigmoid``, ``tanh`` (``fc`` also takes ``""``, none).
The kernels compose the kernels of the ops they replace (:mod:`blockir.ops.math`'s
activations and ``elementwise_add``, written once against ``ctx.xp``), run in
place in buffers the fused kernel owns or the executor offers (``reuse``).

``coalesce_tensor`` (Fluid's) is what ``fuse-optimizer`` (:mod:`blockir.passes.fuse_optimizer`)
builds its fused updates on: it lays its ``Input`` tensors out one after the other
in one contiguous buffer, ``FusedOutput``, and makes each ``Output`` a view of its
part, so that one ``sgd``, ``momentum`` or ``adam`` over the buffers updates every
parameter. The op is idempotent: when its inputs already are the views of one
buffer laid out so (the outputs of an earlier run, kept in the scope), that buffer
is the result and nothing is allocated or copied, which makes the first run the
only one that copies.
"""

from __future__ import annotations

import inspect
import math
import weakref
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import REQUIRED, AttrDef, GradContext, InferContext, KernelContext, OpSchema, OpSpec, Slot
from blockir.ops.blas import subtract_product
from blockir.ops.common import (
    FLOATS,
    Kernel,
    broadcast_shapes,
    check_dtype,
    compatible,
    dtype_attr,
    fmt,
    grad_op,
    infer_grads,
    infer_like,
    kernel_error,
    np_dtype,
    numel,
    same_dtype,
)
from blockir.ops.math import (
    ELEMENTWISE_ADD,
    ELEMENTWISE_ADD_GRAD,
    ELEMENTWISE_MUL,
    ELEMENTWISE_MUL_GRAD,
    MEAN,
    RELU,
    RELU_GRAD,
    SIGMOID,
    SIGMOID_GRAD,
    TANH,
    TANH_GRAD,
)
from blockir.ops.nn import SOFTMAX_WITH_CROSS_ENTROPY, SOFTMAX_WITH_CROSS_ENTROPY_GRAD, swce_schemas

# -- activations -----------------------------------------------------------------------------------------


class Activation(NamedTuple):
    """An activation the fused ops apply: the kernels of its op and of its gradient op (from ``Out``)."""

    forward: Kernel  # (ctx, x, *, reuse) -> act(x)
    grad: Kernel  # (ctx, out, dout[, *, reuse]) -> dX
    grad_reuses: bool  # whether ``grad`` takes ``reuse`` (offering dOut)


def _kernel(schema: OpSchema) -> Kernel:
    """The kernel of an op the fused kernels compose (each has one)."""
    if schema.kernel is None:
        raise TypeError(f"{schema.type} has no kernel to compose")
    return schema.kernel


ACTIVATIONS: dict[str, Activation] = {
    op.type: Activation(_kernel(op), _kernel(grad), "reuse" in inspect.signature(_kernel(grad)).parameters)
    for op, grad in ((RELU, RELU_GRAD), (SIGMOID, SIGMOID_GRAD), (TANH, TANH_GRAD))
}
_ADD, _ADD_GRAD = _kernel(ELEMENTWISE_ADD), _kernel(ELEMENTWISE_ADD_GRAD)
# The binary functors of fused_elemwise_activation (Paddle's two): functor_list[1] -> its kernel and its gradient's.
BINARIES: dict[str, tuple[Kernel, Kernel]] = {
    "elementwise_add": (_ADD, _ADD_GRAD),
    "elementwise_mul": (_kernel(ELEMENTWISE_MUL), _kernel(ELEMENTWISE_MUL_GRAD)),
}


def _activate(ctx: KernelContext, name: str, x: Any) -> Any:
    """``name``'s activation of ``x``, in place: ``x`` is a buffer the caller owns."""
    return ACTIVATIONS[name].forward(ctx, x, reuse=(True,)) if name else x


def _activation_grad(ctx: KernelContext, name: str, out: Any, dout: Any, reuse_dout: bool) -> Any:
    """The gradient through ``name``'s activation from its output; ``reuse_dout``: dOut may be overwritten."""
    if not name:
        return dout
    act = ACTIVATIONS[name]
    return act.grad(ctx, out, dout, reuse=(False, reuse_dout)) if act.grad_reuses else act.grad(ctx, out, dout)


def _offered(reuse: Sequence[bool], k: int) -> bool:
    return bool(reuse) and reuse[k]


def _check_activation(ctx: InferContext, name: str, allowed: Sequence[str]) -> None:
    if name not in allowed:
        ctx.fail(f"activation {name!r} is not supported; supported: {', '.join(map(repr, allowed))}")


# -- fc --------------------------------------------------------------------------------------------------

_FC_ATTRS = (AttrDef("in_num_col_dims", AttrType.INT, 1), AttrDef("activation_type", AttrType.STRING, ""))
_FC_ACTIVATIONS = ("", *ACTIVATIONS)


def _infer_fc(ctx: InferContext) -> None:
    x, w = check_dtype(ctx, "Input", FLOATS), check_dtype(ctx, "W", FLOATS)
    same_dtype(ctx, x, w)
    n = ctx.attr("in_num_col_dims")
    if not 1 <= n < len(x.shape):
        ctx.fail(f"in_num_col_dims={n} must be in [1, {len(x.shape)}) for Input {fmt(x)}")
    if len(w.shape) != 2:
        ctx.fail(f"W {fmt(w)} must be a matrix")
    if not compatible(numel(x.shape[n:]), w.shape[0]):
        ctx.fail(
            f"Input {fmt(x)} flattened at in_num_col_dims={n} has {numel(x.shape[n:])} columns but W {fmt(w)} "
            f"has {w.shape[0]} rows"
        )
    if ctx.has_input("Bias"):
        b = check_dtype(ctx, "Bias", FLOATS)
        same_dtype(ctx, x, b)
        size = w.shape[1]
        leading = b.shape[:-1]
        if not (len(leading) <= 1 and compatible(b.shape[-1], size) and all(compatible(d, 1) for d in leading)):
            ctx.fail(f"Bias {fmt(b)} must have shape [{size}] or [1, {size}] for W {fmt(w)}")
    _check_activation(ctx, ctx.attr("activation_type"), _FC_ACTIVATIONS)
    ctx.set_output("Out", (*x.shape[:n], w.shape[1]), x.dtype, lod_level=x.lod_level)


def _rows(x: Any, n: int) -> Any:
    """``x`` as a matrix: its dims before ``n`` make the rows."""
    return x if x.ndim == 2 and n == 1 else x.reshape(math.prod(x.shape[:n]), math.prod(x.shape[n:]))


def _fc(ctx: KernelContext, x: Any, w: Any, bias: Any) -> Any:
    """Out = act(flatten(Input) @ W + Bias): one product, then the bias and the activation in its buffer."""
    n = ctx.attrs["in_num_col_dims"]
    rows = _rows(x, n)
    if rows.shape[1] != w.shape[0]:
        raise kernel_error(
            ctx,
            f"fc: Input of shape {list(x.shape)} flattened at in_num_col_dims={n} has {rows.shape[1]} columns "
            f"but W of shape {list(w.shape)} has {w.shape[0]} rows",
        )
    out = rows @ w
    if bias is not None:
        out += bias
    out = _activate(ctx, ctx.attrs["activation_type"], out)
    return out if n == 1 else out.reshape(*x.shape[:n], w.shape[1])


def _infer_fc_grad(ctx: InferContext) -> None:
    activation = ctx.attr("activation_type")
    if activation and not ctx.has_input("Out"):
        ctx.fail(f"activation_type={activation!r} needs Out, the forward result, for its gradient")
    if ctx.has_output("Bias@GRAD") and not ctx.has_input("Bias"):
        ctx.fail("Bias@GRAD needs Bias")
    infer_grads("Input", "W", "Bias")(ctx)


def _fc_backward(ctx: KernelContext, x: Any, w: Any, out: Any, dout: Any, reuse: Sequence[bool]) -> tuple[Any, Any]:
    """(dPre as a matrix, dInput or None): the activation's gradient from Out (in dOut's buffer when offered),
    dInput = dPre @ W^T (in Out's buffer when offered and of Input's shape: Out is not read after dPre), for
    fc_grad and fc_grad_sgd (whose reuse offers are in the same argument positions)."""
    activation = ctx.attrs["activation_type"]
    d = _activation_grad(ctx, activation, out, dout, _offered(reuse, 4))
    d2 = d if d.ndim == 2 else d.reshape(-1, w.shape[1])
    dx = None
    if ctx.wants[0]:
        into = _offered(reuse, 3) and x.ndim == 2 and out.shape == x.shape and out.dtype == d2.dtype
        dx = ctx.xp.matmul(d2, w.T, out=out if into else None)
        dx = dx if dx.shape == x.shape else dx.reshape(x.shape)
    return d2, dx


def _column_sums(ctx: KernelContext, d2: Any) -> Any:
    return ctx.xp.ones(d2.shape[0], d2.dtype) @ d2  # by BLAS: twice as fast as sum(axis=0)


def _fc_grad(
    ctx: KernelContext, x: Any, w: Any, bias: Any, out: Any, dout: Any, *, reuse: Sequence[bool] = ()
) -> tuple[Any, Any, Any]:
    """dPre and dInput (:func:`_fc_backward`), dW = Input^T @ dPre, dBias = the column sums of dPre."""
    d2, dx = _fc_backward(ctx, x, w, out, dout, reuse)
    dw = db = None
    if ctx.wants[1]:
        dw = _rows(x, ctx.attrs["in_num_col_dims"]).T @ d2
    if ctx.wants[2]:
        db = _column_sums(ctx, d2)
        db = db if db.shape == bias.shape else db.reshape(bias.shape)
    return dx, dw, db


FC_GRAD = OpSchema(
    "fc_grad",
    inputs=(Slot("Input"), Slot("W"), Slot("Bias", optional=True), Slot("Out", optional=True), Slot("Out@GRAD")),
    outputs=(Slot("Input@GRAD"), Slot("W@GRAD"), Slot("Bias@GRAD")),
    attrs=_FC_ATTRS,
    infer=_infer_fc_grad,
    kernel=_fc_grad,
    share_lod=(("Input", "Input@GRAD"),),
    doc="Gradient of fc: through the activation (from Out), then dInput, dW and dBias.",
)


def _grad_fc(g: GradContext) -> list[OpSpec]:
    reads = ["Input", "W"]
    if g.input("Bias"):
        reads.append("Bias")
    if g.op.attr("activation_type"):
        reads.append("Out")
    return grad_op(g, FC_GRAD, (*reads, "Out@GRAD"), ("Input", "W", "Bias"))


FC = OpSchema(
    "fc",
    inputs=(Slot("Input"), Slot("W"), Slot("Bias", optional=True)),
    outputs=(Slot("Out"),),
    attrs=_FC_ATTRS,
    infer=_infer_fc,
    grad=_grad_fc,
    kernel=_fc,
    share_lod=(("Input", "Out"),),
    doc="Fluid's fully connected op: act(flatten(Input) @ W + Bias), Input flattened at in_num_col_dims.",
)

# -- fc_grad_sgd -----------------------------------------------------------------------------------------


def _infer_fc_grad_sgd(ctx: InferContext) -> None:
    _infer_fc_grad(ctx)
    lr = check_dtype(ctx, "LearningRate", FLOATS)
    if numel(lr.shape) not in (1, -1):
        ctx.fail(f"LearningRate {fmt(lr)} must be a float tensor of one element, e.g. [1]")
    for slot in ("W", "Bias"):
        names = ctx.op.outputs.get(slot + "Out", ())
        if names and names != ctx.op.inputs.get(slot):
            ctx.fail(
                f"updates in place: {slot}Out {list(names)} must name the {slot} variable "
                f"{list(ctx.op.inputs.get(slot, []))}"
            )


def _fc_grad_sgd(
    ctx: KernelContext, x: Any, w: Any, bias: Any, out: Any, dout: Any, lr: Any, *, reuse: Sequence[bool] = ()
) -> tuple[Any, Any, Any]:
    """fc_grad, then sgd on W (and Bias): dPre and dInput as fc_grad computes them (from W before its
    update), then W -= lr * (Input^T @ dPre) and Bias -= lr * (the column sums of dPre), in place. W's update is
    one gemm accumulating into W (:func:`blockir.ops.blas.subtract_product`): dW is never kept."""
    d2, dx = _fc_backward(ctx, x, w, out, dout, reuse)
    rate = lr.reshape(())
    subtract_product(ctx.xp, w, _rows(x, ctx.attrs["in_num_col_dims"]).T, d2, rate)
    if ctx.wants[2]:
        db = _column_sums(ctx, d2)
        bias -= ctx.xp.multiply(db, rate, out=db).reshape(bias.shape)
    return dx, w, bias if ctx.wants[2] else None


FC_GRAD_SGD = OpSchema(
    "fc_grad_sgd",
    inputs=(
        Slot("Input", no_grad=True),
        Slot("W", no_grad=True),
        Slot("Bias", optional=True, no_grad=True),
        Slot("Out", optional=True, no_grad=True),
        Slot("Out@GRAD", no_grad=True),
        Slot("LearningRate", no_grad=True),
    ),
    outputs=(Slot("Input@GRAD", optional=True), Slot("WOut"), Slot("BiasOut", optional=True)),
    attrs=_FC_ATTRS,
    infer=_infer_fc_grad_sgd,
    kernel=_fc_grad_sgd,
    side_effects=True,
    share_lod=(("Input", "Input@GRAD"),),
    doc="fc_grad then sgd on W and Bias in place (WOut, BiasOut name them), W's update one gemm into W: "
    "what fuse-fc-sgd makes of an fc_grad whose dW and dBias only sgd reads.",
)

# -- fused_elemwise_activation ---------------------------------------------------------------------------

_FUSED_ATTRS = (AttrDef("functor_list", AttrType.STRINGS, REQUIRED), AttrDef("axis", AttrType.INT, -1))


def _check_functors(ctx: InferContext) -> None:
    """Check ``functor_list`` is ``[ACT, BINARY]``: ACT(X + Y) or ACT(X * Y), the forms supported."""
    functors = list(ctx.attr("functor_list"))
    if len(functors) != 2 or functors[1] not in BINARIES:
        ctx.fail(
            f"functor_list {functors} is not supported; supported: [ACT, 'elementwise_add'] (ACT(X + Y)) and "
            "[ACT, 'elementwise_mul'] (ACT(X * Y))"
        )
    _check_activation(ctx, functors[0], tuple(ACTIVATIONS))


def _infer_fused_elemwise_activation(ctx: InferContext) -> None:
    _check_functors(ctx)
    x, y = check_dtype(ctx, "X", FLOATS), check_dtype(ctx, "Y", FLOATS)
    same_dtype(ctx, x, y)
    ctx.set_output("Out", broadcast_shapes(ctx, x, y, ctx.attr("axis")), x.dtype, lod_level=x.lod_level)


def _fused_elemwise_activation(ctx: KernelContext, x: Any, y: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """ACT(X + Y) or ACT(X * Y): the sum or product in a new buffer (or in X, when the executor offers it), the
    activation in place."""
    act, binary = ctx.attrs["functor_list"]
    return _activate(ctx, act, BINARIES[binary][0](ctx, x, y, reuse=reuse))


def _fused_elemwise_activation_grad(
    ctx: KernelContext, x: Any, y: Any, out: Any, dout: Any, *, reuse: Sequence[bool] = ()
) -> tuple[Any, Any]:
    """Through ACT from Out, then elementwise_add's or elementwise_mul's gradient (each reduced back to its
    input's shape)."""
    act, binary = ctx.attrs["functor_list"]
    d = _activation_grad(ctx, act, out, dout, _offered(reuse, 3))
    return BINARIES[binary][1](ctx, x, y, d)


def _infer_fused_elemwise_activation_grad(ctx: InferContext) -> None:
    _check_functors(ctx)
    infer_grads("X", "Y")(ctx)


FUSED_ELEMWISE_ACTIVATION_GRAD = OpSchema(
    "fused_elemwise_activation_grad",
    inputs=(Slot("X"), Slot("Y"), Slot("Out"), Slot("Out@GRAD")),
    outputs=(Slot("X@GRAD"), Slot("Y@GRAD")),
    attrs=_FUSED_ATTRS,
    infer=_infer_fused_elemwise_activation_grad,
    kernel=_fused_elemwise_activation_grad,
    share_lod=(("X", "X@GRAD"),),
    doc="Gradient of fused_elemwise_activation: through ACT (from Out), then reduced to X's and Y's shapes.",
)

FUSED_ELEMWISE_ACTIVATION = OpSchema(
    "fused_elemwise_activation",
    inputs=(Slot("X"), Slot("Y")),
    outputs=(Slot("Out"),),
    attrs=_FUSED_ATTRS,
    infer=_infer_fused_elemwise_activation,
    grad=lambda g: grad_op(g, FUSED_ELEMWISE_ACTIVATION_GRAD, ("X", "Y", "Out", "Out@GRAD"), ("X", "Y")),
    kernel=_fused_elemwise_activation,
    share_lod=(("X", "Out"),),
    doc="Fluid's fused op with functor_list=[ACT, 'elementwise_add' or 'elementwise_mul']: ACT(X + Y) or "
    "ACT(X * Y), Y broadcast as by elementwise_add.",
)

# -- softmax_with_cross_entropy_mean ---------------------------------------------------------------------

_SWCE, _SWCE_GRAD, _MEAN = (_kernel(s) for s in (SOFTMAX_WITH_CROSS_ENTROPY, SOFTMAX_WITH_CROSS_ENTROPY_GRAD, MEAN))


def _infer_swce_mean(ctx: InferContext) -> None:
    infer = SOFTMAX_WITH_CROSS_ENTROPY.infer
    if infer is None:
        raise TypeError("softmax_with_cross_entropy has no shape inference to compose")
    infer(ctx)  # Softmax, and the per-row Loss, replaced:
    ctx.set_output("Loss", (1,), ctx.tensor("Logits").dtype)


def _swce_mean(ctx: KernelContext, logits: Any, label: Any) -> tuple[Any, Any]:
    """softmax_with_cross_entropy's Softmax, and the mean of its Loss (ignored rows counting as 0)."""
    softmax, loss = _SWCE(ctx, logits, label)
    return softmax, _MEAN(ctx, loss)


def _infer_swce_mean_grad(ctx: InferContext) -> None:
    if ctx.has_input("Loss@GRAD") and numel(ctx.tensor("Loss@GRAD").shape) not in (1, -1):
        ctx.fail(f"Loss@GRAD {fmt(ctx.tensor('Loss@GRAD'))} must have one element, the mean loss's gradient")
    infer_like(ctx, "Softmax", "Logits@GRAD")


def _swce_mean_grad(ctx: KernelContext, label: Any, softmax: Any, dloss: Any, dsoftmax: Any) -> Any:
    """softmax_with_cross_entropy_grad with mean_grad's dLoss, dMean / rows, one element of Softmax's rank
    that broadcasts rather than a filled array."""
    if dloss is not None:
        rows = softmax.size // softmax.shape[ctx.attrs["axis"]] if softmax.size else 1
        dloss = dloss.reshape((1,) * softmax.ndim) / rows
    return _SWCE_GRAD(ctx, label, softmax, dloss, dsoftmax)


SOFTMAX_WITH_CROSS_ENTROPY_MEAN, SOFTMAX_WITH_CROSS_ENTROPY_MEAN_GRAD = swce_schemas(
    "softmax_with_cross_entropy_mean",
    _infer_swce_mean,
    _swce_mean,
    _infer_swce_mean_grad,
    _swce_mean_grad,
    "softmax_with_cross_entropy with the mean of its Loss, shape [1], for Loss: what fuse-softmax-ce makes of "
    "softmax_with_cross_entropy then mean.",
)

# -- coalesce_tensor -------------------------------------------------------------------------------------

_COALESCE_ATTRS = (
    AttrDef("copy_data", AttrType.BOOLEAN, False),
    AttrDef("set_constant", AttrType.BOOLEAN, False),
    AttrDef("constant", AttrType.FLOAT, 0.0),
    AttrDef("dtype", AttrType.INT, REQUIRED),
)


def _infer_coalesce_tensor(ctx: InferContext) -> None:
    dtype = dtype_attr(ctx, "dtype")
    if ctx.attr("copy_data") and ctx.attr("set_constant"):
        ctx.fail("copy_data and set_constant cannot both be true")
    inputs, outputs = ctx.tensors("Input"), ctx.outputs("Output")
    if not inputs:
        ctx.fail("Input names no variable")
    if len(outputs) != len(inputs):
        ctx.fail(f"Output names {len(outputs)} variables for {len(inputs)} Input variables: it needs one per input")
    for var in inputs:
        if var.dtype != dtype:
            ctx.fail(f"Input {fmt(var)} has dtype {var.dtype}, not {dtype} (the dtype attribute)")
    for k, var in enumerate(inputs):
        ctx.set_output("Output", var.shape, dtype, index=k)
    sizes = [numel(var.shape) for var in inputs]
    ctx.set_output("FusedOutput", (-1 if -1 in sizes else sum(sizes),), dtype)


# The layouts coalesce_tensor made, while their buffer lives: id(buffer) -> (a weak reference to the buffer, weak
# references to its views, in order). Inputs that are those very views, in that order, are the buffer laid out: an
# identity test each, where reading an array's address would cost about a microsecond, more than the update of a
# small tensor.
_LAYOUTS: dict[int, tuple[weakref.ref[Any], tuple[weakref.ref[Any], ...]]] = {}


def _remember(buffer: Any, views: list[Any]) -> None:
    key = id(buffer)
    _LAYOUTS[key] = (weakref.ref(buffer, lambda _: _LAYOUTS.pop(key, None)), tuple(map(weakref.ref, views)))


def _coalesced(inputs: list[Any], dtype: np.dtype) -> Any:
    """The buffer of ``dtype`` that coalesce_tensor made and whose views, in order, ``inputs`` are; else None."""
    buffer = inputs[0].base
    if buffer is None:
        return None
    layout = _LAYOUTS.get(id(buffer))
    if layout is None or buffer.dtype != dtype or layout[0]() is not buffer or len(layout[1]) != len(inputs):
        return None
    return buffer if all(view() is x for view, x in zip(layout[1], inputs)) else None


def _coalesce_tensor(ctx: KernelContext, inputs: list[Any]) -> tuple[list[Any] | None, Any]:
    """FusedOutput: the inputs one after the other in one buffer, copied in (copy_data) or set to constant
    (set_constant); Output: a view of each input's part. When the inputs already are the views this op made of
    one buffer, in order, that buffer is FusedOutput and they are Output: nothing is allocated, nor copied."""
    xp, attrs = ctx.xp, ctx.attrs
    dtype = np_dtype(attrs["dtype"])
    buffer = _coalesced(inputs, dtype)
    if buffer is not None:
        if attrs["set_constant"]:
            buffer.fill(attrs["constant"])
        return (inputs if ctx.wants[0] else None), buffer
    for k, x in enumerate(inputs):
        if x.dtype != dtype:
            raise kernel_error(
                ctx, f"coalesce_tensor: Input {k} has dtype {x.dtype}, not {dtype} (the dtype attribute)"
            )
    if attrs["copy_data"]:
        buffer = xp.concatenate([x.reshape(-1) for x in inputs])
    else:
        buffer = xp.full(sum(int(x.size) for x in inputs), attrs["constant"] if attrs["set_constant"] else 0, dtype)
    if not ctx.wants[0]:
        return None, buffer
    views, start = [], 0
    for x in inputs:
        views.append(buffer[start : start + x.size].reshape(x.shape))
        start += x.size
    _remember(buffer, views)
    return views, buffer


COALESCE_TENSOR = OpSchema(
    "coalesce_tensor",
    inputs=(Slot("Input", duplicable=True, no_grad=True),),
    outputs=(Slot("Output", duplicable=True, no_grad=True), Slot("FusedOutput", no_grad=True)),
    attrs=_COALESCE_ATTRS,
    infer=_infer_coalesce_tensor,
    kernel=_coalesce_tensor,
    views=("Output",),
    doc="Fluid's coalesce_tensor: Input laid out in one contiguous buffer (FusedOutput), Output[i] a view of "
    "Input[i]'s part; nothing allocated nor copied when the inputs already are those views.",
)

SCHEMAS: tuple[OpSchema, ...] = (
    FC,
    FC_GRAD,
    FC_GRAD_SGD,
    FUSED_ELEMWISE_ACTIVATION,
    FUSED_ELEMWISE_ACTIVATION_GRAD,
    SOFTMAX_WITH_CROSS_ENTROPY_MEAN,
    SOFTMAX_WITH_CROSS_ENTROPY_MEAN_GRAD,
    COALESCE_TENSOR,
)
