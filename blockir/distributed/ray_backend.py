"""The Ray backend (the ``ray`` extra): every role a Ray actor, the servers reached through theirs.

``blockir launch --backend ray`` (:func:`launch_ray`) starts a local Ray
cluster on loopback (node address 127.0.0.1, no dashboard, usage statistics
off), or joins the one at ``--address`` on that cluster's terms, and runs each
role as a ``RoleActor`` named ``blockir-RUN-ROLE-INDEX`` (namespace
``blockir``): its ``run`` method runs the script with the role in the
environment, its ``call`` method runs a method of the parameter server the
script published in that actor's process (:class:`RayBackend`.serve publishes it
there as the in-process backend does). The actor
runs its methods on a thread pool, so a server answers while its script waits in
``run_server``. Arrays travel through Ray's object store; nothing is pickled
from a user's file. A role's standard output and error reach the launcher
through Ray, each line prefixed with the role.

A role whose ``run`` failed is run again when it may be restarted
(:func:`blockir.distributed.launch.restartable`): its actor is made with Ray's
``max_restarts``, so a process that died (killed, say) is started again by Ray,
and the launcher calls ``run`` once more with the role's ``restart`` count one
higher. A call to a server whose process died or that is not serving raises
:class:`~blockir.distributed.communicator.ServerLost` in the worker (``final``
when Ray will not restart it). Once every worker ended, the servers are stopped
(a restarted server does not know who finished before it came back).

When a role fails for good, :func:`launch_ray` stops the servers, waits for the other
roles (they fail or end; those still running after :data:`STOP_GRACE_S`, a
worker waiting for a server that never started, say, are counted as stopped),
kills every actor it made, and shuts the cluster down if it started it.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import ray

from blockir.distributed.backend import InProcessBackend
from blockir.distributed.communicator import ServerLost
from blockir.distributed.fleet import Role
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError

__all__ = ["NAMESPACE", "RayBackend", "RayHandle", "RoleActor", "launch_ray", "loopback_env"]

NAMESPACE = "blockir"
STOP_GRACE_S = 10.0  # after a role failed and the servers were stopped: how long the others get to end


def actor_name(role: Role) -> str:
    return f"blockir-{role.run}-{role.kind}-{role.index}"


def loopback_env() -> dict[str, str]:
    """The environment that keeps a Ray cluster this process starts on loopback and quiet."""
    return {
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_AUTH_MODE": "disabled",
        "http_proxy": "http://127.0.0.1:9",
        "https_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "no_proxy": "localhost,127.0.0.1,::1",
        "NO_PROXY": "localhost,127.0.0.1,::1",
    }


class _RayFuture:
    def __init__(self, ref: Any) -> None:
        self.ref = ref

    def result(self) -> Any:
        try:
            return ray.get(self.ref)
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, ServerLost):
                raise e.cause from None
            raise BlockirError(str(e.cause) if e.cause is not None else str(e)) from None
        except ray.exceptions.RayActorError as e:  # its process died: restarting (or not, for good)
            first = str(e).strip().splitlines()
            final = isinstance(e, ray.exceptions.ActorDiedError)
            raise ServerLost(f"{type(e).__name__}: {first[0] if first else ''}", final=final) from None


class RayHandle:
    """A server reached through its role's actor: ``submit`` calls the server's method there."""

    def __init__(self, actor: Any, run: str, index: int) -> None:
        self.actor = actor
        self.run = run
        self.index = index

    def submit(self, method: str, *args: Any) -> _RayFuture:
        return _RayFuture(self.actor.call.remote(self.run, self.index, method, *args))

    def close(self) -> None:
        """Nothing to release: the actor belongs to its role."""


class RayBackend:
    """Servers published in the actor processes of a Ray cluster (module docstring)."""

    def serve(self, run: str, index: int, server: ParameterServer) -> None:
        InProcessBackend().serve(run, index, server)  # in the role actor's process, where its actor answers

    def handles(self, run: str, servers: int, timeout: float) -> list[RayHandle]:
        deadline = time.monotonic() + timeout
        handles: list[RayHandle] = []
        for k in range(servers):
            name = f"blockir-{run}-server-{k}"
            while (actor := _serving(name, run, k)) is None:
                if time.monotonic() > deadline:
                    raise BlockirError(f"parameter server {k} of run {run!r} did not start within {timeout:g} s")
                time.sleep(0.05)
            handles.append(RayHandle(actor, run, k))
        return handles

    def unpublish(self, run: str, index: int) -> None:
        InProcessBackend().unpublish(run, index)


def _serving(name: str, run: str, index: int) -> Any:
    """The actor of server ``index`` of ``run`` once its server is published; None before (or before the actor
    exists)."""
    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:  # not made yet
        return None
    return actor if ray.get(actor.serving.remote(run, index)) else None


class _RoleActor:
    """One role of a run: runs the script (:meth:`run`) and answers for its server (:meth:`call`)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:  # Ray prefixes the actor's output lines with it
        return self.name

    def run(self, script: str, source: str, role: Role, args: list[str]) -> None:
        from blockir.distributed.launch import run_role

        os.environ.update(role.env())
        with tempfile.TemporaryDirectory() as where:
            path = Path(script)
            if not (path.is_file() and path.read_text(encoding="utf-8") == source):  # another machine: a copy
                path = Path(where) / path.name
                path.write_text(source, encoding="utf-8")
            try:
                run_role(path, role, args)
            except SystemExit as e:
                if e.code not in (None, 0):
                    raise BlockirError(f"{self.name} exited with {e.code}") from None
            except BaseException:
                print(traceback.format_exc(), file=sys.stderr, end="")
                raise

    def serving(self, run: str, index: int) -> bool:
        from blockir.distributed.backend import InProcessBackend

        return InProcessBackend().published(run, index) is not None

    def stop(self, run: str, index: int) -> None:
        """Stop the server of this actor, if it serves."""
        from blockir.distributed.backend import InProcessBackend

        server = InProcessBackend().published(run, index)
        if server is not None:
            server.stop()

    def call(self, run: str, index: int, method: str, *args: Any) -> Any:
        from blockir.distributed.backend import InProcessBackend

        server = InProcessBackend().published(run, index)
        if server is None:
            raise ServerLost(f"parameter server {index} of run {run!r} is not serving")
        return getattr(server, method)(*args)


