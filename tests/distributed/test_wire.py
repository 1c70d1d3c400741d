"""The data plane's frames and connections (``blockir.distributed.wire``), without Ray: arrays of every dtype and
shape round-trip; a peer that breaks a rule (a wrong token, an oversize header, random bytes, a truncated frame,
an unknown method, a wrong dtype, ...) loses its connection, logged with the peer, while the server goes on
answering everyone else; calls in flight from many threads; listeners on loopback only; the Unix peer's uid;
socket files removed."""

from __future__ import annotations

import inspect
import logging
import os
import socket
import stat
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from blockir.distributed.api import Ids, ParameterServerAPI, Rows
from blockir.distributed.server import ParameterServer
from blockir.distributed.wire import (
    Address,
    ConnectionLost,
    FrameError,
    Limits,
    MethodTable,
    Pending,
    RemoteError,
    WireClient,
    WireError,
    WireServer,
    framing,
    new_token,
)
from blockir.distributed.wire.framing import WIRE_DTYPES, send
from blockir.errors import BlockirError
from tests.distributed.test_server import TABLE, _split

PS_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]
DTYPES = [*PS_DTYPES, "complex64", "complex128"]


class EchoAPI(Protocol):
    def echo(
        self, arrays: dict[str, np.ndarray], pair: tuple[Ids, Rows], names: list[str], n: int, x: float, flag: bool
    ) -> tuple[dict[str, np.ndarray], tuple[Ids, Rows], list[str], int, float, bool]: ...

    def rows(self, ids: Ids, dim: int) -> Rows: ...

    def wait(self, seconds: float) -> None: ...

    def fail(self, message: str, times: int = 1) -> int: ...


class Echo:
    def __init__(self) -> None:
        self.release = threading.Event()

    def echo(self, *args: object) -> tuple[object, ...]:
        return args

    def rows(self, ids: np.ndarray, dim: int) -> np.ndarray:
        return np.repeat(ids.astype(np.float32)[:, None], dim, axis=1)

    def wait(self, seconds: float) -> None:
        self.release.wait(seconds)

    def fail(self, message: str, times: int = 1) -> int:
        raise BlockirError(message * times)


TABLE_OF_ECHO = MethodTable(EchoAPI)
ROWS = TABLE_OF_ECHO.by_function[EchoAPI.rows].id
PREFIX = struct.Struct("<4sBBHQI")  # as docs/distributed.md gives it
HELLO = struct.Struct("<4sB32s16s")


@pytest.fixture(scope="module")
def token() -> bytes:
    return new_token()


LIMITS = Limits(header_bytes=4096, arrays=8, ndim=4, array_bytes=1 << 20)


@pytest.fixture(scope="module", params=["unix", "tcp"])
def server(request: pytest.FixtureRequest, token: bytes) -> Iterator[WireServer]:
    if request.param == "unix":
        made = WireServer.unix(Echo(), token, interface=EchoAPI, limits=LIMITS, frame_timeout=0.5)
    else:
        made = WireServer.tcp(Echo(), token, "127.0.0.1", interface=EchoAPI, limits=LIMITS, frame_timeout=0.5)
    with made:
        yield made


@pytest.fixture(scope="module")
def client(server: WireServer, token: bytes) -> Iterator[WireClient]:
    with WireClient(server.address, token, interface=EchoAPI, pool_size=3, limits=LIMITS) as made:
        yield made


def _arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=5))
    array = draw(hnp.arrays(dtype, shape))
    if draw(st.booleans()) and array.ndim:  # non-contiguous: every other element, or transposed
        array = array[::2] if draw(st.booleans()) else array.T
    return array


arrays = st.composite(_arrays)


def _same(a: np.ndarray, b: np.ndarray) -> None:
    assert (a.dtype, a.shape) == (b.dtype, b.shape)
    assert np.ascontiguousarray(a).tobytes() == b.tobytes()  # bit for bit: NaNs, -0.0


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    named=st.dictionaries(st.text(max_size=8), arrays(), max_size=4),
    ids=hnp.arrays(np.int64, st.integers(0, 6)),
    names=st.lists(st.text(max_size=10), max_size=4),
    n=st.integers(-(2**63), 2**63 - 1),
    x=st.floats(allow_nan=False),
    flag=st.booleans(),
)
@pytest.mark.timeout(120)
def test_arrays_of_every_dtype_and_shape_round_trip(
    client: WireClient,
    named: dict[str, np.ndarray],
    ids: np.ndarray,
    names: list[str],
    n: int,
    x: float,
    flag: bool,
) -> None:
    rows = np.arange(len(ids) * 3, dtype=np.float32).reshape(len(ids), 3)
    back = client.submit(EchoAPI.echo, named, (ids, rows), names, n, x, flag).result(10)
    named_back, (ids_back, rows_back), names_back, n_back, x_back, flag_back = back
    assert list(named_back) == list(named)
    for key, value in named.items():
        _same(value, named_back[key])
    _same(ids, ids_back)
    _same(rows, rows_back)
    assert (names_back, n_back, x_back, flag_back) == (names, n, x, flag)


