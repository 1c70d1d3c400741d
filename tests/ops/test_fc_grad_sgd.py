"""fc_grad_sgd, the op fuse-fc-sgd makes of fc_grad and the sgd updates reading its dW and dBias: against plain
numpy (dInput from W before its update, W -= lr * dW, Bias -= lr * dBias, in place), with every activation,
with and without Bias and dInput, Input flattened at in_num_col_dims=2, float32 and float64, the executor's
reuse offers taken or not, a W large enough for the BLAS gemm into it, on the CUDA stand-in too; its
inference refuses what it cannot do."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import blockir as bir
from blockir.errors import ShapeError
from blockir.ir import Program
from blockir.ir.schema import KernelContext, lookup
from blockir.ops import blas
from tests.ops.cases_fused import ref_fc
from tests.runtime import fake_cupy

LR = 0.1
DERIVATIVES = {  # the activation's derivative from its output
    "": lambda out: np.ones_like(out),
    "relu": lambda out: (out > 0).astype(out.dtype),
    "sigmoid": lambda out: out * (1 - out),
    "tanh": lambda out: 1 - out**2,
}


def _inputs(act: str, bias: bool, n: int, dtype: str) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    shape = (3, 4) if n == 1 else (2, 3, 4)
    k = int(np.prod(shape[n:]))
    x, w = rng.normal(size=shape).astype(dtype), rng.normal(size=(k, 5)).astype(dtype)
    b = rng.normal(size=5).astype(dtype) if bias else None
    out = ref_fc(x, w, b, n, act)
    return {"x": x, "w": w, "b": b, "out": out, "dout": rng.normal(size=out.shape).astype(dtype)}


def _expected(v: dict[str, Any], act: str, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """dInput, W and Bias after the update, in float64 from the fused op's definition."""
    x, w, b, out, dout = (np.asarray(v[k], np.float64) if v[k] is not None else None for k in v)
    dpre = (dout * DERIVATIVES[act](out)).reshape(-1, w.shape[1])
    rows = x.reshape(int(np.prod(x.shape[:n])), -1)
    dx = (dpre @ w.T).reshape(x.shape)
    return dx, w - LR * rows.T @ dpre, None if b is None else b - LR * dpre.sum(axis=0)


def _run(xp: Any, v: dict[str, Any], act: str, n: int, wants_dx: bool, offer: bool) -> tuple[Any, Any, Any, Any]:
    """(dInput, WOut, BiasOut, the W array given): the kernel on ``xp``'s copies of the inputs."""
    args = [None if v[k] is None else xp.asarray(v[k].copy()) for k in ("x", "w", "b", "out", "dout")]
    args[3] = args[3] if act else None  # Out is read for the activation's gradient only
    ctx = KernelContext(
        xp, {"in_num_col_dims": n, "activation_type": act}, (wants_dx, True, v["b"] is not None), "fc_grad_sgd (test)"
    )
    lr = xp.asarray(np.array([LR], v["x"].dtype))
    reuse = [False, False, False, offer and args[3] is not None, offer, False]
    dx, w_out, b_out = lookup("fc_grad_sgd").kernel(ctx, *args, lr, reuse=reuse)
    return dx, w_out, b_out, args[1]


@pytest.mark.parametrize("act", list(DERIVATIVES))
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize(("n", "dtype"), [(1, "float64"), (2, "float64"), (1, "float32")])
@pytest.mark.parametrize(("wants_dx", "offer"), [(True, False), (True, True), (False, False)])
def test_fc_grad_sgd_matches_numpy(act: str, bias: bool, n: int, dtype: str, wants_dx: bool, offer: bool) -> None:
    v = _inputs(act, bias, n, dtype)
    dx, w_out, b_out, w_given = _run(np, v, act, n, wants_dx, offer)
    want_dx, want_w, want_b = _expected(v, act, n)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == "float64" else {"rtol": 2e-6, "atol": 2e-6}
    assert w_out is w_given and w_out.dtype == np.dtype(dtype)  # W updated in place
    np.testing.assert_allclose(w_out, want_w, **tol)
    if wants_dx:
        assert dx.shape == v["x"].shape and dx.dtype == np.dtype(dtype)
        np.testing.assert_allclose(dx, want_dx, **tol)
    else:
        assert dx is None
    if bias:
        np.testing.assert_allclose(b_out, want_b, **tol)
    else:
        assert b_out is None


@pytest.mark.parametrize(("n", "dtype"), [(1, "float32"), (2, "float64")])
def test_a_large_w_is_updated_by_gemm_into_it(n: int, dtype: str) -> None:
    """W of 200 x 96: above blas.MIN_ELEMENTS, so W's update is numpy's BLAS gemm accumulating into W."""
    rng = np.random.default_rng(11)
    x = rng.normal(size=(8, 200) if n == 1 else (2, 4, 200)).astype(dtype)
    w, b = rng.normal(size=(200, 96)).astype(dtype), rng.normal(size=96).astype(dtype)
    out = ref_fc(x, w, b, n, "relu")
    v = {"x": x, "w": w, "b": b, "out": out, "dout": rng.normal(size=out.shape).astype(dtype)}
    assert not blas._gemms() or blas.gemm(v["w"].copy(), v["x"].reshape(-1, 200).T, v["dout"].reshape(-1, 96), 0, 1)
    dx, w_out, b_out, w_given = _run(np, v, "relu", n, True, True)
    want_dx, want_w, want_b = _expected(v, "relu", n)
    tol = {"rtol": 1e-12, "atol": 1e-12} if dtype == "float64" else {"rtol": 1e-5, "atol": 1e-5}
    assert w_out is w_given
    for got, want in ((dx, want_dx), (w_out, want_w), (b_out, want_b)):
        np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("act", ["relu", ""])
