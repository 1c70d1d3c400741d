"""Connections of the data plane: a server that serves a handler's methods, a client with calls in flight.

A connection starts with the client's hello (magic, version, the launch's token, the digest of the method
table); the server checks the token (``hmac.compare_digest``), the table, and on a Unix socket the peer's uid
(``SO_PEERCRED``), and answers with one byte. Then the client sends requests and the server, one thread per
connection, calls the handler's method and sends its reply (or the exception's type name and message). Any
frame that breaks the rules closes that connection, logged with the peer; the server goes on serving the others.
"""

from __future__ import annotations

import hmac
import itertools
import logging
import os
import secrets
import select
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Concatenate, Generic, Literal, ParamSpec, TypeVar, cast

from blockir.distributed.api import ParameterServerAPI
from blockir.distributed.wire.framing import (
    _ERROR,
    DEFAULT_LIMITS,
    MAGIC,
    VERSION,
    Codec,
    ConnectionLost,
    FrameError,
    Kind,
    Limits,
    Method,
    MethodTable,
    WireError,
    encode,
    encode_error,
    error_of,
    receive,
    send,
    set_stall,
)

log = logging.getLogger(__name__)

TOKEN_BYTES = 32
_HELLO = struct.Struct(f"<4sB{TOKEN_BYTES}s16s")  # magic, version, token, method table digest
_WELCOME = b"\x01"
_CREDENTIALS = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid
_SOCKET_BUFFER = 4 << 20
_WILDCARDS = {"", "0.0.0.0", "::", "0:0:0:0:0:0:0:0"}

P = ParamSpec("P")
R = TypeVar("R")


def new_token() -> bytes:
    """A random token for one launch: every connection presents it first."""
    return secrets.token_bytes(TOKEN_BYTES)


@dataclass(frozen=True)
class Address:
    """Where a server listens: ``unix`` (``path``; starting with a NUL byte: Linux's abstract namespace) or
    ``tcp`` (``host``, ``port``)."""

    kind: Literal["unix", "tcp"]
    path: str = ""
    host: str = ""
    port: int = 0

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix:{self.path.replace(chr(0), '@')}"
        return f"tcp:[{self.host}]:{self.port}" if ":" in self.host else f"tcp:{self.host}:{self.port}"

    def connect(self, timeout: float) -> socket.socket:
        if self.kind == "unix":
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = self.path
        else:
            family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            target = (self.host, self.port)
        _buffers(sock).settimeout(timeout)
        try:
            sock.connect(target)
        except BaseException:
            sock.close()
            raise
        return sock


def _buffers(sock: socket.socket) -> socket.socket:
    """Socket buffers that hold a megabyte or more (as far as the system allows: ``net.core.wmem_max``): a
    large frame crosses in fewer wake-ups."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _SOCKET_BUFFER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _SOCKET_BUFFER)
    return sock


def _check_token(token: bytes) -> bytes:
    if not isinstance(token, bytes) or len(token) != TOKEN_BYTES:
        raise WireError(f"a data-plane token is {TOKEN_BYTES} bytes (new_token() makes one)")
    return token


def _peer_uid(sock: socket.socket) -> tuple[int, int]:
    """The (pid, uid) of a Unix socket's peer."""
    pid, uid, _ = _CREDENTIALS.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    return pid, uid