_HEADER = framing.codec_of(tuple[list[str], dict[str, int], float, bool])


def _header_round_trip(value: object) -> object:
    """``value`` encoded as a request's header by ``_HEADER``, and decoded."""
    (head,) = framing.encode(framing.Kind.REQUEST, 1, 1, _HEADER, value, framing.DEFAULT_LIMITS)
    reader = framing._Reader(head[framing.PREFIX.size :], framing.DEFAULT_LIMITS)
    out = _HEADER.decode(reader)
    assert reader.pos == len(head) - framing.PREFIX.size
    return out


@settings(max_examples=100, deadline=None)
@given(
    names=st.lists(st.text(max_size=300), max_size=12),
    counts=st.dictionaries(st.text(max_size=40), st.integers(-(2**63), 2**63 - 1), max_size=8),
    x=st.floats(allow_nan=False) | st.integers(-(2**53), 2**53),
    flag=st.booleans(),
)
def test_headers_round_trip_the_same_at_every_call(
    names: list[str], counts: dict[str, int], x: float, flag: bool
) -> None:
    """Strings (short ones encoded once, from then on taken from a cache of their bytes), ints, floats given as
    ints, bools: the same values back at the first call and the next."""
    for _ in range(2):
        assert _header_round_trip((names, counts, x, flag)) == (names, counts, float(x), flag)


class _Name(str):
    def encode(self, *args: object) -> bytes:  # type: ignore[override]
        return b"not this"


def test_the_cache_of_encoded_strings_holds_so_many_and_only_plain_strings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(framing, "_ENCODED", {})
    monkeypatch.setattr(framing, "_ENCODED_MOST", 3)
    names = [f"block{i}" for i in range(10)]
    assert _header_round_trip((names, {}, 0.0, False)) == (names, {}, 0.0, False)
    assert 0 < len(framing._ENCODED) <= 3
    assert _header_round_trip(([_Name("kept")], {}, 0.0, False)) == (["not this"], {}, 0.0, False)
    assert "kept" not in framing._ENCODED  # a subclass of str: encoded as it encodes itself, never cached
    with pytest.raises(FrameError, match="expected a str, got bytes"):
        _header_round_trip(([b"x"], {}, 0.0, False))


def test_a_frame_larger_than_the_socket_takes_goes_out_whole_in_pieces() -> None:
    """``send`` resumes where the kernel stopped, across more buffers than one sendmsg takes (IOV_MAX)."""
    mine, theirs = socket.socketpair()
    mine.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    sizes = np.random.default_rng(0).integers(1, 3000, 2500)
    buffers = [os.urandom(int(n)) for n in sizes] + [np.arange(1 << 17, dtype=np.int64).data.cast("B")]
    expected = b"".join(bytes(b) for b in buffers)
    got = bytearray()

    def read() -> None:
        while len(got) < len(expected):
            got.extend(theirs.recv(1 << 16))

    reader = threading.Thread(target=read)
    reader.start()
    send(mine, list(buffers))
    reader.join(30)
    mine.close()
    theirs.close()
    assert bytes(got) == expected


def test_the_wire_carries_every_dtype_the_parameter_server_uses() -> None:
    assert set(PS_DTYPES) <= {d.name for d in WIRE_DTYPES.values()}


def _connect(server: WireServer, token: bytes, digest: bytes = TABLE_OF_ECHO.digest) -> socket.socket:
    """A raw connection past the handshake (when the token is right)."""
    sock = server.address.connect(5)
    sock.sendall(HELLO.pack(b"BIRW", 1, token, digest))
    return sock


