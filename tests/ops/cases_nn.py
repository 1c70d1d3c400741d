"""Test cases of the neural-network ops (blockir.ops.nn and blockir.ops.sequence), as data.

Every expected value is computed here in plain numpy, independently of the
kernels (loops over rows and sequences where that is the clearest statement).
The ops that are not computations are covered by behaviour tests, listed in
``BEHAVIOUR_TESTED``.
"""

from __future__ import annotations

import numpy as np

from blockir.ops.values import LoDTensor
from tests.ops.harness import Case

RNG = np.random.default_rng(20240601)


def _probs(shape: tuple[int, ...], dtype: str = "float64") -> np.ndarray:
    """Rows of probabilities bounded away from 0 (so -log and 1/x stay tame in finite differences)."""
    p = RNG.uniform(0.2, 1.0, size=shape)
    return (p / p.sum(axis=-1, keepdims=True)).astype(dtype)


def _labels(rows: tuple[int, ...], classes: int, dtype: str = "int64") -> np.ndarray:
    return RNG.integers(0, classes, size=(*rows, 1)).astype(dtype)


# -- cross_entropy -----------------------------------------------------------------------------


def ref_cross_entropy(
    x: np.ndarray, label: np.ndarray, soft_label: bool = False, ignore_index: int = -100
) -> np.ndarray:
    flat_x = x.reshape(-1, x.shape[-1])
    if soft_label:
        y = np.array([-np.sum(lab * np.log(p)) for p, lab in zip(flat_x, label.reshape(flat_x.shape))])
    else:
        y = np.array([0.0 if lab == ignore_index else -np.log(p[lab]) for p, lab in zip(flat_x, label.reshape(-1))])
    return y.reshape(*x.shape[:-1], 1).astype(x.dtype)


def _ce_case(x: np.ndarray, label: np.ndarray, name: str, grad: tuple[str, ...] = ("X",), **attrs) -> Case:
    return Case({"X": x, "Label": label}, attrs, {"Y": ref_cross_entropy(x, label, **attrs)}, grad=grad, name=name)


_ignored = _labels((6,), 5)
_ignored[[1, 4]] = 3  # ignore_index=3: rows 1 and 4 give 0 and no gradient
_soft = _probs((4, 6))

CROSS_ENTROPY = [
    _ce_case(_probs((8, 5), "float32"), _labels((8,), 5), "hard_float32", grad=()),
    _ce_case(_probs((8, 5)), _labels((8,), 5), "hard_float64"),
    _ce_case(_probs((2, 3, 4)), _labels((2, 3), 4, "int32"), "rank3_int32_labels"),
    _ce_case(_probs((6, 5)), _ignored, "ignore_index", ignore_index=3),
    _ce_case(_probs((4, 6)), _soft, "soft_label", soft_label=True),
    _ce_case(_probs((1, 1)), np.zeros((1, 1), np.int64), "one_class"),
]

# -- softmax_with_cross_entropy -------------------------------------------------------------------


def ref_softmax_with_cross_entropy(
    logits: np.ndarray, label: np.ndarray, soft_label: bool = False, ignore_index: int = -100, axis: int = -1
) -> dict[str, np.ndarray]:
    moved = np.moveaxis(logits.astype(np.float64), axis, -1)
    rows = moved.reshape(-1, moved.shape[-1])
    softmax, loss = np.empty_like(rows), np.empty(len(rows))
    labels = np.moveaxis(label, axis, -1).reshape(len(rows), -1)
    for i, (z, lab) in enumerate(zip(rows, labels)):
        top = z.max()
        log_norm = top + np.log(np.sum(np.exp(z - top)))
        softmax[i] = np.exp(z - log_norm)
        if soft_label:
            loss[i] = -np.sum(lab * (z - log_norm))
        else:
            loss[i] = 0.0 if lab[0] == ignore_index else log_norm - z[lab[0]]
    softmax_out = np.moveaxis(softmax.reshape(moved.shape), -1, axis).astype(logits.dtype)
    loss_out = np.moveaxis(loss.reshape(*moved.shape[:-1], 1), -1, axis).astype(logits.dtype)
    return {"Softmax": softmax_out, "Loss": loss_out}


def _swce_case(
    logits: np.ndarray, label: np.ndarray, name: str, grad: tuple[str, ...] = ("Logits",), rtol: float = 1e-6, **attrs
) -> Case:
    return Case(
        {"Logits": logits, "Label": label},
        attrs,
        ref_softmax_with_cross_entropy(logits, label, **attrs),
        grad=grad,
        rtol=rtol,
        atol=1e-6,
        name=name,
    )


_swce_ignored = _labels((5,), 4)
_swce_ignored[2] = -100
# The cases with the classes on an inner axis (swapped first by the kernels) or ignore_index a class draw from a
# generator of their own, leaving the data of the cases after them as it was.
_SWCE_RNG = np.random.default_rng(20250101)
_swce_soft_axis_1 = _SWCE_RNG.uniform(0.2, 1.0, size=(2, 4, 3))
_swce_soft_axis_1 /= _swce_soft_axis_1.sum(axis=1, keepdims=True)
_swce_ignored_axis_1 = _SWCE_RNG.integers(0, 4, size=(2, 1, 3))
_swce_ignored_axis_1[1, 0, 2] = -100
_swce_ignored_class = np.array([[2], [0], [2], [4], [1], [3]])  # ignore_index=2: rows 0 and 2 give 0, no gradient

