"""The fusion passes of convolutional networks: patterns of :mod:`blockir.passes.rewrite` into the ops of
:mod:`blockir.ops.fused_conv`.

``fold-conv-bn`` (Paddle's ``conv_bn_fuse_pass``)
    ``conv2d`` or ``depthwise_conv2d`` (NCHW or NHWC), optionally an ``elementwise_add`` of a bias ``[M]`` on
    its channel axis, then a ``batch_norm`` with global statistics (``is_test`` or ``use_global_stats``, what
    ``clone(for_test=True)`` and inference models have) into a helper ``conv_bn_fold``, which computes the
    folded filter ``FILTER@BN_FOLDED`` and bias ``Y@BN_FOLDED`` from the parameters (``W * k`` and
    ``(b - mean) * k + beta`` per output channel, ``k = gamma / sqrt(var + epsilon)``), and a
    ``fused_conv2d_add_act`` (``activation=identity``) reading them. The parameters must be persistable and
    written by no op of the program (the batch_norm's ``MeanOut`` and ``VarianceOut`` hand its statistics back
    unchanged: not writes), so that the helper, which remembers its results for the parameter arrays it is
    given, computes them at the first run and again only when a parameter is replaced in the scope or written
    in place by the executor (another program's optimizer step). The
    parameters are never written: the folded values are the plan's.
``fuse-conv-add-act`` (Paddle's ``conv_elementwise_add_act_fuse_pass`` and ``..._add2_act_...``)
    ``conv2d`` or ``depthwise_conv2d`` then an ``elementwise_add`` of a bias ``[M]`` on the channel axis into
    ``fused_conv2d_add_act`` (``identity``); a ``fused_conv2d_add_act`` with ``identity`` and no
    ``ResidualData`` then an ``elementwise_add`` of a value of its Output's shape (a residual connection)
    into its ``ResidualData``, and then (or directly) ``relu``, ``sigmoid`` or ``tanh`` into its
    ``activation``. Inference only: ``fused_conv2d_add_act`` has no gradient, and in a training program the
    gradient ops read the values that would vanish, so the engine refuses.
``fuse-bn-act``
    ``batch_norm`` then ``relu``, ``sigmoid`` or ``tanh`` into blockir's ``batch_norm_act``, and their gradient
    ops (the activation's, then ``batch_norm_grad``) into ``batch_norm_act_grad``: training and inference.
    Not a Paddle op: programs are exported unfused (the passes run on the executor's copy only), and
    :mod:`blockir.io.paddle` refuses a program holding one.

Floating-point inputs only. The ``fuse`` pipeline (:mod:`blockir.passes.fuse`) runs them first, in this order
(before ``fuse-elementwise-act``, which would take a bias add and its activation on their own), as
:class:`~blockir.runtime.compiled.BuildStrategy` says (``fuse_conv_bn``, ``fuse_conv_add_act``,
``fuse_bn_act``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from blockir.ir.dtypes import FLOAT_DTYPES
from blockir.ops.fused import ACTIVATIONS
from blockir.passes.base import register_pass
from blockir.passes.rewrite import Create, Fresh, Match, OpPattern, Pattern, RewritePass

__all__ = ["FoldConvBN", "FuseBNAct", "FuseConvAddAct"]

_ACTS = tuple(ACTIVATIONS)
_CONVS = ("conv2d", "depthwise_conv2d")
_SHARED_CONV_ATTRS = ("strides", "paddings", "padding_algorithm", "dilations", "groups", "data_format")
_BN_SLOTS = {"X": "x", "Scale": "scale", "Bias": "beta", "Mean": "mean", "Variance": "var"}
_BN_OUTPUTS = {
    "MeanOut": "mean",
    "VarianceOut": "var",
    "SavedMean": "saved_mean",
    "SavedVariance": "saved_var",
    "ReserveSpace": "reserve?",
}


def _float(match: Match, symbol: str) -> bool:
    return match.var(symbol).dtype in FLOAT_DTYPES


def _plain_conv(match: Match) -> bool:
    """A convolution with no oneDNN fusion attribute set, nor relu applied to its input first."""
    conv = match.op("conv")
    return _float(match, "x") and not conv.attr("fuse_relu_before_depthwise_conv")


def _channels(match: Match) -> int:
    """The output channels of the matched convolution (its Filter's dim 0)."""
    return (match.var("w").shape or (-1,))[0]


def _bias_on_channels(match: Match, add: str, bias: str) -> bool:
    """The add ``add`` puts a ``[M]`` ``bias`` on the convolution's channel axis (1 for NCHW, 3 or -1 for NHWC)."""
    b, axis = match.var(bias).shape, match.op(add).attr("axis")
    channel_last = match.op("conv").attr("data_format") == "NHWC"
    return b == (_channels(match),) and b[0] > 0 and axis in ((3, -1) if channel_last else (1,))


def _conv_attrs(match: Match, activation: str = "identity") -> dict[str, Any]:
    conv = match.op("conv")
    return {**{name: conv.attr(name) for name in _SHARED_CONV_ATTRS}, "activation": activation}


# -- fold-conv-bn ----------------------------------------------------------------------------------------


def _global_stats(match: Match) -> bool:
    bn = match.op("bn")
    return bool((bn.attr("is_test") and not bn.attr("trainable_statistics")) or bn.attr("use_global_stats"))


def _read_only(match: Match, symbols: tuple[str, ...]) -> bool:
    """The variables of ``symbols`` are persistable and no op of the program but the matched batch_norm (which
    hands Mean and Variance back) writes them."""
    bound = [s for s in symbols if match.values.get(s) is not None]
    if not all(match.var(s).persistable for s in bound):
        return False
    names = {match.values[s] for s in bound}
    bn = match.op("bn")
    program = match.block.program
    return not any(op is not bn and names & set(op.output_names()) for b in program.blocks for op in b.ops)


def _fold_where(match: Match) -> bool:
    bn = match.op("bn")
    channel_last = match.op("conv").attr("data_format") == "NHWC"
    return (
        _plain_conv(match)
        and _global_stats(match)
        and bn.attr("data_layout") == ("NHWC" if channel_last else "NCHW")
        and ("add" not in match.ops or _bias_on_channels(match, "add", "b"))
        and _read_only(match, ("w", "b", "scale", "beta", "mean", "var"))
    )


def _filter_spec(match: Match) -> tuple[tuple[int, ...], str]:
    w = match.var("w")
    return tuple(w.shape or ()), str(w.dtype)


def _bias_spec(match: Match) -> tuple[tuple[int, ...], str]:
    return (_channels(match),), str(match.var("w").dtype)


def _fold_pattern(name: str, bias: bool) -> Pattern:
    conv_out = "t" if bias else "c"
    ops = [OpPattern("conv", _CONVS, {"Input": "x", "Filter": "w"}, {"Output": "c"})]
    if bias:
        ops.append(OpPattern("add", ("elementwise_add",), {"X": "c", "Y": "b"}, {"Out": "t"}))
    ops.append(
        OpPattern(
            "bn",
            ("batch_norm",),
            {**_BN_SLOTS, "X": conv_out, "MomentumTensor": "momentum?"},
            {"Y": "y", **_BN_OUTPUTS},
            passes=("MeanOut", "VarianceOut"),
        )
    )
    fold_inputs = {
        "Filter": "w",
        **({"ConvBias": "b"} if bias else {}),
        "Scale": "scale",
        "Bias": "beta",
        "Mean": "mean",
        "Variance": "var",
    }
    creates = (
        Create(
            "conv_bn_fold",
            (),
            fold_inputs,
            {"FilterOut": "w2", "BiasOut": "b2"},
            lambda m: {"epsilon": m.op("bn").attr("epsilon")},
        ),
        Create(
            "fused_conv2d_add_act",
            tuple(p.name for p in ops),
            {"Input": "x", "Filter": "w2", "Bias": "b2"},
            {"Output": "y"},
            _conv_attrs,
        ),
    )
    fresh = {"w2": Fresh("w", "BN_FOLDED", _filter_spec), "b2": Fresh("y", "BN_FOLDED", _bias_spec)}
    return Pattern(name, tuple(ops), creates, _fold_where, fresh)


@register_pass
@dataclass(frozen=True)
class FoldConvBN(RewritePass):
    """conv2d (+ bias add) + inference batch_norm into conv_bn_fold + fused_conv2d_add_act (module docstring)."""

    name: ClassVar[str] = "fold-conv-bn"
    summary: ClassVar[str] = (
        "conv2d (+ elementwise_add bias) + batch_norm with global statistics: the batch_norm folded into the "
        "convolution's filter and bias (conv_bn_fold, computed once per parameter arrays) and a fused_conv2d_add_act"
    )
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _fold_pattern("conv-bias-bn", bias=True),
        _fold_pattern("conv-bn", bias=False),
    )


