"""The Paddle zoo (``zoo.py``) through blockir, with real Paddle (marker ``paddle``; ``docs/paddle.md``).

Paddle builds and saves every model of the zoo, with its outputs; each then loads in blockir and computes
Paddle's outputs (max |a - b| / max |b| per output at most 1e-5), and blockir's export of it computes them
again in Paddle. A model blockir does not cover yet is refused when it loads, naming its ops: exactly the ops
``REFUSED`` records for it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from tests.paddle.test_paddle import _paddle, paddle_python  # noqa: F401  (the fixture)
from tests.paddle.zoo_check import REFUSED, TOLERANCE, relative, run_saved

pytestmark = [pytest.mark.paddle, pytest.mark.timeout(2400)]  # Paddle builds ~170 models in one process


@pytest.fixture(scope="module")
def zoo(paddle_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:  # noqa: F811
    out = tmp_path_factory.mktemp("zoo")
    _paddle(paddle_python, "zoo", str(out), timeout=1800)
    return out


def test_every_zoo_model_matches_paddle_both_ways_or_is_refused_as_recorded(
    paddle_python: str,  # noqa: F811
    zoo: Path,
    tmp_path: Path,
) -> None:
    names = sorted({p.stem for p in zoo.glob("*.npz")} | {p.stem for p in zoo.glob("*.error")})
    assert len(names) > 100, names
    wrong = []
    for name in names:
        if (zoo / f"{name}.error").exists():
            wrong.append(f"{name}: Paddle did not build it: {(zoo / f'{name}.error').read_text().splitlines()[-1]}")
            continue
        outcome = run_saved(zoo, name)
        if outcome.refused or name in REFUSED:
            if outcome.refused != REFUSED.get(name, set()):
                wrong.append(f"{name}: refused {sorted(outcome.refused)}, recorded {sorted(REFUSED.get(name, ()))}")
            continue
        if not outcome.matches:
            wrong.append(f"{name}: differs from Paddle by {outcome.differences}")
            continue
        with bir.Executor("cpu") as exe:
            scope = bir.Scope()
            program, feeds, fetches = bir.io.load_inference_model(zoo / name, exe, scope=scope)
            bir.io.save_inference_model(
                tmp_path / name, feeds, fetches, exe, main_program=program, scope=scope, format="paddle"
            )
        np.savez(tmp_path / f"{name}.in.npz", **outcome.inputs)
        out = tmp_path / f"{name}.out.npz"
        _paddle(paddle_python, "run", str(tmp_path / name), str(tmp_path / f"{name}.in.npz"), str(out))
        again = np.load(out)
        back = [relative(again[f"out:{i}"], g) for i, g in enumerate(outcome.outputs)]
        if max(back) > TOLERANCE:
            wrong.append(f"{name}: blockir's export differs in Paddle by {back}")
    assert not wrong, "\n".join(wrong)
