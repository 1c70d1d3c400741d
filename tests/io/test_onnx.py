"""ONNX import and export (``blockir.io.onnx``, ``blockir.io.onnx_export``): names, initializers, constant
folding, lineage, refusals listed at once, bad files; exports checked by ``onnx.checker``, ONNX's reference
evaluator and a round trip through the importer."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from blockir.io import onnx_ops  # noqa: E402
from blockir.io.onnx import IMPORT_PASS, import_model, read_model  # noqa: E402
from blockir.io.onnx_export import to_onnx  # noqa: E402
from blockir.io.onnx_ops import RULES  # noqa: E402
from tests.io.onnx_peer import onnxruntime, session  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _tensor(name, dtype=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, dtype, shape)


def _run(imported, feed):
    exe, scope = bir.Executor("cpu"), bir.Scope()
    for name, value in imported.params.items():
        scope.set(name, value)
    return exe.run(imported.program, feed={imported.feed_name(k): v for k, v in feed.items()}, scope=scope)


def test_onnx_names_map_to_blockir_names_and_back() -> None:
    w = numpy_helper.from_array(np.arange(12, dtype="float32").reshape(4, 3), "onnx::W@1")
    model = _model(
        [
            helper.make_node("MatMul", ["in put", "onnx::W@1"], ["/l1/out_0"], name="/l1/MatMul"),
            helper.make_node("Relu", ["/l1/out_0"], ["y@GRAD"], name="/l1/Relu"),
        ],
        [_tensor("in put", shape=["N", 4])],
        [_tensor("y@GRAD", shape=["N", 3])],
        [w],
    )
    imported = import_model(model)
    assert imported.onnx_feeds == ["in put"] and imported.feeds == ["in_put"]
    assert imported.onnx_fetches == ["y@GRAD"] and "@" not in imported.fetches[0]
    assert imported.program.global_block().var("in_put").shape == (-1, 4)
    param = imported.names["onnx::W@1"]
    assert imported.program.global_block().var(param).persistable
    x = np.ones((2, 4), "float32")
    (got,) = _run(imported, {"in put": x})
    np.testing.assert_allclose(got, np.maximum(x @ numpy_helper.to_array(w), 0))
    bir.ir.verify(imported.program)


def _run_traced(tmp_path: Path, model: onnx.ModelProto, x: np.ndarray) -> tuple[np.ndarray, set[str]]:
    """The one output of ``model`` (saved, loaded as a user would) on the one feed ``x``, and the op types it ran."""
    path = tmp_path / "model.onnx"
    path.write_bytes(model.SerializeToString())
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(path, exe, scope=scope)
    trace = tmp_path / "trace.json"
    (got,) = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches, scope=scope, trace=trace)
    return got, {e["name"] for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"}


def test_each_op_names_its_onnx_node_as_lineage() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="my_relu")], [_tensor("x", shape=[2])], [_tensor("y")])
    (op,) = [op for op in import_model(model).program.global_block().ops if op.type == "relu"]
    assert op.attrs["op_pass"] == IMPORT_PASS and list(op.attrs["op_origin"]) == ["Relu:my_relu"]


def test_conv_batch_norm_relu_import_without_copies_and_fold_for_inference(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    params = {
        "w": rng.standard_normal((4, 3, 3, 3)),
        "b": rng.standard_normal(4),
        "scale": rng.uniform(0.5, 2, 4),
        "beta": rng.standard_normal(4),
        "mean": rng.standard_normal(4),
        "var": rng.uniform(0.5, 2, 4),
    }
    model = _model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["c", "scale", "beta", "mean", "var"], ["n"]),
            helper.make_node("Relu", ["n"], ["y"]),
        ],
        [_tensor("x", shape=[1, 3, 5, 5])],
        [_tensor("y")],
        [numpy_helper.from_array(v.astype("float32"), k) for k, v in params.items()],
    )
    imported = import_model(model)
    ops = imported.program.global_block().ops
    assert [op.type for op in ops] == ["feed", "conv2d", "elementwise_add", "batch_norm", "relu", "fetch"]
    (bn,) = [op for op in ops if op.type == "batch_norm"]
    assert bn.output("MeanOut") == bn.input("Mean") and bn.output("VarianceOut") == bn.input("Variance")
    x = rng.standard_normal((1, 3, 5, 5)).astype("float32")
    got, ran = _run_traced(tmp_path, model, x)
    assert "fused_conv2d_add_act" in ran and not ran & {"conv2d", "batch_norm", "relu", "assign"}
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("bias_shape", "per_channel"),
    [((1, 4, 1, 1), True), ((4, 1, 1), True), ((1, 1, 1, 5), False), ((1, 4, 5, 5), False)],
    ids=["1C11", "C11", "along_W", "whole"],
)
def test_a_constant_on_the_channels_imports_as_paddles_per_channel_operand(
    tmp_path: Path, bias_shape: tuple[int, ...], per_channel: bool
) -> None:
    """Add and Mul of a constant that broadcasts along dim 1 alone become axis=1 ops of its C values (a conv's bias in
    Paddle's form, which the inference passes fuse into the conv); other constants keep numpy's broadcasting."""
    rng = np.random.default_rng(1)
    w, b, s = rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(bias_shape), rng.standard_normal((1, 4, 1, 1))
    model = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Add", ["c", "b"], ["a"]),
            helper.make_node("Relu", ["a"], ["r"]),
            helper.make_node("Mul", ["r", "s"], ["y"]),
        ],
        [_tensor("x", shape=[1, 3, 5, 5])],
        [_tensor("y")],
        [numpy_helper.from_array(v.astype("float32"), k) for k, v in {"w": w, "b": b, "s": s}.items()],
    )
    imported = import_model(model)
    block = imported.program.global_block()
    add, mul = (next(op for op in block.ops if op.type == t) for t in ("elementwise_add", "elementwise_mul"))
    assert mul.attr("axis") == 1 and block.var(mul.input("Y")[0]).shape == (4,)
    assert add.attr("axis") == (1 if per_channel else -1)
    assert block.var(add.input("Y")[0]).shape == ((4,) if per_channel else bias_shape)
    x = rng.standard_normal((1, 3, 5, 5)).astype("float32")
    got, ran = _run_traced(tmp_path, model, x)
    assert ("conv2d" not in ran) == per_channel
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


_C = 4  # the channels of the batch-norm tests


def _bn_model(tail: list, outputs: list[str], consts: dict[str, tuple[int, ...]]):
    """x [2, C, 3, 5] -> BatchNormalization -> "n", then the nodes ``tail``; ``consts``: initializers (random) by
    shape, beside the batch norm's scale, beta, mean and var."""
    rng = np.random.default_rng(7)
    values = {
        "scale": rng.uniform(-2, 2, _C),
        "beta": rng.standard_normal(_C),
        "mean": rng.standard_normal(_C),
        "var": rng.uniform(0.5, 2, _C),
        **{name: rng.uniform(-2, 2, shape) for name, shape in consts.items()},
    }
    bn = helper.make_node("BatchNormalization", ["x", "scale", "beta", "mean", "var"], ["n"], name="bn")
    return _model(
        [bn, *tail],
        [_tensor("x", shape=[2, _C, 3, 5])],
        [_tensor(name) for name in outputs],
        [numpy_helper.from_array(v.astype("float32"), k) for k, v in values.items()],
    )


_BN_CASES = {
    # the caffe2 exports' pattern (light densenet121, inception_v2): all folded, the batch_norm writes "r"
    "mul_add_relu": (
        [
            helper.make_node("Mul", ["n", "m"], ["a"], name="mul"),
            helper.make_node("Add", ["a", "b"], ["r"], name="add"),
            helper.make_node("Relu", ["r"], ["y"]),
        ],
        ["y"],
        {"m": (_C, 1, 1), "b": (1, _C, 1, 1)},
        ["batch_norm", "relu"],
    ),
    "mul_only": ([helper.make_node("Mul", ["n", "m"], ["y"], name="mul")], ["y"], {"m": (_C, 1, 1)}, ["batch_norm"]),
    "add_only": ([helper.make_node("Add", ["n", "b"], ["y"], name="add")], ["y"], {"b": (_C, 1, 1)}, ["batch_norm"]),
    # the batch norm's output read twice (by a node, by a graph output): not folded
    "two_readers": (
        [helper.make_node("Mul", ["n", "m"], ["a"]), helper.make_node("Relu", ["n"], ["r"])],
        ["a", "r"],
        {"m": (_C, 1, 1)},
        ["batch_norm", "elementwise_mul", "relu"],
    ),
    "bn_output_fetched": (
        [helper.make_node("Mul", ["n", "m"], ["a"])],
        ["n", "a"],
        {"m": (_C, 1, 1)},
        ["batch_norm", "elementwise_mul"],
    ),
    # the Mul folds; its output is read twice, so the Add after it does not
    "mul_read_twice": (
        [
            helper.make_node("Mul", ["n", "m"], ["a"]),
            helper.make_node("Add", ["a", "b"], ["s"]),
            helper.make_node("Relu", ["a"], ["r"]),
        ],
        ["s", "r"],
        {"m": (_C, 1, 1), "b": (_C, 1, 1)},
        ["batch_norm", "elementwise_add", "relu"],
    ),
    # constants that are not per channel: along W, of the whole shape, a scalar
    "not_per_channel": (
        [
            helper.make_node("Mul", ["n", "w"], ["a"]),
            helper.make_node("Add", ["a", "whole"], ["s"]),
            helper.make_node("Mul", ["s", "k"], ["y"]),
        ],
        ["y"],
        {"w": (1, 1, 1, 5), "whole": (2, _C, 3, 5), "k": ()},
        ["batch_norm", "elementwise_mul", "elementwise_add", "elementwise_mul"],
    ),
    # the constant first: not folded (the per-channel form takes B as the constant)
    "constant_first": (
        [helper.make_node("Mul", ["m", "n"], ["y"])],
        ["y"],
        {"m": (_C, 1, 1)},
        ["batch_norm", "elementwise_mul"],
    ),
}


@pytest.mark.parametrize("case", list(_BN_CASES))
def test_a_per_channel_mul_and_add_after_a_batch_norm_fold_into_it(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """BatchNormalization then Mul and Add of per-channel constants import as one batch_norm (scale * m, bias * m +
    a) writing the last node's output, where nothing else reads the values folded away; the same outputs as ONNX's
    reference, onnxruntime and the import without the fold."""
    tail, outputs, consts, expected = _BN_CASES[case]
    model = _bn_model(tail, outputs, consts)
    imported = import_model(model)
    ops = [op for op in imported.program.global_block().ops if op.type not in ("feed", "fetch")]
    assert [op.type for op in ops] == expected
    bir.ir.verify(imported.program)
    if case == "mul_add_relu":
        bn = ops[0]
        assert list(bn.attrs["op_origin"]) == ["BatchNormalization:bn", "Mul:mul", "Add:add"]
        assert bn.output("Y") == (imported.names["r"],) and "n" not in imported.names and "a" not in imported.names
    if expected == ["batch_norm"]:  # the graph's output, written by the batch_norm under its name
        assert ops[0].output("Y") == tuple(imported.fetches) and imported.onnx_fetches == ["y"]
    # the constants a fold replaced (the batch norm's scale and beta) are no parameters: every parameter is read
    assert set(imported.params) <= {name for op in imported.program.ops() for name in op.input_names()}
    x = np.random.default_rng(3).standard_normal((2, _C, 3, 5)).astype("float32")
    got = _run(imported, {"x": x})
    expected_values = ReferenceEvaluator(model).run(None, {"x": x})
    for a, b in zip(got, expected_values, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    if onnxruntime is not None:
        for a, b in zip(got, session(model).run(None, {"x": x}), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    monkeypatch.setattr(onnx_ops, "_into_batch_norm", lambda *args: False)
    unfolded = import_model(model)
    assert [op.type for op in unfolded.program.global_block().ops if op.type == "batch_norm"] == ["batch_norm"]
    for a, b in zip(got, _run(unfolded, {"x": x}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_a_mul_after_a_batch_norm_folds_per_batch_norm_where_they_share_their_scale() -> None:
    """Two batch norms of one scale and beta, one followed by a Mul (folded), one fetched as it is: the first
    reads new constants, the second the initializers, which stay parameters."""
    tail = [
        helper.make_node("BatchNormalization", ["x", "scale", "beta", "mean", "var"], ["n2"]),
        helper.make_node("Mul", ["n", "m"], ["y"]),
    ]
    model = _bn_model(tail, ["y", "n2"], {"m": (_C, 1, 1)})
    imported = import_model(model)
    first, second = (op for op in imported.program.global_block().ops if op.type == "batch_norm")
    assert first.input("Scale") != (imported.names["scale"],) and second.input("Scale") == (imported.names["scale"],)
    assert {imported.names["scale"], imported.names["beta"]} <= set(imported.params)
    x = np.random.default_rng(4).standard_normal((2, _C, 3, 5)).astype("float32")
    for a, b in zip(_run(imported, {"x": x}), ReferenceEvaluator(model).run(None, {"x": x}), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_a_mul_in_a_subgraph_does_not_fold_into_a_batch_norm_outside_it() -> None:
    """The batch norm's one reader is a Mul in a branch of an If (another block): not folded."""
    mul = helper.make_node("Mul", ["n", "m"], ["t"])
    then = helper.make_graph([mul], "then", [], [_tensor("t")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [], [_tensor("e")])
    tail = [helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    model = _bn_model(tail, ["y"], {"m": (_C, 1, 1)})
    model.graph.input.append(_tensor("c", TensorProto.BOOL, []))
    imported = import_model(model)
    assert [op.type for op in imported.program.global_block().ops if op.type == "batch_norm"] == ["batch_norm"]
    assert "elementwise_mul" in {op.type for op in imported.program.ops()}
    x = np.random.default_rng(5).standard_normal((2, _C, 3, 5)).astype("float32")
    feed = {"x": x, "c": np.asarray(True)}
    (got,) = _run(imported, feed)
    (expected,) = ReferenceEvaluator(model).run(None, feed)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_an_empty_input_name_is_an_absent_input() -> None:
    model = _model(
        [helper.make_node("Clip", ["x", "", "hi"], ["y"])],
        [_tensor("x", shape=[3])],
        [_tensor("y")],
        [numpy_helper.from_array(np.asarray(0.5, "float32"), "hi")],
    )
    (got,) = _run(import_model(model), {"x": np.asarray([-1, 0.25, 2], "float32")})
    np.testing.assert_allclose(got, [-1, 0.25, 0.5])


def test_constant_chains_fold_at_import() -> None:
    shape = numpy_helper.from_array(np.asarray([2, 3], "int64"), "shape")
    model = _model(
        [
            helper.make_node(
                "ConstantOfShape", ["shape"], ["w"], value=numpy_helper.from_array(np.asarray([2.0], "float32"))
            ),
            helper.make_node("Exp", ["w"], ["e"]),
            helper.make_node("Add", ["x", "e"], ["y"]),
        ],
        [_tensor("x", shape=[2, 3])],
        [_tensor("y")],
        [shape],
    )
    imported = import_model(model)
    types = [op.type for op in imported.program.global_block().ops]
    assert types == ["feed", "elementwise_add", "fetch"]
    (value,) = imported.params.values()
    np.testing.assert_allclose(value, np.full((2, 3), np.exp(2.0), "float32"))
    (got,) = _run(imported, {"x": np.zeros((2, 3), "float32")})
    np.testing.assert_allclose(got, value)


def test_unsupported_nodes_are_listed_at_once_naming_node_and_op() -> None:
    model = _model(
        [
            helper.make_node("Loop", ["m", "c"], ["y"], name="the_loop", body=helper.make_graph([], "b", [], [])),
            helper.make_node("ImageDecoder", ["x"], ["d"], name="the_decoder"),
            helper.make_node("Relu", ["d"], ["r"], name="after_decoder"),
        ],
        [_tensor("m", TensorProto.INT64, []), _tensor("c", TensorProto.BOOL, []), _tensor("x", shape=[2, 2])],
        [_tensor("y"), _tensor("r")],
    )
    with pytest.raises(BlockirError) as e:
        import_model(model, "m.onnx")
    text = str(e.value)
    assert text.startswith("m.onnx: cannot import 2 part(s)")
    assert "the_loop (Loop): its body takes 0 inputs, the node gives it 2" in text  # a malformed subgraph
    assert "the_decoder (ImageDecoder): blockir has no op" in text
    assert "after_decoder" not in text  # a node reading a refused one's output is not reported again


def test_types_blockir_lacks_are_refused_by_their_onnx_names() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", TensorProto.BFLOAT16, [2])], [_tensor("y")])
    with pytest.raises(BlockirError, match="graph input 'x' is of ONNX type BFLOAT16"):
        import_model(model)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p.write_bytes(b"\x00garbage\xff" * 3), "not an ONNX model"),
        (lambda p: p.write_bytes(_small().SerializeToString()[:40]), "not an ONNX model"),
        (lambda p: p.write_bytes(b""), "not an ONNX model"),
    ],
)
def test_bad_files_are_one_error_naming_the_file(tmp_path: Path, make, message: str) -> None:
    path = tmp_path / "bad.onnx"
    make(path)
    with pytest.raises(BlockirError, match=message) as e:
        read_model(path)
    assert str(path) in str(e.value)


def test_a_cycle_or_a_missing_input_names_the_node(tmp_path: Path) -> None:
    model = _model(
        [helper.make_node("Relu", ["z"], ["y"], name="first"), helper.make_node("Relu", ["y"], ["z"], name="second")],
        [_tensor("x", shape=[2])],
        [_tensor("z")],
    )
    with pytest.raises(BlockirError, match=r"node first \(Relu\): input 'z' is a later node's output"):
        import_model(model, "cyc.onnx")
    model = _model([helper.make_node("Relu", ["nowhere"], ["y"], name="n")], [_tensor("x", shape=[2])], [_tensor("y")])
    with pytest.raises(BlockirError, match="input 'nowhere' is defined nowhere"):
        import_model(model)


def test_opsets_outside_the_range_are_refused() -> None:
    newest = onnx.defs.onnx_opset_version()
    model = _model(
        [helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", shape=[2])], [_tensor("y")], opset=newest + 1
    )
    with pytest.raises(BlockirError, match=f"opset {newest + 1}; blockir imports opsets 1 to {newest}"):
        import_model(model)


def test_the_table_covers_its_rows() -> None:
    names = {row.onnx for row in RULES}
    assert {"Conv", "Gemm", "MatMul", "Resize", "BatchNormalization", "Softmax", "Reshape", "Slice"} <= names
    assert {"Loop", "If", "Scan", "LSTM", "GRU", "RNN", "QuantizeLinear", "Unique", "BitShift"} <= names
    for row in RULES:
        assert row.since <= row.until


def _small():
    return _model([helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", shape=[2])], [_tensor("y", shape=[2])])


# -- export ------------------------------------------------------------------------------------------


def _cnn():
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 1, 8, 8], dtype="float32")
        c = bir.layers.conv2d(x, num_filters=4, filter_size=3, padding=1, act="relu")
        b = bir.layers.batch_norm(c)
        p = bir.layers.pool2d(b, pool_size=2, pool_stride=2)
        pred = bir.layers.fc(p, size=10, act="softmax")
    return main, startup, pred, np.random.default_rng(0).random((2, 1, 8, 8), dtype="float32")


def _mlp():
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 13], dtype="float32")
        hidden = bir.layers.fc(x, size=16, act="relu")
        pred = bir.layers.fc(hidden, size=3, act="softmax")
    return main, startup, pred, np.random.default_rng(1).random((4, 13), dtype="float32")


@pytest.mark.parametrize("build", [_mlp, _cnn], ids=["mlp", "cnn"])
def test_exports_pass_the_checker_and_compute_blockirs_outputs(tmp_path: Path, build) -> None:
    main, startup, pred, x = build()
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    want = exe.run(main.clone(for_test=True), feed={"x": x}, fetch_list=[pred.name], scope=scope)[0]
    bir.io.save_inference_model(tmp_path / "model", ["x"], [pred], exe, main_program=main, scope=scope, format="onnx")
    model = onnx.load(str(tmp_path / "model.onnx"))
    onnx.checker.check_model(model, full_check=True)
    (ref,) = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)
    loaded_scope = bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(tmp_path / "model.onnx", exe, scope=loaded_scope)
    assert feeds == ["x"]
    (got,) = exe.run(program, feed={"x": x}, fetch_list=fetches, scope=loaded_scope)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_ops_without_an_onnx_export_are_listed_at_once() -> None:
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=[2, 3], dtype="float32")
    block.append_op("cumprod", {"X": ["x"]}, {"Out": [block.create_var("a")]}, {"dim": 0})
    block.append_op("roll", {"X": ["a"]}, {"Out": [block.create_var("b")]}, {"shifts": [1], "axis": [0]})
    with pytest.raises(BlockirError, match=r"ops ONNX export cannot write: cumprod \(1: no ONNX equivalent\); roll"):
        to_onnx(program, {})


def test_a_model_imported_then_exported_computes_the_same(tmp_path: Path) -> None:
    w = numpy_helper.from_array(np.random.default_rng(2).random((3, 2, 3, 3), dtype="float32"), "w")
    model = _model(
        [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("GlobalAveragePool", ["r"], ["g"]),
            helper.make_node("Flatten", ["g"], ["y"]),
        ],
        [_tensor("x", shape=["N", 2, 5, 5])],
        [_tensor("y")],
        [w],
    )
    x = np.random.default_rng(3).random((2, 2, 5, 5), dtype="float32")
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    path = tmp_path / "in.onnx"
    onnx.save(model, str(path))
    exe, scope = bir.Executor("cpu"), bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(path, exe, scope=scope)
    (got,) = exe.run(program, feed={"x": x}, fetch_list=fetches, scope=scope)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    bir.io.save_inference_model(tmp_path / "out", feeds, fetches, exe, main_program=program, scope=scope, format="onnx")
    again = onnx.load(str(tmp_path / "out.onnx"))
    onnx.checker.check_model(again, full_check=True)
    (ref,) = ReferenceEvaluator(again).run(None, {"x": x})
    np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-6)


def test_tril_triu_and_where_index_export_as_trilu_and_nonzero(tmp_path: Path) -> None:
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=[3, 4], dtype="float32")
    block.append_op("tril_triu", {"X": ["x"]}, {"Out": [block.create_var("t")]}, {"diagonal": 1, "lower": True})
    block.append_op("where_index", {"Condition": ["t"]}, {"Out": [block.create_var("i")]})
    bir.passes.FeedFetch(feeds=("x",), targets=("t", "i")).run(program)
    model = to_onnx(program, {})
    onnx.checker.check_model(model, full_check=True)
    x = np.asarray([[1, 2, 0, 4], [5, 0, 7, 8], [9, 10, 11, 0]], "float32")
    tri, index = ReferenceEvaluator(model).run(None, {"x": x})
    np.testing.assert_array_equal(tri, np.tril(x, 1))
    np.testing.assert_array_equal(index, np.argwhere(np.tril(x, 1)))
    imported = import_model(model)
    got_tri, got_index = _run(imported, {"x": x})
    np.testing.assert_array_equal(got_tri, tri)
    np.testing.assert_array_equal(got_index, index)


def _recurrent_model(op: str, direction: str, layout: int, lengths: bool, x_shape, **attrs):
    """One LSTM (with peepholes) or GRU (linear_before_reset=0) node: the cells blockir runs as while loops."""
    rng = np.random.default_rng(4)
    dirs, hidden, gates = 2 if direction == "bidirectional" else 1, 3, 4 if op == "LSTM" else 3
    width = x_shape[-1]
    batch = x_shape[0] if layout else x_shape[1]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    values = {
        "W": rng.uniform(-1, 1, (dirs, gates * hidden, width)),
        "R": rng.uniform(-1, 1, (dirs, gates * hidden, hidden)),
        "B": rng.uniform(-1, 1, (dirs, 2 * gates * hidden)),
    }
    names = ["x", "W", "R", "B", "lengths" if lengths else "", "h0", *(["c0", "P"] if op == "LSTM" else [])]
    if op == "LSTM":
        values["P"] = rng.uniform(-1, 1, (dirs, 3 * hidden))
    outputs = ["y", "y_h", *(["y_c"] if op == "LSTM" else [])]
    node = helper.make_node(op, names, outputs, direction=direction, layout=layout, hidden_size=hidden, **attrs)
    inputs = [_tensor("x", shape=list(x_shape)), _tensor("h0", shape=state)]
    inputs += [_tensor("c0", shape=state)] if op == "LSTM" else []
    inputs += [_tensor("lengths", TensorProto.INT32, [batch])] if lengths else []
    initializers = [numpy_helper.from_array(v.astype("float32"), k) for k, v in values.items()]
    model = _model([node], inputs, [_tensor(o) for o in outputs], initializers)
    feed = {name: rng.uniform(-1, 1, list(x_shape) if name == "x" else state).astype("float32") for name in names[5:]}
    feed["x"] = rng.uniform(-1, 1, x_shape).astype("float32")
    return model, {k: v for k, v in feed.items() if k != "P"}


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize(("op", "attrs"), [("LSTM", {}), ("GRU", {"linear_before_reset": 0})])
def test_recurrent_cells_rnn_cannot_compute_run_as_loops(op: str, attrs: dict, direction: str, layout: int) -> None:
    model, feed = _recurrent_model(op, direction, layout, False, (2, 4, 5) if layout else (4, 2, 5), **attrs)
    want = ReferenceEvaluator(model).run(None, feed)
    got = _run(import_model(model), feed)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("op", "attrs"), [("LSTM", {}), ("GRU", {"linear_before_reset": 0})])
