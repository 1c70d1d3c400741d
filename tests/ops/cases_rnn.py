"""Test cases of the recurrent op ``rnn`` (blockir.ops.rnn), as data: expected values from a plain numpy loop.

The reference runs each sequence of the batch on its own, step by step, up to its length (a backward
direction from its last valid step down), with the cells written out as Paddle documents them; it shares
nothing with the kernel's batched steps and masks. Every mode has a case of 2 bidirectional layers with
SequenceLength and initial states, and one of a forward layer with neither (zero states); the gradient of
each is checked by finite differences. Dropout between layers is checked through the mask of a fixed seed,
which the reference draws as the op does (a numpy ``Generator``), so finite differences see one mask.
"""

from __future__ import annotations

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20261128)
GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return RNG.uniform(-scale, scale, size=shape)


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def _cell(
    mode: str, x: np.ndarray, h: np.ndarray, c: np.ndarray | None, w: list[np.ndarray]
) -> tuple[np.ndarray, np.ndarray | None]:
    """One step of one sequence: the new (h, c)."""
    w_ih, w_hh, b_ih, b_hh = w
    if mode == "LSTM":
        i, f, g, o = np.split(w_ih @ x + b_ih + w_hh @ h + b_hh, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        return _sigmoid(o) * np.tanh(c), c
    if mode == "GRU":
        xr, xz, xn = np.split(w_ih @ x + b_ih, 3)
        hr, hz, hn = np.split(w_hh @ h + b_hh, 3)
        r, z = _sigmoid(xr + hr), _sigmoid(xz + hz)
        n = np.tanh(xn + r * hn)
        return (1.0 - z) * n + z * h, None
    a = w_ih @ x + b_ih + w_hh @ h + b_hh
    return (np.tanh(a) if mode == "RNN_TANH" else np.maximum(a, 0.0)), None


def reference(
    mode: str,
    x: np.ndarray,
    states: list[np.ndarray],
    weights: list[np.ndarray],
    lengths: np.ndarray | None,
    layers: int,
    dirs: int,
    keep: np.ndarray | None = None,
    p: float = 0.0,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """(Out, State) of Paddle's rnn, sequence by sequence and step by step."""
    steps, batch, _ = x.shape
    hidden = states[0].shape[2]
    half = 2 * layers * dirs
    finals = [s.copy() for s in states]
    layer_in = x
    for layer in range(layers):
        if layer and keep is not None:
            layer_in = layer_in * keep / (1.0 - p)
        out = np.zeros((steps, batch, dirs * hidden), dtype=x.dtype)
        for d in range(dirs):
            k = layer * dirs + d
            w = [weights[2 * k], weights[2 * k + 1], weights[half + 2 * k], weights[half + 2 * k + 1]]
            for b in range(batch):
                n = steps if lengths is None else int(lengths[b])
                h = states[0][k, b]
                c = states[1][k, b] if mode == "LSTM" else None
                for t in range(n) if d == 0 else range(n - 1, -1, -1):
                    h, c = _cell(mode, layer_in[t, b], h, c, w)
                    out[t, b, d * hidden : (d + 1) * hidden] = h
                finals[0][k, b] = h
                if mode == "LSTM":
                    finals[1][k, b] = c
        layer_in = out
    return layer_in, finals


def rnn_case(
    mode: str,
    layers: int = 1,
    bidirec: bool = False,
    lengths: list[int] | None = None,
    initial: bool = True,
    steps: int = 3,
    batch: int = 2,
    width: int = 2,
    hidden: int = 2,
    dtype: str = "float64",
    dropout: float = 0.0,
    seed: int = 0,
    is_test: bool = False,
    name: str = "",
) -> Case:
    dirs = 2 if bidirec else 1
    rows = GATES[mode] * hidden
    x = rand(steps, batch, width)
    count = 2 if mode == "LSTM" else 1
    shape = (layers * dirs, batch, hidden)
    states = [rand(*shape) if initial else np.zeros(shape) for _ in range(count)]
    weights, biases = [], []
    for layer in range(layers):
        below = width if layer == 0 else dirs * hidden
        for _ in range(dirs):
            weights += [rand(rows, below), rand(rows, hidden)]
            biases += [rand(rows, scale=0.5), rand(rows, scale=0.5)]
    weights += biases
    keep = None
    if dropout and not is_test and layers > 1:
        draw = np.random.default_rng(seed).random((steps, batch, dirs * hidden), dtype=np.float32)
        keep = (draw >= dropout).astype(np.uint8)
    seq = None if lengths is None else np.array(lengths, dtype=np.int32)
    out, finals = reference(mode, x, states, weights, seq, layers, dirs, keep, dropout)
    cast = [v.astype(dtype) for v in (x, out, *states, *weights, *finals)]
    x, out = cast[0], cast[1]
    states, weights, finals = cast[2 : 2 + count], cast[2 + count : -count], cast[-count:]
    inputs = {"Input": x, "PreState": states, "WeightList": weights}
    if seq is not None:
        inputs["SequenceLength"] = seq
    attrs = {
        "mode": mode,
        "num_layers": layers,
        "is_bidirec": bidirec,
        "input_size": width,
        "hidden_size": hidden,
        "dropout_prob": dropout,
        "seed": seed,
        "is_test": is_test,
    }
    expected = {"Out": out, "State": finals}
    if keep is not None:
        expected["DropoutState"] = keep
    grad = ("Input", "PreState", "WeightList") if dtype == "float64" else ()
    tol = {"rtol": 1e-4, "atol": 1e-5} if dtype == "float32" else {"rtol": 1e-5, "atol": 1e-6}
    return Case(inputs, attrs, expected, grad=grad, name=name, **tol)


CASES: dict[str, list[Case]] = {
    "rnn": [
        *(
            rnn_case(mode, layers=2, bidirec=True, lengths=[3, 1], name=f"{mode.lower()}_2_layers_bidirec_lengths")
            for mode in GATES
        ),
        *(rnn_case(mode, initial=False, name=f"{mode.lower()}_zero_states") for mode in GATES),
        rnn_case("LSTM", layers=2, lengths=[2, 3], name="lstm_2_layers_lengths"),
        rnn_case("GRU", bidirec=True, initial=False, steps=4, name="gru_bidirec_zero_states"),
        rnn_case("LSTM", layers=3, dropout=0.5, seed=7, name="lstm_dropout_seeded"),
        rnn_case("GRU", layers=2, bidirec=True, dropout=0.5, is_test=True, name="gru_dropout_is_test"),
        rnn_case(
            "LSTM",
            layers=2,
            bidirec=True,
            lengths=[4, 2, 3],
            steps=4,
            batch=3,
            width=5,
            hidden=4,
            dtype="float32",
            name="lstm_float32",
        ),
        rnn_case("GRU", layers=2, dtype="float32", width=3, hidden=5, name="gru_float32"),
    ],
}

_GOOD = rnn_case("LSTM", initial=False, name="bad")

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("rnn", Case(_GOOD.inputs, {**_GOOD.attrs, "mode": "LSTMP"}), "mode 'LSTMP' is not one of"),
    ("rnn", Case({**_GOOD.inputs, "PreState": _GOOD.inputs["PreState"][:1]}, _GOOD.attrs), "LSTM takes 2 PreState"),
    (
        "rnn",
        Case({**_GOOD.inputs, "WeightList": _GOOD.inputs["WeightList"][:3]}, _GOOD.attrs),
        "WeightList holds 3 tensors; 1 layers of 1 directions need 4",
    ),
    ("rnn", Case(_GOOD.inputs, {**_GOOD.attrs, "hidden_size": 3}), "= \\[1, 2, 3\\]"),
    ("rnn", Case({**_GOOD.inputs, "Input": _GOOD.inputs["Input"][0]}, _GOOD.attrs), "must be \\[time steps"),
    (
        "rnn",
        Case({**_GOOD.inputs, "SequenceLength": np.array([1, 2, 3], np.int32)}, _GOOD.attrs),
        "SequenceLength .* must be \\[batch\\]",
    ),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    (
        "rnn",
        Case({**_GOOD.inputs, "SequenceLength": np.array([4, 1], np.int32)}, _GOOD.attrs),
        "SequenceLength holds 4, outside \\[0, 3\\] time steps",
    ),
    (
        "rnn",
        Case({**_GOOD.inputs, "SequenceLength": np.array([-1, 1], np.int64)}, _GOOD.attrs),
        "SequenceLength holds -1",
    ),
]