def _recv_all(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            break
        data += chunk
    return data


def _kind(sock: socket.socket) -> Literal["unix", "tcp"]:
    """What a connected socket is, read from the socket itself."""
    return "unix" if sock.family == socket.AF_UNIX else "tcp"


def _end(address: Any) -> str:
    """A TCP end (``getsockname``, ``getpeername``) as ``host:port``."""
    return f"[{address[0]}]:{address[1]}" if ":" in address[0] else f"{address[0]}:{address[1]}"


def _remove_socket_dir(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)


class WireServer:
    """Serves ``handler``'s methods of ``interface`` to clients that present ``token``.

    Make one with :meth:`unix` or :meth:`tcp`; it serves from then on, until :meth:`close` (or the end of a
    ``with`` block). ``frame_timeout``: how long a frame may stall half way before the connection is closed
    as truncated, and the longest a reply may wait for the client to read it; ``handshake_timeout``: how long
    a new connection has to present the token; ``uid``: the uid a Unix socket's peer must have (this
    process's)."""

    def __init__(
        self,
        handler: object,
        token: bytes,
        listener: socket.socket,
        address: Address,
        *,
        interface: type = ParameterServerAPI,
        limits: Limits = DEFAULT_LIMITS,
        uid: int | None = None,
        frame_timeout: float = 60.0,
        handshake_timeout: float = 10.0,
        socket_dir: str | None = None,
    ) -> None:
        self.token = _check_token(token)
        self.table = MethodTable(interface)
        self._bound: dict[int, tuple[Method, Callable[..., Any]]] = {}
        for method in self.table.methods.values():
            bound = getattr(handler, method.name, None)
            if not callable(bound):
                raise WireError(f"{type(handler).__name__} has no method {method.name} of {interface.__name__}")
            self._bound[method.id] = (method, bound)
        self.address = address
        self.limits = limits
        self.uid = os.getuid() if uid is None else uid
        self.frame_timeout = frame_timeout
        self.handshake_timeout = handshake_timeout
        self._listener = listener
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._connections: dict[socket.socket, threading.Thread] = {}
        self._peers: dict[socket.socket, str] = {}  # the connections past the handshake, and who is at the other end
        self._cleanup = weakref.finalize(self, _remove_socket_dir, socket_dir) if socket_dir else None
        self._accepting = threading.Thread(target=self._accept, name=f"wire-accept {address}", daemon=True)
        self._accepting.start()

    @classmethod
    def unix(
        cls, handler: object, token: bytes, *, directory: str | None = None, abstract: bool | None = None, **kw: Any
    ) -> WireServer:
        """Listen on a Unix socket: in Linux's abstract namespace (the default on Linux: no file), or (with
        ``abstract=False``) as a file of mode 0600 in a new private directory (mode 0700) under ``directory``
        (the temporary directory by default), both removed when the server closes or the interpreter exits."""
        if not hasattr(socket, "SO_PEERCRED"):
            raise WireError("Unix sockets of the data plane need SO_PEERCRED (Linux); use WireServer.tcp")
        abstract = sys.platform.startswith("linux") if abstract is None else abstract
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        socket_dir = None
        try:
            if abstract:
                path = f"\0blockir-wire-{secrets.token_hex(16)}"
                listener.bind(path)
            else:
                socket_dir = tempfile.mkdtemp(prefix="blockir-wire-", dir=directory)
                path = os.path.join(socket_dir, "server.sock")
                listener.bind(path)
                os.chmod(path, 0o600)
            listener.listen(64)
            return cls(handler, token, listener, Address("unix", path=path), socket_dir=socket_dir, **kw)
        except BaseException:
            listener.close()
            if socket_dir:
                _remove_socket_dir(socket_dir)
            raise

    @classmethod
    def tcp(cls, handler: object, token: bytes, host: str, port: int = 0, **kw: Any) -> WireServer:
        """Listen on TCP at ``host`` (an address of this node: loopback, or the node's own; never every
        interface) and ``port`` (0: any free one)."""
        if host in _WILDCARDS:
            raise WireError(f"the data plane listens on this node's own address, not on every interface ({host!r})")
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            listener.bind((host, port))
            listener.listen(64)
            bound_host, bound_port = listener.getsockname()[:2]
            return cls(handler, token, listener, Address("tcp", host=bound_host, port=bound_port), **kw)
        except BaseException:
            listener.close()
            raise

    def __enter__(self) -> WireServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self, timeout: float = 5.0) -> None:
        """Stop listening, close every connection (removing the socket file) and wait up to ``timeout`` s for
        their threads (a method still running in one ends on its own)."""
        if self._closed.is_set():
            return
        self._closed.set()
        _shutdown(self._listener)
        self._listener.close()
        if self._cleanup is not None:
            self._cleanup()
        with self._lock:
            connections = dict(self._connections)
        for sock in connections:
            _shutdown(sock)
        self._accepting.join(timeout)
        for thread in connections.values():
            thread.join(timeout)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                sock, peer = self._listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                log.exception("data plane %s: accept failed", self.address)
                continue
            thread = threading.Thread(target=self._serve, args=(sock, peer), name=f"wire {self.address}", daemon=True)
            with self._lock:
                if self._closed.is_set():
                    sock.close()
                    return
                self._connections[sock] = thread
            thread.start()

    def connections(self) -> list[tuple[str, str]]:
        """The connections it serves (past the handshake): each one's kind, read from its socket, and its peer
        (``pid N`` on a Unix socket, from ``SO_PEERCRED``; ``host:port`` on TCP), as
        :meth:`WireClient.connections` names its own end."""
        with self._lock:
            return [(_kind(sock), peer) for sock, peer in self._peers.items()]

    def _describe(self, sock: socket.socket, peer: Any) -> tuple[str, str]:
        """The peer as :meth:`connections` names it (``pid N``, ``host:port``), and as the log does."""
        if self.address.kind == "unix":
            pid, uid = _peer_uid(sock)
            return f"pid {pid}", f"pid {pid} (uid {uid})"
        return _end(peer), _end(peer)

    def _handshake(self, sock: socket.socket) -> None:
        _buffers(sock).settimeout(self.handshake_timeout)
        if self.address.kind == "unix":
            _, uid = _peer_uid(sock)
            if uid != self.uid:
                raise FrameError(f"the peer's uid is {uid}, not {self.uid}")
        else:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            hello = _recv_all(sock, _HELLO.size)
        except TimeoutError:
            raise FrameError(f"no hello in {self.handshake_timeout:g} s") from None
        if len(hello) != _HELLO.size:
            raise FrameError(f"a hello of {len(hello)} bytes (expected {_HELLO.size})")
        magic, version, token, digest = _HELLO.unpack(hello)
        if magic != MAGIC or version != VERSION:
            raise FrameError(f"not a client of this data plane (magic {magic!r}, version {version})")
        if not hmac.compare_digest(token, self.token):
            raise FrameError("wrong token")
        if digest != self.table.digest:
            raise FrameError(f"another method table than {self.table.interface.__name__}'s (another version?)")
        sock.sendall(_WELCOME)

    def _lookup(self, kind: int, method_id: int, request: int) -> tuple[Method, Codec]:
        if kind != Kind.REQUEST:
            raise FrameError(f"a frame of kind {kind} where requests come")
        entry = self._bound.get(method_id)
        if entry is None:
            raise FrameError(f"unknown method id {method_id}")
        return entry[0], entry[0].params

    def _serve(self, sock: socket.socket, peer: Any) -> None:
        who = f"{peer}"
        try:
            name, who = self._describe(sock, peer)
            self._handshake(sock)
            with self._lock:
                self._peers[sock] = name
            set_stall(sock, self.frame_timeout)
            while True:
                frame = receive(sock, self.limits, self._lookup)
                if frame is None:
                    return
                _, method, request, args = frame
                call = self._bound[method.id][1]
                try:
                    result = call(*args)
                    buffers = encode(Kind.REPLY, method.id, request, method.result, result, self.limits)
                except Exception as e:  # the method's error (or its result's), for the caller
                    buffers = encode_error(method, request, e, self.limits)
                send(sock, buffers)
        except FrameError as e:
            log.warning("data plane %s: closed the connection from %s: %s", self.address, who, e)
        except OSError as e:
            if not self._closed.is_set():
                log.info("data plane %s: the connection from %s failed: %s", self.address, who, e)
        except Exception:  # a bug: still only this connection ends
            log.exception("data plane %s: closed the connection from %s", self.address, who)
        finally:
            sock.close()
            with self._lock:
                self._connections.pop(sock, None)
                self._peers.pop(sock, None)


