"""The fusion passes and the ``fuse`` pipeline: op sequences into the fused ops of :mod:`blockir.ops.fused`.

Each pass is a list of patterns (:mod:`blockir.passes.rewrite`), a training
form first (the forward ops and their gradient ops, fused into two ops) and an
inference form (the forward ops alone):

``fuse-fc``
    ``mul`` (``y_num_col_dims=1``, W a matrix), ``elementwise_add`` of a bias
    ``[N]`` or ``[1, N]`` on the last dim, and optionally ``relu``, ``sigmoid``
    or ``tanh``, into Fluid's ``fc``; the activation's gradient op,
    ``elementwise_add_grad`` and ``mul_grad`` into ``fc_grad``.
``fuse-elementwise-act``
    ``elementwise_add`` or ``elementwise_mul`` then ``relu``, ``sigmoid`` or
    ``tanh`` into ``fused_elemwise_activation`` (``functor_list=[ACT,
    "elementwise_add"]`` or ``[ACT, "elementwise_mul"]``: a gate ``sigmoid(X * Y)``
    too), and their gradient ops into ``fused_elemwise_activation_grad``.
``fuse-softmax-ce``
    ``softmax`` on the last axis then ``cross_entropy`` into
    ``softmax_with_cross_entropy`` (which also writes the softmax, so its
    other readers keep it), and ``cross_entropy_grad`` then ``softmax_grad``
    into ``softmax_with_cross_entropy_grad``: the loss from log-sum-exp instead
    of the log of a probability, finite where that underflows. Then
    ``softmax_with_cross_entropy`` and a ``mean`` of its loss into
    ``softmax_with_cross_entropy_mean``, and ``mean_grad`` then its gradient op
    into ``softmax_with_cross_entropy_mean_grad`` (the per-row loss and its
    gradient vanish).
``fuse-fc-sgd``
    an ``fc_grad`` and the ``sgd`` updates of its W (and Bias) that alone read
    its dW (and dBias), with one learning rate, into ``fc_grad_sgd`` at the
    ``fc_grad``'s place (``Create(at="first")``: the layers below read its
    dInput); the engine refuses it when an op in between reads or writes the
    parameter or writes the learning rate.

Floating-point inputs only. The named pipeline ``fuse{keep=... conv_bn= conv_add_act= bn_act= fc=
elementwise_act= softmax_ce= optimizer= max_pool_index=}`` runs the passes of convolutional networks first
(:mod:`blockir.passes.fuse_conv`: ``fold-conv-bn``, ``fuse-conv-add-act``, ``fuse-bn-act``; with
``max_pool_index`` :mod:`blockir.passes.pool_index`'s ``max-pool-with-index``, a max pooling that has a
gradient op keeping the position of each maximum for it), then
``fuse-fc``, ``fuse-elementwise-act`` (after ``fuse-fc``, which would otherwise find its ``elementwise_add`` taken),
``fuse-softmax-ce``, and with ``optimizer`` ``fuse-fc-sgd`` and ``fuse-optimizer``
(:mod:`blockir.passes.fuse_optimizer`: the sgd, momentum or adam updates left in
one op over coalesced buffers); the executor applies it as its ``BuildStrategy``
says (:mod:`blockir.runtime.compiled`), with ``keep`` the values it fetches and
feeds (``fuse-optimizer`` makes no value disappear, so it needs none).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from blockir.ir.dtypes import FLOAT_DTYPES
from blockir.ops.fused import ACTIVATIONS, BINARIES
from blockir.passes.base import Pass, Pipeline, register_pass
from blockir.passes.fuse_conv import FoldConvBN, FuseBNAct, FuseConvAddAct
from blockir.passes.fuse_optimizer import FuseOptimizer
from blockir.passes.pool_index import MaxPoolWithIndex
from blockir.passes.rewrite import Create, Match, OpPattern, Pattern, RewritePass

__all__ = ["Fuse", "FuseElementwiseAct", "FuseFC", "FuseFCSGD", "FuseSoftmaxCE"]

_ACTS = tuple(ACTIVATIONS)
_ACT_GRADS = tuple(f"{a}_grad" for a in _ACTS)


def _float(match: Match, symbol: str) -> bool:
    return match.var(symbol).dtype in FLOAT_DTYPES


def _same(match: Match, first: str, second: str, *attrs: str) -> bool:
    """Whether two matched ops agree on ``attrs`` (a gradient op and its forward op)."""
    a, b = match.op(first), match.op(second)
    return all(a.attr(name) == b.attr(name) for name in attrs)


def _act_pair(match: Match) -> bool:
    """The activation's gradient op, when the match has one, is that activation's."""
    return "act_grad" not in match.ops or match.op("act_grad").type == f"{match.op('act').type}_grad"


def _act(match: Match) -> str:
    return match.op("act").type if "act" in match.ops else ""


# -- fuse-fc ---------------------------------------------------------------------------------------------


def _bias_on_last_dim(match: Match) -> bool:
    """W is a matrix [K, N], the bias [N] or [1, N], and the add puts it on the product's last dim."""
    w, b, t = match.var("w"), match.var("b"), match.var("t")
    axis = match.op("add").attr("axis")
    if w.shape is None or b.shape is None or t.shape is None or len(w.shape) != 2:
        return False
    n, rank = w.shape[1], len(t.shape)
    if b.shape == (n,):
        return axis in (-1, rank - 1)
    return b.shape == (1, n) and axis in (-1, rank - 2)