SOFTMAX_WITH_CROSS_ENTROPY = [
    _swce_case(RNG.normal(size=(8, 10)).astype("float32"), _labels((8,), 10), "float32", grad=(), rtol=1e-5),
    _swce_case(RNG.normal(size=(8, 10)), _labels((8,), 10), "float64"),
    _swce_case(
        np.array([[1000.0, 0.0, -1000.0], [-800.0, -790.0, -805.0]]),
        np.array([[2], [0]]),
        "huge_logits_stay_finite",
        grad=(),
    ),
    _swce_case(RNG.normal(size=(5, 4)), _swce_ignored, "ignore_index"),
    _swce_case(RNG.normal(size=(4, 6)), _probs((4, 6)), "soft_label", soft_label=True),
    _swce_case(RNG.normal(size=(3, 5, 2)), RNG.integers(0, 5, size=(3, 1, 2)), "axis_1", axis=1),
    _swce_case(RNG.normal(size=(2, 3, 4)), _labels((2, 3), 4), "rank3_last_axis"),
    _swce_case(_SWCE_RNG.normal(size=(2, 4, 3)), _swce_soft_axis_1, "soft_label_axis_1", soft_label=True, axis=1),
    _swce_case(_SWCE_RNG.normal(size=(2, 4, 3)), _swce_ignored_axis_1, "ignore_index_axis_1", axis=1),
    _swce_case(_SWCE_RNG.normal(size=(6, 5)), _swce_ignored_class, "ignore_index_a_class", ignore_index=2),
]

# -- top_k and accuracy -------------------------------------------------------------------------------


def ref_top_k(x: np.ndarray, k: int) -> dict[str, np.ndarray]:
    rows = x.reshape(-1, x.shape[-1])
    idx = np.array([sorted(range(len(r)), key=lambda j: (-r[j], j))[:k] for r in rows], dtype=np.int64)
    values = np.array([r[i] for r, i in zip(rows, idx)], dtype=x.dtype)
    return {"Out": values.reshape(*x.shape[:-1], k), "Indices": idx.reshape(*x.shape[:-1], k)}


def _top_k_case(x: np.ndarray, k: int, name: str) -> Case:
    return Case({"X": x}, {"k": k}, ref_top_k(x, k), name=name)


TOP_K = [
    _top_k_case(RNG.normal(size=(6, 9)).astype("float32"), 3, "float32"),
    _top_k_case(np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]]), 3, "ties_lower_index_first"),
    _top_k_case(RNG.integers(-5, 5, size=(4, 7)).astype("int64"), 2, "int64"),
    _top_k_case(RNG.integers(-5, 5, size=(2, 3, 6)).astype("int32"), 6, "rank3_k_equals_width"),
    _top_k_case(RNG.normal(size=(5, 4)), 1, "k_1"),
]


def ref_accuracy(indices: np.ndarray, label: np.ndarray) -> dict[str, np.ndarray]:
    correct = sum(int(lab in row) for row, lab in zip(indices.tolist(), label.reshape(-1).tolist()))
    total = len(indices)
    return {
        "Accuracy": np.array([correct / total if total else 0.0], np.float32),
        "Correct": np.array([correct], np.int64),
        "Total": np.array([total], np.int64),
    }


def _accuracy_case(scores: np.ndarray, label: np.ndarray, k: int, name: str) -> Case:
    top = ref_top_k(scores, k)
    return Case(
        {"Out": top["Out"], "Indices": top["Indices"], "Label": label},
        {},
        ref_accuracy(top["Indices"], label),
        name=name,
    )


_scores = RNG.normal(size=(10, 5)).astype("float32")
ACCURACY = [
    _accuracy_case(_scores, _labels((10,), 5), 1, "top1"),
    _accuracy_case(_scores, _labels((10,), 5), 3, "top3"),
    _accuracy_case(_scores, np.argmax(_scores, axis=1)[:, None].astype(np.int64), 1, "all_correct"),
    _accuracy_case(np.zeros((0, 5), np.float32), np.zeros((0, 1), np.int64), 2, "empty_batch"),
]

# -- auc ---------------------------------------------------------------------------------------------------


def ref_auc(predict: np.ndarray, label: np.ndarray, stat_pos: np.ndarray, stat_neg: np.ndarray, t: int, steps: int):
    """Bucket by bucket, as Paddle's auc kernel: count, then walk the thresholds from the top."""
    pos, neg = np.zeros(t + 1, np.int64), np.zeros(t + 1, np.int64)
    for p, y in zip(predict[:, -1], label.reshape(-1)):
        b = min(max(int(p * t), 0), t)
        if y > 0:
            pos[b] += 1
        else:
            neg[b] += 1
    if steps == 0:
        new_pos, new_neg = stat_pos + pos, stat_neg + neg
    else:
        new_pos, new_neg = np.vstack([stat_pos[1:], pos]), np.vstack([stat_neg[1:], neg])
    tot_pos = tot_neg = 0.0
    area = 0.0
    total_pos, total_neg = new_pos.sum(axis=0), new_neg.sum(axis=0)
    for b in range(t, -1, -1):
        prev_pos, prev_neg = tot_pos, tot_neg
        tot_pos += total_pos[b]
        tot_neg += total_neg[b]
        area += (tot_neg - prev_neg) * (tot_pos + prev_pos) / 2.0
    auc = area / tot_pos / tot_neg if tot_pos > 0 and tot_neg > 0 else 0.0
    return {"AUC": np.array([auc]), "StatPosOut": new_pos, "StatNegOut": new_neg}


