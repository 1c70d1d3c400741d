"""Test cases of the indexing ops (blockir.ops.index), as data; expected values by explicit loops over positions."""

from __future__ import annotations

import numpy as np

from tests.ops.harness import Case

RNG = np.random.default_rng(20260605)


def rand(*shape: int, dtype: str = "float64") -> np.ndarray:
    return RNG.uniform(-2, 2, shape).astype(dtype)


def _take(x: np.ndarray, index: list[int], axis: int) -> np.ndarray:
    """The slices of ``x`` at ``index`` along ``axis``, one by one."""
    parts = [x[(slice(None),) * axis + (i,)] for i in index]
    return np.stack(parts, axis=axis) if parts else np.zeros((*x.shape[:axis], 0, *x.shape[axis + 1 :]), x.dtype)


def _gather_case(x: np.ndarray, index: np.ndarray, axis: int, name: str, tensor: bool = False) -> Case:
    flat = [int(i) for i in index.reshape(-1)]
    expected = _take(x, flat, axis)
    if index.ndim == 0:
        expected = expected.reshape(x.shape[:axis] + x.shape[axis + 1 :])
    inputs = {"X": x, "Index": index}
    if tensor:
        inputs["Axis"] = np.array([axis], np.int32)
    return Case(
        inputs,
        {} if tensor else {"axis": axis},
        {"Out": expected},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


GATHER = [
    _gather_case(rand(4, 3), np.array([3, 0, 3], np.int64), 0, "rows_repeated"),
    _gather_case(rand(2, 4, 3), np.array([1, 2], np.int32), 1, "axis_1"),
    _gather_case(rand(4, 3), np.array([[2], [1]], np.int64), 0, "index_n_by_1"),
    _gather_case(rand(4, 3), np.array(2, np.int64), 1, "0d_index"),
    _gather_case(rand(3, 4), np.array([0, 3], np.int64), 1, "axis_tensor", tensor=True),
    _gather_case(np.arange(6, dtype=np.int64).reshape(3, 2), np.array([2, 0], np.int64), 0, "int64"),
]


def _index_select_case(x: np.ndarray, index: np.ndarray, dim: int, name: str) -> Case:
    flat = [int(i) % x.shape[dim] for i in index]
    return Case(
        {"X": x, "Index": index},
        {"dim": dim},
        {"Out": _take(x, flat, dim % x.ndim)},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


INDEX_SELECT = [
    _index_select_case(rand(4, 3), np.array([1, 1, 3], np.int64), 0, "rows"),
    _index_select_case(rand(2, 3, 4), np.array([-1, 0], np.int32), 2, "negative_index"),
    _index_select_case(rand(3, 4, dtype="float32"), np.array([2], np.int64), -1, "float32"),
]


def _gather_nd_ref(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    k = index.shape[-1]
    out = np.empty((*index.shape[:-1], *x.shape[k:]), x.dtype)
    for pos in np.ndindex(*index.shape[:-1]):
        out[pos] = x[tuple(int(v) for v in index[pos])]
    return out


def _gather_nd_case(x: np.ndarray, index: np.ndarray, name: str) -> Case:
    grad = ("X",) if x.dtype == np.float64 else ()
    return Case({"X": x, "Index": index}, {}, {"Out": _gather_nd_ref(x, index)}, grad=grad, name=name)


GATHER_ND = [
    _gather_nd_case(rand(3, 4), np.array([[0, 1], [2, 3], [0, 1]], np.int64), "full_coordinates"),
    _gather_nd_case(rand(3, 4, 2), np.array([[[1], [0]]], np.int32), "partial_coordinates"),
    _gather_nd_case(rand(2, 3, dtype="float32"), np.array([1, 2], np.int64), "one_point"),
]


def _scatter_nd_add_case(x: np.ndarray, index: np.ndarray, updates: np.ndarray, name: str) -> Case:
    out = x.copy()
    for pos in np.ndindex(*index.shape[:-1]):
        out[tuple(int(v) for v in index[pos])] += updates[pos]
    grad = ("X", "Updates") if x.dtype == np.float64 else ()
    return Case({"X": x, "Index": index, "Updates": updates}, {}, {"Out": out}, grad=grad, name=name)


SCATTER_ND_ADD = [
    _scatter_nd_add_case(rand(3, 4), np.array([[0, 1], [2, 3], [0, 1]], np.int64), rand(3), "repeats_add_up"),
    _scatter_nd_add_case(rand(3, 2), np.array([[1], [2]], np.int64), rand(2, 2), "rows"),
    _scatter_nd_add_case(rand(3, dtype="float32"), np.array([[0]], np.int64), rand(1, dtype="float32"), "float32"),
]


def _scatter_case(x: np.ndarray, ids: np.ndarray, updates: np.ndarray, overwrite: bool, name: str) -> Case:
    out = x.copy()
    if overwrite:
        for i, row in zip(ids.tolist(), updates):
            out[i] = row
    else:
        for i in ids.tolist():
            out[i] = 0
        for i, row in zip(ids.tolist(), updates):
            out[i] += row
    grad = ("X", "Updates") if x.dtype == np.float64 else ()
    return Case({"X": x, "Ids": ids, "Updates": updates}, {"overwrite": overwrite}, {"Out": out}, grad=grad, name=name)


SCATTER = [
    _scatter_case(rand(4, 3), np.array([2, 0], np.int64), rand(2, 3), True, "overwrite"),
    _scatter_case(rand(4, 3), np.array([1, 3, 1], np.int64), rand(3, 3), True, "overwrite_last_wins"),
    _scatter_case(rand(4, 3), np.array([1, 3, 1], np.int32), rand(3, 3), False, "accumulate"),
    _scatter_case(rand(3, dtype="float32"), np.array([2], np.int64), rand(1, dtype="float32"), True, "float32"),
]


def _index_sample_case(x: np.ndarray, index: np.ndarray, name: str) -> Case:
    out = np.array([[x[i, int(j)] for j in row] for i, row in enumerate(index)], x.dtype)
    grad = ("X",) if x.dtype == np.float64 else ()
    return Case({"X": x, "Index": index}, {}, {"Out": out}, grad=grad, name=name)


INDEX_SAMPLE = [
    _index_sample_case(rand(3, 4), np.array([[0, 3], [1, 1], [2, 0]], np.int64), "repeats"),
    _index_sample_case(rand(2, 5, dtype="float32"), np.array([[4], [0]], np.int32), "float32"),
]


def _take_ref(x: np.ndarray, index: np.ndarray, axis: int) -> np.ndarray:
    axis %= x.ndim
    shape = [index.shape[i] if i == axis else max(d, index.shape[i]) for i, d in enumerate(x.shape)]
    out = np.empty(shape, x.dtype)
    for pos in np.ndindex(*shape):
        ipos = tuple(0 if index.shape[i] == 1 and i != axis else p for i, p in enumerate(pos))
        src = [0 if x.shape[i] == 1 and i != axis else p for i, p in enumerate(pos)]
        src[axis] = int(index[ipos]) % x.shape[axis]
        out[pos] = x[tuple(src)]
    return out


def _take_case(x: np.ndarray, index: np.ndarray, axis: int, name: str) -> Case:
    grad = ("Input",) if x.dtype == np.float64 else ()
    return Case(
        {"Input": x, "Index": index}, {"Axis": axis}, {"Result": _take_ref(x, index, axis)}, grad=grad, name=name
    )


TAKE_ALONG_AXIS = [
    _take_case(rand(3, 4), np.array([[0, 3], [1, 1], [2, 0]], np.int64), 1, "axis_1"),
    _take_case(rand(3, 4), np.array([[2, 0, 1, 1]], np.int64), 0, "index_broadcast"),
    _take_case(rand(1, 4), np.array([[0], [3], [-1]], np.int64), 1, "input_broadcast"),
    _take_case(rand(2, 3, dtype="float32"), np.array([[1], [0]], np.int32), -1, "float32"),
]


def _one_hot_case(x: np.ndarray, depth: int, name: str, dtype: int = 5, **extra: object) -> Case:
    out = np.zeros((*x.shape, depth), {5: np.float32, 3: np.int64}[dtype])
    for pos in np.ndindex(*x.shape):
        if 0 <= x[pos] < depth:
            out[pos + (int(x[pos]),)] = 1
    return Case({"X": x}, {"depth": depth, "dtype": dtype, **extra}, {"Out": out}, name=name)


ONE_HOT_V2 = [
    _one_hot_case(np.array([[1], [0], [3]], np.int64), 4, "column"),
    _one_hot_case(np.array([2, 0], np.int32), 3, "int64_out", dtype=3),
    _one_hot_case(np.array([5, 1], np.int64), 3, "allow_out_of_range", allow_out_of_range=True),
]
ONE_HOT_V2.append(
    Case(
        {"X": np.array([1, 0], np.int64), "depth_tensor": np.array([2], np.int32)},
        {"depth": 7},
        {"Out": np.array([[0, 1], [1, 0]], np.float32)},
        name="depth_tensor",
    )
)


def _argsort_case(x: np.ndarray, axis: int, descending: bool, name: str) -> Case:
    moved = np.moveaxis(x, axis, -1)
    order = np.empty(moved.shape, np.int64)
    for pos in np.ndindex(*moved.shape[:-1]):
        row = moved[pos].tolist()
        keyed = sorted(range(len(row)), key=lambda i: (-row[i] if descending else row[i], i))
        order[pos] = keyed
    indices = np.moveaxis(order, -1, axis)
    values = np.take_along_axis(x, indices, axis=axis)
    return Case(
        {"X": x},
        {"axis": axis, "descending": descending},
        {"Out": values, "Indices": indices},
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


ARGSORT = [
    _argsort_case(rand(3, 4), -1, False, "ascending"),
    _argsort_case(rand(3, 4), 0, True, "descending_axis_0"),
    _argsort_case(np.array([[3, 1, 3, 2]], np.int64), 1, False, "ties_stable"),
    _argsort_case(np.array([[3, 1, 3, 2]], np.int32), 1, True, "ties_descending"),
]


def _masked_select_case(x: np.ndarray, mask: np.ndarray, name: str) -> Case:
    picked = np.array([x[pos] for pos in np.ndindex(*x.shape) if mask[pos]], x.dtype)
    grad = ("X",) if x.dtype == np.float64 else ()
    return Case({"X": x, "Mask": mask}, {}, {"Y": picked}, grad=grad, name=name)


MASKED_SELECT = [
    _masked_select_case(rand(3, 4), RNG.random((3, 4)) < 0.5, "float64"),
    _masked_select_case(rand(2, 2, dtype="float32"), np.zeros((2, 2), bool), "none"),
]

CASES: dict[str, list[Case]] = {
    "gather": GATHER,
    "index_select": INDEX_SELECT,
    "gather_nd": GATHER_ND,
    "scatter_nd_add": SCATTER_ND_ADD,
    "scatter": SCATTER,
    "index_sample": INDEX_SAMPLE,
    "take_along_axis": TAKE_ALONG_AXIS,
    "one_hot_v2": ONE_HOT_V2,
    "argsort": ARGSORT,
    "masked_select": MASKED_SELECT,
}

_f32 = np.zeros((3, 4), np.float32)
_ids = np.array([0, 1], np.int64)

INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("gather", Case({"X": _f32, "Index": np.zeros((2, 2), np.int64)}), r"Index .* must be 0-D, \[N\] or \[N, 1\]"),
    ("gather", Case({"X": _f32, "Index": np.zeros(2)}), r"Index .* has dtype float64"),
    ("gather", Case({"X": _f32, "Index": _ids}, {"axis": 2}), r"axis 2 is out of range for rank 2"),
    ("gather_nd", Case({"X": _f32, "Index": np.zeros((2, 3), np.int64)}), r"3 coordinates, more than X"),
    ("scatter", Case({"X": _f32, "Ids": _ids, "Updates": np.zeros((2, 5), np.float32)}), r"must be rows of X"),
    ("index_sample", Case({"X": _f32, "Index": np.zeros((2, 1), np.int64)}), r"matrices with as many rows"),
    ("one_hot_v2", Case({"X": _ids}, {"depth": 0}), r"depth=0 must be positive"),
    ("masked_select", Case({"X": _f32, "Mask": np.zeros((3, 3), bool)}), r"must have the shape of X"),
]

KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("gather", Case({"X": _f32, "Index": np.array([0, 3], np.int64)}), r"Index 3 is out of range for a dim of size 3"),
    ("one_hot_v2", Case({"X": np.array([4], np.int64)}, {"depth": 3}), r"id 4 is out of range"),
    ("index_select", Case({"X": _f32, "Index": np.array([-4], np.int64)}), r"Index -4 is out of range"),
]


def _put_ref(x: np.ndarray, index: np.ndarray, value: np.ndarray, axis: int, reduce: str, keep: bool) -> np.ndarray:
    """Each entry of Index (broadcast outside the axis) in row-major order, reduced into its target."""
    axis %= x.ndim
    shape = [index.shape[axis] if i == axis else d for i, d in enumerate(x.shape)]
    index, value = np.broadcast_to(index, shape), np.broadcast_to(value, shape)
    out, hits = x.astype(np.float64).copy(), {}
    for pos in np.ndindex(*shape):
        target = pos[:axis] + (int(index[pos]) % x.shape[axis],) + pos[axis + 1 :]
        hits.setdefault(target, []).append(float(value[pos]))
    for target, vals in hits.items():
        if reduce == "assign":
            out[target] = vals[-1]
            continue
        start = [float(x[target])] if keep else []
        pool = start + vals
        out[target] = {
            "add": sum(pool),
            "mul": float(np.prod(pool)),
            "mean": sum(pool) / len(pool),
            "amax": max(pool),
            "amin": min(pool),
        }[reduce]
    return out.astype(x.dtype)


def _put_case(
    x: np.ndarray, index: np.ndarray, value: np.ndarray, axis: int, name: str, reduce: str = "assign", keep: bool = True
) -> Case:
    grad = ("Input", "Value") if reduce in ("assign", "add") and x.dtype == np.float64 else ()
    return Case(
        {"Input": x, "Index": index, "Value": value},
        {"Axis": axis, "Reduce": reduce, "Include_self": keep},
        {"Result": _put_ref(x, index, value, axis, reduce, keep)},
        grad=grad,
        name=name,
    )


_put_index = np.array([[0, 2], [1, 1], [3, 0]], np.int64)
PUT_ALONG_AXIS = [
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "assign"),
    _put_case(rand(3, 4), np.array([[0], [3], [-1]], np.int64), rand(3, 1), 1, "assign_negative_index"),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "add", reduce="add"),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "add_without_self", reduce="add", keep=False),
    _put_case(rand(3, 4), np.array([[1, 0, 2, 1]], np.int64), rand(1, 4), 0, "add_axis_0", reduce="add"),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "mul", reduce="mul"),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "mean", reduce="mean"),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "mean_without_self", reduce="mean", keep=False),
    _put_case(rand(3, 4), _put_index, rand(3, 2), 1, "amax_without_self", reduce="amax", keep=False),
    _put_case(rand(3, 4, dtype="float32"), _put_index, rand(3, 2, dtype="float32"), 1, "amin", reduce="amin"),
    _put_case(rand(3, 4), np.array([[2], [0], [1]], np.int64), np.array([5.0]), 1, "value_broadcast"),
]
CASES["put_along_axis"] = PUT_ALONG_AXIS
INFER_ERRORS.append(
    (
        "put_along_axis",
        Case({"Input": _f32, "Index": np.zeros((3, 1), np.int64), "Value": _f32}, {"Axis": 1, "Reduce": "max"}),
        r"Reduce='max' must be one of",
    )
)
KERNEL_ERRORS.append(
    (
        "put_along_axis_grad",
        Case(
            {"Input": _f32, "Index": np.zeros((3, 1), np.int64), "Value": _f32[:, :1], "Result@GRAD": _f32},
            {"Axis": 1, "Reduce": "mul"},
        ),
        r"the gradient of put_along_axis with Reduce='mul' is not supported",
    )
)