def _fc_where(match: Match) -> bool:
    return (
        _float(match, "x")
        and _bias_on_last_dim(match)
        and _act_pair(match)
        and ("mul_grad" not in match.ops or _same(match, "mul", "mul_grad", "x_num_col_dims"))
        and ("add_grad" not in match.ops or _same(match, "add", "add_grad", "axis"))
    )


def _fc_attrs(match: Match) -> dict[str, Any]:
    return {"in_num_col_dims": match.op("mul").attr("x_num_col_dims"), "activation_type": _act(match)}


def _fc_pattern(name: str, act: bool, grad: bool) -> Pattern:
    """mul, elementwise_add (into ``s``, or ``out`` without ``act``), the activation; with ``grad`` their
    gradient ops."""
    summed = "s" if act else "out"
    ops = [
        OpPattern("mul", ("mul",), {"X": "x", "Y": "w"}, {"Out": "t"}, {"y_num_col_dims": 1}),
        OpPattern("add", ("elementwise_add",), {"X": "t", "Y": "b"}, {"Out": summed}),
    ]
    forward, backward = ["mul", "add"], ["add_grad", "mul_grad"]
    if act:
        ops.append(OpPattern("act", _ACTS, {"X": "s"}, {"Out": "out"}))
        forward.append("act")
    creates = [Create("fc", tuple(forward), {"Input": "x", "W": "w", "Bias": "b"}, {"Out": "out"}, _fc_attrs)]
    if grad:
        if act:
            ops.append(OpPattern("act_grad", _ACT_GRADS, {"Out": "out", "Out@GRAD": "dout"}, {"X@GRAD": "ds"}))
            backward.insert(0, "act_grad")
        ops += [
            OpPattern(
                "add_grad",
                ("elementwise_add_grad",),
                {"X": "t", "Y": "b", "Out@GRAD": "ds" if act else "dout"},
                {"X@GRAD": "dt", "Y@GRAD": "db?"},
            ),
            OpPattern(
                "mul_grad",
                ("mul_grad",),
                {"X": "x", "Y": "w", "Out@GRAD": "dt"},
                {"X@GRAD": "dx?", "Y@GRAD": "dw?"},
                {"y_num_col_dims": 1},
            ),
        ]
        reads = {"Input": "x", "W": "w", "Bias": "b", **({"Out": "out"} if act else {}), "Out@GRAD": "dout"}
        writes = {"Input@GRAD": "dx", "W@GRAD": "dw", "Bias@GRAD": "db"}
        creates.append(Create("fc_grad", tuple(backward), reads, writes, _fc_attrs))
    return Pattern(name, tuple(ops), tuple(creates), _fc_where)


@register_pass
@dataclass(frozen=True)
class FuseFC(RewritePass):
    """mul + elementwise_add (+ activation) into fc, their gradient ops into fc_grad (module docstring)."""

    name: ClassVar[str] = "fuse-fc"
    summary: ClassVar[str] = "mul + elementwise_add (+ relu/sigmoid/tanh) into fc, their gradient ops into fc_grad"
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _fc_pattern("fc-act-train", act=True, grad=True),
        _fc_pattern("fc-train", act=False, grad=True),
        _fc_pattern("fc-act", act=True, grad=False),
        _fc_pattern("fc", act=False, grad=False),
    )


