"""``blockir demo``: the whole job end to end on embedded data, on the CPU.

Builds an MLP with the DSL, trains it on a generated three-class data set (no
download, no server, no GPU), saves it with ``save_inference_model``, then
serves it with ``blockir run`` in a subprocess and checks that the predictions
match the Python session's.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

import blockir as bir
from blockir.cli.common import output_dir, positive
from blockir.ir import Program, Variable


def make_data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Three interleaved spirals in 2-D, lifted to 16 features with fixed random projections."""
    rng = np.random.default_rng(seed)
    label = rng.integers(0, 3, size=n)
    t = rng.random(n) * 3.0 + 0.3
    angle = t * 2.2 + label * (2 * np.pi / 3) + rng.normal(scale=0.12, size=n)
    xy = np.stack([t * np.cos(angle), t * np.sin(angle)], axis=1)
    proj = np.random.default_rng(1234).normal(size=(2, 16))
    feats = np.concatenate([xy, np.tanh(xy @ proj)[:, :14]], axis=1)
    return feats.astype("float32"), label.astype("int64").reshape(-1, 1)


def build(seed: int = 7) -> tuple[Program, Program, Program, Variable, Variable]:
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 16], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=64, act="relu")
        h = bir.layers.fc(h, size=64, act="relu")
        pred = bir.layers.fc(h, size=3, act="softmax", name="pred")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        bir.optimizer.Adam(learning_rate=0.01).minimize(loss)
    test = main.clone(for_test=True)  # Fluid's idiom: no backward or Adam ops, the same variables
    return main, startup, test, pred, loss


def describe(test: Program, main: Program) -> list[str]:
    """The model in the text form: its inputs, its parameters and its ops; none of the gradients and optimizer
    state that training adds (``main`` has them, and its ops are only counted)."""
    block = test.global_block()
    inputs = [v for v in block.vars.values() if v.need_check_feed]
    params = test.all_parameters()
    return [
        f"the model ({len(inputs)} inputs, {len(params)} parameters, {len(block.ops)} ops; training adds "
        f"backward and Adam ops, {sum(len(b.ops) for b in main.blocks)} ops in all):",
        *(f"  {v!r}" for v in (*inputs, *params)),
        *(f"  {op}" for op in block.ops),
    ]


def run(workdir: str | Path, epochs: int = 40, out: Callable[[str], object] = print, keep: bool = True) -> int:
    """Train, save, serve with ``blockir run``; return 0 when the served predictions match.

    ``keep``: whether ``workdir`` stays afterwards; only then is the ``blockir run`` command printed (a command
    for files that are gone would fail).
    """
    work = Path(workdir)
    work.mkdir(parents=True, exist_ok=True)
    x_train, y_train = make_data(3000, seed=0)
    x_test, y_test = make_data(600, seed=1)
    main, startup, test, pred, loss = build()
    for line in describe(test, main):
        out(line)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    rng = np.random.default_rng(0)
    for epoch in range(epochs):
        order = rng.permutation(len(x_train))
        losses = [
            exe.run(main, feed={"x": x_train[b], "label": y_train[b]}, fetch_list=[loss], scope=scope)[0]
            for b in np.array_split(order, len(order) // 64)
        ]
        if epoch % 10 == 9:
            out(f"epoch {epoch + 1:3d}  loss {float(np.mean(losses)):.4f}")
    (probs,) = exe.run(test, feed={"x": x_test, "label": y_test}, fetch_list=[pred], scope=scope)
    accuracy = float((probs.argmax(axis=1) == y_test[:, 0]).mean())
    out(f"test accuracy {accuracy:.4f}")

    model_dir = work / "model"
    with bir.scope_guard(scope):
        bir.io.save_inference_model(str(model_dir), ["x"], [pred], exe, main_program=main)
    np.save(work / "batch.npy", x_test[:8])
    cmd = [
        sys.executable,
        "-m",
        "blockir.cli",
        "run",
        str(model_dir / "program.pb"),
        "--feed",
        f"x={work / 'batch.npy'}",
        "--out",
        str(work / "out.npz"),
    ]
    if keep:
        out("$ blockir run " + shlex.join(cmd[4:]))
    else:
        out("serving the saved model with `blockir run` in a subprocess")
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        out(done.stderr.strip())
        return 1
    served = np.load(work / "out.npz", allow_pickle=False)[pred.name]
    same = np.allclose(served, probs[:8], rtol=1e-5, atol=1e-6)
    out(f"served predictions {'match' if same else 'DIFFER FROM'} the Python session: {served.argmax(axis=1).tolist()}")
    if accuracy <= 0.9:
        out(f"the test accuracy {accuracy:.4f} is not above 0.9: train for more epochs (--epochs)")
    if not keep:
        out(
            "(the model was saved in a temporary directory, removed now: --workdir DIR keeps it, and prints the "
            "`blockir run` command that serves it)"
        )
    return 0 if same and accuracy > 0.9 else 1


def command(args: argparse.Namespace) -> int:
    if args.workdir is not None:
        output_dir(args.workdir, "--workdir")
        return run(args.workdir, epochs=args.epochs)
    with tempfile.TemporaryDirectory(prefix="blockir-demo-") as workdir:
        return run(workdir, epochs=args.epochs, keep=False)


def add(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "demo",
        help="train a model, save it and serve it with `blockir run` (CPU)",
        description="Build an MLP with the DSL, train it on generated data, save it with "
        "save_inference_model and serve it with `blockir run`; exit 0 when the "
        "served predictions match the Python session's.",
    )
    p.add_argument(
        "--workdir",
        metavar="DIR",
        default=None,
        help="where the model and arrays go, kept afterwards, with the `blockir run` command that serves them "
        "printed (default: a temporary directory, removed afterwards)",
    )
    p.add_argument("--epochs", metavar="N", type=positive, default=40, help="training epochs (default 40)")
    p.set_defaults(func=command)