RoleActor: Any = cast(Any, ray.remote)(max_concurrency=64)(_RoleActor)


def launch_ray(
    script: str | Path | Callable[[], Any], roles: list[Role], args: list[str], address: str | None, max_restarts: int
) -> Any:
    """Run every role as a :class:`RoleActor` (module docstring); how they ended, a ``LaunchResult``."""
    from blockir.distributed.launch import LaunchResult, restartable, restarting, role_name

    if callable(script):
        raise BlockirError("launch: the ray backend runs script files, not callables")
    source = Path(script).read_text(encoding="utf-8")
    started = not ray.is_initialized()
    if started:
        if address is None:
            os.environ.update(loopback_env())
            ray.init(
                num_cpus=max(2, os.cpu_count() or 2),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                _temp_dir=tempfile.mkdtemp(prefix="blockir-ray-"),
                namespace=NAMESPACE,
                log_to_driver=True,
            )
        else:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=True)
    actors = {}
    result = LaunchResult()
    try:
        for role in roles:
            restarts = max_restarts if restartable(role, max_restarts) else 0  # Ray starts a dead process again
            actors[role_name(role)] = RoleActor.options(
                name=actor_name(role), namespace=NAMESPACE, num_cpus=0, max_restarts=restarts
            ).remote(role_name(role))

        def start(role: Role) -> Any:
            return actors[role_name(role)].run.remote(str(script), source, role, args)

        def stop_servers(but: str | None = None) -> None:
            for other in roles:
                if other.kind == "server" and role_name(other) != but:
                    actors[role_name(other)].stop.remote(other.run, other.index)

        pending = {start(r): r for r in roles}
        stopped_at: float | None = None  # when the first failure stopped the servers
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not done:
                if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
                    first = next(iter(result.failures))
                    for role in pending.values():  # still waiting on something that will not come
                        result.failures[role_name(role)] = f"stopped {STOP_GRACE_S:g} s after {first} failed"
                    break
                continue
            role = pending.pop(done[0])
            try:
                ray.get(done[0])
            except ray.exceptions.RayError as e:
                cause = getattr(e, "cause", None) or e
                text = str(cause).strip().splitlines()
                error = f"{type(cause).__name__}: {text[0] if text else ''}"
                if stopped_at is None and restartable(role, max_restarts):
                    role = restarting(result, role, error, max_restarts)
                    pending[start(role)] = role
                    continue
                result.failures[role_name(role)] = error
                if stopped_at is None:
                    stopped_at = time.monotonic()
                    stop_servers(but=role_name(role))
                continue
            if stopped_at is None and role.kind == "worker" and not any(r.kind == "worker" for r in pending.values()):
                stop_servers()  # every worker ended well: the servers' work is done
    finally:
        for actor in actors.values():
            ray.kill(actor)
        if started:
            ray.shutdown()
    return result
