"""The graph-building DSL (Fluid 1.x style): programs, guards, data, layers, autodiff, optimizers."""

from blockir.dsl import initializer, layers, optimizer, unique_name
from blockir.dsl.backward import append_backward
from blockir.dsl.framework import default_main_program, default_startup_program, device_guard, name_scope, program_guard
from blockir.dsl.layers import data
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.variable import Parameter, Variable

__all__ = [
    "ParamAttr",
    "Parameter",
    "Variable",
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
