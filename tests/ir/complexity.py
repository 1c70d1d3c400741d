"""Complexity tests that hold on a loaded machine: an input 4 times as large must cost less than 8 times as much.

:func:`assert_linear` measures process CPU time (not wall time: other processes and threads waiting do not
count), the least of 3 runs (a run slowed down by the machine is not the one kept), on an input large enough
to take at least 0.05 s (so that the timer's grain and constant costs do not decide), and on one 4 times as
large, the runs on the two alternating. Linear work costs 4 times as much, quadratic work 16 times: the bound
of 8 leaves a factor 2 for noise either way (one round of doubling in the full suite once measured 3.7x for
linear work, 1.85 times its 2x; an input 4 times as large falling out of the caches costs up to 1.5 times as much
per op), and fails work whose quadratic part costs half its linear part on the smaller input. The garbage
collector is off while the work runs (:func:`_timed` says why), and the inputs are left out of its collections
(:func:`_made`).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

RUNS = 3
AT_LEAST = 0.05  # seconds of CPU the smaller input must take
FACTOR = 4  # the larger input is this many times the smaller
RATIO = 8.0
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


def _made(make: Callable[[int], Callable[[], object]], n: int) -> Callable[[], object]:
    """``make(n)``, what it built then frozen (:func:`gc.freeze`): the collections before each run leave it out,
    costing only what the runs left, not the inputs' size."""
    work = make(n)
    gc.collect()
    gc.freeze()
    return work


def assert_linear(make: Callable[[int], Callable[[], object]], n: int, what: str, limit: int = 1 << 22) -> None:
    """``make(n)`` prepares an input of size ``n`` (untimed) and returns the work to time on it (each call doing
    all of it again). ``n`` doubles until the work takes :data:`AT_LEAST`; then the work on ``n`` and on
    ``FACTOR * n`` is timed :data:`RUNS` times each, alternately (so that both see the machine as it is), and the
    least time on ``FACTOR * n`` must be less than :data:`RATIO` times the least on ``n``; when it is not, up to
    :data:`RETRIES` - 1 more rounds of pairs are timed and the least times over all of them decide (in the full
    suite's process, a heap grown by earlier tests made one round of an otherwise linear test measure 1.85 times
    its ratio). What exists before is frozen too, until the end (:func:`_made`)."""
    gc.collect()
    gc.freeze()
    try:
        while _timed(work := _made(make, n)) < AT_LEAST:
            if n >= limit:
                raise AssertionError(f"{what}: too fast to measure at n={n} (raise n)")
            n *= 2
        large = _made(make, FACTOR * n)
        times: list[tuple[float, float]] = []
        for _ in range(RETRIES):  # a ratio over the bound is measured again (RUNS more pairs) before it fails
            times += [(_timed(work), _timed(large)) for _ in range(RUNS)]
            small, big = min(t for t, _ in times), min(t for _, t in times)
            if big < RATIO * small:
                return
    finally:
        gc.unfreeze()
    assert big < RATIO * small, (
        f"{what}: {small:.3f} s at n={n}, {big:.3f} s at n={FACTOR * n} ({big / small:.1f}x): not linear"
    )
