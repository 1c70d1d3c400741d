"""``bir.layers.auc``: Fluid's streaming AUC, against the exact AUC over several batches.

The exact AUC is the probability that a positive scores above a negative (ties count half): what
scikit-learn's ``roc_auc_score`` computes. (scikit-learn itself is not imported here: its import
leaves a loky semaphore in /dev/shm in the async executor's forkserver, which that executor's tests
count.)
"""

from __future__ import annotations

import numpy as np
import pytest

import blockir as bir
from blockir.errors import ShapeError


def roc_auc_score(label: np.ndarray, score: np.ndarray) -> float:
    """P(a positive scores above a negative), ties counting half."""
    pos, neg = score[label == 1], score[label == 0]
    above = (pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()
    return float(above / (len(pos) * len(neg)))


def build(slide_steps: int = 1, thresholds: int = 4095) -> tuple[bir.Program, bir.Program, tuple]:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), bir.unique_name.guard():
        p = bir.layers.data("p", [-1, 2])
        y = bir.layers.data("y", [-1, 1], dtype="int64")
        result = bir.layers.auc(p, y, num_thresholds=thresholds, slide_steps=slide_steps)
    return main, startup, result


def batches(seed: int, n: int = 4, size: int = 200) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        p1 = rng.random(size).astype("float32")
        y = (rng.random(size) < p1 * 0.8 + 0.1).astype("int64").reshape(-1, 1)
        out.append((np.stack([1 - p1, p1], axis=1), y))
    return out


def test_the_global_auc_streams_over_batches_and_the_batch_auc_covers_the_window() -> None:
    main, startup, (auc, batch_auc, stats) = build(slide_steps=2)
    scope = bir.Scope()
    with bir.Executor() as exe:
        exe.run(startup, scope=scope)
        data = batches(0)
        for k, (p, y) in enumerate(data):
            got, got_batch = exe.run(main, feed={"p": p, "y": y}, fetch_list=[auc, batch_auc], scope=scope)
            seen = data[: k + 1]
            everything = roc_auc_score(
                np.vstack([b[1] for b in seen]).ravel(), np.concatenate([b[0][:, 1] for b in seen])
            )
            window = seen[-2:]
            recent = roc_auc_score(
                np.vstack([b[1] for b in window]).ravel(), np.concatenate([b[0][:, 1] for b in window])
            )
            assert got.shape == (1,) and abs(got[0] - everything) < 2e-3  # 4,096 buckets: ties inside a bucket
            assert abs(got_batch[0] - recent) < 2e-3
    names = [v.name for v in stats]
    assert names == ["auc_0.batch_stat_pos", "auc_0.batch_stat_neg", "auc_0.stat_pos", "auc_0.stat_neg"]
    assert all(v.persistable for v in stats)
    assert scope.get("auc_0.stat_pos").sum() + scope.get("auc_0.stat_neg").sum() == 4 * 200


def test_running_the_startup_program_again_resets_the_counts() -> None:
    main, startup, (auc, _, _) = build()
    scope = bir.Scope()
    with bir.Executor() as exe:
        exe.run(startup, scope=scope)
        (p, y), (q, z) = batches(1, n=2)
        exe.run(main, feed={"p": p, "y": y}, fetch_list=[auc], scope=scope)
        exe.run(startup, scope=scope)
        (got,) = exe.run(main, feed={"p": q, "y": z}, fetch_list=[auc], scope=scope)
    assert abs(got[0] - roc_auc_score(z.ravel(), q[:, 1])) < 2e-3


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"curve": "PR"}, "curve must be 'ROC'"),
        ({"num_thresholds": 0}, "num_thresholds must be an int >= 1"),
        ({"slide_steps": 0}, "slide_steps must be an int >= 1"),
        ({"topk": 2}, "topk must be 1"),
    ],
)
def test_bad_arguments_are_named(kwargs: dict, message: str) -> None:
    main, startup = bir.Program(), bir.Program()
    with bir.program_guard(main, startup), pytest.raises(ShapeError, match=message):
        bir.layers.auc(bir.layers.data("p", [-1, 2]), bir.layers.data("y", [-1, 1], dtype="int64"), **kwargs)
