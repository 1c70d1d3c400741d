"""Kernels that may write into dead inputs (a keyword-only ``reuse`` parameter, see blockir.runtime.plan).

Every case of the case tables that involves such a kernel (the op itself or one of its gradient ops) runs
again with the kernel offered every array input for reuse, on private copies: forward values and gradients
must be the same. Without the offer, those kernels must leave their inputs alone.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from blockir.ir.schema import KernelContext, OpSchema, lookup, registered
from tests.ops.harness import Case, check_forward, check_grad, grad_specs, kernel_attrs, run_op
from tests.ops.test_op_cases import CASES


def _takes_reuse(schema: OpSchema) -> bool:
    return schema.kernel is not None and "reuse" in inspect.signature(schema.kernel).parameters


REUSING = sorted(t for t, schema in registered().items() if _takes_reuse(schema) and not t.startswith("rt_"))


def _offering(kernel: Callable[..., Any]) -> Callable[..., Any]:
    """``kernel`` called on copies of its arguments, offered every array among them."""

    def call(ctx: Any, *args: Any) -> Any:
        args = tuple(copy.deepcopy(args))
        return kernel(ctx, *args, reuse=[isinstance(a, np.ndarray) for a in args])

    return call


def _ctx(op_type: str, attrs: dict[str, Any]) -> KernelContext:
    schema = lookup(op_type)
    return KernelContext(
        xp=np, attrs=kernel_attrs(schema, attrs), wants=(True,) * len(schema.outputs), op_text=f"{op_type} (reuse test)"
    )


def _involved(op_type: str, case: Case) -> set[str]:
    """The op and the gradient ops its case runs."""
    types = {op_type}
    if case.grad:
        types |= {spec.type for spec in grad_specs(op_type, case)[0]}
    return types


def _params() -> list:
    out = []
    for op_type, cases in sorted(CASES.items()):
        for i, case in enumerate(cases):
            if any(t in REUSING for t in _involved(op_type, case)):
                out.append(pytest.param(op_type, case, id=f"{op_type}-{case.name or i}"))
    return out


def test_the_reusing_kernels_are_the_expected_ones() -> None:
    assert REUSING == [
        "batch_norm_act_grad",
        "batch_norm_grad",
        "elementwise_add",
        "elementwise_mul",
        "elementwise_sub",
        "fc_grad",
        "fc_grad_sgd",
        "fused_elemwise_activation",
        "fused_elemwise_activation_grad",
        "relu",
        "relu_grad",
        "sgd",
        "sigmoid",
        "softmax",
        "softmax_grad",
        "tanh",
    ]


@pytest.mark.parametrize(("op_type", "case"), _params())
def test_cases_hold_when_every_input_is_offered(op_type: str, case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in REUSING:
        schema = lookup(name)
        monkeypatch.setattr(schema, "kernel", _offering(schema.kernel))
    if case.expected:
        check_forward(op_type, case)
    if case.grad:
        check_grad(op_type, case)


@pytest.mark.parametrize(("op_type", "case"), _params())
def test_inputs_are_left_alone_without_the_offer(op_type: str, case: Case) -> None:
    before = copy.deepcopy(case.inputs)
    run_op(op_type, case.values(), case.attrs)
    for slot, value in before.items():
        np.testing.assert_array_equal(np.asarray(case.inputs[slot]), np.asarray(value), err_msg=slot)


def test_the_offer_is_taken() -> None:
    """Each reusing kernel writes its result into the offered buffer (else the offer buys nothing)."""
    rng = np.random.default_rng(0)
    x, y, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.normal(size=3)
    for op_type, args, k, attrs in (
        ("relu", (x,), 0, {}),
        ("sigmoid", (x,), 0, {}),
        ("tanh", (x,), 0, {}),
        ("softmax", (x,), 0, {"axis": -1}),
        ("elementwise_add", (x, b), 0, {"axis": -1}),
        ("elementwise_sub", (x, b), 0, {"axis": 1}),
        ("elementwise_mul", (x, y), 0, {"axis": -1}),
        ("relu_grad", (np.maximum(x, 0), y), 1, {}),
        ("softmax_grad", (np.abs(x), y), 1, {"axis": -1}),
    ):
        args = tuple(a.copy() for a in args)
        flags = [i == k for i in range(len(args))]
        assert lookup(op_type).kernel(_ctx(op_type, attrs), *args, reuse=flags) is args[k], op_type


@pytest.mark.parametrize("is_test", [False, True], ids=["batch_statistics", "global_statistics"])
def test_batch_norm_grad_writes_x_grad_into_an_offered_y_grad(is_test: bool) -> None:
    rng = np.random.default_rng(2)
    x, dy = rng.normal(size=(4, 3, 2, 2)), rng.normal(size=(4, 3, 2, 2))
    scale, bias, mean, variance = rng.normal(size=3), rng.normal(size=3), rng.normal(size=3), rng.uniform(1, 2, 3)
    saved = (x.mean(axis=(0, 2, 3)), 1 / np.sqrt(x.var(axis=(0, 2, 3)) + 1e-5))
    args = (x, scale, bias, mean, variance, *saved, None)
    kernel, ctx = lookup("batch_norm_grad").kernel, _ctx("batch_norm_grad", {"is_test": is_test})
    plain = kernel(ctx, *args, dy)
    offered = dy.copy()
    reused = kernel(ctx, *args, offered, reuse=[False] * 8 + [True])
    assert reused[0] is offered
    for got, want in zip(reused, plain):
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


def test_batch_norm_act_grad_writes_x_grad_into_an_offered_y_grad() -> None:
    """relu's gradient and then X@GRAD both go into the offered Y@GRAD, with the gradients numpy gives."""
    rng = np.random.default_rng(3)
    x, dy = rng.normal(size=(4, 3, 2, 2)), rng.normal(size=(4, 3, 2, 2))
    scale, bias = rng.normal(size=3), rng.normal(size=3)
    mu, inv_std = x.mean(axis=(0, 2, 3)), 1 / np.sqrt(x.var(axis=(0, 2, 3)) + 1e-5)
    x_hat = (x - mu[:, None, None]) * inv_std[:, None, None]
    y = np.maximum(x_hat * scale[:, None, None] + bias[:, None, None], 0)
    d = dy * (y > 0)
    d_scale, d_bias = (d * x_hat).sum(axis=(0, 2, 3)), d.sum(axis=(0, 2, 3))
    dx = (scale * inv_std)[:, None, None] * (d - (d_bias[:, None, None] + x_hat * d_scale[:, None, None]) / 16)
    args = (x, scale, bias, None, None, mu, inv_std, None, y)
    kernel, ctx = lookup("batch_norm_act_grad").kernel, _ctx("batch_norm_act_grad", {"act_type": "relu"})
    plain = kernel(ctx, *args, dy)
    offered = dy.copy()
    reused = kernel(ctx, *args, offered, reuse=[False] * 9 + [True])
    assert reused[0] is offered
    for got, want in zip(reused, (dx, d_scale, d_bias)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    for got, want in zip(reused, plain):
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=1e-15)


