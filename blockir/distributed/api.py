"""What a worker calls on a parameter server, as a typed interface.

:class:`ParameterServerAPI` is the part of :class:`~blockir.distributed.server.ParameterServer` that moves
parameters and gradients (and the small calls beside them: versions, barriers, the end of a worker). The data
plane (:mod:`blockir.distributed.wire`) derives its method table from it: a method's id, its arguments' and
result's layout on the wire come from these signatures, never from a name that came off the network.

The server's other methods a worker calls (:class:`ServerControl`: writing a save's shards, a restart's
incarnation) answer with structures whose shape is not fixed (manifest entries, ``dict[str, Any]``): they stay
control calls, made through the launcher's backend (Ray's actor calls).

A worker reaches a server through a :class:`ServerHandle`: one method per method of the two interfaces, of the
same signature, returning a :class:`Reply` (a future) of its result, so that the calls to several servers are in
flight together (``handle.push(worker, dense, sparse).result()``). A backend writes only
:meth:`ServerHandle.submit` (and :meth:`~ServerHandle.close`): the methods are the interfaces' functions
themselves (``submit(ParameterServerAPI.push, ...)``, typed through ``ParamSpec``), never names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Concatenate, ParamSpec, Protocol, TypeVar

import numpy as np

from blockir.errors import BlockirError

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


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


class ServerControl(Protocol):
    """The methods of a parameter server a worker calls as control calls (their meaning: ``server.py``)."""

    def incarnation(self) -> dict[str, Any]: ...

    def save_shards(self, directory: str, delta: bool = False) -> dict[str, dict[str, Any]]: ...


class ServerLost(BlockirError):
    """A parameter server does not answer: its process died or its script is not serving. ``final``: it will not
    come back (no restarts left)."""

    def __init__(self, message: str, final: bool = False) -> None:
        super().__init__(message)
        self.final = final

    def __reduce__(self) -> tuple[Any, ...]:  # raised in a Ray actor, read in the worker
        return (ServerLost, (str(self), self.final))


class Reply(Protocol[R_co]):
    """A call in flight: :meth:`result` waits for its result (``concurrent.futures.Future`` is one); it raises
    :class:`ServerLost` when the server was lost, a :class:`~blockir.errors.BlockirError` when the method
    failed."""

    def result(self) -> R_co: ...


SERVER_METHODS: dict[Callable[..., Any], str] = {
    f: name
    for interface in (ParameterServerAPI, ServerControl)
    for name, f in vars(interface).items()
    if callable(f) and not name.startswith("_")
}
"""Every method a worker calls on a server (a function of :class:`ParameterServerAPI` or :class:`ServerControl`),
with its name: what a backend looks a :meth:`ServerHandle.submit` up in."""


class ServerHandle(ABC):
    """A parameter server as a worker reaches it: each method of :class:`ParameterServerAPI` and
    :class:`ServerControl`, sent by :meth:`submit`, returns a :class:`Reply` of its result (module docstring)."""

    @abstractmethod
    def submit(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> Reply[R]:
        """Send the call of ``method`` (a key of :data:`SERVER_METHODS`) with these arguments."""

    @abstractmethod
    def close(self) -> None:
        """Release what the handle holds (its threads, its connections); the server itself goes on."""

    def push(
        self, worker: int, dense: dict[str, np.ndarray], sparse: dict[str, tuple[Ids, Rows]], weight: int = 1
    ) -> Reply[int]:
        return self.submit(ParameterServerAPI.push, worker, dense, sparse, weight)

    def pull_dense(self, names: Sequence[str], after: int = 0) -> Reply[dict[str, np.ndarray]]:
        return self.submit(ParameterServerAPI.pull_dense, names, after)

    def pull_sparse(self, table: str, ids: Ids, after: int = 0) -> Reply[Rows]:
        return self.submit(ParameterServerAPI.pull_sparse, table, ids, after)

    def exchange(
        self,
        worker: int,
        dense: dict[str, np.ndarray],
        sparse: dict[str, tuple[Ids, Rows]],
        weight: int,
        blocks: Sequence[str],
        rows: dict[str, Ids],
    ) -> Reply[tuple[int, dict[str, np.ndarray], dict[str, Rows]]]:
        return self.submit(ParameterServerAPI.exchange, worker, dense, sparse, weight, blocks, rows)

    def init_dense(self, values: dict[str, np.ndarray]) -> Reply[None]:
        return self.submit(ParameterServerAPI.init_dense, values)

    def init_rows(self, table: str, ids: Ids, rows: Rows) -> Reply[None]:
        return self.submit(ParameterServerAPI.init_rows, table, ids, rows)

    def values(self, names: Sequence[str]) -> Reply[dict[str, np.ndarray]]:
        return self.submit(ParameterServerAPI.values, names)

    def init_values(self, values: dict[str, np.ndarray]) -> Reply[None]:
        return self.submit(ParameterServerAPI.init_values, values)

    def table_rows(self, table: str) -> Reply[tuple[Ids, Rows]]:
        return self.submit(ParameterServerAPI.table_rows, table)

    def table_ids(self, table: str) -> Reply[Ids]:
        return self.submit(ParameterServerAPI.table_ids, table)

    def table_size(self, table: str) -> Reply[int]:
        return self.submit(ParameterServerAPI.table_size, table)

    def version(self) -> Reply[int]:
        return self.submit(ParameterServerAPI.version)

    def resume(self, step: int) -> Reply[None]:
        return self.submit(ParameterServerAPI.resume, step)

    def shrink(self, threshold: int) -> Reply[dict[str, int]]:
        return self.submit(ParameterServerAPI.shrink, threshold)

    def commit_save(self) -> Reply[None]:
        return self.submit(ParameterServerAPI.commit_save)

    def barrier(self, worker: int) -> Reply[None]:
        return self.submit(ParameterServerAPI.barrier, worker)

    def finish(self, worker: int) -> Reply[None]:
        return self.submit(ParameterServerAPI.finish, worker)

    def incarnation(self) -> Reply[dict[str, Any]]:
        return self.submit(ServerControl.incarnation)

    def save_shards(self, directory: str, delta: bool = False) -> Reply[dict[str, dict[str, Any]]]:
        return self.submit(ServerControl.save_shards, directory, delta)
