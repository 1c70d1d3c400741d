"""The Paddle zoo: models and one-layer programs Paddle 3.3.1 builds, each a function returning its feeds (name ->
array) and its outputs, built in Paddle's legacy static graph (``paddle_side.py zoo`` saves them).

- ``VISION``: every constructor of ``paddle.vision.models`` (10 classes, at a small input, in eval mode);
- ``LAYERS``: one program per common ``paddle.nn`` layer and tensor function, named after it;
- ``CONTROL``: loops and conditionals (``while_loop``, ``cond``);
- ``TEXT``: recurrent text models (``nn.LSTM`` of 2 layers, a bidirectional ``nn.GRU``, a bidirectional ``nn.LSTM``
  over sequences of given lengths, a 2-layer bidirectional ``nn.SimpleRNN`` of relu, and ``nn.RNN(nn.LSTMCell)``:
  Paddle's ``while`` loop over tensor arrays, its cell's functions that build only PIR programs in Paddle 3.3.1
  replaced while it builds by legacy ops); ``nn.TransformerEncoderLayer`` is not here: in Paddle 3.3.1 it calls
  functions that build only PIR programs, so no legacy program of it (``paddle_side.py``'s ``text`` model has an
  attention's ops);
- ``OPTIMIZED``: models of the zoo as Paddle Inference's optimizing passes rewrite them (the LSTM's).

Only numpy and paddle are imported here (run with a Paddle interpreter, as ``paddle_side.py`` is).
"""

import contextlib

import numpy as np
import paddle
import paddle.vision.models as models

nn, F = paddle.nn, paddle.nn.functional
RNG = np.random.default_rng(11)


def op(op_type, inputs, attrs=None, outputs=("Out",), dtype=None):
    """Append a legacy op (some of Paddle 3's Python functions build only PIR programs): its first output."""
    helper = paddle.base.layer_helper.LayerHelper(op_type)
    first = next(iter(inputs.values()))
    made = {slot: helper.create_variable_for_type_inference(dtype or first.dtype) for slot in outputs}
    helper.append_op(type=op_type, inputs=inputs, outputs=made, attrs=attrs or {})
    return made[outputs[0]]


def ops(*chain):
    """x -> the sum of ``op(type, {"X": x}, attrs)`` over ``chain`` of (type, attrs): ops whose Python functions
    build only PIR programs in Paddle 3."""
    return lambda x: paddle.add_n([op(t, {"X": x}, attrs) for t, attrs in chain])


@contextlib.contextmanager
def legacy(*replacements):
    """While the block runs, each ``(module, name, function)`` of ``replacements`` replaces ``module.name`` (a Paddle
    function that builds only PIR programs in Paddle 3, by one appending legacy ops); restored after."""
    originals = [(module, name, getattr(module, name)) for module, name, _ in replacements]
    for module, name, function in replacements:
        setattr(module, name, function)
    try:
        yield
    finally:
        for module, name, original in originals:
            setattr(module, name, original)


def _image(shape):
    return RNG.normal(size=shape).astype("float32")


def _data(name, value):
    return paddle.static.data(name, [-1, *value.shape[1:]], str(value.dtype))


def _vision(constructor, size=64, channels=3, **kwargs):
    def build():
        x = _image((2, channels, size, size))
        net = getattr(models, constructor)(num_classes=10, **kwargs)
        net.eval()
        out = net(_data("x", x))
        return {"x": x}, list(out) if isinstance(out, (list, tuple)) else [out]  # googlenet: and its aux heads

    return build


VISION = {
    name: _vision(name, size)
    for name, size in [
        ("alexnet", 224),
        ("densenet121", 64),
        ("densenet161", 64),
        ("densenet169", 64),
        ("densenet201", 64),
        ("densenet264", 64),
        ("googlenet", 224),
        ("inception_v3", 96),
        ("mobilenet_v1", 64),
        ("mobilenet_v2", 64),
        ("mobilenet_v3_large", 64),
        ("mobilenet_v3_small", 64),
        ("resnet18", 64),
        ("resnet34", 64),
        ("resnet50", 64),
        ("resnet101", 64),
        ("resnet152", 64),
        ("resnext50_32x4d", 64),
        ("resnext50_64x4d", 64),
        ("resnext101_32x4d", 64),
        ("resnext101_64x4d", 64),
        ("resnext152_32x4d", 64),
        ("resnext152_64x4d", 64),
        ("shufflenet_v2_swish", 64),
        ("shufflenet_v2_x0_25", 64),
        ("shufflenet_v2_x0_33", 64),
        ("shufflenet_v2_x0_5", 64),
        ("shufflenet_v2_x1_0", 64),
        ("shufflenet_v2_x1_5", 64),
        ("shufflenet_v2_x2_0", 64),
        ("squeezenet1_0", 64),
        ("squeezenet1_1", 64),
        ("vgg11", 64),
        ("vgg13", 64),
        ("vgg16", 64),
        ("vgg19", 64),
        ("wide_resnet50_2", 64),
        ("wide_resnet101_2", 64),
    ]
}
VISION["lenet"] = lambda: _lenet()


