"""A numpy-backed stand-in of the CuPy calls blockir makes, to test the CUDA backend without a GPU.

:func:`install` puts a :class:`FakeCupy` where :func:`blockir.runtime.cuda._cupy`
finds CuPy, reporting ``gpus`` GPUs. It stands in for exactly what the backend
and the kernels use:

- arrays (``fake.ndarray``) are numpy arrays tagged with the GPU they were made
  on. Like CuPy's, they refuse to compute together with host numpy arrays (no
  implicit transfers) and with arrays of a GPU other than the current one;
  reductions give 0-d arrays; ``get`` / ``set`` / ``data.copy_from_device_async``
  copy to the host, from the host and between GPUs;
- ``asarray``, ``array``, ``empty``, ``zeros``, ``ones``, ``full``, their ``*_like``
  forms, ``arange`` and ``ascontiguousarray`` make arrays on the current GPU, and
  ``lib.stride_tricks.as_strided`` views one as CuPy's does; every other name is
  numpy's (numpy's ufuncs and functions dispatch to the arrays' overrides);
- ``fake.cuda``: ``is_available``, ``runtime.getDeviceCount``, ``Device``
  (context manager), ``Stream`` (context manager; ``record``, ``wait_event``,
  ``synchronize``), ``Event`` (``record``, ``synchronize``, ``done``),
  ``alloc_pinned_memory`` / ``PinnedMemoryPointer``, ``get_current_stream`` and
  ``nccl`` (:class:`FakeNccl`; ``available`` only with ``install(nccl=True)``).

Work runs at once, so events are done when recorded: the stand-in checks what
the backend asks for and in which order, not timing (the ``gpu`` tests check
that on a real GPU). ``fake.calls`` records each request as a tuple:
``("launch", stream)`` (a stream made current), ``("record", stream, event)``,
``("wait", stream, event)``, ``("sync", stream)``, ``("event_sync", event)``,
``("pinned", nbytes)``, ``("h2d", stream, pinned_source)``,
``("d2h", stream, pinned_destination, blocking)``,
``("d2d", stream, source_gpu, destination_gpu)``, ``("nccl_init", gpus)``,
``("nccl", stream, rank)`` (an all-reduce call) and
``("implicit", nbytes)`` (a host array turned into a device array by
``asarray`` / ``array``, as kernels do with small index arrays).
"""

from __future__ import annotations

import itertools
import sys
import threading
import weakref
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from blockir.ops import blas
from blockir.runtime import cuda, device

_active: FakeCupy | None = None


def _fake() -> FakeCupy:
    assert _active is not None, "no FakeCupy installed"
    return _active


def install(monkeypatch: pytest.MonkeyPatch, gpus: int = 2, nccl: bool = False) -> FakeCupy:
    """A fresh stand-in with ``gpus`` GPUs (and NCCL when ``nccl``), found by the CUDA backend until the test
    ends; the device registry and the NCCL communicators start empty, so that nothing of an earlier test is
    reused. While it is installed, the host computes a parameter's update by a product with numpy expressions
    too, not with numpy's BLAS gemm accumulating into it (``blockir.ops.blas``, host arrays only), so that the
    stand-in's results equal the host's bit for bit."""
    fake = FakeCupy(gpus, nccl)
    monkeypatch.setattr(blas, "MIN_ELEMENTS", sys.maxsize)
    monkeypatch.setattr(cuda, "_cupy", lambda: fake)
    monkeypatch.setattr(device, "_devices", {})
    monkeypatch.setattr(cuda, "_communicators", {})
    monkeypatch.setattr(sys.modules[__name__], "_active", fake)
    return fake


