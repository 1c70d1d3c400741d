"""Vision layers (resize_*, image_resize, pixel_shuffle, pad, pad3d, affine_channel): the ops they build, their
values on the CPU executor against the independent references of ``tests/ops/cases_vision``, a small net
that learns through them, and bad arguments."""

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from tests.ops.cases_vision import ref_interp, ref_pad3d, ref_pixel_shuffle, ref_pixel_unshuffle


def _ops(main):
    return main.global_block().ops


def _run(main, startup, feed, fetch):
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope)


def test_resize_bilinear_builds_a_bilinear_interp_v2(progs):
    main, _ = progs
    y = bir.layers.resize_bilinear(bir.data("img", shape=[-1, 3, 5, 6]), out_shape=[7, 9], align_corners=False)
    (op,) = _ops(main)
    assert op.type == "bilinear_interp_v2" and op.input("X") == ("img",)
    assert op.attr("interp_method") == "bilinear" and op.attr("out_h") == 7 and op.attr("out_w") == 9
    assert op.attr("align_corners") is False and op.attr("align_mode") == 1 and op.attr("data_layout") == "NCHW"
    assert y.shape == (-1, 3, 7, 9)
    z = bir.layers.resize_nearest(y, scale=2.0, data_format="NHWC")
    assert _ops(main)[-1].type == "nearest_interp_v2" and _ops(main)[-1].attr("scale") == (2.0, 2.0)
    assert z.shape == (-1, 6, 14, 9)  # y read as NHWC: H 3, W 7, C 9
    bir.ir.verify(main)


def test_resize_layers_compute_what_the_reference_does(progs):
    main, startup = progs
    rng = np.random.default_rng(1)
    img = bir.data("img", shape=[-1, 2, 4, 5])
    seq = bir.data("seq", shape=[-1, 2, 6])
    vol = bir.data("vol", shape=[-1, 2, 2, 3, 3])
    outs = [
        bir.layers.resize_bilinear(img, [6, 3], align_corners=False, align_mode=0),
        bir.layers.resize_nearest(img, scale=1.5, align_corners=False),
        bir.layers.resize_bicubic(img, [7, 8]),
        bir.layers.image_resize(img, [3, 9], resample="BILINEAR"),
        bir.layers.resize_linear(seq, [4], align_corners=False),
        bir.layers.resize_trilinear(vol, [3, 5, 2]),
    ]
    feed = {
        "img": rng.normal(size=(2, 2, 4, 5)).astype("float32"),
        "seq": rng.normal(size=(2, 2, 6)).astype("float32"),
        "vol": rng.normal(size=(1, 2, 2, 3, 3)).astype("float32"),
    }
    expected = [
        ref_interp(feed["img"], "bilinear", (6, 3), align_corners=False, align_mode=0),
        ref_interp(feed["img"], "nearest", (6, 7), [1.5, 1.5], align_corners=False),
        ref_interp(feed["img"], "bicubic", (7, 8)),
        ref_interp(feed["img"], "bilinear", (3, 9)),
        ref_interp(feed["seq"], "linear", (4,), align_corners=False),
        ref_interp(feed["vol"], "trilinear", (3, 5, 2)),
    ]
    for got, want, var in zip(_run(main, startup, feed, outs), expected, outs):
        assert got.shape == want.shape and var.shape[1:] == got.shape[1:]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sizes_and_scales_given_as_variables(progs):
    main, startup = progs
    img = bir.data("img", shape=[-1, 1, 3, 4])
    size = bir.data("size", shape=[2], dtype="int32")
    height = bir.data("height", shape=[1], dtype="int32")
    scale = bir.data("scale", shape=[1], dtype="float32")
    by_outsize = bir.layers.resize_bilinear(img, out_shape=size)
    by_list = bir.layers.resize_bilinear(img, out_shape=[height, 6])
    by_scale = bir.layers.resize_bilinear(img, scale=scale, align_corners=False)
    by_actual = bir.layers.resize_bilinear(img, out_shape=[9, 9], actual_shape=size)
    ops = _ops(main)
    assert ops[0].input("OutSize") == ("size",) and by_outsize.shape == (-1, 1, -1, -1)
    assert ops[1].type == "fill_constant" and ops[2].input("SizeTensor") == ("height", ops[1].output("Out")[0])
    assert ops[2].attr("out_h") == -1 and ops[2].attr("out_w") == 6 and by_list.shape == (-1, 1, -1, 6)
    assert ops[3].input("Scale") == ("scale",) and by_scale.shape == (-1, 1, -1, -1)
    assert ops[4].input("OutSize") == ("size",) and ops[4].attr("out_h") == 9
    x = np.arange(12, dtype="float32").reshape(1, 1, 3, 4)
    feed = {
        "img": x,
        "size": np.array([5, 7], "int32"),
        "height": np.array([2], "int32"),
        "scale": np.array([2.0], "float32"),
    }
    got = _run(main, startup, feed, [by_outsize, by_list, by_scale, by_actual])
    expected = [
        ref_interp(x, "bilinear", (5, 7)),
        ref_interp(x, "bilinear", (2, 6)),
        ref_interp(x, "bilinear", (6, 8), [2.0, 2.0], align_corners=False),
        ref_interp(x, "bilinear", (5, 7)),
    ]
    for g, want in zip(got, expected):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-5)


