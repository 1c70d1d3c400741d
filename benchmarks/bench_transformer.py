"""Transformer benchmark: the training step of a small transformer encoder in blockir against PyTorch eager, in one
process (issue 34's goal 4: no regression beside the convolution work).

    python benchmarks/bench_transformer.py [--rounds 5] [--steps 5] [--batch 32] [--threads 1]

The model: inputs [batch, 64, 128] (float32); two post-norm encoder layers (as ``torch.nn.TransformerEncoderLayer``
with ``norm_first=False``, no dropout): multi-head self-attention with 4 heads (query, key, value and output
projections, each a 128 x 128 fc with bias; scores scaled by 1/sqrt(32); softmax), residual, layer_norm; a
feed-forward 128 -> 512 (relu) -> 128, residual, layer_norm; then the mean over the sequence, an fc to 10 classes,
softmax cross-entropy, mean loss; Adam (lr 1e-3, betas 0.9 and 0.999, epsilon 1e-8). blockir runs the program the
DSL builds (``fc`` with ``num_flatten_dims=2``, ``matmul`` with ``transpose_y`` and ``alpha``, ``reshape``,
``transpose``, ``layer_norm``); PyTorch (imported only if installed, not a dependency of blockir) runs
``torch.nn.functional`` with ``torch.optim.Adam``, from the same data and initial weights. The first two losses
(before and after one update) must agree. Timing as bench_cnn.py: rounds of ``--steps`` steps per framework in
turn, the order reversed every other round, a pause of 0.3 s before each turn; the ratio is taken within a round.
"""

from __future__ import annotations

import argparse
import platform
from collections.abc import Callable
from types import ModuleType

import numpy as np
from bench_executor import TORCH_SETTLE, alternate
from bench_peers import blas, machine
from threadpoolctl import threadpool_limits

import blockir as bir

SEQ, WIDTH, HEADS, FF, LAYERS, CLASSES, LR = 64, 128, 4, 512, 2, 10, 1e-3
Step = Callable[[], float]
# each layer's parameters: name -> shape (fc weights are [in, out], as blockir's fc and x @ w in torch)
LAYER_PARAMS = {
    **{f"{p}_{k}": ((WIDTH, WIDTH) if k == "w" else (WIDTH,)) for p in ("q", "k", "v", "o") for k in ("w", "b")},
    "ff1_w": (WIDTH, FF),
    "ff1_b": (FF,),
    "ff2_w": (FF, WIDTH),
    "ff2_b": (WIDTH,),
    "ln1_g": (WIDTH,),
    "ln1_b": (WIDTH,),
    "ln2_g": (WIDTH,),
    "ln2_b": (WIDTH,),
}


def transformer_data(batch: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
    """Inputs [batch, SEQ, WIDTH], labels [batch, 1] and every parameter by name (``L0_q_w``, ..., ``head_w``)."""
    rng = np.random.default_rng(seed)
    params: dict[str, np.ndarray] = {}
    for layer in range(LAYERS):
        for name, shape in LAYER_PARAMS.items():
            if name.startswith("ln"):
                value = np.ones(shape) if name.endswith("_g") else np.zeros(shape)
            elif name.endswith("_b"):
                value = np.zeros(shape)
            else:
                value = rng.normal(scale=shape[0] ** -0.5, size=shape)
            params[f"L{layer}_{name}"] = value.astype(np.float32)
    params["head_w"] = rng.normal(scale=WIDTH**-0.5, size=(WIDTH, CLASSES)).astype(np.float32)
    params["head_b"] = np.zeros(CLASSES, np.float32)
    x = rng.standard_normal((batch, SEQ, WIDTH)).astype(np.float32)
    return x, rng.integers(0, CLASSES, size=(batch, 1)), params


def blockir_transformer(x_value: np.ndarray, labels: np.ndarray, params: dict[str, np.ndarray]) -> Step:
    """The blockir training step."""
    main, startup = bir.Program(), bir.Program()
    head_dim = WIDTH // HEADS

    def fc(h: bir.Variable, size: int, name: str, act: str | None = None) -> bir.Variable:
        attrs = bir.ParamAttr(name=f"{name}_w"), bir.ParamAttr(name=f"{name}_b")
        return bir.layers.fc(h, size, num_flatten_dims=2, param_attr=attrs[0], bias_attr=attrs[1], act=act)

    def norm(h: bir.Variable, name: str) -> bir.Variable:
        gain, bias = bir.ParamAttr(name=f"{name}_g"), bir.ParamAttr(name=f"{name}_b")
        return bir.layers.layer_norm(h, begin_norm_axis=2, param_attr=gain, bias_attr=bias)

    def heads(h: bir.Variable) -> bir.Variable:  # [B, S, D] -> [B, H, S, D / H]
        return bir.layers.transpose(bir.layers.reshape(h, [0, SEQ, HEADS, head_dim]), [0, 2, 1, 3])

    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, SEQ, WIDTH], dtype="float32")
        y = bir.data("y", shape=[-1, 1], dtype="int64")
        h = x
        for layer in range(LAYERS):
            p = f"L{layer}"
            q, k, v = (heads(fc(h, WIDTH, f"{p}_{n}")) for n in ("q", "k", "v"))
            scores = bir.layers.matmul(q, k, transpose_y=True, alpha=head_dim**-0.5)
            context = bir.layers.matmul(bir.layers.softmax(scores), v)
            context = bir.layers.reshape(bir.layers.transpose(context, [0, 2, 1, 3]), [0, SEQ, WIDTH])
            h = norm(bir.layers.elementwise_add(h, fc(context, WIDTH, f"{p}_o")), f"{p}_ln1")
            ff = fc(fc(h, FF, f"{p}_ff1", act="relu"), WIDTH, f"{p}_ff2")
            h = norm(bir.layers.elementwise_add(h, ff), f"{p}_ln2")
        pooled = bir.layers.reduce_mean(h, dim=1)
        logits = bir.layers.fc(
            pooled, CLASSES, param_attr=bir.ParamAttr(name="head_w"), bias_attr=bir.ParamAttr(name="head_b")
        )
        loss = bir.layers.mean(bir.layers.softmax_with_cross_entropy(logits, y))
        bir.optimizer.AdamOptimizer(LR).minimize(loss)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    for name, value in params.items():
        scope.set(name, value.copy())
    feed = {"x": x_value, "y": labels}

    def step() -> float:
        return float(np.asarray(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]).reshape(-1)[0])

    return step


