"""Optimizers (Fluid 1.x): ``minimize(loss)`` = :func:`append_backward` + one update op per parameter.

The learning rate is a persistable ``learning_rate_N`` variable (or a variable
given by the user); optimizer state (``<param>_velocity_0``,
``<param>_moment1_0``, ``<param>_beta1_pow_acc_0``, ...) are persistable
variables filled by ``fill_constant`` ops in the startup program. A parameter's
``ParamAttr.learning_rate`` scales the rate for it (a ``scale`` op, role
LRSched|Optimize). Update ops write in place (``ParamOut`` is ``Param``), carry
role Optimize and ``op_role_var = [param, grad]``, are built in the name scope
``optimizer`` and run on the parameter's pinned device, else where its
gradient is computed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from blockir.dsl import framework, unique_name
from blockir.dsl.backward import append_backward
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.variable import Variable, tensor_dtype, tensor_shape
from blockir.errors import BlockirError
from blockir.ir import core
from blockir.ir.core import Block, Operator, Program
from blockir.ir.dtypes import FLOAT_DTYPES
from blockir.ir.schema import OpRole

__all__ = [
    "SGD",
    "Adagrad",
    "AdagradOptimizer",
    "Adam",
    "AdamOptimizer",
    "Momentum",
    "MomentumOptimizer",
    "Optimizer",
    "SGDOptimizer",
]

ParamsGrads = list[tuple[core.Variable, core.Variable]]


class Optimizer:
    """Base class: subclasses name their op type and accumulators and build the update op."""

    op_type = ""

    def __init__(self, learning_rate: float | core.Variable) -> None:
        if isinstance(learning_rate, core.Variable):
            if learning_rate.dtype not in FLOAT_DTYPES or tuple(learning_rate.shape or ()) != (1,):
                raise BlockirError(
                    f"{type(self).__name__}: a learning-rate variable must be a float tensor of "
                    f"shape [1], got {learning_rate.name!r}: {learning_rate.dtype} "
                    f"{list(learning_rate.shape or ())}"
                )
        elif isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or learning_rate <= 0:
            raise BlockirError(
                f"{type(self).__name__}: learning_rate must be a positive number or a variable, got {learning_rate!r}"
            )
        self._learning_rate = learning_rate
        self._lr_vars: dict[Program, core.Variable] = {}
        self._accumulators: dict[tuple[str, str], core.Variable] = {}
        self._startup: Program | None = None

    # -- the public API --------------------------------------------------------
    def minimize(
        self,
        loss: core.Variable,
        startup_program: Program | None = None,
        parameter_list: Sequence[str | core.Variable] | None = None,
        no_grad_set: Iterable[str | core.Variable] | None = None,
    ) -> tuple[list[Operator], ParamsGrads]:
        """Append the backward pass of ``loss`` and the update ops; return (update ops, [(param, grad)])."""
        params_grads = self.backward(loss, startup_program, parameter_list, no_grad_set)
        return self.apply_gradients(params_grads), params_grads

    def backward(
        self,
        loss: core.Variable,
        startup_program: Program | None = None,
        parameter_list: Sequence[str | core.Variable] | None = None,
        no_grad_set: Iterable[str | core.Variable] | None = None,
    ) -> ParamsGrads:
        """The gradients of ``loss`` (:func:`append_backward`); remembers ``startup_program`` for the state."""
        self._startup = startup_program
        return append_backward(loss, parameter_list, no_grad_set)

    def apply_gradients(self, params_grads: ParamsGrads) -> list[Operator]:
        """Append one update op per (param, grad) of a trainable parameter; return them."""
        params_grads = [(p, g) for p, g in params_grads if g is not None and getattr(p, "trainable", True)]
        if not params_grads:
            return []
        block = params_grads[0][0].block
        if block is None:
            raise BlockirError(f"{self.op_type}: parameter {params_grads[0][0].name!r} belongs to no program's block")
        startup = self._startup or framework.default_startup_program()
        with framework.program_guard(block.program, startup), framework.name_scope("optimizer"):
            helper = LayerHelper(self.op_type, name=self.op_type)
            ops = []
            for param, grad in params_grads:
                device = _update_device(block, param)
                lr = self._param_lr(helper, block, param, device)
                ops.append(self.append_update(helper, block, param, grad, lr, device))
        return ops

    # -- what subclasses use --------------------------------------------------------
    def append_update(
        self,
        helper: LayerHelper,
        block: Block,
        param: core.Variable,
        grad: core.Variable,
        lr: core.Variable,
        device: str | None,
    ) -> Operator:
        """Append the update op of one parameter."""
        state_in, state_out, attrs = self.state(helper, param, device)
        inputs = {"Param": [param], "Grad": [grad], "LearningRate": [lr], **state_in}
        outputs = {"ParamOut": [param], **state_out}
        return framework.append_op(
            block,
            self.op_type,
            inputs,
            outputs,
            attrs,
            role=OpRole.OPTIMIZE,
            role_var=[param.name, grad.name],
            device=device,
        )

    def state(
        self, helper: LayerHelper, param: core.Variable, device: str | None
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, Any]]:
        """(state inputs, state outputs, attributes) of the update op of ``param``; none for plain SGD."""
        return {}, {}, {}

    def accumulator(
        self,
        helper: LayerHelper,
        name: str,
        param: core.Variable,
        device: str | None,
        fill_value: float = 0.0,
        shape: Sequence[int] | None = None,
    ) -> core.Variable:
        """The persistable state ``<param>_<name>_N`` (shape of ``param`` unless given), filled at startup."""
        key = (name, param.name)
        if key in self._accumulators:
            raise BlockirError(
                f"{type(self).__name__}: accumulator {name!r} of parameter {param.name!r} exists "
                "already (minimize was called twice with this optimizer)"
            )
        var = helper.create_global_var(
            unique_name.generate(f"{param.name}_{name}"),
            tensor_shape(param) if shape is None else shape,
            tensor_dtype(param),
            fill_value,
            device=device,
        )
        self._accumulators[key] = var
        return var

    # -- learning rates --------------------------------------------------------
    def _global_lr(self, helper: LayerHelper, program: Program, dtype: str) -> core.Variable:
        if program not in self._lr_vars:
            if isinstance(self._learning_rate, core.Variable):
                self._lr_vars[program] = self._learning_rate
            else:
                self._lr_vars[program] = helper.create_global_var(
                    unique_name.generate("learning_rate"), [1], dtype, float(self._learning_rate)
                )
        return self._lr_vars[program]

    def _param_lr(self, helper: LayerHelper, block: Block, param: core.Variable, device: str | None) -> core.Variable:
        lr = self._global_lr(helper, block.program, tensor_dtype(param))
        factor = getattr(param, "optimize_attr", {}).get("learning_rate", 1.0)
        if factor == 1.0:
            return lr
        scaled = block.add_var(
            Variable(
                unique_name.generate(f"{param.name}_learning_rate"), dtype=lr.dtype, shape=(1,), stop_gradient=True
            )
        )
        framework.append_op(
            block,
            "scale",
            {"X": [lr]},
            {"Out": [scaled]},
            {"scale": factor},
            role=OpRole.LR_SCHED | OpRole.OPTIMIZE,
            device=device,
        )
        return scaled


def _update_device(block: Block, param: core.Variable) -> str | None:
    """The parameter's pinned device, else the device of the op that computes its gradient (None: unknown)."""
    pinned = param.device
    if pinned:
        return pinned
    for op in reversed(block.ops):
        if param.name in op.attrs.get("op_role_var", [])[::2] and op.device:
            return op.device
    return None


