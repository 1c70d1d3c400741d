"""Scopes: the named values a program runs against.

A :class:`Scope` maps variable names to :class:`ScopeVariable` holders and may
have a parent; look-ups (:meth:`Scope.find_var`) search the parents, creation
(:meth:`Scope.var`) happens in the scope asked. The root scope holds the
persistable variables (parameters, optimizer state) that outlive a run;
temporaries of a run live in the executor's slot frame, which plays the part
of Fluid's per-run local scope, and are dropped with it.

Values are numpy arrays, :class:`~blockir.ops.values.LoDTensor` or
:class:`~blockir.ops.values.SelectedRows`, each tagged with the device it lives
on (:attr:`ScopeVariable.device`; the host, ``cpu``, unless a run wrote it on a
virtual device). A scope holds one value per name, on one device: a plan that
needs a persistable on another device moves it there (a copy, re-tagged), so a
parameter updated on ``cpu:1`` stays there between runs, and values set or
loaded on the host reach the device that uses them on the next run.

A variable may be *bound* to a view (:meth:`Scope.bind`): the plan binds the
persistables an op makes as views of memory it owns (``coalesce_tensor``'s
outputs, :attr:`blockir.ir.schema.OpSchema.views`: each parameter a view of the
buffer a fused optimizer update writes). Reading it reads the memory, so it
sees every update; :meth:`Scope.set` (and so the plan's write-backs,
``bir.io``'s loads, the startup program) copies a new value into the view,
shape and dtype checked, instead of replacing it: the buffer stays whole.
:meth:`ScopeVariable.set` replaces the value and ends the binding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any

from blockir.errors import BlockirError
from blockir.ir.devices import HOST
from blockir.ops.values import LoDTensor, SelectedRows, describe_value, note_written
from blockir.runtime.device import transfer

__all__ = ["Scope", "ScopeVariable", "global_scope", "scope_guard", "set_context_scope"]


class ScopeVariable:
    """A named holder of one value (``None`` until set) on ``device``, Fluid's scope variable; ``bound``: the
    value is a view bound by :meth:`bind` (module docstring)."""

    __slots__ = ("name", "value", "device", "bound")

    def __init__(self, name: str, value: Any = None, device: str = HOST) -> None:
        self.name = name
        self.value = value
        self.device = device
        self.bound = False

    def is_initialized(self) -> bool:
        return self.value is not None

    def get_tensor(self) -> Any:
        """The value held; an error naming the variable when it holds none."""
        if self.value is None:
            raise BlockirError(f"scope variable {self.name!r} holds no value")
        return self.value

    def set(self, value: Any, device: str = HOST) -> None:
        """Hold ``value``, which lives on ``device`` (a canonical device string); a binding ends."""
        self.value = value
        self.device = device
        self.bound = False

    def bind(self, view: Any, device: str = HOST) -> None:
        """Hold ``view``, a view of memory some op owns, on ``device``: :meth:`copy_in` writes into it from now on."""
        self.value = view
        self.device = device
        self.bound = True

    def copy_in(self, value: Any, device: str = HOST) -> None:
        """Copy ``value`` (on ``device``) into the bound view: it must be a dense array of the view's shape and
        dtype; an error naming the variable otherwise."""
        view = self.value
        dense = not isinstance(value, (LoDTensor, SelectedRows))
        if not dense or getattr(value, "shape", None) != view.shape or getattr(value, "dtype", None) != view.dtype:
            raise BlockirError(
                f"variable {self.name!r} is a view of a fused buffer (BuildStrategy.fuse_all_optimizer_ops): a value "
                f"set or loaded is copied into it, so it must be a dense {view.dtype}{list(view.shape)} array, got "
                f"{describe_value(value)}"
            )
        if value is not view:
            view[...] = value if device == self.device else transfer(value, self.device)
            note_written(view)

    def __repr__(self) -> str:
        shape = getattr(self.value, "shape", None)
        where = "" if self.device == HOST else f", device={self.device!r}"
        return f"ScopeVariable({self.name!r}, {'empty' if self.value is None else f'shape={shape}'}{where})"


class Scope:
    """Named values, with an optional parent scope searched by :meth:`find_var`."""

    def __init__(self, parent: Scope | None = None) -> None:
        self.parent = parent
        self._vars: dict[str, ScopeVariable] = {}
        self._kids: list[Scope] = []

    def var(self, name: str) -> ScopeVariable:
        """The variable ``name`` of this scope, created empty if this scope has none (it may shadow a parent's)."""
        holder = self._vars.get(name)
        if holder is None:
            if not isinstance(name, str) or not name:
                raise BlockirError(f"scope variable name must be a non-empty string, got {name!r}")
            holder = self._vars[name] = ScopeVariable(name)
        return holder

    def find_var(self, name: str) -> ScopeVariable | None:
        """The variable ``name`` of this scope or the nearest ancestor that has it, else None."""
        scope: Scope | None = self
        while scope is not None:
            holder = scope._vars.get(name)
            if holder is not None:
                return holder
            scope = scope.parent
        return None

    def get(self, name: str) -> Any:
        """The value of ``name`` (searching parents); an error naming it when absent or empty."""
        holder = self.find_var(name)
        if holder is None:
            raise BlockirError(f"variable {name!r} is not in the scope")
        return holder.get_tensor()

    def set(self, name: str, value: Any, device: str = HOST) -> None:
        """Set ``name`` where it lives (this scope or the nearest ancestor having it), else create it here.

        ``value`` is on ``device`` (default: the host). A variable bound to a view (:meth:`bind`) keeps it:
        ``value`` is copied into it (:meth:`ScopeVariable.copy_in`). ``scope.var(name).set(value)`` shadows an
        ancestor's variable instead.
        """
        holder = self.find_var(name) or self.var(name)
        if holder.bound:
            holder.copy_in(value, device)
        else:
            holder.set(value, device)

    def bind(self, name: str, view: Any, device: str = HOST) -> None:
        """Bind ``name``, where it lives (else here), to ``view``, a view of memory an op owns, on ``device``: from
        now on :meth:`set` copies into it (module docstring)."""
        (self.find_var(name) or self.var(name)).bind(view, device)

    def erase(self, names: list[str] | tuple[str, ...]) -> None:
        """Remove the variables ``names`` from this scope (not its parents); absent names are ignored."""
        for name in names:
            self._vars.pop(name, None)

    def names(self) -> list[str]:
        """The names of this scope's own variables (not its parents'), in creation order."""
        return list(self._vars)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.find_var(name) is not None

    # -- children ----------------------------------------------------------------
    def new_scope(self) -> Scope:
        """A new child scope, kept until :meth:`drop_kids`."""
        kid = Scope(self)
        self._kids.append(kid)
        return kid

    @property
    def kids(self) -> tuple[Scope, ...]:
        return tuple(self._kids)

    def drop_kids(self) -> None:
        """Forget every child scope (and so the values only they hold)."""
        for kid in self._kids:
            kid.drop_kids()
            kid._vars.clear()
        self._kids.clear()

    def __repr__(self) -> str:
        return f"Scope({len(self._vars)} vars, {len(self._kids)} kids)"


_global_scope = Scope()
# A global scope of the current context only (a role of ``blockir launch --backend inprocess``, a thread of one
# process, has its own): None, outside such a context, for the process's.
_context_scope: ContextVar[Scope | None] = ContextVar("blockir_global_scope", default=None)


def global_scope() -> Scope:
    """The scope executors and ``bir.io`` use when none is given (switched by :func:`scope_guard`): the
    current context's (:func:`set_context_scope`) if it has one, else the process's."""
    scope = _context_scope.get()
    return _global_scope if scope is None else scope


def set_context_scope(scope: Scope) -> None:
    """Give the current context (a thread running in a ``contextvars.Context`` of its own) its own global scope."""
    _context_scope.set(scope)


@contextlib.contextmanager
def scope_guard(scope: Scope) -> Iterator[Scope]:
    """Make ``scope`` the global scope inside the ``with`` block (the context's, when it has its own)."""
    global _global_scope
    if not isinstance(scope, Scope):
        raise BlockirError(f"scope_guard needs a Scope, got {type(scope).__name__}")
    if _context_scope.get() is not None:
        token = _context_scope.set(scope)
        try:
            yield scope
        finally:
            _context_scope.reset(token)
        return
    previous, _global_scope = _global_scope, scope
    try:
        yield scope
    finally:
        _global_scope = previous