def _lenet():
    x = _image((2, 1, 28, 28))
    net = models.LeNet(num_classes=10)
    net.eval()
    return {"x": x}, [net(_data("x", x))]


def _layer(make, shape=(2, 4, 6, 6), positive=False):
    """A program of one layer (``make()`` builds it) applied to one input of ``shape``."""

    def build():
        x = _image(shape)
        x = np.abs(x) + 0.1 if positive else x
        layer = make()
        if isinstance(layer, nn.Layer):
            layer.eval()
        return {"x": x}, [layer(_data("x", x))]

    return build


def _fn(fn, *shapes, dtypes=None, positive=False):
    """A program of one tensor function of inputs x0, x1, ... of ``shapes``."""

    def build():
        feeds = {}
        for i, shape in enumerate(shapes):
            dtype = (dtypes or {}).get(i, "float32")
            if dtype == "int64":
                value = RNG.integers(0, 3, size=shape).astype("int64")
            elif dtype == "bool":
                value = RNG.integers(0, 2, size=shape).astype("bool")
            else:
                value = _image(shape)
                value = np.abs(value) + 0.1 if positive else value
            feeds[f"x{i}"] = value
        inputs = [_data(name, value) for name, value in feeds.items()]
        out = fn(*inputs)
        return feeds, list(out) if isinstance(out, (list, tuple)) else [out]

    return build


