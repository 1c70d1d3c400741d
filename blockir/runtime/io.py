"""Saving and loading variables and inference models (Fluid's ``fluid.io``), as ``bir.io``.

Files are numpy's, written without pickle and read with ``allow_pickle=False``:

* one file per variable under ``dirname``: ``NAME.npy`` for a dense tensor,
  ``NAME.npz`` (a bundle, below) for a LoDTensor or SelectedRows; a ``/`` in a
  name makes subdirectories, as in Fluid;
* or, with ``filename``, one bundle holding every variable: a zip archive of
  ``.npy`` members (so ``np.load`` opens it as an ``.npz``) plus ``index.json``
  telling each variable's kind and members: a LoDTensor's data and one array
  per LoD level, a SelectedRows' rows, values and height.

Every file is written atomically (temporary file + rename), and names or file
names that would lead outside ``dirname`` are refused.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path, PurePosixPath
from typing import IO, Any, Callable, Iterable, Sequence

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.core import Program, Variable
from blockir.ir.dtypes import VarKind
from blockir.ir.proto_io import atomic_file, load_program
from blockir.ops.io import map_arrays
from blockir.ops.values import LoDTensor, SelectedRows
from blockir.passes import inference, prune
from blockir.runtime.executor import Executor
from blockir.runtime.plan import FEED_OP, FETCH_OP, describe_value, shape_matches
from blockir.runtime.scope import Scope, global_scope

__all__ = ["PARAMS_DIR", "PROGRAM_FILE", "is_parameter", "is_persistable", "load_inference_model",
           "load_params", "load_persistables", "load_vars", "save_inference_model", "save_params",
           "save_persistables", "save_vars"]

PROGRAM_FILE = "program.pb"  # save_inference_model's default model_filename
PARAMS_DIR = "params"  # where save_inference_model puts one file per parameter by default
FEED_VAR, FETCH_VAR = "feed", "fetch"
_INDEX = "index.json"
_FORMAT, _VERSION = "blockir.vars", 1
_NOT_SAVED = frozenset({VarKind.FEED_MINIBATCH, VarKind.FETCH_LIST, VarKind.READER, VarKind.RAW,
                        VarKind.STEP_SCOPES, VarKind.CHANNEL, VarKind.CHANNEL_LIST})


def is_persistable(var: Variable) -> bool:
    """Whether ``save_persistables`` saves ``var``: persistable and holding a tensor."""
    return var.persistable and var.kind not in _NOT_SAVED


def is_parameter(var: Variable) -> bool:
    """Whether ``save_params`` saves ``var``."""
    return var.is_parameter and is_persistable(var)


# -- paths ------------------------------------------------------------------------

def _inside(dirname: str | os.PathLike[str], relative: str, what: str) -> Path:
    """``dirname/relative``; an error when ``relative`` is absolute or leads outside ``dirname``."""
    if not isinstance(relative, str) or not relative or "\0" in relative:
        raise BlockirError(f"{what} {relative!r} is not a usable file name")
    parts = relative.replace("\\", "/").split("/")
    base = Path(dirname).resolve()
    target = (base / relative).resolve()
    if (PurePosixPath(relative.replace("\\", "/")).is_absolute() or any(p in ("", ".", "..") for p in parts)
            or not target.is_relative_to(base) or target == base):
        raise BlockirError(f"{what} {relative!r} would lead outside the directory {str(dirname)!r}; refused")
    return target


# -- values <-> arrays ------------------------------------------------------------------

def _host(array: Any, name: str) -> np.ndarray:
    a = np.asarray(array)
    if a.dtype.hasobject:
        raise BlockirError(f"variable {name!r} holds Python objects ({a.dtype}), which are never saved")
    return a


def _arrays(name: str, value: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A value as (index entry, arrays by role)."""
    if isinstance(value, LoDTensor):
        lod = {f"lod.{i}": np.asarray(level, dtype=np.int64) for i, level in enumerate(value.lod)}
        return {"kind": "lod_tensor", "lod_levels": len(value.lod)}, {"data": _host(value.data, name), **lod}
    if isinstance(value, SelectedRows):
        return ({"kind": "selected_rows", "height": int(value.height)},
                {"rows": np.asarray(value.rows, dtype=np.int64), "values": _host(value.values, name)})
    return {"kind": "dense"}, {"data": _host(value, name)}


