"""blockir: a dataflow-graph IR, compiler and executor for machine-learning programs."""

from importlib.metadata import PackageNotFoundError, version as _version

from blockir import ir, ops, passes
from blockir.errors import BlockirError, ChannelClosedError, ChannelTimeout, DeadlockError
from blockir.ir import Program, load_program
from blockir.ops.values import LoDTensor, SelectedRows

try:
    __version__ = _version("blockir")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

from blockir.dsl import (ParamAttr, append_backward, data, default_main_program, default_startup_program,
                         device_guard, initializer, layers, name_scope, optimizer, program_guard, unique_name)
from blockir.runtime import CPUPlace, Executor, Scope, global_scope, io, reader, scope_guard
from blockir.runtime.channel import Channel, select

__all__ = ["BlockirError", "LoDTensor", "Program", "SelectedRows", "__version__", "ir",
           "load_program", "ops", "passes"]
__all__ += ["ParamAttr", "append_backward", "data", "default_main_program", "default_startup_program",
            "device_guard", "initializer", "layers", "name_scope", "optimizer", "program_guard", "unique_name"]
__all__ += ["CPUPlace", "Executor", "Scope", "global_scope", "io", "reader", "scope_guard"]
__all__ += ["Channel", "ChannelClosedError", "ChannelTimeout", "DeadlockError", "select"]
