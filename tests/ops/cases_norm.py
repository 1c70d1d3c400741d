"""Test cases of the norm ops (blockir.ops.norm), as data: expected values in plain numpy.

References loop over channels (batch_norm) and rows (layer_norm) in float64 and cast at
the end. dropout's training mask is random: its cases check the exact values where
none is random (a test, dropout_prob 0 or 1) or the seed fixes it (``fix_seed`` or a
``Seed`` tensor: numpy's legacy ``RandomState(seed)`` draw, which finite differences see
unchanged at every run, so they check the gradient through it); the mask's statistics,
seeds and scaling are tested through programs in ``tests/dsl/test_layers_norm.py``.
"""

from __future__ import annotations

import numpy as np

from blockir.ops.values import LoDTensor
from tests.ops.harness import Case

RNG = np.random.default_rng(20240610)


def rand(*shape: int, dtype: str = "float64", low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return RNG.uniform(low, high, size=shape).astype(dtype)


def positive(*shape: int, dtype: str = "float64") -> np.ndarray:
    return rand(*shape, dtype=dtype, low=0.5, high=2.0)


# -- batch_norm ------------------------------------------------------------------------------------


def ref_batch_norm(
    x: np.ndarray,
    params: dict[str, np.ndarray],
    layout: str = "NCHW",
    momentum: float = 0.9,
    epsilon: float = 1e-5,
    global_stats: bool = False,
) -> dict[str, np.ndarray]:
    """Paddle's batch_norm outputs, channel by channel in float64."""
    dtype = params["Scale"].dtype
    axis = 1 if layout == "NCHW" and x.ndim > 2 else x.ndim - 1
    channels = np.moveaxis(x.astype(np.float64), axis, 0)
    y = np.empty_like(channels)
    mean_out, var_out, saved_mean, saved_inv_std = (np.zeros(len(channels)) for _ in range(4))
    for c, values in enumerate(channels):
        running_mean, running_var = float(params["Mean"][c]), float(params["Variance"][c])
        if global_stats:
            mu, var = running_mean, running_var
            mean_out[c], var_out[c] = running_mean, running_var
        else:
            mu = values.sum() / values.size
            var = ((values - mu) ** 2).sum() / values.size  # biased
            mean_out[c] = momentum * running_mean + (1 - momentum) * mu
            var_out[c] = momentum * running_var + (1 - momentum) * var
        saved_mean[c], saved_inv_std[c] = mu, 1.0 / np.sqrt(var + epsilon)
        y[c] = (values - mu) * saved_inv_std[c] * float(params["Scale"][c]) + float(params["Bias"][c])
    return {
        "Y": np.moveaxis(y, 0, axis).astype(x.dtype),
        "MeanOut": mean_out.astype(dtype),
        "VarianceOut": var_out.astype(dtype),
        "SavedMean": saved_mean.astype(dtype),
        "SavedVariance": saved_inv_std.astype(dtype),
    }


def bn_params(channels: int, dtype: str = "float64") -> dict[str, np.ndarray]:
    return {
        "Scale": rand(channels, dtype=dtype),
        "Bias": rand(channels, dtype=dtype),
        "Mean": rand(channels, dtype=dtype, low=-0.5, high=0.5),
        "Variance": positive(channels, dtype=dtype),
    }


def _bn_case(
    shape: tuple[int, ...],
    name: str,
    dtype: str = "float64",
    layout: str = "NCHW",
    attrs: dict | None = None,
    global_stats: bool = False,
    momentum_tensor: float | None = None,
    offset: float = 0.0,
) -> Case:
    attrs = {"data_layout": layout, **(attrs or {})}
    x = (rand(*shape) + offset).astype(dtype)
    channels = shape[1] if layout == "NCHW" else shape[-1]
    params = bn_params(channels, "float32" if dtype == "float16" else dtype)
    inputs: dict = {"X": x, **params}
    momentum = attrs.get("momentum", 0.9)
    if momentum_tensor is not None:
        inputs["MomentumTensor"] = np.array([momentum_tensor], np.float32)
        momentum = momentum_tensor
    expected = ref_batch_norm(x, params, layout, momentum, attrs.get("epsilon", 1e-5), global_stats)
    tolerance = {"float16": (2e-3, 2e-3), "float32": (1e-4, 1e-5)}.get(dtype, (1e-6, 1e-7))
    return Case(
        inputs,
        attrs,
        expected,
        grad=("X", "Scale", "Bias") if dtype == "float64" else (),
        rtol=tolerance[0],
        atol=tolerance[1],
        name=name,
    )


def _bn_single_value_case() -> Case:
    """One value per channel in training: Paddle passes X through and keeps the running statistics."""
    x = rand(1, 3)
    params = bn_params(3)
    expected = {
        "Y": x.copy(),
        "MeanOut": params["Mean"].copy(),
        "VarianceOut": params["Variance"].copy(),
        "SavedMean": np.zeros(3),
        "SavedVariance": np.zeros(3),
    }
    return Case({"X": x, **params}, {}, expected, grad=("X", "Scale", "Bias"), name="one_value_per_channel")


def _bn_lod_case() -> Case:
    lod = [[0, 1, 4]]
    x, params = rand(4, 3), bn_params(3)
    expected = ref_batch_norm(x, params)
    expected["Y"] = LoDTensor(expected["Y"], lod)
    return Case({"X": x, **params}, {}, expected, grad=("X",), lod={"X": lod}, name="lod_shared")


BATCH_NORM = [
    _bn_case((2, 3, 4, 5), "train_nchw_float32", dtype="float32"),
    _bn_case((2, 3, 2, 2), "train_nchw_float64"),
    _bn_case((2, 2, 3, 3), "train_nhwc", layout="NHWC"),
    _bn_case((3, 2, 4), "train_rank3_nchw"),
    _bn_case((2, 3, 2, 4), "train_rank4_nhwc_float32", dtype="float32", layout="NHWC"),
    _bn_case((2, 2, 2, 2, 3), "train_rank5_nchw_float32", dtype="float32"),
    _bn_case((5, 3), "train_rank2"),
    # the mean far from 0 next to the spread: E[x^2] - E[x]^2 from float32 sums would lose the variance, which is
    # taken from X minus the mean (and the gradient's sums likewise)
    _bn_case((4, 3, 6, 6), "train_far_from_zero_float32", dtype="float32", offset=30.0),
    _bn_case((2, 3, 5, 4), "train_far_from_zero_nhwc_float32", dtype="float32", layout="NHWC", offset=30.0),
    _bn_case((3, 2, 3, 3), "train_far_from_zero", offset=30.0),
    _bn_case((3, 3, 2, 2), "train_far_from_zero_nhwc", layout="NHWC", offset=30.0),
    _bn_case((5, 3), "train_rank2_nhwc", layout="NHWC"),
    _bn_case((4, 3, 2), "momentum_and_epsilon", attrs={"momentum": 0.5, "epsilon": 1e-3}),
    _bn_case((4, 3, 2), "momentum_tensor_wins", attrs={"momentum": 0.5}, momentum_tensor=0.25),
    _bn_case((2, 3, 2, 2), "is_test_float32", dtype="float32", attrs={"is_test": True}, global_stats=True),
    _bn_case((2, 3, 2, 2), "is_test", attrs={"is_test": True}, global_stats=True),
    _bn_case((2, 2, 3), "is_test_nhwc", layout="NHWC", attrs={"is_test": True}, global_stats=True),
    _bn_case((3, 2, 2), "use_global_stats", attrs={"use_global_stats": True}, global_stats=True),
    _bn_case((3, 2, 2), "is_test_trainable_statistics", attrs={"is_test": True, "trainable_statistics": True}),
    _bn_case((2, 3, 2, 2), "float16_x_float32_params", dtype="float16"),
    _bn_case((2, 3, 2), "non_semantic_attrs", attrs={"use_mkldnn": True, "fuse_with_relu": False, "momentum": 0.8}),
    _bn_single_value_case(),
    _bn_lod_case(),
]

# -- layer_norm -----------------------------------------------------------------------------------


def ref_layer_norm(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, begin: int = 1, epsilon: float = 1e-5
) -> dict[str, np.ndarray]:
    """Paddle's layer_norm outputs, row by row in float64."""
    dtype = "float32" if x.dtype == np.float16 else x.dtype
    left = int(np.prod(x.shape[:begin]))
    rows = x.astype(np.float64).reshape(left, -1)
    y = np.empty_like(rows)
    mean, var = np.zeros(left), np.zeros(left)
    for i, row in enumerate(rows):
        mean[i] = row.sum() / row.size
        var[i] = ((row - mean[i]) ** 2).sum() / row.size
        for j, value in enumerate(row):
            out = (value - mean[i]) / np.sqrt(var[i] + epsilon)
            if scale is not None:
                out *= float(scale[j])
            if bias is not None:
                out += float(bias[j])
            y[i, j] = out
    return {"Y": y.reshape(x.shape).astype(x.dtype), "Mean": mean.astype(dtype), "Variance": var.astype(dtype)}


def _ln_case(
    shape: tuple[int, ...],
    name: str,
    begin: int = 1,
    dtype: str = "float64",
    scale: bool = True,
    shift: bool = True,
    epsilon: float = 1e-5,
) -> Case:
    x = rand(*shape, dtype=dtype)
    width = int(np.prod(shape[begin:]))
    pdtype = "float32" if dtype == "float16" else dtype
    inputs: dict = {"X": x}
    if scale:
        inputs["Scale"] = rand(width, dtype=pdtype)
    if shift:
        inputs["Bias"] = rand(width, dtype=pdtype)
    tolerance = {"float16": (2e-3, 2e-3), "float32": (1e-4, 1e-5)}.get(dtype, (1e-6, 1e-7))
    return Case(
        inputs,
        {"begin_norm_axis": begin, "epsilon": epsilon},
        ref_layer_norm(x, inputs.get("Scale"), inputs.get("Bias"), begin, epsilon),
        grad=tuple(s for s in ("X", "Scale", "Bias") if s in inputs) if dtype == "float64" else (),
        rtol=tolerance[0],
        atol=tolerance[1],
        name=name,
    )


def _ln_lod_case() -> Case:
    lod = [[0, 2, 3]]
    x, scale, bias = rand(3, 4), rand(4), rand(4)
    expected = ref_layer_norm(x, scale, bias)
    expected["Y"] = LoDTensor(expected["Y"], lod)
    return Case(
        {"X": x, "Scale": scale, "Bias": bias}, {}, expected, grad=("X", "Scale"), lod={"X": lod}, name="lod_shared"
    )


LAYER_NORM = [
    _ln_case((4, 6), "rank2_float32", dtype="float32"),
    _ln_case((3, 5), "rank2"),
    _ln_case((2, 3, 4), "rank3_begin1"),
    _ln_case((2, 3, 4), "rank3_begin2", begin=2),
    _ln_case((2, 2, 3, 2), "rank4_begin3_float32", begin=3, dtype="float32"),
    _ln_case((2, 3, 2), "begin0_whole_tensor", begin=0),
    _ln_case((3, 4), "no_scale_no_bias", scale=False, shift=False),
    _ln_case((3, 4), "scale_only", shift=False),
    _ln_case((3, 4), "bias_only", scale=False),
    _ln_case((3, 4), "large_epsilon", epsilon=0.5),
    _ln_case((2, 3, 4), "float16_x_float32_params", dtype="float16"),
    _ln_lod_case(),
    Case(
        {"X": np.full((2, 3), 1.5, np.float32)},
        {},
        {"Y": np.zeros((2, 3), np.float32), "Mean": np.full(2, 1.5, np.float32), "Variance": np.zeros(2, np.float32)},
        name="constant_rows_give_zeros",
    ),
]

# -- group_norm and instance_norm ----------------------------------------------------------------------------


def ref_group_norm(
    x: np.ndarray,
    scale: np.ndarray | None,
    bias: np.ndarray | None,
    groups: int,
    layout: str = "NCHW",
    epsilon: float = 1e-5,
) -> dict[str, np.ndarray]:
    """Paddle's group_norm outputs, image by image and group by group in float64."""
    dtype = "float32" if x.dtype == np.float16 else x.dtype
    xc = np.moveaxis(x.astype(np.float64), -1, 1) if layout == "NHWC" else x.astype(np.float64)
    n, c = xc.shape[:2]
    per = c // groups
    y = np.empty_like(xc)
    mean, var = np.zeros((n, groups)), np.zeros((n, groups))
    for i in range(n):
        for g in range(groups):
            values = xc[i, g * per : (g + 1) * per]
            mean[i, g] = values.sum() / values.size
            var[i, g] = ((values - mean[i, g]) ** 2).sum() / values.size
            for k in range(g * per, (g + 1) * per):
                out = (xc[i, k] - mean[i, g]) / np.sqrt(var[i, g] + epsilon)
                y[i, k] = out * (1.0 if scale is None else float(scale[k])) + (0.0 if bias is None else float(bias[k]))
    y = np.moveaxis(y, 1, -1) if layout == "NHWC" else y
    return {"Y": y.astype(x.dtype), "Mean": mean.astype(dtype), "Variance": var.astype(dtype)}


def _gn_case(
    shape: tuple[int, ...],
    groups: int,
    name: str,
    dtype: str = "float64",
    layout: str = "NCHW",
    affine: bool = True,
    epsilon: float = 1e-5,
) -> Case:
    x = rand(*shape, dtype=dtype)
    channels = shape[-1] if layout == "NHWC" else shape[1]
    pdtype = "float32" if dtype == "float16" else dtype
    inputs: dict = {"X": x}
    if affine:
        inputs.update(Scale=rand(channels, dtype=pdtype), Bias=rand(channels, dtype=pdtype))
    tolerance = {"float16": (2e-3, 2e-3), "float32": (1e-4, 1e-5)}.get(dtype, (1e-6, 1e-7))
    return Case(
        inputs,
        {"groups": groups, "data_layout": layout, "epsilon": epsilon},
        ref_group_norm(x, inputs.get("Scale"), inputs.get("Bias"), groups, layout, epsilon),
        grad=tuple(inputs) if dtype == "float64" else (),
        rtol=tolerance[0],
        atol=tolerance[1],
        name=name,
    )


GROUP_NORM = [
    _gn_case((2, 4, 3, 3), 2, "nchw_float32", dtype="float32"),
    _gn_case((2, 6, 2, 3), 3, "nchw"),
    _gn_case((3, 4, 5), 4, "rank3_one_channel_per_group"),
    _gn_case((2, 4, 2, 2, 2), 1, "rank5_one_group", epsilon=1e-3),
    _gn_case((3, 6), 2, "rank2"),
    _gn_case((2, 3, 2, 4), 2, "nhwc", layout="NHWC"),
    _gn_case((2, 2, 3, 6), 3, "nhwc_float32", dtype="float32", layout="NHWC"),
    _gn_case((2, 4, 3), 2, "no_scale_no_bias", affine=False),
    _gn_case((2, 4, 2, 2), 2, "float16_x_float32_params", dtype="float16"),
]


def ref_instance_norm(
    x: np.ndarray, scale: np.ndarray | None, bias: np.ndarray | None, epsilon: float = 1e-5
) -> dict[str, np.ndarray]:
    """Paddle's instance_norm outputs, image by image and channel by channel in float64; SavedVariance is the
    inverse standard deviation."""
    dtype = "float32" if x.dtype == np.float16 else x.dtype
    xc = x.astype(np.float64)
    n, c = x.shape[:2]
    y = np.empty_like(xc)
    mean, inv_std = np.zeros(n * c), np.zeros(n * c)
    for i in range(n):
        for k in range(c):
            values = xc[i, k]
            mu = values.sum() / values.size
            mean[i * c + k] = mu
            inv_std[i * c + k] = 1.0 / np.sqrt(((values - mu) ** 2).sum() / values.size + epsilon)
            out = (values - mu) * inv_std[i * c + k]
            y[i, k] = out * (1.0 if scale is None else float(scale[k])) + (0.0 if bias is None else float(bias[k]))
    return {"Y": y.astype(x.dtype), "SavedMean": mean.astype(dtype), "SavedVariance": inv_std.astype(dtype)}


def _in_case(
    shape: tuple[int, ...], name: str, dtype: str = "float64", affine: bool = True, epsilon: float = 1e-5
) -> Case:
    x = rand(*shape, dtype=dtype)
    pdtype = "float32" if dtype == "float16" else dtype
    inputs: dict = {"X": x}
    if affine:
        inputs.update(Scale=rand(shape[1], dtype=pdtype), Bias=rand(shape[1], dtype=pdtype))
    tolerance = {"float16": (2e-3, 2e-3), "float32": (1e-4, 1e-5)}.get(dtype, (1e-6, 1e-7))
    return Case(
        inputs,
        {"epsilon": epsilon},
        ref_instance_norm(x, inputs.get("Scale"), inputs.get("Bias"), epsilon),
        grad=tuple(inputs) if dtype == "float64" else (),
        rtol=tolerance[0],
        atol=tolerance[1],
        name=name,
    )


INSTANCE_NORM = [
    _in_case((2, 3, 4, 4), "nchw_float32", dtype="float32"),
    _in_case((2, 3, 3, 2), "nchw"),
    _in_case((3, 2, 5), "rank3", epsilon=1e-3),
    _in_case((2, 2, 2, 3, 2), "rank5"),
    _in_case((2, 3, 2, 3), "no_scale_no_bias", affine=False),
    _in_case((2, 2, 3, 3), "float16_x_float32_params", dtype="float16"),
]

# -- dropout -----------------------------------------------------------------------------------------

DOWNGRADE, UPSCALE = "downgrade_in_infer", "upscale_in_train"


def _dropout_test_case(x: np.ndarray, p: float, implementation: str, name: str) -> Case:
    factor = 1.0 if implementation == UPSCALE else 1.0 - p
    expected = np.array([v * factor for v in x.reshape(-1).tolist()]).reshape(x.shape).astype(x.dtype)
    return Case(
        {"X": x},
        {"dropout_prob": p, "is_test": True, "dropout_implementation": implementation},
        {"Out": expected},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


def _dropout_fixed_case(p: float, implementation: str, expected_scale: float | None, name: str) -> Case:
    """dropout_prob 0 keeps everything, 1 drops everything: Out is exact whatever the draw."""
    x = rand(3, 4)
    if expected_scale is None:
        expected = {"Out": np.zeros((3, 4)), "Mask": np.zeros((3, 4), np.uint8)}
    else:
        expected = {"Out": x * expected_scale, "Mask": np.ones((3, 4), np.uint8)}
    return Case(
        {"X": x},
        {"dropout_prob": p, "dropout_implementation": implementation},
        expected,
        grad=("X",),
        name=name,
    )


def _dropout_seeded_case(implementation: str, name: str, seed: int, seed_tensor: bool = False) -> Case:
    """Training with a fixed seed: the mask of numpy's legacy RandomState(seed) (ONNX's reference draw), the
    same at every run, so finite differences check the gradient."""
    x, p = rand(4, 5), 0.4
    inputs: dict = {"X": x}
    attrs: dict = {"dropout_prob": p, "dropout_implementation": implementation}
    if seed_tensor:
        inputs["Seed"] = np.array([seed], np.int32)
    else:
        attrs.update(fix_seed=True, seed=seed)
    mask = np.random.RandomState(seed % 2**32).uniform(0.0, 1.0, x.shape) >= p
    out = mask * x / (1.0 - p) if implementation == UPSCALE else mask * x
    return Case(inputs, attrs, {"Out": out, "Mask": mask.astype(np.uint8)}, grad=("X",), name=name)


DROPOUT = [
    _dropout_test_case(rand(3, 4, dtype="float32"), 0.3, DOWNGRADE, "test_downgrade_float32"),
    _dropout_test_case(rand(2, 3, 2), 0.25, DOWNGRADE, "test_downgrade_float64"),
    _dropout_test_case(rand(3, 4, dtype="float32"), 0.3, UPSCALE, "test_upscale_float32"),
    _dropout_test_case(rand(5), 0.6, UPSCALE, "test_upscale_float64"),
    _dropout_test_case(rand(2, 2, dtype="float16"), 0.5, DOWNGRADE, "test_downgrade_float16"),
    _dropout_fixed_case(0.0, DOWNGRADE, 1.0, "train_p0_downgrade_keeps_all"),
    _dropout_fixed_case(0.0, UPSCALE, 1.0, "train_p0_upscale_keeps_all"),
    _dropout_fixed_case(1.0, DOWNGRADE, None, "train_p1_downgrade_drops_all"),
    _dropout_fixed_case(1.0, UPSCALE, None, "train_p1_upscale_drops_all"),
    _dropout_seeded_case(DOWNGRADE, "train_fix_seed_downgrade", 7),
    _dropout_seeded_case(UPSCALE, "train_fix_seed_upscale", 0),
    _dropout_seeded_case(UPSCALE, "train_fix_seed_negative", -3),
    _dropout_seeded_case(UPSCALE, "train_seed_tensor", 123, seed_tensor=True),
    Case(
        {"X": np.arange(6.0).reshape(3, 2)},
        {"dropout_prob": 0.2, "is_test": True},
        {"Out": LoDTensor(np.arange(6.0).reshape(3, 2) * 0.8, [[0, 1, 3]])},
        grad=("X",),
        lod={"X": [[0, 1, 3]]},
        name="lod_shared",
    ),
]

CASES: dict[str, list[Case]] = {
    "batch_norm": BATCH_NORM,
    "layer_norm": LAYER_NORM,
    "group_norm": GROUP_NORM,
    "instance_norm": INSTANCE_NORM,
    "dropout": DROPOUT,
}

# -- bad input --------------------------------------------------------------------------------------


def _bn(x: np.ndarray, **overrides: np.ndarray) -> dict[str, np.ndarray]:
    return {"X": x, **bn_params(x.shape[1], x.dtype.name if x.dtype != np.float16 else "float32"), **overrides}


INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("batch_norm", Case(_bn(rand(2, 3, 4)), {"data_layout": "NCDHW"}), r"data_layout 'NCDHW' is not supported"),
    ("batch_norm", Case(_bn(rand(2, 3, 4)), {"epsilon": -1.0}), r"epsilon -1 must not be negative"),
    ("batch_norm", Case({**_bn(rand(2, 3)), "X": rand(3)}), r"X 'in.X' \(float64 \[3\]\) must have rank 2 or more"),
    ("batch_norm", Case(_bn(rand(2, 3, 0))), r"X 'in.X' \(float64 \[2, 3, 0\]\) must not have a zero dimension"),
    (
        "batch_norm",
        Case(_bn(rand(2, 3, 4), Scale=rand(4))),
        r"Scale 'in.Scale' \(float64 \[4\]\) must have shape \[3\]",
    ),
    (
        "batch_norm",
        Case(_bn(rand(2, 3, 4), Bias=rand(3, 1))),
        r"Bias 'in.Bias' \(float64 \[3, 1\]\) must have shape \[3\]",
    ),
    (
        "batch_norm",
        Case(_bn(rand(2, 4, 3)), {"data_layout": "NHWC"}),
        r"Scale 'in.Scale' \(float64 \[4\]\) must have shape \[3\]",
    ),
    (
        "batch_norm",
        Case(_bn(rand(2, 3, dtype="float32"), Mean=rand(3))),
        r"Mean 'in.Mean' \(float64 \[3\]\) must have dtype float32",
    ),
    (
        "batch_norm",
        Case(_bn(rand(2, 3, dtype="float16"), Scale=rand(3, dtype="float16"))),
        r"Scale 'in.Scale' \(float16 \[3\]\) must have dtype float32",
    ),
    (
        "batch_norm",
        Case({**_bn(rand(2, 3)), "X": np.ones((2, 3), np.int64)}),
        r"X 'in.X' \(int64 \[2, 3\]\) has dtype int64",
    ),
    (
        "batch_norm",
        Case({**_bn(rand(2, 3)), "MomentumTensor": np.array([0.1, 0.2], np.float32)}),
        r"MomentumTensor 'in.MomentumTensor' \(float32 \[2\]\) must hold one value",
    ),
    ("layer_norm", Case({"X": rand(2, 3)}, {"begin_norm_axis": 2}), r"begin_norm_axis 2 must be in \[0, 2\)"),
    ("layer_norm", Case({"X": rand(2, 3)}, {"begin_norm_axis": -1}), r"begin_norm_axis -1 must be in \[0, 2\)"),
    ("layer_norm", Case({"X": rand(2, 3)}, {"epsilon": -0.1}), r"epsilon -0.1 must not be negative"),
    ("layer_norm", Case({"X": rand(2, 0)}), r"X 'in.X' \(float64 \[2, 0\]\) has no values to normalize"),
    (
        "layer_norm",
        Case({"X": rand(2, 3, 4), "Scale": rand(4)}),
        r"Scale 'in.Scale' \(float64 \[4\]\) must have shape \[12\]",
    ),
    (
        "layer_norm",
        Case({"X": rand(2, 3, 4), "Bias": rand(3, 4)}, {"begin_norm_axis": 1}),
        r"Bias 'in.Bias' \(float64 \[3, 4\]\) must have shape \[12\]",
    ),
    (
        "layer_norm",
        Case({"X": rand(2, 3, dtype="float32"), "Scale": rand(3)}),
        r"Scale 'in.Scale' \(float64 \[3\]\) must have dtype float32",
    ),
    ("layer_norm", Case({"X": np.ones((2, 3), np.int32)}), r"X 'in.X' \(int32 \[2, 3\]\) has dtype int32"),
    ("group_norm", Case({"X": rand(2, 4, 3)}, {"groups": 3}), r"groups=3 must be at least 1 and divide X's 4 channels"),
    ("group_norm", Case({"X": rand(2, 4, 3)}, {"groups": 0}), r"groups=0 must be at least 1"),
    ("group_norm", Case({"X": rand(2, 2, 3)}, {"groups": 2, "data_layout": "NHWC"}), r"divide X's 3 channels \(NHWC\)"),
    ("group_norm", Case({"X": rand(2, 4)}, {"data_layout": "NCDHW"}), r"data_layout 'NCDHW' is not supported"),
    ("group_norm", Case({"X": rand(4)}), r"X 'in.X' \(float64 \[4\]\) must have rank 2 to 5"),
    (
        "group_norm",
        Case({"X": rand(2, 4), "Scale": rand(3)}),
        r"Scale 'in.Scale' \(float64 \[3\]\) must have shape \[4\]",
    ),
    ("group_norm", Case({"X": rand(2, 4)}, {"epsilon": -1.0}), r"epsilon -1 must not be negative"),
    ("instance_norm", Case({"X": rand(1, 2, 1, 1, 1, 2)}), r"must have rank 2 to 5"),
    (
        "instance_norm",
        Case({"X": rand(2, 3, 4, dtype="float32"), "Bias": rand(3)}),
        r"Bias 'in.Bias' \(float64 \[3\]\) must have dtype float32",
    ),
    ("instance_norm", Case({"X": np.ones((2, 3), np.int64)}), r"X 'in.X' \(int64 \[2, 3\]\) has dtype int64"),
    ("dropout", Case({"X": rand(2, 3)}, {"dropout_prob": 1.5}), r"dropout_prob 1.5 must be in \[0, 1\]"),
    ("dropout", Case({"X": rand(2, 3)}, {"dropout_prob": -0.1}), r"dropout_prob -0.1 must be in \[0, 1\]"),
    (
        "dropout",
        Case({"X": rand(2, 3)}, {"dropout_implementation": "upscale"}),
        r"dropout_implementation 'upscale' is not one of downgrade_in_infer, upscale_in_train",
    ),
    ("dropout", Case({"X": np.ones((2, 3), np.int64)}), r"X 'in.X' \(int64 \[2, 3\]\) has dtype int64"),
    (
        "dropout",
        Case({"X": rand(2, 3), "Seed": np.array([1.0])}),
        r"Seed 'in.Seed' \(float64 \[1\]\) has dtype float64",
    ),
    (
        "dropout",
        Case({"X": rand(2, 3), "Seed": np.array([1, 2], np.int32)}),
        r"Seed 'in.Seed' \(int32 \[2\]\) must hold one value",
    ),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("batch_norm", Case(_bn(rand(0, 3))), r"batch_norm: X of shape \[0, 3\] is empty; a training batch needs values"),
    ("layer_norm", Case({"X": rand(3, 0)}), r"layer_norm: X of shape \[3, 0\] has no values from dim 1 on"),
    (
        "group_norm",
        Case({"X": rand(2, 4, 3)}, {"groups": 3}),
        r"group_norm: X of shape \[2, 4, 3\] has 4 channels, not divisible by groups=3",
    ),
]