def _auc_case(n: int, t: int, steps: int, name: str, seed: int, history: bool = False) -> Case:
    rng = np.random.default_rng(seed)
    p1 = rng.random(n).astype("float32")
    predict = np.stack([1 - p1, p1], axis=1)
    label = (rng.random(n) < p1).astype("int64").reshape(n, 1)
    rows = max(steps, 1)
    stat_pos = rng.integers(0, 5, (rows, t + 1)) if history else np.zeros((rows, t + 1), np.int64)
    stat_neg = rng.integers(0, 5, (rows, t + 1)) if history else np.zeros((rows, t + 1), np.int64)
    inputs = {"Predict": predict, "Label": label, "StatPos": stat_pos, "StatNeg": stat_neg}
    attrs = {"num_thresholds": t, "slide_steps": steps}
    return Case(inputs, attrs, ref_auc(predict, label, stat_pos, stat_neg, t, steps), rtol=1e-12, name=name)


AUC = [
    _auc_case(64, 4095, 1, "batch", 1),
    _auc_case(64, 7, 0, "accumulated_coarse", 2, history=True),
    _auc_case(50, 100, 3, "window_of_3", 3, history=True),
    _auc_case(1, 16, 1, "one_row", 5),
]

# -- lookup_table -----------------------------------------------------------------------------------------


def ref_lookup_table(w: np.ndarray, ids: np.ndarray, padding_idx: int = -1, **_: object) -> np.ndarray:
    rows = [np.zeros(w.shape[1], w.dtype) if i == padding_idx else w[i] for i in ids.reshape(-1)]
    return np.array(rows, dtype=w.dtype).reshape(*ids.shape[:-1], w.shape[1])


def _lookup_case(w: np.ndarray, ids: np.ndarray, name: str, ids_lod: list[int] | None = None, **attrs) -> Case:
    """A lookup case; with ``ids_lod`` the Ids are a LoDTensor, whose LoD the output shares."""
    out = ref_lookup_table(w, ids, **attrs)
    return Case(
        {"W": w, "Ids": ids},
        attrs,
        {"Out": out if ids_lod is None else LoDTensor(out, [ids_lod])},
        grad=("W",) if w.dtype == np.float64 else (),
        lod={} if ids_lod is None else {"Ids": [ids_lod]},
        name=name,
    )


_repeated_ids = np.array([[3], [0], [3], [7], [3], [2]], np.int64)
LOOKUP_TABLE = [
    _lookup_case(RNG.normal(size=(10, 4)).astype("float32"), _repeated_ids, "float32"),
    _lookup_case(RNG.normal(size=(10, 4)), _repeated_ids, "float64_repeated_ids"),
    _lookup_case(RNG.normal(size=(10, 4)), _repeated_ids, "padding_idx", padding_idx=3),
    _lookup_case(RNG.normal(size=(10, 4)), _repeated_ids, "sparse_gradient", is_sparse=True),
    _lookup_case(RNG.normal(size=(8, 3)), RNG.integers(0, 8, size=(2, 4, 1)).astype(np.int32), "rank3_int32_ids"),
    _lookup_case(RNG.normal(size=(10, 4)), _repeated_ids, "lod_ids_share_their_lod", ids_lod=[0, 2, 6]),
]

# -- sequence_pool ----------------------------------------------------------------------------------------


def ref_sequence_pool(
    x: np.ndarray, offsets: list[int], pooltype: str = "AVERAGE", pad_value: float = 0.0, **_: object
) -> dict[str, np.ndarray]:
    out, index = [], []
    for start, end in zip(offsets, offsets[1:]):
        seq = x[start:end]
        if end == start:
            out.append(np.full(x.shape[1:], pad_value))
            index.append(np.full(x.shape[1:], -1))
            continue
        index.append(start + np.argmax(seq, axis=0))
        out.append(
            {
                "SUM": seq.sum(0),
                "AVERAGE": seq.mean(0),
                "SQRT": seq.sum(0) / np.sqrt(len(seq)),
                "MAX": seq.max(0),
                "LAST": seq[-1],
                "FIRST": seq[0],
            }[pooltype]
        )
    expected = {"Out": np.array(out, dtype=x.dtype).reshape(len(out), *x.shape[1:])}
    if pooltype == "MAX":
        expected["MaxIndex"] = np.array(index, dtype=np.int32).reshape(len(out), *x.shape[1:])
    return expected


_OFFSETS = [0, 2, 2, 5, 6]  # lengths 2, 0 (empty), 3, 1
_seq_x = RNG.normal(size=(6, 3))


def _pool_case(
    pooltype: str,
    x: np.ndarray = _seq_x,
    offsets: list[int] = _OFFSETS,
    name: str = "",
    outer: list[int] | None = None,
    **attrs,
) -> Case:
    """A case pooling the sequences ``offsets`` of ``x``; with ``outer``, X has a second (outer) LoD level,
    which the output keeps."""
    expected = ref_sequence_pool(x, offsets, pooltype, **attrs)
    lod = [offsets] if outer is None else [outer, offsets]
    if outer is not None:
        expected = {k: LoDTensor(v, [outer]) if k == "Out" else v for k, v in expected.items()}
    return Case(
        {"X": x},
        {"pooltype": pooltype, **attrs},
        expected,
        grad=("X",) if x.dtype == np.float64 else (),
        lod={"X": lod},
        name=name or pooltype.lower(),
    )


