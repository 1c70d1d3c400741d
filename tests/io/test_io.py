import contextlib
import errno
import io
import json
import zipfile

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError
from blockir.ir import VarKind
from blockir.ops.values import LoDTensor, SelectedRows
from tests.runtime.conftest import init_linear, linear_program

pytestmark = pytest.mark.usefixtures("rt_ops")  # linear_program is made of rt_* ops

X = np.arange(6, dtype="float32").reshape(2, 3)


def _mixed_program() -> bir.Program:
    """Persistables of every kind: dense, LoDTensor, SelectedRows, names with '/' and '@'."""
    program = bir.Program()
    block = program.global_block()
    block.create_var("dense", shape=(2, 3), dtype="float32", persistable=True, is_parameter=True)
    block.create_var("seq", shape=(-1, 2), dtype="float64", lod_level=1, persistable=True)
    block.create_var("emb@GRAD", kind=VarKind.SELECTED_ROWS, shape=(10, 4), dtype="float32", persistable=True)
    block.create_var("scope/inner.w_0", shape=(3,), dtype="int64", persistable=True, is_parameter=True)
    block.create_var("temp", shape=(3,), dtype="float32")
    return program


def _mixed_values() -> dict:
    rng = np.random.default_rng(1)
    return {
        "dense": rng.normal(size=(2, 3)).astype("float32"),
        "seq": LoDTensor(rng.normal(size=(5, 2)), [[0, 2, 5]]),
        "emb@GRAD": SelectedRows(np.array([1, 7, 1], dtype="int64"), rng.normal(size=(3, 4)).astype("float32"), 10),
        "scope/inner.w_0": np.array([4, 5, 6], dtype="int64"),
    }


def _assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, LoDTensor):
        assert a.lod == b.lod
        np.testing.assert_array_equal(a.data, b.data)
        assert a.data.dtype == b.data.dtype
    elif isinstance(a, SelectedRows):
        np.testing.assert_array_equal(a.rows, b.rows)
        np.testing.assert_array_equal(a.values, b.values)
        assert a.height == b.height and a.values.dtype == b.values.dtype
    else:
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


@pytest.mark.parametrize("filename", [None, "all.params"])
def test_persistables_round_trip(tmp_path, exe, filename):
    program, values = _mixed_program(), _mixed_values()
    saved_scope = bir.Scope()
    for name, value in values.items():
        saved_scope.set(name, value)
    saved = bir.io.save_persistables(exe, tmp_path, program, filename=filename, scope=saved_scope)
    assert sorted(saved) == sorted(values)
    loaded_scope = bir.Scope()
    loaded = bir.io.load_persistables(exe, tmp_path, program, filename=filename, scope=loaded_scope)
    assert sorted(loaded) == sorted(values) and sorted(loaded_scope.names()) == sorted(values)
    for name, value in values.items():
        _assert_same(loaded_scope.get(name), value)


def _files(directory):
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_one_file_per_variable_layout(tmp_path, exe):
    program, values = _mixed_program(), _mixed_values()
    scope = bir.Scope()
    for name, value in values.items():
        scope.set(name, value)
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    assert _files(tmp_path) == [
        "gen-000001/dense.npy",
        "gen-000001/emb@GRAD.npz",
        "gen-000001/scope/inner.w_0.npy",
        "gen-000001/seq.npz",
        "manifest.json",
    ]
    assert json.loads((tmp_path / "manifest.json").read_text()) == {
        "format": "blockir.save",
        "version": 1,
        "generation": 1,
        "vars": {
            "dense": {"kind": "dense", "file": "gen-000001/dense.npy"},
            "seq": {"kind": "lod_tensor", "file": "gen-000001/seq.npz"},
            "emb@GRAD": {"kind": "selected_rows", "file": "gen-000001/emb@GRAD.npz"},
            "scope/inner.w_0": {"kind": "dense", "file": "gen-000001/scope/inner.w_0.npy"},
        },
    }
    np.testing.assert_array_equal(np.load(tmp_path / "gen-000001/dense.npy", allow_pickle=False), values["dense"])
    with np.load(tmp_path / "gen-000001/seq.npz", allow_pickle=False) as npz:  # plain numpy reads the bundle's arrays
        arrays = {k: npz[k] for k in npz.files if k != "index"}
    assert any(np.array_equal(a, values["seq"].data) for a in arrays.values())