def _logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the data plane logged (waiting up to 5 s for the first line: the server's thread writes it)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        found = [r.getMessage() for r in caplog.records if r.name.startswith("blockir.distributed.wire")]
        if found:
            return found
        time.sleep(0.01)
    return []


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closes ``sock`` (reading until it does) within 5 s."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    finally:
        sock.close()
    return True


def _request(method: int, header: bytes, payload: bytes = b"", request: int = 1, length: int | None = None) -> bytes:
    return PREFIX.pack(b"BIRW", 1, 1, method, request, len(header) if length is None else length) + header + payload


def _ids_header(code: int, shape: tuple[int, ...], nbytes: int, dim: int = 2) -> bytes:
    """The header of ``rows(ids, dim)``: the ids' dtype code, ndim, shape and byte length, then ``dim``."""
    return struct.pack(f"<BB{len(shape)}qQq", code, len(shape), *shape, nbytes, dim)


def _ids(code: int, shape: tuple[int, ...], nbytes: int, sent: int | None = None, extra: bytes = b"") -> bytes:
    """A request of ``rows(ids, 2)`` whose ids claim ``code``, ``shape`` and ``nbytes``; ``sent`` bytes follow."""
    return _request(ROWS, _ids_header(code, shape, nbytes) + extra, b"\0" * (nbytes if sent is None else sent))


# What a bad peer does: how it says hello, then what it sends.
BAD_PEERS: dict[str, tuple[str, bytes]] = {
    "random bytes for a hello": ("no hello", os.urandom(200)),
    "a wrong token": ("a wrong token", b""),
    "another method table": ("another table", b""),
    "random bytes for a frame": ("hello", os.urandom(300)),
    "an oversize header": ("hello", _request(ROWS, b"", length=1 << 20)),
    "an unknown method": ("hello", _request(999, b"")),
    "a reply where requests come": ("hello", PREFIX.pack(b"BIRW", 1, 2, ROWS, 1, 0)),
    "an unknown dtype code": ("hello", _ids(77, (3,), 24)),
    "a wrong dtype (float32 ids)": ("hello", _ids(5, (3,), 12)),
    "a wrong ndim (2-d ids)": ("hello", _ids(3, (3, 1), 24)),
    "a shape that is not the byte length": ("hello", _ids(3, (3,), 16)),
    "a negative dimension": ("hello", _ids(3, (-1,), 0)),
    "an array over the byte limit": ("hello", _ids(3, (1 << 18,), 1 << 21, sent=0)),
    "more dimensions than the limit": ("hello", _ids(3, (1,) * 9, 8, sent=0)),
    "a header with bytes left over": ("hello", _ids(3, (1,), 8, extra=b"extra")),
    "a header cut inside a value": ("hello", _request(ROWS, _ids_header(3, (1,), 8)[:-3])),
    "a truncated frame (closed half way)": ("hello", _ids(3, (4,), 32, sent=10)),
    "a truncated frame (silent half way)": ("hello", _ids(3, (4,), 32, sent=10)),
}


def _bad_peer(server: WireServer, token: bytes, peer: str) -> socket.socket:
    """A connection of the bad peer ``peer``, what it sends sent."""
    how, data = BAD_PEERS[peer]
    if how == "no hello":
        sock = server.address.connect(5)
    else:
        token = new_token() if how == "a wrong token" else token
        sock = _connect(server, token, b"\0" * 16 if how == "another table" else TABLE_OF_ECHO.digest)
    try:
        sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError):  # the server closed it already
        pass
    return sock


@pytest.mark.parametrize("peer", list(BAD_PEERS))
@pytest.mark.timeout(30)
def test_a_peer_that_breaks_a_rule_loses_its_connection_and_the_server_serves_the_others(
    server: WireServer, token: bytes, client: WireClient, peer: str, caplog: pytest.LogCaptureFixture
) -> None:
    busy = client.submit(EchoAPI.wait, 0.3)  # a call in flight on another connection meanwhile
    with caplog.at_level(logging.WARNING, logger="blockir.distributed.wire"):
        sock = _bad_peer(server, token, peer)
        if "closed half way" in peer:
            sock.shutdown(socket.SHUT_WR)  # EOF for the server, the socket still reads its answer
        assert _closed_by_server(sock), f"the server kept the connection of {peer}"
        [message] = _logged(caplog)
    assert "closed the connection from" in message
    assert ("pid" in message) if server.address.kind == "unix" else ("127.0.0.1:" in message)
    assert busy.result(5) is None
    ids = np.array([4, 5], np.int64)
    np.testing.assert_array_equal(client.submit(EchoAPI.rows, ids, 3).result(5), [[4] * 3, [5] * 3])