def _value(name: str, entry: dict[str, Any], read: Callable[[str], np.ndarray], where: str) -> Any:
    """The value an index entry describes, its arrays read with ``read(role)``."""
    kind = entry.get("kind")
    try:
        if kind == "dense":
            return read("data")
        if kind == "lod_tensor":
            levels = entry["lod_levels"]
            return LoDTensor(read("data"), [read(f"lod.{i}").tolist() for i in range(int(levels))])
        if kind == "selected_rows":
            return SelectedRows(read("rows"), read("values"), int(entry["height"]))
    except (KeyError, TypeError, ValueError) as e:
        raise BlockirError(f"{where}: variable {name!r} is stored incompletely ({e})") from None
    raise BlockirError(f"{where}: variable {name!r} has unknown kind {kind!r}")


def _read_npy(f: IO[bytes], where: str) -> np.ndarray:
    try:
        return np.lib.format.read_array(f, allow_pickle=False)
    except ValueError as e:
        raise BlockirError(f"{where}: not a numpy array file without Python objects ({e})") from None


# -- bundles ----------------------------------------------------------------------------

def _write_bundle(path: Path, values: dict[str, Any]) -> None:
    index: dict[str, Any] = {"format": _FORMAT, "version": _VERSION, "vars": {}}
    with atomic_file(path) as f, zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        for name, value in values.items():
            entry, arrays = _arrays(name, value)
            entry["arrays"] = {}
            for role, array in arrays.items():
                member = f"{len(zf.namelist())}.npy"
                with zf.open(member, "w", force_zip64=True) as m:
                    np.lib.format.write_array(m, array, allow_pickle=False)
                entry["arrays"][role] = member
            index["vars"][name] = entry
        zf.writestr(_INDEX, json.dumps(index, indent=1))


class _Bundle:
    """A bundle opened for reading."""

    def __init__(self, path: Path) -> None:
        self.where = str(path)
        try:
            self.zip = zipfile.ZipFile(path)
            index = json.loads(self.zip.read(_INDEX))
        except FileNotFoundError:
            raise BlockirError(f"{path}: no such file") from None
        except OSError as e:
            raise BlockirError(f"{path}: cannot read ({e.strerror or e})") from None
        except (zipfile.BadZipFile, KeyError, ValueError):
            raise BlockirError(f"{path}: not a blockir variables file (a zip with {_INDEX})") from None
        if not isinstance(index, dict) or index.get("format") != _FORMAT or not isinstance(index.get("vars"), dict):
            raise BlockirError(f"{path}: not a blockir variables file (bad {_INDEX})")
        if index.get("version") != _VERSION:
            raise BlockirError(f"{path}: format version {index.get('version')!r}, this blockir reads {_VERSION}")
        self.vars: dict[str, Any] = index["vars"]

    def load(self, name: str) -> Any:
        entry = self.vars.get(name)
        if not isinstance(entry, dict) or not isinstance(entry.get("arrays"), dict):
            raise BlockirError(f"{self.where}: holds no variable {name!r}")
        members = entry["arrays"]

        def read(role: str) -> np.ndarray:
            try:
                with self.zip.open(members[role]) as m:
                    return _read_npy(m, f"{self.where}[{members[role]}]")
            except (KeyError, TypeError):
                raise BlockirError(f"{self.where}: variable {name!r} lacks its {role!r} array") from None

        return _value(name, entry, read, self.where)

    def close(self) -> None:
        self.zip.close()


# -- one file per variable ------------------------------------------------------------------