def test_params_only(tmp_path, exe):
    program, values = _mixed_program(), _mixed_values()
    scope = bir.Scope()
    for name, value in values.items():
        scope.set(name, value)
    assert sorted(bir.io.save_params(exe, tmp_path, program, scope=scope)) == ["dense", "scope/inner.w_0"]
    fresh = bir.Scope()
    assert sorted(bir.io.load_params(exe, tmp_path, program, scope=fresh)) == ["dense", "scope/inner.w_0"]


def test_saving_a_variable_with_no_value_names_it(tmp_path, exe):
    with pytest.raises(BlockirError, match="cannot save variable 'dense': it has no value"):
        bir.io.save_persistables(exe, tmp_path, _mixed_program(), scope=bir.Scope())


def test_loading_checks_dtype_and_shape(tmp_path, exe):
    scope = bir.Scope()
    init_linear(scope)
    bir.io.save_params(exe, tmp_path, linear_program(), scope=scope)
    other = linear_program()
    other.global_block().var("w").shape = (3, 5)
    fresh = bir.Scope()
    with pytest.raises(
        BlockirError,
        match=r"variable 'w' is saved as float32\[3, 2\], but the program declares "
        r"float32\[3, 5\]",
    ):
        bir.io.load_params(exe, tmp_path, other, scope=fresh)
    assert fresh.names() == []  # nothing loaded when one variable fails


def test_missing_file_is_named(tmp_path, exe):
    with pytest.raises(BlockirError, match="no saved value for variable 'w'"):
        bir.io.load_params(exe, tmp_path, linear_program(), scope=bir.Scope())


@pytest.mark.parametrize("name", ["../evil", "/etc/evil", "a/../../evil", "a/./b", "..", "a//b"])
def test_names_escaping_the_directory_are_refused(tmp_path, exe, name):
    program = bir.Program()
    program.global_block().create_var(name, shape=(1,), dtype="float32", persistable=True)
    scope = bir.Scope()
    scope.set(name, np.zeros(1, "float32"))
    target = tmp_path / "models"
    with pytest.raises(BlockirError, match="would lead outside the directory"):
        bir.io.save_persistables(exe, target, program, scope=scope)
    assert not (tmp_path / "evil.npy").exists()
    with pytest.raises(BlockirError, match="would lead outside the directory"):
        bir.io.save_persistables(exe, target, bir.Program(), filename="../x.params", scope=scope)


def test_symlink_out_of_the_directory_is_refused(tmp_path, exe):
    (tmp_path / "models").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "models" / "link").symlink_to(tmp_path / "outside")
    program = bir.Program()
    program.global_block().create_var("link/w", shape=(1,), dtype="float32", persistable=True)
    scope = bir.Scope()
    scope.set("link/w", np.zeros(1, "float32"))
    with pytest.raises(BlockirError, match="would lead outside"):
        bir.io.save_persistables(exe, tmp_path / "models", program, scope=scope)


