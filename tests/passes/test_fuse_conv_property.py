"""Property: the passes of convolutional networks (fold-conv-bn, fuse-conv-add-act, fuse-bn-act) change what random
conv stacks compute by float32 rounding at most: max |fused - unfused| / max |unfused| <= 1e-5.

A stack is drawn layer by layer: a convolution (NCHW or NHWC; 1x1 or 3x3; strides 1 or 2; SAME or explicit
paddings; groups 1, 2 or depthwise; with or without a bias), then maybe a batch_norm (random running statistics
and affine parameters), maybe a residual add of an earlier value of the same shape, maybe an activation. The
inference program is its ``clone(for_test=True)``, run by an executor fusing everything and by one fusing
nothing, from the same parameters; the training program runs two SGD steps both ways (batch_norm_act and its
gradient), compared on the loss and every parameter.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.ir import Program
from blockir.passes import run
from tests.runtime.test_fusion import strategy, unfused

ACTS = (None, "relu", "sigmoid", "tanh")
TOLERANCE = 1e-5
FUSED = {"conv_bn_fold", "fused_conv2d_add_act", "batch_norm_act", "batch_norm_act_grad"}


def relative(got: Any, want: Any) -> float:
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return float(np.abs(got - want).max() / max(np.abs(want).max(), 1e-30))


@st.composite
def stacks(draw: st.DrawFn) -> tuple[Program, Program, Any, Any, str]:
    channel_last = draw(st.booleans())
    layout = "NHWC" if channel_last else "NCHW"
    channels, size = draw(st.sampled_from((2, 4))), draw(st.sampled_from((5, 8)))
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = draw(st.integers(1, 10_000))
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, size, size, channels] if channel_last else [-1, channels, size, size])
        values, h = [x], x
        for _ in range(draw(st.integers(1, 4))):
            c = h.shape[-1 if channel_last else 1]
            k, stride = draw(st.sampled_from((1, 3))), draw(st.sampled_from((1, 1, 2)))
            groups = draw(st.sampled_from((1, 2, c) if c % 2 == 0 else (1, c)))
            out = draw(st.sampled_from((c, 2 * c)))
            padding = draw(st.sampled_from(("SAME", k // 2)))
            h = bir.layers.conv2d(
                h,
                out,
                k,
                stride=stride,
                padding=padding,
                groups=groups,
                bias_attr=None if draw(st.booleans()) else False,
                use_cudnn=draw(st.booleans()),
                data_format=layout,
            )
            if draw(st.booleans()):
                h = bir.layers.batch_norm(h, data_layout=layout)
            same = [v for v in values if v.shape == h.shape and v is not h]
            if same and draw(st.booleans()):
                h = bir.layers.elementwise_add(h, draw(st.sampled_from(same)))
            act = draw(st.sampled_from(ACTS))
            if act is not None:
                h = getattr(bir.layers, act)(h)
            values.append(h)
        loss = bir.layers.reduce_mean(bir.layers.elementwise_mul(h, h))
    test = main.clone(for_test=True)
    with bir.program_guard(main, startup):
        bir.optimizer.SGD(learning_rate=0.05).minimize(loss)
    return main, startup, test, h, loss.name


def _scope(startup: Program, main: Program, seed: int) -> bir.Scope:
    """Parameters from the startup program, then random running statistics and affine parameters for batch_norm."""
    scope, rng = bir.Scope(), np.random.default_rng(seed)
    with bir.Executor(build_strategy=unfused()) as exe:
        exe.run(startup, scope=scope)
    for var in main.list_vars():
        if var.persistable and var.name.startswith("batch_norm"):
            value = np.asarray(scope.get(var.name))
            scope.set(var.name, (rng.random(value.shape) + 0.5).astype(value.dtype))
    return scope


def _copy(scope: bir.Scope) -> bir.Scope:
    copy = bir.Scope()
    for name in scope.names():
        copy.set(name, np.array(scope.get(name), copy=True))
    return copy


@settings(max_examples=30, deadline=None)
@given(stacks(), st.integers(0, 2**31 - 1))
def test_fused_conv_stacks_compute_what_the_unfused_ones_compute(
    stack: tuple[Program, Program, Program, Any, str], seed: int
) -> None:
    main, startup, test, out, loss = stack
    run(test, f"fuse{{keep={out.name},x}}", verify=True)  # the verifier accepts the program after every pass
    run(main, f"fuse{{keep={loss},x}}", verify=True)
    scope = _scope(startup, main, seed)
    x = main.global_block().var("x")
    feed = {"x": np.random.default_rng(seed).standard_normal((2, *x.shape[1:])).astype(np.float32)}
    results = []
    for build in (unfused(), strategy()):
        run_scope = _copy(scope)
        with bir.Executor(build_strategy=build) as exe:
            inferred = exe.run(test, feed=feed, fetch_list=[out], scope=run_scope)[0]
            for fused in FUSED & {op.type for op in exe.compiled_program(test, feed, [out]).global_block().ops}:
                event(f"inference: {fused}")
            for fused in FUSED & {op.type for op in exe.compiled_program(main, feed, [loss]).global_block().ops}:
                event(f"training: {fused}")
            losses = [exe.run(main, feed=feed, fetch_list=[loss], scope=run_scope)[0] for _ in range(2)]
        params = {p.name: np.asarray(run_scope.get(p.name)) for p in main.all_parameters()}
        results.append((inferred, losses, params))
    (want, want_losses, want_params), (got, got_losses, got_params) = results
    assert relative(got, want) <= TOLERANCE
    assert relative(got_losses, want_losses) <= TOLERANCE
    for name, value in want_params.items():
        assert relative(got_params[name], value) <= TOLERANCE, name
