"""ONNX import and export (``blockir.io.onnx``, ``blockir.io.onnx_export``): names, initializers, constant
folding, lineage, refusals listed at once, bad files; exports checked by ``onnx.checker``, ONNX's reference
evaluator and a round trip through the importer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

from blockir.io.onnx import IMPORT_PASS, import_model, read_model  # noqa: E402
from blockir.io.onnx_export import to_onnx  # noqa: E402
from blockir.io.onnx_ops import RULES  # noqa: E402


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


def test_each_op_names_its_onnx_node_as_lineage() -> None:
    model = _model([helper.make_node("Relu", ["x"], ["y"], name="my_relu")], [_tensor("x", shape=[2])], [_tensor("y")])
    (op,) = [op for op in import_model(model).program.global_block().ops if op.type == "relu"]
    assert op.attrs["op_pass"] == IMPORT_PASS and list(op.attrs["op_origin"]) == ["Relu:my_relu"]


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