# -- fuse-conv-add-act -----------------------------------------------------------------------------------


def _conv_bias_where(match: Match) -> bool:
    return _plain_conv(match) and _bias_on_channels(match, "add", "b")


def _conv_bias_pattern() -> Pattern:
    ops = (
        OpPattern("conv", _CONVS, {"Input": "x", "Filter": "w"}, {"Output": "c"}),
        OpPattern("add", ("elementwise_add",), {"X": "c", "Y": "b"}, {"Out": "out"}),
    )
    create = Create(
        "fused_conv2d_add_act",
        ("conv", "add"),
        {"Input": "x", "Filter": "w", "Bias": "b"},
        {"Output": "out"},
        _conv_attrs,
    )
    return Pattern("conv-bias", ops, (create,), _conv_bias_where)


def _fused_attrs(match: Match) -> dict[str, Any]:
    """The matched fused_conv2d_add_act's attributes, with the matched activation's."""
    return _conv_attrs(match, match.op("act").type if "act" in match.ops else "identity")


def _residual_where(match: Match) -> bool:
    """The add's other operand has the convolution's Output shape (a residual connection, not a broadcast)."""
    if "add" not in match.ops:
        return True
    r, out = match.var("r").shape, match.var("c").shape
    return r is not None and r == out and match.op("add").attr("axis") in (-1, 0)


