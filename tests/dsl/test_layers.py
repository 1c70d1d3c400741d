"""Layers: the ops they emit, names, inferred shapes/dtypes, operator overloading, bad input."""

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from blockir.ir.schema import OpRole


def _ops(main):
    return main.global_block().ops


def _types(main):
    return [op.type for op in _ops(main)]


def test_issue_snippet_builds_and_every_variable_is_typed(tmp_path):
    main, startup = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 784], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        with bir.device_guard("cuda:0"):
            h = bir.layers.fc(x, size=256, act="relu")
        pred = bir.layers.fc(h, size=10, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
    assert (h.shape, pred.shape, loss.shape) == ((-1, 256), (-1, 10), (1,))
    assert words.lod_level == 1
    for var in main.list_vars():
        assert var.dtype is not None and var.shape is not None, var
        assert all(d == -1 or d > 0 for d in var.shape), var
    assert _types(main) == [
        "mul",
        "elementwise_add",
        "relu",
        "mul",
        "elementwise_add",
        "softmax",
        "cross_entropy",
        "mean",
    ]
    assert [op.device for op in _ops(main)] == ["cuda:0"] * 3 + [""] * 5
    assert all(op.attr("op_role") == OpRole.FORWARD for op in _ops(main))
    bir.ir.verify(main)
    bir.ir.verify(startup)
    text = str(main)
    assert "@cuda:0" in text
    assert str(bir.ir.parse(text)) == text
    main.save(str(tmp_path / "program.pb"))
    assert str(bir.load_program(str(tmp_path / "program.pb"))) == text


def test_fc_names_and_ops(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5, 6])
    out = bir.layers.fc(x, size=3, num_flatten_dims=2, act="tanh")
    mul, add, act = _ops(main)
    assert (mul.type, add.type, act.type) == ("mul", "elementwise_add", "tanh")
    assert mul.input("X") == ("x",) and mul.input("Y") == ("fc_0.w_0",) and mul.output("Out") == ("fc_0.tmp_0",)
    assert mul.attr("x_num_col_dims") == 2 and mul.attr("y_num_col_dims") == 1
    assert add.input("Y") == ("fc_0.b_0",) and add.attr("axis") == 2
    assert act.output("Out") == (out.name,) == ("fc_0.tmp_2",)
    assert main.global_block().var("fc_0.w_0").shape == (6, 3)
    assert out.shape == (-1, 5, 3)
    named = bir.layers.fc(x, size=2, num_flatten_dims=-1, name="pred", bias_attr=False)
    assert named.name == "pred.tmp_0" and main.global_block().has_var("pred.w_0")
    assert named.shape == (-1, 5, 2)


def test_fc_with_several_inputs_sums_their_products(progs):
    main, _ = progs
    a = bir.data("a", shape=[-1, 3])
    b = bir.data("b", shape=[-1, 4])
    out = bir.layers.fc([a, b], size=2, param_attr=[None, bir.ParamAttr(name="wb")])
    assert _types(main) == ["mul", "mul", "sum", "elementwise_add"]
    assert [p.name for p in main.all_parameters()] == ["fc_0.w_0", "wb", "fc_0.b_0"]
    assert main.global_block().var("wb").shape == (4, 2)
    assert out.shape == (-1, 2)


def test_embedding_emits_lookup_table(progs):
    main, _ = progs
    ids = bir.data("ids", shape=[-1, 1], dtype="int64", lod_level=1)
    emb = bir.layers.embedding(ids, size=[100, 8], is_sparse=True, padding_idx=-1)
    (op,) = _ops(main)
    assert op.type == "lookup_table" and op.attr("is_sparse") is True and op.attr("padding_idx") == 99
    assert main.global_block().var("embedding_0.w_0").shape == (100, 8)
    assert (emb.shape, emb.dtype) == ((-1, 8), "float32")
    pooled = bir.layers.sequence_pool(emb, "max")
    assert _ops(main)[-1].attr("pooltype") == "MAX"
    assert pooled.shape == (-1, 8)


