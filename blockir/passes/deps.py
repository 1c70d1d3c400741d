"""Data dependencies between the ops of a block, and the ``deps`` pass that records them.

:func:`dependency_graph` walks a block in program order keeping, per variable,
its last writer and the ops that read it since. An op that reads a variable
depends on its last writer (read after write, RAW); an op that writes one
depends on the ops that read the previous value (write after read, WAR) and on
the previous writer (write after write, WAW). In-place updates (an optimizer's
``ParamOut`` naming its ``Param``) are writes like any other, and what an op's
sub-blocks read and write outside themselves counts as the op's own reads and
writes (:func:`~blockir.passes.prune.op_reads_writes`). Ops interact only
through the variables they name: any order of the ops that respects the edges
(any topological order) computes the same values as program order.

The ``deps`` pass builds the graph of every block, notes its size per block and
stores the graphs in its report entry (``report.record("deps").details["graphs"]``,
block index -> graph); it never changes the program.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import networkx as nx

from blockir.ir import Block, Program
from blockir.ir.core import op_reads_writes
from blockir.ir.schema import EMPTY_VAR
from blockir.passes.base import Pass, register_pass
from blockir.passes.manager import note, record_detail

__all__ = ["RAW", "WAR", "WAW", "Deps", "dependency_graph"]

RAW, WAR, WAW = "RAW", "WAR", "WAW"
_PRIMARY = (RAW, WAW, WAR)  # an edge's ``kind`` is the first of these among its dependencies


def _depend(graph: nx.DiGraph, src: int, dst: int, kind: str, name: str) -> None:
    if not graph.has_edge(src, dst):
        graph.add_edge(src, dst, kind=kind, vars=[name], deps=[(kind, name)])
        return
    data = graph.edges[src, dst]
    data["deps"].append((kind, name))
    if name not in data["vars"]:
        data["vars"].append(name)
    data["kind"] = min(data["kind"], kind, key=_PRIMARY.index)


def dependency_graph(block: Block) -> nx.DiGraph[int]:
    """The data dependencies of ``block``'s ops, as a DiGraph over op indices.

    Node ``i`` has attribute ``op`` (``block.ops[i]``). An edge ``i -> j`` means
    ``j`` must run after ``i``; its attributes are ``deps`` (every
    ``(kind, variable)`` pair behind it, kind ``"RAW"``, ``"WAR"`` or ``"WAW"``),
    ``vars`` (the variable names) and ``kind`` (RAW if any, else WAW, else WAR).
    """
    graph: nx.DiGraph[int] = nx.DiGraph(block=block.idx)
    writer: dict[str, int] = {}
    readers: dict[str, list[int]] = {}  # the ops that read the variable's current value
    for i, op in enumerate(block.ops):
        graph.add_node(i, op=op)
        reads, writes = op_reads_writes(op)
        reads.discard(EMPTY_VAR)
        writes.discard(EMPTY_VAR)
        for name in sorted(reads):
            if name in writer:
                _depend(graph, writer[name], i, RAW, name)
        for name in sorted(writes):
            for reader in readers.get(name, ()):
                _depend(graph, reader, i, WAR, name)
            if name in writer:
                _depend(graph, writer[name], i, WAW, name)
        for name in reads:
            readers.setdefault(name, []).append(i)
        for name in writes:
            writer[name] = i
            readers[name] = []
    return graph


def describe(graph: nx.DiGraph[int]) -> str:
    """``block 0: 12 ops, 17 edges (RAW 11, WAR 4, WAW 2), critical path 9 ops``."""
    edges: list[tuple[int, int, list[tuple[str, str]]]] = list(graph.edges(data="deps"))
    kinds = Counter(kind for _, _, deps in edges for kind, _ in deps)
    path = nx.dag_longest_path_length(graph) + 1 if graph else 0
    return (
        f"block {graph.graph['block']}: {graph.number_of_nodes()} ops, {graph.number_of_edges()} edges "
        f"({', '.join(f'{k} {kinds[k]}' for k in (RAW, WAR, WAW))}), critical path {path} ops"
    )


@register_pass
@dataclass(frozen=True)
class Deps(Pass):
    """Analysis only: records :func:`dependency_graph` of every block in the pass report."""

    name: ClassVar[str] = "deps"
    summary: ClassVar[str] = "analyse the data dependencies (RAW, WAR, WAW) of every block; changes nothing"

    def run(self, program: Program) -> bool:
        graphs = {block.idx: dependency_graph(block) for block in program.blocks}
        for graph in graphs.values():
            note(describe(graph))
        record_detail("graphs", graphs)
        return False