class SGDOptimizer(Optimizer):
    """param -= lr * grad."""

    op_type = "sgd"


class MomentumOptimizer(Optimizer):
    """velocity = momentum * velocity + grad; param -= lr * velocity (Nesterov: lr * (grad + momentum * velocity))."""

    op_type = "momentum"

    def __init__(self, learning_rate: float | core.Variable, momentum: float, use_nesterov: bool = False) -> None:
        super().__init__(learning_rate)
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum:
            raise BlockirError(f"MomentumOptimizer: momentum must be a non-negative number, got {momentum!r}")
        self._momentum = float(momentum)
        self._use_nesterov = bool(use_nesterov)

    def state(
        self, helper: LayerHelper, param: core.Variable, device: str | None
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, Any]]:
        velocity = self.accumulator(helper, "velocity", param, device)
        return (
            {"Velocity": [velocity]},
            {"VelocityOut": [velocity]},
            {"mu": self._momentum, "use_nesterov": self._use_nesterov},
        )


class AdagradOptimizer(Optimizer):
    """moment += grad ** 2; param -= lr * grad / (sqrt(moment) + epsilon)."""

    op_type = "adagrad"

    def __init__(
        self, learning_rate: float | core.Variable, epsilon: float = 1e-6, initial_accumulator_value: float = 0.0
    ) -> None:
        super().__init__(learning_rate)
        self._epsilon = float(epsilon)
        self._initial = float(initial_accumulator_value)

    def state(
        self, helper: LayerHelper, param: core.Variable, device: str | None
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, Any]]:
        moment = self.accumulator(helper, "moment", param, device, fill_value=self._initial)
        return {"Moment": [moment]}, {"MomentOut": [moment]}, {"epsilon": self._epsilon}


class AdamOptimizer(Optimizer):
    """Adam (Kingma & Ba) with bias correction through the beta-power accumulators.

    ``lazy_mode``: with a SelectedRows gradient, update only the rows present.
    """

    op_type = "adam"

    def __init__(
        self,
        learning_rate: float | core.Variable = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
        lazy_mode: bool = False,
    ) -> None:
        super().__init__(learning_rate)
        for name, beta in (("beta1", beta1), ("beta2", beta2)):
            if not 0 <= beta < 1:
                raise BlockirError(f"AdamOptimizer: {name} must be in [0, 1), got {beta!r}")
        self._beta1, self._beta2 = float(beta1), float(beta2)
        self._epsilon = float(epsilon)
        self._lazy_mode = bool(lazy_mode)

    def state(
        self, helper: LayerHelper, param: core.Variable, device: str | None
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]], dict[str, Any]]:
        m1 = self.accumulator(helper, "moment1", param, device)
        m2 = self.accumulator(helper, "moment2", param, device)
        b1 = self.accumulator(helper, "beta1_pow_acc", param, device, fill_value=self._beta1, shape=[1])
        b2 = self.accumulator(helper, "beta2_pow_acc", param, device, fill_value=self._beta2, shape=[1])
        return (
            {"Moment1": [m1], "Moment2": [m2], "Beta1Pow": [b1], "Beta2Pow": [b2]},
            {"Moment1Out": [m1], "Moment2Out": [m2], "Beta1PowOut": [b1], "Beta2PowOut": [b2]},
            {"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon, "lazy_mode": self._lazy_mode},
        )


SGD = SGDOptimizer
Momentum = MomentumOptimizer
Adagrad = AdagradOptimizer
Adam = AdamOptimizer
