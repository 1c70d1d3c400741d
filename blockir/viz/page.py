"""The page: the model as JSON inside one HTML file with its script and style, nothing fetched.

``static/page.html`` is the template; ``static/viz.css`` and ``static/viz.js``
go in verbatim and the model goes in a ``<script type="application/json">``
element (``<`` escaped, so no text in the model can end it early).

:func:`write` refuses, before any pass runs, a page whose directory does not
exist (it creates none, as ``blockir viz -o`` does not) and writes the page
atomically.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from blockir.ir import Program
from blockir.ir.proto_io import atomic_write, check_output_file
from blockir.passes.base import Pass
from blockir.passes.manager import PassReport
from blockir.viz.model import Collected, build, collect
from blockir.viz.trace import load_trace

__all__ = ["page_data", "render", "write"]

DEFAULT_PIPELINE = "fuse,default-device-pipeline"  # what the executor applies (with the names it keeps)
_PLACEHOLDER = re.compile(r"/\*VIZ_CSS\*/|/\*VIZ_JS\*/|VIZ_DATA|VIZ_TITLE")


def page_data(
    program: Program,
    pipeline: str | Sequence[Pass] = DEFAULT_PIPELINE,
    *,
    trace: str | os.PathLike[str] | None = None,
    title: str = "program",
) -> tuple[dict[str, Any], Collected]:
    """The page's data model of ``pipeline`` run on ``program`` (and what was collected to make it).

    ``trace`` names a Chrome trace of a run (``Executor.run(trace=...)``) to
    link to the ops; a :class:`~blockir.viz.TraceError` if it is not one, or of
    another program. A pass that raises does not: its error is in the model
    (``failure``) and in the returned :class:`~blockir.viz.model.Collected`.
    """
    spans = None if trace is None else load_trace(trace)
    collected = collect(program, pipeline)
    return build(collected, title, spans), collected


def render(data: dict[str, Any]) -> str:
    """The HTML page showing ``data``."""
    static = resources.files("blockir.viz") / "static"
    text = json.dumps(data, separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    parts = {
        "/*VIZ_CSS*/": (static / "viz.css").read_text(encoding="utf-8"),
        "/*VIZ_JS*/": (static / "viz.js").read_text(encoding="utf-8"),
        "VIZ_DATA": text,
        "VIZ_TITLE": _escape(f"{data['title']}: {data['pipeline'] or '(empty pipeline)'}"),
    }
    template = (static / "page.html").read_text(encoding="utf-8")  # one pass: inserted text is not rescanned
    return _PLACEHOLDER.sub(lambda m: parts[m.group()], template)


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def write(
    path: str | os.PathLike[str],
    program: Program,
    pipeline: str | Sequence[Pass] = DEFAULT_PIPELINE,
    *,
    trace: str | os.PathLike[str] | None = None,
    title: str = "program",
) -> PassReport:
    """Write the page of ``pipeline`` run on ``program`` to ``path`` (atomically); return the pass report.

    ``path``'s directory must exist: a :class:`~blockir.errors.BlockirError`
    naming it, before any pass runs, if it does not (or ``path`` is a
    directory). When a pass raises, the page is still written (the failing pass
    is its last step) and then its :class:`~blockir.errors.PassError` is raised.
    """
    check_output_file(path)
    data, collected = page_data(program, pipeline, trace=trace, title=title)
    atomic_write(path, render(data).encode(), make_parents=False)
    if collected.error is not None:
        raise collected.error
    return PassReport(collected.pipeline, collected.records)
