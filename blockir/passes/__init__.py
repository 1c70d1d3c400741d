"""Program transformations. The pass manager (pipelines, instruments) comes with the compiler issue."""

from blockir.passes.inference import inference
from blockir.passes.prune import prune

__all__ = ["inference", "prune"]
