"""Recurrent layers (re-exported by :mod:`blockir.dsl.layers`): ``lstm``, ``gru`` and ``simple_rnn``, each one
Paddle ``rnn`` op (:mod:`blockir.ops.rnn`) over a time-major input ``[T, B, I]``.

``lstm`` keeps Fluid 1.x's signature (``input, init_h, init_c, max_len, hidden_size, num_layers, dropout_prob,
is_bidirec, is_test, name, default_initializer, seed``), but where Fluid emitted ``cudnn_lstm`` (a GPU-only
op reading one flat weight tensor) it emits ``rnn``, which runs on every device, keeps one parameter per weight
and bias in Paddle's cuDNN-compatible ``WeightList`` order (what ``paddle.nn.LSTM`` saves), and takes the
sequences' lengths. Each layer makes ``4 * num_layers * directions`` parameters, named ``<layer>.w_K`` (the
weights ``W_ih``, ``W_hh`` per layer and direction) then ``<layer>.b_K`` (the biases), initialised uniformly
in ``[-1/sqrt(hidden_size), 1/sqrt(hidden_size))`` as Fluid and Paddle do unless an initializer is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from blockir.dsl import framework
from blockir.dsl.initializer import Initializer, Uniform
from blockir.dsl.layer_helper import LayerHelper
from blockir.dsl.param_attr import ParamAttr
from blockir.dsl.variable import Parameter, Variable, tensor_dtype, tensor_shape
from blockir.ir import core
from blockir.ir.dtypes import DTYPE_TO_PROTO
from blockir.ops.rnn import GATES, state_count

__all__ = ["gru", "lstm", "simple_rnn"]


def lstm(
    input: core.Variable,
    init_h: core.Variable | None,
    init_c: core.Variable | None,
    max_len: int | None,
    hidden_size: int,
    num_layers: int = 1,
    dropout_prob: float = 0.0,
    is_bidirec: bool = False,
    is_test: bool = False,
    name: str | None = None,
    default_initializer: Initializer | None = None,
    seed: int = -1,
    *,
    sequence_length: core.Variable | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
) -> tuple[Variable, Variable, Variable]:
    """A multi-layer LSTM over ``input`` ``[T, B, I]`` (time-major): ``(out, last_h, last_c)``, ``out`` being
    ``[T, B, D * hidden_size]`` and the states ``[num_layers * D, B, hidden_size]`` (``D`` = 2 when
    ``is_bidirec``).

    ``init_h``/``init_c`` (None: zeros) are the initial states, of the states' shape. ``max_len``, which
    ``cudnn_lstm`` needed, is checked against ``T`` when both are known. ``dropout_prob`` drops the input of
    every layer above the first in training (``is_test``, which ``Program.clone(for_test=True)`` sets, turns
    it off); ``seed`` (-1: the program's ``random_seed`` when set, else a fresh mask at every run) fixes the
    mask. ``sequence_length`` (int32/int64 ``[B]``): the steps at or past a sequence's length leave its state
    unchanged and output zeros. The gate order of the weights is ``i, f, g, o``.
    """
    helper = LayerHelper("lstm", name)
    if max_len is not None:
        steps = (tensor_shape(helper.check_variable(input, "input")) or (-1,))[0]
        if steps >= 0 and steps != _positive(helper, max_len, "max_len"):
            raise helper.error(f"max_len {max_len} is not the number of time steps of input (dim 0: {steps})")
    args = _RnnArgs(input, hidden_size, num_layers, dropout_prob, is_bidirec, is_test, default_initializer, seed)
    out, states = _rnn(helper, "LSTM", [init_h, init_c], args, sequence_length, param_attr, bias_attr)
    return out, states[0], states[1]


def gru(
    input: core.Variable,
    hidden_size: int,
    num_layers: int = 1,
    init_h: core.Variable | None = None,
    dropout_prob: float = 0.0,
    is_bidirec: bool = False,
    is_test: bool = False,
    name: str | None = None,
    default_initializer: Initializer | None = None,
    seed: int = -1,
    sequence_length: core.Variable | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
) -> tuple[Variable, Variable]:
    """A multi-layer GRU over ``input`` ``[T, B, I]`` (time-major): ``(out, last_h)``; arguments as
    :func:`lstm`'s. Gates ``r, z, n`` as cuDNN (and ``paddle.nn.GRU``): ``n = tanh(x W_in + b_in + r * (h W_hn
    + b_hn))``, ``h = z * h + (1 - z) * n``."""
    args = _RnnArgs(input, hidden_size, num_layers, dropout_prob, is_bidirec, is_test, default_initializer, seed)
    out, states = _rnn(LayerHelper("gru", name), "GRU", [init_h], args, sequence_length, param_attr, bias_attr)
    return out, states[0]


def simple_rnn(
    input: core.Variable,
    hidden_size: int,
    num_layers: int = 1,
    init_h: core.Variable | None = None,
    activation: str = "tanh",
    dropout_prob: float = 0.0,
    is_bidirec: bool = False,
    is_test: bool = False,
    name: str | None = None,
    default_initializer: Initializer | None = None,
    seed: int = -1,
    sequence_length: core.Variable | None = None,
    param_attr: Any = None,
    bias_attr: Any = None,
) -> tuple[Variable, Variable]:
    """A multi-layer Elman RNN, ``h = activation(x W_ih + b_ih + h W_hh + b_hh)`` with ``activation``
    ``"tanh"`` or ``"relu"``, over ``input`` ``[T, B, I]`` (time-major): ``(out, last_h)``; the other
    arguments as :func:`lstm`'s."""
    helper = LayerHelper("simple_rnn", name)
    if activation not in ("tanh", "relu"):
        raise helper.error(f"activation must be 'tanh' or 'relu', got {activation!r}")
    args = _RnnArgs(input, hidden_size, num_layers, dropout_prob, is_bidirec, is_test, default_initializer, seed)
    out, states = _rnn(helper, f"RNN_{activation.upper()}", [init_h], args, sequence_length, param_attr, bias_attr)
    return out, states[0]