def test_recurrent_loops_stop_each_sequence_at_its_length(op: str, attrs: dict) -> None:
    """Each sequence computes what it computes alone, cut at its length (ONNX's reference ignores lengths): zeros
    after, its last states kept."""
    model, feed = _recurrent_model(op, "bidirectional", 0, True, (4, 3, 2), **attrs)
    feed["lengths"] = lengths = np.asarray([4, 2, 1], "int32")
    got = _run(import_model(model), feed)
    for b, length in enumerate(lengths):
        alone, _ = _recurrent_model(op, "bidirectional", 0, False, (int(length), 1, 2), **attrs)
        one = {k: v[:length, b : b + 1] if k == "x" else v[:, b : b + 1] for k, v in feed.items() if k != "lengths"}
        want = ReferenceEvaluator(alone).run(None, one)
        np.testing.assert_allclose(got[0][:length, :, b : b + 1], want[0], rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(got[0][length:, :, b], 0)
        for g, w in zip(got[1:], want[1:], strict=True):
            np.testing.assert_allclose(g[:, b : b + 1], w, rtol=1e-5, atol=1e-5)


def test_3d_convolutions_and_pools_import_and_export_computing_onnxs_values(tmp_path: Path) -> None:
    """Conv (groups) and ConvTranspose of 3 spatial dims (strides, pads), AveragePool 3-D counting its padding (of
    symmetric pads: pool3d; else gathered, as pool3d's divisor differs) and a dilated MaxPool (gathered: pool3d
    has no dilations) import as conv3d, conv3d_transpose, pool3d and the gathers,
    compute ONNX's reference values, export, and compute them again from the exported file."""
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array(rng.standard_normal((4, 1, 2, 3, 2)).astype("float32"), "w")
    wt = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 2, 2)).astype("float32"), "wt")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], group=2, strides=[1, 2, 1], pads=[1, 0, 1, 0, 1, 1]),
        helper.make_node("ConvTranspose", ["c", "wt"], ["t"], strides=[2, 1, 1], pads=[1, 0, 0, 0, 1, 0]),
        helper.make_node(
            "AveragePool", ["t"], ["a"], kernel_shape=[2, 2, 2], pads=[1, 0, 1, 1, 0, 1], count_include_pad=1
        ),
        # pads that differ before and after: Paddle's divisor would count other padding than ONNX's
        helper.make_node(
            "AveragePool", ["a"], ["b"], kernel_shape=[2, 2, 2], pads=[1, 1, 0, 0, 1, 1], count_include_pad=1
        ),
        helper.make_node("MaxPool", ["b"], ["y"], kernel_shape=[2, 2, 2], dilations=[2, 1, 2], strides=[1, 2, 1]),
    ]
    model = _model(nodes, [_tensor("x", shape=[2, 2, 5, 6, 4])], [_tensor("y")], [w, wt])
    model = onnx.shape_inference.infer_shapes(model)
    x = rng.standard_normal((2, 2, 5, 6, 4)).astype("float32")
    (want,) = ReferenceEvaluator(model).run(None, {"x": x})
    imported = import_model(model)
    types = {op.type for op in imported.program.global_block().ops}
    assert {"conv3d", "conv3d_transpose", "pool3d", "index_select", "reduce_sum", "reduce_max"} <= types
    (got,) = _run(imported, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    exported = to_onnx(imported.program, imported.params)
    onnx.checker.check_model(exported, full_check=True)
    (again,) = ReferenceEvaluator(exported).run(None, {imported.feed_name("x"): x})
    np.testing.assert_allclose(again, want, rtol=1e-5, atol=1e-5)


def test_pools_the_importer_cannot_place_are_refused_naming_why() -> None:
    dilated = _model(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2])],
        [_tensor("x", shape=[1, 1, "h", "w"])],
        [_tensor("y")],
    )
    with pytest.raises(BlockirError, match=r"MaxPool\): dilations or LpPool of an input whose spatial dims are known"):
        import_model(dilated)
    indices = _model(
        [helper.make_node("MaxPool", ["x"], ["y", "i"], kernel_shape=[2, 2, 2])],
        [_tensor("x", shape=[1, 1, 4, 4, 4])],
        [_tensor("y"), _tensor("i", TensorProto.INT64)],
    )
    with pytest.raises(BlockirError, match=r"the Indices output of other than a 2-D pool"):
        import_model(indices)


