"""Staged readers: batches loaded by a background thread and put on a device ahead of their use.

    for batch in bir.reader.staged(load_batches(), place="cuda:0", capacity=2):
        train_step(batch)    # batch is on cuda:0; the next ones are loaded and copied meanwhile

:func:`staged` wraps an iterator of batches (the loader: reading, parsing,
decoding) and runs it in a producer thread, so that loading overlaps the
consumer's compute; each batch is yielded already on ``place``. How it gets
there depends on the device:

- ``cpu`` (the host): prefetch only; the loader's objects are yielded as they are.
- ``cpu:N`` (a virtual CPU device): a real copy, :meth:`~blockir.runtime.device.Device.put`.
- ``cuda:N``: the producer writes the batch into pinned (page-locked) host
  buffers and enqueues the copies onto the GPU on the device's ``copy`` stream,
  then records an event after them. The consumer makes the device's
  ``compute0`` stream and its own current CuPy stream wait on that event before
  the batch is yielded, so work launched on either after it never reads a
  half-copied batch, while the copy itself overlaps the compute still running.

The consumer holds the batch last yielded until it asks for the next one (or
calls :meth:`StagedReader.release`); only then are its staging buffers reused.
On CUDA the pinned buffers of a released batch take later batches (once the
copy out of them is done), and the copy stream waits for the work the consumer
launched on the batch before it reuses the batch's device memory, so a batch's
values must not be used in work launched after its release (copy what must be
kept). The pinned buffers in use are at most ``capacity + 1`` sets.
"""

from __future__ import annotations

import itertools
import threading
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.devices import HOST
from blockir.ops.transfer import map_arrays
from blockir.runtime.device import Device, Event, get_device
from blockir.runtime.place import Place

if TYPE_CHECKING:
    from blockir.runtime.cuda import CUDADevice, CUDAEvent, CUDAStream

__all__ = ["StagedReader", "map_batch", "staged"]


