"""Reading a run's Chrome trace for the page, and refusing one of another program.

:func:`load_trace` reads the trace-event JSON ``Executor.run(trace=...)`` writes
(:mod:`blockir.runtime.trace`): one lane per thread (a stream, named by its
``thread_name`` metadata), one span per complete event (``ph: "X"``) whose
``args.id`` is an op id. :func:`match_trace` decides which kept program the
run was of:

- the digest of the program the run executed (``otherData.blockir.compiled``)
  is one of the kept programs' digests: the spans link to that state's ops;
- else the digest of the program the run was given (``program``) is the
  page's input: the run compiled it with another pipeline; the spans link to
  the last state's ops of the same id and type, the others stay unlinked;
- else, with digests, the trace is of another program and is refused;
- a trace without digests links to the last state in which every op it names
  (id and type) exists, and is refused when there is none.

The times of the complete events (``ts``, ``dur``: microseconds) must be
numbers from 0 to :data:`MAX_TRACE_TIME` (2**53, about 285 years: the largest
integer a double, and so the page's JavaScript, holds exactly). A trace with a
time that is not a number (a string, ``true``), not finite (``NaN``,
``Infinity``: Python's ``json`` reads those literals), negative or larger is
refused, naming the event: the page could not show it.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from blockir.errors import BlockirError
from blockir.ir import Program
from blockir.ir.proto_io import open_regular

__all__ = ["MAX_TRACE_BYTES", "MAX_TRACE_TIME", "Trace", "TraceError", "load_trace", "match_trace"]

MAX_TRACE_BYTES = 256 << 20
MAX_TRACE_TIME = 1 << 53  # microseconds (about 285 years); the largest integer a double holds exactly


class TraceError(BlockirError):
    """A trace file that is not a Chrome trace of op events, or a trace of another program."""


@dataclass(frozen=True)
class Trace:
    """The op spans of one trace file."""

    name: str  # the file's name, as the page shows it
    ran: dict[str, str]  # otherData.blockir: program, compiled, pipeline ({} when absent)
    lanes: list[str]  # lane index -> thread (stream) name
    spans: list[tuple[int, float, float, int, str]]  # (lane, start us, duration us, op id, event name)


def load_trace(path: str | os.PathLike[str]) -> Trace:
    """The spans of the Chrome trace at ``path``; a :class:`TraceError` naming the file if it is not one."""
    path = Path(path)
    where = f"trace {path}"
    try:
        with open_regular(path) as f:
            data = f.read(MAX_TRACE_BYTES + 1)
    except OSError as e:
        raise TraceError(f"{where}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_TRACE_BYTES:
        raise TraceError(f"{where}: larger than {MAX_TRACE_BYTES >> 20} MiB")
    try:
        doc = json.loads(data)
    except ValueError as e:  # bad UTF-8, bad JSON, and an integer of more digits than Python converts
        raise TraceError(f"{where}: not JSON ({e})") from None
    except RecursionError:
        raise TraceError(f"{where}: not a Chrome trace (its JSON is nested too deeply to read)") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TraceError(f"{where}: not a Chrome trace (a JSON object with a 'traceEvents' list, or a list of events)")
    other = doc.get("otherData", {}) if isinstance(doc, dict) else {}
    ran = other.get("blockir", {}) if isinstance(other, dict) else {}
    if not isinstance(ran, dict) or not all(isinstance(v, str) for v in ran.values()):
        raise TraceError(f"{where}: otherData.blockir is not an object of strings")
    names: dict[tuple[Any, Any], str] = {}
    complete = []
    for n, event in enumerate(events):
        if not isinstance(event, dict) or not isinstance(event.get("ph"), str):
            raise TraceError(f"{where}: event {n} is not a trace event (an object with a 'ph' phase)")
        thread = (_key(event.get("pid")), _key(event.get("tid")))
        args = event.get("args")
        if event["ph"] == "M" and event.get("name") == "thread_name":
            names[thread] = str(args.get("name", "")) if isinstance(args, dict) else ""
        elif event["ph"] == "X":
            op = args.get("id") if isinstance(args, dict) else None
            what = f"{where}: event {n} ({_short(repr(event.get('name')))})"
            ts, dur = _time(event, "ts", what), _time(event, "dur", what)
            if isinstance(op, int) and not isinstance(op, bool):
                complete.append((thread, float(ts), float(dur), op, str(event.get("name", ""))))
    if not complete:
        raise TraceError(f"{where}: has no op events (complete events 'ph: X' with an op id in args.id)")
    lanes: dict[tuple[Any, Any], int] = {}
    for thread in [*names, *(c[0] for c in complete)]:
        lanes.setdefault(thread, len(lanes))
    start = min(c[1] for c in complete)
    spans = [(lanes[t], round(ts - start, 3), round(dur, 3), op, name) for t, ts, dur, op, name in complete]
    labels = [names.get(t) or f"pid {t[0]} / tid {t[1]}" for t in lanes]
    return Trace(path.name, {k: str(v) for k, v in ran.items()}, labels, spans)


def _time(event: dict[str, Any], key: str, what: str) -> float:
    """The time ``event[key]`` (``dur`` is 0 when absent); a :class:`TraceError` naming the event if it is not one."""
    if key not in event:
        if key == "dur":
            return 0.0
        raise TraceError(f"{what} has no {key!r} (its start, in microseconds)")
    value = event[key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TraceError(f"{what} has {key!r} {_shown(value)}: not a number")
    if not 0 <= value <= MAX_TRACE_TIME:  # False for NaN too; compared before float(), which a huge int overflows
        raise TraceError(
            f"{what} has {key!r} {_shown(value)}: a time must be a finite number of microseconds "
            f"from 0 to 2**53 (about 285 years)"
        )
    return float(value)


def _shown(value: Any) -> str:
    """``value`` as the trace's JSON spells it (``NaN``, ``Infinity``), at most 40 characters."""
    if isinstance(value, float) and not math.isfinite(value):
        text = "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    else:
        try:
            text = json.dumps(value, ensure_ascii=True)
        except (TypeError, ValueError):  # not from JSON; nothing json.loads makes gets here
            text = repr(value)
    return _short(text)