def _mel_model(bins: int, dft: int, rate: int, low: float, high: float, hertz: str, **attrs):
    values = [np.asarray(bins), np.asarray(dft), np.asarray(rate), np.asarray(low, hertz), np.asarray(high, hertz)]
    names = ["bins", "dft", "rate", "low", "high"]
    node = helper.make_node("MelWeightMatrix", names, ["y"], **attrs)
    return _model([node], [], [_tensor("y")], [numpy_helper.from_array(v, k) for k, v in zip(names, values)])


@pytest.mark.parametrize(
    ("bins", "dft", "rate", "low", "high", "hertz", "attrs"),
    [
        (8, 16, 8192, 0.0, 4096.0, "float32", {}),
        (20, 512, 16000, 30.0, 7600.0, "float32", {}),
        (24, 32, 8000, 100.0, 3900.0, "float64", {"output_datatype": TensorProto.DOUBLE}),  # filters one bin wide
    ],
)
def test_mel_weight_matrix_is_a_constant_of_onnxs_filters(bins, dft, rate, low, high, hertz, attrs) -> None:
    model = _mel_model(bins, dft, rate, low, high, hertz, **attrs)
    (want,) = ReferenceEvaluator(model).run(None, {})
    imported = import_model(model)
    assert not [op for op in imported.program.global_block().ops if op.type not in ("feed", "fetch", "assign")]
    (got,) = _run(imported, {})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(
    ("bins", "high", "message"),
    [
        (8, 8000.0, r"MelWeightMatrix.*outside the 9 bins of a 16-point DFT"),
        (0, 4000.0, r"MelWeightMatrix.*num_mel_bins 0, dft_length 16 and sample_rate 8000 must be >= 1"),
    ],
)
def test_mel_weight_matrices_onnx_cannot_make_are_refused(bins: int, high: float, message: str) -> None:
    with pytest.raises(BlockirError, match=message):
        import_model(_mel_model(bins, 16, 8000, 0.0, high, "float32"))


