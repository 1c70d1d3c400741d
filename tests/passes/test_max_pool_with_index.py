"""``max-pool-with-index``: random max poolings (layouts, windows, strides, paddings and their algorithms, ceil_mode,
global and adaptive pooling) compute, with the pass, exactly what they compute without it, values and gradients
(inputs with ties, -inf and -FLT_MAX; gradients of small integers, so that sums are exact in any order), and the
pass rewrites exactly the poolings ``max_pool2d_with_index`` computes alike; the executor applies it to its copy
only, as ``BuildStrategy.max_pool_with_index`` says."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

import blockir as bir
from blockir.errors import ShapeError
from blockir.ir import Program
from blockir.passes import run
from blockir.viz.page import DEFAULT_PIPELINE
from tests.runtime.test_fusion import strategy

FLT_MAX = float(np.finfo(np.float32).max)
VALUES = np.array([-2.0, -1.0, 0.0, 1.0, 2.0, -np.inf, -FLT_MAX], np.float32)
REWRITTEN = {"max_pool2d_with_index", "max_pool2d_with_index_grad"}


def without_pass() -> bir.BuildStrategy:
    build = strategy()
    build.max_pool_with_index = False
    return build


def pooling(attrs: dict[str, Any], shape: list[int]) -> tuple[Program, str]:
    """x (fed, with a gradient) -> pool2d with ``attrs`` -> sum of Out * g (g fed): the program and Out's name."""
    main = Program()
    with bir.unique_name.guard(), bir.program_guard(main, Program()):
        x = bir.data("x", shape=[-1, *shape[1:]], dtype="float32")
        x.stop_gradient = False
        block = main.global_block()
        out = block.create_var("out", dtype="float32")
        block.append_op("pool2d", {"X": [x]}, {"Out": [out]}, attrs)
        g = bir.data("g", shape=list(out.shape), dtype="float32")
        bir.append_backward(bir.layers.reduce_sum(bir.layers.elementwise_mul(out, g)))
    return main, out.name


@st.composite
def poolings(draw: st.DrawFn) -> tuple[dict[str, Any], list[int], bool]:
    """pool2d's attributes, X's shape, and whether max_pool2d_with_index computes the same."""
    layout = draw(st.sampled_from(("NCHW", "NCHW", "AnyLayout", "NHWC")))
    ksize = [draw(st.integers(1, 3)) for _ in range(2)]
    algorithm = draw(st.sampled_from(("EXPLICIT", "EXPLICIT", "EXPLICIT", "VALID", "SAME")))
    if draw(st.booleans()):
        paddings = [draw(st.integers(0, k)) for k in ksize]  # up to k: windows all in the padding
        symmetric = True
    else:
        paddings = [draw(st.integers(0, 2)) for _ in range(4)]
        symmetric = paddings[0] == paddings[1] and paddings[2] == paddings[3]
    attrs = {
        "pooling_type": "max",
        "ksize": ksize,
        "strides": [draw(st.integers(1, 3)) for _ in range(2)],
        "paddings": paddings,
        "padding_algorithm": algorithm,
        "ceil_mode": draw(st.booleans()),
        "global_pooling": draw(st.integers(0, 5)) == 0,
        "adaptive": draw(st.integers(0, 5)) == 0,
        "data_format": layout,
    }
    n, c, h, w = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 7)), draw(st.integers(1, 7))
    shape = [n, h, w, c] if layout == "NHWC" else [n, c, h, w]
    padded_alike = attrs["global_pooling"] or algorithm == "VALID" or (algorithm == "EXPLICIT" and symmetric)
    return attrs, shape, layout != "NHWC" and not attrs["adaptive"] and padded_alike


