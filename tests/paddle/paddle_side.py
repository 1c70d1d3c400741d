"""The Paddle side of the paddle tier, run with an interpreter that has paddlepaddle (3.x, legacy programs):

    python paddle_side.py save OUT          # build the models below, save each as OUT/NAME.pdmodel/.pdiparams,
                                            # and its inputs and Paddle's outputs as OUT/NAME.npz
    python paddle_side.py run PREFIX INPUTS.npz OUT.npz   # load a model (blockir's export), run it on the inputs

Only numpy and paddle are imported here: blockir is not installed in that interpreter.
"""

import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"  # legacy ProgramDesc programs (.pdmodel), not PIR's .json

import numpy as np
import paddle

paddle.enable_static()
RNG = np.random.default_rng(7)
F = paddle.nn.functional


def op(op_type, inputs, attrs=None, outputs=("Out",), dtype=None):
    """Append a legacy op (some of Paddle 3's Python functions build only PIR programs): its first output."""
    helper = paddle.base.layer_helper.LayerHelper(op_type)
    first = next(iter(inputs.values()))
    made = {slot: helper.create_variable_for_type_inference(dtype or first.dtype) for slot in outputs}
    helper.append_op(type=op_type, inputs=inputs, outputs=made, attrs=attrs or {})
    return made[outputs[0]]


def mlp():
    x = paddle.static.data("x", [-1, 6], "float32")
    h = paddle.static.nn.fc(x, 16, activation="relu")
    h = paddle.static.nn.fc(h, 8, activation="sigmoid") * 2.0 + 0.5
    h = op("tanh", {"X": h})
    return {"x": RNG.normal(size=(4, 6)).astype("float32")}, [F.softmax(paddle.static.nn.fc(h, 3))]


def cnn():
    x = paddle.static.data("img", [-1, 3, 12, 12], "float32")
    h = paddle.static.nn.conv2d(x, 8, 3, padding=1, act="relu")
    h = paddle.static.nn.batch_norm(h, is_test=True)
    h = F.max_pool2d(h, 2, 2)
    h = paddle.static.nn.conv2d(h, 8, 3, padding="SAME", groups=2, dilation=2)
    h = F.avg_pool2d(h, 3, 1, padding=1, exclusive=True, ceil_mode=True)
    h = paddle.nn.Conv2D(8, 8, 3, groups=8)(h)  # depthwise_conv2d
    h = F.adaptive_avg_pool2d(h, 2)
    h = F.dropout(paddle.flatten(h, 1), 0.3, training=False)
    out = F.softmax(paddle.static.nn.fc(h, 5), axis=-1)
    top = op("arg_max", {"X": out}, {"axis": 1, "keepdims": False, "flatten": False, "dtype": 3}, dtype="int64")
    return {"img": RNG.normal(size=(2, 3, 12, 12)).astype("float32")}, [out, top]


def text():
    ids = paddle.static.data("ids", [-1, 5], "int64")
    emb = paddle.nn.Embedding(20, 8)(ids)  # lookup_table_v2
    h = paddle.nn.LayerNorm(8)(emb)
    h = op("gelu", {"X": h}, {"approximate": False})
    t = paddle.transpose(op("tanh", {"X": h}), [0, 2, 1])  # h @ tanh(h)^T: not symmetric, so top-k has no ties
    scores = op("matmul_v2", {"X": h, "Y": t}, {"trans_x": False, "trans_y": False}) * 0.25
    a, b = paddle.split(scores, [2, 3], axis=2)
    c = paddle.concat([op("tanh", {"X": b}), a], axis=2)
    c = paddle.unsqueeze(paddle.slice(c, [1], [1], [4]), [1])
    c = paddle.squeeze(c, [1])
    r = paddle.reshape(c, [-1, 15])
    values, indices = paddle.topk(r, 3)
    ids = np.stack([RNG.permutation(20)[:5] for _ in range(3)])  # no id twice in a row: top-k without ties
    return {"ids": ids.astype("int64")}, [r, values, indices]


MODELS = {"mlp": mlp, "cnn": cnn, "text": text}


def save(out):
    os.makedirs(out, exist_ok=True)
    for name, build in MODELS.items():
        main, startup = paddle.static.Program(), paddle.static.Program()
        with paddle.static.program_guard(main, startup):
            feeds, targets = build()
        exe = paddle.static.Executor(paddle.CPUPlace())
        exe.run(startup)
        feed_vars = [main.global_block().var(n) for n in feeds]
        prefix = os.path.join(out, name)
        paddle.static.save_inference_model(prefix, feed_vars, targets, exe, program=main)
        program, feed_names, fetches = paddle.static.load_inference_model(prefix, exe)
        outputs = exe.run(program, feed=feeds, fetch_list=fetches)
        arrays = {**{f"in:{k}": v for k, v in feeds.items()}, **{f"out:{i}": v for i, v in enumerate(outputs)}}
        np.savez(prefix + ".npz", **arrays)


def run(prefix, inputs, out):
    exe = paddle.static.Executor(paddle.CPUPlace())
    program, feed_names, fetches = paddle.static.load_inference_model(prefix, exe)
    given = np.load(inputs)
    outputs = exe.run(program, feed={n: given[n] for n in feed_names}, fetch_list=fetches)
    np.savez(out, **{f"out:{i}": v for i, v in enumerate(outputs)})


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2])
    else:
        run(*sys.argv[2:5])