# -- unique: expected values by walking the entries (or slices) in order, in plain Python -------------------------


def _unique_expected(x: np.ndarray, axis: int | None, is_sorted: bool) -> dict[str, np.ndarray]:
    items = list(x.reshape(-1)) if axis is None else [np.take(x, i, axis=axis) for i in range(x.shape[axis])]
    keys = [tuple(np.asarray(v).reshape(-1).tolist()) for v in items]
    first: dict[tuple, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    distinct = sorted(first) if is_sorted else list(first)
    position = {key: k for k, key in enumerate(distinct)}
    picked = [items[first[key]] for key in distinct]
    out = np.array(picked, x.dtype) if axis is None else np.stack(picked, axis=axis)
    return {
        "Out": out,
        "Indices": np.array([first[key] for key in distinct], np.int64),
        "Index": np.array([position[key] for key in keys], np.int64),
        "Counts": np.array([keys.count(key) for key in distinct], np.int64),
    }


def _unique_case(x: np.ndarray, axis: int | None, is_sorted: bool, name: str) -> Case:
    attrs = {"axis": [] if axis is None else [axis], "is_sorted": is_sorted}
    attrs.update(return_index=True, return_inverse=True, return_counts=True)
    return Case({"X": x}, attrs, _unique_expected(x, axis, is_sorted), name=name)


_REPEATS = np.array([[2, 1, 1], [3, 4, 3], [2, 1, 1]], np.int64)
CASES["unique"] = [
    _unique_case(np.array([2.0, -1.0, 2.0, 0.5, -1.0], np.float32), None, True, "sorted"),
    _unique_case(np.array([2.0, -1.0, 2.0, 0.5, -1.0], np.float32), None, False, "first_occurrence"),
    _unique_case(_REPEATS, 0, True, "rows"),
    _unique_case(_REPEATS, 1, False, "columns_unsorted"),
    _unique_case(np.array([[[1, 0], [1, 0]], [[1, 1], [1, 0]]], np.int32), 2, True, "last_axis_3d"),
    _unique_case(np.array([7], np.int64), None, True, "one"),
]
INFER_ERRORS.append(("unique", Case({"X": _REPEATS}, {"axis": [0, 1]}), r"axis \[0, 1\] names more than one dim"))


# -- non_max_suppression: expected values by the greedy algorithm, one box at a time, in plain Python --------------


def _iou(a: list[float], b: list[float]) -> float:
    (ay1, ax1, ay2, ax2), (by1, bx1, by2, bx2) = a, b
    ay1, ay2, ax1, ax2 = min(ay1, ay2), max(ay1, ay2), min(ax1, ax2), max(ax1, ax2)
    by1, by2, bx1, bx2 = min(by1, by2), max(by1, by2), min(bx1, bx2), max(bx1, bx2)
    inter = max(0.0, min(ax2, bx2) - max(ax1, bx1)) * max(0.0, min(ay2, by2) - max(ay1, by1))
    union = (ax2 - ax1) * (ay2 - ay1) + (bx2 - bx1) * (by2 - by1) - inter
    return inter / union if inter > 0 and union > 0 else 0.0


def _nms_expected(boxes: np.ndarray, scores: np.ndarray, most: int, iou: float, least: float) -> np.ndarray:
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            kept: list[int] = []
            for i in sorted(range(scores.shape[2]), key=lambda i: (-scores[b, c, i], i)):
                if len(kept) < most and scores[b, c, i] > least:
                    if all(_iou(boxes[b, i].tolist(), boxes[b, j].tolist()) <= iou for j in kept):
                        kept.append(i)
            rows += [[b, c, i] for i in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def _nms_case(boxes: np.ndarray, scores: np.ndarray, most: int, iou: float, least: float, name: str) -> Case:
    inputs = {
        "Boxes": boxes,
        "Scores": scores,
        "MaxOutputBoxesPerClass": np.array([most], np.int64),
        "IouThreshold": np.array([iou], np.float32),
        "ScoreThreshold": np.array([least], np.float32),
    }
    return Case(inputs, {}, {"SelectedIndices": _nms_expected(boxes, scores, most, iou, least)}, name=name)


_NMS_RNG = np.random.default_rng(7)
_CORNERS = np.sort(_NMS_RNG.random((2, 12, 2, 2)), axis=2).transpose(0, 1, 3, 2).reshape(2, 12, 4)  # y1 x1 y2 x2
_NMS_SCORES = _NMS_RNG.random((2, 3, 12)).astype(np.float32)
CASES["non_max_suppression"] = [
    _nms_case(_CORNERS.astype(np.float32), _NMS_SCORES, 5, 0.3, 0.2, "random"),
    _nms_case(_CORNERS[:, :, [2, 3, 0, 1]].astype(np.float32), _NMS_SCORES, 12, 0.5, 0.0, "flipped_corners"),
    _nms_case(np.tile(_CORNERS[:1, :1], (1, 4, 1)), np.array([[[0.5, 0.9, 0.9, 0.1]]]), 3, 0.5, 0.0, "identical"),
    _nms_case(_CORNERS.astype(np.float32), _NMS_SCORES, 0, 0.5, 0.0, "none_wanted"),
]
INFER_ERRORS.append(
    ("non_max_suppression", Case({"Boxes": np.zeros((1, 3, 4)), "Scores": np.zeros((1, 2, 4))}), r"disagree")
)


# -- tfidf_vectorizer: expected counts by comparing every spaced n-gram of each row with the pool, in plain Python --


def _tfidf_expected(x: np.ndarray, attrs: dict, mode: str) -> np.ndarray:
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    pool, starts = list(attrs["pool_int64s"]), [*attrs["ngram_counts"], len(attrs["pool_int64s"])]
    grams = [
        tuple(pool[k : k + size]) for size in range(1, len(starts)) for k in range(starts[size - 1], starts[size], size)
    ]
    weights = attrs.get("weights") or [1.0] * len(grams)
    out = np.zeros((rows.shape[0], max(attrs["ngram_indexes"]) + 1), np.float32)
    for b, row in enumerate(rows.tolist()):
        for g, gram in enumerate(grams):
            size = len(gram)
            if not attrs["min_gram_length"] <= size <= attrs["max_gram_length"]:
                continue
            gaps = range(1, attrs["max_skip_count"] + 2) if size > 1 else [1]
            count = sum(
                tuple(row[s + j * gap] for j in range(size)) == gram
                for gap in gaps
                for s in range(len(row) - (size - 1) * gap)
            )
            value = {"TF": count, "IDF": weights[g] * (count > 0), "TFIDF": weights[g] * count}[mode]
            out[b, attrs["ngram_indexes"][g]] = value
    return out[0] if x.ndim == 1 else out


def _tfidf_case(x: np.ndarray, mode: str, skip: int, low: int, high: int, name: str) -> Case:
    attrs = {
        "mode": mode,
        "min_gram_length": low,
        "max_gram_length": high,
        "max_skip_count": skip,
        "ngram_counts": [0, 4],
        "ngram_indexes": [6, 5, 4, 3, 2, 1, 0],
        "pool_int64s": [2, 3, 5, 4, 5, 6, 7, 8, 6, 7],
        "weights": [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5],
    }
    return Case({"X": x}, attrs, {"Y": _tfidf_expected(x, attrs, mode)}, name=name)


_TOKENS = np.array([[1, 1, 3, 3, 3, 7], [8, 6, 7, 5, 6, 8]], np.int32)
CASES["tfidf_vectorizer"] = [
    _tfidf_case(_TOKENS, "TF", 0, 1, 2, "tf_uni_and_bigrams"),
    _tfidf_case(_TOKENS.astype(np.int64), "TFIDF", 3, 2, 2, "tfidf_bigrams_skips"),
    _tfidf_case(np.array([2, 3, 5, 4, 5, 6, 7, 8, 6, 7], np.int64), "IDF", 5, 1, 2, "idf_one_row"),
]
INFER_ERRORS.append(("tfidf_vectorizer", Case({"X": _TOKENS}, {"mode": "BM25"}), r"mode 'BM25' is none of TF"))