SEQUENCE_POOL = [
    *(_pool_case(p) for p in ("SUM", "AVERAGE", "SQRT", "MAX", "LAST", "FIRST")),
    _pool_case("MAX", pad_value=-7.5, name="max_pad_value"),
    _pool_case("AVERAGE", x=_seq_x.astype("float32"), name="average_float32"),
    _pool_case("SUM", x=RNG.normal(size=(5, 2, 2)), offsets=[0, 1, 5], name="sum_rank3"),
    _pool_case("MAX", x=RNG.normal(size=(7, 4)), offsets=[0, 7], name="max_one_sequence"),
    _pool_case("AVERAGE", outer=[0, 1, 4], name="two_lod_levels"),  # the outer level groups them 1 + 3
]

# -- top_k_v2 (and top_k's K input) ----------------------------------------------------------------------------


def ref_top_k_v2(x: np.ndarray, k: int, axis: int = -1, largest: bool = True) -> dict[str, np.ndarray]:
    """Line by line along ``axis``: the k largest (smallest) entries, ties in index order, NaN above every number."""
    moved = np.moveaxis(x, axis, -1) if x.ndim else x.reshape(1)
    lines = moved.reshape(-1, moved.shape[-1])

    def rank(line: np.ndarray, j: int) -> tuple[int, float, int]:
        v = float(line[j])
        if v != v:  # NaN
            return (0, 0.0, j) if largest else (1, 0.0, j)
        return (1, -v, j) if largest else (0, v, j)

    idx = np.array([sorted(range(len(line)), key=lambda j: rank(line, j))[:k] for line in lines], np.int64)
    values = np.array([line[i] for line, i in zip(lines, idx)], dtype=x.dtype)
    if not x.ndim:
        return {"Out": values.reshape(()), "Indices": idx.reshape(())}
    shape = (*moved.shape[:-1], k)
    return {
        "Out": np.moveaxis(values.reshape(shape), -1, axis),
        "Indices": np.moveaxis(idx.reshape(shape), -1, axis),
    }


def _top_k_v2_case(
    x: np.ndarray, k: int, name: str, axis: int = -1, largest: bool = True, k_input: bool = False, **attrs: object
) -> Case:
    inputs = {"X": x, "K": np.array([k], np.int32)} if k_input else {"X": x}
    return Case(
        inputs,
        {"k": 1 if k_input else k, "axis": axis, "largest": largest, **attrs},
        ref_top_k_v2(x, k, axis, largest),
        grad=("X",) if x.dtype == np.float64 else (),
        name=name,
    )


_nan_scores = np.array([[3.0, np.nan, 1.0, 3.0, np.inf], [2.0, 2.0, 2.0, -1.0, np.nan]], np.float32)
_top_lod = [[0, 1, 3]]
_top_lod_x = RNG.normal(size=(3, 5))
TOP_K_V2 = [
    _top_k_v2_case(RNG.normal(size=(6, 9)).astype("float32"), 3, "float32"),
    _top_k_v2_case(RNG.normal(size=(4, 7)), 3, "float64"),
    _top_k_v2_case(RNG.normal(size=(2, 5, 3)), 2, "middle_axis_smallest", axis=1, largest=False),
    _top_k_v2_case(RNG.normal(size=(5, 3)), 5, "axis_0_k_equals_dim", axis=0),
    _top_k_v2_case(RNG.normal(size=(2, 3, 4)), 2, "negative_axis", axis=-3),
    _top_k_v2_case(RNG.integers(-5, 5, size=(4, 7)).astype("int64"), 2, "int64"),
    _top_k_v2_case(RNG.integers(-5, 5, size=(3, 6)).astype("int32"), 4, "int32_smallest", largest=False),
    _top_k_v2_case(np.array([[5, -(2**31), 7, 2**31 - 1]], np.int32), 4, "int32_extremes"),
    _top_k_v2_case(
        np.array([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0]], np.float32), 3, "ties_lower_index_first"
    ),
    _top_k_v2_case(_nan_scores, 3, "nan_first_when_largest"),
    _top_k_v2_case(_nan_scores, 3, "nan_last_when_smallest", largest=False),
    _top_k_v2_case(RNG.normal(size=(3, 6)), 2, "k_input_overrides_k", k_input=True),
    _top_k_v2_case(RNG.normal(size=(3, 6)), 4, "unsorted_returns_them_sorted", sorted=False),
    _top_k_v2_case(np.array(1.5), 1, "0d_x"),
    Case(
        {"X": _top_lod_x},
        {"k": 2},
        {key: LoDTensor(value, _top_lod) for key, value in ref_top_k_v2(_top_lod_x, 2).items()},
        grad=("X",),
        lod={"X": _top_lod},
        name="lod_shared",
    ),
]

_k_scores = RNG.normal(size=(4, 6)).astype("float32")
TOP_K_INPUT = [Case({"X": _k_scores, "K": np.array([4], np.int64)}, {"k": 1}, ref_top_k(_k_scores, 4), name="k_input")]

# -- lookup_table_v2 --------------------------------------------------------------------------------------------


def ref_lookup_table_v2(w: np.ndarray, ids: np.ndarray, padding_idx: int = -1) -> np.ndarray:
    """Row by row: W[id], zeros for ``padding_idx``; Out is [*Ids.shape, dim]."""
    rows = [np.zeros(w.shape[1], w.dtype) if i == padding_idx else w[i] for i in ids.reshape(-1).tolist()]
    return np.array(rows, dtype=w.dtype).reshape(*ids.shape, w.shape[1])


def _lookup_v2_case(w: np.ndarray, ids: np.ndarray, name: str, ids_lod: list[int] | None = None, **attrs) -> Case:
    out = ref_lookup_table_v2(w, ids, attrs.get("padding_idx", -1))
    return Case(
        {"W": w, "Ids": ids},
        attrs,
        {"Out": out if ids_lod is None else LoDTensor(out, [ids_lod])},
        grad=("W",) if w.dtype == np.float64 else (),
        lod={} if ids_lod is None else {"Ids": [ids_lod]},
        name=name,
    )


