"""The recurrent op ``rnn`` with Paddle's semantics (its cuDNN-compatible layout), and its gradient ``rnn_grad``.

``rnn`` runs ``num_layers`` layers of one recurrent cell (``mode``: ``LSTM``, ``GRU``, ``RNN_TANH``,
``RNN_RELU``) over a time-major ``Input`` ``[T, B, I]``, each layer forward only or, with ``is_bidirec``, also
backward (its output the two directions' outputs joined on the last dim: ``Out`` is ``[T, B, D * H]``,
``D`` the number of directions). Slots, attributes and layouts are Paddle's:

- ``PreState``: the initial states, ``[h0]`` (``[h0, c0]`` for LSTM), each ``[L * D, B, H]``, entry
  ``layer * D + direction``; ``State``: the final states, alike.
- ``WeightList``: ``4 * L * D`` tensors, first every weight, then every bias, each group by layer then
  direction (forward first): ``[W_ih, W_hh]`` per layer and direction, then ``[b_ih, b_hh]`` per layer and
  direction. ``W_ih`` is ``[G * H, I_layer]`` (``I_layer`` = ``I`` for layer 0, ``D * H`` above),
  ``W_hh`` ``[G * H, H]``, the biases ``[G * H]``, with ``G`` gates in cuDNN's order: LSTM ``i, f, g, o``
  (``c = f * c + i * tanh(g)``, ``h = o * tanh(c)``); GRU ``r, z, n``
  (``n = tanh(x W_in + b_in + r * (h W_hn + b_hn))``, ``h = z * h + (1 - z) * n``); RNN one gate
  (``h = tanh or relu(x W_ih + b_ih + h W_hh + b_hh)``).
- ``SequenceLength`` (optional, int32 or int64 ``[B]``): steps at or past a sequence's length leave its
  state as it was (so the final state is the last valid step's, and a backward direction starts at the
  sequence's last valid step from ``PreState``), and its output there is zero.
- Dropout: in training (``is_test`` false) with ``dropout_prob`` > 0, the input of every layer above the
  first is its layer below's output times a keep-mask over ``1 - dropout_prob`` (upscale in training). As
  Paddle's kernel, one mask of ``Out``'s shape is drawn per run and serves every layer; it is drawn on the
  host with a numpy ``Generator`` seeded by ``seed`` (0: fresh at every run) and is the output
  ``DropoutState`` (uint8; all ones when nothing is dropped).
- ``Reserve`` holds what the gradient reads, in Paddle's rows of ``D * T * B * H`` values: ``G * L`` rows
  of the activated gates (layer by layer, each ``[D, T, B, G * H]``), then per-layer rows of what the
  cell's gradient needs (LSTM: the carried cell state, then ``tanh`` of the new one; GRU: ``h W_hn + b_hn``;
  each ``[D, T, B, H]``), then ``L - 1`` rows of the outputs of the layers below the last (before
  dropout, ``[T, B, D * H]``).

Kernels are written once against ``ctx.xp``. The time loop runs in Python: per layer and direction one
gemm projects the input of every step at once, then each step is one gemm of the batch's states; the
gradient (backpropagation through time) likewise, with the weights' gradients one gemm each over all steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.ir.attrs import AttrType
from blockir.ir.schema import (
    EMPTY_VAR,
    AttrDef,
    GradContext,
    InferContext,
    KernelContext,
    OpSchema,
    OpSpec,
    Slot,
    grad_name,
)
from blockir.ops.common import (
    check_dtype,
    compatible,
    fmt,
    grad_spec,
    infer_grads,
    kernel_error,
    min_max,
    same_dtype,
)

_DTYPES = frozenset({"float32", "float64"})
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}
# Reserve rows per layer besides the gates: LSTM: the carried c and tanh(c_new); GRU: h W_hn + b_hn
_EXTRA_ROWS = {"LSTM": 2, "GRU": 1, "RNN_TANH": 0, "RNN_RELU": 0}

_RNN_ATTRS = (
    AttrDef("dropout_prob", AttrType.FLOAT, 0.0),
    AttrDef("is_bidirec", AttrType.BOOLEAN, False),
    AttrDef("input_size", AttrType.INT, 10),
    AttrDef("hidden_size", AttrType.INT, 100),
    AttrDef("num_layers", AttrType.INT, 1),
    AttrDef("mode", AttrType.STRING, "RNN_TANH"),
    AttrDef("seed", AttrType.INT, 0),
    AttrDef("is_test", AttrType.BOOLEAN, False),
)


def state_count(mode: str) -> int:
    """How many states a cell of ``mode`` carries: 2 for LSTM (h and c), else 1."""
    return 2 if mode == "LSTM" else 1


@dataclass(frozen=True)
class _Shape:
    """The op's sizes from its attributes: mode, layers, directions, hidden size, gates."""

    mode: str
    layers: int
    dirs: int
    hidden: int

    @staticmethod
    def of(attr: Callable[[str], Any]) -> _Shape:
        """From the attributes ``attr`` reads by name."""
        return _Shape(attr("mode"), attr("num_layers"), 2 if attr("is_bidirec") else 1, attr("hidden_size"))

    @property
    def gates(self) -> int:
        return GATES[self.mode]

    def reserve_rows(self) -> int:
        """Paddle's row count of ``Reserve``."""
        return (self.gates + _EXTRA_ROWS[self.mode]) * self.layers + self.layers - 1

    def weights(self, weights: Sequence[Any]) -> list[list[tuple[Any, Any, Any, Any]]]:
        """WeightList regrouped: per layer, per direction, ``(W_ih, W_hh, b_ih, b_hh)``."""
        half = 2 * self.layers * self.dirs
        return [
            [
                (weights[k], weights[k + 1], weights[half + k], weights[half + k + 1])
                for k in (self.weight_index(layer, d) for d in range(self.dirs))
            ]
            for layer in range(self.layers)
        ]

    def weight_index(self, layer: int, d: int) -> int:
        """The position of layer ``layer``'s direction ``d`` W_ih in WeightList (W_hh follows; the biases are
        ``2 * L * D`` further)."""
        return 2 * (layer * self.dirs + d)


