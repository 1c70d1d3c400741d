"""blockir: a dataflow-graph IR, compiler and executor for machine-learning programs."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import Any

from blockir import ir, ops, passes
from blockir.errors import BlockirError, ChannelClosedError, ChannelTimeout, DeadlockError
from blockir.ir import Program, load_program
from blockir.ops.values import LoDTensor, SelectedRows

try:
    __version__ = _version("blockir")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

from blockir import io
from blockir.datafeed import DataFeedDesc
from blockir.datafeed import staged as reader  # bir.reader.staged(...), as in Fluid
from blockir.dsl import (
    ParamAttr,
    append_backward,
    data,
    default_main_program,
    default_startup_program,
    device_guard,
    initializer,
    layers,
    name_scope,
    optimizer,
    program_guard,
    unique_name,
)
from blockir.dsl.concurrency import ChannelList, Select, channel, channel_list, go, make_channel
from blockir.dsl.concurrency import select as _build_select
from blockir.parallel import AsyncExecutor
from blockir.runtime import CPUPlace, Executor, Scope, global_scope, scope_guard
from blockir.runtime.channel import Channel
from blockir.runtime.channel import select as _select_now


def select(cases: Any = None, default: bool = False, timeout: float | None = None) -> Any:
    """Go's select. ``bir.select(cases, default=False, timeout=None)`` waits on channels now
    (:func:`blockir.runtime.channel.select`); ``with bir.select() as s:`` builds a ``select`` op into the
    program being built (:func:`blockir.dsl.concurrency.select`)."""
    if cases is None:
        if default or timeout is not None:
            raise BlockirError("select: default and timeout go with cases; in programs use a default case")
        return _build_select()
    return _select_now(cases, default, timeout)


__all__ = ["BlockirError", "LoDTensor", "Program", "SelectedRows", "__version__", "ir", "load_program", "ops", "passes"]
__all__ += [
    "ParamAttr",
    "append_backward",
    "data",
    "default_main_program",
    "default_startup_program",
    "device_guard",
    "initializer",
    "layers",
    "name_scope",
    "optimizer",
    "program_guard",
    "unique_name",
]
__all__ += ["CPUPlace", "Executor", "Scope", "global_scope", "io", "reader", "scope_guard"]
__all__ += ["AsyncExecutor", "DataFeedDesc"]
__all__ += ["Channel", "ChannelClosedError", "ChannelTimeout", "DeadlockError", "select"]
__all__ += ["ChannelList", "Select", "channel", "channel_list", "go", "make_channel"]
