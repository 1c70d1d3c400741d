"""The Paddle side of the paddle tier, run with an interpreter that has paddlepaddle (3.x, legacy programs):

    python paddle_side.py save OUT          # build the models below, save each as OUT/NAME.pdmodel/.pdiparams,
                                            # and its inputs and Paddle's outputs as OUT/NAME.npz
    python paddle_side.py run PREFIX INPUTS.npz OUT.npz   # load a model (blockir's export), run it on the inputs
    python paddle_side.py ops OUT.txt       # every op type of Paddle's op protos, and whether it has a gradient
    python paddle_side.py zoo OUT [NAME ...]   # the zoo's models (zoo.py), saved as save does (OPTIMIZED's: the
                                               # program Paddle Inference's passes make of one)

Only numpy and paddle are imported here: blockir is not installed in that interpreter.
"""

import os
import sys

os.environ["FLAGS_enable_pir_api"] = "0"  # legacy ProgramDesc programs (.pdmodel), not PIR's .json

import numpy as np
import paddle
from zoo import op

paddle.enable_static()
RNG = np.random.default_rng(7)
F = paddle.nn.functional


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


def save_model(prefix, build):
    """Build a model (``build()`` -> feeds, outputs) in new programs, save it as PREFIX.pdmodel/.pdiparams, and
    its inputs and the outputs Paddle computes from the saved files as PREFIX.npz."""
    main, startup = paddle.static.Program(), paddle.static.Program()
    with paddle.static.program_guard(main, startup):
        feeds, targets = build()
    exe = paddle.static.Executor(paddle.CPUPlace())
    exe.run(startup)
    feed_vars = [main.global_block().var(n) for n in feeds]
    paddle.static.save_inference_model(prefix, feed_vars, targets, exe, program=main)
    program, feed_names, fetches = paddle.static.load_inference_model(prefix, exe)
    outputs = exe.run(program, feed=feeds, fetch_list=fetches)
    arrays = {**{f"in:{k}": v for k, v in feeds.items()}, **{f"out:{i}": v for i, v in enumerate(outputs)}}
    np.savez(prefix + ".npz", **arrays)


def save_optimized(prefix, build):
    """Save a model as save_model does into a temporary directory, have Paddle Inference optimize it (its IR passes,
    on the CPU), and save the program it writes (``enable_save_optim_model``) as PREFIX.pdmodel/.pdiparams, with
    the inputs and the outputs its predictor computes as PREFIX.npz."""
    import shutil
    import tempfile

    from paddle import inference

    with tempfile.TemporaryDirectory() as tmp:
        save_model(os.path.join(tmp, "model"), build)
        with np.load(os.path.join(tmp, "model.npz")) as saved:
            inputs = {k[3:]: saved[k] for k in saved.files if k.startswith("in:")}
        config = inference.Config(os.path.join(tmp, "model.pdmodel"), os.path.join(tmp, "model.pdiparams"))
        config.disable_gpu()
        config.switch_ir_optim(True)
        config.enable_save_optim_model(True)
        config.set_optim_cache_dir(os.path.join(tmp, "optimized"))
        predictor = inference.create_predictor(config)
        for name in predictor.get_input_names():
            predictor.get_input_handle(name).copy_from_cpu(inputs[name])
        predictor.run()
        outputs = [predictor.get_output_handle(n).copy_to_cpu() for n in predictor.get_output_names()]
        for ext in ("pdmodel", "pdiparams"):
            shutil.copy(os.path.join(tmp, "optimized", f"_optimized.{ext}"), f"{prefix}.{ext}")
    arrays = {**{f"in:{k}": v for k, v in inputs.items()}, **{f"out:{i}": v for i, v in enumerate(outputs)}}
    np.savez(prefix + ".npz", **arrays)


def save(out):
    os.makedirs(out, exist_ok=True)
    for name, build in MODELS.items():
        save_model(os.path.join(out, name), build)


def save_zoo(out, names):
    """The zoo's models (``zoo.py``; all, or ``names``) into OUT; one Paddle cannot build or save writes
    NAME.error with why, and the others go on."""
    import traceback

    from zoo import OPTIMIZED, ZOO

    os.makedirs(out, exist_ok=True)
    for name in names or [*ZOO, *OPTIMIZED]:
        try:
            if name in OPTIMIZED:
                save_optimized(os.path.join(out, name), ZOO[OPTIMIZED[name]])
            else:
                save_model(os.path.join(out, name), ZOO[name])
        except Exception:  # noqa: BLE001  (reported in the file the test reads)
            with open(os.path.join(out, name + ".error"), "w", encoding="utf-8") as f:
                f.write(traceback.format_exc())


def run(prefix, inputs, out):
    exe = paddle.static.Executor(paddle.CPUPlace())
    program, feed_names, fetches = paddle.static.load_inference_model(prefix, exe)
    given = np.load(inputs)
    outputs = exe.run(program, feed={n: given[n] for n in feed_names}, fetch_list=fetches)
    np.savez(out, **{f"out:{i}": v for i, v in enumerate(outputs)})


def ops(out):
    """One line per op type of Paddle's op protos: the type, then ``grad`` where Paddle registers a gradient op
    maker that makes ops (``core.has_non_empty_grad_op_maker``), else ``-``."""
    from paddle.base import core, framework

    types = sorted({proto.type for proto in framework.get_all_op_protos()})
    lines = [f"# PaddlePaddle {paddle.__version__}: {len(types)} op types from its op protos, each with 'grad' where"]
    lines.append("# it registers a gradient op maker. Written by: python tests/paddle/paddle_side.py ops THIS_FILE")
    lines += [f"{t} {'grad' if core.has_non_empty_grad_op_maker(t) else '-'}" for t in types]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "save":
        save(sys.argv[2])
    elif sys.argv[1] == "ops":
        ops(sys.argv[2])
    elif sys.argv[1] == "zoo":
        save_zoo(sys.argv[2], sys.argv[3:])
    else:
        run(*sys.argv[2:5])
