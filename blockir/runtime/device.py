"""Devices at run time: storage, streams and events; the host, virtual CPU devices and CUDA devices.

A device is named by its canonical device string (``cpu``, ``cpu:2``,
``cuda:0``; see :mod:`blockir.ir.devices`) and found with
:func:`get_device`. It owns the storage of the values placed on it
(:meth:`Device.put` copies a value onto it; its array module ``xp`` allocates
there) and a set of streams: ordered work queues named ``compute0``,
``compute1``, ... and ``copy`` (:meth:`Device.stream`), with events to order
work across streams (``record_event``, ``wait_event``, and on the event
``synchronize`` and ``query``).

``cpu`` (= ``cpu:0``) is the host. ``cpu:N`` are virtual CPU devices: their
values are numpy arrays like the host's, computed by the same kernels, but kept
apart: a value reaches another device only as a copy (a ``memcpy`` op, or
:func:`transfer`), never as a shared buffer. So every multi-device path runs,
and is tested, on any machine. A CPU stream does its work synchronously in the
thread that drives it (the dataflow scheduler binds each CPU stream to one
thread, :mod:`blockir.runtime.scheduler`); its events are set when recorded.

``cuda:N`` devices (CuPy arrays and streams, :mod:`blockir.runtime.cuda`) are
asynchronous: work launched on a stream runs later, in order, and events order
it against other streams and the host. They need the ``cuda`` extra and a GPU;
:func:`get_device` refuses them otherwise, naming the devices this machine has.

Values are not tagged inside a plan: when a plan is compiled it checks that
every op reads values on its own device (:func:`blockir.runtime.plan.compile_plan`).
The tags live at the boundaries: each scope value carries the device it is on
(:attr:`blockir.runtime.scope.ScopeVariable.device`), and fetched values come
back to the host.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.devices import HOST, format_device, parse_device
from blockir.ops.transfer import copy_value
from blockir.ops.values import LoDTensor, SelectedRows, TensorArray

__all__ = [
    "CPUDevice",
    "CPUStream",
    "Device",
    "Event",
    "HostEvent",
    "Stream",
    "array_module",
    "available_devices",
    "get_device",
    "transfer",
    "value_device",
]

_STREAM_NAME = re.compile(r"compute(0|[1-9][0-9]*)|copy")


class Event(Protocol):
    """A point in a stream's work: done once the work recorded before it is."""

    def synchronize(self) -> None:
        """Block the calling thread until the event is done."""

    def query(self) -> bool:
        """Whether the event is done, without blocking."""


class HostEvent:
    """An event set from a host thread (CPU streams' events; the scheduler's cross-thread signals)."""

    __slots__ = ("_flag",)

    def __init__(self) -> None:
        self._flag = threading.Event()

    def set(self) -> None:
        self._flag.set()

    def synchronize(self) -> None:
        self._flag.wait()

    def query(self) -> bool:
        return self._flag.is_set()


class Stream:
    """An ordered work queue of a device, named ``DEVICE/NAME`` (``cpu:1/compute0``, ``cuda:0/copy``).

    ``is_async``: whether :meth:`launch` returns before the work is done
    (CUDA) or after (CPU).
    """

    is_async = False

    def __init__(self, device: Device, name: str) -> None:
        self.device = device
        self.name = name

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run (or, on an asynchronous stream, enqueue) ``fn(*args, **kwargs)`` in order on this stream."""
        raise NotImplementedError

    def record_event(self) -> Event:
        """An event done once everything launched on this stream so far is done."""
        raise NotImplementedError

    def wait_event(self, event: Event) -> None:
        """Make the work launched on this stream from now on wait for ``event``."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block the calling thread until everything launched on this stream is done."""
        raise NotImplementedError

    def __str__(self) -> str:
        return f"{self.device.name}/{self.name}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class CPUStream(Stream):
    """A CPU stream: work runs at once, in the thread that launches it, which the scheduler keeps per stream."""

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def record_event(self) -> HostEvent:
        event = HostEvent()
        event.set()  # the work launched before it has run: it ran in this thread
        return event

    def wait_event(self, event: Event) -> None:
        event.synchronize()  # the work launched next runs in this thread, after this returns

    def synchronize(self) -> None:
        return None  # nothing is ever pending