@settings(max_examples=120, deadline=None)
@given(poolings(), st.integers(0, 2**31 - 1))
def test_max_pooling_computes_with_the_pass_what_it_computes_without(
    pool: tuple[dict[str, Any], list[int], bool], seed: int
) -> None:
    attrs, shape, alike = pool
    try:
        main, out = pooling(attrs, shape)
    except ShapeError:
        assume(False)  # no window along an axis
    run(main, "max-pool-with-index", verify=True)  # the verifier accepts what the pass makes
    rng = np.random.default_rng(seed)
    feed = {"x": rng.choice(VALUES, size=shape)}
    feed["g"] = rng.integers(-3, 4, size=(shape[0], *main.global_block().var(out).shape[1:])).astype(np.float32)
    results, compiled = [], []
    for build in (without_pass(), strategy()):
        with bir.Executor(build_strategy=build) as exe, np.errstate(over="ignore", invalid="ignore"):  # -FLT_MAX * g
            results.append(exe.run(main, feed=feed, fetch_list=[out, "x@GRAD"]))
            compiled.append({op.type for op in exe.compiled_program(main, feed, [out, "x@GRAD"]).global_block().ops})
    event(f"rewritten: {alike}")
    assert bool(REWRITTEN & compiled[1]) == alike and not REWRITTEN & compiled[0]
    assert {op.type for op in main.global_block().ops} >= {"pool2d", "pool2d_grad"}  # the user's program stays
    (want_out, want_dx), (got_out, got_dx) = results
    np.testing.assert_array_equal(got_out, want_out)
    np.testing.assert_array_equal(got_dx, want_dx)


def cnn() -> tuple[Program, Program, str]:
    main, startup = Program(), Program()
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 3, 8, 8], dtype="float32")
        h = bir.layers.conv2d(x, 4, 3, padding=1, bias_attr=False)
        h = bir.layers.pool2d(h, 2, "max", 2)
        loss = bir.layers.reduce_mean(h)
        bir.optimizer.Momentum(0.1, 0.9).minimize(loss)
    return main, startup, loss.name


FEED = {"x": np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)}


def test_the_executor_rewrites_its_copy_unless_the_flag_is_off() -> None:
    main, startup, loss = cnn()
    losses = []
    for build in (strategy(), without_pass()):
        scope = bir.Scope()
        with bir.Executor(build_strategy=build) as exe:
            exe.run(startup, scope=scope)
            losses.append([exe.run(main, feed=FEED, fetch_list=[loss], scope=scope)[0] for _ in range(3)])
            types = {op.type for op in exe.compiled_program(main, FEED, [loss]).global_block().ops}
            report = exe.pass_report(main, FEED, [loss])
        if build.max_pool_with_index:
            assert REWRITTEN <= types and "pool2d" not in types
            assert report.record("max-pool-with-index").changed
        else:
            assert not REWRITTEN & types and {"pool2d", "pool2d_grad"} <= types
            assert "max_pool_index=false" in report.pipeline
            assert "max-pool-with-index" not in [r.name for r in report]
    assert {op.type for op in main.global_block().ops} >= {"pool2d", "pool2d_grad"}
    np.testing.assert_array_equal(losses[0], losses[1])  # three momentum steps, the same to the bit


def test_blockir_viz_shows_the_pass() -> None:
    """The page runs the executor's pipelines: the pass is in its report, with what it rewrote."""
    main, _, _ = cnn()
    _, report = run(main, DEFAULT_PIPELINE)
    record = report.record("max-pool-with-index")
    assert record.changed and "rewrote pool2d:pool2d_0.tmp_0" in record.notes[0]


def test_a_pooling_written_over_its_input_stays() -> None:
    """Out = X: the gradient op reads the pooled values as X, so it finds other maxima than the forward op did."""
    main = Program()
    with bir.unique_name.guard(), bir.program_guard(main, Program()):
        h = bir.layers.scale(bir.data("x", shape=[-1, 2, 4, 4], dtype="float32"), 2.0)
        block = main.global_block()
        attrs = {"pooling_type": "max", "ksize": [1, 1]}
        block.append_op("pool2d", {"X": [h]}, {"Out": [h]}, attrs)
        dh = block.create_var("dh", dtype="float32", shape=h.shape)
        block.append_op("pool2d_grad", {"X": [h], "Out": [h], "Out@GRAD": [h]}, {"X@GRAD": [dh]}, attrs)
    rewritten, report = run(main, "max-pool-with-index")
    assert [op.type for op in rewritten.global_block().ops] == ["scale", "pool2d", "pool2d_grad"]
    assert "it writes its Out over its X" in report.record("max-pool-with-index").notes[0]
