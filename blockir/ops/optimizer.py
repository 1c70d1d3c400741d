"""Optimizer update ops: ``sgd``, ``momentum``, ``adagrad``, ``adam`` (Fluid 1.x semantics).

Every update is in place: ``ParamOut`` must name the ``Param`` variable and each
state output (``VelocityOut``, ``MomentOut``, ``Moment1Out``, ``Beta1PowOut``, ...)
its state input, which inference checks. The kernels therefore update the
parameter and state arrays in place and return them, which saves an allocation
and a copy per parameter per step.

``Grad`` is dense or a :class:`SelectedRows` (the sparse gradient of an
embedding). A sparse update equals the dense update of the same gradient, also
when rows repeat: repeated rows are summed first wherever the update is not
linear in the gradient. Only ``adam``'s ``lazy_mode`` departs from that, on
purpose: it updates only the rows present in the gradient.
``LearningRate`` is a float tensor of one element.

An update may run over coalesced buffers (``fuse-optimizer``: ``Param``, ``Grad``
and the state the flat buffers of ``coalesce_tensor``, each parameter a view of
its part): the arithmetic is elementwise, so it is the same. ``adam``'s
``Beta1Pow`` and ``Beta2Pow`` then hold one power per parameter, all equal (the
parameters of one optimizer advance them together): the update uses the first
and advances all; powers that differ are an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blockir.ir.attrs import AttrType
from blockir.ir.dtypes import FLOAT_DTYPES
from blockir.ir.schema import AttrDef, InferContext, KernelContext, OpSchema, Slot
from blockir.ops.common import compatible, fmt, kernel_error, numel
from blockir.ops.values import LoDTensor, SelectedRows, add_rows

_FIXED = ("Param", "Grad", "LearningRate")


def _same_shape(a: Any, b: Any) -> bool:
    return len(a.shape) == len(b.shape) and all(compatible(x, y) for x, y in zip(a.shape, b.shape))


def _infer_update(ctx: InferContext) -> None:
    """Check dtypes and shapes, and that every ``<Slot>Out`` names the variable of input ``<Slot>``."""
    param, grad, lr = (ctx.tensor(slot) for slot in _FIXED)
    if param.dtype not in FLOAT_DTYPES:
        ctx.fail(f"Param {fmt(param)} must be a floating-point tensor")
    if grad.dtype != param.dtype or not _same_shape(grad, param):
        ctx.fail(f"Grad {fmt(grad)} must match Param {fmt(param)} in dtype and shape")
    if lr.dtype not in FLOAT_DTYPES or numel(lr.shape) not in (1, -1):
        ctx.fail(f"LearningRate {fmt(lr)} must be a float tensor of one element, e.g. [1]")
    for slot, names in ctx.op.inputs.items():
        if slot in _FIXED or not names:
            continue
        state = ctx.tensor(slot)
        if slot.endswith("Pow"):
            if numel(state.shape) not in (1, -1) and not (len(state.shape) == 1 and state.shape[0] > 0):
                ctx.fail(f"{slot} {fmt(state)} must have one element, e.g. shape [1] (or one per fused parameter)")
        elif not _same_shape(state, param):
            ctx.fail(f"{slot} {fmt(state)} must have the shape of Param {fmt(param)}")
    for slot, names in ctx.op.outputs.items():
        source = slot.removesuffix("Out")
        if names and names != ctx.op.inputs.get(source):
            ctx.fail(
                f"updates in place: {slot} {list(names)} must name the {source} variable {list(ctx.op.input(source))}"
            )


def _gradient(ctx: KernelContext, param: Any, grad: Any) -> Any:
    """The dense array or SelectedRows of ``grad``, checked against ``param``."""
    if isinstance(grad, LoDTensor):
        grad = grad.data
    if isinstance(grad, SelectedRows):
        rows = grad.rows
        if grad.shape != param.shape or len(rows) != grad.values.shape[0]:
            raise kernel_error(
                ctx,
                f"sparse Grad of shape {list(grad.shape)} with {len(rows)} rows and values "
                f"{list(grad.values.shape)} does not match Param {list(param.shape)}",
            )
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= grad.height):
            raise kernel_error(
                ctx, f"sparse Grad rows must lie in [0, {grad.height}), got {int(rows.min())}..{int(rows.max())}"
            )
    elif grad.shape != param.shape:
        raise kernel_error(ctx, f"Grad of shape {list(grad.shape)} does not match Param {list(param.shape)}")
    return grad


def _dense(ctx: KernelContext, param: Any, grad: Any) -> Any:
    """The gradient as a dense array (a SelectedRows is scattered with its repeated rows summed)."""
    grad = _gradient(ctx, param, grad)
    return grad.to_dense(ctx.xp) if isinstance(grad, SelectedRows) else grad


def _sgd(ctx: KernelContext, param: Any, grad: Any, lr: Any, *, reuse: Sequence[bool] = ()) -> Any:
    """Param -= lr * Grad, in place (a SelectedRows subtracts at its rows, repeats accumulating); a dense
    Grad the executor offers for reuse holds lr * Grad on the way."""
    xp = ctx.xp
    lr = lr.reshape(())
    grad = _gradient(ctx, param, grad)
    if isinstance(grad, SelectedRows):
        add_rows(param, grad.rows, -lr * grad.values, xp)
    else:
        param -= xp.multiply(grad, lr, out=grad if reuse and reuse[1] else None)
    return param


def _momentum(ctx: KernelContext, param: Any, grad: Any, velocity: Any, lr: Any) -> tuple[Any, Any]:
    """Velocity = mu * Velocity + Grad; Param -= lr * Velocity (Nesterov: lr * (Grad + mu * Velocity)).

    Updated in place. Every row's velocity decays, so a sparse gradient is scattered to dense first.
    """
    mu = ctx.attrs["mu"]
    lr = lr.reshape(())
    grad = _dense(ctx, param, grad)
    velocity *= mu
    velocity += grad
    if ctx.attrs["use_nesterov"]:
        step = velocity * mu
        step += grad
        step *= lr
        param -= step
    else:
        param -= lr * velocity
    return param, velocity


def _adagrad(ctx: KernelContext, param: Any, grad: Any, moment: Any, lr: Any) -> tuple[Any, Any]:
    """Moment += Grad ** 2; Param -= lr * Grad / (sqrt(Moment) + epsilon), in place.

    A sparse gradient has its repeated rows summed first, then only its rows
    change: rows without gradient are unchanged by the dense update too.
    """
    xp = ctx.xp
    eps = ctx.attrs["epsilon"]
    lr = lr.reshape(())
    grad = _gradient(ctx, param, grad)
    if isinstance(grad, SelectedRows):
        merged = grad.merged(xp)
        rows, g = xp.asarray(merged.rows), merged.values
        step = xp.multiply(g, g)
        step += moment[rows]
        moment[rows] = step
        xp.sqrt(step, out=step)
    else:
        rows, g = slice(None), grad
        moment += xp.multiply(g, g)
        step = xp.sqrt(moment)
    step += eps  # step = lr * g / (sqrt(moment) + eps) in one temporary: each fresh block costs page faults
    xp.divide(g, step, out=step)
    step *= lr
    param[rows] -= step
    return param, moment


def _adam_step(xp: Any, param: Any, m1: Any, m2: Any, g: Any, lr_t: Any, eps_t: Any, b1: float, b2: float) -> None:
    """One Adam step on arrays of one shape, all updated in place."""
    m1 *= b1
    m1 += (1 - b1) * g
    m2 *= b2
    m2 += (1 - b2) * xp.square(g)
    denom = xp.sqrt(m2)
    denom += eps_t
    step = xp.divide(m1, denom, out=denom)
    step *= lr_t
    param -= step


def _power(ctx: KernelContext, slot: str, power: Any) -> Any:
    """The power of beta of ``slot`` as a 0-d array: its one element, or the first of its equal ones (a fused
    update's, one per parameter); an error naming the op when they differ."""
    first = power.reshape(-1)[:1].reshape(())
    if power.size > 1 and bool((power != first).any()):
        raise kernel_error(
            ctx,
            f"{slot} holds one power per fused parameter, and they differ ({ctx.xp.unique(power).tolist()}): "
            "parameters whose powers differ cannot share one update (set BuildStrategy.fuse_all_optimizer_ops "
            "to False)",
        )
    return first


def _adam(
    ctx: KernelContext, param: Any, grad: Any, lr: Any, m1: Any, m2: Any, b1_pow: Any, b2_pow: Any
) -> tuple[Any, Any, Any, Any, Any]:
    """Adam with bias correction, in place; also advances the beta powers (Beta1PowOut = Beta1Pow * beta1).

    lr_t = lr * sqrt(1 - beta2^t) / (1 - beta1^t); M1 = b1 M1 + (1 - b1) g;
    M2 = b2 M2 + (1 - b2) g^2; Param -= lr_t * M1 / (sqrt(M2) + epsilon * sqrt(1 - beta2^t)).
    A sparse gradient updates every row's moments, as the dense update of the
    scattered gradient does, unless ``lazy_mode`` (then only the rows present,
    with repeated rows summed first).
    """
    xp = ctx.xp
    b1, b2 = ctx.attrs["beta1"], ctx.attrs["beta2"]
    bias2 = xp.sqrt(1 - _power(ctx, "Beta2Pow", b2_pow))
    lr_t = lr.reshape(()) * bias2 / (1 - _power(ctx, "Beta1Pow", b1_pow))
    eps_t = ctx.attrs["epsilon"] * bias2
    grad = _gradient(ctx, param, grad)
    if isinstance(grad, SelectedRows) and ctx.attrs["lazy_mode"]:
        merged = grad.merged(xp)
        rows = xp.asarray(merged.rows)
        p, a, b = param[rows], m1[rows], m2[rows]
        _adam_step(xp, p, a, b, merged.values, lr_t, eps_t, b1, b2)
        param[rows], m1[rows], m2[rows] = p, a, b
    else:
        dense = grad.to_dense(xp) if isinstance(grad, SelectedRows) else grad
        _adam_step(xp, param, m1, m2, dense, lr_t, eps_t, b1, b2)
    if ctx.wants[3]:
        b1_pow *= b1
    if ctx.wants[4]:
        b2_pow *= b2
    return param, m1, m2, b1_pow, b2_pow


def _update_schema(
    type: str,
    inputs: tuple[str, ...],
    outputs: tuple[str, ...],
    attrs: tuple[AttrDef, ...],
    kernel: Any,
    doc: str,
    optional_outputs: tuple[str, ...] = (),
) -> OpSchema:
    return OpSchema(
        type,
        inputs=tuple(Slot(name, lod=name == "Grad", no_grad=True) for name in inputs),
        outputs=tuple(Slot(name, optional=name in optional_outputs, no_grad=True) for name in outputs),
        attrs=attrs,
        infer=_infer_update,
        kernel=kernel,
        side_effects=True,
        doc=doc,
    )


SGD = _update_schema(
    "sgd",
    ("Param", "Grad", "LearningRate"),
    ("ParamOut",),
    (),
    _sgd,
    "ParamOut = Param - LearningRate * Grad (in place).",
)

MOMENTUM = _update_schema(
    "momentum",
    ("Param", "Grad", "Velocity", "LearningRate"),
    ("ParamOut", "VelocityOut"),
    (AttrDef("mu", AttrType.FLOAT), AttrDef("use_nesterov", AttrType.BOOLEAN, False)),
    _momentum,
    "Momentum SGD, optionally Nesterov (in place).",
)

ADAGRAD = _update_schema(
    "adagrad",
    ("Param", "Grad", "Moment", "LearningRate"),
    ("ParamOut", "MomentOut"),
    (AttrDef("epsilon", AttrType.FLOAT, 1e-6),),
    _adagrad,
    "Adagrad (in place).",
)

ADAM = _update_schema(
    "adam",
    ("Param", "Grad", "LearningRate", "Moment1", "Moment2", "Beta1Pow", "Beta2Pow"),
    ("ParamOut", "Moment1Out", "Moment2Out", "Beta1PowOut", "Beta2PowOut"),
    (
        AttrDef("beta1", AttrType.FLOAT, 0.9),
        AttrDef("beta2", AttrType.FLOAT, 0.999),
        AttrDef("epsilon", AttrType.FLOAT, 1e-8),
        AttrDef("lazy_mode", AttrType.BOOLEAN, False),
    ),
    _adam,
    "Adam with bias correction; advances Beta1Pow/Beta2Pow (in place).",
    optional_outputs=("Beta1PowOut", "Beta2PowOut"),
)

SCHEMAS: tuple[OpSchema, ...] = (SGD, MOMENTUM, ADAGRAD, ADAM)