def torch_transformer(
    torch: ModuleType, x_value: np.ndarray, labels: np.ndarray, params: dict[str, np.ndarray]
) -> Step:
    """The same step in PyTorch eager."""
    f = torch.nn.functional
    p = {name: torch.tensor(value, requires_grad=True) for name, value in params.items()}
    optimizer = torch.optim.Adam(list(p.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8)
    x, y = torch.from_numpy(x_value), torch.from_numpy(labels[:, 0])
    head_dim = WIDTH // HEADS

    def heads(h: torch.Tensor) -> torch.Tensor:
        return h.reshape(h.shape[0], SEQ, HEADS, head_dim).transpose(1, 2)

    def step() -> float:
        h = x
        for layer in range(LAYERS):
            w = {name: p[f"L{layer}_{name}"] for name in LAYER_PARAMS}
            q, k, v = (heads(h @ w[f"{n}_w"] + w[f"{n}_b"]) for n in ("q", "k", "v"))
            attention = torch.softmax(q @ k.transpose(-1, -2) * head_dim**-0.5, dim=-1)
            context = (attention @ v).transpose(1, 2).reshape(h.shape[0], SEQ, WIDTH)
            h = f.layer_norm(h + context @ w["o_w"] + w["o_b"], (WIDTH,), w["ln1_g"], w["ln1_b"])
            ff = torch.relu(h @ w["ff1_w"] + w["ff1_b"]) @ w["ff2_w"] + w["ff2_b"]
            h = f.layer_norm(h + ff, (WIDTH,), w["ln2_g"], w["ln2_b"])
        loss = f.cross_entropy(h.mean(dim=1) @ p["head_w"] + p["head_b"], y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss.item())

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds (medians and ranges over them)")
    parser.add_argument("--steps", type=int, default=5, help="training steps per framework per round")
    parser.add_argument("--batch", type=int, default=32, help="sequences per batch")
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads and torch's threads")
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        raise SystemExit("bench_transformer: PyTorch is not installed (the reference of this benchmark)") from None
    torch.set_num_threads(args.threads)
    with threadpool_limits(limits=args.threads):
        print(f"{machine()}; Python {platform.python_version()}; BLAS threads {args.threads} (numpy: {blas()})")
        print(f"numpy {np.__version__}; blockir {bir.__version__}; torch {torch.__version__}")
        data = transformer_data(args.batch)
        steps = {"torch": torch_transformer(torch, *data), "blockir": blockir_transformer(*data)}
        losses = {name: (fn(), fn()) for name, fn in steps.items()}
        if not np.allclose(losses["blockir"], losses["torch"], rtol=2e-4, atol=1e-5):
            raise SystemExit(f"bench_transformer: first losses differ: {losses}")
        t = alternate(steps, args.steps, args.rounds, settle=TORCH_SETTLE)
        low, high = t.spread["blockir"]
        print(f"{args.rounds} rounds of {args.steps} steps, batch {args.batch}, alternating")
        for name in steps:
            print(f"{name:8} {t.seconds[name] * 1e3:8.1f} ms/step")
        print(f"summary: blockir / torch eager {t.ratio['blockir']:.2f}x ({low:.2f}-{high:.2f}), goal <= 1.20x")


if __name__ == "__main__":
    main()
