"""ONNX benchmark (issue 38): ONNX models run in blockir against onnxruntime on one thread, in one process (goal 2),
and the import of a large model (goal 3).

    python benchmarks/bench_onnx.py [--rounds 5] [--models light,convnets] [--light NAME,...] [--size 224]
                                    [--batch 1] [--paddle-python PATH] [--turn 0.3]
    python benchmarks/bench_onnx.py --import-nodes 5000 [--rounds 3]
    python benchmarks/bench_onnx.py --layers [--models ...] [--rounds 3]

The models: the light models of ONNX's backend suite (``onnx/backend/test/data/light``, in the onnx wheel: the
``real`` models with their weights made by ``ConstantOfShape``, which both sides fold when they load), as shipped;
and blockir's ONNX exports of the Paddle zoo's convnets (``bench_cnn.py --infer``'s ``paddle.vision.models``:
resnet18, mobilenet_v1, squeezenet1_0, shufflenet_v2_x0_5, 1,000 classes, eval mode), exported by
``paddle_infer_side.py`` run by ``--paddle-python`` (default ``$BLOCKIR_PADDLE_PYTHON``; without it those rows
are not run), loaded by blockir and written with ``save_inference_model(..., format="onnx")``. blockir runs each
file through ``load_inference_model`` (its import and inference passes, as ``blockir run``), onnxruntime (a dev
dependency, not one of blockir; its default graph optimizations) through an ``InferenceSession`` with
``intra_op_num_threads`` and ``inter_op_num_threads`` 1; BLAS is limited to 1 thread (threadpoolctl). Both are fed
the same standard normal input; the largest relative difference of their outputs is printed beside the times
(light squeezenet's is 1: its 1,000 logits are equal in exact arithmetic, near 7e9, and its softmax turns their
last-ulp differences into zeros; ``tests/io/test_onnx_runtime.py`` compares it at the softmax's input).

Timing (``bench_executor.alternate``): ``--rounds`` rounds, in each both run as many calls as take ``--turn``
seconds in turn, the order reversed every other round; per model the medians of the ms per call and of the
ratio blockir / onnxruntime taken within each round, with its range over the rounds.

``--layers``: where a model's time goes against onnxruntime's, layer kind by layer kind. Per model, onnxruntime's
time for the whole model; the floor its convolutions set for any kernel built on numpy's BLAS: the sgemm of each
convolution that is not depthwise (Filter ``K x C/g*kh*kw`` by the columns ``C/g*kh*kw x OH*OW``, per group),
timed alone with warm caches through ``numpy.matmul`` and summed over the model's convolutions; and its depthwise
convolutions (``group`` = input channels), each layer made a model of one ``Conv`` node and timed alone in blockir
and in onnxruntime, summed. The shapes come from ONNX's shape inference (``--batch``).

``--import-nodes N``: an ONNX model of N nodes (blocks of Conv 3x3, Relu, MatMul, Add as a residual and Relu over
[1, 8, 8, 8] values, each Conv and MatMul with initializers of its own) written to a temporary file and loaded by
``load_inference_model`` ``--rounds`` times: the median and range of the seconds (goal 3: under 2 s for 5,000).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from bench_cnn import INFER_MODELS, PaddleSide, print_rows
from bench_executor import alternate, per_call, ratio_text
from bench_peers import blas, machine
from threadpoolctl import threadpool_limits

import blockir as bir

BLOCK_NODES = 5  # Conv, Relu, MatMul, Add, Relu
CHANNELS = 8


def light_models() -> dict[str, Path]:
    """The light models in the installed onnx wheel, by name (``light_`` dropped)."""
    import onnx

    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    return {p.stem.removeprefix("light_"): p for p in sorted(light.glob("light_*.onnx"))}


def convnet_exports(python: str, directory: str, size: int) -> dict[str, Path]:
    """The Paddle zoo's convnets, exported by Paddle as ``.pdmodel``, loaded by blockir and written as ONNX."""
    side = PaddleSide(python)
    try:
        side.ask(cmd="export", dir=directory, models=INFER_MODELS.split(","), sizes=[size])
    finally:
        side.close()
    exports = {}
    for name in INFER_MODELS.split(","):
        prefix = os.path.join(directory, f"{name}_{size}")
        exe, scope = bir.Executor("cpu"), bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(prefix, exe, scope=scope)
        onnx_prefix = prefix + "_blockir"
        bir.io.save_inference_model(onnx_prefix, feeds, fetches, exe, main_program=program, scope=scope, format="onnx")
        exports[name] = Path(onnx_prefix + ".onnx")
    return exports