# -- inference ---------------------------------------------------------------------------------------------


def _infer_rnn(ctx: InferContext) -> None:
    x = check_dtype(ctx, "Input", _DTYPES)
    mode = ctx.attr("mode")
    if mode not in GATES:
        ctx.fail(f"mode {mode!r} is not one of {', '.join(GATES)}")
    shape = _Shape.of(ctx.attr)
    if shape.layers < 1 or shape.hidden < 1:
        ctx.fail(f"num_layers {shape.layers} and hidden_size {shape.hidden} must be positive")
    if not 0.0 <= ctx.attr("dropout_prob") <= 1.0:
        ctx.fail(f"dropout_prob {ctx.attr('dropout_prob'):g} must be in [0, 1]")
    if len(x.shape) != 3:
        ctx.fail(f"Input {fmt(x)} must be [time steps, batch, input size] (rank 3)")
    steps, batch, width = x.shape
    states = ctx.tensors("PreState")
    if len(states) != state_count(mode):
        ctx.fail(f"{mode} takes {state_count(mode)} PreState tensors, got {len(states)}")
    rows, hidden = shape.layers * shape.dirs, shape.hidden
    for state in states:
        same_dtype(ctx, x, state)
        if len(state.shape) != 3 or not all(compatible(a, b) for a, b in zip(state.shape, (rows, batch, hidden))):
            ctx.fail(
                f"PreState {fmt(state)} must be [num_layers * directions, batch, hidden_size] = "
                f"[{rows}, {batch}, {hidden}]"
            )
        batch = state.shape[1] if batch < 0 else batch
    _check_weights(ctx, shape, width, x)
    if ctx.has_input("SequenceLength"):
        length = check_dtype(ctx, "SequenceLength", frozenset({"int32", "int64"}))
        if len(length.shape) != 1 or not compatible(length.shape[0], batch):
            ctx.fail(f"SequenceLength {fmt(length)} must be [batch] = [{batch}]")
    out = (steps, batch, shape.dirs * hidden)
    ctx.set_output("Out", out, x.dtype)
    ctx.set_output("DropoutState", out, "uint8")
    for i in range(len(ctx.op.outputs.get("State", ()))):
        ctx.set_output("State", (rows, batch, hidden), x.dtype, index=i)
    size = shape.dirs * steps * batch * hidden if steps >= 0 and batch >= 0 else -1
    ctx.set_output("Reserve", (shape.reserve_rows(), size), x.dtype)


