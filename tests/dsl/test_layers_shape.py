"""The shape layers (transpose, flatten, squeeze, unsqueeze, split, slice; concat and reshape too) in programs.

Each layer's program runs on the CPU executor against numpy, and its gradient comes through
``append_backward`` on a small loss, ``mean(out * w)`` for a fed ``w``: the ops are linear, so dLoss/dx is
``J^T w / out.size``, with J's columns the numpy reference applied to the unit vectors of x's shape.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError

RNG = np.random.default_rng(7)


def _types(main: bir.Program) -> list[str]:
    return [op.type for op in main.global_block().ops]


def _run(main: bir.Program, feed: dict, fetch: list) -> list[np.ndarray]:
    return bir.Executor("cpu").run(main, feed=feed, fetch_list=fetch)


def _adjoint(reference: Callable[[np.ndarray], np.ndarray], x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """d mean(reference(x) * w) / dx of a linear ``reference``, one unit vector of x at a time."""
    grad = np.zeros(x.shape)
    for index in np.ndindex(*x.shape):
        unit = np.zeros(x.shape)
        unit[index] = 1.0
        grad[index] = np.sum(reference(unit) * w) / w.size
    return grad


# (layer call on x, numpy reference, op types emitted, inferred shape of the result) for x of shape [-1, 3, 4]
LAYERS = [
    (lambda x: bir.layers.transpose(x, [2, 0, 1]), lambda a: a.transpose(2, 0, 1), ["transpose2"], (4, -1, 3)),
    (lambda x: bir.layers.transpose(x, [0, -1, 1]), lambda a: a.transpose(0, 2, 1), ["transpose2"], (-1, 4, 3)),
    (lambda x: bir.layers.flatten(x), lambda a: a.reshape(a.shape[0], 12), ["flatten_contiguous_range"], (-1, 12)),
    (
        lambda x: bir.layers.flatten(x, axis=2),
        lambda a: a.reshape(-1, 4),
        ["flatten_contiguous_range", "flatten_contiguous_range"],
        (-1, 4),
    ),
    (
        lambda x: bir.layers.flatten(x, axis=0),
        lambda a: a.reshape(1, -1),
        ["unsqueeze2", "flatten_contiguous_range"],
        (1, -1),
    ),
    (
        lambda x: bir.layers.flatten(x, axis=3),
        lambda a: a.reshape(-1, 1),
        ["flatten_contiguous_range", "unsqueeze2"],
        (-1, 1),
    ),
    (lambda x: bir.layers.unsqueeze(x, [1, -1]), lambda a: a[:, None, :, :, None], ["unsqueeze2"], (-1, 1, 3, 4, 1)),
    (lambda x: bir.layers.unsqueeze(x, 0), lambda a: a[None], ["unsqueeze2"], (1, -1, 3, 4)),
    (
        lambda x: bir.layers.squeeze(bir.layers.unsqueeze(x, [2]), [2, 1]),
        lambda a: a,
        ["unsqueeze2", "squeeze2"],
        (-1, 3, 4),
    ),
    (lambda x: bir.layers.slice(x, [1, 2], [1, -3], [3, 100]), lambda a: a[:, 1:3, 1:4], ["slice"], (-1, 2, 3)),
    (lambda x: bir.layers.slice(x, [0], [-1], [1000]), lambda a: a[-1:], ["slice"], (-1, 3, 4)),
    (lambda x: bir.layers.reshape(x, [0, 2, -1]), lambda a: a.reshape(a.shape[0], 2, 6), ["reshape2"], (-1, 2, 6)),
    (lambda x: bir.layers.concat([x, x], axis=-1), lambda a: np.concatenate([a, a], -1), ["concat"], (-1, 3, 8)),
]


@pytest.mark.parametrize(("build", "reference", "op_types", "shape"), LAYERS)
def test_layer_values_and_gradient(progs, build, reference, op_types, shape):
    main, _ = progs
    x = bir.data("x", shape=[-1, 3, 4], dtype="float64")
    x.stop_gradient = False
    out = build(x)
    assert _types(main) == op_types
    assert (out.shape, out.dtype) == (shape, "float64")
    bir.ir.verify(main)
    x_value = RNG.standard_normal((2, 3, 4))
    expected = reference(x_value)
    w_value = RNG.standard_normal(expected.shape)
    w = bir.data("w", shape=list(expected.shape), dtype="float64")
    bir.append_backward(bir.layers.mean(bir.layers.elementwise_mul(out, w)))
    bir.ir.verify(main)
    value, grad = _run(main, {"x": x_value, "w": w_value}, [out, "x@GRAD"])
    np.testing.assert_array_equal(value, expected)
    np.testing.assert_allclose(grad, _adjoint(reference, x_value, w_value), rtol=1e-12, atol=1e-15)


def test_split_parts_and_gradient_with_parts_left_out(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 6], dtype="float64")
    x.stop_gradient = False
    first, middle, last = bir.layers.split(x, [1, -1, 2], dim=1)
    assert [v.shape for v in (first, middle, last)] == [(-1, 1), (-1, 3), (-1, 2)]
    halves = bir.layers.split(x, 2, dim=-1)
    assert [v.shape for v in halves] == [(-1, 3), (-1, 3)]
    assert _types(main) == ["split", "split"]
    w = bir.data("w", shape=[-1, 3], dtype="float64")
    bir.append_backward(bir.layers.mean(bir.layers.elementwise_mul(middle, w)))
    # the parts nothing differentiates get zero gradients, joined with the other by concat (as Paddle)
    assert [t for t in _types(main) if t in ("fill_zeros_like", "concat")] == ["fill_zeros_like"] * 2 + ["concat"]
    bir.ir.verify(main)
    x_value, w_value = RNG.standard_normal((2, 6)), RNG.standard_normal((2, 3))
    values = _run(main, {"x": x_value, "w": w_value}, [first, middle, last, *halves, "x@GRAD"])
    for value, expected in zip(
        values, [x_value[:, :1], x_value[:, 1:4], x_value[:, 4:], x_value[:, :3], x_value[:, 3:]]
    ):
        np.testing.assert_array_equal(value, expected)
    expected_grad = np.zeros((2, 6))
    expected_grad[:, 1:4] = w_value / w_value.size
    np.testing.assert_allclose(values[-1], expected_grad, rtol=1e-12)


def test_split_gradient_of_every_part(progs):
    main, _ = progs
    x = bir.data("x", shape=[4, 2], dtype="float64")
    x.stop_gradient = False
    parts = bir.layers.split(x, 2, dim=0)
    loss = bir.layers.mean(bir.layers.concat([bir.layers.scale(parts[0], 2.0), parts[1]], axis=1))
    bir.append_backward(loss)
    assert "fill_zeros_like" not in _types(main)
    (grad,) = _run(main, {"x": RNG.standard_normal((4, 2))}, ["x@GRAD"])
    np.testing.assert_allclose(grad, np.array([[2.0, 2.0]] * 2 + [[1.0, 1.0]] * 2) / 8)


def test_squeeze_inference_follows_paddle(progs):
    """A listed dim of size 1 goes; one of another size stays; an unknown one is taken to be 1 (Paddle's
    inference), and the run keeps it when it is not."""
    main, _ = progs
    x = bir.data("x", shape=[-1, 1, 3], dtype="float32")
    assert bir.layers.squeeze(x, [1, 2]).shape == (-1, 3)
    assert bir.layers.squeeze(x, []).shape == (-1, 3)
    dropped = bir.layers.squeeze(x, [0, 1])
    assert dropped.shape == (3,)
    (value,) = _run(main, {"x": np.ones((2, 1, 3), np.float32)}, [dropped])
    assert value.shape == (2, 3)


def test_slice_and_flatten_of_other_ranks(progs):
    main, _ = progs
    v = bir.data("v", shape=[5], dtype="int64")
    one = bir.layers.flatten(v, axis=1)
    row = bir.layers.flatten(v, axis=0)
    tail = bir.layers.slice(v, [0], [-2], [5])
    assert (one.shape, row.shape, tail.shape) == ((5, 1), (1, 5), (2,))
    data = np.arange(5, dtype=np.int64)
    values = _run(main, {"v": data}, [one, row, tail])
    for value, expected in zip(values, [data.reshape(5, 1), data.reshape(1, 5), data[3:]]):
        np.testing.assert_array_equal(value, expected)


def test_layers_reject_bad_arguments(progs):
    x = bir.data("x", shape=[-1, 3, 4])
    with pytest.raises(ShapeError, match=r"layers\.transpose: transpose2: axis \[1, 0\] is not a permutation"):
        bir.layers.transpose(x, [1, 0])
    with pytest.raises(ShapeError, match=r"layers\.transpose: perm must be a list of ints"):
        bir.layers.transpose(x, "102")
    with pytest.raises(ShapeError, match=r"layers\.flatten: axis must be an int in \[0, 3\]"):
        bir.layers.flatten(x, axis=4)
    with pytest.raises(ShapeError, match=r"layers\.squeeze: squeeze2: axes entry 3 is out of range"):
        bir.layers.squeeze(x, [3])
    with pytest.raises(ShapeError, match=r"layers\.unsqueeze: unsqueeze2: axes entry 5 is out of range"):
        bir.layers.unsqueeze(x, 5)
    with pytest.raises(ShapeError, match=r"layers\.split: split: X's dim 4 .* does not divide into num=3"):
        bir.layers.split(x, 3)
    with pytest.raises(ShapeError, match=r"layers\.split: split: sections \[1, 1\] add up to 2, not to X's dim 3"):
        bir.layers.split(x, [1, 1], dim=1)
    with pytest.raises(ShapeError, match=r"layers\.split: num_or_sections must be a positive int"):
        bir.layers.split(x, 0)
    with pytest.raises(ShapeError, match=r"layers\.slice: slice: starts \[0, 1\] must have one entry per entry"):
        bir.layers.slice(x, [1], [0, 1], [2])
    with pytest.raises(ShapeError, match=r"layers\.slice: slice: the slice \[2, 1\) of a dim of size 3 ends before"):
        bir.layers.slice(x, [1], [2], [1])
    with pytest.raises(BlockirError, match=r"layers\.slice: input must be a Variable"):
        bir.layers.slice(np.zeros(3), [0], [0], [1])


def test_a_runtime_dim_the_program_did_not_know_is_checked(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 4], dtype="float32")
    parts = bir.layers.split(x, 2, dim=0)
    with pytest.raises(BlockirError, match=r"split: X's dim 3 on the split axis does not divide into num=2 parts"):
        _run(main, {"x": np.zeros((3, 4), np.float32)}, parts)


def test_values_given_by_tensors_as_paddle_programs_carry_them(progs):
    """Paddle's programs may give a shape, axes, sections or bounds as int tensors: they are read at run time."""
    main, _ = progs
    block = main.global_block()
    x = bir.data("x", shape=[-1, 3, 4], dtype="float32")
    ints = {
        name: bir.layers.fill_constant([1], dtype, value)
        for name, dtype, value in [("two", "int32", 2), ("minus_one", "int64", -1), ("one", "int32", 1)]
    }

    def op(op_type, inputs, outputs, attrs):
        made = {slot: [block.create_var(f"{op_type}.{slot}.{i}") for i in range(n)] for slot, n in outputs.items()}
        block.append_op(op_type, inputs, {slot: [v.name for v in vs] for slot, vs in made.items()}, attrs)
        return made

    reshaped = op(
        "reshape2",
        {"X": [x.name], "ShapeTensor": [ints["two"].name, ints["minus_one"].name]},
        {"Out": 1, "XShape": 1},
        {"shape": [-1, -1]},
    )["Out"][0]
    unsqueezed = op("unsqueeze2", {"X": [x.name], "AxesTensorList": [ints["one"].name]}, {"Out": 1}, {})["Out"][0]
    parts = op("split", {"X": [x.name], "AxisTensor": [ints["one"].name]}, {"Out": 3}, {"num": 3})["Out"]
    sliced = op(
        "slice",
        {"Input": [x.name], "StartsTensorList": [ints["one"].name], "EndsTensorList": [ints["two"].name]},
        {"Out": 1},
        {"axes": [2], "infer_flags": [-1]},
    )["Out"][0]
    joined = op("concat", {"X": [p.name for p in parts], "AxisTensor": [ints["minus_one"].name]}, {"Out": 1}, {})
    assert reshaped.shape == (-1, -1) and unsqueezed.shape == (-1, -1, -1, -1) and sliced.shape == (-1, 3, -1)
    bir.ir.verify(main)
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    values = _run(main, {"x": data}, [reshaped, unsqueezed, *parts, sliced, joined["Out"][0]])
    expected = [data.reshape(2, 12), data[:, None], data[:, :1], data[:, 1:2], data[:, 2:], data[:, :, 1:2]]
    expected.append(np.concatenate(expected[2:5], axis=-1))
    for value, want in zip(values, expected):
        np.testing.assert_array_equal(value, want)


def test_lod_passes_where_paddle_passes_it(progs):
    """Sequence features joined on axis 1, reshaped keeping dim 0 and sliced off dim 0 keep their LoD, so that
    sequence_pool still sees the sequences."""
    main, _ = progs
    words = bir.data("words", shape=[-1, 2], dtype="float32", lod_level=1)
    joined = bir.layers.concat([words, bir.layers.scale(words, 2.0)], axis=1)
    kept = bir.layers.slice(bir.layers.reshape(joined, [0, 2, 2]), [2], [1], [2])
    assert (joined.lod_level, kept.lod_level, kept.shape) == (1, 1, (-1, 2, 1))
    pooled = bir.layers.sequence_pool(bir.layers.flatten(kept), "sum")
    data = RNG.standard_normal((5, 2)).astype(np.float32)
    (value,) = _run(main, {"words": bir.LoDTensor(data, [[0, 2, 5]])}, [pooled])
    features = np.concatenate([data, 2 * data], axis=1).reshape(5, 2, 2)[:, :, 1]
    np.testing.assert_allclose(value, [features[:2].sum(0), features[2:].sum(0)], rtol=1e-6)
