"""Vision layers (Fluid 1.x names and signatures, re-exported by :mod:`blockir.dsl.layers`): resizing
(``image_resize`` and ``resize_*``, building the ``*_interp_v2`` ops), ``pixel_shuffle`` / ``pixel_unshuffle``,
``pad`` and ``pad3d``, ``affine_channel``."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.variable import Variable, tensor_shape
from blockir.ir import core
from blockir.ir.dtypes import DTYPE_TO_PROTO

__all__ = [
    "affine_channel",
    "image_resize",
    "pad",
    "pad3d",
    "pixel_shuffle",
    "pixel_unshuffle",
    "resize_bicubic",
    "resize_bilinear",
    "resize_linear",
    "resize_nearest",
    "resize_trilinear",
]

# resample -> (op type, interp_method, input rank, the data formats of that rank: channels first, then last)
_RESAMPLES = {
    "LINEAR": ("linear_interp_v2", "linear", 3, ("NCW", "NWC")),
    "BILINEAR": ("bilinear_interp_v2", "bilinear", 4, ("NCHW", "NHWC")),
    "TRILINEAR": ("trilinear_interp_v2", "trilinear", 5, ("NCDHW", "NDHWC")),
    "NEAREST": ("nearest_interp_v2", "nearest", 4, ("NCHW", "NHWC")),
    "BICUBIC": ("bicubic_interp_v2", "bicubic", 4, ("NCHW", "NHWC")),
}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _int_values(helper: LayerHelper, value: Any, arg: str, count: int) -> list[int]:
    """``value`` as a list of ``count`` ints; an error naming ``arg`` otherwise."""
    if not isinstance(value, (list, tuple)) or len(value) != count or not all(_is_int(v) for v in value):
        raise helper.error(f"{arg} must be a list of {count} ints, got {value!r}")
    return list(value)


def _input(helper: LayerHelper, x: Any, arg: str, rank: int | None = None) -> list[int]:
    """The shape of float variable ``x`` (of ``rank`` when given); an error naming ``arg`` otherwise."""
    helper.check_variable(x, arg)
    helper.check_float(x, arg)
    shape = list(tensor_shape(x))
    if rank is not None and len(shape) != rank:
        raise helper.error(f"{arg} {x.name!r} of shape {shape} must be {rank}-D")
    return shape


def image_resize(
    input: core.Variable,
    out_shape: Sequence[int | core.Variable] | core.Variable | None = None,
    scale: float | core.Variable | None = None,
    name: str | None = None,
    resample: str = "BILINEAR",
    actual_shape: core.Variable | None = None,
    align_corners: bool = True,
    align_mode: int = 1,
    data_format: str = "NCHW",
) -> Variable:
    """``input`` resized along its spatial dims by ``resample`` (LINEAR: 3-D, BILINEAR, NEAREST, BICUBIC: 4-D,
    TRILINEAR: 5-D): the ``*_interp_v2`` op of that method.

    ``out_shape`` (one size per spatial dim; an entry may be an int32 variable of shape [1], and the whole an
    int32 variable of the sizes) wins over ``scale`` (a float > 0 or a float32 variable); ``actual_shape`` (an
    int32 variable) wins over both when the program runs. ``align_corners`` maps the corner pixels onto each
    other; otherwise ``align_mode`` 0 samples at pixel centres (``(o + 0.5) * in / out - 0.5``), 1 at
    ``o * in / out``. ``data_format`` names where the channels are (NCW/NWC, NCHW/NHWC, NCDHW/NDHWC).
    """
    if resample not in _RESAMPLES:
        raise LayerHelper("image_resize", name).error(
            f"resample must be one of {', '.join(_RESAMPLES)}, got {resample!r}"
        )
    op_type, method, rank, formats = _RESAMPLES[resample]
    helper = LayerHelper(op_type, name)
    _input(helper, input, "input", rank)
    if data_format not in formats:
        raise helper.error(f"data_format must be {' or '.join(formats)} for {resample}, got {data_format!r}")
    if not isinstance(align_corners, bool):
        raise helper.error(f"align_corners must be True or False, got {align_corners!r}")
    if align_mode not in (0, 1) or isinstance(align_mode, bool):
        raise helper.error(f"align_mode must be 0 or 1, got {align_mode!r}")
    if out_shape is None and scale is None and actual_shape is None:
        raise helper.error("give out_shape, scale or actual_shape")
    n = rank - 2
    inputs: dict[str, list[Any]] = {"X": [input]}
    attrs: dict[str, Any] = {
        "interp_method": method,
        "align_corners": align_corners,
        "align_mode": align_mode,
        "data_layout": "NCHW" if data_format == formats[0] else "NHWC",
    }
    if out_shape is not None:
        sizes = _out_shape(helper, out_shape, n, inputs)
        attrs.update(zip(("out_d", "out_h", "out_w")[-n:], sizes))
    elif isinstance(scale, core.Variable):
        helper.check_variable(scale, "scale")
        helper.check_float(scale, "scale")
        inputs["Scale"] = [scale]
    elif scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, (int, float)) or scale <= 0:
            raise helper.error(f"scale must be a number > 0 or a variable, got {scale!r}")
        attrs["scale"] = [float(scale)] * n
    if actual_shape is not None:
        helper.check_variable(actual_shape, "actual_shape")
        helper.check_int(actual_shape, "actual_shape")
        inputs["OutSize"] = [actual_shape]
    out = helper.create_tmp(input.dtype)
    helper.append_op(op_type, inputs, {"Out": [out]}, attrs)
    return out


def _out_shape(helper: LayerHelper, out_shape: Any, n: int, inputs: dict[str, list[Any]]) -> list[int]:
    """The out_* attributes for ``out_shape`` (-1 where a variable decides), binding OutSize or SizeTensor."""
    if isinstance(out_shape, core.Variable):
        helper.check_variable(out_shape, "out_shape")
        helper.check_int(out_shape, "out_shape")
        inputs["OutSize"] = [out_shape]
        return [-1] * n
    if not isinstance(out_shape, (list, tuple)) or len(out_shape) != n:
        raise helper.error(f"out_shape must hold {n} sizes (ints or int32 variables), got {out_shape!r}")
    if not any(isinstance(d, core.Variable) for d in out_shape):
        sizes = _int_values(helper, out_shape, "out_shape", n)
        if any(d < 1 for d in sizes):
            raise helper.error(f"out_shape {sizes}: sizes must be >= 1")
        return sizes
    tensors, sizes = [], []
    for d in out_shape:
        if isinstance(d, core.Variable):
            helper.check_variable(d, "out_shape")
            helper.check_int(d, "out_shape")
            tensors.append(d)
            sizes.append(-1)
            continue
        if not _is_int(d) or d < 1:
            raise helper.error(f"out_shape entries must be ints >= 1 or int32 variables, got {d!r}")
        size = helper.create_tmp("int32", stop_gradient=True)
        helper.append_op(
            "fill_constant",
            {},
            {"Out": [size]},
            {"shape": [1], "dtype": DTYPE_TO_PROTO["int32"], "value": float(d), "force_cpu": True},
        )
        tensors.append(size)
        sizes.append(d)
    inputs["SizeTensor"] = tensors
    return sizes


def _resize_layer(resample: str, data_format: str, doc: str) -> Callable[..., Variable]:
    """A Fluid ``resize_*`` layer: :func:`image_resize` with ``resample``, its arguments in Fluid's order."""

    def layer(
        input: core.Variable,
        out_shape: Sequence[int | core.Variable] | core.Variable | None = None,
        scale: float | core.Variable | None = None,
        name: str | None = None,
        actual_shape: core.Variable | None = None,
        align_corners: bool = True,
        align_mode: int = 1,
        data_format: str = data_format,
    ) -> Variable:
        return image_resize(
            input, out_shape, scale, name, resample, actual_shape, align_corners, align_mode, data_format
        )

    layer.__name__ = layer.__qualname__ = f"resize_{resample.lower()}"
    layer.__doc__ = f"{doc}; arguments as :func:`image_resize`."
    return layer


