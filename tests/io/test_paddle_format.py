"""Paddle's legacy model files: the tensor stream of .pdiparams and per-variable files (byte layout, every
dtype, LoD), inference models in Paddle's and Fluid's forms through save_inference_model and
load_inference_model, blockir run/show on them, and the errors of bad files (fuzzed: a value or a
BlockirError, nothing else)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import BlockirError
from blockir.io import paddle
from blockir.ir import Program, Variable
from blockir.ops.values import LoDTensor
from blockir.proto import framework_pb2 as pb

DTYPES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
]


def _var(name: str, dtype: str, shape: tuple[int, ...]) -> Variable:
    block = Program().global_block()
    return block.create_var(name, dtype=dtype, shape=list(shape), persistable=True)


def _value(dtype: str, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.normal(size=shape) * 10).astype(dtype) if dtype != "bool" else rng.random(shape) < 0.5


def test_a_tensor_is_written_as_paddle_serializes_it(tmp_path: Path) -> None:
    """The byte layout, spelled out by hand: version, LoD levels, tensor version, TensorDesc, raw data."""
    data = np.arange(6, dtype=np.float32).reshape(3, 2)
    paddle.write_combined(tmp_path / "p", {"w": LoDTensor(data, [[0, 1, 3]])})
    desc = pb.VarType.TensorDesc(data_type=5, dims=[3, 2]).SerializeToString()
    want = (
        struct.pack("<I", 0)
        + struct.pack("<Q", 1)
        + struct.pack("<Q", 24)
        + struct.pack("<3Q", 0, 1, 3)
        + struct.pack("<I", 0)
        + struct.pack("<i", len(desc))
        + desc
        + data.tobytes()
    )
    assert (tmp_path / "p").read_bytes() == want


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("lod", [[], [[0, 2, 3]], [[0, 1, 2], [0, 1, 3]]], ids=["dense", "lod1", "lod2"])
def test_every_dtype_and_lod_round_trips(tmp_path: Path, dtype: str, lod: list[list[int]]) -> None:
    values = {"b": _value(dtype, (3, 2)), "a": _value(dtype, (4,), 1), "c": _value(dtype, (0, 5))}
    stored = {k: LoDTensor(v, lod) if lod and k == "b" else v for k, v in values.items()}
    paddle.write_combined(tmp_path / "m.pdiparams", stored)
    variables = [_var(k, dtype, v.shape) for k, v in values.items()]
    got = paddle.read_combined(tmp_path / "m.pdiparams", reversed(variables))  # the file's order is by name
    for name, want in stored.items():
        if isinstance(want, LoDTensor):
            assert isinstance(got[name], LoDTensor) and got[name].lod == want.lod
            want, got[name] = want.data, got[name].data
        assert got[name].dtype == want.dtype
        np.testing.assert_array_equal(got[name], want)
    paddle.write_tensor_file(tmp_path / "b", stored["b"], "b")
    one = paddle.read_tensor_file(tmp_path / "b", variables[0])
    np.testing.assert_array_equal(one.data if isinstance(one, LoDTensor) else one, values["b"])


def _mlp() -> tuple[Program, Program, Variable]:
    main, startup = Program(), Program()
    with bir.program_guard(main, startup):
        x = bir.layers.data("x", [-1, 4])
        pred = bir.layers.fc(bir.layers.fc(x, 8, act="relu"), 3, act="softmax")
    return main, startup, pred


@pytest.mark.parametrize(
    ("form", "kw", "load_as"),
    [
        ("paddle", {}, "model"),
        ("paddle", {}, "model.pdmodel"),
        ("fluid", {}, "model"),
        ("fluid", {"params_filename": "params"}, "model"),
        ("fluid", {"model_filename": "net"}, "model"),
    ],
)
def test_inference_models_in_paddles_forms_compute_what_they_computed(
    tmp_path: Path, form: str, kw: dict, load_as: str
) -> None:
    main, startup, pred = _mlp()
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    with bir.Executor("cpu") as exe:
        exe.run(startup)
        (want,) = exe.run(main, feed={"x": x}, fetch_list=[pred])
        bir.io.save_inference_model(tmp_path / "model", ["x"], [pred], exe, main_program=main, format=form, **kw)
        if form == "paddle":
            assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pdiparams", "model.pdmodel"]
        scope = bir.Scope()
        program, feeds, fetches = bir.io.load_inference_model(tmp_path / load_as, exe, scope=scope, **kw)
        (got,) = exe.run(program, feed={feeds[0]: x}, fetch_list=fetches, scope=scope)
    np.testing.assert_array_equal(got, want)


def test_blockir_run_and_show_read_a_paddle_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from blockir.cli import main as cli

    program, startup, pred = _mlp()
    x = np.ones((2, 4), np.float32)
    np.save(tmp_path / "x.npy", x)
    with bir.Executor("cpu") as exe:
        exe.run(startup)
        (want,) = exe.run(program, feed={"x": x}, fetch_list=[pred])
        bir.io.save_inference_model(tmp_path / "m", ["x"], [pred], exe, main_program=program, format="paddle")
    assert (
        cli(["run", str(tmp_path / "m.pdmodel"), "--feed", f"x={tmp_path / 'x.npy'}", "--out", str(tmp_path / "o.npz")])
        == 0
    )
    np.testing.assert_array_equal(np.load(tmp_path / "o.npz")[pred.name], want)
    capsys.readouterr()
    assert cli(["show", str(tmp_path / "m.pdmodel")]) == 0
    assert "= mul(X=%x, Y=%fc_0.w_0)" in capsys.readouterr().out


def _saved(tmp_path: Path) -> Path:
    main, startup, pred = _mlp()
    with bir.Executor("cpu") as exe:
        exe.run(startup)
        bir.io.save_inference_model(tmp_path / "m", ["x"], [pred], exe, main_program=main, format="paddle")
    return tmp_path / "m"


def test_bad_parameter_files_name_the_file_and_the_variable(tmp_path: Path) -> None:
    prefix = _saved(tmp_path)
    params = prefix.with_suffix(".pdiparams")
    good = params.read_bytes()
    exe = bir.Executor("cpu")
    for cut in (5, 30, 100, len(good) - 1):
        params.write_bytes(good[:cut])
        with pytest.raises(BlockirError, match=r"m\.pdiparams: variable 'fc_[01]\.[bw]_0': its .* needs \d+ bytes"):
            bir.io.load_inference_model(prefix, exe, scope=bir.Scope())
    params.write_bytes(good + b"\0" * 8)
    with pytest.raises(BlockirError, match="8 bytes left after the 4 variables the program saves"):
        bir.io.load_inference_model(prefix, exe, scope=bir.Scope())
    program = paddle.read_program(prefix.with_suffix(".pdmodel"))
    program.global_block().var("fc_0.w_0").dtype = "float64"
    params.write_bytes(good)
    with pytest.raises(
        BlockirError, match=r"variable 'fc_0.w_0' is saved as float32\[4, 8\], the program declares float64"
    ):
        bir.io.read_paddle_params(program, prefix.with_suffix(".pdmodel"))
    program.global_block().var("fc_0.w_0").dtype = "float32"
    program.global_block().var("fc_0.w_0").shape = (4, 9)
    with pytest.raises(
        BlockirError, match=r"variable 'fc_0.w_0' is saved as float32\[4, 8\], but the program declares"
    ):
        bir.io.read_paddle_params(program, prefix.with_suffix(".pdmodel"))
    params.unlink()
    with pytest.raises(BlockirError, match=r"m.pdiparams: no such parameter file \(the program reads 4 persistable"):
        bir.io.load_inference_model(prefix, exe, scope=bir.Scope())


def test_bad_model_files_say_what_they_are(tmp_path: Path) -> None:
    exe = bir.Executor("cpu")
    prefix = _saved(tmp_path)
    (tmp_path / "m").mkdir()
    with pytest.raises(BlockirError, match=r"both a blockir model directory .* and a Paddle model .*m.pdmodel"):
        bir.io.load_inference_model(prefix, exe)
    (tmp_path / "j.pdmodel").write_text('{"base_code": {"magic": "pir", "version": 1}, "program": {}}\n')
    with pytest.raises(BlockirError, match=r"j.pdmodel: a JSON file, not a ProgramDesc: Paddle 3 writes its PIR"):
        bir.io.load_inference_model(tmp_path / "j", exe)
    unknown = paddle.read_program(prefix.with_suffix(".pdmodel"))
    block = unknown.global_block()
    for name in ("conv9", "conv9", "fancy_op"):
        block._load_op(name, {}, {}, {}, {}, False)
    with pytest.raises(BlockirError, match=r"ops blockir lacks: conv9 \(2\), fancy_op \(1\)"):
        paddle.check_ops(unknown, "here")
    with pytest.raises(BlockirError, match="nowhere: no model there"):
        bir.io.load_inference_model(tmp_path / "nowhere", exe)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(data=st.data())
def test_mutated_files_give_a_model_or_a_blockir_error(tmp_path: Path, data: st.DataObject) -> None:
    fuzz = tmp_path / "fuzz"
    if not fuzz.exists():  # the model once; each example mutates one of its files, then restores it
        fuzz.mkdir()
        _saved(fuzz)
    prefix = fuzz / "m"
    target = prefix.with_suffix(data.draw(st.sampled_from([".pdmodel", ".pdiparams"])))
    good = target.read_bytes()
    mutated = bytearray(good)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(mutated) - 1))
        mutated[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        mutated = mutated[: data.draw(st.integers(0, len(mutated)))]
    target.write_bytes(bytes(mutated))
    try:
        bir.io.load_inference_model(prefix, bir.Executor("cpu"), scope=bir.Scope())
    except BlockirError:
        pass
    finally:
        target.write_bytes(good)


@pytest.mark.parametrize(
    ("op_type", "inputs", "output", "attrs"),
    [
        ("grid_sampler", {"X": (1, 1, 3, 3), "Grid": (1, 2, 2, 2)}, "Output", {"mode": "bicubic"}),
        ("roi_align", {"X": (1, 1, 3, 3), "ROIs": (2, 4)}, "Out", {"mode": "max"}),
    ],
)
@pytest.mark.parametrize("form", ["paddle", "fluid"])
def test_exports_to_paddle_refuse_blockirs_extensions_of_its_ops(
    tmp_path: Path, form: str, op_type: str, inputs: dict, output: str, attrs: dict
) -> None:
    program = Program()
    block = program.global_block()
    for name, shape in inputs.items():
        block.create_var(name, shape=list(shape), dtype="float32")
    block.create_var("out")
    block.append_op(op_type, {slot: [slot] for slot in inputs}, {output: ["out"]}, attrs)
    ((attr, value),) = attrs.items()
    named = rf"{op_type} \({attr}={value!r}\): blockir's extensions, which Paddle's ops lack"
    with bir.Executor("cpu") as exe, pytest.raises(BlockirError, match=named):
        bir.io.save_inference_model(tmp_path / "m", list(inputs), ["out"], exe, main_program=program, format=form)
