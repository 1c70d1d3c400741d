"""blockir: a dataflow-graph IR, compiler and executor for machine-learning programs."""

from importlib.metadata import PackageNotFoundError, version as _version

from blockir import ir, ops
from blockir.errors import BlockirError
from blockir.ir import Program, load_program
from blockir.ops.values import LoDTensor, SelectedRows

try:
    __version__ = _version("blockir")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

# The DSL helper adds: from blockir.dsl import ... (program_guard, data, layers, optimizer, ...)
# The runtime helper adds: from blockir.runtime import ... (Executor, Scope, CPUPlace, io, ...)

__all__ = ["BlockirError", "LoDTensor", "Program", "SelectedRows", "__version__", "ir",
           "load_program", "ops"]
