"""The named pipelines: what the runtime and io apply to programs, by name.

Each is a :class:`~blockir.passes.base.Pipeline`, so a pipeline string names it
like a pass, with its options in braces, and ``blockir opt`` reruns what the
executor or ``save_inference_model`` did::

    blockir opt model.pb -p "default-device-pipeline{default=cuda:0 compute=2 fed=x@cuda:0}"

``default-device-pipeline{default=D compute=N fed=F}``
    What :class:`~blockir.runtime.executor.Executor` applies to a program with
    anything off the host: ``place{default=D fed=F}``, ``insert-copies``,
    ``streams{compute=N keep=true}``. ``D`` is the executor's place, ``N`` its
    ``compute_streams``, ``F`` the variables fed with values already on a GPU
    (``NAME@DEVICE``). ``Executor.pass_report(program).pipeline`` says which
    options it used.

``inference-pipeline{feeds=F targets=T}``
    What ``save_inference_model`` applies to the program it saves:
    ``feed-fetch`` (the old feed and fetch ops go), ``inference``,
    ``prune{targets=T feeds=F}``, ``feed-fetch{feeds=F targets=T}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from blockir.passes.base import Pass, Pipeline, register_pass
from blockir.passes.copies import InsertCopies
from blockir.passes.feed_fetch import FeedFetch
from blockir.passes.inference import Inference
from blockir.passes.place import Place
from blockir.passes.prune import Prune
from blockir.passes.streams import Streams

__all__ = ["DefaultDevicePipeline", "InferencePipeline"]


@register_pass
@dataclass(frozen=True)
class DefaultDevicePipeline(Pipeline):
    """place, insert-copies, streams: what the executor applies (module docstring)."""

    name: ClassVar[str] = "default-device-pipeline"
    summary: ClassVar[str] = "what Executor.run applies: place{default fed},insert-copies,streams{compute keep=true}"

    default: str = field(default="", metadata={"help": "device for ops the program places nowhere (else cpu)"})
    compute: int = field(default=1, metadata={"help": "compute streams per device"})
    fed: tuple[str, ...] = field(
        default=(), metadata={"help": "variables fed with values already on a device, as NAME@DEVICE"}
    )

    def passes(self) -> list[Pass]:
        return [Place(default=self.default, fed=self.fed), InsertCopies(), Streams(compute=self.compute, keep=True)]


@register_pass
@dataclass(frozen=True)
class InferencePipeline(Pipeline):
    """feed-fetch, inference, prune, feed-fetch: what save_inference_model applies (module docstring)."""

    name: ClassVar[str] = "inference-pipeline"
    summary: ClassVar[str] = "what save_inference_model applies: inference, prune to the targets, feed and fetch ops"

    feeds: tuple[str, ...] = field(default=(), metadata={"help": "the variables fed, in column order"})
    targets: tuple[str, ...] = field(default=(), metadata={"help": "the variables to compute, in column order"})

    def passes(self) -> list[Pass]:
        return [
            FeedFetch(),
            Inference(),
            Prune(targets=self.targets, feeds=self.feeds),
            FeedFetch(feeds=self.feeds, targets=self.targets),
        ]
