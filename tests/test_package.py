"""The package's import surface: the IR loads light, ``import blockir`` offers the whole public API."""

import subprocess
import sys

import pytest

import blockir as bir


def _modules_after(statement: str) -> set[str]:
    """The modules a fresh interpreter has loaded after ``statement``."""
    code = f"import sys\n{statement}\nprint('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


@pytest.mark.parametrize("statement", ["import blockir.ir", "import blockir", "import blockir.ops"])
def test_ir_loads_without_the_runtime(statement: str) -> None:
    loaded = _modules_after(statement)
    assert "blockir.ir" in loaded
    heavy = {"blockir.runtime", "blockir.passes", "blockir.parallel", "blockir.io", "networkx", "threadpoolctl"}
    assert not heavy & loaded


def test_lazy_names_load_their_module_on_first_use() -> None:
    loaded = _modules_after("import blockir as bir\nbir.Executor")
    assert {"blockir.runtime", "blockir.runtime.executor"} <= loaded
    assert "blockir.parallel" not in loaded


def test_every_public_name_resolves() -> None:
    assert len(set(bir.__all__)) == len(bir.__all__)
    assert set(bir.__all__) <= set(dir(bir))
    for name in bir.__all__:
        assert getattr(bir, name) is not None, name
    assert set(bir._LAZY) <= set(bir.__all__)  # a lazy name that is not public would be a stray


def test_public_names_are_the_subsystems_objects() -> None:
    from blockir.datafeed import staged
    from blockir.dsl import layers
    from blockir.parallel import AsyncExecutor
    from blockir.runtime import Executor

    assert (bir.Executor, bir.AsyncExecutor, bir.layers, bir.reader) == (Executor, AsyncExecutor, layers, staged)
    assert callable(bir.data) and bir.data.__module__ == "blockir.dsl.layers"  # the DSL function, not a package
    assert bir.io.save_inference_model.__module__ == "blockir.io.persistence"
    from blockir import Scope  # from-imports go through the module's __getattr__ too

    assert Scope is bir.Scope


def test_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_thing"):
        _ = bir.no_such_thing  # type: ignore[attr-defined]  # the point of the test


def test_python_m_blockir_is_the_blockir_command(tmp_path) -> None:
    """``python -m blockir`` runs the command (blockir/__main__.py), from any directory."""
    done = subprocess.run(
        [sys.executable, "-m", "blockir", "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, f"blockir {bir.__version__}\n", "")
    usage = subprocess.run([sys.executable, "-m", "blockir"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("blockir: error: "), usage.stderr
