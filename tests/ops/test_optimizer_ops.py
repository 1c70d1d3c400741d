"""Behaviour of the optimizer ops: dense updates against plain numpy, sparse == dense, in place, errors."""

from __future__ import annotations

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, ShapeError
from blockir.ir.core import Program
from blockir.ir.dtypes import VarKind
from blockir.ir.schema import lookup
from blockir.ops.values import SelectedRows
from tests.ops.harness import run_op

V, D = 6, 3
ROWS = np.array([4, 1, 4, 0, 4])  # row 4 repeats; rows 2, 3, 5 get no gradient


def f32(value: float) -> float:
    """A FLOAT attribute's value as the op sees it (stored as float32, as on the wire)."""
    return float(np.float32(value))


# -- independent references: return new arrays, never mutate -----------------------------------


def ref_sgd(p, g, lr):
    return (p - lr * g,)


def ref_momentum(p, g, v, lr, mu, use_nesterov=False):
    mu = f32(mu)
    v = mu * v + g
    return (p - lr * (g + mu * v) if use_nesterov else p - lr * v), v


def ref_adagrad(p, g, m, lr, epsilon=1e-6):
    epsilon = f32(epsilon)
    m = m + g**2
    return p - lr * g / (np.sqrt(m) + epsilon), m


def ref_adam(p, g, lr, m1, m2, b1p, b2p, beta1=0.9, beta2=0.999, epsilon=1e-8):
    beta1, beta2, epsilon = f32(beta1), f32(beta2), f32(epsilon)
    m1 = beta1 * m1 + (1 - beta1) * g
    m2 = beta2 * m2 + (1 - beta2) * g**2
    lr_t = lr * np.sqrt(1 - b2p) / (1 - b1p)
    p = p - lr_t * m1 / (np.sqrt(m2) + epsilon * np.sqrt(1 - b2p))
    return p, m1, m2, b1p * beta1, b2p * beta2


