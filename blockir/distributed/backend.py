"""Where the parameter servers live and how workers reach them: in this process (threads), or as Ray actors.

A backend publishes the :class:`~blockir.distributed.server.ParameterServer`
objects of one training run (``run``: an id the launcher gives every role) and
gives workers :class:`~blockir.distributed.api.ServerHandle` s to them.

- :class:`InProcessBackend` (the default, and the reference the Ray backend is
  tested against): the servers are objects of this process, registered by run
  and index in the instance the launcher made and handed to its roles (through
  their contexts: :func:`blockir.distributed.fleet.set_context_role`); a handle
  calls their methods on a small thread pool, so that the requests to several
  servers are in flight together.
- ``RayBackend`` (:mod:`blockir.distributed.ray_backend`, the ``ray`` extra):
  each server is a named Ray actor; arrays travel over the data plane
  (:mod:`blockir.distributed.wire`), Ray carries the control calls.
"""

from __future__ import annotations

import importlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from blockir.distributed.api import SERVER_METHODS, ServerHandle
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError

__all__ = ["Backend", "InProcessBackend", "InProcessHandle", "backend_named"]


class Backend(Protocol):
    """How a run's servers are published and found."""

    def serve(self, run: str, index: int, server: ParameterServer) -> None:
        """Publish ``server`` as server ``index`` of ``run``."""
        ...

    def handles(self, run: str, servers: int, timeout: float) -> Sequence[ServerHandle]:
        """Handles to the ``servers`` servers of ``run``, waiting up to ``timeout`` s for them to be published."""
        ...

    def unpublish(self, run: str, index: int) -> None:
        """Take server ``index`` of ``run`` away (after it stopped)."""
        ...


P = ParamSpec("P")
R = TypeVar("R")


class InProcessHandle(ServerHandle):
    """A server of this process: ``submit`` runs the server's method on a thread of the worker's pool."""

    def __init__(self, server: ParameterServer, pool: ThreadPoolExecutor) -> None:
        self.server = server
        self.pool = pool

    def submit(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> Future[R]:
        name = SERVER_METHODS.get(method)
        if name is None:
            raise BlockirError(f"{method!r} is not a method of ParameterServerAPI or ServerControl")
        bound: Callable[..., R] = getattr(self.server, name)
        return self.pool.submit(bound, *args, **kwargs)

    def close(self) -> None:
        self.pool.shutdown(wait=True)


class InProcessBackend:
    """A registry of servers of this process, by run and index (module docstring)."""

    def __init__(self) -> None:
        self._servers: dict[tuple[str, int], ParameterServer] = {}
        self._stopped: set[str] = set()  # runs a launcher stopped (a role failed): nobody waits for their servers
        self._changed = threading.Condition()

    def serve(self, run: str, index: int, server: ParameterServer) -> None:
        with self._changed:
            self._servers[(run, index)] = server
            self._changed.notify_all()
            stopped = run in self._stopped
        if stopped:  # a role failed while this server started: it would wait for workers that ended
            server.stop()

    def handles(self, run: str, servers: int, timeout: float) -> list[ServerHandle]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                missing = [k for k in range(servers) if (run, k) not in self._servers]
                if not missing:
                    break
                if run in self._stopped:
                    raise BlockirError(
                        f"parameter servers {missing} of run {run!r} will not start: the run was stopped"
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BlockirError(f"parameter servers {missing} of run {run!r} did not start within {timeout:g} s")
                self._changed.wait(min(left, 0.5))
            found = [self._servers[(run, k)] for k in range(servers)]
        pool = ThreadPoolExecutor(max_workers=max(2, servers), thread_name_prefix=f"blockir-ps-client-{run}")
        return [InProcessHandle(server, pool) for server in found]

    def unpublish(self, run: str, index: int) -> None:
        with self._changed:
            self._servers.pop((run, index), None)

    def stop_run(self, run: str) -> None:
        """Stop the servers of ``run`` and refuse to wait for those not started (a role of the run failed)."""
        with self._changed:
            self._stopped.add(run)
            servers = [s for (r, _), s in self._servers.items() if r == run]
            self._changed.notify_all()
        for server in servers:
            server.stop()

    def end_run(self, run: str) -> None:
        """Forget ``run`` (its launch returned)."""
        with self._changed:
            self._stopped.discard(run)
            for key in [key for key in self._servers if key[0] == run]:
                del self._servers[key]

    def published(self, run: str, index: int) -> ParameterServer | None:
        with self._changed:
            return self._servers.get((run, index))


def backend_named(name: str) -> Backend:
    """A new backend ``inprocess`` or ``ray``, for a role no launcher handed one (``fleet.init`` with the role in
    the environment): its registry of this process's servers is its own."""
    if name == "inprocess":
        return InProcessBackend()
    if name == "ray":  # a layer above this one (it runs the roles too): found by name, imported on first use
        return cast(Backend, importlib.import_module("blockir.distributed.ray_backend").RayBackend())
    raise BlockirError(f"unknown parameter-server backend {name!r} (expected inprocess or ray)")
