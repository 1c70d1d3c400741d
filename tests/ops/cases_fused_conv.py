"""Test cases of the fused ops of convolutional networks (blockir.ops.fused_conv), as data.

The references are the unfused ops' references (tests/ops/cases_conv.py's loop convolution, cases_norm.py's
channel-by-channel batch_norm) followed by the bias, residual and activation in float64, and the fold written
per output channel. Gradient cases use sigmoid and tanh (smooth: finite differences are exact enough).
"""

from __future__ import annotations

import numpy as np

from tests.ops.cases_conv import ref_conv
from tests.ops.cases_math import ACTIVATION_REFS, rand
from tests.ops.cases_norm import bn_params, ref_batch_norm
from tests.ops.harness import Case

# -- conv_bn_fold ----------------------------------------------------------------------------------------


def ref_fold(w: np.ndarray, conv_bias: np.ndarray | None, params: dict[str, np.ndarray], epsilon: float) -> dict:
    filter_out, bias_out = np.empty(w.shape), np.empty(w.shape[0])
    for m in range(w.shape[0]):
        k = float(params["Scale"][m]) / np.sqrt(float(params["Variance"][m]) + epsilon)
        filter_out[m] = w[m].astype(np.float64) * k
        shift = 0.0 if conv_bias is None else float(conv_bias[m])
        bias_out[m] = (shift - float(params["Mean"][m])) * k + float(params["Bias"][m])
    return {
        "FilterOut": filter_out.astype(w.dtype),
        "BiasOut": bias_out.astype(w.dtype),
        "MeanOut": params["Mean"],
        "VarianceOut": params["Variance"],
    }


def _fold_case(name: str, bias: bool, dtype: str = "float64", epsilon: float = 1e-5) -> Case:
    w, params = rand(4, 2, 3, 3, dtype=dtype), bn_params(4, dtype)
    conv_bias = rand(4, dtype=dtype) if bias else None
    inputs = {"Filter": w, **({"ConvBias": conv_bias} if bias else {}), **params}
    return Case(inputs, {"epsilon": epsilon}, ref_fold(w, conv_bias, params, epsilon), name=name)


CONV_BN_FOLD = [
    _fold_case("no_bias", bias=False),
    _fold_case("bias_float32", bias=True, dtype="float32", epsilon=1e-3),
]

# -- fused_conv2d_add_act --------------------------------------------------------------------------------


def _fused_conv_case(
    name: str, x_shape: tuple[int, ...], w_shape: tuple[int, ...], activation: str, residual: bool = False, **attrs
) -> Case:
    x, w, b = rand(*x_shape, dtype="float32"), rand(*w_shape, dtype="float32"), rand(w_shape[0], dtype="float32")
    nhwc = attrs.get("data_format") == "NHWC"
    conv = ref_conv(x.astype(np.float64), w.astype(np.float64), **attrs)
    pre = conv + (b if nhwc else b.reshape(-1, 1, 1))
    inputs = {"Input": x, "Filter": w, "Bias": b}
    if residual:
        inputs["ResidualData"] = rand(*pre.shape, dtype="float32")
        pre = pre + inputs["ResidualData"]
    out = pre if activation == "identity" else ACTIVATION_REFS[activation](pre)
    attrs = {"activation": activation, **attrs}
    return Case(inputs, attrs, {"Output": out.astype(np.float32)}, rtol=1e-4, atol=1e-4, name=name)


FUSED_CONV2D_ADD_ACT = [
    _fused_conv_case("relu_residual", (2, 3, 5, 5), (4, 3, 3, 3), "relu", residual=True, paddings=[1, 1]),
    _fused_conv_case("identity_groups_strides", (2, 4, 6, 6), (4, 2, 3, 3), "identity", groups=2, strides=[2, 2]),
    _fused_conv_case("sigmoid_nhwc", (1, 5, 5, 3), (2, 3, 1, 1), "sigmoid", data_format="NHWC"),
    _fused_conv_case("tanh_depthwise", (1, 3, 4, 4), (3, 1, 3, 3), "tanh", groups=3, paddings=[1, 1]),
]

# -- batch_norm_act --------------------------------------------------------------------------------------


def _bn_act_case(name: str, act: str, shape: tuple[int, ...], global_stats: bool = False, grad: bool = True) -> Case:
    x, params = rand(*shape), bn_params(shape[1])
    expected = ref_batch_norm(x, params, global_stats=global_stats)
    expected["Y"] = ACTIVATION_REFS[act](expected["Y"])
    attrs = {"act_type": act, "is_test": global_stats}
    return Case({"X": x, **params}, attrs, expected, grad=("X", "Scale", "Bias") if grad else (), name=name)


BATCH_NORM_ACT = [
    _bn_act_case("train_tanh", "tanh", (3, 2, 2, 3)),
    _bn_act_case("test_sigmoid", "sigmoid", (2, 3, 2), global_stats=True),
    _bn_act_case("train_relu", "relu", (4, 3), grad=False),
]

CASES: dict[str, list[Case]] = {
    "conv_bn_fold": CONV_BN_FOLD,
    "fused_conv2d_add_act": FUSED_CONV2D_ADD_ACT,
    "batch_norm_act": BATCH_NORM_ACT,
}

# -- bad input -------------------------------------------------------------------------------------------

_X, _W = np.zeros((1, 3, 5, 5), np.float32), np.zeros((4, 3, 3, 3), np.float32)
_B = np.zeros(4, np.float32)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    (
        "fused_conv2d_add_act",
        Case({"Input": _X, "Filter": _W, "Bias": _B}, {"split_channels": [2, 2]}),
        r"split_channels=\[2, 2\] \(Outputs\) is not supported",
    ),
    ("fused_conv2d_add_act", Case({"Input": _X, "Filter": _W, "Bias": _B}, {"activation": "swish"}), r"'swish'"),
    ("fused_conv2d_add_act", Case({"Input": _X, "Filter": _W, "Bias": _B[:3]}), r"Bias .* must have shape \[4\]"),
    (
        "fused_conv2d_add_act",
        Case({"Input": _X, "Filter": _W, "Bias": _B, "ResidualData": np.zeros((1, 4, 2, 2), np.float32)}),
        r"ResidualData .* must have Output's shape \[1, 4, 3, 3\]",
    ),
    ("conv_bn_fold", Case({"Filter": _W, **bn_params(3, "float32")}), r"Scale .* must have shape \[4\]"),
    ("batch_norm_act", Case({"X": rand(2, 3), **bn_params(3)}, {"act_type": "gelu"}), r"activation 'gelu'"),
]