resize_linear = _resize_layer("LINEAR", "NCW", "A 3-D ``input`` resized by linear interpolation (``linear_interp_v2``)")
resize_bilinear = _resize_layer(
    "BILINEAR", "NCHW", "A 4-D ``input`` resized by bilinear interpolation (``bilinear_interp_v2``)"
)
resize_trilinear = _resize_layer(
    "TRILINEAR", "NCDHW", "A 5-D ``input`` resized by trilinear interpolation (``trilinear_interp_v2``)"
)
resize_bicubic = _resize_layer(
    "BICUBIC",
    "NCHW",
    "A 4-D ``input`` resized by bicubic interpolation (``bicubic_interp_v2``, Keys' kernel, A = -0.75)",
)


def resize_nearest(
    input: core.Variable,
    out_shape: Sequence[int | core.Variable] | core.Variable | None = None,
    scale: float | core.Variable | None = None,
    name: str | None = None,
    actual_shape: core.Variable | None = None,
    align_corners: bool = True,
    data_format: str = "NCHW",
) -> Variable:
    """A 4-D ``input`` resized to the nearest pixel (``nearest_interp_v2``): with ``align_corners`` the source
    position rounded, else truncated; arguments as :func:`image_resize`."""
    return image_resize(input, out_shape, scale, name, "NEAREST", actual_shape, align_corners, 1, data_format)