def test_what_the_log_says_names_the_rule(server: WireServer, token: bytes, caplog: pytest.LogCaptureFixture) -> None:
    expected = {
        "a wrong token": "wrong token",
        "an unknown method": "unknown method id 999",
        "a wrong dtype (float32 ids)": "expected an array of int64, got float32",
        "an oversize header": "a header of 1048576 bytes (at most 4096)",
        "a truncated frame (silent half way)": "truncated frame: 10 of 32 bytes came, then nothing for 0.5 s",
    }
    for peer, words in expected.items():
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="blockir.distributed.wire"):
            sock = _bad_peer(server, token, peer)
            assert _closed_by_server(sock)
            [message] = _logged(caplog)
        assert words in message, (peer, message)


def test_a_client_refuses_to_send_what_breaks_the_signature_or_the_limits(client: WireClient) -> None:
    with pytest.raises(FrameError, match="argument 'ids': expected an array of int64, got float64"):
        client.submit(EchoAPI.rows, np.ones(3), 2)
    with pytest.raises(FrameError, match="argument 'dim': expected an int, got str"):
        client.submit(EchoAPI.rows, np.ones(3, np.int64), "2")  # type: ignore[arg-type]
    with pytest.raises(FrameError, match="argument 'dim': expected an int, got bool"):
        client.submit(EchoAPI.rows, np.ones(3, np.int64), True)
    with pytest.raises(FrameError, match="argument 'dim': 18446744073709551616 is not an int"):
        client.submit(EchoAPI.rows, np.ones(3, np.int64), 2**64)
    with pytest.raises(FrameError, match="an array of 2097152 bytes"):
        client.submit(EchoAPI.rows, np.ones(1 << 18, np.int64), 2)
    with pytest.raises(FrameError, match="arrays of object cannot be sent"):
        client.submit(EchoAPI.echo, {"a": np.array([None])}, (np.ones(0, np.int64), np.ones((0, 1))), [], 0, 0.0, True)
    with pytest.raises(WireError, match="is not a method of"):
        client.submit(ParameterServerAPI.version)


def test_a_method_that_raises_fails_its_call_and_the_connection_goes_on(client: WireClient) -> None:
    with pytest.raises(RemoteError, match="fail failed on the server: BlockirError: no such table") as info:
        client.submit(EchoAPI.fail, "no such table").result(5)
    assert (info.value.kind, info.value.message) == ("BlockirError", "no such table")
    assert client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5).shape == (2, 1)
    with pytest.raises(RemoteError, match="BlockirError: xxx") as info:  # a message longer than a header holds
        client.submit(EchoAPI.fail, "x", 6000).result(5)
    assert 3000 < len(info.value.message) < LIMITS.header_bytes


@pytest.mark.timeout(60)
def test_calls_in_flight_from_many_threads_get_their_own_answers(client: WireClient) -> None:
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        try:
            futures: list[tuple[np.ndarray, Pending]] = []
            for i in range(40):
                ids = np.arange(k * 1000 + i, k * 1000 + i + 1 + i % 7, dtype=np.int64)
                futures.append((ids, client.submit(EchoAPI.rows, ids, 1 + i % 5)))
            for ids, future in futures:
                rows = future.result(20)
                assert rows.shape[0] == len(ids)
                np.testing.assert_array_equal(rows[:, 0], ids.astype(np.float32))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(50)
    assert not errors, errors
    assert len(client._connections) <= client.pool_size