# -- fuse-elementwise-act --------------------------------------------------------------------------------


_BINARIES = tuple(BINARIES)


def _elementwise_act_where(match: Match) -> bool:
    return (
        _float(match, "x")
        and _act_pair(match)
        and (
            "add_grad" not in match.ops
            or (match.op("add_grad").type == f"{match.op('add').type}_grad" and _same(match, "add", "add_grad", "axis"))
        )
    )


def _elementwise_act_attrs(match: Match) -> dict[str, Any]:
    add = match.op("add")
    return {"functor_list": [_act(match), add.type], "axis": add.attr("axis")}


def _elementwise_act_pattern(name: str, grad: bool) -> Pattern:
    ops = [
        OpPattern("add", _BINARIES, {"X": "x", "Y": "y"}, {"Out": "s"}),
        OpPattern("act", _ACTS, {"X": "s"}, {"Out": "out"}),
    ]
    creates = [
        Create(
            "fused_elemwise_activation", ("add", "act"), {"X": "x", "Y": "y"}, {"Out": "out"}, _elementwise_act_attrs
        )
    ]
    if grad:
        ops += [
            OpPattern("act_grad", _ACT_GRADS, {"Out": "out", "Out@GRAD": "dout"}, {"X@GRAD": "ds"}),
            OpPattern(
                "add_grad",
                tuple(f"{b}_grad" for b in _BINARIES),
                {"X": "x", "Y": "y", "Out@GRAD": "ds"},
                {"X@GRAD": "dx?", "Y@GRAD": "dy?"},
            ),
        ]
        creates.append(
            Create(
                "fused_elemwise_activation_grad",
                ("act_grad", "add_grad"),
                {"X": "x", "Y": "y", "Out": "out", "Out@GRAD": "dout"},
                {"X@GRAD": "dx", "Y@GRAD": "dy"},
                _elementwise_act_attrs,
            )
        )
    return Pattern(name, tuple(ops), tuple(creates), _elementwise_act_where)


@register_pass
@dataclass(frozen=True)
class FuseElementwiseAct(RewritePass):
    """elementwise_add + activation into fused_elemwise_activation, and their gradients (module docstring)."""

    name: ClassVar[str] = "fuse-elementwise-act"
    summary: ClassVar[str] = (
        "elementwise_add or elementwise_mul + relu/sigmoid/tanh into fused_elemwise_activation, their gradient ops "
        "into its grad"
    )
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _elementwise_act_pattern("elementwise-act-train", grad=True),
        _elementwise_act_pattern("elementwise-act", grad=False),
    )


# -- fuse-softmax-ce -------------------------------------------------------------------------------------

_CE_ATTRS = ("soft_label", "ignore_index")


def _softmax_ce_where(match: Match) -> bool:
    axis = match.op("softmax").attr("axis")
    rank = len(match.var("logits").shape or ())
    return (
        _float(match, "logits")
        and axis in (-1, rank - 1)
        and ("ce_grad" not in match.ops or _same(match, "ce", "ce_grad", *_CE_ATTRS))
        and ("softmax_grad" not in match.ops or _same(match, "softmax", "softmax_grad", "axis"))
    )


def _softmax_ce_attrs(match: Match) -> dict[str, Any]:
    ce = match.op("ce")
    return {"soft_label": ce.attr("soft_label"), "ignore_index": ce.attr("ignore_index"), "axis": -1}


def _softmax_ce_pattern(name: str, grad: bool) -> Pattern:
    ops = [
        OpPattern("softmax", ("softmax",), {"X": "logits"}, {"Out": "p"}),
        OpPattern("ce", ("cross_entropy",), {"X": "p", "Label": "label"}, {"Y": "loss"}),
    ]
    creates = [
        Create(
            "softmax_with_cross_entropy",
            ("softmax", "ce"),
            {"Logits": "logits", "Label": "label"},
            {"Softmax": "p", "Loss": "loss"},
            _softmax_ce_attrs,
        )
    ]
    if grad:
        ops += [
            OpPattern(
                "ce_grad", ("cross_entropy_grad",), {"X": "p", "Label": "label", "Y@GRAD": "dloss"}, {"X@GRAD": "dp"}
            ),
            OpPattern("softmax_grad", ("softmax_grad",), {"Out": "p", "Out@GRAD": "dp"}, {"X@GRAD": "dlogits"}),
        ]
        creates.append(
            Create(
                "softmax_with_cross_entropy_grad",
                ("ce_grad", "softmax_grad"),
                {"Label": "label", "Softmax": "p", "Loss@GRAD": "dloss"},
                {"Logits@GRAD": "dlogits"},
                _softmax_ce_attrs,
            )
        )
    return Pattern(name, tuple(ops), tuple(creates), _softmax_ce_where)


