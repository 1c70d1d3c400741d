"""The Ray backend (the ``ray`` extra): every role a Ray actor, the servers reached through theirs.

``blockir launch --backend ray`` (:func:`launch_ray`) starts a local Ray
cluster (node address 127.0.0.1, no dashboard, usage statistics off, Ray's
token authentication on with a token of the launch's:
:func:`blockir.distributed.launch.cluster_env`), or joins the one at
``--address`` on that cluster's terms, and runs each
role as a ``RoleActor`` named ``blockir-RUN-ROLE-INDEX`` (namespace
``blockir``): its ``run`` method runs the script with the role in the
environment; the parameter server the script published in that actor's process
(:class:`RayBackend`.serve publishes it there as the in-process backend does)
answers the workers over the data plane (:mod:`blockir.distributed.wire`): the
actor's ``endpoint`` method opens a listener for it (a Unix socket in the
abstract namespace for workers on its Ray node, TCP on the node's address for
the others) and gives its address, and a worker's :class:`RayHandle` sends the
methods of :class:`~blockir.distributed.api.ParameterServerAPI` there with the
launch's token, which the launcher made and gave every actor through Ray. The
control calls (:class:`~blockir.distributed.api.ServerControl`: writing a
save's shards, a restart's incarnation) are the actor's methods of the same
names, which the actor runs on a thread pool, so a server answers while its
script waits in ``run_server``. Nothing is pickled from a user's file
or from the data plane. What a role prints (``sys.stdout`` and ``sys.stderr`` of its
actor's process) is kept by the actor line by line; the launcher fetches the
lines (the actor's ``output`` method) while the roles run and once more when
each ends, and prints them with the role in front (``[worker 0] ...``), so every
line reaches it before it exits, and only with its own prefix (output below
Python, a C library's or a child process's, still reaches it through Ray's log
forwarding, with Ray's prefix).

A role whose ``run`` failed is run again when it may be restarted
(:func:`blockir.distributed.role.restartable`): its actor is made with Ray's
``max_restarts``, so a process that died (killed, say) is started again by Ray,
and the launcher calls ``run`` once more with the role's ``restart`` count one
higher. A call to a server whose process died or that is not serving raises
:class:`~blockir.distributed.api.ServerLost` in the worker (``final``
when Ray will not restart it: a data-plane connection lost is never final, and
the communicator's control call that follows, ``incarnation``, says whether the
actor comes back; once it does, the handle asks it for the new address). Once
every worker ended, the servers are stopped (a restarted server does not know
who finished before it came back).

While Ray restarts an actor, calls to it fail (``ActorUnavailableError``): the
launcher waits until the actor answers again before it runs the role in it
once more (at most the role's ``timeout``), and a worker looking for a server
being restarted keeps looking.

When a role fails for good, :func:`launch_ray` stops the servers, waits for the other
roles (they fail or end; those still running after :data:`STOP_GRACE_S`, a
worker waiting for a server that never started, say, are counted as stopped),
kills every actor it made, and shuts the cluster down if it started it. A
cluster it started lives in a ``blockir-ray-*`` directory of the system's
temporary directory (its session files and logs), removed however the launch
ends (Ctrl-C, SIGTERM and SIGHUP included: :class:`_Signals`) unless
``keep_logs``, when the launcher says where it is.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

import ray

from blockir.distributed.api import ParameterServerAPI, Reply, ServerControl, ServerHandle, ServerLost
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.role import LaunchResult, Role, restartable, role_name
from blockir.distributed.runner import error_line, restarting, run_once
from blockir.distributed.server import ParameterServer
from blockir.distributed.wire import (
    Address,
    ConnectionLost,
    MethodTable,
    RemoteError,
    WireClient,
    WireServer,
    new_token,
)
from blockir.errors import BlockirError

__all__ = ["NAMESPACE", "RayBackend", "RayHandle", "RoleActor", "launch_ray", "loopback_env"]

NAMESPACE = "blockir"
STOP_GRACE_S = 10.0  # after a role failed and the servers were stopped: how long the others get to end
POLL_S = 0.25  # how often the launcher fetches the roles' output while it waits for them
OUTPUT_WAIT_S = 10.0  # how long it waits for a role's last lines (the role ended, or the launch ends)


def actor_name(role: Role) -> str:
    return f"blockir-{role.run}-{role.kind}-{role.index}"


def loopback_env() -> dict[str, str]:
    """The environment of the tests and benchmarks that start a Ray cluster inside a loopback-only network
    namespace (``docs/distributed.md``, *Ray on one machine*): quiet, its token authentication off (nothing
    outside the namespace reaches it), proxies pointing nowhere. Not for a cluster anyone else can reach:
    ``blockir launch`` starts its own with :func:`blockir.distributed.launch.cluster_env`."""
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


_WIRE_METHODS = MethodTable(ParameterServerAPI).by_function
P = ParamSpec("P")
R = TypeVar("R")
WIRE_POOL = 4  # connections per (worker, server): the communicator thread, prefetches and a training thread's calls


class _WireFuture:
    """A call over the data plane: its result, or its failure as a Ray call's would be (:class:`_RayFuture`)."""

    def __init__(self, handle: RayHandle, client: WireClient | None, future: Reply[Any]) -> None:
        self.handle = handle
        self.client = client
        self.future = future

    def result(self) -> Any:
        try:
            return self.future.result()
        except ConnectionLost as e:  # the server's process died, or its listener went: Ray's control calls say which
            if self.client is not None:
                self.handle.lost(self.client)
            raise ServerLost(f"parameter server {self.handle.index}: {e}") from None
        except RemoteError as e:
            raise (ServerLost(e.message) if e.kind == ServerLost.__name__ else BlockirError(e.message)) from None