def _fused_pattern(name: str, residual: str, act: bool) -> Pattern:
    """A fused_conv2d_add_act with activation identity and no ResidualData, then an elementwise_add of a residual
    (``residual``: the slot, ``X`` or ``Y``, the fused op's Output takes; "" for none) and (``act``) an
    activation."""
    ops = [
        OpPattern(
            "conv",
            ("fused_conv2d_add_act",),
            {"Input": "x", "Filter": "w", "Bias": "b"},
            {"Output": "c"},
            {"activation": "identity", "split_channels": []},
        )
    ]
    last = "c"
    if residual:
        other = "Y" if residual == "X" else "X"
        last = "s" if act else "out"
        ops.append(OpPattern("add", ("elementwise_add",), {residual: "c", other: "r"}, {"Out": last}))
    if act:
        ops.append(OpPattern("act", _ACTS, {"X": last}, {"Out": "out"}))
    inputs = {"Input": "x", "Filter": "w", "Bias": "b", **({"ResidualData": "r"} if residual else {})}
    create = Create("fused_conv2d_add_act", tuple(p.name for p in ops), inputs, {"Output": "out"}, _fused_attrs)
    return Pattern(name, tuple(ops), (create,), _residual_where)


@register_pass
@dataclass(frozen=True)
class FuseConvAddAct(RewritePass):
    """conv2d + bias add, then a residual add and an activation, into fused_conv2d_add_act (module docstring)."""

    name: ClassVar[str] = "fuse-conv-add-act"
    summary: ClassVar[str] = (
        "conv2d + elementwise_add bias (+ elementwise_add residual) (+ relu/sigmoid/tanh) into fused_conv2d_add_act"
    )
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _fused_pattern("conv-residual-act", "X", act=True),
        _fused_pattern("residual-conv-act", "Y", act=True),
        _fused_pattern("conv-act", "", act=True),
        _fused_pattern("conv-residual", "X", act=False),
        _fused_pattern("residual-conv", "Y", act=False),
        _conv_bias_pattern(),
    )