def _check_weights(ctx: InferContext, shape: _Shape, width: int, x: Any) -> None:
    weights = ctx.tensors("WeightList")
    if len(weights) != 4 * shape.layers * shape.dirs:
        ctx.fail(
            f"WeightList holds {len(weights)} tensors; {shape.layers} layers of {shape.dirs} directions need "
            f"{4 * shape.layers * shape.dirs} (W_ih, W_hh per layer and direction, then b_ih, b_hh)"
        )
    rows = shape.gates * shape.hidden
    half = 2 * shape.layers * shape.dirs
    for layer in range(shape.layers):
        below = width if layer == 0 else shape.dirs * shape.hidden
        for d in range(shape.dirs):
            k = shape.weight_index(layer, d)
            wanted = ((k, (rows, below)), (k + 1, (rows, shape.hidden)), (half + k, (rows,)), (half + k + 1, (rows,)))
            for index, dims in wanted:
                w = weights[index]
                same_dtype(ctx, x, w)
                if len(w.shape) != len(dims) or not all(compatible(a, b) for a, b in zip(w.shape, dims)):
                    ctx.fail(f"WeightList[{index}] {fmt(w)} of layer {layer}, direction {d} must be {list(dims)}")


# -- forward -----------------------------------------------------------------------------------------------


def _sigmoid(xp: Any, a: Any) -> Any:
    """The logistic function, without overflow: (tanh(a / 2) + 1) / 2."""
    out = xp.tanh(a * 0.5)
    out += 1.0
    out *= 0.5
    return out


def _step_mask(ctx: KernelContext, lengths: Any, steps: int, dtype: Any) -> Any:
    """``[T, B, 1]``: 1 where a step lies before its sequence's length, else 0; None without lengths. A length
    outside ``[0, T]`` is an error naming the op (one read back from a device)."""
    if lengths is None:
        return None
    xp = ctx.xp
    if lengths.size:
        low, high = min_max(xp, lengths)
        if low < 0 or high > steps:
            raise kernel_error(ctx, f"SequenceLength holds {low if low < 0 else high}, outside [0, {steps}] time steps")
    valid = xp.arange(steps)[:, None] < lengths.astype(np.int64)[None, :]
    return valid.astype(dtype)[:, :, None]


@dataclass
class _Direction:
    """One layer's one direction over every step: outputs ``[T, B, H]``, final states, and its Reserve rows."""

    out: Any
    h: Any
    c: Any
    gates: Any  # [T, B, G * H], activated
    extra: list[Any]  # [T, B, H] each (_EXTRA_ROWS)