def _short(text: str) -> str:
    return text if len(text) <= 40 else f"{text[:37]}..."


def _key(value: Any) -> Any:
    """A thread's ``pid`` or ``tid`` as a key: a list or object (which cannot be one) as its text."""
    return value if isinstance(value, str | int | float | None) else _shown(value)


def _types(program: Program) -> dict[int, str]:
    return {op.id: op.type for op in program.ops()}


def match_trace(trace: Trace, programs: Sequence[Program], digests: Sequence[str | None]) -> dict[str, Any]:
    """The model's ``trace``: the spans linked to the ops of the kept program the run was of (module docstring).

    ``programs``/``digests`` are the kept programs and their digests. A
    :class:`TraceError` if the trace is of another program.
    """
    compiled, given = trace.ran.get("compiled"), trace.ran.get("program")
    if compiled is not None and compiled in digests:
        state, how = max(k for k, d in enumerate(digests) if d == compiled), "compiled"
    elif given is not None and given == digests[0]:
        state, how = len(programs) - 1, "program"
    elif compiled is not None or given is not None:
        raise TraceError(
            f"trace {trace.name} is of another program: it ran sha256 {(compiled or '?')[:16]} (made from "
            f"{(given or '?')[:16]}), but this program is {str(digests[0])[:16]} and its passes make "
            f"{', '.join(str(d)[:16] for d in digests[1:]) or 'nothing else'}"
        )
    else:
        state, how = _state_naming(trace, programs), "ops"
    types = _types(programs[state])
    linked: list[tuple[int, float, float, int, str]] = [
        (lane, ts, dur, op if types.get(op) == name else -1, name) for lane, ts, dur, op, name in trace.spans
    ]
    op_time: dict[int, float] = {}
    for _, _, dur, op, _ in linked:
        if op >= 0:
            op_time[op] = round(op_time.get(op, 0.0) + dur, 3)
    return {
        "file": trace.name,
        "ran": trace.ran,
        "state": state,
        "match": how,
        "lanes": trace.lanes,
        "spans": [list(span) for span in linked],
        "op_time": {str(k): v for k, v in op_time.items()},
        "end": max(ts + dur for _, ts, dur, _, _ in trace.spans),
        "unlinked": sum(1 for s in linked if s[3] < 0),
    }


def _state_naming(trace: Trace, programs: Sequence[Program]) -> int:
    """The last state whose ops include every op the trace names (id and type)."""
    named = {(op, name) for _, _, _, op, name in trace.spans}
    for k in range(len(programs) - 1, -1, -1):
        types = _types(programs[k])
        if all(types.get(op) == name for op, name in named):
            return k
    types = _types(programs[-1])
    missing = sorted((op, name) for op, name in named if types.get(op) != name)
    shown = ", ".join(f"id {op} ({name})" for op, name in missing[:5])
    more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
    raise TraceError(f"trace {trace.name} names ops that are not in the program: {shown}{more}")
