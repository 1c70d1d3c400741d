"""``ParamAttr``: how a layer creates one of its parameters (Fluid 1.x)."""

from __future__ import annotations

from typing import Any, Literal

from blockir.dsl.initializer import Initializer
from blockir.errors import BlockirError
from blockir.ir.devices import require_device

__all__ = ["ParamAttr"]


class ParamAttr:
    """Name, initializer, learning-rate factor, trainability and pinned device of a parameter.

    ``name``: the parameter's name (None: a unique ``layer_N.w_K``); a name that
    already exists shares that parameter. ``learning_rate`` multiplies the
    optimizer's rate for this parameter. ``trainable=False`` freezes it (no
    gradient, no update). ``device`` pins the parameter: its initializer (and its
    optimizer ops) run there.
    """

    def __init__(
        self,
        name: str | None = None,
        initializer: Initializer | None = None,
        learning_rate: float = 1.0,
        trainable: bool = True,
        device: str | None = None,
    ) -> None:
        if name is not None and (not isinstance(name, str) or not name):
            raise BlockirError(f"ParamAttr: name must be a non-empty string or None, got {name!r}")
        if initializer is not None and not isinstance(initializer, Initializer):
            raise BlockirError(f"ParamAttr: initializer must be an Initializer, got {initializer!r}")
        if isinstance(learning_rate, bool) or not isinstance(learning_rate, (int, float)) or learning_rate < 0:
            raise BlockirError(f"ParamAttr: learning_rate must be a non-negative number, got {learning_rate!r}")
        if not isinstance(trainable, bool):
            raise BlockirError(f"ParamAttr: trainable must be a bool, got {trainable!r}")
        self.name = name
        self.initializer = initializer
        self.learning_rate = float(learning_rate)
        self.trainable = trainable
        self.device = require_device(device, "ParamAttr device") if device is not None else None

    @staticmethod
    def to_attr(arg: Any) -> ParamAttr | Literal[False]:
        """Fluid's conversion of a layer's ``param_attr``/``bias_attr`` argument.

        None -> default ParamAttr; a string -> ParamAttr(name=...); an Initializer
        -> ParamAttr(initializer=...); True -> default; False -> False (no
        parameter, e.g. no bias).
        """
        if arg is None or arg is True:
            return ParamAttr()
        if arg is False or isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise BlockirError(f"cannot use {arg!r} as a ParamAttr (expected ParamAttr, str, Initializer, bool or None)")

    def __repr__(self) -> str:
        return (
            f"ParamAttr(name={self.name!r}, initializer={self.initializer!r}, "
            f"learning_rate={self.learning_rate}, trainable={self.trainable}, device={self.device!r})"
        )
