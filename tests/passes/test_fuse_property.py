"""Property: fusing random programs of the fusable op families changes what they compute by float32 rounding at
most (values, gradients, updated parameters), and the verifier accepts the program after every rewrite.

The first programs (hypothesis) are small networks: layers drawn among ``fc`` with or without an activation, a
residual ``elementwise_add`` (or ``elementwise_mul``) of two layers then maybe an activation, and an
``elementwise_add`` (or ``elementwise_mul``) of a fed value then maybe an activation; a head drawn among softmax
+ cross-entropy, a squared error and a plain mean; sometimes an intermediate value also read by another op
(added to the loss) or fetched; with or without the backward pass and SGD. Both programs run two steps from the
same parameters. The second are tests/passes/programs.py's (elementwise ops, products, in-place SGD updates) and
chains of elementwise_add and activations, over overwritten temporaries and ops on several devices, where every
fusion the legality checks let through must compute exactly what the ops it replaces computed.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
from hypothesis import event, given, settings
from hypothesis import strategies as st

import blockir as bir
import blockir.passes.fuse_optimizer as fuse_optimizer_module
import blockir.passes.rewrite as rewrite_module
from blockir.ir import Program, verify
from blockir.passes import Fuse, run
from tests.passes.programs import SHAPE, Network, RandomProgram, assert_same_results, runnable_programs
from tests.runtime.test_fusion import unfused

ACTIVATIONS = (None, "relu", "sigmoid", "tanh")
BATCH = 3


def _forward_values(program: Program) -> list[str]:
    """The variables the forward ops write so far, in order."""
    return [name for op in program.global_block().ops for name in op.output_names()]


@st.composite
def networks(draw: st.DrawFn) -> Network:
    width = draw(st.integers(2, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    main, startup = Program(), Program()
    main.random_seed = startup.random_seed = draw(st.integers(1, 10_000))
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, width], dtype="float32")
        v = bir.data("v", shape=[-1, width], dtype="float32")
        layers = [x]
        for _ in range(draw(st.integers(1, 4))):
            kind, act = draw(st.sampled_from(("fc", "residual", "fed"))), draw(st.sampled_from(ACTIVATIONS))
            if kind == "fc":
                h = bir.layers.fc(layers[-1], size=width, act=act)
            else:
                other = draw(st.sampled_from(layers)) if kind == "residual" else v
                binary = draw(st.sampled_from((bir.layers.elementwise_add, bir.layers.elementwise_mul)))
                h = binary(layers[-1], other)
                h = h if act is None else getattr(bir.layers, act)(h)
            layers.append(h)
        head = draw(st.sampled_from(("softmax-ce", "square", "mean")))
        if head == "softmax-ce":
            label = bir.data("label", shape=[-1, 1], dtype="int64")
            loss = bir.layers.mean(bir.layers.cross_entropy(bir.layers.softmax(layers[-1]), label))
        elif head == "square":
            loss = bir.layers.mean(bir.layers.square_error_cost(layers[-1], v))
        else:
            loss = bir.layers.mean(layers[-1])
        values = _forward_values(main)
        if draw(st.booleans()):  # a value also read by another op
            shared = main.global_block().var(draw(st.sampled_from(values)))
            loss = bir.layers.elementwise_add(loss, bir.layers.mean(shared))
        fetch = [loss.name]
        if draw(st.booleans()):  # a value fetched
            fetch.append(draw(st.sampled_from(values)))
        if draw(st.booleans()):
            bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    feed = {
        "x": rng.normal(size=(BATCH, width)).astype("float32"),
        "v": rng.normal(size=(BATCH, width)).astype("float32"),
    }
    if head == "softmax-ce":
        feed["label"] = rng.integers(0, width, size=(BATCH, 1)).astype("int64")
    return Network(main, startup, feed, fetch)


def _steps(net: Network, program: Program, start: bir.Scope) -> tuple[list[Any], dict[str, np.ndarray]]:
    """What two runs of ``program`` fetch, and the parameters after them, from the persistables in ``start``."""
    scope = bir.Scope()
    for var in net.main.list_vars():
        if var.persistable:
            scope.set(var.name, np.array(start.get(var.name)))
    with bir.Executor(build_strategy=unfused()) as exe:
        fetched = [exe.run(program, feed=net.feed, fetch_list=net.fetch, scope=scope) for _ in range(2)]
    return fetched, {p.name: np.asarray(scope.get(p.name)) for p in net.main.all_parameters()}


@settings(max_examples=100)
@given(networks())
def test_fused_programs_compute_what_they_replace_and_verify_after_every_rewrite(net: Network) -> None:
    rewrites = []

    def verifying(apply: Any) -> Any:
        def apply_and_verify(*args: Any) -> Any:
            created = apply(*args)
            verify(created[0].block.program)  # raises VerifyError naming the ops
            rewrites.append([op.type for op in created])
            return created

        return apply_and_verify

    keep = (*net.feed, *net.fetch)
    with (
        mock.patch.object(rewrite_module, "_apply", verifying(rewrite_module._apply)),
        mock.patch.object(fuse_optimizer_module, "_fuse_group", verifying(fuse_optimizer_module._fuse_group)),
    ):
        fused, report = run(net.main, [Fuse(keep=keep)])
    assert len(rewrites) == sum(len(r.details["fused"]) for r in report)
    event(f"rewrites: {len(rewrites)}")
    for name in net.fetch:
        assert any(name in op.output_names() for op in fused.global_block().ops), f"{name} is fetched"

    start = bir.Scope()
    with bir.Executor(build_strategy=unfused()) as exe:
        exe.run(net.startup, scope=start)
    (expected, params), (got, fused_params) = _steps(net, net.main, start), _steps(net, fused, start)
    for step_expected, step_got in zip(expected, got):
        for name, e, g in zip(net.fetch, step_expected, step_got):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6, err_msg=name)
    for name in params:
        np.testing.assert_allclose(fused_params[name], params[name], rtol=1e-5, atol=1e-6, err_msg=name)


@st.composite
def add_act_chains(draw: st.DrawFn) -> RandomProgram:
    """tests/passes/programs.py's kind of program, with elementwise_add then an activation drawn often (now
    and then with a scale between them): each op reads any value so far and writes a new temporary or
    overwrites one (maybe one it reads), on the host, cpu or cpu:1; in-place SGD updates in between."""
    program = Program()
    block = program.global_block()
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    feeds = {f"x{i}": rng.uniform(-1, 1, SHAPE).astype("float32") for i in range(2)}
    params = {f"p{i}": rng.uniform(-1, 1, SHAPE).astype("float32") for i in range(2)}
    for name in feeds:
        block.create_var(name, shape=SHAPE, dtype="float32", need_check_feed=True)
    for name in params:
        block.create_var(name, shape=SHAPE, dtype="float32", persistable=True, is_parameter=True)
    block.create_var("lr", shape=(1,), dtype="float32", persistable=True)
    readable, temps = [*feeds, *params], []

    def output() -> str:
        if temps and draw(st.integers(0, 2)) == 0:
            return draw(st.sampled_from(temps))
        name = f"t{len(block.ops)}"
        block.create_var(name, shape=SHAPE, dtype="float32")
        temps.append(name)
        readable.append(name)
        return name

    def append(op_type: str, inputs: dict[str, str], device: str) -> None:
        block.append_op(op_type, inputs, {"Out": output()}, {"op_device": device} if device else {})

    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(("add-act", "add-act", "act", "sgd")))
        device = draw(st.sampled_from(("", "", "cpu:1")))
        if kind == "sgd":
            param = draw(st.sampled_from(sorted(params)))
            grad = draw(st.sampled_from(readable))
            block.append_op("sgd", {"Param": param, "Grad": grad, "LearningRate": "lr"}, {"ParamOut": param})
            continue
        source = draw(st.sampled_from(readable))
        if kind == "add-act":
            inputs = {"X": draw(st.sampled_from(readable)), "Y": draw(st.sampled_from(readable))}
            append("elementwise_add", inputs, draw(st.sampled_from((device,) * 5 + ("cpu",))))
            source = block.ops[-1].output("Out")[0]
            if draw(st.integers(0, 2)) == 0:  # an op in between, which may overwrite what the pair reads
                scaled, overwritten = draw(st.sampled_from(readable)), [n for n in inputs.values() if n in temps]
                out = draw(st.sampled_from(overwritten)) if overwritten and draw(st.booleans()) else output()
                block.append_op("scale", {"X": scaled}, {"Out": out}, {"scale": 2.0})
        append(draw(st.sampled_from(ACTIVATIONS[1:])), {"X": source}, device)
    acts = [op.output("Out")[0] for op in block.ops if op.type in ACTIVATIONS]  # what the fused ops write
    extra = draw(st.lists(st.sampled_from(temps + sorted(params)), max_size=1))
    return RandomProgram(program, feeds, params, list(dict.fromkeys(acts + extra)) or sorted(params)[:1])


@settings(max_examples=200)
@given(st.one_of(add_act_chains(), runnable_programs(devices=("", "cpu", "cpu:1"), max_ops=12)))
def test_fusing_programs_with_overwritten_values_and_devices_changes_nothing(rp: RandomProgram) -> None:
    fused, report = run(rp.program, [Fuse(keep=(*rp.feeds, *rp.targets))])
    event(f"rewrites: {sum(len(r.details['fused']) for r in report)}")
    with bir.Executor(build_strategy=unfused()) as exe:
        assert_same_results(rp.run(fused, exe), rp.run(executor=exe))