def test_fc_grad_sgd_on_the_cuda_standin(act: str, monkeypatch: pytest.MonkeyPatch) -> None:
    standin = fake_cupy.install(monkeypatch, gpus=1)
    v = _inputs(act, True, 1, "float64")
    dx, w_out, b_out, _ = _run(standin, v, act, 1, True, True)
    want_dx, want_w, want_b = _expected(v, act, 1)
    for got, want in ((dx, want_dx), (w_out, want_w), (b_out, want_b)):
        assert isinstance(got, fake_cupy.FakeArray)
        np.testing.assert_allclose(np.asarray(got.view(np.ndarray)), want, rtol=1e-12)


def _program(outputs: dict[str, list[str]], lr_shape: tuple[int, ...] = (1,), act: str = "relu") -> None:
    block = Program().global_block()
    for name, shape in (("x", (3, 4)), ("w", (4, 5)), ("b", (5,)), ("out", (3, 5)), ("dout", (3, 5)), ("v", (5,))):
        block.create_var(name, shape=shape, dtype="float32")
    block.create_var("lr", shape=lr_shape, dtype="float32")
    inputs = {"Input": ["x"], "W": ["w"], "Bias": ["b"], "Out@GRAD": ["dout"], "LearningRate": ["lr"]}
    if act:
        inputs["Out"] = ["out"]
    block.append_op("fc_grad_sgd", inputs, outputs, {"activation_type": act})


@pytest.mark.parametrize(
    ("outputs", "lr_shape", "act", "pattern"),
    [
        ({"WOut": ["b"], "BiasOut": ["b"]}, (1,), "relu", r"updates in place: WOut \['b'\] must name the W variable"),
        ({"WOut": ["w"], "BiasOut": ["v"]}, (1,), "relu", r"BiasOut \['v'\] must name the Bias variable \['b'\]"),
        ({"WOut": ["w"]}, (2,), "relu", r"LearningRate .*\[2\].* must be a float tensor of one element"),
        ({"WOut": ["w"]}, (1,), "tanh", None),
    ],
)
def test_inference_refuses_what_fc_grad_sgd_cannot_do(
    outputs: dict[str, list[str]], lr_shape: tuple[int, ...], act: str, pattern: str | None
) -> None:
    if pattern is None:  # the well-formed op builds
        _program(outputs, lr_shape, act)
        return
    with pytest.raises(ShapeError, match=pattern) as info:
        _program(outputs, lr_shape, act)
    assert str(info.value).startswith("fc_grad_sgd: ")


def test_an_activation_needs_out() -> None:
    block = Program().global_block()
    for name, shape in (("x", (3, 4)), ("w", (4, 5)), ("dout", (3, 5)), ("lr", (1,))):
        block.create_var(name, shape=shape, dtype="float32")
    inputs = {"Input": ["x"], "W": ["w"], "Out@GRAD": ["dout"], "LearningRate": ["lr"]}
    with pytest.raises(ShapeError, match=r"activation_type='relu' needs Out"):
        block.append_op("fc_grad_sgd", inputs, {"WOut": ["w"]}, {"activation_type": "relu"})


def test_the_executor_updates_the_scopes_parameters_in_place() -> None:
    """A training step of an fc layer under SGD runs fc_grad_sgd and leaves each parameter's array in the scope,
    updated: what the unfused ops compute."""
    rng = np.random.default_rng(3)
    feed = {"x": rng.normal(size=(8, 4)).astype("float32"), "y": rng.normal(size=(8, 3)).astype("float32")}
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x, y = bir.data("x", shape=[-1, 4], dtype="float32"), bir.data("y", shape=[-1, 3], dtype="float32")
        loss = bir.layers.mean(bir.layers.square_error_cost(bir.layers.fc(x, size=3, act="tanh"), y))
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    results = {}
    for fused in (True, False):
        strategy = bir.BuildStrategy()
        strategy.fuse_all_optimizer_ops = fused
        scope = bir.Scope()
        with bir.Executor(build_strategy=strategy) as exe:
            exe.run(startup, scope=scope)
            arrays = {p.name: scope.get(p.name) for p in main.all_parameters()}
            for _ in range(3):
                exe.run(main, feed=feed, fetch_list=[loss], scope=scope)
            types = [op.type for op in exe.compiled_program(main, feed, [loss]).global_block().ops]
            assert ("fc_grad_sgd" in types) == fused and ("sgd" in types) != fused
            assert all(scope.get(name) is array for name, array in arrays.items())  # the same arrays, updated
            results[fused] = {name: np.array(a) for name, a in arrays.items()}
    for name, value in results[False].items():
        np.testing.assert_allclose(results[True][name], value, rtol=1e-5, atol=1e-6, err_msg=name)
