"""An executor dropped without ``close`` (no ``with``) ends its worker threads, whether its runs failed or not."""

from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import blockir as bir
from blockir.errors import ExecutionError
from blockir.ir import Program


def two_devices() -> Program:
    """relu(x) on the host and lookup_table(w, ids) on cpu:1: a run uses worker threads for cpu:1's streams;
    ids out of w's range make the cpu:1 op fail."""
    program = Program()
    block = program.global_block()
    block.create_var("x", shape=(-1, 2), dtype="float32", need_check_feed=True)
    block.create_var("ids", shape=(-1, 1), dtype="int64", need_check_feed=True)
    block.create_var("w", shape=(4, 2), dtype="float32", persistable=True)
    block.create_var("a", shape=(-1, 2), dtype="float32")
    block.create_var("b", shape=(-1, 2), dtype="float32")
    block.append_op("relu", {"X": "x"}, {"Out": "a"}, {"op_device": "cpu"})
    block.append_op("lookup_table", {"W": "w", "Ids": "ids"}, {"Out": "b"}, {"op_device": "cpu:1"})
    return program


def _worker_threads() -> int:
    return sum(t.name.startswith("blockir-worker-") for t in threading.enumerate())


def _settled_worker_threads(expected: int, timeout: float = 10.0) -> int:
    """The number of worker threads once it is ``expected``, or when ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while _worker_threads() != expected and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.01)
    return _worker_threads()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fail", [False, True], ids=["succeeding", "failing"])
def test_executors_dropped_without_close_leave_no_worker_threads(fail):
    program = two_devices()
    x = np.ones((3, 2), "float32")
    ids = np.array([[7]] if fail else [[1]], "int64")
    before = _worker_threads()
    for _ in range(10):
        scope = bir.Scope()
        scope.set("w", np.arange(8, dtype="float32").reshape(4, 2))
        exe = bir.Executor("cpu")
        assert exe.plan(program, ["x", "ids"], ["a", "b"]).schedule.workers >= 1
        if fail:
            with pytest.raises(ExecutionError, match="lookup_table"):
                exe.run(program, feed={"x": x, "ids": ids}, fetch_list=["a", "b"], scope=scope)
        else:
            a, b = exe.run(program, feed={"x": x, "ids": ids}, fetch_list=["a", "b"], scope=scope)
            np.testing.assert_array_equal(a, x)
            np.testing.assert_array_equal(b, [[2, 3]])
        assert _worker_threads() > before  # the run used workers, which live as long as the executor
        del exe
    gc.collect()
    assert _settled_worker_threads(before) == before
