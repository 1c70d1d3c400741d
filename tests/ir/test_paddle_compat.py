"""Wire compatibility with PaddlePaddle's legacy framework.proto, both ways.

``paddle_framework.proto`` (next to this file) holds only the field numbers and
enum values DESIGN.md says blockir shares with Paddle; it is compiled here with
grpcio-tools, so the check does not depend on blockir's own generated module.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given

from blockir.ir import AttrType, Program, VarKind
from blockir.proto import framework_pb2 as pb
from tests.ir.strategies import programs

HERE = Path(__file__).resolve().parent
PADDLE_DTYPES = ("bool", "int16", "int32", "int64", "float16", "float32", "float64", "uint8", "int8")


@pytest.fixture(scope="module")
def paddle(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    from grpc_tools import protoc  # a dev extra; imported here so that `pytest -m gpu` collects without it

    out = tmp_path_factory.mktemp("paddle_proto")
    assert protoc.main(["protoc", f"-I{HERE}", f"--python_out={out}", "paddle_framework.proto"]) == 0
    spec = importlib.util.spec_from_file_location("paddle_framework_pb2", out / "paddle_framework_pb2.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def without_additions(desc: pb.ProgramDesc) -> pb.ProgramDesc:
    """``desc`` less what blockir adds to Paddle's legacy schema."""
    d = pb.ProgramDesc()
    d.CopyFrom(desc)
    d.ClearField("random_seed")
    d.ClearField("device")
    for block in d.blocks:
        block.ClearField("device")
        for var in block.vars:
            for field in ("need_check_feed", "is_parameter", "stop_gradient", "device"):
                var.ClearField(field)
    return d


def through_paddle(paddle: ModuleType, data: bytes) -> tuple[Any, bytes]:
    """Decode with Paddle's schema, drop what it does not know, encode again."""
    msg = paddle.ProgramDesc.FromString(data)
    initialized = msg.IsInitialized()
    msg.DiscardUnknownFields()
    return initialized, msg.SerializePartialToString()


@given(programs(channels=False, dtypes=PADDLE_DTYPES))
def test_blockir_programs_decode_with_paddles_schema(paddle: ModuleType, p: Program) -> None:
    data = p.to_proto().SerializeToString()
    initialized, reencoded = through_paddle(paddle, data)
    assert initialized  # every required field Paddle has is there
    back = Program.parse(reencoded)  # and what Paddle writes, blockir reads
    expected = without_additions(p.to_proto()).SerializeToString(deterministic=True)
    assert back.to_proto().SerializeToString(deterministic=True) == expected


def test_only_the_additions_are_lost(paddle: ModuleType) -> None:
    p = Program()
    p.random_seed, p.device = 42, "cuda:0"
    b = p.global_block()
    b.device = "cpu"
    b.create_var("w", shape=[3, 4], persistable=True, is_parameter=True, stop_gradient=True)
    b.create_var("x", shape=[-1, 3], lod_level=1, need_check_feed=True)
    b.create_var("ch", kind=VarKind.CHANNEL, capacity=3)
    b.append_op("mul", {"X": "x", "Y": "w"}, {"Out": "h"}, {"x_num_col_dims": 1, "op_device": "cuda:0"}, infer=False)
    initialized, reencoded = through_paddle(paddle, p.serialize())
    assert not initialized  # the channel's kind is not one of Paddle's: its VarType has no type
    msg = paddle.ProgramDesc.FromString(p.serialize())
    assert [v.name for v in msg.blocks[0].vars] == ["w", "x", "ch"]
    w, x, ch = msg.blocks[0].vars
    assert (w.persistable, list(w.type.lod_tensor.tensor.dims), w.type.lod_tensor.tensor.data_type) == (
        True,
        [3, 4],
        paddle.VarType.FP32,
    )
    assert (x.type.type, x.type.lod_tensor.lod_level) == (paddle.VarType.LOD_TENSOR, 1)
    assert not ch.type.HasField("type")
    [mul] = msg.blocks[0].ops
    assert (mul.type, [(a.name, a.type) for a in mul.attrs]) == (
        "mul",
        [("x_num_col_dims", paddle.INT), ("op_device", paddle.STRING)],
    )
    assert [(v.parameter, list(v.arguments)) for v in mul.inputs] == [("X", ["x"]), ("Y", ["w"])]
    # Without the channel, Paddle's re-encoding reads back as the program less blockir's additions.
    p.global_block().remove_var("ch")
    initialized, reencoded = through_paddle(paddle, p.serialize())
    assert initialized
    q = Program.parse(reencoded)
    assert (q.random_seed, q.device, q.global_block().device) == (0, "", "")
    assert not any(
        q.global_block().var("w").is_parameter or v.stop_gradient or v.need_check_feed for v in q.list_vars()
    )
    assert str(q.global_block().ops[0]) == str(p.global_block().ops[0])


