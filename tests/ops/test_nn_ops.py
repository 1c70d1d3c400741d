"""What the case tables cannot say about the nn and sequence ops: bad input and the sparse gradient's form."""

from __future__ import annotations

import numpy as np
import pytest

from blockir.errors import BlockirError, ShapeError
from blockir.ir.core import Program
from blockir.ops.values import LoDTensor, SelectedRows
from tests.ops.harness import run_op


def _block():
    block = Program().global_block()
    for name, dtype, shape in (
        ("p", "float32", (-1, 5)),
        ("p3", "float32", (2, 3, 5)),
        ("i", "int32", (4, 5)),
        ("label", "int64", (-1, 1)),
        ("flabel", "float32", (-1, 1)),
        ("wide", "int64", (-1, 2)),
        ("soft", "float64", (-1, 5)),
        ("w", "float32", (10, 4)),
        ("w1", "float32", (10,)),
        ("ids", "int64", (-1, 1)),
        ("fids", "float32", (-1, 1)),
        ("ids2", "int64", (-1, 2)),
        ("idx", "int64", (-1, 3)),
        ("seq", "float32", (-1, 4)),
    ):
        block.create_var(name, dtype=dtype, shape=shape)
    for name in ("o1", "o2", "o3"):
        block.create_var(name)
    return block


@pytest.mark.parametrize(
    "op_type, inputs, outputs, attrs, message",
    [
        (
            "cross_entropy",
            {"X": "p", "Label": "flabel"},
            {"Y": "o1"},
            {},
            r"Label 'flabel' \(float32 \[-1, 1\]\) must be int64 class indices \(soft_label=False\)",
        ),
        (
            "cross_entropy",
            {"X": "p", "Label": "wide"},
            {"Y": "o1"},
            {},
            r"Label 'wide' \(int64 \[-1, 2\]\) does not match 'p' \(float32 \[-1, 5\]\): dim 1 must be 1",
        ),
        (
            "cross_entropy",
            {"X": "p", "Label": "soft"},
            {"Y": "o1"},
            {"soft_label": True},
            r"soft Label 'soft' \(float64 \[-1, 5\]\) must have the dtype of 'p'",
        ),
        (
            "cross_entropy",
            {"X": "i", "Label": "label"},
            {"Y": "o1"},
            {},
            r"X 'i' \(int32 \[4, 5\]\) must be a floating-point tensor",
        ),
        (
            "cross_entropy",
            {"X": "p3", "Label": "label"},
            {"Y": "o1"},
            {},
            r"Label 'label' .* must have the rank of 'p3'",
        ),
        (
            "softmax_with_cross_entropy",
            {"Logits": "p", "Label": "label"},
            {"Softmax": "o1", "Loss": "o2"},
            {"axis": 2},
            r"axis 2 is out of range for rank 2",
        ),
        ("top_k", {"X": "p"}, {"Out": "o1", "Indices": "o2"}, {"k": 6}, r"k=6 exceeds the last dimension of X 'p'"),
        ("top_k", {"X": "p"}, {"Out": "o1", "Indices": "o2"}, {"k": 0}, r"k must be at least 1, got 0"),
        (
            "accuracy",
            {"Out": "p", "Indices": "p", "Label": "label"},
            {"Accuracy": "o1", "Correct": "o2", "Total": "o3"},
            {},
            r"Indices 'p' \(float32 \[-1, 5\]\) must be an int64 \[N, k\] tensor",
        ),
        (
            "accuracy",
            {"Out": "idx", "Indices": "idx", "Label": "wide"},
            {"Accuracy": "o1", "Correct": "o2", "Total": "o3"},
            {},
            r"Label 'wide' .* must have shape \[N, 1\]",
        ),
        (
            "lookup_table",
            {"W": "w", "Ids": "fids"},
            {"Out": "o1"},
            {},
            r"Ids 'fids' \(float32 \[-1, 1\]\) must be int64 or int32",
        ),
        (
            "lookup_table",
            {"W": "w", "Ids": "ids2"},
            {"Out": "o1"},
            {},
            r"Ids 'ids2' .* must have a last dimension of 1",
        ),
        (
            "lookup_table",
            {"W": "w1", "Ids": "ids"},
            {"Out": "o1"},
            {},
            r"W 'w1' \(float32 \[10\]\) must be a floating-point \[vocab, dim\] table",
        ),
        (
            "lookup_table",
            {"W": "w", "Ids": "ids"},
            {"Out": "o1"},
            {"padding_idx": 10},
            r"padding_idx 10 is out of range for table W 'w' \(float32 \[10, 4\]\)",
        ),
        (
            "sequence_pool",
            {"X": "seq"},
            {"Out": "o1", "MaxIndex": "o2"},
            {"pooltype": "MEDIAN"},
            r"pooltype 'MEDIAN' is not one of SUM, AVERAGE, SQRT, MAX, LAST, FIRST",
        ),
        (
            "sequence_pool",
            {"X": "i"},
            {"Out": "o1"},
            {"pooltype": "SUM"},
            r"X 'i' \(int32 \[4, 5\]\) must be a floating",
        ),
    ],
)
def test_inference_rejects_bad_input(op_type, inputs, outputs, attrs, message):
    with pytest.raises(ShapeError, match=message):
        _block().append_op(op_type, inputs, outputs, attrs)


