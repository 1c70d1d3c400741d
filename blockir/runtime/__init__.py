"""The runtime: places, scopes, the executor and its plans, channels, persistence (``blockir.runtime.io``)."""

from blockir.runtime import io, multislot, reader
from blockir.runtime.async_executor import AsyncExecutor
from blockir.runtime.channel import Channel, blocked_on, register_thread, select
from blockir.runtime.data_feed import DataFeedDesc
from blockir.runtime.executor import Executor
from blockir.runtime.place import CPUPlace, Place
from blockir.runtime.plan import Plan
from blockir.runtime.scope import Scope, ScopeVariable, global_scope, scope_guard

__all__ = ["CPUPlace", "Channel", "Executor", "Place", "Plan", "Scope", "ScopeVariable", "global_scope", "io",
           "scope_guard"]
__all__ += ["blocked_on", "register_thread", "select"]
__all__ += ["reader"]
__all__ += ["DataFeedDesc", "multislot"]
__all__ += ["AsyncExecutor"]