def _run_direction(
    xp: Any, mode: str, x: Any, w: tuple[Any, Any, Any, Any], h: Any, c: Any, mask: Any, reverse: bool
) -> _Direction:
    w_ih, w_hh, b_ih, b_hh = w
    steps, batch = x.shape[:2]
    hidden = w_hh.shape[1]
    proj = xp.matmul(x.reshape(steps * batch, x.shape[2]), w_ih.T).reshape(steps, batch, w_ih.shape[0])
    proj += b_ih
    if mode == "GRU":  # b_hn goes inside r * (h W_hn + b_hn)
        proj[:, :, : 2 * hidden] += b_hh[: 2 * hidden]
    else:
        proj += b_hh
    gates = xp.empty_like(proj)
    out = xp.empty((steps, batch, hidden), dtype=x.dtype)
    extra = [xp.empty_like(out) for _ in range(_EXTRA_ROWS[mode])]
    for t in range(steps - 1, -1, -1) if reverse else range(steps):
        a = xp.matmul(h, w_hh.T)
        g = gates[t]
        c_new = None
        if mode == "LSTM":
            a += proj[t]
            g[:, : 2 * hidden] = _sigmoid(xp, a[:, : 2 * hidden])
            g[:, 2 * hidden : 3 * hidden] = xp.tanh(a[:, 2 * hidden : 3 * hidden])
            g[:, 3 * hidden :] = _sigmoid(xp, a[:, 3 * hidden :])
            c_new = g[:, hidden : 2 * hidden] * c + g[:, :hidden] * g[:, 2 * hidden : 3 * hidden]
            extra[1][t] = xp.tanh(c_new)
            h_new = g[:, 3 * hidden :] * extra[1][t]
        elif mode == "GRU":
            hn = a[:, 2 * hidden :] + b_hh[2 * hidden :]
            extra[0][t] = hn
            g[:, : 2 * hidden] = _sigmoid(xp, proj[t][:, : 2 * hidden] + a[:, : 2 * hidden])
            g[:, 2 * hidden :] = xp.tanh(proj[t][:, 2 * hidden :] + g[:, :hidden] * hn)
            z = g[:, hidden : 2 * hidden]
            h_new = z * h + (1.0 - z) * g[:, 2 * hidden :]
        else:
            a += proj[t]
            g[...] = xp.tanh(a) if mode == "RNN_TANH" else xp.maximum(a, 0.0)
            h_new = g
        if mask is None:
            out[t] = h_new
            h, c = out[t], c_new
        else:
            m = mask[t]
            out[t] = h_new * m
            h = out[t] + (1.0 - m) * h
            if c_new is not None:
                c = c_new * m + (1.0 - m) * c
        if c_new is not None:
            extra[0][t] = c
    return _Direction(out, h, c, gates, extra)


def _dropout_mask(ctx: KernelContext, shape: tuple[int, ...]) -> Any:
    """The uint8 keep-mask between layers (module docstring), or None when nothing is dropped."""
    attrs = ctx.attrs
    p = attrs["dropout_prob"]
    if attrs["is_test"] or p == 0.0 or attrs["num_layers"] == 1:
        return None
    rng = np.random.default_rng(attrs["seed"] or None)
    return ctx.xp.asarray((rng.random(shape, dtype=np.float32) >= p).astype(np.uint8))


def _dropped(xp: Any, value: Any, keep: Any, p: float) -> Any:
    """``value`` through the keep-mask ``keep`` (upscaled by 1 / (1 - p)); ``value`` when ``keep`` is None."""
    if keep is None:
        return value
    if p == 1.0:
        return xp.zeros_like(value)
    return value * keep.astype(value.dtype) * (1.0 / (1.0 - p))


def _rnn(
    ctx: KernelContext, x: Any, pre_state: list[Any], weights: list[Any], lengths: Any
) -> tuple[Any, Any, list[Any], Any]:
    """(Out, DropoutState, State, Reserve): see the module docstring."""
    xp, attrs = ctx.xp, ctx.attrs
    shape = _Shape.of(attrs.__getitem__)
    steps, batch = x.shape[:2]
    hidden, dirs = shape.hidden, shape.dirs
    mask = _step_mask(ctx, lengths, steps, x.dtype)
    keep = _dropout_mask(ctx, (steps, batch, dirs * hidden))
    h0 = pre_state[0]
    c0 = pre_state[1] if shape.mode == "LSTM" else None
    last = [xp.empty_like(s) for s in pre_state]
    runs: list[list[_Direction]] = []
    outs: list[Any] = []  # each layer's output
    for layer, ws in enumerate(shape.weights(weights)):
        layer_in = _dropped(xp, outs[-1], keep, attrs["dropout_prob"]) if layer else x
        runs.append([])
        for d, w in enumerate(ws):
            k = layer * dirs + d
            run = _run_direction(xp, shape.mode, layer_in, w, h0[k], None if c0 is None else c0[k], mask, d == 1)
            runs[-1].append(run)
            last[0][k] = run.h
            if c0 is not None:
                last[1][k] = run.c
        outs.append(runs[-1][0].out if dirs == 1 else xp.concatenate([r.out for r in runs[-1]], axis=2))
    dropout_state = None
    if ctx.wants[1]:
        dropout_state = keep if keep is not None else xp.ones((steps, batch, dirs * hidden), dtype=np.uint8)
    reserve = _pack(xp, shape, runs, outs, x.dtype) if ctx.wants[3] else None
    return outs[-1], dropout_state, last, reserve


