"""Running a model of the Paddle zoo (``zoo.py``, saved by ``paddle_side.py zoo``) in blockir, against the
outputs Paddle computed from the same files."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import blockir as bir
from blockir.errors import BlockirError

TOLERANCE = 1e-5  # max |blockir - Paddle| / max |Paddle|, per output

# The zoo's models blockir refuses at load, and the op types it lacks for each (outside the op set
# docs/paddle.md describes).
REFUSED: dict[str, set[str]] = {
    "unfold": {"unfold"},
    "lrn": {"lrn"},
    "kl_div_loss": {"kldiv_loss"},
}


@dataclass
class Outcome:
    """What blockir made of one saved model: ``refused`` (the op types it lacks) or its outputs' differences."""

    name: str
    refused: set[str] = field(default_factory=set)
    differences: list[float] = field(default_factory=list)
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    outputs: list[np.ndarray] = field(default_factory=list)

    @property
    def matches(self) -> bool:
        return not self.refused and bool(self.differences) and max(self.differences) <= TOLERANCE


def relative(got: np.ndarray, want: np.ndarray) -> float:
    """max |got - want| / max |want| (the shapes and dtypes must agree: else infinity)."""
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    if want.size == 0:
        return 0.0
    scale = float(np.abs(want.astype(np.float64)).max()) or 1.0
    return float(np.abs(got.astype(np.float64) - want.astype(np.float64)).max()) / scale


def run_saved(directory: Path, name: str) -> Outcome:
    """Load DIRECTORY/NAME.pdmodel in blockir and run it on the inputs of NAME.npz; a load that refuses the
    program's ops gives an outcome naming them (any other error is raised)."""
    saved = np.load(directory / f"{name}.npz")
    outcome = Outcome(name, inputs={k[3:]: saved[k] for k in saved.files if k.startswith("in:")})
    want = [saved[f"out:{i}"] for i in range(sum(k.startswith("out:") for k in saved.files))]
    with bir.Executor("cpu") as exe:
        scope = bir.Scope()
        try:
            program, feeds, fetches = bir.io.load_inference_model(directory / name, exe, scope=scope)
        except BlockirError as e:
            lacks = re.search(r"the program has ops blockir lacks: (.*)$", str(e))
            if lacks is None:
                raise
            outcome.refused = set(re.findall(r"(\w+) \(\d+\)", lacks.group(1)))
            return outcome
        got = exe.run(program, feed={f: outcome.inputs[f] for f in feeds}, fetch_list=fetches, scope=scope)
    outcome.outputs = [np.asarray(g) for g in got]
    outcome.differences = [relative(g, w) for g, w in zip(outcome.outputs, want)]
    if len(outcome.outputs) != len(want):
        outcome.differences.append(float("inf"))
    return outcome