# -- FlexAttention (ai.onnx.preview)

_PREVIEW = "ai.onnx.preview"


def _flex_model(nodes, inputs, outputs, dtype=TensorProto.FLOAT, preview=True):
    """A model of ``nodes`` importing opset 26 and (``preview``) ai.onnx.preview's version 1."""
    graph = helper.make_graph(nodes, "g", [_tensor(name, dtype, shape) for name, shape in inputs], outputs)
    opsets = [helper.make_opsetid("", 26), *([helper.make_opsetid(_PREVIEW, 1)] if preview else [])]
    return helper.make_model(graph, opset_imports=opsets)


def _modifier(name: str, nodes, initializers=(), dtype=TensorProto.FLOAT):
    """A score_mod or prob_mod graph: ``s`` -> ``out``, by ``nodes`` (the same names in every one made)."""
    return helper.make_graph(
        nodes, name, [_tensor("s", dtype, ["B", "H", "L", "S"])], [_tensor("out", dtype, None)], list(initializers)
    )


def _flex(inputs, output, name, **graphs_and_attrs):
    return helper.make_node("FlexAttention", inputs, [output], name=name, domain=_PREVIEW, **graphs_and_attrs)


def _causal_bias(bias: float):
    """scores where the query position is at least the key's (from the scores' shape at run time), else -inf; plus
    ``bias``."""
    constants = {
        "two": np.asarray([2], "int64"), "three": np.asarray([3], "int64"), "zero": np.asarray(0, "int64"),
        "one": np.asarray(1, "int64"), "column": np.asarray([-1, 1], "int64"), "row": np.asarray([1, -1], "int64"),
        "minus_inf": np.asarray(-np.inf, "float32"), "bias": np.asarray(bias, "float32"),
    }  # fmt: skip
    nodes = [
        helper.make_node("Shape", ["s"], ["shape"]),
        helper.make_node("Gather", ["shape", "two"], ["l"]),
        helper.make_node("Gather", ["shape", "three"], ["k"]),
        helper.make_node("Squeeze", ["l"], ["l0"]),
        helper.make_node("Squeeze", ["k"], ["k0"]),
        helper.make_node("Range", ["zero", "l0", "one"], ["lr"]),
        helper.make_node("Range", ["zero", "k0", "one"], ["kr"]),
        helper.make_node("Reshape", ["lr", "column"], ["q_at"]),
        helper.make_node("Reshape", ["kr", "row"], ["k_at"]),
        helper.make_node("GreaterOrEqual", ["q_at", "k_at"], ["seen"]),
        helper.make_node("Where", ["seen", "s", "minus_inf"], ["masked"]),
        helper.make_node("Add", ["masked", "bias"], ["out"]),
    ]
    return _modifier("causal", nodes, [numpy_helper.from_array(v, k) for k, v in constants.items()])