def test_sgd_with_its_gradient_offered_matches_the_plain_update() -> None:
    rng = np.random.default_rng(1)
    param, grad, lr = rng.normal(size=(5, 2)), rng.normal(size=(5, 2)), np.array([0.1])
    kernel = lookup("sgd").kernel
    plain = kernel(_ctx("sgd", {}), param.copy(), grad, lr)
    offered = grad.copy()
    reused = kernel(_ctx("sgd", {}), param.copy(), offered, lr, reuse=[False, True, False])
    np.testing.assert_allclose(reused, plain, rtol=1e-15)
    np.testing.assert_allclose(plain, param - 0.1 * grad, rtol=1e-15)


def test_elementwise_ops_do_not_reuse_an_input_smaller_than_the_result() -> None:
    x, y = np.ones((1, 3)), np.arange(6.0).reshape(2, 3)
    out = lookup("elementwise_add").kernel(_ctx("elementwise_add", {"axis": -1}), x, y, reuse=[True, False])
    assert out.shape == (2, 3) and out is not x
    np.testing.assert_array_equal(x, np.ones((1, 3)))
    x32 = np.ones(3, np.float32)
    out = lookup("elementwise_mul").kernel(
        _ctx("elementwise_mul", {"axis": -1}), x32, np.full(3, 2.0), reuse=[True, False]
    )
    assert out.dtype == np.float64 and out is not x32
