"""The cost model of automatic placement: how long an op takes on a device, and a value to move between two.

A :class:`CostModel` answers two questions, in seconds:

- :meth:`CostModel.op_seconds`: an op on a device. A time *measured* by a calibration run (the executor's
  trace, :mod:`blockir.runtime.calibration`) for the op's type, input shapes and device kind, scaled by the
  ratio of the op's estimated work at the shapes asked for over its work at the calibrated shapes (so a
  calibration at one batch size predicts another); else the *fallback* estimate: the device's per-op
  overhead plus the larger of its FLOPs over the device's measured FLOP rate and its bytes (inputs and
  outputs) over the device's measured memory bandwidth. FLOPs come from a formula per op type
  (:data:`FLOPS`: matrix products, convolutions, lookups; their ``*_grad`` ops count one forward product
  per gradient they write), else one per output element.
- :meth:`CostModel.copy_seconds`: a value between two devices: the link's latency plus bytes over its
  bandwidth (zero on one device).

Shapes come from the program's variables; every ``-1`` dimension is the batch size (``batch``: the
calibration feed's, or what a pass says). A model is saved as JSON (:meth:`CostModel.save`) keyed by the
machine's description (:func:`machine`): :meth:`CostModel.load` refuses a file made on another machine
(the synthetic models of tests and simulations, ``"machine": "synthetic"``, load anywhere). A file made
on another program is used as it is: the ops it has no entry for get the fallback, and
:attr:`CostModel.filled` counts them. Without a file, :meth:`CostModel.for_machine` has the fallback
alone, with this machine's device throughput measured once per process (:func:`measure_speeds`).

The file::

    {"format": 1, "machine": "x86_64 Linux, Intel(R) Xeon(R) ..., 2 cores", "batch": 64,
     "speeds": {"cpu": {"flops": 5.1e10, "bandwidth": 9.8e9, "overhead": 4e-06}},
     "links": {"cpu->cpu": {"latency": 2e-06, "bandwidth": 8.1e9}},
     "ops": {"mul X=Bx512 Y=512x512 @cpu": {"seconds": 0.00031, "work": 0.00029, "runs": 3}},
     "programs": ["3f2a...@64"]}

``speeds`` and ``links`` are keyed by device, always with its index (``cpu:0`` is the host, ``cpu:1``), or
device kind (``cpu``, ``cuda``), the device first; ``ops`` by :func:`op_key`; ``work`` is the fallback's
estimate at the calibrated shapes; ``programs`` names the programs calibrated (digest and batch size).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import platform
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Variable
from blockir.ir.devices import device_kind, parse_device
from blockir.ir.proto_io import atomic_write

__all__ = [
    "FLOPS",
    "SYNTHETIC",
    "CostModel",
    "DeviceSpeed",
    "Link",
    "device_key",
    "machine",
    "measure_speeds",
    "op_key",
]

FORMAT = 1
SYNTHETIC = "synthetic"
MAX_COST_FILE_BYTES = 64 << 20

Shapes = Mapping[str, list[tuple[int, ...]]]  # slot -> the shape of each of its variables


@dataclass(frozen=True)
class DeviceSpeed:
    """What a device does per second: FLOPs, bytes of memory traffic; and its overhead per op, in seconds."""

    flops: float
    bandwidth: float
    overhead: float


@dataclass(frozen=True)
class Link:
    """A copy between two devices: ``latency`` seconds plus bytes over ``bandwidth`` (bytes per second)."""

    latency: float
    bandwidth: float


# Assumed, not measured: a GPU when this machine has none to calibrate on (an H100-class card's order of
# magnitude), and its PCIe link. ``blockir profile`` on a machine with GPUs replaces them by measurements.
_ASSUMED = {"cuda": DeviceSpeed(flops=2e13, bandwidth=1.5e12, overhead=8e-6)}
_ASSUMED_LINKS = {
    "cpu->cuda": Link(1e-5, 1.2e10),
    "cuda->cpu": Link(1e-5, 1.2e10),
    "cuda->cuda": Link(8e-6, 5e10),
}


@functools.cache
def machine() -> str:
    """This machine's description, which cost files are keyed by: architecture, system, CPU model, cores."""
    model = platform.processor() or "unknown CPU"
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), model)
    return f"{platform.machine()} {platform.system()}, {model}, {os.cpu_count() or 1} cores"


