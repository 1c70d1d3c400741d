import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError


def test_find_var_searches_parents_and_var_creates_locally():
    root = bir.Scope()
    root.set("w", np.ones(2))
    kid = root.new_scope()
    assert kid.find_var("w") is root.find_var("w")
    assert kid.find_var("missing") is None
    local = kid.var("w")  # shadows the parent's
    assert local is not root.find_var("w") and local.value is None
    assert kid.names() == ["w"] and root.names() == ["w"]


def test_set_updates_where_the_variable_lives_else_creates_here():
    root = bir.Scope()
    root.set("w", 1)
    kid = root.new_scope()
    kid.set("w", 2)
    kid.set("t", 3)
    assert root.get("w") == 2 and kid.names() == ["t"] and "t" not in root.names()
    kid.var("w").set(4)  # explicit shadowing
    assert kid.get("w") == 4 and root.get("w") == 2


def test_get_names_the_missing_or_empty_variable():
    scope = bir.Scope()
    with pytest.raises(BlockirError, match="'nope' is not in the scope"):
        scope.get("nope")
    scope.var("empty")
    with pytest.raises(BlockirError, match="'empty' holds no value"):
        scope.get("empty")


def test_drop_kids_forgets_children_and_their_values():
    root = bir.Scope()
    kid = root.new_scope()
    grandkid = kid.new_scope()
    grandkid.set("t", np.zeros(3))
    assert root.kids == (kid,)
    root.drop_kids()
    assert root.kids == () and kid.kids == () and grandkid.find_var("t") is None


def test_erase_and_contains():
    scope = bir.Scope()
    scope.set("a", 1)
    scope.set("b", 2)
    scope.erase(["a", "zzz"])
    assert "a" not in scope and "b" in scope and scope.names() == ["b"]


def test_var_rejects_bad_names():
    with pytest.raises(BlockirError, match="non-empty string"):
        bir.Scope().var("")


def test_scope_guard_switches_global_scope_and_restores_it():
    before = bir.global_scope()
    mine = bir.Scope()
    with bir.scope_guard(mine) as s:
        assert s is mine and bir.global_scope() is mine
        with pytest.raises(RuntimeError):
            with bir.scope_guard(bir.Scope()):
                raise RuntimeError("inside")
        assert bir.global_scope() is mine
    assert bir.global_scope() is before
    with pytest.raises(BlockirError, match="needs a Scope"):
        with bir.scope_guard("not a scope"):
            pass


def test_places():
    assert bir.Executor(bir.CPUPlace()).place == bir.Executor("cpu:0").place == bir.CPUPlace()
    assert str(bir.CPUPlace()) == "cpu"
    with pytest.raises(BlockirError, match=r"'gpu0' is not a device \(expected cpu, cpu:N, cuda or cuda:N\): a place"):
        bir.Executor("gpu0")
    with pytest.raises(
        BlockirError,
        match=r"device cuda:99 is not available on this machine \(devices available: "
        r"cpu, cpu:N \(virtual, any N\).*\): the executor's place",
    ):
        bir.Executor("cuda:99")