@pytest.mark.timeout(60)
def test_threads_sharing_one_connection_read_each_others_replies(server: WireServer, token: bytes) -> None:
    """No thread of the connection's own: whichever thread waits reads the replies in the order they come and
    hands each to its call, whichever thread made it and whichever waits for it."""
    with WireClient(server.address, token, interface=EchoAPI, pool_size=1, limits=LIMITS) as client:
        slow = client.submit(EchoAPI.wait, 0.2)
        quick = client.submit(EchoAPI.rows, np.arange(3, dtype=np.int64), 2)
        assert quick.result(10).shape == (3, 2)  # read the slow reply first, on the way
        assert slow.done() and slow.result(0) is None

        calls = [client.submit(EchoAPI.rows, np.arange(k + 1, dtype=np.int64), 1) for k in range(60)]
        got: dict[int, np.ndarray] = {}
        errors: list[BaseException] = []

        def wait_for(ks: range) -> None:
            try:
                for k in reversed(ks):  # waiting for later replies first: the earlier ones come on the way
                    got[k] = calls[k].result(20)
            except BaseException as e:
                errors.append(e)

        threads = [threading.Thread(target=wait_for, args=(range(j, 60, 4),)) for j in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(50)
        assert not errors, errors
        for k in range(60):
            np.testing.assert_array_equal(got[k][:, 0], np.arange(k + 1, dtype=np.float32))
        assert len(client._connections) == 1


@pytest.mark.timeout(30)
def test_a_reply_past_its_timeout_is_read_by_the_next_caller(server: WireServer, token: bytes) -> None:
    with WireClient(server.address, token, interface=EchoAPI, pool_size=1, limits=LIMITS) as client:
        late = client.submit(EchoAPI.wait, 0.3)
        with pytest.raises(TimeoutError, match="no reply from"):
            late.result(0.05)
        assert not late.done()
        rows = client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(10)
        np.testing.assert_array_equal(rows, [[0], [1]])
        assert late.done() and late.result(0) is None


def test_each_reply_has_arrays_of_its_own(client: WireClient) -> None:
    """Arrays received are the caller's: a later reply never writes into an earlier one's."""
    first = client.submit(EchoAPI.rows, np.arange(4, dtype=np.int64), 3).result(5)
    kept = first.copy()
    second = client.submit(EchoAPI.rows, np.arange(10, 14, dtype=np.int64), 3).result(5)
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, kept)
    first[:] = -1  # and the caller may write into them
    np.testing.assert_array_equal(second[:, 0], np.arange(10, 14, dtype=np.float32))


@pytest.mark.timeout(30)
def test_a_lost_server_fails_the_calls_in_flight_and_the_next_calls(token: bytes) -> None:
    echo = Echo()
    server = WireServer.unix(echo, token, interface=EchoAPI)
    with WireClient(server.address, token, interface=EchoAPI, pool_size=1) as client:
        waiting = client.submit(EchoAPI.wait, 30)
        time.sleep(0.1)
        server.close(timeout=0.5)
        with pytest.raises(ConnectionLost, match="closed the connection|failed") as info:
            waiting.result(5)
        assert info.value.address == server.address
        echo.release.set()
        with pytest.raises(ConnectionLost, match="cannot connect"):
            client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5)
    with pytest.raises(ConnectionLost, match="is closed"):
        client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5)


def test_a_client_with_a_wrong_token_is_told_at_connect(server: WireServer) -> None:
    with WireClient(server.address, new_token(), interface=EchoAPI) as client:
        with pytest.raises(ConnectionLost, match="closed the connection at the handshake"):
            client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5)


def _listening_inodes() -> set[str]:
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def _tcp_listeners() -> list[str]:
    """The local addresses (hex, as the kernel writes them) of this process's listening TCP sockets."""
    mine, found = _listening_inodes(), []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not Path(table).exists():
            continue
        for line in Path(table).read_text().splitlines()[1:]:  # sl local rem st ... uid timeout inode
            fields = line.split()
            if fields[3] == "0A" and fields[9] in mine:  # LISTEN
                found.append(fields[1])
    return found


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_tcp_listeners_are_on_loopback_only(token: bytes) -> None:
    hosts = ["127.0.0.1", *(["::1"] if _has_ipv6_loopback() else [])]
    servers = [WireServer.tcp(Echo(), token, host, interface=EchoAPI) for host in hosts]
    try:
        listeners = _tcp_listeners()
        ports = {f"{s.address.port:04X}" for s in servers}
        assert ports <= {a.rsplit(":", 1)[1] for a in listeners}
        loopback = ("0100007F:", "00000000000000000000000001000000:")
        assert listeners and all(a.startswith(loopback) for a in listeners), listeners
    finally:
        for s in servers:
            s.close()
    for wildcard in ("0.0.0.0", "", "::"):
        with pytest.raises(WireError, match="not on every interface"):
            WireServer.tcp(Echo(), token, wildcard, interface=EchoAPI)