# -- fuse-bn-act -----------------------------------------------------------------------------------------

_BN_ATTRS = ("momentum", "epsilon", "is_test", "data_layout", "use_global_stats", "trainable_statistics")


def _bn_act_where(match: Match) -> bool:
    ok = _float(match, "x") and not match.op("bn").attr("fuse_with_relu")
    if "act_grad" in match.ops:
        ok = ok and match.op("act_grad").type == f"{match.op('act').type}_grad"
        ok = ok and all(match.op("bn").attr(a) == match.op("bn_grad").attr(a) for a in _BN_ATTRS)
    return ok


def _bn_act_attrs(match: Match) -> dict[str, Any]:
    bn = match.op("bn")
    return {**{name: bn.attr(name) for name in _BN_ATTRS}, "act_type": match.op("act").type}


def _bn_act_pattern(name: str, grad: bool) -> Pattern:
    outputs = {**_BN_OUTPUTS, "MeanOut": "mean_out", "VarianceOut": "var_out"}
    ops = [
        OpPattern("bn", ("batch_norm",), {**_BN_SLOTS, "MomentumTensor": "momentum?"}, {"Y": "s", **outputs}),
        OpPattern("act", _ACTS, {"X": "s"}, {"Out": "y"}),
    ]
    bn_inputs = {**_BN_SLOTS, "MomentumTensor": "momentum?"}
    creates = [Create("batch_norm_act", ("bn", "act"), bn_inputs, {"Y": "y", **outputs}, _bn_act_attrs)]
    if grad:
        grad_reads = {
            "X": "x",
            "Scale": "scale",
            "Bias": "beta?",
            "Mean": "g_mean?",
            "Variance": "g_var?",
            "SavedMean": "saved_mean",
            "SavedVariance": "saved_var",
            "ReserveSpace": "reserve?",
        }
        ops += [
            OpPattern("act_grad", tuple(f"{a}_grad" for a in _ACTS), {"Out": "y", "Out@GRAD": "dy"}, {"X@GRAD": "ds"}),
            OpPattern(
                "bn_grad",
                ("batch_norm_grad",),
                {**grad_reads, "Y@GRAD": "ds"},
                {"X@GRAD": "dx?", "Scale@GRAD": "dscale?", "Bias@GRAD": "dbeta?"},
            ),
        ]
        creates.append(
            Create(
                "batch_norm_act_grad",
                ("act_grad", "bn_grad"),
                {**grad_reads, "Y": "y", "Y@GRAD": "dy"},
                {"X@GRAD": "dx", "Scale@GRAD": "dscale", "Bias@GRAD": "dbeta"},
                _bn_act_attrs,
            )
        )
    return Pattern(name, tuple(ops), tuple(creates), _bn_act_where)


@register_pass
@dataclass(frozen=True)
class FuseBNAct(RewritePass):
    """batch_norm + activation into batch_norm_act, their gradient ops into its gradient (module docstring)."""

    name: ClassVar[str] = "fuse-bn-act"
    summary: ClassVar[str] = (
        "batch_norm + relu/sigmoid/tanh into batch_norm_act (blockir's, not exported), their gradient ops into "
        "batch_norm_act_grad"
    )
    patterns: ClassVar[tuple[Pattern, ...]] = (
        _bn_act_pattern("bn-act-train", grad=True),
        _bn_act_pattern("bn-act", grad=False),
    )
