"""append_backward: which gradient ops appear, accumulation, stop_gradient, roles, devices, sparse grads."""

import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import VarKind
from blockir.ir.schema import OpRole


def _grad_ops(main):
    return [op for op in main.global_block().ops if op.attr("op_role") & OpRole.BACKWARD]


def _writers(main, name):
    return [op for op in main.global_block().ops if name in op.output_names()]


def _mlp(hidden_device=None):
    x = bir.data("x", shape=[-1, 5])
    label = bir.data("label", shape=[-1, 1], dtype="int64")
    if hidden_device:
        with bir.device_guard(hidden_device):
            h = bir.layers.fc(x, size=4, act="relu")
    else:
        h = bir.layers.fc(x, size=4, act="relu")
    pred = bir.layers.fc(h, size=3, act="softmax")
    loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
    acc = bir.layers.accuracy(pred, label)
    return x, label, h, pred, loss, acc


def test_mlp_backward_structure(progs):
    main, _ = progs
    _, _, h, pred, loss, acc = _mlp()
    n_forward = len(main.global_block().ops)
    params_grads = bir.append_backward(loss)
    assert [(p.name, g.name) for p, g in params_grads] == [
        ("fc_0.w_0", "fc_0.w_0@GRAD"),
        ("fc_0.b_0", "fc_0.b_0@GRAD"),
        ("fc_1.w_0", "fc_1.w_0@GRAD"),
        ("fc_1.b_0", "fc_1.b_0@GRAD"),
    ]
    ops = main.global_block().ops
    fill = ops[n_forward]
    assert fill.type == "fill_constant" and fill.output("Out") == (loss.name + "@GRAD",)
    assert fill.attr("value") == 1.0 and fill.attr("shape") == (1,)
    assert fill.attr("op_role") == OpRole.BACKWARD | OpRole.LOSS
    loss_op = _writers(main, loss.name)[0]
    assert loss_op.attr("op_role") == OpRole.FORWARD | OpRole.LOSS
    grad_types = [op.type for op in ops[n_forward + 1 :]]
    assert grad_types == [
        "mean_grad",
        "cross_entropy_grad",
        "softmax_grad",
        "elementwise_add_grad",
        "mul_grad",
        "relu_grad",
        "elementwise_add_grad",
        "mul_grad",
    ]
    assert all(op.attr("op_role") == OpRole.BACKWARD for op in ops[n_forward + 1 :])
    block = main.global_block()
    # no gradient for the data, the label or the accuracy branch
    for name in ("x@GRAD", "label@GRAD", acc.name + "@GRAD"):
        assert not block.has_var(name)
    first_mul_grad = ops[-1]
    assert first_mul_grad.output_names() == ["fc_0.w_0@GRAD"]  # no X@GRAD slot: x needs no gradient
    assert "fc_0.w_0@GRAD" in first_mul_grad.output_names()
    # gradient variables mirror their forward variables
    for name in ("fc_0.w_0", h.name, pred.name):
        fwd, grad = block.var(name), block.var(name + "@GRAD")
        assert (grad.shape, grad.dtype, grad.kind) == (fwd.shape, fwd.dtype, VarKind.LOD_TENSOR)
    # the op writing a parameter's gradient names the pair
    for p, g in params_grads:
        (writer,) = _writers(main, g.name)
        assert writer.attr("op_role_var") == (p.name, g.name)
    bir.ir.verify(main)


def test_gradient_ops_follow_their_forward_ops_device(progs):
    main, _ = progs
    *_, loss, _ = _mlp(hidden_device="cuda:1")
    bir.append_backward(loss)
    placed = [(op.type, op.device) for op in _grad_ops(main)]
    assert placed == [
        ("fill_constant", ""),
        ("mean_grad", ""),
        ("cross_entropy_grad", ""),
        ("softmax_grad", ""),
        ("elementwise_add_grad", ""),
        ("mul_grad", ""),
        ("relu_grad", "cuda:1"),
        ("elementwise_add_grad", "cuda:1"),
        ("mul_grad", "cuda:1"),
    ]
    assert str(main.global_block().ops[-1]).endswith("@cuda:1")


def test_a_variable_used_twice_gets_its_gradients_summed(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 3])
    h = bir.layers.fc(x, size=3, bias_attr=False)
    loss = bir.layers.mean(h * h + h)
    bir.append_backward(loss)
    block = main.global_block()
    (total,) = _writers(main, h.name + "@GRAD")
    assert total.type == "sum"
    parts = total.input("X")
    assert parts == tuple(f"{h.name}@GRAD@RENAME@{k}" for k in range(3))
    for part in parts:
        assert block.var(part).shape == h.shape
        assert len(_writers(main, part)) == 1
    # the sum comes after every writer and before the first reader (mul_grad of h's producer)
    ops = block.ops
    index = ops.index(total)
    assert all(ops.index(_writers(main, p)[0]) < index for p in parts)
    reader = next(op for op in ops if h.name + "@GRAD" in op.input_names())
    assert reader.type == "mul_grad" and ops.index(reader) > index
    bir.ir.verify(main)


