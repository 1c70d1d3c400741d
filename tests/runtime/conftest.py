import numpy as np
import pytest

import blockir as bir
from tests.runtime import schemas


@pytest.fixture(scope="module", autouse=True)
def _rt(rt_ops: None) -> None:
    """Every runtime test module may use the ``rt_*`` ops."""


def linear_program(optimize: bool = True) -> bir.Program:
    """out = x @ w + b, then (optionally) rt_sgd updates w with the fed gradient gw."""
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(-1, 3), dtype="float32", need_check_feed=True, stop_gradient=True)
    block.create_var("w", shape=(3, 2), dtype="float32", persistable=True, is_parameter=True)
    block.create_var("b", shape=(2,), dtype="float32", persistable=True, is_parameter=True)
    block.create_var("h", shape=(-1, 2), dtype="float32")
    block.create_var("out", shape=(-1, 2), dtype="float32")
    block.append_op("rt_matmul", {"X": "x", "Y": "w"}, {"Out": "h"})
    block.append_op("rt_add", {"X": "h", "Y": "b"}, {"Out": "out"})
    if optimize:
        block.create_var("gw", shape=(3, 2), dtype="float32", need_check_feed=True)
        block.create_var("lr", shape=(1,), dtype="float32", persistable=True)
        block.append_op(
            "rt_sgd",
            {"Param": "w", "Grad": "gw", "LearningRate": "lr"},
            {"ParamOut": "w"},
            {"op_role": schemas.OPTIMIZE},
        )
    return program


def init_linear(scope: bir.Scope, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    values = {
        "w": rng.normal(size=(3, 2)).astype("float32"),
        "b": rng.normal(size=2).astype("float32"),
        "lr": np.array([0.5], dtype="float32"),
    }
    for name, value in values.items():
        scope.set(name, value.copy())
    return values


def chain_program(n: int, probe: bool = False) -> bir.Program:
    """x -> rt_scale (n times) [-> rt_probe] -> y."""
    program = bir.Program()
    block = program.global_block()
    block.create_var("x", shape=(-1,), dtype="float32")
    prev = "x"
    for i in range(n):
        block.create_var(f"t{i}", shape=(-1,), dtype="float32")
        block.append_op("rt_scale", {"X": prev}, {"Out": f"t{i}"}, {"scale": 2.0, "bias": 1.0})
        prev = f"t{i}"
    if probe:
        block.create_var("y", shape=(-1,), dtype="float32")
        block.append_op("rt_probe", {"X": prev}, {"Out": "y"})
    return program
