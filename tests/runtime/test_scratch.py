"""Scratch buffers (blockir.ir.schema.Scratch): reused per thread and index on the host, fresh on a device; a
plan's convolutions that use them compute what they compute without them."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import blockir as bir
from blockir.ir.schema import Scratch
from tests.runtime import fake_cupy


def test_a_buffer_is_reused_per_thread_and_index_and_grown_when_too_small() -> None:
    scratch = Scratch()
    a = scratch.empty(np, 0, (4, 5), np.float32)
    b = scratch.empty(np, 0, (2, 3), np.float64)
    assert (a.shape, a.dtype, b.shape, b.dtype) == ((4, 5), np.float32, (2, 3), np.float64)
    assert np.shares_memory(a, b)  # the same buffer, viewed anew
    assert not np.shares_memory(a, scratch.empty(np, 1, (4, 5), np.float32))  # another index
    grown = scratch.empty(np, 0, (100, 100), np.float32)
    assert grown.shape == (100, 100) and not np.shares_memory(grown, a)
    assert np.shares_memory(grown, scratch.empty(np, 0, (10,), np.float32))  # the grown one is kept
    elsewhere: list[np.ndarray] = []
    thread = threading.Thread(target=lambda: elsewhere.append(scratch.empty(np, 0, (10,), np.float32)))
    thread.start()
    thread.join(timeout=10)
    assert not np.shares_memory(elsewhere[0], grown)  # each thread its own


def test_device_arrays_are_made_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = fake_cupy.install(monkeypatch, gpus=1)
    scratch = Scratch()
    a, b = scratch.empty(cupy, 0, (8,), np.float32), scratch.empty(cupy, 0, (8,), np.float32)
    assert isinstance(a, fake_cupy.FakeArray) and not np.shares_memory(a, b)


def _cnn_steps(layout: str) -> list[float]:
    """Three training steps of two convolutions (3x3 and strided, grouped 3x3, and a transposed one) with batch
    norm: the losses and the first filter afterwards."""
    rng = np.random.default_rng(0)
    main, startup = bir.Program(), bir.Program()
    image = [4, 9, 9] if layout == "NCHW" else [9, 9, 4]
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, *image], dtype="float32")
        h = bir.layers.conv2d(x, 8, 3, padding=1, bias_attr=False, data_format=layout)  # read by batch_norm_grad
        h = bir.layers.batch_norm(h, act="relu", data_layout=layout)
        h = bir.layers.conv2d(h, 8, 3, stride=2, groups=2, bias_attr=False, data_format=layout)
        h = bir.layers.conv2d_transpose(h, 4, filter_size=3, stride=2, data_format=layout)
        loss = bir.layers.mean(bir.layers.square(h))
        bir.optimizer.SGD(0.1).minimize(loss)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    for p in main.all_parameters():
        scope.set(p.name, rng.standard_normal(p.shape).astype(np.float32) * 0.3)
    feed = {"x": rng.standard_normal((3, *image)).astype(np.float32)}
    losses = [float(np.asarray(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]).item()) for _ in range(3)]
    first = next(p for p in main.all_parameters() if len(p.shape) == 4)
    return [*losses, *np.asarray(scope.get(first.name)).reshape(-1).tolist()]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_no_kernel_returns_a_scratch_buffer(layout: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training run whose scratch buffers are poisoned (filled with NaN) each time their index is asked for
    again, which is what the next kernel's use does to a value a kernel returned in one, gives to the bit what a
    run with every temporary fresh gives."""
    fresh = (lambda self, xp, index, shape, dtype: xp.empty(shape, dtype),)  # a tuple: not bound as a method
    monkeypatch.setattr(Scratch, "empty", fresh[0])
    expected = _cnn_steps(layout)
    handed: dict[tuple[int, int], np.ndarray] = {}

    def poisoning(self: Scratch, xp: object, index: int, shape: tuple[int, ...], dtype: object) -> np.ndarray:
        key = (id(self), index)
        if key in handed:
            handed[key].fill(np.nan)
        handed[key] = np.empty(shape, dtype)
        return handed[key]

    monkeypatch.setattr(Scratch, "empty", poisoning)
    assert _cnn_steps(layout) == expected