LAYERS = {
    # activations
    "relu6": _layer(nn.ReLU6),
    "swish": _layer(nn.Swish),
    "silu": _layer(nn.Silu),
    "hardswish": _layer(nn.Hardswish),
    "hardsigmoid": _layer(nn.Hardsigmoid),
    "hardtanh": _layer(nn.Hardtanh),
    "leaky_relu": _layer(lambda: nn.LeakyReLU(0.1)),
    "prelu": _layer(lambda: nn.PReLU(4)),
    "elu": _layer(nn.ELU),
    "selu": _layer(nn.SELU),
    "celu": _layer(nn.CELU),
    "mish": _layer(nn.Mish),
    "softplus": _fn(ops(("softplus", {"beta": 1.0, "threshold": 20.0})), (3, 5)),
    "softsign": _layer(nn.Softsign),
    "softshrink": _layer(nn.Softshrink),
    "hardshrink": _layer(nn.Hardshrink),
    "tanhshrink": _layer(nn.Tanhshrink),
    "thresholded_relu": _layer(nn.ThresholdedReLU),
    "log_sigmoid": _layer(nn.LogSigmoid),
    "log_softmax": _layer(lambda: nn.LogSoftmax(axis=1)),
    "gelu_tanh": _fn(ops(("gelu", {"approximate": True})), (3, 5)),
    "maxout": _layer(lambda: nn.Maxout(groups=2)),
    # vision
    "conv2d_transpose": _layer(lambda: nn.Conv2DTranspose(4, 6, 3, stride=2, padding=1)),
    "conv2d_transpose_groups": _layer(lambda: nn.Conv2DTranspose(4, 8, 3, groups=2)),
    "upsample_bilinear": _layer(lambda: nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)),
    "upsample_bilinear_align": _layer(lambda: nn.Upsample(size=[9, 11], mode="bilinear", align_corners=True)),
    "upsample_nearest": _layer(lambda: nn.Upsample(scale_factor=2, mode="nearest")),
    "upsample_bicubic": _layer(lambda: nn.Upsample(size=[9, 11], mode="bicubic", align_corners=False)),
    "pad3d_constant": _layer(lambda: nn.Pad2D([1, 2, 0, 1], mode="constant", value=0.5)),
    "pad3d_reflect": _layer(lambda: nn.Pad2D([1, 2, 2, 1], mode="reflect")),
    "pad3d_replicate": _layer(lambda: nn.Pad2D([1, 0, 2, 1], mode="replicate")),
    "pixel_shuffle": _layer(lambda: nn.PixelShuffle(2)),
    "pixel_unshuffle": _layer(lambda: nn.PixelUnshuffle(2)),
    "group_norm": _layer(lambda: nn.GroupNorm(2, 4)),
    "instance_norm": _layer(lambda: nn.InstanceNorm2D(4)),
    # math and reductions
    "clip": _fn(lambda x: paddle.clip(x, -0.5, 0.7), (3, 5)),
    "pow": _fn(lambda x: paddle.pow(x, 1.7), (3, 5), positive=True),
    "reduce_max": _fn(lambda x: paddle.max(x, axis=1), (3, 5)),
    "reduce_min": _fn(lambda x: paddle.min(x, axis=[0, 1], keepdim=True), (3, 5, 2)),
    "reduce_prod": _fn(lambda x: paddle.prod(x, axis=1), (3, 5)),
    "logsumexp": _fn(ops(("logsumexp", {"axis": [1], "keepdim": False, "reduce_all": False})), (3, 5)),
    "cumsum": _fn(lambda x: paddle.cumsum(x, axis=1), (3, 5)),
    "abs_sign": _fn(ops(("abs", {}), ("sign", {})), (3, 5)),
    "floor_ceil_round": _fn(ops(("floor", {}), ("ceil", {}), ("round", {})), (3, 5)),
    "exp_log": _fn(ops(("exp", {}), ("log", {}), ("log1p", {})), (3, 5), positive=True),
    "sqrt_rsqrt": _fn(ops(("sqrt", {}), ("rsqrt", {}), ("reciprocal", {})), (3, 5), positive=True),
    "trig": _fn(ops(("sin", {}), ("cos", {}), ("atan", {})), (3, 5)),
    "erf": _fn(paddle.erf, (3, 5)),
    "p_norm": _fn(lambda x: paddle.linalg.norm(x, p=3, axis=1), (3, 5)),
    "remainder": _fn(lambda x, y: paddle.remainder(x, y), (3, 5), (3, 5), positive=True),
    # comparison, logic, indexing
    "where": _fn(lambda x, y: paddle.where(x > y, x, y), (3, 5), (3, 5)),
    "greater_than": _fn(
        lambda x, y: paddle.cast(op("greater_than", {"X": x, "Y": y}, dtype="bool"), "float32"), (3, 5), (3, 5)
    ),
    "logical": _fn(
        lambda x, y: paddle.cast(op("logical_xor", {"X": x, "Y": y}), "float32"),
        (3, 5),
        (3, 5),
        dtypes={0: "bool", 1: "bool"},
    ),
    "gather": _fn(lambda x, i: paddle.gather(x, i), (4, 5), (3,), dtypes={1: "int64"}),
    "gather_nd": _fn(lambda x, i: paddle.gather_nd(x, i), (4, 5), (3, 2), dtypes={1: "int64"}),
    "index_select": _fn(lambda x, i: paddle.index_select(x, i, axis=1), (4, 5), (3,), dtypes={1: "int64"}),
    "take_along_axis": _fn(lambda x, i: paddle.take_along_axis(x, i, 1), (4, 5), (4, 2), dtypes={1: "int64"}),
    "one_hot": _fn(lambda i: F.one_hot(i, 4), (3,), dtypes={0: "int64"}),
    "argsort": _fn(lambda x: paddle.argsort(x, axis=1), (3, 5)),
    "expand": _fn(lambda x: paddle.expand(x, [2, 3, 5]), (3, 5)),
    "tile": _fn(lambda x: paddle.tile(x, [2, 1]), (3, 5)),
    "stack": _fn(lambda x, y: paddle.stack([x, y], axis=1), (3, 5), (3, 5)),
    "unstack": _fn(lambda x: paddle.unstack(x, axis=1), (3, 2, 4)),
    "flip_roll": _fn(ops(("flip", {"axis": [1]}), ("roll", {"shifts": [2], "axis": [1]})), (3, 5)),
    "shape": _fn(lambda x: paddle.cast(paddle.shape(x), "float32") * 1.0, (3, 5)),
    "assign_value": _fn(lambda x: x + paddle.to_tensor(np.arange(5, dtype="float32")), (3, 5)),
    "full_like": _fn(lambda x: paddle.full_like(x, 2.5) * x, (3, 5)),
    "arange": _fn(lambda x: x + paddle.arange(5, dtype="float32"), (3, 5)),
    "linspace": _fn(lambda x: x + paddle.linspace(0, 1, 5, dtype="float32"), (3, 5)),
    # outside what blockir covers: recorded as refused (zoo_check.REFUSED)
    "conv3d": _layer(lambda: nn.Conv3D(4, 4, 3), shape=(2, 4, 5, 6, 6)),
    "max_pool3d": _layer(lambda: nn.MaxPool3D(2), shape=(2, 4, 4, 6, 6)),
    "unfold": _layer(lambda: nn.Unfold(kernel_sizes=2)),
    "lrn": _fn(
        lambda x: op("lrn", {"X": x}, {"n": 3, "k": 1.0, "alpha": 1e-4, "beta": 0.75}, ("Out", "MidOut")), (2, 4, 5, 5)
    ),
    "kl_div_loss": _fn(lambda x, y: F.kl_div(x, y, reduction="mean"), (3, 5), (3, 5), positive=True),
}


