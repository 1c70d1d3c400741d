"""The recurrent layers ``lstm``, ``gru`` and ``simple_rnn``: the rnn op they build (Paddle's slots, attributes and
WeightList order), what the programs compute against the plain numpy loop of ``tests/ops/cases_rnn.py``, their
gradients in whole programs against finite differences, dropout in training and under ``clone(for_test=True)``,
and their errors."""

from __future__ import annotations

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from tests.dsl.test_backward_numeric import build, check_gradients
from tests.ops.cases_rnn import reference


def _run(main, startup, feed, fetch):
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=fetch, scope=scope), scope


def _weights(op, scope):
    return [np.asarray(scope.get(n)).astype(np.float64) for n in op.inputs["WeightList"]]


def test_lstm_builds_paddles_rnn_op_with_its_weight_list(progs):
    main, _ = progs
    x = bir.data("x", shape=[5, -1, 3], dtype="float32")
    out, last_h, last_c = bir.layers.lstm(x, None, None, 5, hidden_size=4, num_layers=2, is_bidirec=True)
    op = main.global_block().ops[-1]
    assert op.type == "rnn"
    assert sorted(op.inputs) == ["Input", "PreState", "WeightList"]
    assert sorted(op.outputs) == ["DropoutState", "Out", "Reserve", "State"]
    assert {k: op.attr(k) for k in ("mode", "num_layers", "is_bidirec", "input_size", "hidden_size")} == {
        "mode": "LSTM",
        "num_layers": 2,
        "is_bidirec": True,
        "input_size": 3,
        "hidden_size": 4,
    }
    shapes = [main.global_block().var(n).shape for n in op.inputs["WeightList"]]
    # W_ih, W_hh per layer and direction, then b_ih, b_hh per layer and direction
    assert shapes == [(16, 3), (16, 4)] * 2 + [(16, 8), (16, 4)] * 2 + [(16,)] * 8
    assert list(op.inputs["WeightList"][:2]) == ["lstm_0.w_0", "lstm_0.w_1"]
    assert list(op.inputs["WeightList"][8:10]) == ["lstm_0.b_0", "lstm_0.b_1"]
    assert out.shape == (5, -1, 8) and last_h.shape == (4, -1, 4) and last_c.shape == (4, -1, 4)


@pytest.mark.parametrize("bidirec", [False, True], ids=["forward", "bidirec"])
def test_lstm_computes_the_reference(progs, bidirec):
    main, startup = progs
    x = bir.data("x", shape=[4, -1, 3], dtype="float64")
    out, last_h, last_c = bir.layers.lstm(x, None, None, None, hidden_size=5, num_layers=2, is_bidirec=bidirec)
    feed = {"x": np.random.default_rng(0).normal(size=(4, 3, 3))}
    (got, h, c), scope = _run(main, startup, feed, [out, last_h, last_c])
    dirs = 2 if bidirec else 1
    zeros = [np.zeros((2 * dirs, 3, 5))] * 2
    want, (want_h, want_c) = reference(
        "LSTM", feed["x"], zeros, _weights(main.global_block().ops[-1], scope), None, 2, dirs
    )
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(c, want_c, rtol=1e-10, atol=1e-12)


def test_gru_with_initial_state_and_sequence_length_computes_the_reference(progs):
    main, startup = progs
    x = bir.data("x", shape=[4, -1, 3], dtype="float64")
    h0 = bir.data("h0", shape=[2, -1, 4], dtype="float64")
    lengths = bir.data("lengths", shape=[-1], dtype="int64")
    out, last_h = bir.layers.gru(x, 4, init_h=h0, is_bidirec=True, sequence_length=lengths)
    rng = np.random.default_rng(1)
    feed = {"x": rng.normal(size=(4, 3, 3)), "h0": rng.normal(size=(2, 3, 4)), "lengths": np.array([4, 1, 2])}
    (got, h), scope = _run(main, startup, feed, [out, last_h])
    weights = _weights(main.global_block().ops[-1], scope)
    want, (want_h,) = reference("GRU", feed["x"], [feed["h0"]], weights, feed["lengths"], 1, 2)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-12)
    assert not got[1:, 1].any() and not got[2:, 2].any()  # zeros past each sequence's end


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_simple_rnn_computes_the_reference(progs, activation):
    main, startup = progs
    x = bir.data("x", shape=[3, -1, 2], dtype="float64")
    out, last_h = bir.layers.simple_rnn(x, 3, num_layers=2, activation=activation)
    assert main.global_block().ops[-1].attr("mode") == f"RNN_{activation.upper()}"
    feed = {"x": np.random.default_rng(2).normal(size=(3, 2, 2))}
    (got, h), scope = _run(main, startup, feed, [out, last_h])
    weights = _weights(main.global_block().ops[-1], scope)
    want, (want_h,) = reference(f"RNN_{activation.upper()}", feed["x"], [np.zeros((2, 2, 3))], weights, None, 2, 1)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, want_h, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru", "simple_rnn"])