def test_shared_parameter_gradients_are_summed(progs):
    main, _ = progs
    a = bir.data("a", shape=[-1, 3])
    b = bir.data("b", shape=[-1, 3])
    ha = bir.layers.fc(a, size=2, param_attr="w", bias_attr=False)
    hb = bir.layers.fc(b, size=2, param_attr="w", bias_attr=False)
    loss = bir.layers.mean(ha + hb)
    params_grads = bir.append_backward(loss)
    assert [(p.name, g.name) for p, g in params_grads] == [("w", "w@GRAD")]
    (total,) = _writers(main, "w@GRAD")
    assert total.type == "sum" and total.input("X") == ("w@GRAD@RENAME@0", "w@GRAD@RENAME@1")
    assert total.attr("op_role_var") == ("w", "w@GRAD")
    assert not any(op.has_attr("op_role_var") for op in _grad_ops(main) if op is not total)


def test_stop_gradient_cuts_the_graph(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5])
    h = bir.layers.fc(x, size=4)
    h.stop_gradient = True
    loss = bir.layers.mean(bir.layers.fc(h, size=2))
    params_grads = bir.append_backward(loss)
    assert [p.name for p, _ in params_grads] == ["fc_1.w_0", "fc_1.b_0"]
    block = main.global_block()
    assert not block.has_var(h.name + "@GRAD") and not block.has_var("fc_0.w_0@GRAD")
    assert [op.type for op in _grad_ops(main)] == ["fill_constant", "mean_grad", "elementwise_add_grad", "mul_grad"]
    assert h.name + "@GRAD" not in _grad_ops(main)[-1].output_names()


def test_no_grad_set_and_parameter_list(progs):
    main, _ = progs
    *_, loss, _ = _mlp()
    params_grads = bir.append_backward(loss, parameter_list=["fc_1.w_0"], no_grad_set={"fc_0.b_0"})
    assert [p.name for p, _ in params_grads] == ["fc_1.w_0"]
    block = main.global_block()
    grads = {n for n in block.vars if n.endswith("@GRAD")}
    assert "fc_1.b_0@GRAD" not in grads and "fc_0.w_0@GRAD" not in grads
    # nothing below the second layer needs a gradient any more
    assert not any(n.startswith("fc_0.") for n in grads)


def test_frozen_parameter_gets_no_gradient(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5])
    h = bir.layers.fc(x, size=4, param_attr=bir.ParamAttr(trainable=False), bias_attr=False)
    loss = bir.layers.mean(bir.layers.fc(h, size=2))
    names = [p.name for p, _ in bir.append_backward(loss)]
    assert names == ["fc_1.w_0", "fc_1.b_0"]
    assert not main.global_block().has_var("fc_0.w_0@GRAD")
    assert main.global_block().var("fc_0.w_0").stop_gradient


def test_embedding_gradient_is_selected_rows_when_sparse(progs):
    main, _ = progs
    ids = bir.data("ids", shape=[-1, 1], dtype="int64", lod_level=1)
    sparse = bir.layers.embedding(ids, size=[20, 4], is_sparse=True, param_attr="sparse_w")
    dense = bir.layers.embedding(ids, size=[20, 4], param_attr="dense_w")
    pooled = bir.layers.sequence_pool(sparse + dense, "sum")
    loss = bir.layers.mean(bir.layers.fc(pooled, size=2))
    grads = {p.name: g for p, g in bir.append_backward(loss)}
    assert grads["sparse_w"].kind is VarKind.SELECTED_ROWS
    assert grads["dense_w"].kind is VarKind.LOD_TENSOR
    assert grads["sparse_w"].shape == (20, 4)
    assert not main.global_block().has_var("ids@GRAD")
    bir.ir.verify(main)


def test_loss_that_needs_no_gradient_gives_nothing(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5])
    n_ops = len(main.global_block().ops)
    assert bir.append_backward(bir.layers.mean(x)) == []
    assert len(main.global_block().ops) == n_ops + 1  # just the mean


def test_bad_losses(progs):
    x = bir.data("x", shape=[-1, 5])
    h = bir.layers.fc(x, size=2)
    with pytest.raises(BlockirError, match="known shape"):
        bir.append_backward(h)
    loss = bir.layers.mean(h)
    bir.append_backward(loss)
    with pytest.raises(BlockirError, match="differentiated"):
        bir.append_backward(loss)


def test_an_op_without_gradient_on_the_path_is_an_error(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5])
    h = bir.layers.fc(x, size=4)
    block = main.global_block()
    values = block.create_var("top", dtype="float32", shape=(-1, 2))
    indices = block.create_var("idx", dtype="int64", shape=(-1, 2))
    block.append_op("top_k", {"X": [h]}, {"Out": [values], "Indices": [indices]}, {"k": 2})
    loss = bir.layers.mean(values)
    with pytest.raises(BlockirError, match=r"op 'top_k' has no gradient.*\n  op: .*top_k"):
        bir.append_backward(loss)