def test_a_failed_save_leaves_the_old_file_intact(tmp_path, exe, monkeypatch):
    scope = bir.Scope()
    values = init_linear(scope)
    program = linear_program()
    bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    bir.io.save_persistables(exe, tmp_path, program, filename="all", scope=scope)
    before = {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np.lib.format, "write_array", broken)
    scope.set("w", values["w"] + 1)
    with pytest.raises(BlockirError, match=r"gen-000002/\w\.npy: cannot write \(No space left on device\)"):
        bir.io.save_persistables(exe, tmp_path, program, scope=scope)
    with pytest.raises(BlockirError, match="all: cannot write \\(No space left on device\\)"):
        bir.io.save_persistables(exe, tmp_path, program, filename="all", scope=scope)
    assert {p.name: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before  # no temporary left


def test_object_arrays_are_never_saved(tmp_path, exe):
    program = bir.Program()
    program.global_block().create_var("o", shape=(2,), dtype="float32", persistable=True)
    scope = bir.Scope()
    scope.set("o", np.array([{"a": 1}, None], dtype=object))
    with pytest.raises(BlockirError, match="holds Python objects"):
        bir.io.save_persistables(exe, tmp_path, program, scope=scope)


def test_pickled_files_are_never_loaded(tmp_path, exe):
    program = bir.Program()
    program.global_block().create_var("o", shape=(2,), dtype="float32", persistable=True)
    np.save(tmp_path / "o.npy", np.array([object(), None], dtype=object), allow_pickle=True)
    with pytest.raises(BlockirError, match="o.npy: holds Python objects, which are never loaded"):
        bir.io.load_persistables(exe, tmp_path, program, scope=bir.Scope())
    # The same inside a bundle.
    with zipfile.ZipFile(tmp_path / "bundle", "w") as zf:
        with zf.open("0.npy", "w") as m:
            np.lib.format.write_array(m, np.array([object(), None], dtype=object), allow_pickle=True)
        zf.writestr(
            "index.json",
            json.dumps(
                {"format": "blockir.vars", "version": 1, "vars": {"o": {"kind": "dense", "arrays": {"data": "0.npy"}}}}
            ),
        )
    with pytest.raises(BlockirError, match=r"bundle\[0.npy\]: holds Python objects, which are never loaded"):
        bir.io.load_persistables(exe, tmp_path, program, filename="bundle", scope=bir.Scope())


def test_not_a_bundle(tmp_path, exe):
    (tmp_path / "junk").write_bytes(b"not a zip")
    with pytest.raises(BlockirError, match="not a blockir variables file"):
        bir.io.load_persistables(exe, tmp_path, linear_program(), filename="junk", scope=bir.Scope())


# -- inference models ------------------------------------------------------------------------


def test_inference_model_round_trip(tmp_path, exe):
    scope = bir.Scope()
    values = init_linear(scope)
    program = linear_program()
    exe.run(program, feed={"x": X, "gw": np.ones((3, 2), "float32")}, scope=scope)  # one training step
    (expected,) = exe.run(program, feed={"x": X, "gw": np.zeros((3, 2), "float32")}, fetch_list=["out"], scope=scope)
    text = str(program)
    assert bir.io.save_inference_model(tmp_path, ["x"], ["out"], exe, main_program=program, scope=scope) == ["out"]
    assert str(program) == text  # the program saved is a pruned clone
    assert (tmp_path / "program.pb").is_file() and _files(tmp_path / "params") == [
        "gen-000001/b.npy",
        "gen-000001/w.npy",
        "manifest.json",
    ]  # the sgd op and its lr and gw were pruned away
    served_scope = bir.Scope()
    loaded, feeds, fetches = bir.io.load_inference_model(tmp_path, exe, scope=served_scope)
    assert feeds == ["x"] and [v.name for v in fetches] == ["out"]
    assert [op.type for op in loaded.global_block().ops] == ["feed", "rt_matmul", "rt_add", "fetch"]
    (out,) = exe.run(loaded, feed={"x": X}, scope=served_scope)
    np.testing.assert_array_equal(out, expected)
    np.testing.assert_array_equal(served_scope.get("w"), values["w"] - 0.5)
    (out2,) = exe.run(loaded, feed={"x": X}, fetch_list=fetches, scope=served_scope)
    np.testing.assert_array_equal(out2, expected)


def test_inference_model_with_named_files_and_resave(tmp_path, exe):
    scope = bir.Scope()
    init_linear(scope)
    program = linear_program()
    with bir.scope_guard(scope):
        bir.io.save_inference_model(
            tmp_path / "a", "x", "out", exe, main_program=program, model_filename="model", params_filename="weights"
        )
        assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["model", "weights"]
        loaded, feeds, fetches = bir.io.load_inference_model(
            tmp_path / "a", exe, model_filename="model", params_filename="weights"
        )
        # A loaded model saved again gets fresh feed/fetch ops, not doubled ones.
        bir.io.save_inference_model(tmp_path / "b", feeds, fetches, exe, main_program=loaded)
        again, _, _ = bir.io.load_inference_model(tmp_path / "b", exe)
    assert [op.type for op in again.global_block().ops] == ["feed", "rt_matmul", "rt_add", "fetch"]


def test_inference_model_errors(tmp_path, exe):
    scope = bir.Scope()
    init_linear(scope)
    program = linear_program()
    with pytest.raises(BlockirError, match="feed 'nope' is not a variable"):
        bir.io.save_inference_model(tmp_path, ["nope"], ["out"], exe, main_program=program, scope=scope)
    with pytest.raises(BlockirError, match="target 'ghost' is not a variable"):
        bir.io.save_inference_model(tmp_path, ["x"], ["ghost"], exe, main_program=program, scope=scope)
    with pytest.raises(BlockirError, match="the targets need 'x', which is neither fed"):
        bir.io.save_inference_model(tmp_path, [], ["out"], exe, main_program=program, scope=scope)
    with pytest.raises(BlockirError, match="would lead outside"):
        bir.io.save_inference_model(
            tmp_path, ["x"], ["out"], exe, main_program=program, model_filename="../m.pb", scope=scope
        )
    bir.io.save_persistables(exe, tmp_path / "p", program, scope=scope)
    program.save(tmp_path / "p" / "program.pb")
    with pytest.raises(BlockirError, match="not an inference model"):
        bir.io.load_inference_model(tmp_path / "p", exe, scope=bir.Scope())


def test_truncated_and_unreadable_files(tmp_path, exe):
    scope = bir.Scope()
    init_linear(scope)
    program = linear_program(optimize=False)
    bir.io.save_params(exe, tmp_path, program, scope=scope)
    data = (tmp_path / "gen-000001/w.npy").read_bytes()
    (tmp_path / "gen-000001/w.npy").write_bytes(data[: len(data) - 4])
    with pytest.raises(
        BlockirError,
        match=r"gen-000001/w.npy: truncated .npy file \(its header declares "
        r"float32\[3, 2\], 24 bytes of data, and 20 follow\)",
    ):
        bir.io.load_params(exe, tmp_path, program, scope=bir.Scope())
    (tmp_path / "adir").mkdir()
    with pytest.raises(BlockirError, match="adir: is a directory"):
        bir.io.load_params(exe, tmp_path, program, filename="adir", scope=bir.Scope())


def test_the_readme_example_saves_the_program_its_targets_belong_to(tmp_path, monkeypatch):
    """The README's first example as written: built in program_guard(main, startup), saved without main_program."""
    monkeypatch.chdir(tmp_path)
    with bir.scope_guard(bir.Scope()), contextlib.redirect_stdout(io.StringIO()):
        main, startup = bir.Program(), bir.Program()
        with bir.program_guard(main, startup):
            x = bir.data("x", shape=[-1, 784], dtype="float32")
            label = bir.data("label", shape=[-1, 1], dtype="int64")
            h = bir.layers.fc(x, size=256, act="relu")
            pred = bir.layers.fc(h, size=10, act="softmax")
            loss = bir.layers.mean(bir.layers.cross_entropy(pred, label))
            acc = bir.layers.accuracy(pred, label)
            bir.optimizer.Adam(learning_rate=1e-3).minimize(loss)

        print(main)  # the text form: one line per op, with its device
        main.save("program.pb")  # binary ProgramDesc

        exe = bir.Executor("cpu")
        exe.run(startup)
        xb = np.random.rand(64, 784).astype("float32")
        yb = np.random.randint(0, 10, (64, 1)).astype("int64")
        loss_v, acc_v = exe.run(main, feed={"x": xb, "label": yb}, fetch_list=[loss, acc])
        bir.io.save_inference_model("model_dir", ["x"], [pred], exe)

        (expected,) = exe.run(main, feed={"x": xb, "label": yb}, fetch_list=[pred])  # then updates the parameters
        program, feeds, fetches = bir.io.load_inference_model("model_dir", exe)  # loads the saved ones back
        (served,) = exe.run(program, feed={"x": xb})
    assert feeds == ["x"] and [v.name for v in fetches] == [pred.name]
    np.testing.assert_allclose(served, expected, rtol=1e-6)


def test_targets_of_different_programs_need_main_program(tmp_path, exe):
    scope = bir.Scope()
    init_linear(scope)
    one, two = linear_program(), linear_program()
    targets = [one.global_block().var("out"), two.global_block().var("out")]
    with pytest.raises(BlockirError, match="target_vars belong to different programs"):
        bir.io.save_inference_model(tmp_path, ["x"], targets, exe, scope=scope)
    # Given, main_program wins over the program the variables belong to.
    bir.io.save_inference_model(tmp_path, ["x"], targets[:1], exe, main_program=two, scope=scope)
