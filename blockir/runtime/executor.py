"""The executor: runs programs on a place, through plans compiled once and cached."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from blockir.errors import BlockirError
from blockir.ir.core import Program
from blockir.runtime.place import Place, as_place
from blockir.runtime.plan import Plan, compile_plan
from blockir.runtime.scope import Scope, global_scope

__all__ = ["Executor"]


def _name(target: Any) -> str:
    """The variable name a fetch-list entry stands for (a name, or anything with ``.name``)."""
    name = target if isinstance(target, str) else getattr(target, "name", None)
    if not isinstance(name, str):
        raise BlockirError(f"fetch_list entries must be variable names or variables, got {target!r}")
    return name


class Executor:
    """Runs programs on one place (``"cpu"`` or ``CPUPlace()``), Fluid's ``Executor``.

    Each program block is compiled into a :class:`~blockir.runtime.plan.Plan`
    once per (program, program state, feed names, fetch names) and the plan is
    cached; a program changed through the IR API is recompiled on its next
    run. The cache keeps the plans of at most ``max_plans`` program states.
    """

    def __init__(self, place: str | Place = "cpu", max_plans: int = 64) -> None:
        if not isinstance(max_plans, int) or max_plans < 1:
            raise BlockirError(f"max_plans must be a positive int, got {max_plans!r}")
        self.place: Place = as_place(place)
        self.max_plans = max_plans
        self._plans: dict[tuple[int, int, frozenset[str], tuple[str, ...] | None], Plan] = {}

    def plan(self, program: Program, feed_names: Iterable[str] = (),
             fetch_list: Iterable[Any] | None = None) -> Plan:
        """The (cached) plan that :meth:`run` uses for these feed names and fetch targets."""
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        return self._plan(program, frozenset(feed_names), fetch)

    def _plan(self, program: Program, feed_names: frozenset[str], fetch: tuple[str, ...] | None) -> Plan:
        key = (id(program), program.mutation, feed_names, fetch)
        plan = self._plans.get(key)
        if plan is None:
            plan = compile_plan(program, feed_names, fetch, self.place)
            # Plans of earlier states of this program can never be used again (mutation counters only grow).
            for old in [k for k in self._plans if k[0] == key[0] and k[1] != key[1]]:
                del self._plans[old]
            while len(self._plans) >= self.max_plans:
                del self._plans[next(iter(self._plans))]
            self._plans[key] = plan
        return plan

    def run(self, program: Program | None = None, feed: Mapping[str, Any] | None = None,
            fetch_list: Iterable[Any] | None = None, scope: Scope | None = None,
            return_numpy: bool = True) -> list[Any]:
        """Run ``program``'s global block once and return the fetched values, in ``fetch_list`` order.

        ``program`` defaults to the DSL's default main program. ``feed`` maps
        variable names to numpy arrays (or array-likes), ``LoDTensor`` or
        ``SelectedRows``; each is checked against the variable's dtype, shape
        (-1 matches any size) and LoD level. ``fetch_list`` holds names or
        variables; None fetches the targets of the program's ``fetch`` ops, if
        any. Persistable variables are read from and written to ``scope``
        (default: :func:`global_scope`); temporaries are freed after their last
        use and never reach the scope. With ``return_numpy`` fetched LoD
        tensors come back as their data arrays and selected rows as dense
        arrays; otherwise as they are. A failing kernel raises
        :class:`~blockir.errors.ExecutionError` naming the op and its inputs.
        The program itself is never modified.
        """
        if program is None:
            from blockir.dsl.framework import default_main_program  # at call time: the runtime works without it

            program = default_main_program()
        elif not isinstance(program, Program):
            raise BlockirError(f"Executor.run needs a Program, got {type(program).__name__}")
        if feed is None:
            feed = {}
        elif not isinstance(feed, Mapping):
            raise BlockirError(f"feed must be a dict of variable name -> value, got {type(feed).__name__}")
        fetch = None if fetch_list is None else tuple(_name(f) for f in fetch_list)
        plan = self._plan(program, frozenset(feed), fetch)
        return plan.run(feed, global_scope() if scope is None else scope, return_numpy)

    def __repr__(self) -> str:
        return f"Executor({str(self.place)!r})"

