"""coalesce_tensor's behaviour beyond its values (those are tests/ops/cases_fused.py's): its outputs are views of
FusedOutput, and inputs that already are such views, laid out in order, come back as they are, with their buffer,
nothing allocated nor copied. Run on numpy and on the CuPy stand-in."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from blockir.ir.schema import KernelContext, lookup
from tests.ops.harness import kernel_attrs
from tests.runtime import fake_cupy

COALESCE = lookup("coalesce_tensor")


@pytest.fixture(params=["numpy", "standin"])
def xp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Any:
    return np if request.param == "numpy" else fake_cupy.install(monkeypatch, gpus=1)


def coalesce(xp: Any, inputs: list[Any], wants: bool = True, **attrs: Any) -> tuple[list[Any] | None, Any]:
    ctx = KernelContext(xp, kernel_attrs(COALESCE, {"dtype": 5, **attrs}), (wants, True), "coalesce_tensor (test)")
    return COALESCE.kernel(ctx, inputs)


def arrays(xp: Any) -> list[Any]:
    return [xp.asarray(np.arange(6, dtype="float32").reshape(2, 3)), xp.asarray(np.array([7, 8], "float32"))]


def test_the_outputs_are_views_of_the_fused_output(xp: Any) -> None:
    outputs, fused = coalesce(xp, arrays(xp), copy_data=True)
    assert outputs is not None and all(out.base is fused for out in outputs)
    fused[...] = 0  # what an update over the buffer does, each output sees
    assert all(not out.any() for out in outputs)


def test_inputs_already_laid_out_in_one_buffer_are_returned_as_they_are(xp: Any) -> None:
    views, fused = coalesce(xp, arrays(xp), copy_data=True)
    fused += 1  # an update since: copying the inputs in again would be harmless, reallocating would detach them
    again, same = coalesce(xp, views, copy_data=True)
    assert same is fused and again is not None and all(a is v for a, v in zip(again, views))
    np.testing.assert_array_equal(np.asarray(same), np.array([1, 2, 3, 4, 5, 6, 8, 9], "float32"))
    _, refilled = coalesce(xp, views, set_constant=True, constant=2.0)  # set_constant fills the same buffer
    assert refilled is fused and (np.asarray(fused) == 2).all()


@pytest.mark.parametrize("layout", ["reversed", "one_missing", "two_buffers"])
def test_views_laid_out_otherwise_get_a_new_buffer(xp: Any, layout: str) -> None:
    views, fused = coalesce(xp, arrays(xp), copy_data=True)
    other, _ = coalesce(xp, arrays(xp), copy_data=True)
    assert other is not None
    inputs = {"reversed": views[::-1], "one_missing": views[:1], "two_buffers": [views[0], other[1]]}[layout]
    outputs, new = coalesce(xp, inputs, copy_data=True)
    assert new is not fused and outputs is not None and all(out.base is new for out in outputs)
    np.testing.assert_array_equal(np.asarray(new), np.concatenate([np.asarray(x).reshape(-1) for x in inputs]))


def test_outputs_nobody_reads_are_not_made(xp: Any) -> None:
    outputs, fused = coalesce(xp, arrays(xp), wants=False, copy_data=True)
    assert outputs is None and fused.shape == (8,)