def test_pixel_shuffle_pad_and_affine_channel_layers(progs):
    main, startup = progs
    rng = np.random.default_rng(2)
    x = bir.data("x", shape=[-1, 8, 2, 3])
    vol = bir.data("vol", shape=[-1, 2, 2, 3, 4])
    pads = bir.data("pads", shape=[6], dtype="int32")
    scale = bir.layers.fill_constant([8], "float32", 2.0)
    bias = bir.layers.fill_constant([8], "float32", -1.0)
    outs = [
        bir.layers.pixel_shuffle(x, 2),
        bir.layers.pixel_unshuffle(bir.layers.pixel_shuffle(x, 2), 2),
        bir.layers.pixel_unshuffle(x, 1, data_format="NHWC"),
        bir.layers.pad(x, [0, 1, 1, 0, 0, 0, 2, 1], pad_value=0.5),
        bir.layers.pad3d(vol, [1, 2, 0, 1, 1, 0], mode="reflect"),
        bir.layers.pad3d(vol, pads, mode="circular"),
        bir.layers.affine_channel(x, scale, bias, act="relu"),
    ]
    assert outs[0].shape == (-1, 2, 4, 6) and outs[3].shape == (-1, 9, 2, 6) and outs[4].shape == (-1, 2, 3, 4, 7)
    assert outs[5].shape == (-1, 2, -1, -1, -1)
    xv = rng.normal(size=(2, 8, 2, 3)).astype("float32")
    vv = rng.normal(size=(1, 2, 2, 3, 4)).astype("float32")
    feed = {"x": xv, "vol": vv, "pads": np.array([2, 0, 1, 1, 0, 3], "int32")}
    expected = [
        ref_pixel_shuffle(xv, 2),
        ref_pixel_unshuffle(ref_pixel_shuffle(xv, 2), 2),
        xv,
        np.pad(xv, ((0, 1), (1, 0), (0, 0), (2, 1)), constant_values=0.5),
        ref_pad3d(vv, (1, 2, 0, 1, 1, 0), "reflect"),
        ref_pad3d(vv, (2, 0, 1, 1, 0, 3), "circular"),
        np.maximum(xv * 2.0 - 1.0, 0),
    ]
    for got, want in zip(_run(main, startup, feed, outs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert [op.type for op in _ops(main)][-2:] == ["affine_channel", "relu"]


def test_a_small_net_learns_through_the_vision_layers():
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 3
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        img = bir.data("img", shape=[-1, 1, 4, 4])
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.conv2d(img, 2, 1)
        h = bir.layers.resize_bilinear(h, [8, 8], align_corners=False, align_mode=0)
        h = bir.layers.pad3d(bir.layers.unsqueeze(h, [2]), [1, 1, 1, 1, 0, 0], mode="replicate")
        h = bir.layers.squeeze(h, [2])
        h = bir.layers.conv2d(h, 4, 3, act="relu")
        h = bir.layers.pixel_unshuffle(h, 2)
        h = bir.layers.resize_bicubic(h, scale=0.5, align_corners=False)
        pred = bir.layers.fc(h, 2, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    types = {op.type for op in _ops(main)}
    assert {"bilinear_interp_v2_grad", "pad3d_grad", "pixel_unshuffle_grad", "bicubic_interp_v2_grad"} <= types
    rng = np.random.default_rng(0)
    images = rng.normal(scale=0.3, size=(32, 1, 4, 4)).astype("float32")
    labels = rng.integers(0, 2, size=(32, 1))
    images[labels[:, 0] == 1, :, 1:3, 1:3] += 1.0
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    feed = {"img": images, "label": labels}
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0][0]) for _ in range(25)]
    assert all(np.isfinite(losses)) and losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    ("build", "error", "pattern"),
    [
        (lambda x: bir.layers.resize_bilinear(x), ShapeError, r"layers.bilinear_interp_v2: give out_shape, scale"),
        (lambda x: bir.layers.resize_bilinear(x, [2, 2, 2]), ShapeError, r"out_shape must hold 2 sizes"),
        (lambda x: bir.layers.resize_bilinear(x, [0, 2]), ShapeError, r"sizes must be >= 1"),
        (lambda x: bir.layers.resize_bilinear(x, scale=-1.0), ShapeError, r"scale must be a number > 0"),
        (lambda x: bir.layers.resize_bilinear(x, [4, 4], align_mode=2), ShapeError, r"align_mode must be 0 or 1"),
        (lambda x: bir.layers.resize_bilinear(x, [4, 4], data_format="NCW"), ShapeError, r"NCHW or NHWC"),
        (lambda x: bir.layers.resize_trilinear(x, [4, 4, 4]), ShapeError, r"of shape \[-1, 3, 5, 5\] must be 5-D"),
        (lambda x: bir.layers.image_resize(x, [4, 4], resample="AREA"), ShapeError, r"resample must be one of"),
        (lambda x: bir.layers.resize_bilinear(x, scale=0.1), ShapeError, r"scale=\[0.1.*makes an output size 0"),
        (lambda x: bir.layers.pixel_shuffle(x, 2), ShapeError, r"3 channels are not divisible by upscale_factor"),
        (lambda x: bir.layers.pixel_shuffle(x, 0), ShapeError, r"upscale_factor must be an int >= 1"),
        (lambda x: bir.layers.pad(x, [1, 1]), ShapeError, r"paddings must be a list of 8 ints"),
        (lambda x: bir.layers.pad3d(x, [1] * 6), ShapeError, r"must be 5-D"),
        (lambda x: bir.layers.affine_channel(x), ShapeError, r"scale and bias must both be given"),
        (lambda x: bir.layers.resize_bilinear("img", [2, 2]), BlockirError, r"input must be a Variable"),
    ],
)
def test_bad_arguments(progs, build, error, pattern):
    x = bir.data("img", shape=[-1, 3, 5, 5])
    with pytest.raises(error, match=pattern):
        build(x)
