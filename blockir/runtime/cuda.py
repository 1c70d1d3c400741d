"""CUDA devices (``cuda:N``) through CuPy, installed with the ``cuda`` extra; never imported by ``import blockir``.

CuPy is imported lazily, by :func:`_cupy` alone (the tests swap in a numpy-backed
stand-in there: ``tests/runtime/fake_cupy.py``). Without CuPy, or without a
usable GPU, this machine has no ``cuda:N`` device and :func:`make_device` says so
(None), which :func:`blockir.runtime.device.get_device` turns into an error
naming the devices available.

- :class:`CUDADevice`: values are CuPy arrays on GPU ``index``; its array module
  ``xp`` is ``cupy``; every CuPy call it makes runs under
  ``cupy.cuda.Device(index)``.
- :class:`CUDAStream`: one ``cupy.cuda.Stream(non_blocking=True)`` per stream
  name (``compute0``, ``compute1``, ..., ``copy``). :meth:`~CUDAStream.launch`
  runs a kernel with the device and the stream current, so the kernel's CuPy
  calls enqueue on the stream and return before the GPU has run them.
  :meth:`~CUDAStream.record_event` gives a :class:`CUDAEvent`; waiting on one
  is a device-side wait (``stream.wait_event``), waiting on any other event (a
  :class:`~blockir.runtime.device.HostEvent` of a CPU stream) blocks the
  launching thread until it is set.
- Copies: a ``memcpy`` launched on a CUDA stream (the ``copy`` stream, where
  the ``streams`` pass puts it) is done by :meth:`CUDAStream.copy`, asynchronously,
  so that copies overlap compute. Host to device: the host array is staged in
  pinned host memory and copied on the stream (a host array already in pinned
  memory, which a device-to-host copy made, is copied as it is: the stream's
  waits order the two copies). Device to host: copied on the stream into
  pinned host memory; the host step that reads it waits on the event the
  scheduler records after the copy. Device to device: a peer copy on the
  destination's stream. Each buffer an enqueued copy still reads or writes is
  kept alive until an event recorded after the copy is done, so that no
  allocator hands its memory out again too early.
- :meth:`CUDADevice.put` copies a value at rest (no work pending on it) onto the
  device through its ``copy`` stream and returns once the copy is done.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from blockir.ir.devices import device_kind, format_device
from blockir.ops.transfer import MEMCPY, map_arrays
from blockir.runtime.device import Device, Event, Stream, get_device

__all__ = ["CUDADevice", "CUDAEvent", "CUDAStream", "device_names", "make_device"]

_MEMCPY = MEMCPY.kernel


def _cupy() -> Any:
    """The cupy module, or None when it is not installed or no GPU is usable."""
    try:
        import cupy
    except ImportError:
        return None
    try:
        return cupy if cupy.cuda.is_available() else None
    except Exception:  # a broken driver or runtime counts as no GPU
        return None


def device_names() -> list[str]:
    """``cuda:0``, ``cuda:1``, ... for each GPU this machine has (none without CuPy)."""
    cupy = _cupy()
    return [] if cupy is None else [format_device("cuda", i) for i in range(cupy.cuda.runtime.getDeviceCount())]


def make_device(index: int) -> CUDADevice | None:
    """The device ``cuda:index``; None when this machine does not have it."""
    cupy = _cupy()
    if cupy is None or not 0 <= index < cupy.cuda.runtime.getDeviceCount():
        return None
    return CUDADevice(index, cupy)


class CUDAEvent:
    """A ``cupy.cuda.Event`` recorded on a stream of ``gpu`` (a ``cupy.cuda.Device``); waited for from any thread."""

    __slots__ = ("event", "gpu")

    def __init__(self, event: Any, gpu: Any) -> None:
        self.event = event
        self.gpu = gpu

    def synchronize(self) -> None:
        with self.gpu:
            self.event.synchronize()

    def query(self) -> bool:
        with self.gpu:
            return bool(self.event.done)


class CUDAStream(Stream):
    """A ``cupy.cuda.Stream(non_blocking=True)`` of a CUDA device (module docstring)."""

    is_async = True
    device: CUDADevice

    def __init__(self, device: CUDADevice, name: str) -> None:
        super().__init__(device, name)
        self._cupy = device.xp
        self._gpu = device.cuda_device
        with self._gpu:
            self.cuda_stream = self._cupy.cuda.Stream(non_blocking=True)
        self._in_flight: deque[tuple[CUDAEvent, list[Any]]] = deque()  # buffers enqueued copies still use
        self._lock = threading.Lock()

    def launch(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Enqueue ``fn(*args, **kwargs)``: run it with this stream's device and stream current; a ``memcpy``
        kernel ``(ctx, x)`` is done by :meth:`copy`."""
        if fn is _MEMCPY:
            ctx, x = args
            return self.copy(x, to_host=device_kind(ctx.attrs["dst_device"]) != "cuda")
        with self._gpu, self.cuda_stream:
            return fn(*args, **kwargs)

    def record_event(self) -> CUDAEvent:
        with self._gpu:
            event = self._cupy.cuda.Event(disable_timing=True)
            event.record(self.cuda_stream)
        return CUDAEvent(event, self._gpu)

    def wait_event(self, event: Event) -> None:
        if isinstance(event, CUDAEvent):
            with self._gpu:
                self.cuda_stream.wait_event(event.event)
        else:
            event.synchronize()  # a host event: the work launched next is launched once it is set

    def synchronize(self) -> None:
        with self._gpu:
            self.cuda_stream.synchronize()
        with self._lock:
            self._in_flight.clear()

    # -- copies ------------------------------------------------------------------------------------

    def copy(self, value: Any, to_host: bool = False) -> Any:
        """Enqueue a copy of ``value`` (dense, LoDTensor or SelectedRows; on the host or any GPU) onto this
        stream's device, or with ``to_host`` into pinned host memory; return the copy, complete once the
        work launched on this stream so far is."""
        keep: list[Any] = []
        with self._gpu, self.cuda_stream:
            copied = map_arrays(
                value, lambda a: self._copy_to_host(a, keep) if to_host else self._copy_to_device(a, keep)
            )
        with self._lock:
            while self._in_flight and self._in_flight[0][0].query():
                self._in_flight.popleft()
            if keep:
                self._in_flight.append((self.record_event(), keep))
        return copied

    def _pinned_empty(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A host array in pinned (page-locked) memory, which the GPU copies to and from asynchronously."""
        count = int(np.prod(shape, dtype=np.int64))
        memory = self._cupy.cuda.alloc_pinned_memory(count * dtype.itemsize)
        return np.frombuffer(memory, dtype, count).reshape(shape)

    def _copy_to_device(self, a: Any, keep: list[Any]) -> Any:
        cupy = self._cupy
        if isinstance(a, cupy.ndarray):
            return self._copy_from_gpu(a, keep)
        host = np.asarray(a)
        out = cupy.empty(host.shape, host.dtype)
        if host.size:
            if not _pinned(host, cupy):
                staged = self._pinned_empty(host.shape, host.dtype)
                staged[...] = host
                host = staged
            out.set(host, stream=self.cuda_stream)
            keep.append(host)
        return out

    def _copy_from_gpu(self, a: Any, keep: list[Any]) -> Any:
        """A copy of ``a`` (on this GPU or a peer) on this stream's device, by a peer copy of contiguous memory."""
        cupy = self._cupy
        if not a.flags.c_contiguous:
            a = self._contiguous(a)
        out = cupy.empty(a.shape, a.dtype)
        if a.size:
            out.data.copy_from_device_async(a.data, a.nbytes, self.cuda_stream)
            keep.append(a)
        return out

    def _contiguous(self, a: Any) -> Any:
        """A C-contiguous copy of ``a``, made on its own GPU after what this stream waited for, before what it
        launches next."""
        if a.device.id == self.device.index:
            return self._cupy.ascontiguousarray(a)
        source = get_device(format_device("cuda", a.device.id)).stream(self.name)
        assert isinstance(source, CUDAStream)
        source.wait_event(self.record_event())
        contiguous = source.launch(self._cupy.ascontiguousarray, a)
        self.wait_event(source.record_event())
        return contiguous

    def _copy_to_host(self, a: Any, keep: list[Any]) -> np.ndarray:
        if not isinstance(a, self._cupy.ndarray):
            return np.array(a, copy=True)
        out = self._pinned_empty(a.shape, a.dtype)
        if a.size:
            a.get(stream=self.cuda_stream, out=out, blocking=False)
            keep.extend((a, out))
        return out


def _pinned(array: np.ndarray, cupy: Any) -> bool:
    """Whether a host array lies in pinned memory that CuPy allocated."""
    base: Any = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):  # np.frombuffer's base: a view of the pinned memory object
        base = base.obj
    return isinstance(base, cupy.cuda.PinnedMemoryPointer)


class CUDADevice(Device):
    """GPU ``index`` through CuPy: CuPy arrays, asynchronous :class:`CUDAStream` s."""

    kind = "cuda"
    stream_type = CUDAStream

    def __init__(self, index: int, cupy: Any) -> None:
        super().__init__(index, cupy)
        self.cuda_device = cupy.cuda.Device(index)

    def put(self, value: Any) -> Any:
        stream = self.stream("copy")
        assert isinstance(stream, CUDAStream)
        copied = stream.copy(value)
        stream.synchronize()
        return copied