_SWCE_ATTRS = (*_CE_ATTRS, "axis")


def _swce_mean_where(match: Match) -> bool:
    return _float(match, "logits") and ("swce_grad" not in match.ops or _same(match, "swce", "swce_grad", *_SWCE_ATTRS))


def _swce_mean_attrs(match: Match) -> dict[str, Any]:
    swce = match.op("swce")
    return {name: swce.attr(name) for name in _SWCE_ATTRS}


def _swce_mean_pattern(name: str, grad: bool) -> Pattern:
    """softmax_with_cross_entropy then mean of its Loss; with ``grad``, mean_grad then its gradient op."""
    ops = [
        OpPattern(
            "swce",
            ("softmax_with_cross_entropy",),
            {"Logits": "logits", "Label": "label"},
            {"Softmax": "p", "Loss": "loss"},
        ),
        OpPattern("mean", ("mean",), {"X": "loss"}, {"Out": "m"}),
    ]
    creates = [
        Create(
            "softmax_with_cross_entropy_mean",
            ("swce", "mean"),
            {"Logits": "logits", "Label": "label"},
            {"Softmax": "p", "Loss": "m"},
            _swce_mean_attrs,
        )
    ]
    if grad:
        ops += [
            OpPattern("mean_grad", ("mean_grad",), {"X": "loss", "Out@GRAD": "dm"}, {"X@GRAD": "dloss"}),
            OpPattern(
                "swce_grad",
                ("softmax_with_cross_entropy_grad",),
                {"Label": "label", "Softmax": "p", "Loss@GRAD": "dloss"},
                {"Logits@GRAD": "dlogits"},
            ),
        ]
        creates.append(
            Create(
                "softmax_with_cross_entropy_mean_grad",
                ("mean_grad", "swce_grad"),
                {"Label": "label", "Softmax": "p", "Loss@GRAD": "dm"},
                {"Logits@GRAD": "dlogits"},
                _swce_mean_attrs,
            )
        )
    return Pattern(name, tuple(ops), tuple(creates), _swce_mean_where)


@register_pass
@dataclass(frozen=True)
class FuseSoftmaxCE(RewritePass):
    """softmax + cross_entropy into softmax_with_cross_entropy, with a mean of the loss into
    softmax_with_cross_entropy_mean, and their gradients (module docstring)."""

    name: ClassVar[str] = "fuse-softmax-ce"
    summary: ClassVar[str] = (
        "softmax + cross_entropy into softmax_with_cross_entropy, then with a mean of its loss into "
        "softmax_with_cross_entropy_mean; their gradient ops likewise"
    )
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _softmax_ce_pattern("softmax-ce-train", grad=True),
        _softmax_ce_pattern("softmax-ce", grad=False),
        _swce_mean_pattern("softmax-ce-mean-train", grad=True),
        _swce_mean_pattern("softmax-ce-mean", grad=False),
    )


# -- fuse-fc-sgd -----------------------------------------------------------------------------------------


def _fc_sgd_where(match: Match) -> bool:
    return _float(match, "w")


def _fc_grad_attrs(match: Match) -> dict[str, Any]:
    grad = match.op("grad")
    return {"in_num_col_dims": grad.attr("in_num_col_dims"), "activation_type": grad.attr("activation_type")}


