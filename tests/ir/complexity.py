"""Complexity tests that hold on a loaded machine: doubling the input must cost less than 3 times as much.

:func:`assert_linear` measures process CPU time (not wall time: other processes and threads waiting do not
count), the least of 3 runs (a run slowed down by the machine is not the one kept), on an input large enough
to take at least 0.2 s (so that the timer's grain and constant costs do not decide), and on one twice as
large, the runs on the two alternating. Linear work costs twice as much; quadratic work four times: the bound
of 3 tells them apart with room for noise either way. The garbage collector is off while the work runs
(:func:`_timed` says why).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

RUNS = 3
AT_LEAST = 0.2  # seconds of CPU the smaller input must take
RATIO = 3.0
RETRIES = 3  # rounds of RUNS pairs at most: quadratic work fails every round, a slow spell of the process not


def _timed(work: Callable[[], object]) -> float:
    """The process CPU time of one call of ``work``, after a garbage collection and with the collector off while it
    runs: the collector's full passes traverse the whole heap of the test process (what earlier tests left,
    pytest's own), so what they add depends on more than the work at hand."""
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        work()
        return time.process_time() - start
    finally:
        gc.enable()


def cpu_seconds(work: Callable[[], object], runs: int = RUNS) -> float:
    """The least process CPU time of ``runs`` calls of ``work`` (:func:`_timed`)."""
    return min(_timed(work) for _ in range(runs))


def assert_linear(make: Callable[[int], Callable[[], object]], n: int, what: str, limit: int = 1 << 22) -> None:
    """``make(n)`` prepares an input of size ``n`` (untimed) and returns the work to time on it (each call doing
    all of it again). ``n`` doubles until the work takes :data:`AT_LEAST`; then the work on ``n`` and on ``2 * n``
    is timed :data:`RUNS` times each, alternately (so that both see the machine as it is), and the least time on
    ``2 * n`` must be less than :data:`RATIO` times the least on ``n``; when it is not, up to :data:`RETRIES` - 1
    more rounds of pairs are timed and the least times over all of them decide (in the full suite's process, a
    heap grown by earlier tests made one round of an otherwise linear test measure 3.7x)."""
    while _timed(work := make(n)) < AT_LEAST:
        if n >= limit:
            raise AssertionError(f"{what}: too fast to measure at n={n} (raise n)")
        n *= 2
    double = make(2 * n)
    times: list[tuple[float, float]] = []
    for _ in range(RETRIES):  # a ratio over the bound is measured again (RUNS more pairs) before it fails
        times += [(_timed(work), _timed(double)) for _ in range(RUNS)]
        small, large = min(t for t, _ in times), min(t for _, t in times)
        if large < RATIO * small:
            return
    assert large < RATIO * small, (
        f"{what}: {small:.3f} s at n={n}, {large:.3f} s at n={2 * n} ({large / small:.1f}x): not linear"
    )