@pytest.mark.parametrize(
    "build, op_types, shape, dtype",
    [
        (lambda x, i: bir.layers.relu(x), ["relu"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.sigmoid(x), ["sigmoid"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.tanh(x), ["tanh"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.softmax(x, axis=1), ["softmax"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.mean(x), ["mean"], (1,), "float32"),
        (lambda x, i: bir.layers.reduce_sum(x, dim=1), ["reduce_sum"], (-1,), "float32"),
        (lambda x, i: bir.layers.reduce_mean(x, dim=[1], keep_dim=True), ["reduce_mean"], (-1, 1), "float32"),
        (lambda x, i: bir.layers.reduce_sum(x), ["reduce_sum"], (1,), "float32"),
        (lambda x, i: bir.layers.scale(x, scale=2.0, bias=1.0, act="relu"), ["scale", "relu"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.matmul(x, x, transpose_y=True), ["matmul"], (-1, -1), "float32"),
        (lambda x, i: bir.layers.concat([x, x], axis=1), ["concat"], (-1, 12), "float32"),
        (lambda x, i: bir.layers.reshape(x, [-1, 2, 3]), ["reshape2"], (-1, 2, 3), "float32"),
        (lambda x, i: bir.layers.cast(x, "float64"), ["cast"], (-1, 6), "float64"),
        (lambda x, i: bir.layers.assign(x), ["assign"], (-1, 6), "float32"),
        (lambda x, i: bir.layers.fill_constant([2, 3], "int64", 4), ["fill_constant"], (2, 3), "int64"),
        (
            lambda x, i: bir.layers.elementwise_add(x, x, act="sigmoid"),
            ["elementwise_add", "sigmoid"],
            (-1, 6),
            "float32",
        ),
        (lambda x, i: bir.layers.square_error_cost(x, x), ["elementwise_sub", "square"], (-1, 6), "float32"),
        (
            lambda x, i: bir.layers.cross_entropy(bir.layers.softmax(x), i),
            ["softmax", "cross_entropy"],
            (-1, 1),
            "float32",
        ),
        (lambda x, i: bir.layers.softmax_with_cross_entropy(x, i), ["softmax_with_cross_entropy"], (-1, 1), "float32"),
        (lambda x, i: bir.layers.accuracy(x, i, k=2), ["top_k", "accuracy"], (1,), "float32"),
    ],
)
def test_layer_ops_and_inferred_outputs(progs, build, op_types, shape, dtype):
    main, _ = progs
    x = bir.data("x", shape=[-1, 6])
    label = bir.data("label", shape=[-1, 1], dtype="int64")
    out = build(x, label)
    assert _types(main) == op_types
    assert (out.shape, out.dtype) == (shape, dtype)
    bir.ir.verify(main)


def test_softmax_with_cross_entropy_can_return_the_softmax(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 6])
    label = bir.data("label", shape=[-1, 1], dtype="int64")
    loss, prob = bir.layers.softmax_with_cross_entropy(x, label, return_softmax=True)
    (op,) = _ops(main)
    assert op.output("Loss") == (loss.name,) and op.output("Softmax") == (prob.name,)
    assert prob.shape == (-1, 6)


def test_operator_overloading_emits_elementwise_and_scale_ops(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 4])
    y = bir.data("y", shape=[-1, 4])
    block = main.global_block()

    def last(n=1):
        return block.ops[-n:]

    for expr, op_type in (
        (lambda: x + y, "elementwise_add"),
        (lambda: x - y, "elementwise_sub"),
        (lambda: x * y, "elementwise_mul"),
        (lambda: x / y, "elementwise_div"),
    ):
        out = expr()
        (op,) = last()
        assert op.type == op_type and op.input("X") == ("x",) and op.input("Y") == ("y",)
        assert isinstance(out, bir.dsl.Variable) and out.shape == (-1, 4)
    cases = [
        (lambda: x + 2, 1.0, 2.0),
        (lambda: 2 + x, 1.0, 2.0),
        (lambda: x - 2, 1.0, -2.0),
        (lambda: 2 - x, -1.0, 2.0),
        (lambda: x * 3, 3.0, 0.0),
        (lambda: np.float32(3) * x, 3.0, 0.0),
        (lambda: x / 4, 0.25, 0.0),
        (lambda: -x, -1.0, 0.0),
    ]
    for expr, scale, bias in cases:
        out = expr()
        (op,) = last()
        assert op.type == "scale" and op.input("X") == ("x",)
        assert (op.attr("scale"), op.attr("bias")) == (scale, bias)
        assert out.shape == (-1, 4)
    out = 2 / x
    fill, div = last(2)
    assert fill.type == "fill_constant" and fill.attr("value") == 2.0 and fill.attr("shape") == (1,)
    assert div.type == "elementwise_div" and div.input("X") == fill.output("Out") and div.input("Y") == ("x",)
    assert out.shape == (-1, 4)
    out = x / 0
    fill, div = last(2)
    assert fill.attr("value") == 0.0 and div.input("X") == ("x",) and div.input("Y") == fill.output("Out")
    with pytest.raises(TypeError):
        x + "a"
    with pytest.raises(TypeError):
        x + np.ones(4)


def test_shape_errors_name_the_layer_and_the_shapes(progs):
    x = bir.data("x", shape=[-1, 4])
    y = bir.data("y", shape=[-1, 5])
    with pytest.raises(ShapeError, match=r"layers\.elementwise_add") as err:
        bir.layers.elementwise_add(x, y)
    assert "4" in str(err.value) and "5" in str(err.value)
    w = bir.data("w", shape=[7, 3])
    with pytest.raises(ShapeError, match=r"layers\.matmul") as err:
        bir.layers.matmul(x, w)
    assert "7" in str(err.value)
    with pytest.raises(ShapeError, match=r"layers\.concat"):
        bir.layers.concat([x, y], axis=0)
    with pytest.raises(ShapeError, match=r"layers\.reshape"):
        bir.layers.reshape(x, [-1, -1])
    with pytest.raises(ShapeError, match=r"layers\.fc: num_flatten_dims=2 is out of range .*\[-1, 4\]"):
        bir.layers.fc(x, size=3, num_flatten_dims=2)


def test_dtype_errors_name_the_layer(progs):
    x = bir.data("x", shape=[-1, 4])
    ids = bir.data("ids", shape=[-1, 1], dtype="int64")
    flabel = bir.data("flabel", shape=[-1, 1], dtype="float32")
    with pytest.raises(ShapeError, match=r"layers\.fc: input 'ids' has dtype int64"):
        bir.layers.fc(ids, size=3)
    with pytest.raises(ShapeError, match=r"layers\.cross_entropy: label 'flabel' has dtype float32.*int64"):
        bir.layers.cross_entropy(x, flabel)
    with pytest.raises(ShapeError, match=r"layers\.softmax_with_cross_entropy: label 'flabel'"):
        bir.layers.softmax_with_cross_entropy(x, flabel)
    with pytest.raises(ShapeError, match=r"layers\.accuracy: label 'flabel'"):
        bir.layers.accuracy(x, flabel)
    with pytest.raises(ShapeError, match=r"layers\.embedding: input 'x' has dtype float32"):
        bir.layers.embedding(x, size=[10, 2])
    with pytest.raises(ShapeError, match=r"layers\.elementwise_add"):
        bir.layers.elementwise_add(x, bir.layers.cast(x, "float64"))


def test_bad_layer_arguments(progs):
    x = bir.data("x", shape=[-1, 4])
    with pytest.raises(ShapeError, match="size must be a positive int"):
        bir.layers.fc(x, size=0)
    with pytest.raises(ShapeError, match="weight's height"):
        bir.layers.fc(bir.data("v", shape=[-1, -1]), size=2)
    with pytest.raises(BlockirError, match="unknown op type 'relux'"):
        bir.layers.fc(x, size=2, act="relux")
    with pytest.raises(ShapeError, match="padding_idx 10 is out of range"):
        bir.layers.embedding(bir.data("ids", shape=[-1, 1], dtype="int64"), size=[10, 2], padding_idx=10)
    with pytest.raises(ShapeError, match="pool_type 'median'"):
        bir.layers.sequence_pool(x, "median")
    with pytest.raises(BlockirError, match="must be a Variable"):
        bir.layers.relu(np.ones(3))
    other = bir.Program()
    with bir.program_guard(other):
        z = bir.data("z", shape=[1])
    with pytest.raises(BlockirError, match="does not belong to the program being built"):
        bir.layers.relu(z)
