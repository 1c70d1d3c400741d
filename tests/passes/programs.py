"""Small random programs that run, for property tests of passes (hypothesis).

:func:`runnable_programs` draws a :class:`RandomProgram`: a global block with
fed inputs ``x0..``, parameters ``p0..`` (persistable, given initial values)
and a learning rate ``lr``, then 1..``max_ops`` ops chosen among unary and
binary elementwise ops, ``mul``/``matmul`` and in-place ``sgd`` updates of a
parameter, every value a float32 [2, 2]. An op reads any value defined so
far; its output is a new temporary or, sometimes, an existing temporary
(overwriting it, possibly one it reads: write-after-read and write-after-write
hazards). With ``devices`` every op gets an ``op_device`` drawn from them
(``""`` leaves it unplaced). :meth:`RandomProgram.run` runs a program on a
fresh scope holding the initial parameters and returns what it fetches and the
final parameters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import blockir as bir
from blockir.ir import Program

# A fixed three-op program: h and y from x, and z from x alone.
CHAIN = """program version=0
block 0 parent=-1 {
  var %x : lod_tensor<float32>[2, 2] need_check_feed
  var %h : lod_tensor<float32>[2, 2]
  var %y : lod_tensor<float32>[2, 2]
  var %z : lod_tensor<float32>[2, 2]
  %h = relu(X=%x)
  %y = tanh(X=%h)
  %z = sigmoid(X=%x)
}"""
SHAPE = (2, 2)


@dataclass
class Network:
    """A training program drawn for a property test: its programs, a batch to feed and what to fetch."""

    main: Program
    startup: Program
    feed: dict[str, np.ndarray]
    fetch: list[str]


UNARY = ("relu", "tanh", "sigmoid", "scale", "square")
BINARY = ("elementwise_add", "elementwise_sub", "elementwise_mul", "mul", "matmul")
LEARNING_RATE = np.array([0.1], "float32")


@dataclass
class RandomProgram:
    program: Program
    feeds: dict[str, np.ndarray]
    params: dict[str, np.ndarray]
    targets: list[str]

    def run(
        self, program: Program | None = None, executor: bir.Executor | None = None, trace: str | None = None
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """The fetched targets and the final parameters of running ``program`` (default: this one) with
        ``executor`` (default: a new one on the host), writing a trace when asked."""
        scope = bir.Scope()
        for name, value in self.params.items():
            scope.set(name, value.copy())
        scope.set("lr", LEARNING_RATE.copy())
        with np.errstate(all="ignore"):  # long chains may overflow; the same way in every order
            exe = bir.Executor("cpu") if executor is None else executor
            fetched = exe.run(
                self.program if program is None else program,
                feed=self.feeds,
                fetch_list=self.targets,
                scope=scope,
                trace=trace,
            )
        return fetched, {name: np.asarray(scope.get(name)) for name in self.params}


def assert_same_results(
    a: tuple[list[np.ndarray], dict[str, np.ndarray]],
    b: tuple[list[np.ndarray], dict[str, np.ndarray]],
    params: bool = True,
) -> None:
    """Equal fetched values (and final parameters), bit for bit, NaN equal to NaN."""
    assert len(a[0]) == len(b[0])
    for x, y in zip(a[0], b[0]):
        np.testing.assert_array_equal(x, y)
    if params:
        assert a[1].keys() == b[1].keys()
        for name in a[1]:
            np.testing.assert_array_equal(a[1][name], b[1][name], err_msg=name)


@st.composite
def runnable_programs(draw: st.DrawFn, devices: Sequence[str] = (), max_ops: int = 8) -> RandomProgram:
    program = Program()
    block = program.global_block()
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    feeds = {f"x{i}": rng.uniform(-1, 1, SHAPE).astype("float32") for i in range(draw(st.integers(1, 3)))}
    params = {f"p{i}": rng.uniform(-1, 1, SHAPE).astype("float32") for i in range(draw(st.integers(0, 2)))}
    for name in feeds:
        block.create_var(name, shape=SHAPE, dtype="float32", need_check_feed=True)
    for name in params:
        block.create_var(name, shape=SHAPE, dtype="float32", persistable=True, is_parameter=True)
    block.create_var("lr", shape=(1,), dtype="float32", persistable=True)
    readable = [*feeds, *params]
    temps: list[str] = []
    kinds = UNARY + BINARY + (("sgd",) * 3 if params else ())
    for i in range(draw(st.integers(1, max_ops))):
        kind = draw(st.sampled_from(kinds))
        if kind == "sgd":
            param = draw(st.sampled_from(sorted(params)))
            op = block.append_op(
                "sgd",
                {"Param": param, "Grad": draw(st.sampled_from(readable)), "LearningRate": "lr"},
                {"ParamOut": param},
            )
        else:
            inputs = {slot: draw(st.sampled_from(readable)) for slot in (("X",) if kind in UNARY else ("X", "Y"))}
            if temps and draw(st.integers(0, 3)) == 0:
                out = draw(st.sampled_from(temps))
            else:
                out = f"t{i}"
                block.create_var(out, shape=SHAPE, dtype="float32")
                temps.append(out)
                readable.append(out)
            attrs = {"scale": draw(st.sampled_from([0.5, -1.0, 2.0])), "bias": 0.25} if kind == "scale" else {}
            op = block.append_op(kind, inputs, {"Out": out}, attrs)
        if devices:
            device = draw(st.sampled_from(list(devices)))
            if device:
                op.set_attr("op_device", device)
    targets = draw(st.lists(st.sampled_from(temps + sorted(params)), min_size=1, max_size=3, unique=True))
    return RandomProgram(program, feeds, params, targets)
