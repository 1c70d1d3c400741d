"""Compiler passes and the pass manager that runs pipelines of them.

``run(program, "prune{targets=loss},deps")`` returns the transformed clone and a
report; ``registered_passes()`` lists the passes, and the named pipelines
(:mod:`blockir.passes.pipelines`: ``default-device-pipeline``,
``inference-pipeline``; :mod:`blockir.passes.fuse`: ``fuse``), by name. The plain functions ``prune`` and
``inference`` transform a program in place.
"""

from blockir.passes.auto_place import AutoPlace, Schedule, simulate
from blockir.passes.base import Pass, Pipeline, register_pass, registered_passes, unregister_pass
from blockir.passes.copies import InsertCopies
from blockir.passes.costs import CostModel
from blockir.passes.data_parallel import DataParallel
from blockir.passes.deps import Deps, dependency_graph
from blockir.passes.distribute import Distribute
from blockir.passes.feed_fetch import FeedFetch
from blockir.passes.fuse import Fuse, FuseElementwiseAct, FuseFC, FuseSoftmaxCE
from blockir.passes.fuse_optimizer import FuseOptimizer
from blockir.passes.inference import Inference, inference
from blockir.passes.manager import (
    Instrument,
    KeepPrograms,
    PassRecord,
    PassReport,
    describe_passes,
    expand,
    format_pass,
    format_pipeline,
    note,
    parse_pipeline,
    pass_options,
    record_detail,
    run,
)
from blockir.passes.pipelines import DefaultDevicePipeline, InferencePipeline
from blockir.passes.place import Place, place_startup
from blockir.passes.prune import Prune, prune
from blockir.passes.streams import Streams, op_stream, stream_waits

__all__ = [
    "AutoPlace",
    "CostModel",
    "DataParallel",
    "DefaultDevicePipeline",
    "Deps",
    "Distribute",
    "FeedFetch",
    "Fuse",
    "FuseElementwiseAct",
    "FuseFC",
    "FuseOptimizer",
    "FuseSoftmaxCE",
    "Inference",
    "InferencePipeline",
    "InsertCopies",
    "KeepPrograms",
    "Instrument",
    "Pass",
    "PassRecord",
    "PassReport",
    "Pipeline",
    "Place",
    "Prune",
    "Schedule",
    "Streams",
    "dependency_graph",
    "describe_passes",
    "expand",
    "format_pass",
    "format_pipeline",
    "inference",
    "note",
    "op_stream",
    "parse_pipeline",
    "pass_options",
    "place_startup",
    "prune",
    "record_detail",
    "register_pass",
    "registered_passes",
    "run",
    "simulate",
    "stream_waits",
    "unregister_pass",
]
