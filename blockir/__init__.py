"""blockir: a dataflow-graph IR, compiler and executor for machine-learning programs.

``import blockir`` loads only the IR, the op library and the errors. Everything else of the public API (the DSL,
passes, runtime, persistence, readers, the async executor) loads on first use through the module's ``__getattr__``,
so ``import blockir.ir`` pulls in neither the runtime nor networkx nor threadpoolctl.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

from blockir import ir, ops
from blockir.errors import BlockirError, ChannelClosedError, ChannelTimeout, DeadlockError
from blockir.ir import Program, load_program
from blockir.ops.values import LoDTensor, SelectedRows, TensorArray

try:
    __version__ = _version("blockir")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0"

if TYPE_CHECKING:  # the lazy names below, for type checkers
    from blockir import io, passes, runtime, viz
    from blockir.datafeed import DataFeedDesc
    from blockir.datafeed import staged as reader
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
    from blockir.parallel import AsyncExecutor
    from blockir.runtime import (
        BuildStrategy,
        CompiledProgram,
        CPUPlace,
        ExecutionStrategy,
        Executor,
        Scope,
        cpu_places,
        cuda_places,
        global_scope,
        scope_guard,
    )
    from blockir.runtime.channel import Channel

# name -> (module, attribute of it; None: the module itself), loaded on first access
_LAZY: dict[str, tuple[str, str | None]] = {
    "io": ("blockir.io", None),
    "passes": ("blockir.passes", None),
    "viz": ("blockir.viz", None),
    "runtime": ("blockir.runtime", None),
    "reader": ("blockir.datafeed.staged", None),  # bir.reader.staged(...), as in Fluid
    "DataFeedDesc": ("blockir.datafeed", "DataFeedDesc"),
    **{
        name: ("blockir.dsl", name)
        for name in (
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
        )
    },
    **{
        name: ("blockir.dsl.concurrency", name)
        for name in ("ChannelList", "Select", "channel", "channel_list", "go", "make_channel")
    },
    "AsyncExecutor": ("blockir.parallel", "AsyncExecutor"),
    **{
        name: ("blockir.runtime", name)
        for name in (
            "BuildStrategy",
            "CPUPlace",
            "CompiledProgram",
            "ExecutionStrategy",
            "Executor",
            "Scope",
            "cpu_places",
            "cuda_places",
            "global_scope",
            "scope_guard",
        )
    },
    "Channel": ("blockir.runtime.channel", "Channel"),
}


def __getattr__(name: str) -> Any:
    """Load a lazy public name (see ``_LAZY``) on first access and keep it in the module."""
    try:
        module_name, attribute = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'blockir' has no attribute {name!r}") from None
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def select(cases: Any = None, default: bool = False, timeout: float | None = None) -> Any:
    """Go's select. ``bir.select(cases, default=False, timeout=None)`` waits on channels now
    (:func:`blockir.runtime.channel.select`); ``with bir.select() as s:`` builds a ``select`` op into the
    program being built (:func:`blockir.dsl.concurrency.select`)."""
    if cases is None:
        if default or timeout is not None:
            raise BlockirError("select: default and timeout go with cases; in programs use a default case")
        from blockir.dsl.concurrency import select as build_select

        return build_select()
    from blockir.runtime.channel import select as select_now

    return select_now(cases, default, timeout)


# ruff and type checkers read a literal __all__; tests/test_package.py checks it names exactly the eager and lazy names
__all__ = ["BlockirError", "ChannelClosedError", "ChannelTimeout", "DeadlockError", "LoDTensor", "Program"]
__all__ += ["SelectedRows", "TensorArray", "__version__", "ir", "load_program", "ops", "select"]
__all__ += ["DataFeedDesc", "io", "passes", "reader", "runtime", "viz"]
__all__ += ["ParamAttr", "append_backward", "data", "default_main_program", "default_startup_program", "device_guard"]
__all__ += ["initializer", "layers", "name_scope", "optimizer", "program_guard", "unique_name"]
__all__ += ["ChannelList", "Select", "channel", "channel_list", "go", "make_channel"]
__all__ += ["AsyncExecutor", "CPUPlace", "Channel", "Executor", "Scope", "global_scope", "scope_guard"]
__all__ += ["BuildStrategy", "CompiledProgram", "ExecutionStrategy", "cpu_places", "cuda_places"]