def test_a_unix_peer_of_another_uid_is_refused(token: bytes, caplog: pytest.LogCaptureFixture) -> None:
    with WireServer.unix(Echo(), token, interface=EchoAPI, uid=os.getuid() + 1) as server:
        with caplog.at_level(logging.WARNING, logger="blockir.distributed.wire"):
            with WireClient(server.address, token, interface=EchoAPI) as client:
                with pytest.raises(ConnectionLost, match="handshake"):
                    client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5)
            assert f"the peer's uid is {os.getuid()}, not {os.getuid() + 1}" in _logged(caplog)[0]
    with WireServer.unix(Echo(), token, interface=EchoAPI) as server:  # and a client checks the server's
        with WireClient(server.address, token, interface=EchoAPI, uid=os.getuid() + 1) as client:
            with pytest.raises(ConnectionLost, match=f"runs as uid {os.getuid()}, not {os.getuid() + 1}"):
                client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5)


_AS_NOBODY = """
import os, socket, struct, sys
path, token = sys.argv[1].replace("@", "\\0"), bytes.fromhex(sys.stdin.read().strip())
os.setgid(65534); os.setuid(65534)
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(path)
try:
    s.sendall(struct.pack("<4sB32s16s", b"BIRW", 1, token, bytes.fromhex(sys.argv[2])))
    answer = s.recv(1)
except OSError:  # reset: the server closed before reading the hello
    answer = b""
print("welcome" if answer else "closed")
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a client as another uid")
@pytest.mark.timeout(30)
def test_a_process_of_another_uid_with_the_token_is_refused(token: bytes, caplog: pytest.LogCaptureFixture) -> None:
    with (
        caplog.at_level(logging.WARNING, logger="blockir.distributed.wire"),
        WireServer.unix(Echo(), token, interface=EchoAPI) as server,
    ):
        assert server.address.path.startswith("\0")  # abstract: no file permission stands in the way
        run = subprocess.run(
            [sys.executable, "-c", _AS_NOBODY, server.address.path.replace("\0", "@"), TABLE_OF_ECHO.digest.hex()],
            input=token.hex(),
            capture_output=True,
            text=True,
            timeout=20,
        )
        assert run.stdout.strip() == "closed", run.stderr
        assert "(uid 65534): the peer's uid is 65534, not 0" in _logged(caplog)[0]
        with WireClient(server.address, token, interface=EchoAPI) as client:
            assert client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5).shape == (2, 1)


_EXITS_WITHOUT_CLOSE = """
import sys
from pathlib import Path
from typing import Protocol
from blockir.distributed.wire import WireServer, new_token
class One(Protocol):
    def version(self) -> int: ...
class Handler:
    def version(self) -> int:
        return 1