@functools.cache
def measure_speeds() -> tuple[DeviceSpeed, Link]:
    """The host's FLOP rate (float32 matrix products), memory bandwidth and per-op overhead, and the link
    between two CPU devices (a copy), measured once per process (about a tenth of a second)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((256, 256), dtype=np.float32)
    big = np.ones(1 << 21, dtype=np.float32)  # 8 MiB
    small = np.ones(16, dtype=np.float32)
    matmul = _best(lambda: a @ a)
    copy = _best(lambda: big.copy())
    tiny = _best(lambda: small + small)
    tiny_copy = _best(lambda: small.copy())
    bandwidth = 2 * big.nbytes / copy  # a copy reads and writes every byte
    speed = DeviceSpeed(flops=2 * 256**3 / matmul, bandwidth=bandwidth, overhead=tiny)
    return speed, Link(latency=tiny_copy, bandwidth=big.nbytes / copy)


def _best(fn: Callable[[], object], rounds: int = 9) -> float:
    """The fastest of ``rounds`` timed calls of ``fn`` after two untimed ones, in seconds (at least a nanosecond)."""
    fn()
    fn()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return max(min(times), 1e-9)


# -- work of an op ----------------------------------------------------------------------------------


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


def _first(shapes: Shapes, slot: str) -> tuple[int, ...] | None:
    found = shapes.get(slot)
    return found[0] if found else None


def _matrix(shape: tuple[int, ...], num_col_dims: int) -> tuple[int, int]:
    return _numel(shape[:num_col_dims]), _numel(shape[num_col_dims:])


def _mul_flops(shapes: Shapes, attrs: Mapping[str, Any]) -> float | None:
    x, y = _first(shapes, "X"), _first(shapes, "Y")
    if x is None or y is None:
        return None
    m, k = _matrix(x, int(attrs.get("x_num_col_dims", 1)))
    _, n = _matrix(y, int(attrs.get("y_num_col_dims", 1)))
    return 2.0 * m * k * n


def _fc_flops(shapes: Shapes, attrs: Mapping[str, Any]) -> float | None:
    x, w = _first(shapes, "Input"), _first(shapes, "W")
    if x is None or w is None:
        return None
    m, k = _matrix(x, int(attrs.get("in_num_col_dims", 1)))
    return 2.0 * m * k * _numel(w[1:])


def _matmul_flops(shapes: Shapes, attrs: Mapping[str, Any]) -> float | None:
    x, y = _first(shapes, "X"), _first(shapes, "Y")
    if x is None or y is None or not x or not y:
        return None
    tx = bool(attrs.get("transpose_X", attrs.get("trans_x", False)))
    ty = bool(attrs.get("transpose_Y", attrs.get("trans_y", False)))
    x2 = (1, *x) if len(x) == 1 else x
    y2 = (*y, 1) if len(y) == 1 else y
    m, k = (x2[-1], x2[-2]) if tx else (x2[-2], x2[-1])
    n = y2[-2] if ty else y2[-1]
    batch = max(_numel(x2[:-2]), _numel(y2[:-2]))
    return 2.0 * batch * m * k * n


def _conv_flops(shapes: Shapes, attrs: Mapping[str, Any]) -> float | None:
    x, w = _first(shapes, "Input"), _first(shapes, "Filter")
    if x is None or w is None or len(x) < 3 or len(w) < 3:
        return None
    # out channels x (in channels / groups) x kernel, once per output position (same-size output as a bound)
    strides = attrs.get("strides") or (1,) * (len(x) - 2)
    positions = _numel(tuple(-(-d // max(int(s), 1)) for d, s in zip(x[2:], strides)))
    return 2.0 * x[0] * positions * _numel(w)


def _lookup_flops(shapes: Shapes, attrs: Mapping[str, Any]) -> float | None:
    ids, w = _first(shapes, "Ids"), _first(shapes, "W")
    if ids is None or w is None:
        return None
    return float(_numel(ids) * _numel(w[1:]))


# Per op type: FLOPs from the input shapes (slot -> shapes) and attributes; None when the slots are missing.
FLOPS: dict[str, Callable[[Shapes, Mapping[str, Any]], float | None]] = {
    "mul": _mul_flops,
    "fc": _fc_flops,
    "matmul": _matmul_flops,
    "matmul_v2": _matmul_flops,
    "conv2d": _conv_flops,
    "depthwise_conv2d": _conv_flops,
    "conv3d": _conv_flops,
    "lookup_table": _lookup_flops,
    "lookup_table_v2": _lookup_flops,
}


def op_key(op_type: str, shapes: Shapes, kind: str) -> str:
    """The key of an op's measured time: ``TYPE SLOT=AxB ... @KIND``, a ``-1`` dimension written ``B``."""
    parts = [op_type]
    for slot in sorted(shapes):
        dims = ",".join("x".join("B" if d == -1 else str(d) for d in s) for s in shapes[slot])
        parts.append(f"{slot}={dims}")
    return f"{' '.join(parts)} @{kind}"