_ids_2d = np.array([[3, 0, 3], [7, 3, 2]], np.int64)
LOOKUP_TABLE_V2 = [
    _lookup_v2_case(RNG.normal(size=(10, 4)).astype("float32"), _ids_2d, "float32"),
    _lookup_v2_case(RNG.normal(size=(10, 4)), _ids_2d, "float64_repeated_ids"),
    _lookup_v2_case(RNG.normal(size=(10, 4)), _ids_2d, "padding_idx", padding_idx=3),
    _lookup_v2_case(RNG.normal(size=(10, 4)), _ids_2d, "sparse_gradient", is_sparse=True),
    _lookup_v2_case(
        RNG.normal(size=(10, 4)), _ids_2d, "sparse_gradient_without_padding", is_sparse=True, padding_idx=0
    ),
    _lookup_v2_case(RNG.normal(size=(8, 3)), np.array([5, 1, 5, 0], np.int32), "rank1_int32_ids"),
    _lookup_v2_case(RNG.normal(size=(8, 3)), np.array(6, np.int64), "0d_id"),
    _lookup_v2_case(RNG.normal(size=(8, 3)), np.array([[2], [7]], np.int64), "trailing_1_kept"),
    _lookup_v2_case(
        RNG.normal(size=(6, 2)), RNG.integers(0, 6, size=(2, 3, 2)).astype(np.int64), "rank3_ids", ids_lod=[0, 1, 2]
    ),
    _lookup_v2_case(
        RNG.normal(size=(10, 4)).astype("float32"),
        _ids_2d,
        "parameter_server_attributes_change_nothing",
        is_distributed=True,
        remote_prefetch=True,
        trainer_id=1,
        slot=2,
        height_sections=[5, 5],
        epmap=["127.0.0.1:6000"],
        table_names=["emb"],
    ),
]

CASES: dict[str, list[Case]] = {
    "cross_entropy": CROSS_ENTROPY,
    "softmax_with_cross_entropy": SOFTMAX_WITH_CROSS_ENTROPY,
    "top_k": TOP_K,
    "accuracy": ACCURACY,
    "auc": AUC,
    "lookup_table": LOOKUP_TABLE,
    "sequence_pool": SEQUENCE_POOL,
    "top_k_v2": TOP_K_V2,
    "lookup_table_v2": LOOKUP_TABLE_V2,
}
CASES["top_k"] += TOP_K_INPUT

_scores = np.zeros((3, 4), np.float32)
_table = np.zeros((5, 2), np.float32)

# (op type, case, pattern the ShapeError raised by inference must match)
INFER_ERRORS: list[tuple[str, Case, str]] = [
    ("top_k_v2", Case({"X": _scores}, {"k": 4, "axis": 0}), r"k=4 exceeds dimension 0 of X .*\[3, 4\]"),
    ("top_k_v2", Case({"X": _scores}, {"k": 5}), r"k=5 exceeds the last dimension of X .*\[3, 4\]"),
    ("top_k_v2", Case({"X": _scores}, {"axis": 2}), r"axis 2 is out of range for rank 2"),
    ("top_k_v2", Case({"X": _scores}, {"k": 0}), r"k must be at least 1, got 0"),
    ("top_k_v2", Case({"X": _scores, "K": np.array([2.0])}), r"K .*float64 \[1\]\) has dtype float64"),
    ("top_k_v2", Case({"X": _scores, "K": np.array([2, 3])}), r"K .*\[2\]\) must hold one value"),
    ("top_k_v2", Case({"X": np.zeros((), np.float32)}, {"k": 2}), r"a 0-D X .* takes axis 0 or -1 and k=1"),
    ("top_k_v2", Case({"X": np.zeros(3, bool)}), r"top_k_v2: X .* has dtype bool"),
    ("lookup_table_v2", Case({"W": np.zeros((5, 2, 2)), "Ids": np.zeros(3, np.int64)}), r"W .* must be a floating"),
    ("lookup_table_v2", Case({"W": _table, "Ids": np.zeros(3)}), r"Ids .*float64 \[3\]\) must be int64 or int32"),
    (
        "lookup_table_v2",
        Case({"W": _table, "Ids": np.zeros(3, np.int64)}, {"padding_idx": 5}),
        r"padding_idx 5 is out of range for table W .*\[5, 2\]",
    ),
    ("lookup_table", Case({"W": _table, "Ids": np.zeros(3, np.int64)}), r"lookup_table_v2 takes any shape"),
]

# (op type, case, pattern the BlockirError raised by the kernel must match)
KERNEL_ERRORS: list[tuple[str, Case, str]] = [
    ("top_k_v2", Case({"X": _scores, "K": np.array([5], np.int32)}), r"k=5 exceeds dimension 1 of X \[3, 4\]"),
    ("top_k_v2", Case({"X": _scores, "K": np.array([0], np.int64)}), r"k must be at least 1, got 0"),
    ("top_k", Case({"X": _scores, "K": np.array([7], np.int64)}), r"k=7 exceeds dimension 1 of X \[3, 4\]"),
    (
        "lookup_table_v2",
        Case({"W": _table, "Ids": np.array([[1, 5]])}),
        r"id 5 is out of range for a table of height 5",
    ),
    ("lookup_table_v2", Case({"W": _table, "Ids": np.array([-1])}), r"id -1 is out of range"),
]