def _pack(xp: Any, shape: _Shape, runs: list[list[_Direction]], outs: list[Any], dtype: Any) -> Any:
    """Reserve from the runs of every layer and direction and the layers' outputs (module docstring)."""
    steps, batch, hidden = runs[0][0].out.shape
    reserve = xp.empty((shape.reserve_rows(), shape.dirs * steps * batch * hidden), dtype=dtype)
    view = _Reserve(shape, reserve, steps, batch)
    for layer, layer_runs in enumerate(runs):
        for d, run in enumerate(layer_runs):
            view.gates[layer, d] = run.gates
            for e, value in enumerate(run.extra):
                view.extra[e][layer, d] = value
        if layer < shape.layers - 1:
            view.hidden[layer] = outs[layer]
    return reserve


class _Reserve:
    """Views of Reserve's rows: ``gates`` [L, D, T, B, G * H], ``extra[e]`` [L, D, T, B, H], ``hidden``
    [L - 1, T, B, D * H]."""

    def __init__(self, shape: _Shape, reserve: Any, steps: int, batch: int) -> None:
        layers, dirs, hidden, gates = shape.layers, shape.dirs, shape.hidden, shape.gates
        self.gates = reserve[: gates * layers].reshape(layers, dirs, steps, batch, gates * hidden)
        self.extra = [
            reserve[(gates + e) * layers : (gates + e + 1) * layers].reshape(layers, dirs, steps, batch, hidden)
            for e in range(_EXTRA_ROWS[shape.mode])
        ]
        start = (gates + _EXTRA_ROWS[shape.mode]) * layers
        self.hidden = reserve[start:].reshape(layers - 1, steps, batch, dirs * hidden)


# -- gradient ----------------------------------------------------------------------------------------------


@dataclass
class _DirectionGrad:
    dx_proj: Any  # [T, B, G * H]: the gradient of the input projection (x W_ih^T + its biases)
    dh_proj: Any  # [T, B, G * H]: the gradient of h W_hh^T (+ b_hh)
    h_prev: Any  # [T, B, H]: the state each step read
    dh: Any
    dc: Any


