"""``blockir show/run/viz`` on ONNX models: an exported model shown, verified, run by its file's input names and
drawn with the ONNX node of each op in its lineage; bad ONNX files are one ``blockir: error:`` line, status 2,
nothing left behind (:mod:`tests.cli.adversarial`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from blockir.cli import main
from tests.cli.adversarial import Case, check_bad_input

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _write_model(path: Path) -> None:
    """A two-node model whose names hold characters blockir's names do not (a space, ``@``, ``::``)."""
    weight = numpy_helper.from_array(np.arange(12, dtype="float32").reshape(4, 3) / 10, "onnx::W@1")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["in put", "onnx::W@1"], ["/l1/out_0"], name="/l1/MatMul"),
            helper.make_node("Relu", ["/l1/out_0"], ["y@out"], name="/l1/Relu"),
        ],
        "g",
        [helper.make_tensor_value_info("in put", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y@out", TensorProto.FLOAT, ["N", 3])],
        initializer=[weight],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


@pytest.fixture
def onnx_dir(model_dir: Path, tmp_path: Path) -> Path:
    work = tmp_path / "onnx"
    work.mkdir()
    _write_model(work / "m.onnx")
    np.save(work / "x.npy", np.ones((2, 4), "float32"))
    return work


def test_show_verifies_and_prints_the_imported_program(onnx_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(onnx_dir / "m.onnx"), "--verify"]) == 0
    out = capsys.readouterr().out
    assert "matmul_v2(X=%in_put, Y=%onnx::W_1)" in out and 'op_origin=["MatMul:/l1/MatMul"]' in out


def test_run_feeds_by_the_files_names_and_saves_the_outputs(onnx_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = onnx_dir / "out.npz"
    assert main(["run", str(onnx_dir / "m.onnx"), "--feed", f"in put={onnx_dir / 'x.npy'}", "--out", str(out)]) == 0
    (value,) = np.load(out).values()
    np.testing.assert_allclose(value, np.maximum(np.ones((2, 4)) @ (np.arange(12).reshape(4, 3) / 10), 0), rtol=1e-6)


def _write_named_outputs(path: Path) -> None:
    """A model whose output names blockir's names cannot hold (``/`` leading, ``::``, ``@``)."""
    graph = helper.make_graph(
        [
            helper.make_node("Conv", ["/in@0", "w"], ["/layer1/Conv_output_0"], name="/layer1/Conv"),
            helper.make_node("Add", ["/layer1/Conv_output_0", "b"], ["onnx::Add_3"], name="add"),
            helper.make_node("Relu", ["onnx::Add_3"], ["y@GRAD"], name="relu"),
        ],
        "g",
        [helper.make_tensor_value_info("/in@0", TensorProto.FLOAT, ["N", 1, 3, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y@GRAD", "onnx::Add_3")]
        + [helper.make_tensor_value_info("/layer1/Conv_output_0", TensorProto.FLOAT, None)],
        initializer=[
            numpy_helper.from_array(np.arange(4, dtype="float32").reshape(1, 1, 2, 2) - 1.5, "w"),
            numpy_helper.from_array(np.asarray(-0.5, "float32"), "b"),
        ],
    )
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())


def test_run_keys_the_outputs_by_the_files_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from onnx.reference import ReferenceEvaluator

    _write_named_outputs(tmp_path / "m.onnx")
    x = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype("float32")
    np.save(tmp_path / "x.npy", x)
    want = ReferenceEvaluator(str(tmp_path / "m.onnx")).run(None, {"/in@0": x})
    out = tmp_path / "out.npz"
    assert main(["run", str(tmp_path / "m.onnx"), "--feed", f"/in@0={tmp_path / 'x.npy'}", "--out", str(out)]) == 0
    saved = np.load(out)
    assert saved.files == ["y@GRAD", "onnx::Add_3", "/layer1/Conv_output_0"]
    for name, value in zip(saved.files, want):
        np.testing.assert_allclose(saved[name], value, rtol=1e-5)  # float32 sums: the summation order is the kernel's
    assert "wrote y@GRAD, onnx::Add_3, /layer1/Conv_output_0" in capsys.readouterr().out
    # --fetch takes the file's names too (an output or any value), and prints by them
    argv = ["run", str(tmp_path / "m.onnx"), "--feed", f"/in@0={tmp_path / 'x.npy'}", "--fetch", "onnx::Add_3"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("onnx::Add_3: float32[2, 1, 2, 2]")


def test_viz_names_the_onnx_node_in_each_ops_lineage(onnx_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = onnx_dir / "m.html"
    assert main(["viz", str(onnx_dir / "m.onnx"), "-o", str(page)]) == 0
    text = page.read_text()
    assert "created by onnx-import from MatMul:/l1/MatMul" in text
    assert re.search(r"Relu:/l1/Relu", text)
    assert json.dumps("onnx-import") in text or "onnx-import" in text


def _unsupported(work: Path) -> list[str]:
    graph = helper.make_graph(
        [
            helper.make_node("ImageDecoder", ["x"], ["d"], name="dec_node"),
            helper.make_node("Loop", ["m", "c"], ["y"], name="lp"),
        ],
        "g",
        [
            helper.make_tensor_value_info("x", TensorProto.UINT8, [16]),
            helper.make_tensor_value_info("m", TensorProto.INT64, []),
            helper.make_tensor_value_info("c", TensorProto.BOOL, []),
        ],
        [
            helper.make_tensor_value_info("d", TensorProto.UINT8, None),
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    (work / "u.onnx").write_bytes(model.SerializeToString())
    return ["show", str(work / "u.onnx")]


def _truncated(work: Path) -> list[str]:
    _write_model(work / "whole.onnx")
    (work / "t.onnx").write_bytes((work / "whole.onnx").read_bytes()[:60])
    (work / "whole.onnx").unlink()
    return ["run", str(work / "t.onnx"), "--feed", f"x={work / 'x.npy'}"]


def _wrong_magic(work: Path) -> list[str]:
    (work / "p.onnx").write_bytes((work / "model" / "program.pb").read_bytes()[:7] + b"\xff\xff\xff")
    return ["viz", str(work / "p.onnx"), "-o", str(work / "out.html")]


def _empty(work: Path) -> list[str]:
    (work / "e.onnx").write_bytes(b"")
    return ["show", str(work / "e.onnx"), "--verify"]


def _graph_file(work: Path, name: str, nodes: list, initializers: tuple = ()) -> Path:
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        initializer=list(initializers),
    )
    path = work / name
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString())
    return path


def _cycle(work: Path) -> list[str]:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2")]
    return ["run", str(_graph_file(work, "c.onnx", nodes))]


def _missing_input(work: Path) -> list[str]:
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]
    return ["viz", str(_graph_file(work, "m.onnx", nodes)), "-o", str(work / "out.html")]


def _contradicting_shapes(work: Path) -> list[str]:
    w = numpy_helper.from_array(np.ones((4, 5), "float32"), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    return ["show", str(_graph_file(work, "s.onnx", nodes, (w,)))]


def _unknown_feed(work: Path) -> list[str]:
    _write_model(work / "m.onnx")
    return ["run", str(work / "m.onnx"), "--feed", f"nope={work / 'x.npy'}"]


CASES: dict[str, tuple[Case, str]] = {
    "unsupported ops listed at once": (
        _unsupported,
        "dec_node (ImageDecoder): blockir has no op for it; node lp (Loop): attribute 'body' (a graph) is missing",
    ),
    "truncated file": (_truncated, "t.onnx: not an ONNX model"),
    "not an ONNX file": (_wrong_magic, "p.onnx: not an ONNX model"),
    "a feed the model lacks": (_unknown_feed, "'nope' is not an input of the model (its inputs: in put)"),
    "missing file": (lambda work: ["show", str(work / "absent.onnx")], "absent.onnx"),
    "empty file": (_empty, "e.onnx: not an ONNX model"),
    "a cycle": (_cycle, "node r1 (Relu): input 'b' is a later node's output (the graph has a cycle"),
    "a missing input": (_missing_input, "node add (Add): input 'nowhere' is defined nowhere in the graph"),
    "shapes that contradict": (_contradicting_shapes, "s.onnx: cannot import 1 part(s) of the model: node mm (MatMul)"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_onnx_file_gives_one_line_and_status_2(
    case: str, model_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, message = CASES[case]
    check_bad_input(make, message, model_dir, tmp_path, capsys)