def _operands(value: Any) -> Iterator[np.ndarray]:
    if isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _operands(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _operands(v)


def _plain(value: Any) -> Any:
    return value.view(np.ndarray) if isinstance(value, FakeArray) else value


def _wrapped(value: Any) -> Any:
    """Results as CuPy gives them: arrays on the current GPU (made there if new), 0-d arrays for scalars."""
    if isinstance(value, FakeArray):
        return value
    if isinstance(value, np.ndarray):
        return value.view(FakeArray)
    if isinstance(value, np.generic):
        return np.asarray(value).view(FakeArray)
    if isinstance(value, (list, tuple)):
        return type(value)(_wrapped(v) for v in value)
    return value


class FakeArray(np.ndarray):
    """A numpy array on GPU ``device.id`` (module docstring)."""

    gpu: int

    def __array_finalize__(self, obj: Any) -> None:
        gpu = getattr(obj, "gpu", None)
        self.gpu = _fake().current_gpu() if gpu is None else gpu

    def __array_ufunc__(
        self, ufunc: np.ufunc, method: str, *inputs: Any, out: tuple | None = None, **kwargs: Any
    ) -> Any:
        _fake().check_operands(f"{ufunc.__name__}.{method}", (inputs, out))
        if method == "at" and ufunc is np.multiply:
            raise NotImplementedError("`cupy_multiply.at` is not supported yet")  # CuPy 14's words
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        if method == "at":
            return None
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrapped(result)

    def __setitem__(self, key: Any, value: Any) -> None:
        """CuPy writes repeated targets of an integer-array index in no set order: differing values for one
        target are an error here, so a kernel that relies on numpy's "last one wins" fails on the stand-in."""
        keys = key if isinstance(key, tuple) else (key,)
        if any(isinstance(k, np.ndarray) and k.dtype != bool for k in keys) and np.ndim(value) > 0:
            shaped = np.arange(self.size).reshape(self.shape)[_plain(key)]
            targets = shaped.reshape(-1)
            values = np.broadcast_to(_plain(np.asarray(value)), shaped.shape).reshape(-1)
            order = np.argsort(targets, kind="stable")
            targets, values = targets[order], values[order]
            a, b = values[1:], values[:-1]
            differ = (a != b) & ~((a != a) & (b != b))  # NaN meets NaN: the same value
            if ((targets[1:] == targets[:-1]) & differ).any():
                raise ValueError("repeated targets with different values: CuPy writes them in no set order")
        super().__setitem__(key, value)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _fake().check_operands(func.__name__, (args, kwargs))
        return _wrapped(super().__array_function__(func, types, args, kwargs))

    @property
    def device(self) -> FakeDevice:  # type: ignore[override]
        return FakeDevice(self.gpu)

    @property
    def data(self) -> _Pointer:  # type: ignore[override]
        return _Pointer(self)

    def get(
        self, stream: FakeStream | None = None, order: str = "C", out: np.ndarray | None = None, blocking: bool = True
    ) -> np.ndarray:
        fake = _fake()
        with FakeDevice(self.gpu):
            stream = stream or fake.get_current_stream()
        fake.calls.append(("d2h", stream, out is not None and cuda._pinned(out, fake), blocking))
        if out is None:
            return np.array(self.view(np.ndarray), copy=True)
        assert out.shape == self.shape and out.dtype == self.dtype, "get: out does not match"
        out[...] = self.view(np.ndarray)
        return out

    def set(self, arr: np.ndarray, stream: FakeStream | None = None) -> None:
        fake = _fake()
        assert not isinstance(arr, FakeArray) and arr.shape == self.shape and arr.dtype == self.dtype, (
            "set: the host array does not match"
        )
        fake.calls.append(("h2d", stream or fake.get_current_stream(), cuda._pinned(arr, fake)))
        self.view(np.ndarray)[...] = arr


class _Pointer:
    """``ndarray.data``: the array's memory, as far as copies between GPUs and NCCL calls need it."""

    def __init__(self, array: FakeArray) -> None:
        self.array = array

    @property
    def ptr(self) -> int:
        """An address NCCL calls take: :meth:`FakeNccl.buffer` finds the array again."""
        return _fake().address(self.array)

    def copy_from_device_async(self, src: _Pointer, size: int, stream: FakeStream | None = None) -> None:
        fake = _fake()
        dst, source = self.array, src.array
        assert dst.flags.c_contiguous and source.flags.c_contiguous, "a raw copy needs contiguous memory"
        assert size == dst.nbytes == source.nbytes and dst.dtype == source.dtype, "a raw copy of the wrong size"
        fake.calls.append(("d2d", stream or fake.get_current_stream(), source.gpu, dst.gpu))
        dst.view(np.ndarray)[...] = source.view(np.ndarray)


class FakeDevice:
    """``cupy.cuda.Device(id)``: makes its GPU current in a ``with`` block."""

    def __init__(self, gpu: int = 0) -> None:
        self.id = gpu

    def __enter__(self) -> FakeDevice:
        fake = _fake()
        if not 0 <= self.id < fake.gpus:
            raise RuntimeError(f"cudaErrorInvalidDevice: GPU {self.id} of {fake.gpus}")
        fake.local().gpus.append(self.id)
        return self

    def __exit__(self, *exc: object) -> None:
        _fake().local().gpus.pop()

    def synchronize(self) -> None:
        _fake().calls.append(("device_sync", self.id))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.id == self.id

    def __hash__(self) -> int:
        return self.id

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id}>"