def test_paddle_built_program_decodes(paddle: ModuleType) -> None:
    d = paddle.ProgramDesc()
    d.version.version = 1
    main = d.blocks.add(idx=0, parent_idx=-1)
    d.blocks.add(idx=1, parent_idx=0, forward_block_idx=0)
    for name, kind in (("feed", paddle.VarType.FEED_MINIBATCH), ("fetch", paddle.VarType.FETCH_LIST)):
        v = main.vars.add(name=name, persistable=True)
        v.type.type = kind
    x = main.vars.add(name="x")
    x.type.type = paddle.VarType.LOD_TENSOR
    x.type.lod_tensor.tensor.data_type = paddle.VarType.INT64
    x.type.lod_tensor.tensor.dims.extend([-1, 1])
    x.type.lod_tensor.lod_level = 2
    g = main.vars.add(name="g")
    g.type.type = paddle.VarType.SELECTED_ROWS
    g.type.selected_rows.data_type = paddle.VarType.FP64
    g.type.selected_rows.dims.extend([100, 8])
    op = main.ops.add(type="while", is_target=True)
    op.inputs.add(parameter="X", arguments=["x", "g"])
    op.outputs.add(parameter="Out", arguments=[])
    A = paddle.OpDesc.Attr
    op.attrs.extend(
        [
            A(name="i", type=paddle.INT, i=-3),
            A(name="f", type=paddle.FLOAT, f=0.25),
            A(name="s", type=paddle.STRING, s="str"),
            A(name="ints", type=paddle.INTS, ints=[1, 2]),
            A(name="floats", type=paddle.FLOATS, floats=[0.5]),
            A(name="strings", type=paddle.STRINGS, strings=["a"]),
            A(name="b", type=paddle.BOOLEAN, b=True),
            A(name="bools", type=paddle.BOOLEANS, bools=[False]),
            A(name="sub_block", type=paddle.BLOCK, block_idx=1),
            A(name="l", type=paddle.LONG, l=2**40),
            A(name="blocks", type=paddle.BLOCKS, blocks_idx=[1]),
            A(name="longs", type=paddle.LONGS, longs=[-(2**40)]),
        ]
    )
    p = Program.parse(d.SerializeToString())
    assert (p.version, p.num_blocks, p.block(1).parent_idx, p.block(1).forward_block_idx) == (1, 2, 0, 0)
    x = p.global_block().var("x")
    assert (x.kind, x.dtype, x.shape, x.lod_level) == (VarKind.LOD_TENSOR, "int64", (-1, 1), 2)
    g = p.global_block().var("g")
    assert (g.kind, g.dtype, g.shape) == (VarKind.SELECTED_ROWS, "float64", (100, 8))
    assert p.global_block().var("feed").kind is VarKind.FEED_MINIBATCH
    op = p.global_block().ops[0]
    assert op.is_target and op.inputs == {"X": ("x", "g")} and op.outputs == {"Out": ()}
    assert op.attrs == {
        "i": -3,
        "f": 0.25,
        "s": "str",
        "ints": (1, 2),
        "floats": (0.5,),
        "strings": ("a",),
        "b": True,
        "bools": (False,),
        "sub_block": 1,
        "l": 2**40,
        "blocks": (1,),
        "longs": (-(2**40),),
    }
    assert [t.name for t in op.attr_types.values()] == [
        "INT",
        "FLOAT",
        "STRING",
        "INTS",
        "FLOATS",
        "STRINGS",
        "BOOLEAN",
        "BOOLEANS",
        "BLOCK",
        "LONG",
        "BLOCKS",
        "LONGS",
    ]
    assert op.attr_types["sub_block"] is AttrType.BLOCK
    assert [b.idx for b in op.sub_blocks()] == [1, 1]
    # And back: blockir writes it exactly as Paddle did.
    assert p.to_proto().SerializeToString(deterministic=True) == d.SerializeToString(deterministic=True)