def test_inference_shapes():
    block = _block()
    block.create_var("label3", dtype="int64", shape=(2, 1, 5))
    block.append_op(
        "softmax_with_cross_entropy", {"Logits": "p3", "Label": "label3"}, {"Softmax": "o1", "Loss": "o2"}, {"axis": 1}
    )
    assert block.var("o1").shape == (2, 3, 5) and block.var("o2").shape == (2, 1, 5)
    block.create_var("seq2", dtype="float32", shape=(-1, 4), lod_level=2)
    block.create_var("pooled")
    block.append_op("sequence_pool", {"X": "seq2"}, {"Out": "pooled"}, {"pooltype": "MAX"})
    assert (block.var("pooled").shape, block.var("pooled").lod_level) == ((-1, 4), 1)


def test_labels_out_of_range_are_named():
    probs = np.full((2, 3), 1 / 3)
    with pytest.raises(BlockirError, match=r"label 3 is out of range \[0, 3\) \(ignore_index=-100\)\n  in: "):
        run_op("cross_entropy", {"X": probs, "Label": np.array([[0], [3]])})
    with pytest.raises(BlockirError, match=r"label -2 is out of range \[0, 3\)"):
        run_op("softmax_with_cross_entropy", {"Logits": probs, "Label": np.array([[-2], [1]])})
    # int32 labels, either end of the range, the gradient kernel too (it checks the labels as the forward does)
    for bad in (-1, 3):
        label = np.array([[bad], [1]], np.int32)
        with pytest.raises(BlockirError, match=rf"label {bad} is out of range \[0, 3\)"):
            run_op("softmax_with_cross_entropy", {"Logits": probs, "Label": label})
        with pytest.raises(BlockirError, match=rf"label {bad} is out of range \[0, 3\)"):
            run_op("softmax_with_cross_entropy_grad", {"Label": label, "Softmax": probs, "Loss@GRAD": np.ones((2, 1))})


def test_ids_out_of_range_are_named_with_the_table_height():
    w = np.zeros((5, 2), np.float32)
    with pytest.raises(BlockirError, match=r"id 7 is out of range for a table of height 5 \(valid ids: 0\.\.4\)"):
        run_op("lookup_table", {"W": w, "Ids": np.array([[1], [7]])})
    with pytest.raises(BlockirError, match=r"id -1 is out of range for a table of height 5"):
        run_op("lookup_table_grad", {"W": w, "Ids": np.array([[-1]]), "Out@GRAD": np.zeros((1, 2), np.float32)})


def test_lod_offsets_are_checked_and_stored_as_int_lists():
    data = np.zeros((5, 1))
    for level in ([0, 2, 5], np.array([0, 2, 5], np.uint64), np.array([0, 2, 5], np.int32)):
        lod = LoDTensor(data, [level]).lod
        assert lod == [[0, 2, 5]] and type(lod[0][0]) is int
    assert LoDTensor(data, [[0, 2], [0, 2, 5]]).lod == [[0, 2], [0, 2, 5]]
    for lod, message in (
        ([[]], r"level 0 must start at 0 and not decrease: \[\]"),
        ([[1, 5]], r"level 0 must start at 0 and not decrease: \[1, 5\]"),
        ([np.array([0, 3, 2, 5])], r"level 0 must start at 0 and not decrease: \[0, 3, 2, 5\]"),
        ([[0, 2.5, 5]], r"level 0 must be a list of integer offsets, got \[0, 2.5, 5\]"),
        ([[[0, 5]]], r"level 0 must be a list of integer offsets"),
        ([[0, 4]], r"level 0 ends at 4, expected 5"),
        ([[0, 3], [0, 2, 5]], r"level 0 ends at 3, expected 2: \[\[0, 3\], \[0, 2, 5\]\]"),
    ):
        with pytest.raises(BlockirError, match=message):
            LoDTensor(data, lod)