class RayHandle(ServerHandle):
    """A server reached through its role's actor: ``submit`` sends the methods of
    :class:`~blockir.distributed.api.ParameterServerAPI` over the data plane (a :class:`WireClient` to the address
    the actor gives, presenting the launch's ``token``), and calls those of
    :class:`~blockir.distributed.api.ServerControl` (saving, a restart's incarnation) through the actor. A
    connection lost is a :class:`ServerLost` that is never final: the communicator then asks the actor (a Ray
    call), which says whether the server comes back, and the next call asks the actor for the address again (a
    restarted server listens on another)."""

    def __init__(self, actor: Any, run: str, index: int, token: bytes) -> None:
        self.actor = actor
        self.run = run
        self.index = index
        self.token = token
        self.node = ray.get_runtime_context().get_node_id()
        self._client: WireClient | None = None
        self._lock = threading.Lock()

    def submit(
        self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs
    ) -> _RayFuture | _WireFuture:
        if method is ServerControl.incarnation:
            return _RayFuture(self.actor.incarnation.remote(self.run, self.index))
        if method is ServerControl.save_shards:
            return _RayFuture(self.actor.save_shards.remote(self.run, self.index, *args, **kwargs))
        if method not in _WIRE_METHODS:
            raise BlockirError(f"{method!r} is not a method of ParameterServerAPI or ServerControl")
        try:
            client = self._connected()
        except ServerLost as e:
            failed: Future = Future()
            failed.set_exception(e)
            return _WireFuture(self, None, failed)
        return _WireFuture(self, client, client.submit(method, *args, **kwargs))

    def _connected(self) -> WireClient:
        with self._lock:
            if self._client is None:
                address = _RayFuture(self.actor.endpoint.remote(self.run, self.index, self.node)).result()
                self._client = WireClient(address, self.token, pool_size=WIRE_POOL)
            return self._client

    def connections(self) -> list[tuple[str, str]]:
        """This handle's data-plane connections (:meth:`WireClient.connections`: each one's kind and this end)."""
        with self._lock:
            client = self._client
        return [] if client is None else client.connections()

    def lost(self, client: WireClient) -> None:
        """``client``'s connection failed: the next call asks the actor for the server's address again."""
        with self._lock:
            if self._client is client:
                self._client = None
        client.close()

    def close(self) -> None:
        """Close the connections to the server (the actor belongs to its role)."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class RayBackend:
    """Servers published in the actor processes of a Ray cluster (module docstring): ``registry``, this process's
    (a role actor's, where its actor answers for the server it publishes); ``token``, the launch's data-plane token
    (None outside the launcher's actors: no handles then)."""

    def __init__(self, registry: InProcessBackend | None = None, token: bytes | None = None) -> None:
        self.registry = InProcessBackend() if registry is None else registry
        self.token = token

    def serve(self, run: str, index: int, server: ParameterServer) -> None:
        self.registry.serve(run, index, server)

    def handles(self, run: str, servers: int, timeout: float) -> list[RayHandle]:
        if self.token is None:
            raise BlockirError("the Ray backend's roles run in the actors blockir launch makes (no data-plane token)")
        deadline = time.monotonic() + timeout
        handles: list[RayHandle] = []
        for k in range(servers):
            name = f"blockir-{run}-server-{k}"
            while (actor := _serving(name, run, k)) is None:
                if time.monotonic() > deadline:
                    raise BlockirError(f"parameter server {k} of run {run!r} did not start within {timeout:g} s")
                time.sleep(0.05)
            handles.append(RayHandle(actor, run, k, self.token))
        return handles

    def unpublish(self, run: str, index: int) -> None:
        self.registry.unpublish(run, index)


def _published(registry: InProcessBackend, run: str, index: int) -> ParameterServer:
    """Server ``index`` of ``run``, published in ``registry``; ServerLost when it is not."""
    server = registry.published(run, index)
    if server is None:
        raise ServerLost(f"parameter server {index} of run {run!r} is not serving")
    return server


class _Published:
    """The handler of a role actor's data plane: each call of a method of
    :class:`~blockir.distributed.api.ParameterServerAPI` (the wire's table names it) goes to the server published
    in this process when it comes (a server restarted in the same process included), or raises ServerLost, as the
    actor's control calls do."""

    def __init__(self, registry: InProcessBackend, run: str, index: int) -> None:
        self.registry = registry
        self.run = run
        self.index = index

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in _WIRE_NAMES:
            raise AttributeError(method)

        def call(*args: Any) -> Any:
            return getattr(_published(self.registry, self.run, self.index), method)(*args)

        return call


_WIRE_NAMES = frozenset(method.name for method in _WIRE_METHODS.values())


def _serving(name: str, run: str, index: int) -> Any:
    """The actor of server ``index`` of ``run`` once its server is published; None before (before the actor
    exists, or while Ray restarts it)."""
    try:
        actor = ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:  # not made yet
        return None
    try:
        return actor if ray.get(actor.serving.remote(run, index)) else None
    except ray.exceptions.ActorUnavailableError:  # being restarted: it may serve soon
        return None


_RAY_MARKERS = (":actor_name:", ":task_name:", ":job_id:")  # lines Ray's log monitor reads from a worker's output


class _Lines(io.TextIOBase):
    """One of an actor's streams (``stdout`` or ``stderr``): each whole line written is kept in ``lines``, with
    the stream's name, for the launcher (:meth:`_RoleActor.output`); Ray's own marker lines go on to ``ray``."""

    def __init__(self, stream: str, lines: list[tuple[str, str]], lock: threading.Lock, ray_stream: Any) -> None:
        self.stream = stream
        self.lines = lines
        self.lock = lock
        self.ray_stream = ray_stream
        self.partial = ""

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        with self.lock:
            *whole, self.partial = (self.partial + text).split("\n")
            for line in whole:
                if line.startswith(_RAY_MARKERS):
                    self.ray_stream.write(line + "\n")
                else:
                    self.lines.append((self.stream, line))
        return len(text)

    def end_line(self) -> None:
        """Keep the unfinished line too (the role's run ended)."""
        with self.lock:
            if self.partial:
                self.lines.append((self.stream, self.partial))
                self.partial = ""


class _RoleActor:
    """One role of a run: runs the script (:meth:`run`), keeps what it prints (:meth:`output`), answers its
    server's control calls (:meth:`incarnation`, :meth:`save_shards`) and gives the address of its data plane
    (:meth:`endpoint`). ``token``: the launch's data-plane token, from the launcher through Ray (Ray keeps it for a
    restarted actor)."""

    def __init__(self, name: str, token: bytes) -> None:
        self.name = name
        self.token = token
        self.backend = RayBackend(InProcessBackend(), token)  # the process's: the role's script publishes there
        self._listeners: dict[tuple[str, int, str], WireServer] = {}
        self._listening = threading.Lock()
        self._lines: list[tuple[str, str]] = []
        lock = threading.Lock()
        self._streams = [
            _Lines("stdout", self._lines, lock, sys.stdout),
            _Lines("stderr", self._lines, lock, sys.stderr),
        ]
        self._lock = lock
        sys.stdout, sys.stderr = self._streams  # the process is the role's: all it prints is the role's

    def __repr__(self) -> str:  # Ray prefixes the output it forwards with it
        return self.name

    def ping(self) -> bool:
        """Answers once the actor is up (after Ray restarted it, say)."""
        return True

    def output(self) -> list[tuple[str, str]]:
        """The lines printed since the last call: (``stdout`` or ``stderr``, the line)."""
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        return lines

    def run(self, script: str, source: bytes, role: Role, args: list[str], verbose: bool = False) -> str | None:
        """Run the script as ``role``: None when it ended well, else its failure's line
        (:func:`blockir.distributed.runner.run_once`)."""
        os.environ.update(role.env())
        try:
            path = Path(script)
            if path.is_file() and path.read_bytes() == source:
                return run_once(path, role, self.backend, args, verbose)
            with tempfile.TemporaryDirectory() as where:  # another machine: the script's copy
                path = Path(where) / path.name
                path.write_bytes(source)
                return run_once(path, role, self.backend, args, verbose)
        finally:
            for stream in self._streams:
                stream.end_line()

    def serving(self, run: str, index: int) -> bool:
        return self.backend.registry.published(run, index) is not None

    def stop(self, run: str, index: int) -> None:
        """Stop the server of this actor, if it serves."""
        server = self.backend.registry.published(run, index)
        if server is not None:
            server.stop()

    def incarnation(self, run: str, index: int) -> dict[str, Any]:
        """:meth:`ParameterServer.incarnation` of server ``index`` of ``run``, if this actor serves it."""
        return _published(self.backend.registry, run, index).incarnation()

    def save_shards(self, run: str, index: int, directory: str, delta: bool = False) -> dict[str, dict[str, Any]]:
        """:meth:`ParameterServer.save_shards` of server ``index`` of ``run``, if this actor serves it."""
        return _published(self.backend.registry, run, index).save_shards(directory, delta)

    def data_plane(self, run: str, index: int) -> dict[str, Any]:
        """This actor's Ray ``node`` and the ``connections`` its listeners for server ``index`` of ``run`` serve
        (:meth:`WireServer.connections`: each one's kind and peer)."""
        with self._listening:
            listeners = [w for (r, k, _), w in self._listeners.items() if (r, k) == (run, index)]
        found = [list(c) for listener in listeners for c in listener.connections()]
        return {"node": ray.get_runtime_context().get_node_id(), "connections": found}

    def endpoint(self, run: str, index: int, node: str) -> Address:
        """Where a worker on Ray node ``node`` reaches server ``index`` of ``run`` over the data plane: a Unix
        socket (abstract namespace) from this node, TCP on this node's address from another. Each listener is
        opened on the first ask and serves while the actor lives (a restarted process opens new ones)."""
        if self.backend.registry.published(run, index) is None:
            raise ServerLost(f"parameter server {index} of run {run!r} is not serving")
        kind = "unix" if node == ray.get_runtime_context().get_node_id() else "tcp"
        with self._listening:
            listener = self._listeners.get((run, index, kind))
            if listener is None:
                handler = _Published(self.backend.registry, run, index)
                listener = (
                    WireServer.unix(handler, self.token)
                    if kind == "unix"
                    else WireServer.tcp(handler, self.token, ray.util.get_node_ip_address())  # type: ignore[no-untyped-call]
                )
                self._listeners[(run, index, kind)] = listener
        return listener.address


RoleActor: Any = cast(Any, ray.remote)(max_concurrency=64)(_RoleActor)


def launch_ray(
    script: str | Path | Callable[[], Any],
    roles: list[Role],
    args: list[str],
    address: str | None,
    max_restarts: int,
    verbose: bool = False,
    keep_logs: bool = False,
    resources: Mapping[str, Mapping[str, float]] | None = None,
) -> LaunchResult:
    """Run every role as a :class:`RoleActor` (module docstring); how they ended. ``resources``: the Ray
    resources a role's actor needs, by role name (``server 0``), which places it on the nodes that have them."""
    resources = resources or {}
    if callable(script):
        raise BlockirError("launch: the ray backend runs script files, not callables")
    source = Path(script).read_bytes()
    if ray.is_initialized():  # a cluster this process joined already (the tests' driver)
        return _run_roles(str(script), source, roles, args, max_restarts, verbose, lambda: None, resources)
    signals = _Signals()
    signals.install()
    where: str | None = None  # the directory of a cluster this launch starts
    try:
        if address is not None:
            ray.init(address=address, namespace=NAMESPACE, log_to_driver=True)
        else:
            where = tempfile.mkdtemp(prefix="blockir-ray-")
            ray.init(  # with the environment launch() gave it before Ray was imported: cluster_env
                num_cpus=max(2, os.cpu_count() or 2),
                include_dashboard=False,
                _node_ip_address="127.0.0.1",
                _temp_dir=where,
                namespace=NAMESPACE,
                log_to_driver=True,
            )
        try:
            signals.install()  # again: ray.init set its own SIGTERM handler
            return _run_roles(str(script), source, roles, args, max_restarts, verbose, signals.check, resources)
        finally:
            ray.shutdown()
    finally:
        if where is not None and keep_logs:
            print(f"blockir launch: the Ray cluster's session files (its logs) are in {where}", file=sys.stderr)
        elif where is not None:
            _remove(where)
        signals.restore()  # and, after a signal, delivered to the handler it had


def _remove(where: str) -> None:
    """Remove the cluster's directory; its processes may still be writing in it as they end."""
    for _ in range(50):
        shutil.rmtree(where, ignore_errors=True)
        if not os.path.lexists(where):
            return
        time.sleep(0.1)
    print(f"blockir launch: could not remove the Ray cluster's directory {where}", file=sys.stderr)


class _Signalled(BaseException):
    """SIGTERM, SIGHUP or SIGINT reached the launcher while it held a cluster (:class:`_Signals`)."""


class _Signals:
    """SIGTERM, SIGHUP and SIGINT while the launcher holds a cluster: noted by a handler (:meth:`install`) and
    raised as :class:`_Signalled` where the launcher waits (:meth:`check`), never inside Ray's own calls, so that
    its ``finally`` blocks stop the cluster and remove its directory; then :meth:`restore` puts the handlers back
    and delivers the signal to them (SIGINT as ``KeyboardInterrupt``)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self) -> None:
        self.got: int | None = None
        self.saved: dict[int, Any] = {}

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in self.SIGNALS:
            self.saved.setdefault(sig, signal.getsignal(sig))
            if self.saved[sig] != signal.SIG_IGN:  # a background job's SIGINT stays ignored
                signal.signal(sig, self._note)

    def _note(self, signum: int, _frame: Any) -> None:
        if self.got is None:
            self.got = signum

    def check(self) -> None:
        if self.got is not None:
            raise _Signalled(self.got)

    def restore(self) -> None:
        for sig, previous in self.saved.items():
            signal.signal(sig, previous)
        if self.got is None:
            return
        if self.got != signal.SIGINT:
            signal.raise_signal(self.got)  # its previous handler: by default, the process ends killed by it
        raise KeyboardInterrupt(signal.Signals(self.got).name) from None


def _run_roles(
    script: str,
    source: bytes,
    roles: list[Role],
    args: list[str],
    max_restarts: int,
    verbose: bool,
    check: Callable[[], None],
    resources: Mapping[str, Mapping[str, float]],
) -> Any:
    """Run the roles on the cluster this process is connected to (module docstring); ``check`` raises when the
    launcher is to stop (a signal); ``resources``: :func:`launch_ray`'s."""
    actors: dict[str, Any] = {}
    outputs: dict[str, Any] = {}  # role -> its output call not yet answered
    token = new_token()  # the data plane's, for this launch: to the roles through Ray only
    result = LaunchResult()

    def drain(name: str, final: bool = False) -> None:
        """Print what role ``name`` printed, with the role in front: what an earlier call fetched, if it is back;
        ``final`` (the role's run ended): all of it, waiting for it."""
        while True:
            ref, fresh = outputs.pop(name, None), False
            if ref is None:
                ref, fresh = actors[name].output.remote(), True
            ready, _ = ray.wait([ref], timeout=OUTPUT_WAIT_S if final else 0)
            if not ready:
                if not final:
                    outputs[name] = ref
                return
            try:
                lines = ray.get(ref)
            except ray.exceptions.RayError:  # its process died (or is being restarted): its lines went with it
                return
            for stream, line in lines:
                print(f"[{name}] {line}", file=sys.stdout if stream == "stdout" else sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            if fresh or not final:
                return

    def start(role: Role) -> Any:
        if role.restart:  # Ray may still be restarting its actor's process: calls to it fail until it is up
            _wait_up(actors[role_name(role)], role.timeout, check)
        return actors[role_name(role)].run.remote(script, source, role, args, verbose)

    def stop_servers(but: str | None = None) -> None:
        for other in roles:
            if other.kind == "server" and role_name(other) != but:
                actors[role_name(other)].stop.remote(other.run, other.index)

    try:
        for role in roles:
            restarts = max_restarts if restartable(role, max_restarts) else 0  # Ray starts a dead process again
            actors[role_name(role)] = RoleActor.options(
                name=actor_name(role),
                namespace=NAMESPACE,
                num_cpus=0,
                max_restarts=restarts,
                resources=dict(resources.get(role_name(role), {})),
            ).remote(role_name(role), token)
        pending = {start(r): r for r in roles}
        stopped_at: float | None = None  # when the first failure stopped the servers
        while pending:
            check()
            done, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_S)
            if not done:
                for name in actors:
                    drain(name)
                if stopped_at is not None and time.monotonic() - stopped_at > STOP_GRACE_S:
                    first = next(iter(result.failures))
                    for role in pending.values():  # still waiting on something that will not come
                        result.failures[role_name(role)] = f"stopped {STOP_GRACE_S:g} s after {first} failed"
                    break
                continue
            role = pending.pop(done[0])
            drain(role_name(role), final=True)
            try:
                error = ray.get(done[0])
            except ray.exceptions.RayError as e:  # its process died (killed, say), or Ray could not run it
                cause = getattr(e, "cause", None) or e
                text = str(cause).strip().splitlines()
                error = f"{type(cause).__name__}: {text[0] if text else ''}"
            if error is not None and stopped_at is None and restartable(role, max_restarts):
                role = restarting(result, role, error, max_restarts)
                try:
                    pending[start(role)] = role
                    continue
                except (BlockirError, ray.exceptions.RayError) as e:
                    error = f"could not be restarted: {error_line(e)}"
            if error is not None:
                result.failures[role_name(role)] = error
                if stopped_at is None:
                    stopped_at = time.monotonic()
                    stop_servers(but=role_name(role))
                continue
            if stopped_at is None and role.kind == "worker" and not any(r.kind == "worker" for r in pending.values()):
                stop_servers()  # every worker ended well: the servers' work is done
    finally:
        for name in actors:
            drain(name, final=True)
        for actor in actors.values():
            ray.kill(actor)
    return result


def _wait_up(actor: Any, timeout: float, check: Callable[[], None]) -> None:
    """Wait until ``actor`` answers (Ray restarted its process), at most ``timeout`` s; ActorDiedError when it
    will not come back."""
    deadline = time.monotonic() + timeout
    while True:
        check()
        try:
            ray.get(actor.ping.remote(), timeout=max(1.0, deadline - time.monotonic()))
            return
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            if time.monotonic() > deadline:
                raise BlockirError(f"its actor did not come back within {timeout:g} s") from None
            time.sleep(0.1)