server = WireServer.unix(Handler(), new_token(), interface=One, directory=sys.argv[1], abstract=False)
assert Path(server.address.path).exists()
"""


def test_a_socket_file_is_private_and_removed_on_every_exit(token: bytes, tmp_path: Path) -> None:
    with WireServer.unix(Echo(), token, interface=EchoAPI, directory=str(tmp_path), abstract=False) as server:
        path = Path(server.address.path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        with WireClient(server.address, token, interface=EchoAPI) as client:
            assert client.submit(EchoAPI.rows, np.arange(2, dtype=np.int64), 1).result(5).shape == (2, 1)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(RuntimeError, match="the role failed"):
        with WireServer.unix(Echo(), token, interface=EchoAPI, directory=str(tmp_path), abstract=False):
            raise RuntimeError("the role failed")
    assert list(tmp_path.iterdir()) == []
    exits = subprocess.run([sys.executable, "-c", _EXITS_WITHOUT_CLOSE, str(tmp_path)], capture_output=True, timeout=60)
    assert exits.returncode == 0, exits.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_socket_that_cannot_be_made_leaves_nothing(token: bytes, tmp_path: Path) -> None:
    with pytest.raises(WireError, match="object has no method echo of EchoAPI"):
        WireServer.unix(object(), token, interface=EchoAPI, directory=str(tmp_path), abstract=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(WireError, match="32 bytes"):
        WireServer.unix(Echo(), b"short", interface=EchoAPI, directory=str(tmp_path), abstract=False)
    assert list(tmp_path.iterdir()) == []


def test_the_method_table_comes_from_the_interface() -> None:
    table = MethodTable(ParameterServerAPI)
    assert [m.name for m in table.methods.values()] == sorted(m.name for m in table.methods.values())
    assert table.by_function[ParameterServerAPI.push].name == "push"
    assert MethodTable(ParameterServerAPI).digest == table.digest != TABLE_OF_ECHO.digest
    for method in table.methods.values():  # the parameter server has each, with the same parameters
        theirs = inspect.signature(getattr(ParameterServer, method.name)).parameters
        assert list(theirs) == list(method.signature.parameters), method.name

    class Untyped(Protocol):
        def save(self, directory: str) -> dict[str, object]: ...

    with pytest.raises(
        TypeError, match=r"Untyped.save: its result \(dict\[str, object\]\): the wire cannot carry object"
    ):
        MethodTable(Untyped)

    class Unsaid(Protocol):
        def pull(self, ids: Ids, **options: int) -> None: ...

        def push(self, values, weight: int) -> None: ...  # type: ignore[no-untyped-def]

        def version(self): ...  # type: ignore[no-untyped-def]

    for name, words in (
        ("pull", "One.pull: parameter 'options' must be positional"),
        ("push", "One.push: parameter 'values' has no type"),
        ("version", "One.version: its result has no type"),
    ):
        with pytest.raises(TypeError, match=words):
            MethodTable(type("One", (Protocol,), {name: getattr(Unsaid, name)}))


@pytest.mark.timeout(60)
def test_a_parameter_server_answers_over_the_wire_as_it_does_in_process(token: bytes) -> None:
    split, startup = _split(1)
    direct = ParameterServer(0, split, startup, "async", timeout=5)
    served = ParameterServer(0, split, startup, "async", timeout=5)
    with WireServer.unix(served, token) as server, WireClient(server.address, token) as client:
        ids = np.array([3, 7, 3, 42], np.int64)
        np.testing.assert_array_equal(
            client.submit(ParameterServerAPI.pull_sparse, TABLE, ids).result(5), direct.pull_sparse(TABLE, ids)
        )
        grads = np.ones((4, 4), np.float32)
        push = client.submit(ParameterServerAPI.push, 0, {}, {TABLE: (ids, grads)}).result(5)
        assert push == direct.push(0, {}, {TABLE: (ids, grads)}) == 1
        np.testing.assert_array_equal(
            client.submit(ParameterServerAPI.pull_sparse, TABLE, ids).result(5), direct.pull_sparse(TABLE, ids)
        )
        assert client.submit(ParameterServerAPI.table_size, TABLE).result(5) == direct.table_size(TABLE) == 3
        with pytest.raises(RemoteError, match="BlockirError: .*no_such"):
            client.submit(ParameterServerAPI.pull_sparse, "no_such", ids).result(5)
        assert client.submit(ParameterServerAPI.version).result(5) == 1


def test_an_address_prints_where_it_is() -> None:
    assert str(Address("unix", path="\0x")) == "unix:@x"
    assert str(Address("tcp", host="::1", port=5)) == "tcp:[::1]:5"
    assert str(Address("tcp", host="127.0.0.1", port=5)) == "tcp:127.0.0.1:5"


@pytest.mark.parametrize("kind", ["unix", "tcp"])
@pytest.mark.timeout(30)
def test_each_end_reports_each_connection_with_its_kind_and_the_same_peer(kind: str, token: bytes) -> None:
    """The kind is read from each socket; the client names its end as the server names its peer, so the two lists
    match connection by connection (the multi-node test on Ray checks the data plane this way)."""
    made = WireServer.unix(Echo(), token, interface=EchoAPI) if kind == "unix" else None
    made = made or WireServer.tcp(Echo(), token, "127.0.0.1", interface=EchoAPI)
    with made as server, WireClient(server.address, token, interface=EchoAPI, pool_size=3) as client:
        _report_each_connection(server, client)


def _report_each_connection(server: WireServer, client: WireClient) -> None:
    busy = [client.submit(EchoAPI.wait, 0.2) for _ in range(2)]  # two calls in flight: two connections
    for call in busy:
        call.result(5)
    mine = client.connections()
    assert len(mine) == 2 and {kind for kind, _ in mine} == {server.address.kind}
    if server.address.kind == "unix":
        assert {peer for _, peer in mine} == {f"pid {os.getpid()}"}
    deadline = time.monotonic() + 5
    while sorted(server.connections()) != sorted(mine):  # a connection is listed once past its handshake
        assert time.monotonic() < deadline, (server.connections(), mine)
        time.sleep(0.01)
    client.close()
    while server.connections():  # and gone once closed
        assert time.monotonic() < deadline, server.connections()
        time.sleep(0.01)
    assert client.connections() == []
