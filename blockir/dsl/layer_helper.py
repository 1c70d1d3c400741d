"""``LayerHelper``: what every layer function does (Fluid's helper of the same name).

A helper is made per layer call. It names the layer (``fc_0``, or the user's
``name``), creates its temporaries (``fc_0.tmp_0``) and parameters
(``fc_0.w_0``, ``fc_0.b_0``; the initializer op goes to the startup program),
appends its ops through :func:`blockir.dsl.framework.append_op` and checks its
inputs, naming the layer in every error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from blockir.dsl import framework, unique_name
from blockir.dsl.initializer import Constant, Initializer, Xavier
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.variable import Parameter, Variable, tensor_dtype, tensor_shape
from blockir.errors import BlockirError, ShapeError
from blockir.ir import core
from blockir.ir.core import Block, Operator, Program
from blockir.ir.dtypes import FLOAT_DTYPES, INT_DTYPES
from blockir.ir.schema import lookup

__all__ = ["LayerHelper"]


class LayerHelper:
    """Builds one layer call into the default main (and startup) program."""

    def __init__(self, layer_type: str, name: str | None = None) -> None:
        self.layer_type = layer_type
        self.name = name if name is not None else unique_name.generate(layer_type)

    # -- where ops go -------------------------------------------------------
    @property
    def main_program(self) -> Program:
        return framework.default_main_program()

    @property
    def startup_program(self) -> Program:
        return framework.default_startup_program()

    @property
    def block(self) -> Block:
        return self.main_program.current_block()

    # -- errors and checks ----------------------------------------------------
    def error(self, message: str) -> ShapeError:
        """A ShapeError naming this layer."""
        return ShapeError(f"layers.{self.layer_type}: {message}")

    def check_variable(self, value: Any, arg: str) -> core.Variable:
        """``value`` when it is a variable of the program being built; an error naming ``arg`` otherwise."""
        if not isinstance(value, core.Variable):
            raise BlockirError(f"layers.{self.layer_type}: {arg} must be a Variable, got {type(value).__name__}")
        if value.block is None or value.block.program is not self.main_program:
            raise BlockirError(
                f"layers.{self.layer_type}: {arg} {value.name!r} does not belong to the program "
                "being built (use program_guard)"
            )
        return value

    def check_dtype(self, var: core.Variable, arg: str, allowed: Sequence[str] | frozenset[str]) -> None:
        if var.dtype not in allowed:
            raise self.error(
                f"{arg} {var.name!r} has dtype {var.dtype}, expected one of "
                f"{', '.join(sorted(allowed))} (shape {list(var.shape or ())})"
            )

    def check_float(self, var: core.Variable, arg: str) -> None:
        self.check_dtype(var, arg, FLOAT_DTYPES)

    def check_int(self, var: core.Variable, arg: str) -> None:
        self.check_dtype(var, arg, INT_DTYPES)

    # -- variables --------------------------------------------------------
    def create_tmp(self, dtype: str | None = "float32", stop_gradient: bool = False) -> Variable:
        """A temporary ``<layer>.tmp_N``; shape and dtype are set by the op that writes it."""
        name = unique_name.generate(f"{self.name}.tmp")
        return self.block.add_var(Variable(name, dtype=dtype, shape=(), stop_gradient=stop_gradient))

    def create_parameter(
        self,
        attr: ParamAttr,
        shape: Sequence[int],
        dtype: str,
        is_bias: bool = False,
        default_initializer: Initializer | None = None,
    ) -> Parameter:
        """A parameter of the main program's global block, initialised in the startup program.

        A name that exists already shares that parameter (shapes and dtypes must agree).
        """
        shape = tuple(int(d) for d in shape)
        if any(d <= 0 for d in shape):
            raise self.error(f"parameter shape {list(shape)} must be fully known and positive")
        if dtype not in FLOAT_DTYPES:
            raise self.error(f"parameters must have a float dtype, got {dtype}")
        name = attr.name or unique_name.generate(f"{self.name}.{'b' if is_bias else 'w'}")
        main_block = self.main_program.global_block()
        if main_block.has_var(name):
            return self._shared_parameter(main_block.var(name), shape, dtype)
        init = attr.initializer or default_initializer or (Constant(0.0) if is_bias else Xavier())
        param = main_block.add_var(
            Parameter(
                name, shape, dtype, trainable=attr.trainable, learning_rate=attr.learning_rate, device=attr.device
            )
        )
        self.init_in_startup(param, init, attr.device)
        return param

    def create_global_var(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str,
        value: float,
        persistable: bool = True,
        force_cpu: bool = False,
        device: str | None = None,
    ) -> Variable:
        """A variable of the main program's global block filled with ``value`` by the startup program."""
        var = Variable(name, dtype=dtype, shape=shape, persistable=persistable, stop_gradient=True)
        self.main_program.global_block().add_var(var)
        self.init_in_startup(var, Constant(value, force_cpu), device)
        return var

    def init_in_startup(self, var: core.Variable, init: Initializer, device: str | None) -> None:
        """Declare ``var`` in the startup program and append its initializer there (once)."""
        startup_block = self.startup_program.global_block()
        if not startup_block.has_var(var.name):
            init(var.copy_to(startup_block), startup_block, device)

    def _shared_parameter(self, existing: core.Variable, shape: tuple[int, ...], dtype: str) -> Parameter:
        if not isinstance(existing, Parameter):
            raise self.error(f"{existing.name!r} already exists and is not a parameter")
        if existing.shape != shape or existing.dtype != dtype:
            raise self.error(
                f"parameter {existing.name!r} exists with shape {list(existing.shape or ())} "
                f"{existing.dtype}; this layer needs {list(shape)} {dtype}"
            )
        return existing

    # -- ops -----------------------------------------------------------------
    def append_op(
        self,
        type: str,
        inputs: dict[str, Any] | None = None,
        outputs: dict[str, Any] | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> Operator:
        return framework.append_op(self.block, type, inputs, outputs, attrs, layer=self.layer_type)

    def unary(
        self, op_type: str, x: core.Variable, attrs: dict[str, Any] | None = None, out_dtype: str | None = None
    ) -> Variable:
        """``Out = op_type(X=x)`` into a new temporary."""
        out = self.create_tmp(out_dtype or x.dtype)
        self.append_op(op_type, {"X": [x]}, {"Out": [out]}, attrs)
        return out

    def append_bias(self, x: Variable, bias_attr: ParamAttr | bool, dim_start: int = 1) -> Variable:
        """``x + b`` with ``b`` of shape ``x.shape[dim_start:]``; ``x`` itself when ``bias_attr`` is False."""
        if bias_attr is False:
            return x
        if not isinstance(bias_attr, ParamAttr):
            raise TypeError(f"bias_attr: expected a ParamAttr or False, got {bias_attr!r} (see ParamAttr.to_attr)")
        b = self.create_parameter(bias_attr, tensor_shape(x)[dim_start:], tensor_dtype(x), is_bias=True)
        out = self.create_tmp(x.dtype)
        self.append_op("elementwise_add", {"X": [x], "Y": [b]}, {"Out": [out]}, {"axis": dim_start})
        return out

    def append_activation(self, x: Variable, act: str | None) -> Variable:
        """``act(x)`` (an op type with slots X -> Out, e.g. relu, softmax); ``x`` itself when ``act`` is None."""
        if act is None:
            return x
        if not isinstance(act, str):
            raise BlockirError(f"layers.{self.layer_type}: act must be an op type name, got {act!r}")
        schema = lookup(act)
        if [s.name for s in schema.inputs] != ["X"] or [s.name for s in schema.outputs] != ["Out"]:
            raise BlockirError(f"layers.{self.layer_type}: act {act!r} is not an activation (X -> Out) op")
        return self.unary(act, x)
