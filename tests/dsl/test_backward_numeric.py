"""Autodiff of whole programs (MLPs, bag-of-words models) against central finite differences, in float64.

Each model is built with the DSL; the forward program is cloned before
``append_backward``. One run of the backward program on the CPU executor fetches
every parameter's gradient; then each entry of each parameter is moved by
+-``EPS`` in the Scope and the forward program is rerun to difference the loss.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest

import blockir as bir
from blockir.ir import VarKind

EPS = 1e-6
RTOL, ATOL = 1e-6, 1e-9  # the differences agree to ~1e-10 here; a gradient off by 1e-4 relative fails


@dataclass
class Model:
    main: bir.Program
    startup: bir.Program
    forward: bir.Program
    loss: bir.dsl.Variable
    params_grads: list[tuple[bir.dsl.Variable, bir.dsl.Variable]]


def build(body: Callable[[], bir.dsl.Variable]) -> Model:
    """``body`` builds the forward pass and returns the loss; keep a copy of it, then append the backward pass."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 7
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        loss = body()
        forward = main.clone()
        params_grads = bir.append_backward(loss)
    return Model(main, startup, forward, loss, params_grads)


def initialized_scope(model: Model) -> bir.Scope:
    """The startup program's values, then every parameter redrawn so that biases are not all zero."""
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(model.startup, scope=scope)
    rng = np.random.default_rng(11)
    for param, _ in model.params_grads:
        value = scope.get(param.name)
        scope.set(param.name, rng.normal(scale=0.7, size=value.shape).astype(value.dtype))
    return scope


def analytic(model: Model, feed: dict, scope: bir.Scope) -> dict[str, object]:
    """Every parameter's gradient as the backward program computes it (SelectedRows kept as they are)."""
    grads = [g for _, g in model.params_grads]
    values = bir.Executor("cpu").run(model.main, feed=feed, fetch_list=grads, scope=scope, return_numpy=False)
    return {p.name: v for (p, _), v in zip(model.params_grads, values)}


def numeric(model: Model, feed: dict, scope: bir.Scope, name: str) -> np.ndarray:
    """d loss / d ``name`` by central differences, moving one entry at a time in the Scope."""
    exe = bir.Executor("cpu")
    base = scope.get(name).copy()
    grad = np.zeros(base.shape)
    for pos in np.ndindex(*base.shape):
        losses = []
        for step in (EPS, -EPS):
            moved = base.copy()
            moved[pos] += step
            scope.set(name, moved)
            losses.append(float(exe.run(model.forward, feed=feed, fetch_list=[model.loss], scope=scope)[0][0]))
        grad[pos] = (losses[0] - losses[1]) / (2 * EPS)
    scope.set(name, base)
    return grad


def dense(value: object) -> np.ndarray:
    return value.to_dense() if isinstance(value, bir.SelectedRows) else np.asarray(value)


def check_gradients(model: Model, feed: dict) -> dict[str, object]:
    """Every parameter's gradient equals its finite differences; return the analytic gradients."""
    scope = initialized_scope(model)
    grads = analytic(model, feed, scope)
    for name, grad in grads.items():
        value = dense(grad)
        assert value.dtype == np.float64 and value.shape == scope.get(name).shape, name
        np.testing.assert_allclose(
            value, numeric(model, feed, scope, name), rtol=RTOL, atol=ATOL, err_msg=f"d loss / d {name}"
        )
        assert np.abs(value).max() > 1e-3, f"{name}: a vanishing gradient checks nothing"
    return grads


def grad_writers(model: Model, name: str) -> list[str]:
    return [op.type for op in model.main.global_block().ops if name in op.output_names()]


# -- MLPs ---------------------------------------------------------------------------------------------


def mlp_feed(rng: np.random.Generator, n: int = 6, features: int = 5, classes: int = 3) -> dict:
    return {"x": rng.normal(size=(n, features)), "label": rng.integers(0, classes, size=(n, 1))}


def test_mlp_with_softmax_and_cross_entropy():
    def body():
        x = bir.data("x", shape=[-1, 5], dtype="float64")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=7, act="relu")
        h = bir.layers.fc(h, size=4, act="tanh")
        pred = bir.layers.fc(h, size=3, act="softmax")
        return bir.layers.mean(bir.layers.cross_entropy(pred, label))

    model = build(body)
    assert [p.name for p, _ in model.params_grads] == [
        "fc_0.w_0",
        "fc_0.b_0",
        "fc_1.w_0",
        "fc_1.b_0",
        "fc_2.w_0",
        "fc_2.b_0",
    ]
    check_gradients(model, mlp_feed(np.random.default_rng(0)))