def test_flex_attention_imports_its_modifiers_inline_computing_onnxs_values() -> None:
    """Grouped-query heads, a causal score_mod computed from the scores' shape at run time and a prob_mod; a second
    FlexAttention whose score_mod has the same names but another bias (each subgraph's names are its own)."""
    scaled = _modifier("scaled", [helper.make_node("Mul", ["s", "half"], ["out"])], [_const("half", 0.5)])
    nodes = [
        _flex(["q", "k", "v"], "y", "first", score_mod=_causal_bias(0.25), prob_mod=scaled),
        _flex(["y", "k2", "v2"], "z", "second", score_mod=_causal_bias(-1.5), scale=0.3),
    ]
    shapes = {"q": [2, 4, 5, 3], "k": [2, 2, 5, 3], "v": [2, 2, 5, 3], "k2": [2, 4, 6, 3], "v2": [2, 4, 6, 2]}
    model = _flex_model(nodes, shapes.items(), [_tensor("z")])
    rng = np.random.default_rng(2)
    feed = {name: rng.standard_normal(shape).astype("float32") for name, shape in shapes.items()}
    (want,) = ReferenceEvaluator(model).run(None, feed)
    imported = import_model(model)
    assert imported.program.num_blocks == 1  # the modifiers inline, in the node's block
    ops = imported.program.global_block().ops
    types = [op.type for op in ops]
    assert types.count("softmax") == 2 and types.count("index_select") == 2 and "where" in types
    assert {op.attrs["op_origin"][0] for op in ops if op.type == "softmax"} == {
        "FlexAttention:first",
        "FlexAttention:second",
    }
    (got,) = _run(imported, feed)
    assert got.shape == (2, 4, 5, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _const(name: str, value: float, dtype: str = "float32"):
    return numpy_helper.from_array(np.asarray(value, dtype), name)


@pytest.mark.parametrize(
    ("dtype", "precision", "rtol"),
    [("float16", None, 1e-3), ("float64", None, 1e-12), ("float64", TensorProto.FLOAT, 1e-6), ("float32", 11, 1e-6)],
)
def test_flex_attention_computes_in_its_softmax_precision(dtype: str, precision, rtol: float) -> None:
    onnx_type = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    compute = {None: "float64" if dtype == "float64" else "float32", 1: "float32", 11: "float64"}[precision]
    bias = _modifier(
        "bias",
        [helper.make_node("Add", ["s", "b"], ["out"])],
        [_const("b", 0.5, compute)],
        helper.np_dtype_to_tensor_dtype(np.dtype(compute)),
    )
    attrs = {"score_mod": bias} if precision is None else {"score_mod": bias, "softmax_precision": precision}
    shapes = {"q": [1, 2, 3, 4], "k": [1, 2, 5, 4], "v": [1, 2, 5, 3]}
    model = _flex_model(
        [_flex(["q", "k", "v"], "y", "flex", **attrs)], shapes.items(), [_tensor("y", onnx_type)], onnx_type
    )
    rng = np.random.default_rng(3)
    feed = {name: rng.random(shape).astype(dtype) for name, shape in shapes.items()}
    (want,) = ReferenceEvaluator(model).run(None, feed)
    imported = import_model(model)
    (softmax,) = [op for op in imported.program.global_block().ops if op.type == "softmax"]
    assert imported.program.global_block().var(softmax.output("Out")[0]).dtype == compute
    (got,) = _run(imported, feed)
    assert got.dtype == want.dtype == dtype
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"k": [1, 3, 5, 4], "v": [1, 3, 5, 4]}, r"flex \(FlexAttention\): Q's 4 heads must be a multiple of K's 3"),
        ({"v": [1, 1, 5, 4]}, r"V must have K's heads \(it has 1\)"),
        ({"q": [1, "h", 3, 4]}, r"the head counts of Q, K and V \(-1, 2, 2\) must be known at import"),
        ({"q": [4, 3, 4]}, r"Q, K and V must be rank-4 .*got Q \[4, 3, 4\], K \[1, 2, 5, 4\]"),
        ({"attrs": {"softmax_precision": TensorProto.INT32}}, r"softmax_precision 6 \(int32\): one of float16"),
        (
            {"attrs": {"score_mod": helper.make_graph([], "two", [_tensor("a"), _tensor("b")], [_tensor("a")])}},
            r"its score_mod takes 2 inputs, the node gives it 1",
        ),
        ({"attrs": {"prob_mod": helper.make_graph([], "none", [_tensor("p")], [])}}, r"its prob_mod gives 0 outputs"),
        ({"domain": ""}, r"flex \(FlexAttention\): blockir has no op for it"),
        (
            {"op": "FlexMatMul"},
            r"FlexMatMul\): domain 'ai.onnx.preview' \(blockir imports the default ONNX domain, and FlexAttention "
            r"of ai.onnx.preview\)",
        ),
        ({"domain": "com.microsoft"}, r"domain 'com.microsoft' \(blockir imports the default ONNX domain"),
        ({"preview": False}, r"the model imports no version of domain 'ai.onnx.preview'"),
    ],
)
def test_flex_attention_refusals_name_what_is_wrong(change: dict, message: str) -> None:
    shapes = {"q": [1, 4, 3, 4], "k": [1, 2, 5, 4], "v": [1, 2, 5, 4]}
    shapes.update({k: v for k, v in change.items() if k in shapes})
    node = helper.make_node(
        change.get("op", "FlexAttention"),
        ["q", "k", "v"],
        ["y"],
        name="flex",
        domain=change.get("domain", _PREVIEW),
        **change.get("attrs", {}),
    )
    model = _flex_model([node], shapes.items(), [_tensor("y")], preview=change.get("preview", True))
    with pytest.raises(BlockirError, match=message):
        import_model(model)