def _files(dirname: str | os.PathLike[str], name: str) -> tuple[Path, Path]:
    """A variable's file when dense (``NAME.npy``) and when a LoDTensor or SelectedRows (``NAME.npz``)."""
    base = _inside(dirname, name, "variable name")
    return base.with_name(base.name + ".npy"), base.with_name(base.name + ".npz")


def _save_file(name: str, value: Any, npy: Path, npz: Path) -> None:
    """Save one variable to its file (see :func:`_files`), removing its earlier file of the other form."""
    if isinstance(value, (LoDTensor, SelectedRows)):
        _write_bundle(npz, {name: value})
        npy.unlink(missing_ok=True)
    else:
        array = _host(value, name)
        with atomic_file(npy) as f:
            np.lib.format.write_array(f, array, allow_pickle=False)
        npz.unlink(missing_ok=True)


def _load_file(dirname: str | os.PathLike[str], name: str) -> Any:
    npy, npz = _files(dirname, name)
    if npy.is_file():
        with open(npy, "rb") as f:
            return _read_npy(f, str(npy))
    if npz.is_file():
        bundle = _Bundle(npz)
        try:
            return bundle.load(name)
        finally:
            bundle.close()
    raise BlockirError(f"no saved value for variable {name!r} in {str(dirname)!r} (looked for {npy.name}, {npz.name})")


# -- save / load variables --------------------------------------------------------------------

def _default_program(program: Program | None) -> Program:
    if program is not None:
        return program
    from blockir.dsl.framework import default_main_program  # at call time: the runtime works without it

    return default_main_program()


def _check_executor(executor: Executor) -> Executor:
    if not isinstance(executor, Executor):
        raise BlockirError(f"expected an Executor, got {type(executor).__name__}")
    return executor


def _select(program: Program, vars: Iterable[Variable | str] | None,
            predicate: Callable[[Variable], bool] | None) -> list[Variable]:
    block = program.global_block()
    if vars is not None:
        chosen = []
        for v in vars:
            name = v if isinstance(v, str) else getattr(v, "name", None)
            if not isinstance(name, str) or not block.has_var(name):
                raise BlockirError(f"variable {name if name is not None else v!r} is not in the program's global block")
            chosen.append(block.var(name))
        return chosen
    return [v for v in block.vars.values() if predicate is None or predicate(v)]


def save_vars(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
              vars: Iterable[Variable | str] | None = None, predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Save variables of ``main_program`` from ``scope`` (default: the global scope) under ``dirname``.

    The variables are ``vars`` if given, else those of the global block that
    ``predicate`` accepts (all when None). Each goes to its own file, or all to
    the bundle ``dirname/filename``. ``executor`` is the one whose place holds
    the values. Returns the names saved.
    """
    _check_executor(executor)
    scope = global_scope() if scope is None else scope
    chosen = _select(_default_program(main_program), vars, predicate)
    # Every path is checked before anything is written.
    bundle = _inside(dirname, filename, "filename") if filename is not None else None
    files = {var.name: _files(dirname, var.name) for var in chosen} if bundle is None else {}
    values = {}
    for var in chosen:
        holder = scope.find_var(var.name)
        if holder is None or holder.value is None:
            raise BlockirError(f"cannot save variable {var.name!r}: it has no value in the scope "
                               f"(run the startup program first)")
        values[var.name] = holder.value
    if bundle is not None:
        _write_bundle(bundle, values)
    for name, (npy, npz) in files.items():
        _save_file(name, values[name], npy, npz)
    return list(values)


def save_params(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
                filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Save the parameters (``is_parameter`` variables) of ``main_program``; see :func:`save_vars`."""
    return save_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename, scope=scope)