def test_mlp_with_broadcasts_a_shared_weight_and_softmax_with_cross_entropy():
    def body():
        x = bir.data("x", shape=[-1, 5], dtype="float64")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=4, act="tanh")
        # the same weight twice: its gradient is the sum of two mul_grad results
        h = bir.layers.fc(h, size=4, param_attr="shared", act="tanh")
        h = bir.layers.fc(h, size=4, param_attr="shared", bias_attr=False)
        centered = h - bir.layers.reduce_mean(h, dim=0)  # [N, 4] - [4]
        gate = bir.layers.fc(x, size=1, act="sigmoid")  # [N, 1], broadcast along the features
        scale = bir.layers.scale(bir.layers.fc(x, size=4, act="sigmoid"), scale=2.0, bias=0.5)
        mixed = bir.layers.elementwise_div(centered * gate, scale) + h * h
        logits = bir.layers.fc(mixed, size=3)
        return bir.layers.mean(bir.layers.softmax_with_cross_entropy(logits, label))

    model = build(body)
    assert grad_writers(model, "shared@GRAD") == ["sum"]
    grads = check_gradients(model, mlp_feed(np.random.default_rng(1)))
    assert set(grads) == {
        "fc_0.w_0",
        "fc_0.b_0",
        "shared",
        "fc_1.b_0",
        "fc_3.w_0",
        "fc_3.b_0",
        "fc_4.w_0",
        "fc_4.b_0",
        "fc_5.w_0",
        "fc_5.b_0",
    }


# -- bag of words ----------------------------------------------------------------------------------

VOCAB, DIM = 9, 3
# four documents; id 2 repeats within the first and across documents, the third is empty,
# ids 0, 6 and 8 never occur (their gradient rows must stay zero)
DOCS = [[2, 5, 2, 1], [3], [], [2, 7, 4, 5, 5]]


def bow_feed() -> dict:
    ids = np.array([i for doc in DOCS for i in doc], dtype=np.int64).reshape(-1, 1)
    words = bir.LoDTensor.from_lengths(ids, [len(doc) for doc in DOCS])
    return {"words": words, "label": np.array([[0], [1], [1], [0]], dtype=np.int64)}


def bow_model(is_sparse: bool, pool_type: str) -> Model:
    def body():
        words = bir.data("words", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(words, size=[VOCAB, DIM], is_sparse=is_sparse, param_attr="emb", dtype="float64")
        pooled = bir.layers.sequence_pool(emb, pool_type=pool_type)
        pred = bir.layers.fc(pooled, size=2, act="softmax")
        return bir.layers.mean(bir.layers.cross_entropy(pred, label))

    return build(body)


@pytest.mark.parametrize("pool_type", ["sum", "average", "max"])
@pytest.mark.parametrize("is_sparse", [False, True], ids=["dense", "sparse"])
def test_bag_of_words(is_sparse, pool_type):
    model = bow_model(is_sparse, pool_type)
    kind = model.main.global_block().var("emb@GRAD").kind
    assert kind is (VarKind.SELECTED_ROWS if is_sparse else VarKind.LOD_TENSOR)
    grads = check_gradients(model, bow_feed())
    emb_grad = grads["emb"]
    if is_sparse:
        assert isinstance(emb_grad, bir.SelectedRows) and emb_grad.height == VOCAB
        assert set(np.asarray(emb_grad.rows).tolist()) == {1, 2, 3, 4, 5, 7}
    np.testing.assert_array_equal(dense(emb_grad)[[0, 6, 8]], 0.0)


def test_sparse_and_dense_embedding_gradients_agree():
    feed = bow_feed()
    grads = [
        analytic(model, feed, initialized_scope(model))["emb"]
        for model in (bow_model(False, "sum"), bow_model(True, "sum"))
    ]
    np.testing.assert_allclose(dense(grads[1]), grads[0], rtol=1e-12, atol=1e-15)


# -- stop_gradient --------------------------------------------------------------------------------------


def test_a_stopped_branch_gets_no_gradient_and_the_rest_stays_exact():
    def body():
        x = bir.data("x", shape=[-1, 5], dtype="float64")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        kept = bir.layers.fc(x, size=3, param_attr="kept_w", bias_attr=False)
        stopped = bir.layers.fc(x, size=3, param_attr="stopped_w", bias_attr=False, act="tanh")
        stopped.stop_gradient = True
        pred = bir.layers.softmax(kept * stopped)  # the stopped branch is a constant to autodiff
        return bir.layers.mean(bir.layers.cross_entropy(pred, label))

    model = build(body)
    block = model.main.global_block()
    assert [p.name for p, _ in model.params_grads] == ["kept_w"]
    stopped_name = next(op.output("Out")[0] for op in block.ops if op.type == "tanh")
    for name in ("stopped_w@GRAD", stopped_name + "@GRAD", "x@GRAD", "label@GRAD"):
        assert not block.has_var(name), name
    assert not any("stopped_w" in op.input_names() for op in block.ops if op.type.endswith("_grad"))
    feed = mlp_feed(np.random.default_rng(2))
    check_gradients(model, feed)
    # the loss does depend on the stopped weight: the missing gradient is autodiff's choice, not a zero
    scope = initialized_scope(model)
    assert np.abs(numeric(model, feed, scope, "stopped_w")).max() > 1e-2
