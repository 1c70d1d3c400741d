"""What one async exchange costs Ray alone: a window's push and pull through an actor method that does nothing.

    unshare -n -p -f --mount-proc bash -c 'ip link set lo up; exec python benchmarks/bench_ray_floor.py'
        [--rows 1900] [--dim 128] [--dense 29000] [--calls 200] [--rounds 3] [--transport ray unix tcp]

The arguments of ``ParameterServer.exchange`` as a window of bow_net sends them (a dense gradient of
``--dense`` floats, ``--rows`` sparse rows of ``--dim`` floats with their ids, the ids to refresh) go to an
actor on a local Ray cluster on loopback, whose method returns arrays of the answer's sizes (the dense
values, the refreshed rows) without touching them. Printed per round: wall time, the actor process's CPU and
the caller's CPU per call, median (range) over rounds: the floor under the CPU a parameter server on Ray
spends per window (bench_ps.py).

``--transport unix`` and ``tcp`` measure the same exchange over the data plane (``blockir.distributed.wire``, no
Ray): a server process serving the same idle method on a Unix socket or on TCP at 127.0.0.1; the CPU of the
caller's process (its reader thread included) and of the server's process. ``unix-socket`` and ``tcp-socket``
give the floor under them: the same bytes each way over a bare socket into preallocated buffers, no framing.
Several transports are measured in interleaved rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import resource
import socket
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol, cast

import numpy as np
import ray

from blockir.distributed.api import ParameterServerAPI
from blockir.distributed.ray_backend import loopback_env
from blockir.distributed.wire import WireClient, WireServer, new_token


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Idle:
    def __init__(self, rows: int, dim: int, dense: int) -> None:
        self.answer = (1, {"dense": np.ones(dense, np.float32)}, {"table": np.ones((rows, dim), np.float32)})

    def exchange(self, *args: Any) -> Any:
        return self.answer

    def cpu(self) -> float:
        return cpu_seconds()


Idle: Any = cast(Any, ray.remote)(_Idle)


class _IdleAPI(Protocol):
    """What the data plane's server offers here: the parameter server's exchange, and its process's CPU."""

    exchange = ParameterServerAPI.exchange

    def cpu(self) -> float: ...


Exchange = tuple[Callable[[], Any], Callable[[], float]]  # one exchange; the CPU seconds of the server's process


@contextlib.contextmanager
def _over_ray(args: argparse.Namespace, push: tuple[Any, ...], ids: np.ndarray) -> Iterator[Exchange]:
    os.environ.update(loopback_env())
    with tempfile.TemporaryDirectory() as tmp:
        ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=tmp, log_to_driver=False)
        try:
            actor = Idle.remote(args.rows, args.dim, args.dense)
            yield (
                lambda: ray.get(actor.exchange.remote(*push, 16, ["dense"], {"table": ids})),
                lambda: ray.get(actor.cpu.remote()),
            )
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
            yield (
                lambda: client.submit(_IdleAPI.exchange, *push, 16, ["dense"], {"table": ids}).result(),
                lambda: client.submit(_IdleAPI.cpu).result(),
            )
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
    threading.Thread(target=lambda: [pipe.send(cpu_seconds()) for _ in iter(pipe.recv, "stop")], daemon=True).start()
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

    def their_cpu() -> float:
        mine.send("cpu")
        return float(mine.recv())

    try:
        yield exchange, their_cpu
    finally:
        sock.close()
        mine.send("stop")
        process.join(10)


def _round(exchange: Exchange, calls: int) -> tuple[float, float, float]:
    """Wall time, the server process's CPU and the caller's CPU, per exchange, over ``calls`` exchanges."""
    call, their_cpu = exchange
    their0, mine0, start = their_cpu(), cpu_seconds(), time.perf_counter()
    for _ in range(calls):
        call()
    wall = (time.perf_counter() - start) / calls
    return wall, (their_cpu() - their0) / calls, (cpu_seconds() - mine0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1900)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--dense", type=int, default=29000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--transport", nargs="+", choices=["ray", "unix", "tcp", "unix-socket", "tcp-socket"], default=["ray"]
    )
    args = parser.parse_args()
    ids = np.arange(args.rows, dtype=np.int64)
    push = (
        0,
        {"dense": np.ones(args.dense, np.float32)},
        {"table": (ids, np.ones((args.rows, args.dim), np.float32))},
    )
    figures: dict[str, list[tuple[float, float, float]]] = {t: [] for t in args.transport}
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
        for call, _ in exchanges.values():
            call()
        for _ in range(args.rounds):  # interleaved: every transport once per round
            for t, exchange in exchanges.items():
                figures[t].append(_round(exchange, args.calls))
    size = (args.dense + args.rows * args.dim) * 4 / 2**20
    print(f"an exchange of {size:.2f} MiB each way ({args.rows} rows x {args.dim}, {args.dense} dense), per call:")
    for t, rounds in figures.items():
        print(f"{t}:")
        wall, theirs, mine = zip(*rounds)
        total = [a + b for a, b in zip(theirs, mine)]
        for label, values in (("wall", wall), ("server CPU", theirs), ("caller CPU", mine), ("total CPU", total)):
            print(
                f"  {label:10} {1e3 * statistics.median(values):.2f} ms "
                f"({1e3 * min(values):.2f} - {1e3 * max(values):.2f})"
            )


if __name__ == "__main__":
    main()