def test_sequence_pool_needs_a_lod_tensor():
    with pytest.raises(
        BlockirError,
        match=r"sequence_pool: X must be a LoDTensor with at least one LoD level, "
        r"got a plain ndarray of shape \[3, 2\]",
    ):
        run_op("sequence_pool", {"X": np.zeros((3, 2))}, {"pooltype": "SUM"})


def test_sequence_pool_max_index_of_empty_sequences_and_is_test():
    x = LoDTensor(np.array([[1.0, 5.0], [3.0, 2.0], [3.0, 0.0]]), [[0, 0, 3]])
    out = run_op("sequence_pool", {"X": x}, {"pooltype": "MAX", "pad_value": 9.0})
    np.testing.assert_array_equal(out["Out"], [[9.0, 9.0], [3.0, 5.0]])
    np.testing.assert_array_equal(out["MaxIndex"], [[-1, -1], [1, 0]])  # ties: the first row holding the max
    assert run_op("sequence_pool", {"X": x}, {"pooltype": "MAX", "is_test": True})["MaxIndex"] is None


@pytest.mark.parametrize("seed", range(5))
def test_sequence_pool_max_equals_numpy_reduceat_over_random_lengths(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.choice([0, 1, 2, 3, 7, 8, 9, 33], size=12)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    x = rng.integers(-3, 4, size=(offsets[-1], 2)).astype("float64")  # small integers: many ties
    out = run_op("sequence_pool", {"X": LoDTensor(x, [offsets.tolist()])}, {"pooltype": "MAX", "pad_value": -9.0})
    full = offsets[:-1][lengths > 0]
    np.testing.assert_array_equal(out["Out"][lengths > 0], np.maximum.reduceat(x, full, axis=0))
    assert (out["Out"][lengths == 0] == -9.0).all()
    first = [[s + int(np.argmax(x[s : s + n, c])) for c in range(2)] for s, n in zip(offsets, lengths) if n]
    np.testing.assert_array_equal(out["MaxIndex"][lengths > 0], first)


def test_sparse_lookup_gradient_keeps_repeats_and_drops_padding():
    w = np.zeros((6, 2))
    ids = np.array([[4], [1], [4], [0]])
    dout = np.arange(8.0).reshape(4, 2)
    grad = run_op("lookup_table_grad", {"W": w, "Ids": ids, "Out@GRAD": dout}, {"is_sparse": True, "padding_idx": 1})[
        "W@GRAD"
    ]
    assert isinstance(grad, SelectedRows) and grad.height == 6
    np.testing.assert_array_equal(grad.rows, [4, 4, 0])
    np.testing.assert_array_equal(grad.values, dout[[0, 2, 3]])
    dense = run_op("lookup_table_grad", {"W": w, "Ids": ids, "Out@GRAD": dout}, {"padding_idx": 1})["W@GRAD"]
    np.testing.assert_array_equal(dense, grad.to_dense())


@pytest.mark.parametrize("upstream", ["Loss", "Softmax"])
def test_softmax_with_cross_entropy_gradient_through_one_output(upstream):
    rng = np.random.default_rng(6)
    logits, label, u = rng.normal(size=(3, 4)), np.array([[1], [3], [0]]), rng.normal(size=(3, 4))
    up = u[:, :1] if upstream == "Loss" else u

    def objective(z):
        out = run_op("softmax_with_cross_entropy", {"Logits": z, "Label": label})[upstream]
        return float(np.sum(out * up))

    numeric = np.zeros_like(logits)
    for pos in np.ndindex(*logits.shape):
        step = np.zeros_like(logits)
        step[pos] = 1e-6
        numeric[pos] = (objective(logits + step) - objective(logits - step)) / 2e-6
    softmax = run_op("softmax_with_cross_entropy", {"Logits": logits, "Label": label})["Softmax"]
    grad = run_op("softmax_with_cross_entropy_grad", {"Label": label, "Softmax": softmax, f"{upstream}@GRAD": up})[
        "Logits@GRAD"
    ]
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7)