def _shuffle_layer(op_type: str, x: Any, factor_attr: str, factor: int, data_format: str, name: str | None) -> Variable:
    helper = LayerHelper(op_type, name)
    _input(helper, x, "x", 4)
    if not _is_int(factor) or factor < 1:
        raise helper.error(f"{factor_attr} must be an int >= 1, got {factor!r}")
    if data_format not in ("NCHW", "NHWC"):
        raise helper.error(f"data_format must be 'NCHW' or 'NHWC', got {data_format!r}")
    return helper.unary(op_type, x, {factor_attr: factor, "data_format": data_format})


def pixel_shuffle(
    x: core.Variable, upscale_factor: int, data_format: str = "NCHW", name: str | None = None
) -> Variable:
    """[N, C r^2, H, W] rearranged to [N, C, H r, W r] (``r = upscale_factor``; NHWC alike)."""
    return _shuffle_layer("pixel_shuffle", x, "upscale_factor", upscale_factor, data_format, name)


def pixel_unshuffle(
    x: core.Variable, downscale_factor: int, data_format: str = "NCHW", name: str | None = None
) -> Variable:
    """[N, C, H r, W r] rearranged to [N, C r^2, H, W] (``r = downscale_factor``): pixel_shuffle undone."""
    return _shuffle_layer("pixel_unshuffle", x, "downscale_factor", downscale_factor, data_format, name)


def pad(x: core.Variable, paddings: Sequence[int], pad_value: float = 0.0, name: str | None = None) -> Variable:
    """``x`` padded with ``pad_value``: ``paddings`` holds (before, after) for each dim of ``x``, in order."""
    helper = LayerHelper("pad", name)
    helper.check_variable(x, "x")
    count = 2 * len(tensor_shape(x))
    widths = _int_values(helper, paddings, "paddings", count)
    if any(p < 0 for p in widths):
        raise helper.error(f"paddings {widths} must be >= 0")
    return helper.unary("pad", x, {"paddings": widths, "pad_value": float(pad_value)})


def pad3d(
    input: core.Variable,
    paddings: Sequence[int] | core.Variable = (0, 0, 0, 0, 0, 0),
    mode: str = "constant",
    pad_value: float = 0.0,
    data_format: str = "NCDHW",
    name: str | None = None,
) -> Variable:
    """A 5-D ``input`` padded along D, H and W (``pad3d``): ``paddings`` is [left, right, top, bottom, front,
    back] (or an int32 variable of them); ``mode`` "constant" (``pad_value``), "reflect" (mirrored, the edge
    not repeated), "replicate" (the edge repeated) or "circular" (wrapped around)."""
    helper = LayerHelper("pad3d", name)
    helper.check_variable(input, "input")
    shape = list(tensor_shape(input))
    if len(shape) != 5:
        raise helper.error(f"input {input.name!r} of shape {shape} must be 5-D")
    if mode not in ("constant", "reflect", "replicate", "circular"):
        raise helper.error(f"mode must be 'constant', 'reflect', 'replicate' or 'circular', got {mode!r}")
    if data_format not in ("NCDHW", "NDHWC"):
        raise helper.error(f"data_format must be 'NCDHW' or 'NDHWC', got {data_format!r}")
    attrs: dict[str, Any] = {"mode": mode, "value": float(pad_value), "data_format": data_format}
    inputs: dict[str, list[Any]] = {"X": [input]}
    if isinstance(paddings, core.Variable):
        helper.check_variable(paddings, "paddings")
        helper.check_int(paddings, "paddings")
        inputs["Paddings"] = [paddings]
    else:
        attrs["paddings"] = _int_values(helper, paddings, "paddings", 6)
    out = helper.create_tmp(input.dtype)
    helper.append_op("pad3d", inputs, {"Out": [out]}, attrs)
    return out


def affine_channel(
    x: core.Variable,
    scale: core.Variable | None = None,
    bias: core.Variable | None = None,
    data_layout: str = "NCHW",
    name: str | None = None,
    act: str | None = None,
) -> Variable:
    """``act(x * scale + bias)`` per channel (dim 1 with NCHW, the last with NHWC): ``scale`` and ``bias`` are
    variables of shape [C]."""
    helper = LayerHelper("affine_channel", name)
    _input(helper, x, "x")
    if scale is None or bias is None:
        raise helper.error("scale and bias must both be given (variables of shape [C])")
    for arg, var in (("scale", scale), ("bias", bias)):
        helper.check_variable(var, arg)
        helper.check_float(var, arg)
    if data_layout not in ("NCHW", "NHWC"):
        raise helper.error(f"data_layout must be 'NCHW' or 'NHWC', got {data_layout!r}")
    out = helper.create_tmp(x.dtype)
    helper.append_op(
        "affine_channel", {"X": [x], "Scale": [scale], "Bias": [bias]}, {"Out": [out]}, {"data_layout": data_layout}
    )
    return helper.append_activation(out, act)
