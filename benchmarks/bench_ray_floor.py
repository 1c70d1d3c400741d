"""What one exchange between a worker and a server costs, every process counted: through a Ray actor call,
over the data plane, over a bare socket.

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python benchmarks/bench_ray_floor.py'
        [--rows 1900] [--dim 128] [--dense 29000] [--calls 200] [--rounds 3]
        [--transport ray unix tcp unix-socket tcp-socket]

The arguments of ``ParameterServer.exchange`` as a window of bow_net sends them (a dense gradient of
``--dense`` floats, ``--rows`` sparse rows of ``--dim`` floats with their ids, the ids to refresh: 1.04 MiB)
go to a server whose method returns arrays of the answer's sizes (the dense values, the refreshed rows)
without touching them:

- ``ray``: an actor on a local Ray cluster on loopback (which runs while every transport is measured);
- ``unix`` and ``tcp``: the data plane (``blockir.distributed.wire``, no Ray), a server process serving the same
  idle method on a Unix socket (a worker on the server's node) or on TCP at 127.0.0.1 (what crosses nodes);
- ``unix-socket`` and ``tcp-socket``: the floor under them, the same bytes each way over a bare socket into
  preallocated buffers, no framing.

Transports are measured in interleaved rounds of ``--calls`` exchanges. Per exchange, from ``/proc`` (utime +
stime, ``proc_cpu.py``): the CPU of the caller's process (its reader threads included), of the server's
process, and of every other process under the caller (the daemons: Ray's GCS server, raylet, its Python
daemons and idle workers, while the cluster runs; named in the output); their total; and the wall time. Each
figure is the median (range) over rounds. CPU times are counted in clock ticks (10 ms) per process: over 200
calls, 0.05 ms an exchange per process.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, Protocol, cast

import numpy as np
import ray
from proc_cpu import Snapshot, cpu_seconds, descendants

from blockir.distributed.api import ParameterServerAPI
from blockir.distributed.ray_backend import loopback_env
from blockir.distributed.wire import WireClient, WireServer, new_token


class _Idle:
    def __init__(self, rows: int, dim: int, dense: int) -> None:
        self.answer = (1, {"dense": np.ones(dense, np.float32)}, {"table": np.ones((rows, dim), np.float32)})

    def exchange(self, *args: Any) -> Any:
        return self.answer

    def pid(self) -> int:
        return os.getpid()


Idle: Any = cast(Any, ray.remote)(_Idle)


class _IdleAPI(Protocol):
    """What the data plane's server offers here: the parameter server's exchange."""

    exchange = ParameterServerAPI.exchange


Exchange = tuple[Callable[[], Any], int]  # one exchange; the server's process


@contextlib.contextmanager
def _over_ray(args: argparse.Namespace, push: tuple[Any, ...], ids: np.ndarray) -> Iterator[Exchange]:
    os.environ.update(loopback_env())
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp, log_to_driver=False)
        try:
            actor = Idle.remote(args.rows, args.dim, args.dense)
            pid = ray.get(actor.pid.remote())
            yield lambda: ray.get(actor.exchange.remote(*push, 16, ["dense"], {"table": ids})), pid
        finally:
            ray.shutdown()


def _wire_server(kind: str, token: bytes, rows: int, dim: int, dense: int, pipe: Any) -> None:
    """(The server's process.) Serve an idle exchange until the pipe says stop."""
    handler = _Idle(rows, dim, dense)
    if kind == "unix":
        server = WireServer.unix(handler, token, interface=_IdleAPI)
    else:
        server = WireServer.tcp(handler, token, "127.0.0.1", interface=_IdleAPI)
    with server:
        pipe.send(server.address)
        pipe.recv()


@contextlib.contextmanager
def _over_wire(kind: str, args: argparse.Namespace, push: tuple[Any, ...], ids: np.ndarray) -> Iterator[Exchange]:
    token = new_token()
    mine, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=_wire_server, args=(kind, token, args.rows, args.dim, args.dense, theirs)
    )
    process.start()
    try:
        with WireClient(mine.recv(), token, interface=_IdleAPI) as client:
            exchange = partial(client.submit, _IdleAPI.exchange, *push, 16, ["dense"], {"table": ids})
            yield lambda: exchange().result(), cast(int, process.pid)
    finally:
        mine.send("stop")
        process.join(10)