def _state(op_type: str, rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
    """Random inputs (but Grad) of an update op, in its input-slot order."""
    shape = (V, D)
    values = {
        "Param": rng.normal(size=shape),
        "LearningRate": np.array([0.1]),
        "Velocity": rng.normal(size=shape),
        "Moment": rng.random(shape),
        "Moment1": rng.normal(size=shape) * 0.1,
        "Moment2": rng.random(shape) * 0.1,
        "Beta1Pow": np.array([0.9**3]),
        "Beta2Pow": np.array([0.999**3]),
    }
    slots = [s.name for s in lookup(op_type).inputs if s.name != "Grad"]
    return {s: values[s].astype(dtype) for s in slots}


def _call(op_type: str, state: dict[str, np.ndarray], grad, wants=None, **attrs):
    out = run_op(op_type, {**state, "Grad": grad}, attrs, wants)
    return tuple(out[s.name] for s in lookup(op_type).outputs)


def _ref(op_type: str, state: dict[str, np.ndarray], grad, **attrs):
    s = {k: v.astype("float64") for k, v in state.items()}
    g = np.asarray(grad, dtype="float64")
    lr = s["LearningRate"][0]
    if op_type == "sgd":
        return ref_sgd(s["Param"], g, lr)
    if op_type == "momentum":
        return ref_momentum(s["Param"], g, s["Velocity"], lr, **attrs)
    if op_type == "adagrad":
        return ref_adagrad(s["Param"], g, s["Moment"], lr, **attrs)
    return ref_adam(s["Param"], g, lr, s["Moment1"], s["Moment2"], s["Beta1Pow"], s["Beta2Pow"], **attrs)


CONFIGS = [
    ("sgd", {}),
    ("momentum", {"mu": 0.9}),
    ("momentum", {"mu": 0.8, "use_nesterov": True}),
    ("adagrad", {}),
    ("adagrad", {"epsilon": 1e-3}),
    ("adam", {}),
    ("adam", {"beta1": 0.8, "beta2": 0.95, "epsilon": 1e-4}),
]


@pytest.mark.parametrize("op_type, attrs", CONFIGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dense_update_matches_numpy_over_two_steps_and_is_in_place(op_type, attrs, dtype):
    rng = np.random.default_rng(1)
    state = _state(op_type, rng, dtype)
    expected = {k: v.copy() for k, v in state.items()}
    out_slots = [s.name.removesuffix("Out") for s in lookup(op_type).outputs]
    tol = 1e-5 if dtype == "float32" else 1e-12
    for _ in range(2):
        grad = rng.normal(size=(V, D)).astype(dtype)
        want = _ref(op_type, expected, grad, **attrs)
        got = _call(op_type, state, grad, **attrs)
        for slot, g, w in zip(out_slots, got, want):
            assert g is state[slot], f"{slot} must be updated in place"
            assert g.dtype == np.dtype(dtype)
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=slot)
            expected[slot] = np.asarray(w)


def _sparse_grad(rng: np.random.Generator) -> tuple[SelectedRows, np.ndarray]:
    values = rng.normal(size=(len(ROWS), D))
    dense = np.zeros((V, D))
    for r, v in zip(ROWS, values):
        dense[r] += v
    return SelectedRows(ROWS.copy(), values, V), dense


@pytest.mark.parametrize("op_type, attrs", CONFIGS)
def test_sparse_update_equals_dense_update_with_repeated_rows(op_type, attrs):
    rng = np.random.default_rng(2)
    sparse_state = _state(op_type, rng, "float64")
    dense_state = {k: v.copy() for k, v in sparse_state.items()}
    for _ in range(2):
        sparse, dense = _sparse_grad(rng)
        got = _call(op_type, sparse_state, sparse, **attrs)
        want = _call(op_type, dense_state, dense, **attrs)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_non_lazy_sparse_adam_updates_rows_without_gradient():
    rng = np.random.default_rng(3)
    state = _state("adam", rng, "float64")
    before = {k: v.copy() for k, v in state.items()}
    sparse, _ = _sparse_grad(rng)
    _call("adam", state, sparse)
    untouched = [2, 3, 5]
    assert not np.allclose(state["Moment1"][untouched], before["Moment1"][untouched])
    assert not np.allclose(state["Param"][untouched], before["Param"][untouched])


def test_lazy_adam_touches_only_the_rows_present_and_merges_repeats():
    rng = np.random.default_rng(4)
    state = _state("adam", rng, "float64")
    before = {k: v.copy() for k, v in state.items()}
    sparse, dense = _sparse_grad(rng)
    _call("adam", state, sparse, lazy_mode=True)
    present, absent = [0, 1, 4], [2, 3, 5]
    for slot in ("Param", "Moment1", "Moment2"):
        np.testing.assert_array_equal(state[slot][absent], before[slot][absent])
    want = ref_adam(
        before["Param"][present],
        dense[present],
        before["LearningRate"][0],
        before["Moment1"][present],
        before["Moment2"][present],
        before["Beta1Pow"],
        before["Beta2Pow"],
    )
    for slot, w in zip(("Param", "Moment1", "Moment2"), want):
        np.testing.assert_allclose(state[slot][present], w, rtol=1e-12)
    np.testing.assert_allclose(state["Beta1Pow"], before["Beta1Pow"] * f32(0.9))
    np.testing.assert_allclose(state["Beta2Pow"], before["Beta2Pow"] * f32(0.999))


def test_adam_leaves_beta_powers_alone_when_their_outputs_are_not_bound():
    rng = np.random.default_rng(5)
    state = _state("adam", rng, "float64")
    b1p, b2p = state["Beta1Pow"].copy(), state["Beta2Pow"].copy()
    _call("adam", state, rng.normal(size=(V, D)), wants=(True, True, True, False, False))
    np.testing.assert_array_equal(state["Beta1Pow"], b1p)
    np.testing.assert_array_equal(state["Beta2Pow"], b2p)


def sgd(param, grad, lr):
    return run_op("sgd", {"Param": param, "Grad": grad, "LearningRate": lr})["ParamOut"]


def test_sparse_sgd_touches_only_its_rows():
    param = np.ones((V, D))
    sgd(param, SelectedRows(np.array([2, 2]), np.ones((2, D)), V), np.array([0.5]))
    expected = np.ones((V, D))
    expected[2] -= 1.0
    np.testing.assert_array_equal(param, expected)


# -- bad input ------------------------------------------------------------------------------------


def test_kernel_rejects_mismatched_gradients():
    param, lr = np.zeros((V, D)), np.array([0.1])
    with pytest.raises(BlockirError, match=r"Grad of shape \[3, 3\] does not match Param \[6, 3\]\n  in: sgd"):
        sgd(param, np.zeros((3, D)), lr)
    with pytest.raises(BlockirError, match=r"rows must lie in \[0, 6\), got 0\.\.9"):
        sgd(param, SelectedRows(np.array([0, 9]), np.zeros((2, D)), V), lr)
    with pytest.raises(BlockirError, match=r"sparse Grad of shape \[7, 3\]"):
        run_op(
            "adagrad",
            {
                "Param": param,
                "Grad": SelectedRows(np.array([0]), np.zeros((1, D)), 7),
                "Moment": np.zeros((V, D)),
                "LearningRate": lr,
            },
        )


def _block():
    block = Program().global_block()
    for name, shape in (
        ("w", (V, D)),
        ("g", (V, D)),
        ("v", (V, D)),
        ("other", (V, D)),
        ("lr", (1,)),
        ("lr2", (2,)),
        ("b1", (1,)),
        ("b2", (1,)),
        ("m1", (V, D)),
        ("m2", (V, D)),
    ):
        block.create_var(name, shape=shape, persistable=True)
    block.create_var("g64", shape=(V, D), dtype="float64")
    block.create_var("ids", shape=(V, D), dtype="int64")
    block.create_var("gs", kind=VarKind.SELECTED_ROWS, shape=(V, D))
    return block


def test_inference_accepts_in_place_updates_and_sparse_gradients():
    block = _block()
    block.append_op("sgd", {"Param": "w", "Grad": "gs", "LearningRate": "lr"}, {"ParamOut": "w"})
    block.append_op(
        "adam",
        {
            "Param": "w",
            "Grad": "g",
            "LearningRate": "lr",
            "Moment1": "m1",
            "Moment2": "m2",
            "Beta1Pow": "b1",
            "Beta2Pow": "b2",
        },
        {"ParamOut": "w", "Moment1Out": "m1", "Moment2Out": "m2", "Beta1PowOut": "b1", "Beta2PowOut": "b2"},
    )
    assert block.var("w").shape == (V, D) and lookup("adam").side_effects


@pytest.mark.parametrize(
    "op_type, inputs, outputs, attrs, message",
    [
        (
            "sgd",
            {"Param": "w", "Grad": "g", "LearningRate": "lr"},
            {"ParamOut": "other"},
            {},
            r"updates in place: ParamOut \['other'\] must name the Param variable \['w'\]",
        ),
        (
            "momentum",
            {"Param": "w", "Grad": "g", "Velocity": "v", "LearningRate": "lr"},
            {"ParamOut": "w", "VelocityOut": "other"},
            {"mu": 0.9},
            r"VelocityOut \['other'\] must name the Velocity",
        ),
        (
            "sgd",
            {"Param": "w", "Grad": "g64", "LearningRate": "lr"},
            {"ParamOut": "w"},
            {},
            r"Grad 'g64' \(float64 \[6, 3\]\) must match Param 'w' \(float32 \[6, 3\]\)",
        ),
        (
            "sgd",
            {"Param": "w", "Grad": "g", "LearningRate": "lr2"},
            {"ParamOut": "w"},
            {},
            r"LearningRate 'lr2' \(float32 \[2\]\) must be a float tensor of one element",
        ),
        (
            "sgd",
            {"Param": "ids", "Grad": "ids", "LearningRate": "lr"},
            {"ParamOut": "ids"},
            {},
            r"Param 'ids' \(int64 \[6, 3\]\) must be a floating-point tensor",
        ),
        (
            "adam",
            {
                "Param": "w",
                "Grad": "g",
                "LearningRate": "lr",
                "Moment1": "m1",
                "Moment2": "lr2",
                "Beta1Pow": "b1",
                "Beta2Pow": "m1",
            },
            {"ParamOut": "w"},
            {},
            r"Moment2 'lr2' \(float32 \[2\]\) must have the shape of Param",
        ),
        (
            "adam",
            {
                "Param": "w",
                "Grad": "g",
                "LearningRate": "lr",
                "Moment1": "m1",
                "Moment2": "m2",
                "Beta1Pow": "b1",
                "Beta2Pow": "m1",
            },
            {"ParamOut": "w"},
            {},
            r"Beta2Pow 'm1' \(float32 \[6, 3\]\) must have one element",
        ),
    ],
)
def test_inference_rejects_bad_updates(op_type, inputs, outputs, attrs, message):
    with pytest.raises(ShapeError, match=message):
        _block().append_op(op_type, inputs, outputs, attrs)


# -- end to end: an embedding trained with sparse gradients equals one trained with dense ones --------
# Paddle's semantics: a SelectedRows gradient means "zero for the rows not listed", so every update
# equals the dense update of the densified gradient; Momentum and (non-lazy, the default) Adam still
# move rows absent from the batch through the moments earlier batches left. Only Adam's lazy_mode
# departs from that: it leaves such rows alone.

FIRST = [[2, 3, 2], [3]]  # id 2 twice in a document
LATER = [[4, 1, 4], [0, 4]]  # id 4 three times in a batch; ids 2 and 3 absent; id 5 is never used


def _train_embedding(is_sparse: bool, optimizer, batches: list[list[list[int]]]) -> np.ndarray:
    """The embedding table of a bag-of-words model after one update per batch of documents."""
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = 5
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        ids = bir.data("ids", shape=[-1, 1], dtype="int64", lod_level=1)
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        emb = bir.layers.embedding(ids, size=[V, D], is_sparse=is_sparse, param_attr="emb", dtype="float64")
        pred = bir.layers.fc(bir.layers.sequence_pool(emb, "sum"), size=2, act="softmax")
        optimizer.minimize(bir.layers.mean(bir.layers.cross_entropy(pred, label)))
    grad_kind = main.global_block().var("emb@GRAD").kind
    assert grad_kind is (VarKind.SELECTED_ROWS if is_sparse else VarKind.LOD_TENSOR)
    exe, scope = bir.Executor("cpu"), bir.Scope()
    exe.run(startup, scope=scope)
    for docs in batches:
        words = bir.LoDTensor.from_lengths(np.array(sum(docs, [])).reshape(-1, 1), [len(d) for d in docs])
        exe.run(main, feed={"ids": words, "label": np.array([[0], [1]])}, scope=scope)
    return scope.get("emb")


OPTIMIZERS = {
    "sgd": lambda: bir.optimizer.SGD(learning_rate=0.1),
    "momentum": lambda: bir.optimizer.Momentum(learning_rate=0.1, momentum=0.9),
    "adagrad": lambda: bir.optimizer.Adagrad(learning_rate=0.1),
    "adam": lambda: bir.optimizer.Adam(learning_rate=0.1),
}
MOVES_ABSENT_ROWS = {"sgd": False, "momentum": True, "adagrad": False, "adam": True}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_training_with_a_sparse_embedding_equals_training_with_a_dense_one(name):
    batches = [FIRST, LATER, LATER]
    sparse = _train_embedding(True, OPTIMIZERS[name](), batches)
    np.testing.assert_allclose(sparse, _train_embedding(False, OPTIMIZERS[name](), batches), rtol=1e-12, atol=1e-14)
    initial = _train_embedding(True, OPTIMIZERS[name](), [])
    after_first = _train_embedding(True, OPTIMIZERS[name](), [FIRST])
    assert not np.allclose(sparse[[0, 1, 4]], after_first[[0, 1, 4]])
    assert np.array_equal(sparse[[2, 3]], after_first[[2, 3]]) is not MOVES_ABSENT_ROWS[name]
    np.testing.assert_array_equal(sparse[5], initial[5])  # no gradient ever: no moment to carry


def test_lazy_adam_leaves_rows_absent_from_the_batch_alone():
    lazy = _train_embedding(True, bir.optimizer.Adam(learning_rate=0.1, lazy_mode=True), [FIRST, LATER])
    dense = _train_embedding(False, bir.optimizer.Adam(learning_rate=0.1), [FIRST, LATER])
    after_first = _train_embedding(True, bir.optimizer.Adam(learning_rate=0.1, lazy_mode=True), [FIRST])
    np.testing.assert_array_equal(lazy[[2, 3]], after_first[[2, 3]])
    assert not np.allclose(dense[[2, 3]], after_first[[2, 3]])
    # the rows present see the same gradients and moments in both modes
    np.testing.assert_allclose(lazy[[0, 1, 4]], dense[[0, 1, 4]], rtol=1e-12, atol=1e-14)