def _fc_sgd_pattern(name: str, bias: bool) -> Pattern:
    """fc_grad and the sgd of W (and of Bias, with ``bias``) that read its dW (and dBias), with one learning
    rate, into fc_grad_sgd at fc_grad's place."""
    grad_writes = {"Input@GRAD": "dx?", "W@GRAD": "dw", **({"Bias@GRAD": "db"} if bias else {})}
    ops = [
        OpPattern(
            "grad",
            ("fc_grad",),
            {"Input": "x", "W": "w", "Bias": "b?", "Out": "out?", "Out@GRAD": "dout"},
            grad_writes,
        ),
        OpPattern("sgd_w", ("sgd",), {"Param": "w", "Grad": "dw", "LearningRate": "lr"}, {"ParamOut": "w"}),
    ]
    if bias:
        ops.append(OpPattern("sgd_b", ("sgd",), {"Param": "b", "Grad": "db", "LearningRate": "lr"}, {"ParamOut": "b"}))
    updated = {"Bias": "b"} if bias else {}
    reads = {"Input": "x", "W": "w", **updated, "Out": "out", "Out@GRAD": "dout", "LearningRate": "lr"}
    writes = {"Input@GRAD": "dx", "WOut": "w", **({"BiasOut": "b"} if bias else {})}
    names = tuple(p.name for p in ops)
    creates = (Create("fc_grad_sgd", names, reads, writes, _fc_grad_attrs, at="first"),)
    return Pattern(name, tuple(ops), creates, _fc_sgd_where)


@register_pass
@dataclass(frozen=True)
class FuseFCSGD(RewritePass):
    """fc_grad and the sgd updates reading its dW and dBias into fc_grad_sgd (module docstring)."""

    name: ClassVar[str] = "fuse-fc-sgd"
    summary: ClassVar[str] = "fc_grad and the sgd updates of its W and Bias into fc_grad_sgd, at fc_grad's place"
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _fc_sgd_pattern("fc-sgd-bias", bias=True),
        _fc_sgd_pattern("fc-sgd", bias=False),
    )


# -- the pipeline ----------------------------------------------------------------------------------------


@register_pass
@dataclass(frozen=True)
class Fuse(Pipeline):
    """fold-conv-bn, fuse-conv-add-act, fuse-bn-act, max-pool-with-index, fuse-fc, fuse-elementwise-act,
    fuse-softmax-ce, fuse-fc-sgd and fuse-optimizer, each unless turned off (module docstring)."""

    name: ClassVar[str] = "fuse"
    summary: ClassVar[str] = (
        "the fusion passes the executor applies: fold-conv-bn, fuse-conv-add-act, fuse-bn-act, max-pool-with-index, "
        "fuse-fc, fuse-elementwise-act, fuse-softmax-ce, fuse-fc-sgd, fuse-optimizer"
    )

    keep: tuple[str, ...] = field(
        default=(), metadata={"help": "variables whose values must stay (fetched or fed): never fused away"}
    )
    conv_bn: bool = field(default=True, metadata={"help": "run fold-conv-bn (BuildStrategy.fuse_conv_bn)"})
    conv_add_act: bool = field(
        default=True, metadata={"help": "run fuse-conv-add-act (BuildStrategy.fuse_conv_add_act)"}
    )
    bn_act: bool = field(default=True, metadata={"help": "run fuse-bn-act (BuildStrategy.fuse_bn_act_ops)"})
    fc: bool = field(default=True, metadata={"help": "run fuse-fc (BuildStrategy.fuse_gemm_epilogue)"})
    elementwise_act: bool = field(
        default=True, metadata={"help": "run fuse-elementwise-act (BuildStrategy.fuse_elewise_add_act_ops)"}
    )
    softmax_ce: bool = field(
        default=True, metadata={"help": "run fuse-softmax-ce (BuildStrategy.fuse_softmax_with_cross_entropy)"}
    )
    optimizer: bool = field(
        default=True, metadata={"help": "run fuse-fc-sgd and fuse-optimizer (BuildStrategy.fuse_all_optimizer_ops)"}
    )
    max_pool_index: bool = field(
        default=True, metadata={"help": "run max-pool-with-index (BuildStrategy.max_pool_with_index)"}
    )

    def passes(self) -> list[Pass]:
        def rewrites(*chosen: tuple[bool, type[RewritePass]]) -> list[Pass]:
            return [cls(keep=self.keep) for on, cls in chosen if on]

        conv = rewrites((self.conv_bn, FoldConvBN), (self.conv_add_act, FuseConvAddAct), (self.bn_act, FuseBNAct))
        pooling: list[Pass] = [MaxPoolWithIndex()] if self.max_pool_index else []
        dense = rewrites(
            (self.fc, FuseFC), (self.elementwise_act, FuseElementwiseAct), (self.softmax_ce, FuseSoftmaxCE)
        )
        optimizer: list[Pass] = [FuseFCSGD(keep=self.keep), FuseOptimizer()] if self.optimizer else []
        return conv + pooling + dense + optimizer