def _positive(helper: LayerHelper, value: Any, arg: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise helper.error(f"{arg} must be a positive int, got {value!r}")
    return value


@dataclass(frozen=True)
class _RnnArgs:
    """The arguments ``lstm``, ``gru`` and ``simple_rnn`` share (as :func:`lstm` documents them)."""

    input: core.Variable
    hidden_size: int
    num_layers: int
    dropout_prob: float
    is_bidirec: bool
    is_test: bool
    default_initializer: Initializer | None
    seed: int | None


def _rnn(
    helper: LayerHelper,
    mode: str,
    initial: list[core.Variable | None],
    args: _RnnArgs,
    sequence_length: core.Variable | None,
    param_attr: Any,
    bias_attr: Any,
) -> tuple[Variable, list[Variable]]:
    """The rnn op of ``mode`` and its parameters, from the layer function's arguments; its output and final
    states."""
    input, seed, dropout_prob, is_bidirec = args.input, args.seed, args.dropout_prob, args.is_bidirec
    helper.check_variable(input, "input")
    helper.check_float(input, "input")
    hidden = _positive(helper, args.hidden_size, "hidden_size")
    layers = _positive(helper, args.num_layers, "num_layers")
    if isinstance(dropout_prob, bool) or not isinstance(dropout_prob, (int, float)) or not 0 <= dropout_prob <= 1:
        raise helper.error(f"dropout_prob must be a number in [0, 1], got {dropout_prob!r}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise helper.error(f"seed must be an int, got {seed!r}")
    shape, dtype = tensor_shape(input), tensor_dtype(input)
    if len(shape) != 3 or shape[2] < 0:
        raise helper.error(
            f"input {input.name!r} must be [time steps, batch, input size] with the input size known, got {list(shape)}"
        )
    dirs = 2 if is_bidirec else 1
    attrs = {"param_attr": ParamAttr.to_attr(param_attr), "bias_attr": ParamAttr.to_attr(bias_attr)}
    weights = _parameters(helper, mode, shape[2], hidden, layers, dirs, dtype, args.default_initializer, attrs)
    states = []
    for i, state in enumerate(initial[: state_count(mode)]):
        if state is None:
            state = _zero_state(helper, input, layers * dirs, hidden)
        states.append(helper.check_variable(state, ("init_h", "init_c")[i]))
    inputs: dict[str, Any] = {"Input": [input], "PreState": states, "WeightList": weights}
    if sequence_length is not None:
        helper.check_variable(sequence_length, "sequence_length")
        helper.check_int(sequence_length, "sequence_length")
        inputs["SequenceLength"] = [sequence_length]
    out = helper.create_tmp(dtype)
    finals = [helper.create_tmp(dtype) for _ in states]
    if seed is None or seed < 0:
        program_seed = helper.main_program.random_seed
        seed = framework.derive_seed(program_seed, "rnn", out.name) if program_seed else 0
    helper.append_op(
        "rnn",
        inputs,
        {
            "Out": [out],
            "DropoutState": [helper.create_tmp("uint8", stop_gradient=True)],
            "State": finals,
            "Reserve": [helper.create_tmp(dtype, stop_gradient=True)],
        },
        {
            "dropout_prob": float(dropout_prob),
            "is_bidirec": bool(is_bidirec),
            "input_size": shape[2],
            "hidden_size": hidden,
            "num_layers": layers,
            "mode": mode,
            "seed": seed,
            "is_test": bool(args.is_test),
        },
    )
    return out, finals


def _parameters(
    helper: LayerHelper,
    mode: str,
    width: int,
    hidden: int,
    layers: int,
    dirs: int,
    dtype: str,
    default_initializer: Initializer | None,
    attrs: dict[str, Any],
) -> list[Parameter]:
    """WeightList's parameters, in its order: every W_ih, W_hh by layer and direction, then every b_ih, b_hh
    (``attrs``: the ParamAttrs of ``param_attr`` and ``bias_attr``)."""
    for arg, attr in attrs.items():
        if attr is False:
            raise helper.error(
                f"{arg}=False: the rnn op needs every weight and bias (freeze them with "
                "ParamAttr(trainable=False) instead)"
            )
    bound = 1.0 / math.sqrt(hidden)
    init = default_initializer or Uniform(-bound, bound)
    rows = GATES[mode] * hidden
    weights: list[Parameter] = []
    biases: list[Parameter] = []
    for layer in range(layers):
        below = width if layer == 0 else dirs * hidden
        for _ in range(dirs):
            for shape in ((rows, below), (rows, hidden)):
                weights.append(_parameter(helper, attrs["param_attr"], shape, dtype, False, init, len(weights)))
            for _ in range(2):
                biases.append(_parameter(helper, attrs["bias_attr"], (rows,), dtype, True, init, len(biases)))
    return weights + biases


def _parameter(
    helper: LayerHelper, attr: Any, shape: tuple[int, ...], dtype: str, is_bias: bool, init: Initializer, k: int
) -> Parameter:
    """One parameter; a named ParamAttr names them ``<name>_<k>`` (the weights and the biases counted apart)."""
    if attr.name is not None:
        attr = ParamAttr(f"{attr.name}_{k}", attr.initializer, attr.learning_rate, attr.trainable, attr.device)
    return helper.create_parameter(attr, shape, dtype, is_bias=is_bias, default_initializer=init)


def _zero_state(helper: LayerHelper, input: core.Variable, rows: int, hidden: int) -> Variable:
    """Zeros ``[rows, B, hidden]``, ``B`` read from ``input``'s dim 1 when the program runs (as Paddle's
    ``nn.RNN`` layers make theirs: ``fill_constant`` with a ShapeTensorList)."""
    dims = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("shape", {"Input": [input]}, {"Out": [dims]})
    batch = helper.create_tmp("int32", stop_gradient=True)
    helper.append_op("slice", {"Input": [dims]}, {"Out": [batch]}, {"axes": [0], "starts": [1], "ends": [2]})
    entries = []
    for value in (rows, None, hidden):
        if value is None:
            entries.append(batch)
            continue
        entry = helper.create_tmp("int32", stop_gradient=True)
        helper.append_op(
            "fill_constant",
            outputs={"Out": [entry]},
            attrs={"shape": [1], "dtype": DTYPE_TO_PROTO["int32"], "value": float(value), "force_cpu": True},
        )
        entries.append(entry)
    dtype = tensor_dtype(input)
    zeros = helper.create_tmp(dtype, stop_gradient=True)
    helper.append_op(
        "fill_constant",
        {"ShapeTensorList": entries},
        {"Out": [zeros]},
        {"shape": [rows, -1, hidden], "dtype": DTYPE_TO_PROTO[dtype], "value": 0.0},
    )
    return zeros
