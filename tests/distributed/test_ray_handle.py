"""The Ray backend's side of the data plane, without a cluster: a role actor's listener serves the server
published in its process (and says ServerLost once none is), and a worker's call over it fails as a Ray call
would: a server's ServerLost as ServerLost, its other errors as BlockirError, a connection lost as a ServerLost
that is never final, the handle dropping that connection. (The whole path, faults included, runs on a cluster
in test_ray.py.)"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, cast

import numpy as np
import pytest

from blockir.distributed.api import ParameterServerAPI, Reply, ServerLost
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.server import ParameterServer
from blockir.distributed.wire import WireClient, WireServer, new_token
from blockir.errors import BlockirError
from tests.distributed.test_server import TABLE, _split

pytest.importorskip("ray")

from blockir.distributed.ray_backend import RayHandle, _Published, _WireFuture  # noqa: E402  # needs the ray extra

RUN = "ray-handle-test"
Served = tuple[ParameterServer, InProcessBackend, WireServer, WireClient]


class _Handle:
    """What a _WireFuture asks of its RayHandle: the server's index, and to forget a lost connection."""

    index = 0

    def __init__(self) -> None:
        self.dropped: list[WireClient] = []

    def lost(self, client: WireClient) -> None:
        self.dropped.append(client)
        client.close()


def _call(handle: _Handle, client: WireClient | None, future: Reply[Any]) -> Any:
    """The result of ``future`` as the handle's _WireFuture gives it."""
    return _WireFuture(cast(RayHandle, handle), client, future).result()


@pytest.fixture
def served() -> Iterator[Served]:
    split, startup = _split(1)
    server = ParameterServer(0, split, startup, "async", timeout=5)
    registry, token = InProcessBackend(), new_token()
    registry.serve(RUN, 0, server)
    listener = WireServer.unix(_Published(registry, RUN, 0), token)
    client = WireClient(listener.address, token)
    try:
        yield server, registry, listener, client
    finally:
        client.close()
        listener.close()


def test_the_listener_serves_the_published_server(served: Served) -> None:
    server, _, _, client = served
    handle = _Handle()
    rows = _call(handle, client, client.submit(ParameterServerAPI.pull_sparse, TABLE, np.array([3, 5])))
    np.testing.assert_array_equal(rows, server.pull_sparse(TABLE, np.array([3, 5])))
    assert _call(handle, client, client.submit(ParameterServerAPI.version)) == server.version()
    assert not handle.dropped


def test_a_server_no_longer_published_is_lost_not_for_good(served: Served) -> None:
    _, registry, _, client = served
    registry.unpublish(RUN, 0)
    with pytest.raises(ServerLost, match="is not serving") as lost:
        _call(_Handle(), client, client.submit(ParameterServerAPI.version))
    assert not lost.value.final


def test_a_servers_error_is_a_blockir_error_naming_it(served: Served) -> None:
    _, _, _, client = served
    with pytest.raises(BlockirError, match="no_such_table") as raised:
        _call(_Handle(), client, client.submit(ParameterServerAPI.table_size, "no_such_table"))
    assert not isinstance(raised.value, ServerLost)


def test_a_connection_lost_is_a_server_lost_and_the_handle_drops_it(served: Served) -> None:
    _, _, listener, client = served
    handle = _Handle()
    assert _call(handle, client, client.submit(ParameterServerAPI.version)) == 0
    listener.close()  # as the server's process dying closes it
    with pytest.raises(ServerLost, match="parameter server 0") as lost:
        _call(handle, client, client.submit(ParameterServerAPI.version))
    assert not lost.value.final  # Ray's control call that follows says whether it comes back
    assert handle.dropped == [client]


def test_a_failure_before_the_call_is_raised_as_it_is() -> None:
    failed: Future = Future()
    failed.set_exception(ServerLost("parameter server 0 of run 'r' is not serving"))
    handle = _Handle()
    with pytest.raises(ServerLost, match="is not serving"):
        _call(handle, None, failed)
    assert not handle.dropped
