"""What a worker calls on a parameter server, as a typed interface.

:class:`ParameterServerAPI` is the part of :class:`~blockir.distributed.server.ParameterServer` that moves
parameters and gradients (and the small calls beside them: versions, barriers, the end of a worker). The data
plane (:mod:`blockir.distributed.wire`) derives its method table from it: a method's id, its arguments' and
result's layout on the wire come from these signatures, never from a name that came off the network.

The server's other methods (saving and restoring shards, a restart's incarnation, stopping) answer with
structures whose shape is not fixed (manifest entries, ``dict[str, Any]``): they stay control calls, made
through the launcher's backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Protocol

import numpy as np


@dataclass(frozen=True)
class ArrayOf:
    """What an array argument must be: one of ``dtypes`` (numpy names; empty: any dtype the wire carries) with
    ``ndim`` dimensions (None: any)."""

    dtypes: tuple[str, ...] = ()
    ndim: int | None = None


Ids = Annotated[np.ndarray, ArrayOf(("int64",), 1)]
"""Row ids of a sparse table: int64, one dimension."""

Rows = Annotated[np.ndarray, ArrayOf(ndim=2)]
"""Rows of a sparse table: ``[len(ids), dim]``."""


class ParameterServerAPI(Protocol):
    """The methods of a parameter server a worker calls over the data plane (their meaning: ``server.py``)."""

    def push(
        self, worker: int, dense: dict[str, np.ndarray], sparse: dict[str, tuple[Ids, Rows]], weight: int = 1
    ) -> int: ...

    def pull_dense(self, names: Sequence[str], after: int = 0) -> dict[str, np.ndarray]: ...

    def pull_sparse(self, table: str, ids: Ids, after: int = 0) -> Rows: ...

    def exchange(
        self,
        worker: int,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[Ids, Rows]],
        weight: int,
        blocks: Sequence[str],
        rows: dict[str, Ids],
    ) -> tuple[int, dict[str, np.ndarray], dict[str, Rows]]: ...

    def init_dense(self, values: dict[str, np.ndarray]) -> None: ...

    def init_rows(self, table: str, ids: Ids, rows: Rows) -> None: ...

    def values(self, names: Sequence[str]) -> dict[str, np.ndarray]: ...

    def init_values(self, values: dict[str, np.ndarray]) -> None: ...

    def table_rows(self, table: str) -> tuple[Ids, Rows]: ...

    def table_ids(self, table: str) -> Ids: ...

    def table_size(self, table: str) -> int: ...

    def version(self) -> int: ...

    def resume(self, step: int) -> None: ...

    def shrink(self, threshold: int) -> dict[str, int]: ...

    def commit_save(self) -> None: ...

    def barrier(self, worker: int) -> None: ...

    def finish(self, worker: int) -> None: ...