class FakeEvent:
    """``cupy.cuda.Event``: made on the current GPU, recorded on a stream of that GPU."""

    _ids = itertools.count()

    def __init__(self, block: bool = False, disable_timing: bool = False, interprocess: bool = False) -> None:
        self.gpu = _fake().current_gpu()
        self.id = next(self._ids)
        self.recorded = False

    def record(self, stream: FakeStream | None = None) -> None:
        fake = _fake()
        stream = stream or fake.get_current_stream()
        if stream.gpu != self.gpu:
            raise RuntimeError(f"cudaErrorInvalidResourceHandle: an event of GPU {self.gpu} recorded on {stream}")
        self.recorded = True
        fake.calls.append(("record", stream, self))

    def synchronize(self) -> None:
        _fake().calls.append(("event_sync", self))

    @property
    def done(self) -> bool:
        return True

    def __repr__(self) -> str:
        return f"<event {self.id} of GPU {self.gpu}>"


class FakeStream:
    """``cupy.cuda.Stream``: made on the current GPU, current in a ``with`` block (its GPU must be current)."""

    _ids = itertools.count()

    def __init__(
        self,
        null: bool = False,
        non_blocking: bool = False,
        ptds: bool = False,
        priority: int = 0,
        gpu: int | None = None,
    ) -> None:
        self.gpu = _fake().current_gpu() if gpu is None else gpu
        self.null, self.non_blocking = null, non_blocking
        self.id = next(self._ids)

    def __enter__(self) -> FakeStream:
        fake = _fake()
        if fake.current_gpu() != self.gpu:
            raise RuntimeError(f"{self} made current while GPU {fake.current_gpu()} is current")
        fake.local().streams.setdefault(self.gpu, []).append(self)
        fake.calls.append(("launch", self))
        return self

    def __exit__(self, *exc: object) -> None:
        _fake().local().streams[self.gpu].pop()

    def record(self, event: FakeEvent | None = None) -> FakeEvent:
        with FakeDevice(self.gpu):
            event = event or FakeEvent()
            event.record(self)
        return event

    def wait_event(self, event: FakeEvent) -> None:
        assert event.recorded, f"{self} waits for {event}, which was never recorded"
        _fake().calls.append(("wait", self, event))

    def synchronize(self) -> None:
        _fake().calls.append(("sync", self))

    @property
    def done(self) -> bool:
        return True

    @property
    def ptr(self) -> int:
        return _fake().address(self)

    def __repr__(self) -> str:
        return f"<{'null ' if self.null else ''}stream {self.id} of GPU {self.gpu}>"


class FakeCommunicator:
    """A ``cupy.cuda.nccl.NcclCommunicator`` of a clique made by ``initAll``: rank ``rank`` on GPU ``gpu``."""

    def __init__(self, nccl: FakeNccl, clique: int, rank: int, gpu: int, size: int) -> None:
        self.nccl, self.clique, self.rank, self.gpu, self.size = nccl, clique, rank, gpu, size

    def allReduce(self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, stream: int) -> None:  # noqa: N802  # CuPy's name
        fake = _fake()
        send, recv, on = fake.object_at(sendbuf), fake.object_at(recvbuf), fake.object_at(stream)
        assert op == FakeNccl.NCCL_SUM, f"allReduce with op {op}"
        for what, a in (("send", send), ("recv", recv)):
            assert isinstance(a, FakeArray) and a.gpu == self.gpu, (
                f"rank {self.rank}: the {what} buffer is not on GPU {self.gpu}"
            )
            assert a.flags.c_contiguous and a.size == count, (
                f"rank {self.rank}: the {what} buffer is not {count} contiguous items"
            )
            assert FakeNccl.TYPES[datatype] == a.dtype, (
                f"rank {self.rank}: a {a.dtype} buffer passed as {FakeNccl.TYPES[datatype]}"
            )
        assert isinstance(on, FakeStream) and on.gpu == self.gpu, f"rank {self.rank}: launched on {on}"
        fake.calls.append(("nccl", on, self.rank))
        self.nccl.enqueue(self, send, recv)