def test_gradients_through_the_recurrent_layers_match_finite_differences(kind):
    def body():
        x = bir.data("x", shape=[3, -1, 2], dtype="float64")
        lengths = bir.data("lengths", shape=[-1], dtype="int32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        if kind == "lstm":
            out, last_h, _ = bir.layers.lstm(
                x, None, None, 3, 2, num_layers=2, is_bidirec=True, sequence_length=lengths
            )
        else:
            layer = getattr(bir.layers, kind)
            out, last_h = layer(x, 2, num_layers=2, is_bidirec=True, sequence_length=lengths)
        h = bir.layers.reshape(bir.layers.transpose(last_h, [1, 0, 2]), [-1, 8])
        pred = bir.layers.fc(h, size=2, act="softmax")
        return bir.layers.mean(bir.layers.cross_entropy(pred, label)) + bir.layers.reduce_mean(out)

    model = build(body)
    rng = np.random.default_rng(3)
    feed = {
        "x": rng.normal(size=(3, 3, 2)),
        "lengths": np.array([3, 1, 2], np.int32),
        "label": np.array([[0], [1], [1]]),
    }
    assert "rnn_grad" in [op.type for op in model.main.global_block().ops]
    grads = check_gradients(model, feed)
    assert len(grads) == 16 + 2


def test_dropout_between_layers_in_training_and_none_in_the_test_clone(progs):
    main, startup = progs
    main.random_seed = 5
    x = bir.data("x", shape=[4, -1, 3], dtype="float32")
    out, _, _ = bir.layers.lstm(x, None, None, 4, 6, num_layers=2, dropout_prob=0.5)
    test = main.clone(for_test=True)
    op = main.global_block().ops[-1]
    assert op.attr("seed") != 0 and not op.attr("is_test")
    assert test.global_block().ops[-1].attr("is_test")
    feed = {"x": np.random.default_rng(4).normal(size=(4, 2, 3)).astype("float32")}
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    mask_name = op.outputs["DropoutState"][0]
    train_a, mask = exe.run(main, feed=feed, fetch_list=[out, mask_name], scope=scope)
    train_b = exe.run(main, feed=feed, fetch_list=[out], scope=scope)[0]
    inferred = exe.run(test, feed=feed, fetch_list=[out], scope=scope)[0]
    np.testing.assert_array_equal(train_a, train_b)  # the seed fixes the mask
    assert mask.dtype == np.uint8 and mask.shape == (4, 2, 6) and 0 < mask.mean() < 1
    assert not np.allclose(train_a, inferred)
    weights = _weights(op, scope)
    zeros = [np.zeros((2, 2, 6))] * 2
    want, _ = reference("LSTM", feed["x"].astype(np.float64), zeros, weights, None, 2, 1, mask, 0.5)
    np.testing.assert_allclose(train_a, want, rtol=1e-5, atol=1e-6)
    want_test, _ = reference("LSTM", feed["x"].astype(np.float64), zeros, weights, None, 2, 1)
    np.testing.assert_allclose(inferred, want_test, rtol=1e-5, atol=1e-6)


def test_named_param_attrs_name_each_weight(progs):
    main, _ = progs
    x = bir.data("x", shape=[2, -1, 3], dtype="float32")
    bir.layers.gru(x, 4, param_attr="enc_w", bias_attr="enc_b")
    names = main.global_block().ops[-1].inputs["WeightList"]
    assert list(names) == ["enc_w_0", "enc_w_1", "enc_b_0", "enc_b_1"]


@pytest.mark.parametrize(
    ("build_layer", "message"),
    [
        (lambda x: bir.layers.simple_rnn(x, 4, activation="sigmoid"), "activation must be 'tanh' or 'relu'"),
        (lambda x: bir.layers.gru(x, 4, bias_attr=False), "bias_attr=False: the rnn op needs every weight"),
        (lambda x: bir.layers.lstm(x, None, None, 7, 4, 1), "max_len 7 is not the number of time steps"),
        (lambda x: bir.layers.gru(x, 0), "hidden_size must be a positive int"),
        (lambda x: bir.layers.gru(x, 4, dropout_prob=1.5), "dropout_prob must be a number in"),
        (lambda x: bir.layers.gru(bir.layers.reshape(x, [-1, 3]), 4), "must be \\[time steps, batch, input size\\]"),
    ],
)
def test_errors_name_the_layer(progs, build_layer, message):
    x = bir.data("x", shape=[2, -1, 3], dtype="float32")
    with pytest.raises(BlockirError, match=message) as info:
        build_layer(x)
    assert "layers." in str(info.value)


def test_a_wrong_initial_state_is_refused_naming_the_layer(progs):
    x = bir.data("x", shape=[2, -1, 3], dtype="float32")
    h0 = bir.data("h0", shape=[2, -1, 4], dtype="float32")
    with pytest.raises(BlockirError, match="layers.gru: rnn: PreState .* must be"):
        bir.layers.gru(x, 4, init_h=h0)


def test_without_a_seed_every_training_run_draws_a_fresh_dropout_mask(progs):
    main, startup = progs
    x = bir.data("x", shape=[3, -1, 2], dtype="float32")
    out, _ = bir.layers.gru(x, 8, num_layers=2, dropout_prob=0.5)
    assert main.global_block().ops[-1].attr("seed") == 0
    mask = main.global_block().ops[-1].outputs["DropoutState"][0]
    feed = {"x": np.ones((3, 4, 2), np.float32)}
    scope = bir.Scope()
    exe = bir.Executor("cpu")
    exe.run(startup, scope=scope)
    first, second = (exe.run(main, feed=feed, fetch_list=[mask], scope=scope)[0] for _ in range(2))
    assert first.shape == (3, 4, 8) and not np.array_equal(first, second)
