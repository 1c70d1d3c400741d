"""The runtime: devices, places, scopes, the executor and its plans, schedulers, traces, channels."""

from blockir.runtime.calibration import calibrate
from blockir.runtime.channel import Channel, blocked_on, register_thread, select
from blockir.runtime.compiled import BuildStrategy, CompiledProgram, ExecutionStrategy, cpu_places, cuda_places
from blockir.runtime.executor import Executor
from blockir.runtime.memory import keep_freed_memory, release_freed_memory
from blockir.runtime.place import CPUPlace, Place
from blockir.runtime.plan import Plan
from blockir.runtime.scope import Scope, ScopeVariable, global_scope, scope_guard

__all__ = [
    "BuildStrategy",
    "CPUPlace",
    "CompiledProgram",
    "ExecutionStrategy",
    "Channel",
    "Executor",
    "Place",
    "Plan",
    "Scope",
    "ScopeVariable",
    "blocked_on",
    "calibrate",
    "cpu_places",
    "cuda_places",
    "global_scope",
    "keep_freed_memory",
    "register_thread",
    "release_freed_memory",
    "scope_guard",
    "select",
]
