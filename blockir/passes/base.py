"""What every pass is: a frozen dataclass whose fields are its options, registered by name.

A pass subclasses :class:`Pass`, sets the class variables ``name`` (its name in
pipeline strings, e.g. ``insert-copies``) and ``summary`` (one line for
``blockir passes``), declares its options as dataclass fields with defaults
(``bool``, ``int``, ``float``, ``str`` or ``tuple[str, ...]``), and implements
:meth:`Pass.run`, which transforms the program in place and returns whether it
changed it. :func:`register_pass` adds the class to the registry the pipeline
parser reads. Ops a pass creates carry their lineage (:func:`mark_created`).
A :class:`Pipeline` is a registered pass made of other passes: a named
pipeline (``blockir.passes.pipelines``).
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from blockir.errors import BlockirError
from blockir.ir import Operator, Program


@dataclass(frozen=True)
class Pass:
    """Base of all passes; see the module docstring."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""

    def run(self, program: Program) -> bool:  # pragma: no cover - abstract
        """Transform ``program`` in place; return whether anything changed."""
        raise NotImplementedError


@dataclass(frozen=True)
class Pipeline(Pass, abc.ABC):
    """A named pipeline: a pass made of passes (:meth:`passes`), with options as fields like any pass.

    Registered with :func:`register_pass`, it is named in pipeline strings like
    a pass, e.g. ``default-device-pipeline{default=cuda:0 compute=2}``; the pass
    manager runs and reports its passes one by one. Its options are checked when
    it is made (the passes it would run are made then).
    """

    def __post_init__(self) -> None:
        self.passes()

    @abc.abstractmethod
    def passes(self) -> list[Pass]:
        """The passes this pipeline runs, in order."""

    def run(self, program: Program) -> bool:
        """Run the passes in order, outside the pass manager; return whether any changed the program."""
        changed = False
        for p in self.passes():
            changed = p.run(program) or changed
        return changed


P = TypeVar("P", bound=type[Pass])
_PASSES: dict[str, type[Pass]] = {}


def register_pass(cls: P) -> P:
    """Class decorator: make ``cls`` available to pipelines under ``cls.name``."""
    if not cls.name or cls.name in _PASSES:
        raise BlockirError(f"pass {cls.__name__} needs a unique name, got {cls.name!r}")
    _PASSES[cls.name] = cls
    return cls


def unregister_pass(name: str) -> type[Pass]:
    """Remove the pass registered as ``name`` and return its class (a test's fixture cleaning up)."""
    if name not in _PASSES:
        raise BlockirError(f"no pass is registered as {name!r}")
    return _PASSES.pop(name)


def registered_passes() -> dict[str, type[Pass]]:
    """Every registered pass by name, in registration order."""
    return dict(_PASSES)


def origin_key(op: Operator) -> str:
    """A name for an op that survives save/load: ``type:out1,out2`` (or its inputs if it writes nothing)."""
    return f"{op.type}:{','.join(op.output_names() or op.input_names())}"


def first_reads(ops: Sequence[Operator], exclude: Collection[str] = ()) -> list[str]:
    """The variables ``ops`` read before any of them writes them, in order of first read, less ``exclude``
    (a training block's feeds, when ``exclude`` holds its persistables)."""
    reads: list[str] = []
    written: set[str] = set()
    for op in ops:
        for name in op.input_names():
            if name not in written and name not in exclude and name not in reads:
                reads.append(name)
        written.update(op.output_names())
    return reads


def mark_created(op: Operator, pass_name: str, origins: list[Operator]) -> Operator:
    """Record on ``op`` that pass ``pass_name`` created it from ``origins`` (attributes ``op_pass``, ``op_origin``).
    An origin that this pass created itself stands for its own origins: the ops listed are ops of the
    program the pass was given."""
    keys: list[str] = []
    for o in origins:
        own = o.attrs.get("op_pass") == pass_name and o.attrs.get("op_origin")
        keys.extend(o.attrs["op_origin"] if own else [origin_key(o)])
    op.set_attr("op_pass", pass_name)
    op.set_attr("op_origin", keys)
    return op