def _direction_grad(
    xp: Any,
    mode: str,
    w_hh: Any,
    state: tuple[Any, Any],
    mask: Any,
    reverse: bool,
    out: Any,
    gates: Any,
    extra: Sequence[Any],
    dout: Any,
    dstate: tuple[Any, Any],
) -> _DirectionGrad:
    """Backpropagation through one layer's one direction, from its outputs' and final states' gradients."""
    steps, batch, hidden = out.shape
    order = list(range(steps - 1, -1, -1) if reverse else range(steps))
    h_prev = xp.empty_like(out)
    h = state[0]
    for t in order:  # the states each step read, carried past masked steps
        h_prev[t] = h
        h = out[t] if mask is None else out[t] + (1.0 - mask[t]) * h
    dx_proj = xp.empty_like(gates)
    dh_proj = xp.empty_like(gates) if mode == "GRU" else dx_proj
    dh, dc = dstate  # never written in place: each step makes new arrays
    for i in range(len(order) - 1, -1, -1):
        t = order[i]
        m = None if mask is None else mask[t]
        dh_new = dh + dout[t] if m is None else (dh + dout[t]) * m
        carry = None if m is None else dh * (1.0 - m)
        g, da = gates[t], dx_proj[t]
        if mode == "LSTM":
            gi, gf, gg, go = (g[:, j * hidden : (j + 1) * hidden] for j in range(4))
            tc = extra[1][t]
            c_prev = state[1] if i == 0 else extra[0][order[i - 1]]
            dc_new = dh_new * go * (1.0 - tc * tc) + (dc if m is None else dc * m)
            da[:, :hidden] = dc_new * gg * gi * (1.0 - gi)
            da[:, hidden : 2 * hidden] = dc_new * c_prev * gf * (1.0 - gf)
            da[:, 2 * hidden : 3 * hidden] = dc_new * gi * (1.0 - gg * gg)
            da[:, 3 * hidden :] = dh_new * tc * go * (1.0 - go)
            dc = dc_new * gf if m is None else dc_new * gf + dc * (1.0 - m)
            dh = xp.matmul(da, w_hh)
        elif mode == "GRU":
            r, z, n = (g[:, j * hidden : (j + 1) * hidden] for j in range(3))
            dn = dh_new * (1.0 - z) * (1.0 - n * n)
            da[:, :hidden] = dn * extra[0][t] * r * (1.0 - r)
            da[:, hidden : 2 * hidden] = dh_new * (h_prev[t] - n) * z * (1.0 - z)
            da[:, 2 * hidden :] = dn
            dh_proj[t, :, : 2 * hidden] = da[:, : 2 * hidden]
            dh_proj[t, :, 2 * hidden :] = dn * r
            dh = xp.matmul(dh_proj[t], w_hh) + dh_new * z
        else:
            da[...] = dh_new * (1.0 - g * g) if mode == "RNN_TANH" else dh_new * (g > 0).astype(g.dtype)
            dh = xp.matmul(da, w_hh)
        if carry is not None:
            dh += carry
    return _DirectionGrad(dx_proj, dh_proj, h_prev, dh, dc)


def _rnn_grad(
    ctx: KernelContext,
    x: Any,
    pre_state: list[Any],
    weights: list[Any],
    lengths: Any,
    out: Any,
    dropout_state: Any,
    reserve: Any,
    dout: Any,
    dstate: list[Any],
) -> tuple[Any, Any, Any]:
    """(Input@GRAD, PreState@GRAD, WeightList@GRAD) by backpropagation through time over Reserve's values."""
    xp, attrs = ctx.xp, ctx.attrs
    shape = _Shape.of(attrs.__getitem__)
    steps, batch = x.shape[:2]
    hidden, dirs, lstm = shape.hidden, shape.dirs, shape.mode == "LSTM"
    want_x, want_state, want_w = ctx.wants
    mask = _step_mask(ctx, lengths, steps, x.dtype)
    keep = None
    if not attrs["is_test"] and attrs["dropout_prob"] > 0.0 and shape.layers > 1:
        keep = dropout_state
    view = _Reserve(shape, reserve, steps, batch)
    grouped = shape.weights(weights)
    dweights: list[Any] = [None] * len(weights)
    dstates = [xp.empty_like(s) for s in pre_state]
    half = 2 * shape.layers * dirs
    dy = dout
    for layer in range(shape.layers - 1, -1, -1):
        layer_out = out if layer == shape.layers - 1 else view.hidden[layer]
        below = x if layer == 0 else _dropped(xp, view.hidden[layer - 1], keep, attrs["dropout_prob"])
        flat_in = below.reshape(steps * batch, below.shape[2])
        dx = None
        for d in range(dirs):
            k = layer * dirs + d
            w_ih, w_hh = grouped[layer][d][:2]
            part = slice(d * hidden, (d + 1) * hidden)
            run = _direction_grad(
                xp,
                shape.mode,
                w_hh,
                (pre_state[0][k], pre_state[1][k] if lstm else None),
                mask,
                d == 1,
                layer_out[:, :, part],
                view.gates[layer, d],
                [e[layer, d] for e in view.extra],
                dy[:, :, part],
                (dstate[0][k], dstate[1][k] if lstm else None),
            )
            dstates[0][k] = run.dh
            if lstm:
                dstates[1][k] = run.dc
            dx_proj = run.dx_proj.reshape(steps * batch, w_ih.shape[0])
            if layer or want_x:
                moved = xp.matmul(dx_proj, w_ih).reshape(steps, batch, w_ih.shape[1])
                dx = moved if dx is None else dx + moved
            if want_w:
                dh_proj = run.dh_proj.reshape(steps * batch, w_ih.shape[0])
                i = shape.weight_index(layer, d)
                dweights[i] = xp.matmul(dx_proj.T, flat_in)
                dweights[i + 1] = xp.matmul(dh_proj.T, run.h_prev.reshape(steps * batch, hidden))
                dweights[half + i] = dx_proj.sum(axis=0)
                dweights[half + i + 1] = dh_proj.sum(axis=0)
        if layer:
            dy = _dropped(xp, dx, keep, attrs["dropout_prob"])
        else:
            dy = dx
    return (dy if want_x else None), (dstates if want_state else None), (dweights if want_w else None)