def _socket_server(kind: str, size: int, pipe: Any) -> None:
    """(The server's process.) The floor under the data plane: receive ``size`` bytes into a buffer and send
    ``size`` bytes back, on a bare socket with the data plane's buffer sizes; no framing, no threads per call."""
    listener = socket.socket(socket.AF_UNIX if kind == "unix-socket" else socket.AF_INET)
    listener.bind(f"\0blockir-bench-{os.getpid()}" if kind == "unix-socket" else ("127.0.0.1", 0))
    listener.listen(1)
    pipe.send(listener.getsockname())
    sock = listener.accept()[0]
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
    buffer = memoryview(bytearray(size))
    while True:
        got = 0
        while got < size:
            n = sock.recv_into(buffer[got:])
            if not n:
                return
            got += n
        sock.sendall(buffer)


@contextlib.contextmanager
def _over_socket(kind: str, size: int) -> Iterator[Exchange]:
    mine, theirs = multiprocessing.get_context("spawn").Pipe()
    process = multiprocessing.get_context("spawn").Process(target=_socket_server, args=(kind, size, theirs))
    process.start()
    sock = socket.socket(socket.AF_UNIX if kind == "unix-socket" else socket.AF_INET)
    for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
        sock.setsockopt(socket.SOL_SOCKET, option, 4 << 20)
    if kind == "tcp-socket":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.connect(mine.recv())
    out, back = memoryview(bytearray(size)), memoryview(bytearray(size))

    def exchange() -> None:
        sock.sendall(out)
        got = 0
        while got < size:
            got += sock.recv_into(back[got:])

    try:
        yield exchange, cast(int, process.pid)
    finally:
        sock.close()
        process.join(10)


FIGURES = ("caller", "server", "daemons", "total", "wall")  # per exchange, in this order


def _round(exchange: Exchange, calls: int, servers: set[int]) -> tuple[float, ...]:
    """The :data:`FIGURES` per exchange over ``calls`` exchanges, in seconds; ``servers``: the servers'
    processes, none of them a daemon."""
    call, server = exchange
    me = os.getpid()
    daemons0 = Snapshot.of(descendants(me))
    server0, caller0, start = cpu_seconds(server), cpu_seconds(me), time.perf_counter()
    for _ in range(calls):
        call()
    wall = time.perf_counter() - start
    caller, server_cpu = cpu_seconds(me) - caller0, cpu_seconds(server) - server0
    daemons = Snapshot.of(descendants(me)).since(daemons0, leave_out=servers)
    return tuple(x / calls for x in (caller, server_cpu, daemons, caller + server_cpu + daemons, wall))


def _daemons(servers: set[int]) -> str:
    """The processes counted as daemons now, by name, with how many of each."""
    names = [name for pid, name in descendants(os.getpid()).items() if pid not in servers]
    return ", ".join(f"{name} x{names.count(name)}" for name in sorted(set(names))) or "none"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1900)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dense", type=int, default=29000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--transport",
        nargs="+",
        choices=["ray", "unix", "tcp", "unix-socket", "tcp-socket"],
        default=["ray", "unix", "tcp", "unix-socket", "tcp-socket"],
    )
    args = parser.parse_args()
    ids = np.arange(args.rows, dtype=np.int64)
    push = (
        0,
        {"dense": np.ones(args.dense, np.float32)},
        {"table": (ids, np.ones((args.rows, args.dim), np.float32))},
    )
    figures: dict[str, list[tuple[float, ...]]] = {t: [] for t in args.transport}
    with contextlib.ExitStack() as stack:
        exchanges = {
            t: stack.enter_context(
                _over_ray(args, push, ids)
                if t == "ray"
                else _over_socket(t, (args.dense + args.rows * args.dim) * 4)
                if t.endswith("-socket")
                else _over_wire(t, args, push, ids)
            )
            for t in args.transport
        }
        servers = {server for _, server in exchanges.values()}
        for call, _ in exchanges.values():
            call()
        for _ in range(args.rounds):  # interleaved: every transport once per round
            for t, exchange in exchanges.items():
                figures[t].append(_round(exchange, args.calls, servers))
        daemons = _daemons(servers)
    size = (args.dense + args.rows * args.dim) * 4 / 2**20
    print(
        f"an exchange of {size:.2f} MiB each way ({args.rows} rows x {args.dim}, {args.dense} dense), "
        f"{args.rounds} rounds of {args.calls}; CPU and wall ms per exchange, median (range):"
    )
    print(f"daemons: every process under the caller but the servers ({daemons})")
    print("| transport | " + " | ".join(f"{f} ms" if f == "wall" else f"{f} CPU ms" for f in FIGURES) + " |")
    print("| --- " * (len(FIGURES) + 1) + "|")
    for t, rounds in figures.items():
        cells = [f"{1e3 * statistics.median(v):.2f} ({1e3 * min(v):.2f} - {1e3 * max(v):.2f})" for v in zip(*rounds)]
        print(f"| {t} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
