"""The pass-debugging visualizer: one self-contained HTML page of what every pass of a pipeline did.

``write("passes.html", program, "place,insert-copies,streams", trace="run.json")``
runs the pipeline on a clone of ``program`` keeping every program
(:mod:`blockir.viz.model`), lays them out once (:mod:`blockir.viz.layout`),
links a run's Chrome trace to the ops (:mod:`blockir.viz.trace`) and writes the
page (:mod:`blockir.viz.page`). ``docs/viz.md`` describes the page.
"""

from blockir.viz.model import build, collect
from blockir.viz.page import page_data, write
from blockir.viz.trace import TraceError, load_trace

__all__ = ["TraceError", "build", "collect", "load_trace", "page_data", "write"]