class FakeNccl:
    """``cupy.cuda.nccl`` (``available`` set by :func:`install`): communicators of one process over several GPUs.

    A collective completes when every rank of its clique has called it. One thread calling for several ranks
    must group the calls (``groupStart`` / ``groupEnd``): a call outside a group, or a group ending with a
    collective some rank has not called, would hang NCCL, and raises here.
    """

    NCCL_SUM = 0
    TYPES = {
        k: np.dtype(n)
        for k, n in enumerate(["float16", "float32", "float64", "int8", "uint8", "int32", "uint32", "int64", "uint64"])
    }
    (
        NCCL_FLOAT16,
        NCCL_FLOAT32,
        NCCL_FLOAT64,
        NCCL_INT8,
        NCCL_UINT8,
        NCCL_INT32,
        NCCL_UINT32,
        NCCL_INT64,
        NCCL_UINT64,
    ) = range(9)

    def __init__(self, available: bool) -> None:
        self.available = available
        self.depth = 0
        self.pending: dict[int, list[list[tuple[FakeArray, FakeArray]]]] = {}  # clique -> per rank, its calls
        self.cliques = itertools.count()
        self.NcclCommunicator = SimpleNamespace(initAll=self.init_all)

    def init_all(self, devices: list[int]) -> list[FakeCommunicator]:
        assert self.available, "NCCL used while not available"
        assert len(set(devices)) == len(devices), f"initAll({devices}): a GPU twice"
        clique = next(self.cliques)
        _fake().calls.append(("nccl_init", tuple(devices)))
        return [FakeCommunicator(self, clique, r, g, len(devices)) for r, g in enumerate(devices)]

    def groupStart(self) -> None:  # noqa: N802  # CuPy's name
        self.depth += 1

    def groupEnd(self) -> None:  # noqa: N802  # CuPy's name
        assert self.depth > 0, "groupEnd without groupStart"
        self.depth -= 1
        if not self.depth:
            self.complete()

    def enqueue(self, comm: FakeCommunicator, send: FakeArray, recv: FakeArray) -> None:
        ranks = self.pending.setdefault(comm.clique, [[] for _ in range(comm.size)])
        ranks[comm.rank].append((send, recv))
        if not self.depth:
            self.complete()

    def complete(self) -> None:
        pending, self.pending = self.pending, {}
        for clique, ranks in pending.items():
            counts = [len(calls) for calls in ranks]
            if len(set(counts)) > 1:
                raise RuntimeError(f"NCCL would hang: clique {clique}'s ranks called {counts} collectives")
            for calls in zip(*ranks):
                total = sum(send.view(np.ndarray).astype(send.dtype) for send, _ in calls)
                for _, recv in calls:
                    recv.view(np.ndarray)[...] = total


class FakePinnedMemory(bytearray):
    """``cupy.cuda.PinnedMemoryPointer``: host memory (exports the buffer protocol, as CuPy's does)."""