BEHAVIOUR_TESTED: dict[str, str] = {
    "feed": "tests/ops/test_io_ops.py",
    "fetch": "tests/ops/test_io_ops.py",
    "memcpy": "tests/ops/test_io_ops.py",
    "split_batch": "tests/ops/test_parallel_ops.py",
    "allreduce": "tests/ops/test_parallel_ops.py",
    "device_allreduce": "tests/ops/test_parallel_ops.py",
    "distributed_lookup_table": "tests/distributed/test_ops.py",
    "send": "tests/distributed/test_ops.py",
    "recv": "tests/distributed/test_ops.py",
    "geo_sync": "tests/distributed/test_ops.py",
    "broadcast": "tests/ops/test_parallel_ops.py",
    "uniform_random": "tests/ops/test_random_ops.py",
    "gaussian_random": "tests/ops/test_random_ops.py",
    "sgd": "tests/ops/test_optimizer_ops.py",
    "momentum": "tests/ops/test_optimizer_ops.py",
    "adagrad": "tests/ops/test_optimizer_ops.py",
    "adam": "tests/ops/test_optimizer_ops.py",
    "fc_grad_sgd": "tests/ops/test_fc_grad_sgd.py",
    **dict.fromkeys(
        ["channel_create", "channel_send", "channel_recv", "channel_close", "go", "select"],
        "tests/runtime/test_channel_ops.py",
    ),
}


# -- attention (ONNX's Attention) ---------------------------------------------------------------


def ref_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    past: tuple[np.ndarray, np.ndarray] | None = None,
    nonpad: np.ndarray | None = None,
    *,
    scale: float = 0.0,
    is_causal: bool = False,
    softcap: float = 0.0,
    window: tuple[int, int] = (-1, -1),
    mode: int = 0,
) -> dict[str, np.ndarray]:
    """Attention over 4-D [B, heads, S, size] inputs, one query row at a time, every mask rule spelled out."""
    if past is not None:
        k, v = np.concatenate((past[0], k), axis=2), np.concatenate((past[1], v), axis=2)
    batch, heads, q_len, size = q.shape
    kv_heads, kv_len = k.shape[1], k.shape[2]
    scale = scale or 1 / np.sqrt(size)
    y = np.zeros((batch, heads, q_len, v.shape[3]), q.dtype)
    qk = np.zeros((batch, heads, q_len, kv_len), q.dtype)
    for b in range(batch):
        for h in range(heads):
            g = h // (heads // kv_heads)
            for i in range(q_len):
                offset = past[0].shape[2] if past is not None else (nonpad[b] - q_len if nonpad is not None else 0)
                scores = np.array([q[b, h, i] @ k[b, g, j] * scale for j in range(kv_len)])
                if softcap > 0:
                    scores = softcap * np.tanh(scores / softcap)
                bias = np.zeros(kv_len)
                for j in range(kv_len):
                    m = 0.0  # the mask's additive value: a boolean mask's False, and keys past its end, -inf
                    if mask is not None:
                        full = np.broadcast_to(mask, (batch, heads, q_len, mask.shape[-1]))[b, h, i]
                        m = -np.inf if j >= full.shape[-1] else float(full[j])
                        if mask.dtype == bool:
                            m = 0.0 if m == 1.0 else -np.inf
                    blocked = (
                        (is_causal and j > i + offset)
                        or (window[0] >= 0 and i + offset - j > window[0])
                        or (window[1] >= 0 and j - (i + offset) > window[1])
                        or (nonpad is not None and j >= nonpad[b])
                    )
                    bias[j] = -np.inf if blocked else m
                biased = scores + bias
                if np.all(bias == -np.inf):
                    probs = np.zeros(kv_len)
                else:
                    e = np.exp(biased - biased.max())
                    probs = e / e.sum()
                y[b, h, i] = probs @ v[b, g]
                qk[b, h, i] = {2: biased, 3: probs}.get(mode, scores)
    return {"Y": y, "PresentKey": k, "PresentValue": v, "QKMatmulOutput": qk}


def _heads_3d(a: np.ndarray) -> np.ndarray:
    """[B, heads, S, size] -> [B, S, heads * size]."""
    return a.transpose(0, 2, 1, 3).reshape(a.shape[0], a.shape[2], -1)


_ATT = np.random.default_rng(20261128)
_q, _k, _v = (_ATT.standard_normal(s) for s in ((2, 4, 3, 5), (2, 2, 4, 5), (2, 2, 4, 6)))
_past_k, _past_v = _ATT.standard_normal((2, 2, 2, 5)), _ATT.standard_normal((2, 2, 2, 6))
_float_mask = _ATT.standard_normal((3, 5))  # shorter than the 6 keys: padded with -inf
_float_mask[1, 2] = -np.inf
_bool_mask = _ATT.random((2, 1, 3, 4)) > 0.3
_bool_mask[0, 0, 1] = False  # a row with no key: zeros
_nonpad = np.array([4, 2], np.int64)

