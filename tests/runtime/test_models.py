"""The executor and bir.io on programs built by the DSL with the real op library."""

import numpy as np

import blockir as bir


def _mlp(seed: int = 3):
    main, startup = bir.Program(), bir.Program()
    main.random_seed = startup.random_seed = seed
    with bir.unique_name.guard(), bir.program_guard(main, startup):
        x = bir.data("x", shape=[-1, 4], dtype="float32")
        label = bir.data("label", shape=[-1, 1], dtype="int64")
        h = bir.layers.fc(x, size=8, act="relu")
        pred = bir.layers.fc(h, size=3, act="softmax")
        loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
        test = main.clone()
        bir.optimizer.SGD(learning_rate=0.5).minimize(loss)
    return main, startup, test, pred, loss


def _data(n: int = 64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, :1] > 0).astype("int64") + (x[:, 1:2] > 1).astype("int64")
    return x, y


def test_training_lowers_the_loss_and_matches_numpy_forward(exe):
    main, startup, test, pred, loss = _mlp()
    x, y = _data()
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    params = [scope.get(p.name) for p in main.all_parameters()]
    w0, b0, w1, b1 = (p.copy() for p in params)
    (probs,) = exe.run(test, feed={"x": x, "label": y}, fetch_list=[pred], scope=scope)
    logits = np.maximum(x @ w0 + b0, 0) @ w1 + b1
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    np.testing.assert_allclose(probs, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)
    losses = [float(exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)[0][0]) for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0]
    assert not np.array_equal(scope.get(main.all_parameters()[0].name), w0)  # SGD updated the scope's values


def test_inference_model_gives_the_same_predictions(tmp_path, exe):
    main, startup, test, pred, loss = _mlp()
    x, y = _data()
    scope = bir.Scope()
    exe.run(startup, scope=scope)
    for _ in range(5):
        exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss], scope=scope)
    (expected,) = exe.run(test, feed={"x": x, "label": y}, fetch_list=[pred], scope=scope)
    with bir.scope_guard(scope):
        bir.io.save_inference_model(str(tmp_path), ["x"], [pred], exe, main_program=main)
    served = bir.Scope()
    program, feeds, fetches = bir.io.load_inference_model(str(tmp_path), exe, scope=served)
    assert feeds == ["x"] and [v.name for v in fetches] == [pred.name]
    assert not any(op.type.endswith("_grad") or op.type == "sgd" for op in program.global_block().ops)
    assert "label" not in program.global_block().vars
    (got,) = exe.run(program, feed={"x": x}, scope=served)
    np.testing.assert_array_equal(got, expected)
    # The persistables saved are the parameters only (no learning rate, no gradients).
    assert sorted(served.names()) == sorted(p.name for p in main.all_parameters())


def test_startup_then_main_through_the_global_scope(exe):
    main, startup, test, pred, loss = _mlp()
    x, y = _data(8)
    with bir.scope_guard(bir.Scope()):
        exe.run(startup)
        (before,) = exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss])
        (after,) = exe.run(main, feed={"x": x, "label": y}, fetch_list=[loss])
        assert set(p.name for p in main.all_parameters()) <= set(bir.global_scope().names())
    assert before.shape == (1,) and after[0] < before[0]


def test_program_defaults_to_the_dsl_main_program(exe):
    main, startup, test, pred, loss = _mlp()
    x, y = _data(8)
    with bir.program_guard(main, startup), bir.scope_guard(bir.Scope()):
        exe.run(startup)
        (loss_v,) = exe.run(feed={"x": x, "label": y}, fetch_list=[loss])
        params = {p.name for p in main.all_parameters()}
        assert params <= set(bir.global_scope().names())
    assert loss_v.shape == (1,) and np.isfinite(loss_v[0])