class FakeCupy:
    """The stand-in module (module docstring); ``calls`` holds what it was asked to do."""

    ndarray = FakeArray

    def __init__(self, gpus: int = 2, nccl: bool = False) -> None:
        self.gpus = gpus
        self.calls: list[tuple] = []
        self._addresses: dict[int, Any] = {}  # what address() handed out, by address
        self.pinned: list[weakref.ref] = []  # every pinned allocation, while something holds it
        self._local = threading.local()
        self.null_streams = {g: FakeStream(null=True, gpu=g) for g in range(gpus)}  # per GPU
        self.cuda = SimpleNamespace(
            is_available=lambda: gpus > 0,
            runtime=SimpleNamespace(getDeviceCount=lambda: gpus),
            Device=FakeDevice,
            Stream=FakeStream,
            Event=FakeEvent,
            PinnedMemoryPointer=FakePinnedMemory,
            alloc_pinned_memory=self.alloc_pinned_memory,
            get_current_stream=self.get_current_stream,
            nccl=FakeNccl(nccl),
        )
        self.lib = SimpleNamespace(stride_tricks=SimpleNamespace(as_strided=self.as_strided))

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

    # -- state --------------------------------------------------------------------------------

    def local(self) -> Any:
        if not hasattr(self._local, "gpus"):
            self._local.gpus, self._local.streams = [], {}
        return self._local

    def current_gpu(self) -> int:
        gpus = self.local().gpus
        return gpus[-1] if gpus else 0

    def get_current_stream(self) -> FakeStream:
        gpu = self.current_gpu()
        stack = self.local().streams.get(gpu)
        return stack[-1] if stack else self.null_streams[gpu]

    def check_operands(self, what: str, operands: Any) -> None:
        """Refuse what CuPy refuses: host arrays among the operands, arrays of a GPU that is not current."""
        gpu = self.current_gpu()
        for a in _operands(operands):
            if isinstance(a, FakeArray):
                if a.gpu != gpu:
                    raise ValueError(f"{what}: an array of GPU {a.gpu} used while GPU {gpu} is current")
            elif a.ndim:
                raise TypeError(f"{what}: a host numpy array {a.dtype}{list(a.shape)} among device arrays")

    def address(self, thing: Any) -> int:
        """An address for ``thing`` (an array, a stream) as CuPy's ``ptr`` gives, kept so NCCL calls find it."""
        self._addresses[id(thing)] = thing
        return id(thing)

    def object_at(self, address: int) -> Any:
        return self._addresses[address]

    def entries(self, what: str) -> list[tuple]:
        """The log entries of one kind (``"h2d"``, ``"record"``, ...), in order."""
        return [e for e in self.calls if e[0] == what]

    # -- memory ---------------------------------------------------------------------------------

    def alloc_pinned_memory(self, nbytes: int) -> FakePinnedMemory:
        self.calls.append(("pinned", nbytes))
        memory = FakePinnedMemory(nbytes)
        self.pinned.append(weakref.ref(memory))
        return memory

    def _made(self, host: np.ndarray) -> FakeArray:
        return host.view(FakeArray)

    def asarray(self, a: Any, dtype: Any = None, order: Any = None) -> FakeArray:
        if isinstance(a, FakeArray) and (dtype is None or a.dtype == np.dtype(dtype)):
            return a
        return self.array(a, dtype)

    def array(self, a: Any, dtype: Any = None, copy: bool = True, order: Any = "K", ndmin: int = 0) -> FakeArray:
        if isinstance(a, FakeArray):  # a copy on the current GPU, from whichever GPU ``a`` is on
            return self._made(np.array(a.view(np.ndarray), dtype=dtype, copy=True, order=order, ndmin=ndmin))
        host = np.array(a, dtype=dtype, copy=True, order=order, ndmin=ndmin)
        self.calls.append(("implicit", host.nbytes))
        return self._made(host)

    def ascontiguousarray(self, a: FakeArray, dtype: Any = None) -> FakeArray:
        self.check_operands("ascontiguousarray", a)
        return (
            a if a.flags.c_contiguous and dtype is None else self._made(np.ascontiguousarray(a.view(np.ndarray), dtype))
        )

    def empty(self, shape: Any, dtype: Any = float, order: str = "C") -> FakeArray:
        return self._made(np.empty(shape, dtype, order))

    def zeros(self, shape: Any, dtype: Any = float, order: str = "C") -> FakeArray:
        return self._made(np.zeros(shape, dtype, order))

    def ones(self, shape: Any, dtype: Any = float, order: str = "C") -> FakeArray:
        return self._made(np.ones(shape, dtype, order))

    def full(self, shape: Any, fill_value: Any, dtype: Any = None, order: str = "C") -> FakeArray:
        return self._made(np.full(shape, _plain(fill_value), dtype, order))

    def empty_like(self, a: FakeArray, dtype: Any = None) -> FakeArray:
        return self._made(np.empty_like(a.view(np.ndarray), dtype))

    def zeros_like(self, a: FakeArray, dtype: Any = None) -> FakeArray:
        return self._made(np.zeros_like(a.view(np.ndarray), dtype))

    def ones_like(self, a: FakeArray, dtype: Any = None) -> FakeArray:
        return self._made(np.ones_like(a.view(np.ndarray), dtype))

    def full_like(self, a: FakeArray, fill_value: Any, dtype: Any = None) -> FakeArray:
        return self._made(np.full_like(a.view(np.ndarray), _plain(fill_value), dtype))

    def arange(self, *args: Any, **kwargs: Any) -> FakeArray:
        return self._made(np.arange(*args, **kwargs))

    def as_strided(self, x: FakeArray, shape: Any = None, strides: Any = None) -> FakeArray:
        """``cupy.lib.stride_tricks.as_strided``: a view of the device array ``x`` (CuPy's has no ``subok``)."""
        self.check_operands("as_strided", x)
        return np.lib.stride_tricks.as_strided(x, shape, strides, subok=True)