def _rnn(make, steps=5, width=4, lengths=None):
    def build():
        x = _image((2, steps, width))
        layer = make()
        layer.eval()
        if lengths is None:
            return {"x": x}, [layer(_data("x", x))[0]]
        given = np.array(lengths, dtype="int64")
        out, _ = layer(_data("x", x), sequence_length=paddle.static.data("lengths", [-1], "int64"))
        return {"x": x, "lengths": given}, [out]

    return build


def _matmul(x, y, transpose_x=False, transpose_y=False, name=None):
    return op("matmul_v2", {"X": x, "Y": y}, {"trans_x": transpose_x, "trans_y": transpose_y})


def _rnn_lstm_cell():
    """``nn.RNN(nn.LSTMCell)``: Paddle's own loop (``nn.layer.rnn._rnn_static_graph``: ``while``, ``write_to_array``,
    ``read_from_array``, ``increment``, ``less_than``, ``tensor_array_to_tensor``), the cell's ``paddle.matmul``,
    ``F.sigmoid`` and ``paddle.tanh`` built as legacy ops (``matmul_v2``, ``sigmoid``, ``tanh``); its outputs and
    final states."""
    x = _image((2, 5, 4))
    with legacy(
        (paddle, "matmul", _matmul),
        (F, "sigmoid", lambda v, name=None: op("sigmoid", {"X": v})),
        (paddle, "tanh", lambda v, name=None: op("tanh", {"X": v})),
    ):
        out, (h, c) = nn.RNN(nn.LSTMCell(4, 6))(_data("x", x))
    return {"x": x}, [out, h, c]


TEXT = {
    "lstm": _rnn(lambda: nn.LSTM(4, 6, num_layers=2)),
    "gru_bidirectional": _rnn(lambda: nn.GRU(4, 6, direction="bidirect")),
    "lstm_lengths": _rnn(lambda: nn.LSTM(4, 6, direction="bidirect"), lengths=[5, 3]),
    "simple_rnn_relu": _rnn(lambda: nn.SimpleRNN(4, 6, num_layers=2, activation="relu", direction="bidirect")),
    "rnn_lstm_cell": _rnn_lstm_cell,
}


def _while_loop():
    """A recurrence as ``paddle.static.nn.while_loop`` writes it (``while``, ``write_to_array``, ``increment``,
    ``less_than``), its states stacked
    (``tensor_array_to_tensor``) and counted (``lod_array_length``)."""
    x = _image((2, 4))
    xs = _data("x", x)
    h0 = paddle.static.nn.fc(xs, 4)
    n = paddle.full([1], 3, "int64")
    states = paddle.tensor.create_array("float32")

    def body(i, h, states):
        h = op("tanh", {"X": paddle.add(paddle.static.nn.fc(h, 4), xs)})
        paddle.tensor.array_write(h, i, states)
        return paddle.increment(i), h, states

    _, h, states = paddle.static.nn.while_loop(
        lambda i, h, states: paddle.less_than(i, n), body, [paddle.full([1], 0, "int64"), h0, states]
    )
    stacked, _ = paddle.tensor.manipulation.tensor_array_to_tensor(states, axis=0, use_stack=True)
    return {"x": x}, [h, stacked, paddle.tensor.array_length(states)]


def _cond(threshold):
    """``paddle.static.nn.cond``: two ``conditional_block`` ops and ``select_input`` (its ``logical_not`` built as a
    legacy op: Paddle 3's function builds only PIR programs)."""

    def build():
        x = _image((3, 4))
        xs = _data("x", x)
        h = paddle.static.nn.fc(xs, 4)
        pred = paddle.mean(h) > threshold
        with legacy((paddle, "logical_not", lambda v, *args, **kwargs: op("logical_not", {"X": v}))):
            out = paddle.static.nn.cond(pred, lambda: op("tanh", {"X": h}) * 2.0, lambda: paddle.scale(h, 0.5, -1.0))
        return {"x": x}, [out]

    return build


CONTROL = {"while_loop": _while_loop, "cond_true": _cond(-100.0), "cond_false": _cond(100.0)}

ZOO = {**VISION, **LAYERS, **TEXT, **CONTROL}

# Programs as Paddle Inference optimizes them (its CPU IR passes; ``paddle_side.py`` saves the program it writes
# with ``enable_save_optim_model``): name -> the zoo model optimized.
OPTIMIZED = {"lstm_inference_optimized": "lstm"}
