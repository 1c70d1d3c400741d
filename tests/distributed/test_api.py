"""The typed calls from a worker to a server: each method of ParameterServerAPI and ServerControl is a method of
ServerHandle with the same parameters, which submits that very method (never a name); one communicator class
per mode."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

from blockir.distributed.api import SERVER_METHODS, ParameterServerAPI, ServerControl, ServerHandle
from blockir.distributed.backend import InProcessBackend
from blockir.distributed.communicator import (
    AsyncCommunicator,
    GeoCommunicator,
    SyncCommunicator,
    new_communicator,
)
from blockir.distributed.server import ParameterServer
from blockir.errors import BlockirError
from tests.distributed.test_server import TABLE, _split


class _Recorder(ServerHandle):
    """Records what each call submits."""

    def __init__(self) -> None:
        self.sent: list[tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = []

    def submit(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Future:
        self.sent.append((method, args, kwargs))
        future: Future = Future()
        future.set_result(None)
        return future

    def close(self) -> None:
        """Nothing held."""


def _interface_methods() -> list[tuple[str, Callable[..., Any]]]:
    return [(name, f) for f, name in SERVER_METHODS.items()]


def test_the_server_methods_are_those_of_both_interfaces() -> None:
    names = sorted(SERVER_METHODS.values())
    assert "push" in names and "exchange" in names and "incarnation" in names and "save_shards" in names
    assert all(f in (vars(ParameterServerAPI) | vars(ServerControl)).values() for f in SERVER_METHODS)


@pytest.mark.parametrize(("name", "method"), _interface_methods(), ids=[n for n, _ in _interface_methods()])
def test_a_handle_method_has_the_interfaces_parameters_and_submits_that_method(
    name: str, method: Callable[..., Any]
) -> None:
    ours = getattr(ServerHandle, name)
    theirs = inspect.signature(method).parameters
    assert list(inspect.signature(ours).parameters.items()) == list(theirs.items())
    recorder = _Recorder()
    args = [object() for _ in list(theirs)[1:]]  # each argument a distinct object: passed on in order
    getattr(recorder, name)(*args)
    assert len(recorder.sent) == 1
    sent, sent_args, sent_kwargs = recorder.sent[0]
    assert sent is method
    assert list(sent_args) + list(sent_kwargs.values()) == args


def test_an_in_process_handle_calls_the_servers_method_and_refuses_any_other_function() -> None:
    split, startup = _split(1)
    server = ParameterServer(0, split, startup, "async", timeout=5)
    registry = InProcessBackend()
    registry.serve("api", 0, server)
    (handle,) = registry.handles("api", 1, timeout=5)
    try:
        ids = np.array([3, 1], np.int64)
        np.testing.assert_array_equal(handle.pull_sparse(TABLE, ids).result(), server.pull_sparse(TABLE, ids))
        assert handle.incarnation().result()["restart"] == 0
        with pytest.raises(BlockirError, match="is not a method of ParameterServerAPI or ServerControl"):
            handle.submit(ParameterServer.stop)
    finally:
        handle.close()


def test_one_communicator_class_per_mode() -> None:
    split, startup = _split(1)
    server = ParameterServer(0, split, startup, "async", timeout=5)
    registry = InProcessBackend()
    registry.serve("modes", 0, server)
    made = {mode: new_communicator(split, registry.handles("modes", 1, 5), 0, mode) for mode in ("sync", "geo")}
    made["async"] = new_communicator(split, registry.handles("modes", 1, 5), 0, "async", pull_every=3, cache_windows=5)
    try:
        assert isinstance(made["sync"], SyncCommunicator)
        assert isinstance(made["geo"], GeoCommunicator)
        assert isinstance(made["async"], AsyncCommunicator) and made["async"].pull_every == 3
        assert made["async"].cache_windows == 5 and made["async"]._cache.recent.maxlen == 5
        with pytest.raises(BlockirError, match="geo_sync needs the GEO communicator"):
            made["sync"].geo_step({}, {})
        with pytest.raises(BlockirError, match="exchanges deltas"):
            made["geo"].push({}, [], 1)
        with pytest.raises(BlockirError, match="unknown parameter-server mode 'hogwild'"):
            new_communicator(split, [], 0, "hogwild")
    finally:
        for mine in made.values():
            mine.close()