def device_key(device: str) -> str:
    """A device with its index, ``cpu:0`` for the host: how cost files name a device (``cpu`` is the kind)."""
    kind, index = parse_device(device, "a device")
    return f"{kind}:{index}"


def _key(text: str) -> str:
    """A key of a cost file's ``speeds`` or one side of a ``links`` key: a device kind, or a device with its index
    (ValueError naming it otherwise)."""
    if text in ("cpu", "cuda"):
        return text
    try:
        return device_key(text)
    except BlockirError as e:
        raise ValueError(str(e)) from None


def _var_shape(block: Block, name: str) -> tuple[int, ...] | None:
    try:
        var = block.find_var_recursive(name)
    except BlockirError:
        return None
    return tuple(var.shape) if var.shape is not None else None


def _itemsize(var: Variable) -> int:
    try:
        return np.dtype(var.dtype).itemsize if var.dtype else 4
    except TypeError:
        return 2  # bfloat16 and other names numpy lacks


def _resolved(shape: tuple[int, ...], batch: int) -> tuple[int, ...]:
    return tuple(batch if d < 0 else d for d in shape)


# -- the model ---------------------------------------------------------------------------------------


@dataclass
class CostModel:
    """Op and copy times on this machine's devices (module docstring). ``filled`` holds the keys of the ops
    answered by the fallback although the model has measurements (a model made on another program)."""

    machine: str
    batch: int = 1
    speeds: dict[str, DeviceSpeed] = field(default_factory=dict)
    links: dict[str, Link] = field(default_factory=dict)
    ops: dict[str, dict[str, float]] = field(default_factory=dict)
    programs: list[str] = field(default_factory=list)  # what calibrations measured: DIGEST@BATCH of each program
    source: str = ""  # the file it was loaded from, for messages
    filled: set[str] = field(default_factory=set)
    used: set[str] = field(default_factory=set)
    # what ops compute by (op, batch): a pass asks again and again; an op changed since is not seen
    _work: dict[tuple[Operator, int], tuple[float, float, str]] = field(default_factory=dict, repr=False, compare=False)
    _speeds: dict[str, DeviceSpeed] = field(default_factory=dict, repr=False, compare=False)
    _links: dict[tuple[str, str], Link] = field(default_factory=dict, repr=False, compare=False)
    _bytes: dict[tuple[Block, str, int], float] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def for_machine(cls, batch: int = 1) -> CostModel:
        """The fallback model of this machine: its host's measured speeds (:func:`measure_speeds`), no ops."""
        speed, link = measure_speeds()
        return cls(machine(), batch, {"cpu": speed}, {"cpu->cpu": link})

    # -- files ---------------------------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CostModel:
        """The model saved in ``path``; an error naming the file when it is not one, or is another machine's."""
        where = str(path)
        try:
            size = os.path.getsize(path)
            if size > MAX_COST_FILE_BYTES:
                raise BlockirError(f"cost file {where}: {size} bytes, more than the {MAX_COST_FILE_BYTES} allowed")
            data = json.loads(Path(path).read_text())
        except OSError as e:
            raise BlockirError(f"cost file {where}: {e.strerror or e}") from None
        except (ValueError, UnicodeDecodeError) as e:
            raise BlockirError(f"cost file {where}: not JSON ({e})") from None
        try:
            model = cls.from_json(data)
        except (KeyError, TypeError, ValueError) as e:
            raise BlockirError(f"cost file {where}: not a blockir cost file ({type(e).__name__}: {e})") from None
        if model.machine not in (machine(), SYNTHETIC):
            raise BlockirError(
                f"cost file {where} was measured on another machine ({model.machine}); this one is "
                f"{machine()}: run 'blockir profile' here"
            )
        model.source = where
        return model

    @classmethod
    def from_json(cls, data: Any) -> CostModel:
        """The model of a parsed cost file (KeyError, TypeError or ValueError when malformed)."""
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError(f"expected an object with format {FORMAT}")
        speeds = {
            k: DeviceSpeed(float(v["flops"]), float(v["bandwidth"]), float(v["overhead"]))
            for k, v in data["speeds"].items()
        }
        links = {k: Link(float(v["latency"]), float(v["bandwidth"])) for k, v in data.get("links", {}).items()}
        ops = {str(k): {n: float(x) for n, x in v.items()} for k, v in data.get("ops", {}).items()}
        speeds = {_key(k): v for k, v in speeds.items()}
        links = {"->".join(map(_key, k.split("->", 1))): v for k, v in links.items()}
        if any(s.flops <= 0 or s.bandwidth <= 0 or s.overhead < 0 for s in speeds.values()):
            raise ValueError("speeds must be positive")
        programs = [str(p) for p in data.get("programs", [])]
        return cls(str(data["machine"]), int(data.get("batch", 1)), speeds, links, ops, programs)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "machine": self.machine,
            "batch": self.batch,
            "speeds": {k: vars(v) for k, v in sorted(self.speeds.items())},
            "links": {k: vars(v) for k, v in sorted(self.links.items())},
            "ops": dict(sorted(self.ops.items())),
            "programs": self.programs,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the model to ``path`` as JSON (atomically)."""
        atomic_write(Path(path), (json.dumps(self.to_json(), indent=1) + "\n").encode())

    def merged(self, other: CostModel) -> CostModel:
        """This model with ``other``'s speeds, links and measurements added (``other``'s win)."""
        return CostModel(
            self.machine,
            other.batch,
            {**self.speeds, **other.speeds},
            {**self.links, **other.links},
            {**self.ops, **other.ops},
            list(dict.fromkeys([*self.programs, *other.programs])),
            self.source,
        )

    # -- answers -------------------------------------------------------------------------------------
    def speed(self, device: str) -> DeviceSpeed:
        """The speed of ``device``: its own entry, else its kind's, else the host's (an assumed GPU's for cuda)."""
        found = self._speeds.get(device)
        if found is None:
            found = self._speeds[device] = self._speed(device)
        return found

    def _speed(self, device: str) -> DeviceSpeed:
        kind = device_kind(device)
        found = (
            self.speeds.get(device_key(device)) or self.speeds.get(kind) or _ASSUMED.get(kind) or self.speeds.get("cpu")
        )
        return found or measure_speeds()[0]

    def link(self, src: str, dst: str) -> Link:
        """The link from ``src`` to ``dst``: its own entry, else its kinds', else an assumed one."""
        found = self._links.get((src, dst))
        if found is None:
            found = self._links[(src, dst)] = self._link(src, dst)
        return found

    def _link(self, src: str, dst: str) -> Link:
        kinds = f"{device_kind(src)}->{device_kind(dst)}"
        found = (
            self.links.get(f"{device_key(src)}->{device_key(dst)}")
            or self.links.get(kinds)
            or _ASSUMED_LINKS.get(kinds)
        )
        return found or self.links.get("cpu->cpu") or measure_speeds()[1]

    def copy_seconds(self, nbytes: float, src: str, dst: str) -> float:
        """Seconds to copy ``nbytes`` from ``src`` to ``dst`` (0 on one device)."""
        if src == dst:
            return 0.0
        link = self.link(src, dst)
        return link.latency + nbytes / link.bandwidth

    def var_bytes(self, block: Block, name: str, batch: int | None = None) -> float:
        """Bytes of variable ``name`` (as ``block`` sees it), each ``-1`` dimension the batch size."""
        batch = self.batch if batch is None else batch
        memo = (block, name, batch)
        found = self._bytes.get(memo)
        if found is None:
            try:
                var = block.find_var_recursive(name)
            except BlockirError:
                var = None
            shape = None if var is None or var.shape is None else _resolved(tuple(var.shape), batch)
            found = self._bytes[memo] = 0.0 if var is None or shape is None else float(_numel(shape) * _itemsize(var))
        return found

    def shapes(self, op: Operator) -> dict[str, list[tuple[int, ...]]]:
        """The shapes of ``op``'s inputs by slot, unresolved (``-1`` kept)."""
        found: dict[str, list[tuple[int, ...]]] = {}
        for slot, names in op.inputs.items():
            shapes = [s for s in (_var_shape(op.block, n) for n in names) if s is not None]
            if shapes:
                found[slot] = shapes
        return found

    def work(self, op: Operator, batch: int | None = None) -> tuple[float, float, str]:
        """What ``op`` computes, whatever the device: its FLOPs (else its output elements), the bytes of its
        inputs and outputs, and its key without the device kind (:func:`op_key`); remembered per op object."""
        batch = self.batch if batch is None else batch
        found = self._work.get((op, batch))
        if found is not None:
            return found
        unresolved = self.shapes(op)
        shapes = {slot: [_resolved(s, batch) for s in found] for slot, found in unresolved.items()}
        nbytes = sum(self.var_bytes(op.block, n, batch) for n in (*op.input_names(), *op.output_names()))
        out_elements = sum(self.var_bytes(op.block, n, batch) / 4 for n in op.output_names())
        forward, grad, _ = op.type.partition("_grad")
        formula = FLOPS.get(forward)
        flops = formula(shapes, op.attrs) if formula is not None else None
        if flops is not None and grad:  # a gradient op: one product per gradient it writes
            flops *= max(1, sum(1 for n in op.output_names() if n.endswith("@GRAD")))
        found = (out_elements if flops is None else flops), nbytes, op_key(op.type, unresolved, "").removesuffix(" @")
        self._work[(op, batch)] = found
        return found

    def work_seconds(self, op: Operator, device: str, batch: int | None = None) -> float:
        """The fallback estimate of ``op`` on ``device``: overhead plus the larger of FLOPs over the FLOP rate
        and bytes over the bandwidth."""
        flops, nbytes, _ = self.work(op, batch)
        speed = self.speed(device)
        return speed.overhead + max(flops / speed.flops, nbytes / speed.bandwidth)

    def op_seconds(self, op: Operator, device: str, batch: int | None = None) -> float:
        """Seconds ``op`` takes on ``device``: measured and scaled to the shapes asked for, else the fallback
        (remembered per op object: ask a new model about an op changed since)."""
        key = f"{self.work(op, batch)[2]} @{device_kind(device)}"
        entry = self.ops.get(key)
        estimate = self.work_seconds(op, device, batch)
        if entry is None:
            if self.ops:
                self.filled.add(key)
            return estimate
        self.used.add(key)
        scale = estimate / entry["work"] if entry.get("work", 0) > 0 else 1.0
        return entry["seconds"] * scale

    def describe(self) -> str:
        """One line: where the model comes from and how much of it answered."""
        source = f"cost file {self.source}" if self.source else "the fallback (FLOPs and bytes)"
        line = f"costs from {source}, machine {self.machine}, batch {self.batch}"
        if self.ops:
            line += f": {len(self.used)} measured op entries used, {len(self.filled)} ops filled by the fallback"
        return line