class Device:
    """A device: ``name`` (canonical), ``kind``, ``index``, its array module ``xp`` and its streams."""

    kind = ""
    stream_type: type[Stream] = Stream

    def __init__(self, index: int, xp: Any) -> None:
        self.index = index
        self.xp = xp
        self.name = format_device(self.kind, index)
        self._streams: dict[str, Stream] = {}
        self._lock = threading.Lock()

    def stream(self, name: str) -> Stream:
        """The stream ``name`` (``compute0``, ``compute1``, ..., ``copy``), made on first use."""
        with self._lock:
            stream = self._streams.get(name)
            if stream is None:
                if not isinstance(name, str) or not _STREAM_NAME.fullmatch(name):
                    raise BlockirError(f"{name!r} is not a stream of {self.name} (expected compute<N> or copy)")
                stream = self._streams[name] = self.stream_type(self, name)
            return stream

    def streams(self) -> list[Stream]:
        """The streams made so far."""
        with self._lock:
            return list(self._streams.values())

    def put(self, value: Any) -> Any:
        """A copy of ``value`` (dense, LoDTensor or SelectedRows, from any device) in this device's storage."""
        raise NotImplementedError

    def synchronize(self) -> None:
        """Block until all work launched on this device's streams is done."""
        for stream in self.streams():
            stream.synchronize()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class CPUDevice(Device):
    """The host (index 0) or a virtual CPU device (index N): numpy arrays, synchronous streams."""

    kind = "cpu"
    stream_type = CPUStream

    def __init__(self, index: int) -> None:
        super().__init__(index, np)

    def put(self, value: Any) -> Any:
        return copy_value(value, np)


_devices: dict[str, Device] = {}
_registry_lock = threading.Lock()


def available_devices() -> list[str]:
    """The devices this machine has: ``cpu``, the virtual ``cpu:N`` (any N), and each ``cuda:N`` found."""
    from blockir.runtime import cuda  # here: importing blockir never needs CuPy

    return [HOST, "cpu:N (virtual, any N)", *cuda.device_names()]


def get_device(name: str, where: object = None) -> Device:
    """The device ``name`` (a device string); an error naming ``where`` and the devices available when
    this machine does not have it."""
    kind, index = parse_device(name, where if where is not None else "a device")
    name = format_device(kind, index)
    device = _devices.get(name)
    if device is not None:
        return device
    with _registry_lock:
        if name not in _devices:
            if kind == "cpu":
                _devices[name] = CPUDevice(index)
            else:
                from blockir.runtime import cuda

                made = cuda.make_device(index)
                if made is None:
                    at = f": {where}" if where is not None else ""
                    raise BlockirError(
                        f"device {name} is not available on this machine (devices available: "
                        f"{', '.join(available_devices())}){at}"
                    )
                _devices[name] = made
        return _devices[name]


def value_device(value: Any) -> str:
    """The device a value (dense, LoDTensor, SelectedRows or TensorArray) is on: ``cuda:N`` for a CuPy array on GPU N,
    else the host (numpy arrays of virtual CPU devices look like the host's)."""
    if type(value) is np.ndarray:  # the common case, first: a run asks for each value fed
        return HOST
    if isinstance(value, TensorArray):  # where its tensors are (an empty one: the host)
        return next((value_device(v) for v in value if v is not None), HOST)
    array = value.data if isinstance(value, LoDTensor) else value.values if isinstance(value, SelectedRows) else value
    gpu = getattr(getattr(array, "device", None), "id", None)  # numpy 2's ndarray.device is the string "cpu"
    return HOST if gpu is None else format_device("cuda", gpu)


def array_module(device: str) -> Any:
    """The array module kernels on ``device`` compute with (numpy for the host and virtual CPUs)."""
    return get_device(device).xp


def transfer(value: Any, device: str) -> Any:
    """A copy of ``value`` (dense, LoDTensor or SelectedRows) on ``device``: new buffers, same LoD, rows, height."""
    return get_device(device).put(value)