ATTENTION = [
    Case({"Q": _q, "K": _k, "V": _v}, {}, ref_attention(_q, _k, _v), name="gqa"),
    Case(
        {"Q": _q, "K": _k, "V": _v, "AttnMask": _float_mask, "PastKey": _past_k, "PastValue": _past_v},
        {"is_causal": True, "scale": 0.3, "qk_matmul_output_mode": 2},
        ref_attention(_q, _k, _v, _float_mask, (_past_k, _past_v), scale=0.3, is_causal=True, mode=2),
        name="causal_past_float_mask",
    ),
    Case(
        {"Q": _heads_3d(_q), "K": _heads_3d(_k), "V": _heads_3d(_v), "AttnMask": _bool_mask},
        {"q_num_heads": 4, "kv_num_heads": 2, "softcap": 2.0, "left_window_size": 1, "qk_matmul_output_mode": 3},
        {
            name: _heads_3d(value) if name == "Y" else value
            for name, value in ref_attention(_q, _k, _v, _bool_mask, softcap=2.0, window=(1, -1), mode=3).items()
            if name in ("Y", "QKMatmulOutput")
        },
        name="3d_softcap_window_bool_mask",
    ),
    Case(
        {"Q": _q, "K": _k, "V": _v, "NonpadKVSeqlen": _nonpad},
        {"is_causal": True, "right_window_size": 0},
        {"Y": ref_attention(_q, _k, _v, nonpad=_nonpad, is_causal=True)["Y"]},
        name="causal_nonpad",
    ),
    Case(
        {"Q": _q.astype("float32"), "K": _k.astype("float32"), "V": _v.astype("float32")},
        {"softmax_dtype": "float64"},
        {"Y": ref_attention(_q, _k, _v)["Y"].astype("float32")},
        name="float32_softmax_in_float64",
    ),
]
CASES["attention"] = ATTENTION


# -- linear_attention (ONNX's LinearAttention) --------------------------------------------------