def _shutdown(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # not connected, or already closed


class Pending(Generic[R]):
    """A call in flight (what :meth:`WireClient.submit` returns): :meth:`result` waits for its result, reading
    the reply off the connection on the calling thread (:class:`_Connection`), and raises what the call failed
    with (:class:`ConnectionLost`, :class:`RemoteError`)."""

    __slots__ = ("connection", "ready", "value", "error")

    def __init__(self) -> None:
        self.connection: _Connection | None = None
        self.ready = False  # set once, after value or error
        self.value: Any = None
        self.error: BaseException | None = None

    def done(self) -> bool:
        """Whether its result (or its failure) has come."""
        return self.ready

    def result(self, timeout: float | None = None) -> R:
        """The result, waiting up to ``timeout`` s (None: as long as it takes) for the reply to start coming:
        TimeoutError after that, the call still in flight."""
        if not self.ready and self.connection is not None:
            self.connection.wait(self, timeout)
        if self.error is not None:
            raise self.error
        return cast(R, self.value)

    def _finish(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value, self.error = value, error
        self.ready = True


class _Connection:
    """One connection of a client: its socket and the calls in flight on it.

    Replies are read by the threads waiting for them, one at a time: the first to wait takes the turn and reads
    frames, handing each to its call (request id), until its own has come; then the next waiting thread takes
    the turn. With one call in flight, the caller reads its own reply: no thread of the connection's own, no
    hand-off. A reply nobody waits for yet stays in the socket until a later reader comes by it. A failure while
    reading (a bad frame, a socket error, the server gone) fails every call in flight on the connection."""

    def __init__(self, client: WireClient, sock: socket.socket) -> None:
        self.client = client
        self.sock = sock
        self.send_lock = threading.Lock()
        self.pending: dict[int, tuple[Pending, Method]] = {}
        self.failure: ConnectionLost | None = None
        self.turn_lock = threading.Lock()  # guards `reading` and the waiting on `turn`
        self.turn = threading.Condition(self.turn_lock)  # notified when a call is done or the turn is free
        self.reading = False
        self.waiting = 0  # threads waiting on `turn` (none: nobody to notify, the common case of one call)

    def _lookup(self, kind: int, method_id: int, request: int) -> tuple[Method, Codec]:
        with self.client._lock:
            entry = self.pending.get(request)
        if entry is None:
            raise FrameError(f"a reply to request {request}, which is not in flight")
        method = entry[1]
        if method_id != method.id or kind == Kind.REQUEST:
            raise FrameError(
                f"request {request} ({method.name}) answered by a frame of kind {kind}, method {method_id}"
            )
        return method, method.result if kind == Kind.REPLY else _ERROR

    def wait(self, call: Pending, timeout: float | None) -> None:
        """Until ``call`` is done: read frames on this thread when no other thread is reading, else wait for
        the one that is. ``timeout``: the longest to wait for the turn and for a reply to start coming (a frame
        that has started is read to its end); TimeoutError after it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.turn_lock:
            while not call.ready and self.reading:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no reply from {self.client.address} within {timeout:g} s")
                self.waiting += 1
                try:
                    self.turn.wait(left)
                finally:
                    self.waiting -= 1
            if call.ready:
                return
            self.reading = True
        try:
            while not call.ready:
                if deadline is not None and not _readable(self.sock, deadline - time.monotonic()):
                    raise TimeoutError(f"no reply from {self.client.address} within {timeout:g} s")
                self._read_one(call)
        except TimeoutError:
            raise
        except BaseException as e:  # a bad frame, a socket error, the end: every call in flight fails, none hangs
            self.fail(e)
            if not isinstance(e, Exception):
                raise
        finally:
            with self.turn_lock:
                self.reading = False
                if self.waiting:
                    self.turn.notify_all()

    def _read_one(self, mine: Pending) -> None:
        """Read the next frame and complete its call (waking the threads waiting when it is not ``mine``)."""
        frame = receive(self.sock, self.client.limits, self._lookup)
        if frame is None:
            raise ConnectionLost(f"the server at {self.client.address} closed the connection")
        kind, method, request, value = frame
        with self.client._lock:
            call = self.pending.pop(request)[0]
        if kind == Kind.REPLY:
            call._finish(value)
        else:
            call._finish(error=error_of(method, value))
        if call is not mine:
            with self.turn_lock:
                if self.waiting:
                    self.turn.notify_all()

    def fail(self, cause: BaseException) -> None:
        """The connection is broken: every call in flight on it fails with :class:`ConnectionLost`."""
        with self.client._lock:
            if self.failure is None:
                lost = cause if isinstance(cause, ConnectionLost) else None
                self.failure = lost or ConnectionLost(
                    f"the connection to {self.client.address} failed: {cause}", self.client.address
                )
                self.failure.address = self.client.address
            pending, self.pending = self.pending, {}
        _shutdown(self.sock)
        for call, _ in pending.values():
            call._finish(error=self.failure)
        with self.turn_lock:
            self.turn.notify_all()

    def send(self, buffers: list[Any]) -> None:
        try:
            with self.send_lock:
                send(self.sock, buffers)
        except OSError as e:
            self.fail(e)


def _readable(sock: socket.socket, seconds: float) -> bool:
    """Whether ``sock`` has bytes to read (or its end) within ``seconds``."""
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    return bool(poller.poll(max(0, int(seconds * 1000))))


class WireClient:
    """Calls the methods of ``interface`` on the server at ``address``, presenting ``token``.

    ``submit(ParameterServerAPI.push, worker, dense, sparse)`` sends the request and returns the call in flight
    (:class:`Pending`), so several calls can be in flight (from any threads); a call goes to a connection with
    nothing in flight, opening up to ``pool_size`` of them, else to the least busy. A call's ``result()`` reads
    its reply on the calling thread (:class:`_Connection`). A connection that fails fails its calls with
    :class:`ConnectionLost`; the next call opens a new one. A method that raised on the server fails its call
    with :class:`RemoteError`."""

    def __init__(
        self,
        address: Address,
        token: bytes,
        *,
        interface: type = ParameterServerAPI,
        pool_size: int = 2,
        limits: Limits = DEFAULT_LIMITS,
        connect_timeout: float = 10.0,
        uid: int | None = None,
    ) -> None:
        if pool_size < 1:
            raise WireError(f"pool_size must be at least 1, got {pool_size}")
        self.address = address
        self.token = _check_token(token)
        self.table = MethodTable(interface)
        self.pool_size = pool_size
        self.limits = limits
        self.connect_timeout = connect_timeout
        self.uid = os.getuid() if uid is None else uid
        self._lock = threading.Lock()
        self._connections: list[_Connection] = []
        self._requests = itertools.count(1)
        self._closed = False

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def submit(self, method: Callable[Concatenate[Any, P], R], *args: P.args, **kwargs: P.kwargs) -> Pending[R]:
        """Call ``method`` (a method of the interface, e.g. ``ParameterServerAPI.pull_dense``) on the server."""
        spec = self.table.by_function.get(method)
        if spec is None:
            raise WireError(f"{getattr(method, '__qualname__', method)!r} is not a method of {self.table.interface}")
        values = spec.arguments(args, kwargs)
        request = next(self._requests)
        buffers = encode(Kind.REQUEST, spec.id, request, spec.params, values, self.limits)
        call: Pending[R] = Pending()
        try:
            connection = self._register(request, call, spec)
        except (OSError, WireError) as e:
            lost = e if isinstance(e, ConnectionLost) else ConnectionLost(f"cannot connect to {self.address}: {e}")
            lost.address = self.address
            call._finish(error=lost)
            return call
        connection.send(buffers)
        return call

    def connections(self) -> list[tuple[str, str]]:
        """Its open connections: each one's kind, read from its socket, and this end as the server names its
        peer (``pid N`` on a Unix socket, ``host:port`` on TCP: :meth:`WireServer.connections`)."""
        with self._lock:
            live = [c.sock for c in self._connections if c.failure is None]
        return [
            (_kind(sock), f"pid {os.getpid()}" if _kind(sock) == "unix" else _end(sock.getsockname())) for sock in live
        ]

    def _register(self, request: int, call: Pending, method: Method) -> _Connection:
        with self._lock:
            if self._closed:
                raise ConnectionLost(f"the client of {self.address} is closed", self.address)
            live = [c for c in self._connections if c.failure is None]
            self._connections = live
            chosen = next((c for c in live if not c.pending), None)
            if chosen is None and len(live) < self.pool_size:
                chosen = _Connection(self, self._connect())
                live.append(chosen)
            if chosen is None:
                chosen = min(live, key=lambda c: len(c.pending))
            chosen.pending[request] = (call, method)
            call.connection = chosen
            return chosen

    def _connect(self) -> socket.socket:
        sock = self.address.connect(self.connect_timeout)
        try:
            if self.address.kind == "unix":
                _, uid = _peer_uid(sock)
                if uid != self.uid:
                    raise ConnectionLost(f"the server at {self.address} runs as uid {uid}, not {self.uid}")
            try:
                sock.sendall(_HELLO.pack(MAGIC, VERSION, self.token, self.table.digest))
                welcome, why = _recv_all(sock, len(_WELCOME)), ""
            except OSError as e:
                welcome, why = b"", f" ({e})"
            if welcome != _WELCOME:
                raise ConnectionLost(
                    f"the server at {self.address} closed the connection at the handshake{why}: a wrong token, "
                    "another method table or another uid (its log says which)"
                )
            sock.settimeout(None)
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        """Close every connection; calls still in flight fail with :class:`ConnectionLost`."""
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, []
        for c in connections:
            c.fail(ConnectionLost(f"the client of {self.address} was closed", self.address))
            c.sock.close()
