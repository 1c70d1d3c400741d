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
- Collectives: a ``device_allreduce`` launched on a CUDA stream (its first
  device's ``copy`` stream) is done by :meth:`CUDAStream.allreduce`: the same
  stream of each GPU waits for what this one waited for, then one NCCL
  all-reduce over the GPUs (``cupy.cuda.nccl``: communicators made once per set
  of GPUs with ``NcclCommunicator.initAll``, the calls grouped between
  ``groupStart`` and ``groupEnd`` as one thread must for several GPUs), and this
  stream waits for every GPU's part, so that what waits on this stream sees
  the sums. Without NCCL (CuPy built without it), or for a dtype NCCL lacks,
  the values go through pinned host memory: copied down, summed on the host,
  copied back up (the launching thread waits for the copies down).
- :meth:`CUDADevice.put` copies a value at rest (no work pending on it) onto the
  device through its ``copy`` stream and returns once the copy is done.
"""

from __future__ import annotations

import importlib
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import numpy as np

from blockir.ir.devices import device_kind, format_device
from blockir.ops.parallel import DEVICE_ALLREDUCE
from blockir.ops.transfer import MEMCPY, map_arrays
from blockir.runtime.device import Device, Event, Stream, get_device

__all__ = ["CUDADevice", "CUDAEvent", "CUDAStream", "device_names", "make_device"]

_MEMCPY = MEMCPY.kernel
_DEVICE_ALLREDUCE = DEVICE_ALLREDUCE.kernel
_NCCL_TYPES = {
    "float16": "NCCL_FLOAT16",
    "float32": "NCCL_FLOAT32",
    "float64": "NCCL_FLOAT64",
    "int8": "NCCL_INT8",
    "uint8": "NCCL_UINT8",
    "int32": "NCCL_INT32",
    "uint32": "NCCL_UINT32",
    "int64": "NCCL_INT64",
    "uint64": "NCCL_UINT64",
}
_communicators: dict[tuple[int, ...], list[Any]] = {}  # GPUs -> their NCCL communicators, made once
_communicators_lock = threading.Lock()


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


def _nccl(cupy: Any) -> Any:
    """``cupy.cuda.nccl`` when CuPy was built with NCCL, else None."""
    nccl = getattr(cupy.cuda, "nccl", None)
    if nccl is None:
        try:
            nccl = importlib.import_module("cupy.cuda.nccl")
        except ImportError:
            return None
    return nccl if getattr(nccl, "available", False) else None


def _communicators_of(nccl: Any, gpus: tuple[int, ...]) -> list[Any]:
    """The NCCL communicators of ``gpus`` (rank ``i`` on ``gpus[i]``), made on first use."""
    with _communicators_lock:
        if gpus not in _communicators:
            _communicators[gpus] = nccl.NcclCommunicator.initAll(list(gpus))
        return _communicators[gpus]


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
        if fn is _DEVICE_ALLREDUCE:
            return self.allreduce(args[1])
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
        self._hold(keep)
        return copied

    def _hold(self, keep: list[Any]) -> None:
        """Keep the buffers ``keep`` alive until the work launched on this stream so far is done."""
        with self._lock:
            while self._in_flight and self._in_flight[0][0].query():
                self._in_flight.popleft()
            if keep:
                self._in_flight.append((self.record_event(), keep))

    def _peer(self, gpu: int) -> CUDAStream:
        """The stream of this one's name on GPU ``gpu``."""
        return cast(CUDAStream, get_device(format_device("cuda", gpu)).stream(self.name))  # a CUDA device's streams

    # -- collectives ---------------------------------------------------------------------------------

    def allreduce(self, xs: list[Any]) -> list[Any]:
        """``Out[i]``: the sum of the dense arrays ``xs`` on the GPU of ``xs[i]``, complete once the work
        launched on this stream so far is (module docstring)."""
        streams = [self._peer(x.device.id) for x in xs]
        start = self.record_event()
        for stream in streams:
            if stream is not self:
                stream.wait_event(start)
        nccl = _nccl(self._cupy)
        nccl_type = _NCCL_TYPES.get(np.dtype(xs[0].dtype).name)
        if nccl is not None and nccl_type is not None:
            outs = self._nccl_allreduce(nccl, getattr(nccl, nccl_type), streams, xs)
        else:
            outs = self._host_allreduce(streams, xs)
        for stream in streams:
            if stream is not self:
                self.wait_event(stream.record_event())
        return outs

    def _nccl_allreduce(self, nccl: Any, nccl_type: int, streams: list[CUDAStream], xs: list[Any]) -> list[Any]:
        cupy = self._cupy
        comms = _communicators_of(nccl, tuple(s.device.index for s in streams))
        outs, held = [], []
        nccl.groupStart()
        try:
            for x, stream, comm in zip(xs, streams, comms):
                with stream._gpu, stream.cuda_stream:
                    x = cupy.ascontiguousarray(x)
                    out = cupy.empty_like(x)
                comm.allReduce(x.data.ptr, out.data.ptr, x.size, nccl_type, nccl.NCCL_SUM, stream.cuda_stream.ptr)
                outs.append(out)
                held.append([x, out])
        finally:
            nccl.groupEnd()
        for stream, keep in zip(streams, held):
            stream._hold(keep)
        return outs

    @staticmethod
    def _host_allreduce(streams: list[CUDAStream], xs: list[Any]) -> list[Any]:
        down = [stream.copy(x, to_host=True) for stream, x in zip(streams, xs)]
        for stream in streams:
            stream.synchronize()
        total = down[0] + down[1]
        for x in down[2:]:
            total += x
        return [stream.copy(total) for stream in streams]

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
        source = self._peer(a.device.id)
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
        stream = cast(CUDAStream, self.stream("copy"))  # a CUDA device's streams are CUDAStreams
        copied = stream.copy(value)
        stream.synchronize()
        return copied