def onnxruntime_session(path: Path) -> Any:
    """An onnxruntime session of the model at ``path`` on one thread (intra- and inter-op)."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def random_feed(ort: Any, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard normal inputs for onnxruntime session ``ort`` (its dynamic dims ``batch``)."""
    rng = np.random.default_rng(seed)
    return {
        i.name: rng.standard_normal([d if isinstance(d, int) else batch for d in i.shape]).astype(np.float32)
        for i in ort.get_inputs()
    }


def contenders(path: Path, batch: int, seed: int = 0) -> tuple[dict[str, Callable[[], Any]], float]:
    """onnxruntime's and blockir's inference of the model at ``path`` on the same random input (its dynamic dims
    ``batch``), and the largest relative difference of their outputs."""
    ort = onnxruntime_session(path)
    feed = random_feed(ort, batch, seed)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(path, exe, scope=scope)
    ours = dict(zip(feeds, feed.values()))

    def run_blockir() -> list[Any]:
        return exe.run(program, feed=ours, fetch_list=fetches, scope=scope)

    def run_ort() -> list[Any]:
        return ort.run(None, feed)

    diff = max(
        float(np.abs(np.asarray(a) - b).max() / max(float(np.abs(b).max()), 1e-30))
        for a, b in zip(run_blockir(), run_ort())
    )
    return {"onnxruntime": run_ort, "blockir": run_blockir}, diff


def model_rows(models: dict[str, Path], args: argparse.Namespace) -> list[tuple[str, ...]]:
    rows = []
    for name, path in models.items():
        runs, diff = contenders(path, args.batch)
        n = max(2, int(args.turn / per_call(runs["blockir"], 1)))
        t = alternate(runs, n, args.rounds)
        ms = [f"{t.seconds[c] * 1e3:.2f}" for c in ("blockir", "onnxruntime")]
        rows.append((name, *ms, ratio_text(t, "blockir"), f"{diff:.0e}"))
    return rows


