"""Test cases of ``increment`` (blockir.ops.control_flow), as data; the ops of loops, conditionals and tensor
arrays take sub-blocks or tensor arrays the table harness does not build, so they are behaviour-tested."""

from __future__ import annotations

import numpy as np

from tests.ops.harness import Case

CASES: dict[str, list[Case]] = {
    "increment": [
        Case({"X": np.array([3], "int64")}, {}, {"Out": np.array([4], "int64")}, name="int64"),
        Case({"X": np.array([2], "int32")}, {"step": -2.0}, {"Out": np.array([0], "int32")}, name="int32_down"),
        Case({"X": np.array([0.5], "float32")}, {"step": 0.25}, {"Out": np.array([0.75], "float32")}, name="float32"),
    ],
}

_BEHAVIOUR = "tests/ops/test_control_flow_ops.py"
BEHAVIOUR_TESTED: dict[str, str] = {
    op: _BEHAVIOUR
    for op in (
        "write_to_array",
        "read_from_array",
        "lod_array_length",
        "tensor_array_to_tensor",
        "tensor_array_to_tensor_grad",
        "select_input",
        "select_output",
        "while",
        "while_grad",
        "conditional_block",
        "conditional_block_grad",
    )
}
