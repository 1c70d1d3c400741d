"""Chrome trace-event JSON of a run, for Perfetto (ui.perfetto.dev) and chrome://tracing.

One process per device (``pid``, named by a ``process_name`` metadata event),
one thread per stream (``tid``, named ``DEVICE/STREAM``), one complete event
(``ph: "X"``) per op with its op id, text and the thread that ran it in
``args``, and a flow (``ph: "s"`` then ``"f"``) from the op that wrote a value
to each ``memcpy`` that copies it to another device. The top-level
``otherData`` names what ran: ``{"blockir": {"program": DIGEST, "compiled":
DIGEST, "pipeline": PIPELINE}}``, the digests (:meth:`Program.digest`) of the
program given to the executor and of the program its pipeline made of it (the
one whose op ids the events carry). Times are microseconds
from the start of the run. On an asynchronous (CUDA) stream an op's event spans
its launch, not its execution on the device, unless the tracer synchronizes (a
calibration's: :mod:`blockir.runtime.calibration`).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any

from blockir.runtime.device import get_device
from blockir.runtime.scheduler import Step

__all__ = ["Tracer"]


class Tracer:
    """Collects the op events of one run of a plan (thread-safe); :meth:`write` saves them."""

    def __init__(
        self,
        steps: tuple[Step, ...],
        copies_from: tuple[int | None, ...],
        ran: dict[str, str] | None = None,
        synchronize: bool = False,
    ) -> None:
        self.steps = steps
        self.copies_from = copies_from
        self.ran = ran or {}  # digests of the programs the run came from (the module docstring)
        # whether each op's event ends when its work on the device does (its device synchronized after it: what a
        # calibration measures), not when its launch returns
        self.synchronize = synchronize
        self.start = time.perf_counter_ns()
        self.ops: list[tuple[int, str, str, int, int]] = []  # (step, stream, thread, start ns, end ns)
        self._lock = threading.Lock()

    def op(self, step: int, stream: str, thread: str, start: int, end: int) -> None:
        """Record that ``step`` ran on ``stream`` in ``thread`` from ``start`` to ``end`` (perf_counter_ns)."""
        with self._lock:
            self.ops.append((step, stream, thread, start, end))

    def timed(self, steps: tuple[Step, ...]) -> tuple[Step, ...]:
        """``steps`` whose kernels record their run (this plan's steps, in order)."""
        return tuple(step._replace(kernel=self._timed(j, step)) for j, step in enumerate(steps))

    def _timed(self, j: int, step: Step) -> Any:
        kernel = step.kernel
        device = get_device(step.stream.rpartition("/")[0]) if self.synchronize else None

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter_ns()
            try:
                return kernel(*args, **kwargs)
            finally:
                if device is not None:
                    device.synchronize()
                self.op(j, step.stream, threading.current_thread().name, start, time.perf_counter_ns())

        return timed

    def events(self) -> list[dict[str, Any]]:
        """The trace events: metadata, one complete event per op, flows into copies."""
        streams = sorted({stream for _, stream, _, _, _ in self.ops}, key=_stream_order)
        devices = list(dict.fromkeys(s.rpartition("/")[0] for s in streams))
        pid = {d: k + 1 for k, d in enumerate(devices)}
        tid = {s: k + 1 for k, s in enumerate(streams)}
        events: list[dict[str, Any]] = []
        for d in devices:
            events.append({"ph": "M", "name": "process_name", "pid": pid[d], "tid": 0, "args": {"name": d}})
            events.append(
                {"ph": "M", "name": "process_sort_index", "pid": pid[d], "tid": 0, "args": {"sort_index": pid[d]}}
            )
        for s in streams:
            events.append(
                {"ph": "M", "name": "thread_name", "pid": pid[s.rpartition("/")[0]], "tid": tid[s], "args": {"name": s}}
            )
        where: dict[int, tuple[int, int, float, float]] = {}  # step -> (pid, tid, start us, end us)
        for j, stream, thread, start, end in sorted(self.ops, key=lambda o: o[3]):
            step = self.steps[j]
            ts, dur = (start - self.start) / 1e3, (end - start) / 1e3
            p, t = pid[stream.rpartition("/")[0]], tid[stream]
            where[j] = (p, t, ts, ts + dur)
            text = step.ctx.op_text
            name = text.split(" = ", 1)[-1].split("(", 1)[0]
            events.append(
                {
                    "ph": "X",
                    "name": name,
                    "cat": "op",
                    "pid": p,
                    "tid": t,
                    "ts": ts,
                    "dur": dur,
                    "args": {"id": step.op_id, "op": text, "thread": thread, "step": j},
                }
            )
        for j, src in enumerate(self.copies_from):
            if src is not None and j in where and src in where:
                sp, st, _, send = where[src]
                dp, dt, dstart, _ = where[j]
                events.append({"ph": "s", "name": "copy", "cat": "copy", "id": j, "pid": sp, "tid": st, "ts": send})
                events.append(
                    {"ph": "f", "bp": "e", "name": "copy", "cat": "copy", "id": j, "pid": dp, "tid": dt, "ts": dstart}
                )
        return events

    def write(self, path: str | os.PathLike[str]) -> None:
        """Save the trace as JSON (atomically: a temporary file renamed over ``path``)."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp")
        trace = {"traceEvents": self.events(), "displayTimeUnit": "ms", "otherData": {"blockir": self.ran}}
        tmp.write_text(json.dumps(trace))
        os.replace(tmp, path)


def _stream_order(stream: str) -> tuple[str, str]:
    device, _, name = stream.rpartition("/")
    return device, name
