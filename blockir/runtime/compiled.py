"""``CompiledProgram``: a program with data parallelism, as Fluid 1.x's ``CompiledProgram`` builds one.

``CompiledProgram(main).with_data_parallel(loss_name=..., places=[...])`` runs
``main`` replicated over ``places`` when an :class:`~blockir.runtime.Executor`
runs it: the ``data-parallel`` pass (:mod:`blockir.passes.data_parallel`) makes
the replicated program, once per set of fetch targets (they are gathered from
the replicas along axis 0), and the executor runs it like any program. Over
``cuda:N`` places it reduces dense gradients with collectives (one
``device_allreduce`` per gradient: NCCL when CuPy has it).
``docs/data_parallel.md`` has the details.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.core import Program
from blockir.ir.devices import checked_device, device_kind
from blockir.ops.values import LoDTensor
from blockir.passes.data_parallel import DataParallel
from blockir.passes.manager import run as run_pipeline
from blockir.runtime.cuda import device_names
from blockir.runtime.memory import keep_freed_memory

__all__ = ["BuildStrategy", "CompiledProgram", "ExecutionStrategy", "cpu_places", "cuda_places"]


def cpu_places(count: int | None = None) -> list[str]:
    """``count`` host places (default: one per CPU core): replicas as threads over one copy of the parameters."""
    count = (os.cpu_count() or 1) if count is None else count
    if count < 1:
        raise BlockirError(f"cpu_places needs a count >= 1, got {count}")
    return ["cpu"] * count


def cuda_places(device_ids: Sequence[int] | None = None) -> list[str]:
    """``cuda:N`` for each id (default: every GPU CuPy sees)."""
    if device_ids is None:
        return device_names()
    return [f"cuda:{i}" for i in device_ids]


class BuildStrategy:
    """How the replicated program is built (Fluid's ``BuildStrategy``)."""

    class ReduceStrategy(enum.Enum):
        AllReduce = "all-reduce"  # every device reduces every gradient and applies every update
        Reduce = "reduce"  # each parameter has one owner device, which updates it and broadcasts it

    class GradientScaleStrategy(enum.Enum):
        CoeffNumDevice = "coeff-num-device"  # each replica's gradient weighs its share of the batch (1/N if even)
        One = "one"  # the replicas' gradients are summed

    def __init__(self) -> None:
        self.reduce_strategy = BuildStrategy.ReduceStrategy.AllReduce
        self.gradient_scale_strategy = BuildStrategy.GradientScaleStrategy.CoeffNumDevice
        # All-reduce dense gradients over devices with one collective each (the pass's collective=true): NCCL
        # on GPUs. None: on for cuda:N places, off for cpu:N (there one reduction per device, in parallel).
        self.collective: bool | None = None


@dataclass
class ExecutionStrategy:
    """How the replicated program runs (Fluid's ``ExecutionStrategy``).

    ``keep_freed_memory`` (default True): :meth:`CompiledProgram.with_data_parallel` calls
    :func:`blockir.runtime.keep_freed_memory`, so that glibc keeps freed memory for reuse in this process
    (as Paddle's allocator keeps what it frees): replicas on threads otherwise fault their large
    temporaries in again every step, and slow each other down doing so. Process-wide; False leaves
    malloc as it is.
    """

    keep_freed_memory: bool = True


class CompiledProgram:
    """A program to run with data parallelism (:meth:`with_data_parallel`); an executor runs it like a program."""

    def __init__(self, program: Program) -> None:
        if not isinstance(program, Program):
            raise BlockirError(f"CompiledProgram needs a Program, got {type(program).__name__}")
        self.program = program
        self.places: list[str] = []
        self.loss_name = ""
        self.build_strategy = BuildStrategy()
        self.exec_strategy = ExecutionStrategy()
        self._built: dict[tuple[int, tuple[str, ...], bool], Program] = {}

    def with_data_parallel(
        self,
        loss_name: str,
        build_strategy: BuildStrategy | None = None,
        exec_strategy: ExecutionStrategy | None = None,
        places: Sequence[str] | None = None,
    ) -> CompiledProgram:
        """Replicate the program over ``places`` (default :func:`cpu_places`), one replica per place."""
        self.loss_name = getattr(loss_name, "name", loss_name)
        self.places = [checked_device(str(p), "a place of with_data_parallel") for p in (places or cpu_places())]
        self.build_strategy = build_strategy or BuildStrategy()
        self.exec_strategy = exec_strategy or ExecutionStrategy()
        if self.exec_strategy.keep_freed_memory:
            keep_freed_memory()
        self._built.clear()
        self.replicated(())  # errors (an unknown loss, no backward) now, not at the first run
        return self

    def pass_for(self, fetch: Sequence[str], sections: bool = False) -> DataParallel:
        """The ``data-parallel`` pass this program runs as when fetching ``fetch`` (with ``sections``: fed a
        list of dicts)."""
        if not self.places:
            raise BlockirError("CompiledProgram: call with_data_parallel(loss_name, places=...) before running it")
        return DataParallel(
            places=tuple(self.places),
            loss=self.loss_name,
            strategy=self.build_strategy.reduce_strategy.value,
            scale=self.build_strategy.gradient_scale_strategy.value,
            fetch=tuple(n for n in dict.fromkeys(fetch) if n != self.loss_name),
            sections=sections,
            collective=(
                all(device_kind(p) == "cuda" for p in self.places)
                if self.build_strategy.collective is None
                else self.build_strategy.collective
            ),
        )

    def replicated(self, fetch: Sequence[str], sections: bool = False) -> Program:
        """The replicated program (cached per state of the program, fetch targets and ``sections``)."""
        p = self.pass_for(fetch, sections)
        key = (self.program.mutation, p.fetch, sections)
        built = self._built.get(key)
        if built is None:
            if len(self._built) >= 16:
                self._built.clear()
            built = self._built[key] = run_pipeline(self.program, [p], snapshots=False)[0]
        return built

    def merged_feed(self, feed: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
        """``feed`` as one batch: a list of per-replica dicts (Fluid's form) is joined along axis 0, in order,
        with the sizes of the parts (``NAME@SECTIONS``) so that replica i computes on dict i."""
        if isinstance(feed, Mapping):
            return feed
        parts = list(feed)
        if len(parts) != len(self.places):
            raise BlockirError(f"a list of feeds needs one dict per place ({len(self.places)}), got {len(parts)}")
        names = set(parts[0])
        for k, part in enumerate(parts):
            if set(part) != names:
                raise BlockirError(f"feed {k} names {sorted(part)}, feed 0 names {sorted(names)}: give the same names")
        joined = {name: _join([part[name] for part in parts]) for name in parts[0]}
        for name in parts[0]:  # each replica gets its own dict's rows (the data-parallel pass's x@SECTIONS)
            joined[f"{name}@SECTIONS"] = np.array([_count(part[name]) for part in parts], dtype=np.int64)
        return joined

    def __repr__(self) -> str:
        return f"CompiledProgram(places={self.places}, loss_name={self.loss_name!r})"


def _count(value: Any) -> int:
    """Rows of a batch, or sequences of a LoD tensor: what split_batch splits."""
    return len(value.lod[0]) - 1 if isinstance(value, LoDTensor) else int(np.shape(value)[0])


def _join(values: list[Any]) -> Any:
    if all(isinstance(v, LoDTensor) for v in values):
        data = np.concatenate([np.asarray(v.data) for v in values])
        lengths = [n for v in values for n in v.lengths(0)]
        if any(len(v.lod) != 1 for v in values):
            raise BlockirError("a list of feeds joins LoD tensors of one level only")
        return LoDTensor.from_lengths(data, lengths)
    return np.concatenate([np.asarray(v) for v in values])