def map_batch(batch: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to each value of a batch: a dict (name -> value), a tuple or list (namedtuples
    too), or one value."""
    if isinstance(batch, dict):
        return {name: fn(value) for name, value in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*map(fn, batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(map(fn, batch))
    return fn(batch)


class _Staged:
    """A batch on ``place``, with the staging resources it holds until released."""

    __slots__ = ("values", "slot", "streams")

    def __init__(self, values: Any, slot: _PinnedSlot | None = None) -> None:
        self.values = values
        self.slot = slot
        self.streams: list[Any] = []  # the consumer's CUDA streams that waited for it


class _Failure:
    """The loader (or the staging) raised ``error``; the consumer re-raises it in order."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


_END = object()  # the loader is exhausted


class _Prefetch:
    """The host: batches as the loader gives them."""

    def stage(self, batch: Any) -> _Staged:
        return _Staged(batch)

    def ready(self, staged: _Staged) -> None:
        """Called in the consumer's thread before ``staged`` is yielded."""

    def release(self, staged: _Staged) -> None:
        """Called once the consumer is done with ``staged``."""


class _Put(_Prefetch):
    """A virtual CPU device: each value copied onto it."""

    def __init__(self, device: Device) -> None:
        self.device = device

    def stage(self, batch: Any) -> _Staged:
        return _Staged(map_batch(batch, self.device.put))


class _PinnedSlot:
    """The pinned host buffers one batch is staged in; reused by later batches once released."""

    def __init__(self, cupy: Any) -> None:
        self._cupy = cupy
        self._buffers: list[tuple[Any, int]] = []  # (pinned memory, its size in bytes), one per array
        self.copied: Event | None = None  # recorded after the copies that read the buffers

    def fill(self, batch: Any) -> Any:
        """``batch`` with its host arrays copied into this slot's pinned buffers (device arrays as they are)."""
        if self.copied is not None:
            self.copied.synchronize()  # the copies out of the buffers, enqueued for the batch before, are done
        index = itertools.count()
        return map_batch(batch, lambda value: map_arrays(value, lambda a: self._pin(a, next(index))))

    def _pin(self, array: Any, i: int) -> Any:
        if isinstance(array, self._cupy.ndarray):
            return array
        host = np.asarray(array)
        if i == len(self._buffers) or self._buffers[i][1] < host.nbytes:
            buffer = (self._cupy.cuda.alloc_pinned_memory(max(host.nbytes, 1)), host.nbytes)
            self._buffers[i : i + 1] = [buffer]
        pinned = np.frombuffer(self._buffers[i][0], host.dtype, host.size).reshape(host.shape)
        np.copyto(pinned, host)
        return pinned


class _PinnedCopy:
    """A CUDA device: batches through pinned host buffers onto the GPU on its copy stream."""

    def __init__(self, device: CUDADevice) -> None:
        self.device = device
        self.copy = cast("CUDAStream", device.stream("copy"))
        self.compute = cast("CUDAStream", device.stream("compute0"))
        self._free: list[_PinnedSlot] = []  # slots of released batches
        self._lock = threading.Lock()

    def stage(self, batch: Any) -> _Staged:
        with self._lock:
            slot = self._free.pop() if self._free else _PinnedSlot(self.device.xp)
        values = map_batch(slot.fill(batch), self.copy.copy)
        slot.copied = self.copy.record_event()
        return _Staged(values, slot)

    def ready(self, staged: _Staged) -> None:
        copied = cast(_PinnedSlot, staged.slot).copied
        with self.device.cuda_device:
            staged.streams = [self.compute.cuda_stream, self.device.xp.cuda.get_current_stream()]
            for stream in staged.streams:
                stream.wait_event(cast("CUDAEvent", copied).event)

    def release(self, staged: _Staged) -> None:
        with self.device.cuda_device:
            for stream in staged.streams:  # device memory freed from now on is reused by copies after this work
                self.copy.cuda_stream.wait_event(stream.record())
        with self._lock:
            self._free.append(cast(_PinnedSlot, staged.slot))


def _stage_for(device: Device) -> _Prefetch | _PinnedCopy:
    if device.name == HOST:
        return _Prefetch()
    if device.kind == "cuda":
        return _PinnedCopy(cast("CUDADevice", device))
    return _Put(device)


class _State:
    """What the producer thread shares with the reader (never the reader itself, so that dropping the reader
    closes it)."""

    def __init__(self, capacity: int, stage: _Prefetch | _PinnedCopy) -> None:
        self.capacity = capacity
        self.stage = stage
        self.ready: deque[Any] = deque()  # staged batches, then _END or a _Failure
        self.cond = threading.Condition()
        self.stopped = False
        self.held: _Staged | None = None  # the batch the consumer holds
        self.thread: threading.Thread | None = None

    def produce(self, iterator: Iterator[Any]) -> None:
        """The producer thread: load and stage batches while fewer than ``capacity`` wait, until the loader
        ends or fails, or the reader is closed. It waits on the condition (the GIL released)."""
        while True:
            with self.cond:
                while len(self.ready) >= self.capacity and not self.stopped:
                    self.cond.wait()
                if self.stopped:
                    return
            try:
                item: Any = self.stage.stage(next(iterator))
            except StopIteration:
                item = _END
            except BaseException as error:  # re-raised in the consumer, where the batch would have been
                item = _Failure(error)
            with self.cond:
                if self.stopped:
                    return
                self.ready.append(item)
                self.cond.notify_all()
            if not isinstance(item, _Staged):
                return

    def take(self) -> Any:
        """The next item the producer staged, waiting for it."""
        with self.cond:
            while not self.ready:
                self.cond.wait()
            item = self.ready.popleft()
            self.cond.notify_all()
            return item

    def release(self) -> None:
        held, self.held = self.held, None
        if held is not None:
            self.stage.release(held)

    def shutdown(self) -> None:
        """Stop the producer, join it (once the batch it is loading, if any, is loaded) and drop what is staged."""
        with self.cond:
            self.stopped = True
            self.cond.notify_all()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join()
        self.release()
        self.ready.clear()


class StagedReader(Iterator[Any]):
    """The iterator :func:`staged` returns; also a context manager that closes it."""

    def __init__(self, iterator: Iterator[Any], device: Device, capacity: int) -> None:
        self.device = device
        self.capacity = capacity
        self._state = _State(capacity, _stage_for(device))
        self._closed = False
        self._state.thread = threading.Thread(
            target=self._state.produce, args=(iterator,), name=f"blockir-staged-{device.name}", daemon=True
        )
        self._close = weakref.finalize(self, self._state.shutdown)
        self._state.thread.start()

    def __iter__(self) -> StagedReader:
        return self

    def __next__(self) -> Any:
        self.release()
        if self._closed:
            raise StopIteration
        item = self._state.take()
        if item is _END:
            self.close()
            raise StopIteration
        if isinstance(item, _Failure):
            self.close()
            raise item.error
        self._state.stage.ready(item)
        self._state.held = item
        return item.values

    def release(self) -> None:
        """Give back the batch last yielded: its staging buffers may be reused from now on (asking for the
        next batch does this)."""
        self._state.release()

    def close(self) -> None:
        """Stop loading, join the producer thread and release every batch; closing twice is a no-op. The
        reader also closes when it is garbage collected (a ``for`` loop left with ``break``)."""
        self._closed = True
        self._close()

    def __enter__(self) -> StagedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"StagedReader({self.device.name!r}, capacity={self.capacity})"


def staged(iterable: Iterable[Any], place: str | Place, capacity: int = 2) -> StagedReader:
    """Yield the batches of ``iterable``, loaded in a background thread and already on ``place``.

    A batch is a dict (name -> value), a tuple or list of values, or one value;
    values are numpy arrays, :class:`~blockir.ops.values.LoDTensor` or
    :class:`~blockir.ops.values.SelectedRows`, and each batch comes out with the
    same structure. ``place`` is a device string or a
    :class:`~blockir.runtime.place.Place`: on the host (``cpu``) batches are only
    prefetched (the loader's own objects are yielded), on ``cpu:N`` they are
    copied, on ``cuda:N`` they go through pinned host memory on the device's
    copy stream (the module docstring says how compute is kept from reading a
    half-copied batch and when buffers are reused).

    The producer thread loads at most ``capacity`` (>= 1) batches ahead of the
    consumer: it waits, without holding the GIL, while ``capacity`` staged
    batches wait to be taken. Loading overlaps the consumer's work as far as
    both release the GIL (I/O, decompression, numpy and BLAS do). An error the
    loader raises is raised by the consumer where the failing batch would have
    come, after the batches before it; the reader is then finished. Leaving the
    ``for`` loop early, :meth:`StagedReader.close` or the ``with`` block stop
    the producer and join its thread; it finishes the batch it is loading, if
    any, first. The loader itself is not closed.
    """
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
        raise BlockirError(f"staged: capacity must be an int >= 1, got {capacity!r}")
    device = get_device(str(place) if isinstance(place, Place) else place, "the staged reader's place")
    return StagedReader(iter(iterable), device, capacity)