def save_persistables(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
                      filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Save every persistable variable (parameters, optimizer state, ...); see :func:`save_vars`."""
    return save_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename, scope=scope)


def _check_loaded(var: Variable, value: Any, where: str) -> None:
    """The loaded value must have the variable's dtype and shape (-1 matches any size; rows of selected rows)."""
    if isinstance(value, SelectedRows):
        array, declared = value.values, None if var.shape is None else (-1, *var.shape[1:])
    else:
        array, declared = (value.data if isinstance(value, LoDTensor) else value), var.shape
    fits_dtype = var.dtype is None or array.dtype == np.dtype(var.dtype)
    fits_shape = declared is None or shape_matches(declared, array.shape)
    if not (fits_dtype and fits_shape):
        raise BlockirError(f"{where}: variable {var.name!r} is saved as {describe_value(value)}, but the program "
                           f"declares {var.dtype}{list(var.shape or ())}")


def load_vars(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
              vars: Iterable[Variable | str] | None = None, predicate: Callable[[Variable], bool] | None = None,
              filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Load variables saved by :func:`save_vars` into ``scope`` (default: the global scope).

    The variables are chosen as in :func:`save_vars`; each loaded value must
    have the dtype and shape (-1: any size) its variable declares. Values are
    put on ``executor``'s place. Returns the names loaded.
    """
    xp = _check_executor(executor).place.xp
    scope = global_scope() if scope is None else scope
    chosen = _select(_default_program(main_program), vars, predicate)
    bundle = _Bundle(_inside(dirname, filename, "filename")) if filename is not None else None
    try:
        loaded = {}
        for var in chosen:
            if bundle is not None:
                value, where = bundle.load(var.name), bundle.where
            else:
                value, where = _load_file(dirname, var.name), str(dirname)
            _check_loaded(var, value, where)
            loaded[var.name] = map_arrays(value, xp.asarray)
    finally:
        if bundle is not None:
            bundle.close()
    for name, value in loaded.items():  # all or nothing: the scope changes only once every file has been read
        scope.set(name, value)
    return list(loaded)


def load_params(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
                filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Load the parameters of ``main_program``; see :func:`load_vars`."""
    return load_vars(executor, dirname, main_program, predicate=is_parameter, filename=filename, scope=scope)


def load_persistables(executor: Executor, dirname: str | os.PathLike[str], main_program: Program | None = None,
                      filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Load every persistable variable of ``main_program``; see :func:`load_vars`."""
    return load_vars(executor, dirname, main_program, predicate=is_persistable, filename=filename, scope=scope)


# -- inference models ------------------------------------------------------------------------

def _names(items: str | Variable | Sequence[str | Variable], what: str) -> list[str]:
    items = [items] if isinstance(items, (str, Variable)) else list(items)
    names = [i if isinstance(i, str) else getattr(i, "name", None) for i in items]
    if any(not isinstance(n, str) for n in names):
        raise BlockirError(f"{what} must be variable names or variables, got {items!r}")
    return names  # type: ignore[return-value]


def _params_location(dirname: str | os.PathLike[str], params_filename: str | None) -> tuple[Path, str | None]:
    """Where the parameters go: (directory, bundle file name or None for one file each)."""
    if params_filename is None:
        return _inside(dirname, PARAMS_DIR, "params directory"), None
    return Path(dirname), params_filename


def _check_computable(program: Program, feeds: list[str]) -> None:
    """Every value the pruned program reads must be fed, computed or persistable."""
    block = program.global_block()
    defined = set(feeds)
    for op in block.ops:
        for name in op.input_names():
            if name not in defined and not block.find_var_recursive(name).persistable:
                raise BlockirError(f"the targets need {name!r}, which is neither fed ({', '.join(feeds) or 'no feeds'}) "
                                   f"nor computed from the feeds and parameters; read by: {op}")
        defined.update(op.output_names())


def save_inference_model(dirname: str | os.PathLike[str], feeded_var_names: str | Sequence[str],
                         target_vars: Variable | str | Sequence[Variable | str], executor: Executor,
                         main_program: Program | None = None, model_filename: str | None = None,
                         params_filename: str | None = None, scope: Scope | None = None) -> list[str]:
    """Save the part of ``main_program`` computing ``target_vars`` from ``feeded_var_names``, with its parameters.

    The program is cloned, turned into an inference program (backward and
    optimizer ops dropped, ``is_test`` set), pruned to what the targets need
    given the feeds, and framed by ``feed`` ops (reading the ``feed`` list, col
    i = the i-th feed) and ``fetch`` ops (writing the ``fetch`` list). It is
    written to ``dirname/model_filename`` (default ``program.pb``), and the
    persistable variables it reads to ``dirname/params/`` one file each, or to
    the bundle ``dirname/params_filename``. Returns the target names.
    """
    _check_executor(executor)
    feeds, targets = _names(feeded_var_names, "feeded_var_names"), _names(target_vars, "target_vars")
    if not targets:
        raise BlockirError("save_inference_model needs at least one target variable")
    program = _default_program(main_program).clone()
    block = program.global_block()
    for name in feeds:
        if not block.has_var(name):
            raise BlockirError(f"feed {name!r} is not a variable of the program's global block")
    for name in targets:
        if not block.has_var(name):
            raise BlockirError(f"target {name!r} is not a variable of the program's global block")
    for op in [op for op in block.ops if op.type in (FEED_OP, FETCH_OP)]:
        block.remove_op(op)  # a loaded inference model saved again gets fresh feed and fetch ops
    inference(program)
    prune(program, targets, feeds)
    _check_computable(program, feeds)
    for name, kind in ((FEED_VAR, VarKind.FEED_MINIBATCH), (FETCH_VAR, VarKind.FETCH_LIST)):
        if block.has_var(name) and block.var(name).kind is not kind:
            raise BlockirError(f"the program has a variable named {name!r}, a name save_inference_model needs "
                               f"for its {kind.text} variable")
        if not block.has_var(name):
            block.create_var(name, kind=kind, persistable=True)
    for col, name in reversed(list(enumerate(feeds))):
        block.prepend_op(FEED_OP, {"X": [FEED_VAR]}, {"Out": [name]}, {"col": col}, infer=False)
    for col, name in enumerate(targets):
        block.append_op(FETCH_OP, {"X": [name]}, {"Out": [FETCH_VAR]}, {"col": col}, infer=False)
    program_path = _inside(dirname, model_filename or PROGRAM_FILE, "model_filename")
    params_dir, params_file = _params_location(dirname, params_filename)
    save_vars(executor, params_dir, program, predicate=is_persistable, filename=params_file, scope=scope)
    program.save(program_path)
    return targets


def load_inference_model(dirname: str | os.PathLike[str], executor: Executor, model_filename: str | None = None,
                         params_filename: str | None = None,
                         scope: Scope | None = None) -> tuple[Program, list[str], list[Variable]]:
    """Load a model saved by :func:`save_inference_model` (the same file name arguments).

    Loads its parameters into ``scope`` (default: the global scope) and returns
    ``(program, feed names, fetch variables)``, feeds and fetches in the order
    they were saved; ``executor.run(program, feed=...)`` then fetches the
    targets.
    """
    _check_executor(executor)
    program = load_program(_inside(dirname, model_filename or PROGRAM_FILE, "model_filename"))
    block = program.global_block()
    feeds = sorted((op.attrs.get("col", 0), op.output("Out")[0]) for op in block.ops if op.type == FEED_OP)
    fetches = sorted((op.attrs.get("col", 0), op.input("X")[0]) for op in block.ops if op.type == FETCH_OP)
    if not fetches:
        raise BlockirError(f"{dirname}: not an inference model (its program has no fetch ops)")
    params_dir, params_file = _params_location(dirname, params_filename)
    load_vars(executor, params_dir, program, predicate=is_persistable, filename=params_file, scope=scope)
    return program, [n for _, n in feeds], [block.var(n) for _, n in fetches]