RNN_GRAD = OpSchema(
    "rnn_grad",
    inputs=(
        Slot("Input"),
        Slot("PreState", duplicable=True),
        Slot("WeightList", duplicable=True),
        Slot("SequenceLength", optional=True),
        Slot("Out"),
        Slot("DropoutState", optional=True),
        Slot("Reserve"),
        Slot("Out@GRAD"),
        Slot("State@GRAD", duplicable=True),
    ),
    outputs=(
        Slot("Input@GRAD"),
        Slot("PreState@GRAD", duplicable=True),
        Slot("WeightList@GRAD", duplicable=True),
    ),
    attrs=_RNN_ATTRS,
    infer=infer_grads("Input", "PreState", "WeightList"),
    kernel=_rnn_grad,
    doc="Gradient of rnn: backpropagation through time over Reserve's activations.",
)


def _grad_rnn(g: GradContext) -> list[OpSpec]:
    """rnn_grad, with zeros (``fill_zeros_like``) for the gradients of outputs nothing differentiates."""
    specs: list[OpSpec] = []
    douts: dict[str, list[str]] = {}
    for slot in ("Out", "State"):
        douts[slot] = []
        for name, dname in zip(g.output(slot), g.output_grad(slot)):
            if dname == EMPTY_VAR:
                dname = grad_name(name)
                specs.append(OpSpec("fill_zeros_like", {"X": [name]}, {"Out": [dname]}))
            douts[slot].append(dname)
    inputs = {
        "Input": g.input("Input"),
        "PreState": g.input("PreState"),
        "WeightList": g.input("WeightList"),
        "SequenceLength": g.input("SequenceLength"),
        "Out": g.output("Out"),
        "DropoutState": g.output("DropoutState"),
        "Reserve": g.output("Reserve"),
        "Out@GRAD": douts["Out"],
        "State@GRAD": douts["State"],
    }
    made = grad_spec(g, RNN_GRAD, inputs, ("Input", "PreState", "WeightList"))
    return [*specs, *made] if made else []


RNN = OpSchema(
    "rnn",
    inputs=(
        Slot("Input"),
        Slot("PreState", duplicable=True),
        Slot("WeightList", duplicable=True),
        Slot("SequenceLength", optional=True, no_grad=True),
    ),
    outputs=(
        Slot("Out"),
        Slot("DropoutState", optional=True, no_grad=True),
        Slot("State", duplicable=True),
        Slot("Reserve", no_grad=True),
    ),
    attrs=_RNN_ATTRS,
    infer=_infer_rnn,
    grad=_grad_rnn,
    kernel=_rnn,
    doc="LSTM, GRU or a simple RNN (tanh, relu) over time-major Input: num_layers, bidirectional, initial "
    "states, SequenceLength, dropout between layers (Paddle's cuDNN-compatible weight layout).",
)

SCHEMAS: tuple[OpSchema, ...] = (RNN, RNN_GRAD)