def ref_linear_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    past: np.ndarray | None,
    decay: np.ndarray | None,
    beta: np.ndarray | None,
    heads: tuple[int, int],
    scale: float = 0.0,
) -> dict[str, np.ndarray]:
    """The recurrence per batch row, query head and position, on [B, T, heads * size] inputs."""
    (batch, steps, _), (q_heads, kv_heads) = q.shape, heads
    dk, dv = q.shape[2] // q_heads, v.shape[2] // kv_heads
    scale = scale or 1 / np.sqrt(dk)
    out = np.zeros((batch, steps, q_heads * dv), q.dtype)
    final = np.zeros((batch, kv_heads, dk, dv), q.dtype)
    for b in range(batch):
        for g in range(kv_heads):
            s = np.zeros((dk, dv)) if past is None else past[b, g].copy()
            for t in range(steps):
                kt, vt = k[b, t, g * dk : (g + 1) * dk], v[b, t, g * dv : (g + 1) * dv]
                if decay is not None:
                    d = decay[b, t]
                    s = s * np.exp(d[g : g + 1] if d.size == kv_heads else d[g * dk : (g + 1) * dk])[:, None]
                if beta is not None:
                    vt = beta[b, t, g if beta.shape[2] > 1 else 0] * (vt - s.T @ kt)
                s = s + np.outer(kt, vt)
                for h in range(g * (q_heads // kv_heads), (g + 1) * (q_heads // kv_heads)):
                    out[b, t, h * dv : (h + 1) * dv] = scale * (q[b, t, h * dk : (h + 1) * dk] @ s)
            final[b, g] = s
    return {"Output": out, "PresentState": final}


_LA = np.random.default_rng(20261129)
_lq, _lk, _lv = (_LA.standard_normal((2, 3, n)) * 0.5 for n in (12, 6, 4))  # 4 query heads, 2 KV heads: dk 3, dv 2
_l_past = _LA.standard_normal((2, 2, 3, 2)) * 0.5
_l_decay = -_LA.random((2, 3, 6))  # per key dim
_l_head_decay = -_LA.random((2, 3, 2))  # per head
_l_beta = _LA.random((2, 3, 2))
_LA_HEADS = {"q_num_heads": 4, "kv_num_heads": 2}

LINEAR_ATTENTION = [
    Case(
        {"Query": _lq, "Key": _lk, "Value": _lv},
        {**_LA_HEADS, "update_rule": "linear"},
        ref_linear_attention(_lq, _lk, _lv, None, None, None, (4, 2)),
        name="linear",
    ),
    Case(
        {"Query": _lq, "Key": _lk, "Value": _lv, "PastState": _l_past, "Decay": _l_decay, "Beta": _l_beta},
        {**_LA_HEADS, "scale": 0.7},
        ref_linear_attention(_lq, _lk, _lv, _l_past, _l_decay, _l_beta, (4, 2), 0.7),
        name="gated_delta_past",
    ),
    Case(
        {"Query": _lq, "Key": _lk, "Value": _lv, "Decay": _l_head_decay},
        {**_LA_HEADS, "update_rule": "gated"},
        ref_linear_attention(_lq, _lk, _lv, None, _l_head_decay, None, (4, 2)),
        name="gated_per_head",
    ),
    Case(
        {"Query": _lq, "Key": _lk, "Value": _lv, "Beta": _l_beta[:, :, :1]},
        {**_LA_HEADS, "update_rule": "delta"},
        ref_linear_attention(_lq, _lk, _lv, None, None, _l_beta[:, :, :1], (4, 2)),
        name="delta_one_beta",
    ),
]
CASES["linear_attention"] = LINEAR_ATTENTION


# -- rotary_embedding (ONNX's RotaryEmbedding) --------------------------------------------------


def ref_rotary_embedding(
    x: np.ndarray, cos: np.ndarray, sin: np.ndarray, positions: np.ndarray, dim: int, interleaved: bool
) -> np.ndarray:
    """x [B, heads, S, size]: each pair (i, i + dim / 2), or (2i, 2i + 1) interleaved, turned by the angle whose
    cosine and sine the caches hold at the row of the position, one pair at a time."""
    out = x.copy()
    batch, heads, length, _ = x.shape
    for b in range(batch):
        for h in range(heads):
            for s in range(length):
                for i in range(dim // 2):
                    c, n = cos[positions[b, s], i], sin[positions[b, s], i]
                    j, k = (2 * i, 2 * i + 1) if interleaved else (i, i + dim // 2)
                    out[b, h, s, j] = c * x[b, h, s, j] - n * x[b, h, s, k]
                    out[b, h, s, k] = n * x[b, h, s, j] + c * x[b, h, s, k]
    return out


_RE = np.random.default_rng(20261130)
_rx = _RE.standard_normal((2, 3, 4, 8))
_angles = _RE.standard_normal((6, 4))
_rpos = np.array([[0, 1, 2, 3], [5, 2, 0, 4]], np.int64)
_rcos, _rsin = np.cos(_angles), np.sin(_angles)
_partial_pos = np.array([[0, 1, 2, 3], [0, 1, 2, 3]], np.int64)

ROTARY_EMBEDDING = [
    Case(
        {"X": _rx, "CosCache": _rcos, "SinCache": _rsin, "PositionIds": _rpos},
        {},
        {"Out": ref_rotary_embedding(_rx, _rcos, _rsin, _rpos, 8, False)},
        name="halves",
    ),
    Case(
        {"X": _rx, "CosCache": _rcos[:, :2], "SinCache": _rsin[:, :2], "PositionIds": _rpos},
        {"interleaved": True, "rotary_embedding_dim": 4},
        {"Out": ref_rotary_embedding(_rx, _rcos, _rsin, _rpos, 4, True)},
        name="interleaved_partial",
    ),
    Case(
        {"X": _heads_3d(_rx), "CosCache": _rcos[_partial_pos], "SinCache": _rsin[_partial_pos]},
        {"num_heads": 3},
        {"Out": _heads_3d(ref_rotary_embedding(_rx, _rcos, _rsin, _partial_pos, 8, False))},
        name="3d_no_position_ids",
    ),
]
CASES["rotary_embedding"] = ROTARY_EMBEDDING


# -- dft and stft (ONNX's DFT and STFT) ---------------------------------------------------------


def _dft_matrix(n_in: int, n_out: int, inverse: bool) -> np.ndarray:
    """W with W[j, k] = exp(-+2 pi i j k / n_out) / (n_out if inverse), j < n_in: the sum written out."""
    j, k = np.arange(n_in)[:, None], np.arange(n_out)[None, :]
    return np.exp((2j if inverse else -2j) * np.pi * j * k / n_out) / (n_out if inverse else 1)


def ref_dft(x: np.ndarray, axis: int, length: int, inverse: bool = False, onesided: bool = False) -> np.ndarray:
    z = np.moveaxis(x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0), axis, -1)
    if inverse and onesided:  # the full spectrum from its first half (Hermitian symmetry)
        rest = np.conj(z[..., 1 : length - z.shape[-1] + 1][..., ::-1])
        z = np.concatenate((z, rest), axis=-1)
    z = z[..., :length]
    out = z @ _dft_matrix(z.shape[-1], length, inverse)
    if onesided and not inverse:
        out = out[..., : length // 2 + 1]
    out = np.moveaxis(out, -1, axis)
    if inverse and onesided:
        return out.real[..., None]
    return np.stack((out.real, out.imag), axis=-1)


_FT = np.random.default_rng(20261201)
_real_signal = _FT.standard_normal((2, 6, 3, 1))
_complex_signal = _FT.standard_normal((2, 5, 2))
_half_spectrum = ref_dft(_FT.standard_normal((3, 8, 1)), 1, 8, onesided=True)

DFT = [
    Case({"X": _real_signal}, {"axis": 1}, {"Out": ref_dft(_real_signal, 1, 6)}, name="real"),
    Case(
        {"X": _real_signal},
        {"axis": 2, "onesided": True, "dft_length": 5},
        {"Out": ref_dft(np.pad(_real_signal, [(0, 0), (0, 0), (0, 2), (0, 0)]), 2, 5, onesided=True)},
        name="onesided_padded",
    ),
    Case(
        {"X": _complex_signal},
        {"axis": 1, "inverse": True, "dft_length": 4},
        {"Out": ref_dft(_complex_signal, 1, 4, inverse=True)},
        name="inverse_cut",
    ),
    Case(
        {"X": _half_spectrum},
        {"axis": 1, "inverse": True, "onesided": True},
        {"Out": ref_dft(_half_spectrum, 1, 8, inverse=True, onesided=True)},
        name="irfft",
    ),
]


def ref_stft(signal: np.ndarray, step: int, length: int, window: np.ndarray | None, onesided: bool) -> np.ndarray:
    frames = [signal[:, s : s + length] for s in range(0, signal.shape[1] - length + 1, step)]
    stacked = np.stack(frames, axis=1)  # [batch, frames, length, 1 or 2]
    if window is not None:
        stacked = stacked * window[:, None]
    return ref_dft(stacked, 2, length, onesided=onesided)


_stft_signal = _FT.standard_normal((2, 20, 1))
_hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(8) / 8)
_stft_complex = _FT.standard_normal((1, 11, 2))

STFT = [
    Case(
        {"Signal": _stft_signal, "Window": _hann},
        {"frame_step": 4, "frame_length": 8},
        {"Out": ref_stft(_stft_signal, 4, 8, _hann, True)},
        name="windowed",
    ),
    Case(
        {"Signal": _stft_complex},
        {"frame_step": 3, "frame_length": 5, "onesided": False},
        {"Out": ref_stft(_stft_complex, 3, 5, None, False)},
        name="complex_two_sided",
    ),
]
CASES["dft"] = DFT
CASES["stft"] = STFT