class ConvLayer(NamedTuple):
    """One ``Conv`` node of a model: its input's [N, C, H, W], its filter's [K, C/g, kh, kw], its output's [N, K,
    OH, OW] and its attributes."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    y: tuple[int, ...]
    attrs: tuple[tuple[str, Any], ...]

    @property
    def group(self) -> int:
        return int(dict(self.attrs).get("group", 1))

    @property
    def depthwise(self) -> bool:
        return self.group > 1 and self.group == self.x[1]


def conv_layers(path: Path, batch: int) -> list[ConvLayer]:
    """The ``Conv`` nodes of the model at ``path`` (2-D, shapes known after ONNX's shape inference with the dynamic
    first dims ``batch``), in graph order."""
    import onnx
    from onnx import helper, shape_inference

    model = onnx.load(str(path))
    for value in model.graph.input:  # fix the dynamic dims, so that inference gives every shape
        for d in value.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                d.dim_value = batch
    graph = shape_inference.infer_shapes(model).graph
    shapes = {
        v.name: tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
        for v in (*graph.input, *graph.value_info, *graph.output)
    }
    shapes.update((t.name, tuple(t.dims)) for t in graph.initializer)
    layers = []
    for node in (n for n in graph.node if n.op_type == "Conv"):
        x, w, y = (shapes.get(name, ()) for name in (*node.input[:2], node.output[0]))
        if all(len(s) == 4 and all(s) for s in (x, w, y)):
            attrs = tuple((a.name, helper.get_attribute_value(a)) for a in node.attribute)
            layers.append(ConvLayer(x, w, y, tuple((k, tuple(v) if isinstance(v, list) else v) for k, v in attrs)))
    return layers


def layer_model(layer: ConvLayer) -> Any:
    """A model of one ``Conv`` node (with a bias) of ``layer``'s shapes and attributes, random weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.normal(0, 0.1, layer.w).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(0, 0.1, layer.w[0]).astype(np.float32), "b"),
    ]
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], **dict(layer.attrs))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(layer.x))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([node], "layer", [x], [y], initializer=weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def gemm_seconds(layer: ConvLayer, rounds: int, turn: float) -> float:
    """Seconds of numpy's sgemm for ``layer``'s convolution as im2col gemms (one per group and image), warm: the
    least over ``rounds`` of ``turn`` seconds of calls."""
    images = layer.x[0]
    k, per_group, kh, kw = layer.w
    oh, ow = layer.y[2:]
    rng = np.random.default_rng(0)
    g = layer.group
    w = rng.standard_normal((k // g, per_group * kh * kw), dtype=np.float32)
    cols = rng.standard_normal((per_group * kh * kw, oh * ow), dtype=np.float32)
    out = np.empty((k // g, oh * ow), np.float32)

    def gemm() -> Any:
        return np.matmul(w, cols, out=out)

    calls = max(2, int(turn / per_call(gemm, 1)))
    return min(per_call(gemm, calls) for _ in range(rounds)) * g * images


def layer_rows(models: dict[str, Path], args: argparse.Namespace) -> list[tuple[str, ...]]:
    """Per model (module docstring, ``--layers``): onnxruntime's ms for the model; numpy's sgemm floor of its
    convolutions that are not depthwise, in ms and as a share of onnxruntime's model; its depthwise convolutions
    alone, blockir's and onnxruntime's ms and their ratio."""
    import onnx

    rows = []
    for name, path in models.items():
        ort = onnxruntime_session(path)
        feed = random_feed(ort, args.batch)
        run = partial(ort.run, None, feed)
        model_ms = 1e3 * alternate({"onnxruntime": run}, 5, args.rounds).seconds["onnxruntime"]
        layers = conv_layers(path, args.batch)
        floor_ms = 1e3 * sum(gemm_seconds(layer, args.rounds, args.turn) for layer in layers if not layer.depthwise)
        depthwise = {"blockir": 0.0, "onnxruntime": 0.0}
        with tempfile.TemporaryDirectory() as tmp:
            for k, layer in enumerate(layer for layer in layers if layer.depthwise):
                layer_path = Path(tmp) / f"layer{k}.onnx"
                onnx.save(layer_model(layer), str(layer_path))
                one, _ = contenders(layer_path, args.batch)
                n = max(2, int(args.turn / per_call(one["blockir"], 1)))
                for side, seconds in alternate(one, n, args.rounds).seconds.items():
                    depthwise[side] += 1e3 * seconds
        count = sum(layer.depthwise for layer in layers)
        ratio = f"{depthwise['blockir'] / depthwise['onnxruntime']:.2f}x" if count else "-"
        rows.append(
            (
                name,
                f"{model_ms:.2f}",
                f"{floor_ms:.2f}",
                f"{floor_ms / model_ms:.2f}x",
                str(count),
                f"{depthwise['blockir']:.2f}",
                f"{depthwise['onnxruntime']:.2f}",
                ratio,
            )
        )
    return rows


def large_model(nodes: int) -> Any:
    """An ONNX model of ``nodes`` nodes (rounded up to whole blocks of :data:`BLOCK_NODES`) over [1, 8, 8, 8]."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    graph_nodes, inits = [], []
    h = "x"
    for b in range((nodes + BLOCK_NODES - 1) // BLOCK_NODES):
        w, bias, m = (f"/block{b}/{k}" for k in ("conv.weight", "conv.bias", "matmul.weight"))
        inits += [
            numpy_helper.from_array(rng.normal(0, 0.1, (CHANNELS, CHANNELS, 3, 3)).astype(np.float32), w),
            numpy_helper.from_array(np.zeros(CHANNELS, np.float32), bias),
            numpy_helper.from_array(rng.normal(0, 0.3, (CHANNELS, CHANNELS)).astype(np.float32), m),
        ]
        out = [f"/block{b}/{k}_output_0" for k in ("Conv", "Relu", "MatMul", "Add", "Relu_1")]
        graph_nodes += [
            helper.make_node("Conv", [h, w, bias], [out[0]], name=f"/block{b}/Conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", [out[0]], [out[1]], name=f"/block{b}/Relu"),
            helper.make_node("MatMul", [out[1], m], [out[2]], name=f"/block{b}/MatMul"),
            helper.make_node("Add", [out[2], h], [out[3]], name=f"/block{b}/Add"),
            helper.make_node("Relu", [out[3]], [out[4]], name=f"/block{b}/Relu_1"),
        ]
        h = out[4]
    shape = [1, CHANNELS, 8, 8]
    graph = helper.make_graph(
        graph_nodes,
        "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(h, TensorProto.FLOAT, shape)],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def import_seconds(nodes: int, rounds: int) -> tuple[int, dict[str, list[float]]]:
    """The node count of :func:`large_model` and the seconds of each of ``rounds`` loads of it: ``wall`` (elapsed)
    and ``cpu`` (the process's CPU time, which a machine loaded by others inflates less)."""
    import onnx

    model = large_model(nodes)
    seconds: dict[str, list[float]] = {"wall": [], "cpu": []}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "large.onnx")
        onnx.save(model, path)
        for _ in range(rounds):
            exe, scope = bir.Executor("cpu"), bir.Scope()
            wall, cpu = time.perf_counter(), time.process_time()
            bir.io.load_inference_model(path, exe, scope=scope)
            seconds["wall"].append(time.perf_counter() - wall)
            seconds["cpu"].append(time.process_time() - cpu)
    return len(model.graph.node), seconds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (medians and ranges over them)")
    parser.add_argument("--models", default="light,convnets", help="light, convnets or both, comma-separated")
    parser.add_argument("--light", default="", help="only these light models (e.g. resnet50,squeezenet)")
    parser.add_argument("--size", type=int, default=224, help="the convnets' input size")
    parser.add_argument("--batch", type=int, default=1, help="the batch of the models' dynamic first dims")
    parser.add_argument("--turn", type=float, default=0.3, help="seconds of calls per contender per round")
    parser.add_argument(
        "--paddle-python",
        default=os.environ.get("BLOCKIR_PADDLE_PYTHON", ""),
        help="the Python of an environment with PaddlePaddle, which exports the convnets (default "
        "$BLOCKIR_PADDLE_PYTHON)",
    )
    parser.add_argument("--import-nodes", type=int, default=0, help="time the import of a model of N nodes instead")
    parser.add_argument("--layers", action="store_true", help="where the models' time goes, layer kind by kind")
    args = parser.parse_args(argv)
    import onnx

    versions = {"numpy": np.__version__, "onnx": onnx.__version__, "blockir": bir.__version__}
    with threadpool_limits(limits=1):
        print(f"{machine()}; Python {platform.python_version()}; BLAS threads 1 ({blas()})")
        if args.import_nodes:
            print("; ".join(f"{name} {v}" for name, v in versions.items()))
            count, seconds = import_seconds(args.import_nodes, args.rounds)
            wall, cpu = (f"{statistics.median(t):.2f} s ({min(t):.2f}-{max(t):.2f})" for t in seconds.values())
            print(f"import of a {count}-node model, {args.rounds} loads: {wall}; CPU time {cpu}")
            return
        import onnxruntime

        versions["onnxruntime"] = onnxruntime.__version__
        print("; ".join(f"{name} {v}" for name, v in versions.items()))
        print(f"{args.rounds} rounds of {args.turn} s per contender, alternating; onnxruntime on 1 thread\n")
        kinds = set(args.models.split(","))
        models: dict[str, Path] = {}
        with tempfile.TemporaryDirectory() as tmp:
            if "convnets" in kinds and args.paddle_python:
                models.update(convnet_exports(args.paddle_python, tmp, args.size))
            elif "convnets" in kinds:
                print("the convnets: not run (they are Paddle's exports: give --paddle-python)\n")
            if "light" in kinds:
                only = set(args.light.split(",")) - {""}
                models.update((f"light {k}", p) for k, p in light_models().items() if not only or k in only)
            if args.layers:
                header = ("model", "onnxruntime ms", "sgemm floor ms", "/ onnxruntime", "depthwise", "blockir ms")
                header += ("onnxruntime ms", "blockir / onnxruntime")
                print_rows([header, *layer_rows(models, args)])
                return
            header = ("model", "blockir ms", "onnxruntime ms", "/ onnxruntime (range)", "max diff")
            rows = model_rows(models, args)
        if rows:
            print_rows([header, *rows])
            ratio = {r[0]: float(r[3].split("x")[0]) for r in rows}
            worst = max(ratio, key=ratio.__getitem__)
            print(f"\nsummary: blockir up to {ratio[worst]:.2f}x onnxruntime's time ({worst})")


if __name__ == "__main__":
    main()
