"""Optimizers: update ops, their state in the startup program, per-parameter learning rates."""

import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir.schema import OpRole


def _net():
    x = bir.data("x", shape=[-1, 5])
    label = bir.data("label", shape=[-1, 1], dtype="int64")
    pred = bir.layers.fc(x, size=3, act="softmax")
    return bir.layers.mean(bir.layers.cross_entropy(pred, label))


def _startup_fills(startup):
    return {op.output("Out")[0]: op for op in startup.global_block().ops if op.type == "fill_constant"}


def test_sgd_appends_one_in_place_update_per_parameter(progs):
    main, startup = progs
    loss = _net()
    optimize_ops, params_grads = bir.optimizer.SGD(learning_rate=0.1).minimize(loss)
    assert [op.type for op in optimize_ops] == ["sgd", "sgd"]
    assert main.global_block().ops[-2:] == optimize_ops
    for op, (p, g) in zip(optimize_ops, params_grads):
        assert op.input("Param") == op.output("ParamOut") == (p.name,)
        assert op.input("Grad") == (g.name,)
        assert op.input("LearningRate") == ("learning_rate_0",)
        assert op.attr("op_role") == OpRole.OPTIMIZE
        assert op.attr("op_role_var") == (p.name, g.name)
        assert op.attr("op_namescope") == "/optimizer/"
    lr = main.global_block().var("learning_rate_0")
    assert lr.persistable and lr.shape == (1,) and lr.dtype == "float32"
    fill = _startup_fills(startup)["learning_rate_0"]
    assert fill.attr("value") == pytest.approx(0.1) and fill.attr("shape") == (1,)
    assert startup.global_block().var("learning_rate_0").persistable
    bir.ir.verify(main)
    bir.ir.verify(startup)


def test_momentum_and_adagrad_state(progs):
    main, startup = progs
    loss = _net()
    ops, _ = bir.optimizer.Momentum(learning_rate=0.1, momentum=0.9, use_nesterov=True).minimize(loss)
    op = ops[0]
    assert op.type == "momentum" and op.attr("mu") == pytest.approx(0.9) and op.attr("use_nesterov") is True
    assert op.input("Velocity") == op.output("VelocityOut") == ("fc_0.w_0_velocity_0",)
    velocity = main.global_block().var("fc_0.w_0_velocity_0")
    assert velocity.persistable and velocity.shape == (5, 3)
    assert _startup_fills(startup)["fc_0.w_0_velocity_0"].attr("value") == 0.0

    main2, startup2 = bir.Program(), bir.Program()
    with bir.unique_name.guard(), bir.program_guard(main2, startup2):
        ops, _ = bir.optimizer.Adagrad(learning_rate=0.1, epsilon=1e-5, initial_accumulator_value=0.1).minimize(_net())
    op = ops[1]
    assert op.type == "adagrad" and op.attr("epsilon") == pytest.approx(1e-5)
    assert op.input("Moment") == op.output("MomentOut") == ("fc_0.b_0_moment_0",)
    assert _startup_fills(startup2)["fc_0.b_0_moment_0"].attr("value") == pytest.approx(0.1)


def test_adam_state_and_attributes(progs):
    main, startup = progs
    loss = _net()
    ops, _ = bir.optimizer.Adam(learning_rate=1e-3, beta1=0.8, beta2=0.99, lazy_mode=True).minimize(loss)
    op = ops[0]
    assert op.type == "adam"
    assert (op.attr("beta1"), op.attr("beta2"), op.attr("lazy_mode")) == (pytest.approx(0.8), pytest.approx(0.99), True)
    state = {slot: op.input(slot)[0] for slot in ("Moment1", "Moment2", "Beta1Pow", "Beta2Pow")}
    assert state == {
        "Moment1": "fc_0.w_0_moment1_0",
        "Moment2": "fc_0.w_0_moment2_0",
        "Beta1Pow": "fc_0.w_0_beta1_pow_acc_0",
        "Beta2Pow": "fc_0.w_0_beta2_pow_acc_0",
    }
    for slot, name in state.items():
        assert op.output(slot + "Out") == (name,)
    fills = _startup_fills(startup)
    assert fills["fc_0.w_0_beta1_pow_acc_0"].attr("value") == pytest.approx(0.8)
    assert fills["fc_0.w_0_beta2_pow_acc_0"].attr("shape") == (1,)
    assert main.global_block().var("fc_0.w_0_moment1_0").shape == (5, 3)
    assert all(main.global_block().var(n).persistable for n in state.values())
    bir.ir.verify(main)
    bir.ir.verify(startup)


def test_per_parameter_learning_rate_and_frozen_parameters(progs):
    main, _ = progs
    x = bir.data("x", shape=[-1, 5])
    h = bir.layers.fc(x, size=4, param_attr=bir.ParamAttr(learning_rate=0.5), bias_attr=False)
    h = bir.layers.fc(h, size=2, param_attr=bir.ParamAttr(trainable=False), bias_attr=False)
    loss = bir.layers.mean(h)
    ops, params_grads = bir.optimizer.SGD(learning_rate=0.2).minimize(loss)
    assert [p.name for p, _ in params_grads] == ["fc_0.w_0"]
    (op,) = ops
    (scaled,) = op.input("LearningRate")
    (scale,) = [o for o in main.global_block().ops if scaled in o.output_names()]
    assert scale.type == "scale" and scale.input("X") == ("learning_rate_0",)
    assert scale.attr("scale") == pytest.approx(0.5)
    assert scale.attr("op_role") == OpRole.LR_SCHED | OpRole.OPTIMIZE


def test_update_ops_run_where_the_parameter_lives(progs):
    _, startup = progs
    x = bir.data("x", shape=[-1, 5])
    with bir.device_guard("cuda:0"):
        h = bir.layers.fc(x, size=4, param_attr=bir.ParamAttr(device="cpu:1"), bias_attr=False)
    loss = bir.layers.mean(h)
    (op,), _ = bir.optimizer.Momentum(0.1, 0.9).minimize(loss)
    assert op.device == "cpu:1"
    fills = _startup_fills(startup)
    assert fills["fc_0.w_0_velocity_0"].device == "cpu:1"


def test_minimize_twice_with_one_optimizer_is_an_error(progs):
    opt = bir.optimizer.Adam()
    loss = _net()
    opt.minimize(loss)
    with pytest.raises(BlockirError, match="minimize was called twice"):
        opt.apply_gradients([(p, p) for p in bir.default_main_program().all_parameters()])


def test_bad_optimizer_arguments():
    with pytest.raises(BlockirError, match="learning_rate"):
        bir.optimizer.SGD(learning_rate=0)
    with pytest.raises(BlockirError, match="momentum"):
        bir.optimizer.Momentum(0.1, momentum=-1)
    with pytest.raises(BlockirError, match="beta1"):
        bir.optimizer.Adam(beta1=1.0)


def test_fluid_aliases():
    opt = bir.optimizer
    assert opt.SGD is opt.SGDOptimizer and opt.Momentum is opt.MomentumOptimizer
    assert opt.Adagrad is opt.AdagradOptimizer and opt.Adam is opt.AdamOptimizer
