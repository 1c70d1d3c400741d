"""CPU seconds of processes and threads from ``/proc`` (Linux): what the parameter-server benchmarks count.

``cpu_seconds(pid)`` is a process's user + system time (``utime`` + ``stime`` of ``/proc/PID/stat``, all its
threads, in clock ticks: 10 ms on most kernels); ``descendants(pid)`` the processes started under ``pid``
(children, theirs, ...) from the ``ppid`` of every ``/proc/PID/stat``. A Ray cluster that ``ray.init`` starts
is such a tree: the GCS server, the raylet and Ray's Python daemons are children of the driver, the raylet's
worker processes (idle ones and actors) its children. :class:`Snapshot` takes the CPU seconds of a set of
processes at once, and the difference between two is the CPU they spent meanwhile; a process that ended
between the two is lost from it (its CPU went with it), one that started counts from zero.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

TICK = os.sysconf("SC_CLK_TCK")


def _stat(where: Path) -> tuple[str, list[str]] | None:
    """The name and the fields after it of ``where`` (a ``/proc/.../stat``); None if it is gone."""
    try:
        text = where.read_text()
    except OSError:  # ended meanwhile
        return None
    name, rest = text.split(" (", 1)[1].rsplit(")", 1)
    return name, rest.split()


def cpu_seconds(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of process ``pid`` (of its thread ``tid`` only, if given); 0 if it is gone."""
    found = _stat(Path(f"/proc/{pid}/stat") if tid is None else Path(f"/proc/{pid}/task/{tid}/stat"))
    if found is None:
        return 0.0
    fields = found[1]  # fields[0] is the state (field 3): utime and stime are fields 14 and 15
    return (int(fields[11]) + int(fields[12])) / TICK


def descendants(pid: int) -> dict[int, str]:
    """The processes under ``pid`` (not ``pid`` itself), by pid, with their names."""
    children: dict[int, list[int]] = {}
    names: dict[int, str] = {}
    for where in Path("/proc").glob("[0-9]*/stat"):
        found = _stat(where)
        if found is not None:
            child = int(where.parent.name)
            names[child] = found[0]
            children.setdefault(int(found[1][1]), []).append(child)
    under: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        under[child] = names[child]
        todo += children.get(child, [])
    return under


class Snapshot(NamedTuple):
    """The CPU seconds of some processes at one moment, by pid (with their names)."""

    seconds: dict[int, float]
    names: dict[int, str]

    @staticmethod
    def of(pids: dict[int, str]) -> Snapshot:
        return Snapshot({pid: cpu_seconds(pid) for pid in pids}, dict(pids))

    def since(self, before: Snapshot, leave_out: Iterable[int] = ()) -> float:
        """The CPU seconds the processes of this snapshot spent since ``before``, but those of ``leave_out``."""
        skip = set(leave_out)
        return sum(cpu - before.seconds.get(pid, 0.0) for pid, cpu in self.seconds.items() if pid not in skip)
