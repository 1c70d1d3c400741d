"""``CompiledProgram``: a program with a build strategy and data parallelism, as Fluid's ``CompiledProgram``.

``CompiledProgram(main, build_strategy=...)`` runs ``main`` with the fusion
passes its :class:`BuildStrategy` asks for (the executor applies them to any
program, with its own strategy; with data parallelism, to the replicated
program). ``.with_data_parallel(loss_name=..., places=[...])`` runs
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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.ir.core import Program
from blockir.ir.devices import checked_device, device_kind
from blockir.ops.values import LoDTensor
from blockir.passes.data_parallel import DataParallel
from blockir.passes.fuse import Fuse
from blockir.passes.manager import run as run_pipeline
from blockir.runtime.cuda import device_names
from blockir.runtime.memory import keep_freed_memory

__all__ = ["BuildStrategy", "CompiledProgram", "ExecutionStrategy", "Fusions", "cpu_places", "cuda_places"]

AUTO_PLACE_WITH_DATA_PARALLEL = (
    "BuildStrategy.auto_place cannot be combined with data parallelism (with_data_parallel) yet: turn one off"
)

# BuildStrategy.fusions(): the fuse pipeline's conv_bn, conv_add_act, bn_act, fc, elementwise_act, softmax_ce,
# optimizer, max_pool_index
Fusions = tuple[bool, bool, bool, bool, bool, bool, bool, bool]
# BuildStrategy.placing(): the devices of automatic placement and its cost file ('' for a calibration of its own)
Placing = tuple[tuple[str, ...], str]


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
    """How a program is built into what runs (Fluid's ``BuildStrategy``): the fusion passes, and for data
    parallelism how the replicated program is built.

    Fusion (:mod:`blockir.passes.fuse`), each on by default (Paddle's are off): the fused ops compute what the
    ops they replace compute, to float32 rounding, in fewer steps and keeping fewer intermediate values.
    They apply to the executor's compiled copy of a program only: the program a user holds, and what
    ``save_inference_model`` or the Paddle export write, stay unfused.

    Convolutional networks (:mod:`blockir.passes.fuse_conv`), first:

    - ``fuse_conv_bn`` (Paddle Inference's ``conv_bn_fuse_pass``, blockir's flag): ``fold-conv-bn``, conv2d
      (+ elementwise_add bias) + batch_norm with global statistics (inference: ``is_test``, what
      ``clone(for_test=True)``, ``load_inference_model`` and ``blockir run`` give) folded into the convolution's
      filter and bias by a ``conv_bn_fold`` op and a ``fused_conv2d_add_act``. The folded values are the plan's:
      the scope's parameters are never written. They are computed at the first run and again whenever a
      parameter's array is replaced (``Scope.set``, a load, a startup run) or written in place by the executor
      (a training program's optimizer step on the same scope: train, then run its ``clone(for_test=True)``); a
      change written into a parameter's array by code outside the executor is not seen (set it again);
    - ``fuse_conv_add_act`` (blockir's flag; Paddle's ``conv_elementwise_add_act_fuse_pass``):
      ``fuse-conv-add-act``, conv2d + bias, then a residual add and relu, sigmoid or tanh, into Paddle's
      ``fused_conv2d_add_act`` (inference programs: it has no gradient);
    - ``fuse_bn_act_ops`` (Paddle's name): ``fuse-bn-act``, batch_norm + relu, sigmoid or tanh into blockir's
      ``batch_norm_act`` and their gradient ops into ``batch_norm_act_grad``, in training and inference (not a
      Paddle op: the Paddle export refuses it, and exports are unfused anyway);
    - ``max_pool_with_index`` (blockir's flag): ``max-pool-with-index`` (:mod:`blockir.passes.pool_index`), in
      training, a max ``pool2d`` and its ``pool2d_grad`` into ``max_pool2d_with_index``, which keeps the
      position of each maximum (a new ``Mask``), and its gradient, one scatter to those positions, where the two
      compute the same (NCHW, the same padding on both sides of each axis, not adaptive).

    The others:

    - ``fuse_gemm_epilogue`` (Paddle's name for fusing a matrix product, its bias and activation):
      ``fuse-fc``, mul + elementwise_add (+ relu, sigmoid, tanh) and their gradient ops into fc and fc_grad;
    - ``fuse_elewise_add_act_ops`` (Paddle's): ``fuse-elementwise-act``, elementwise_add or elementwise_mul +
      activation and their gradient ops into fused_elemwise_activation and its gradient;
    - ``fuse_softmax_with_cross_entropy`` (blockir's own; Paddle has no such flag): ``fuse-softmax-ce``,
      softmax + cross_entropy and their gradient ops into softmax_with_cross_entropy and its gradient, and
      those with a mean of the loss into softmax_with_cross_entropy_mean and its gradient;
    - ``fuse_all_optimizer_ops`` (Paddle's): ``fuse-fc-sgd``, an fc_grad and the sgd updates of its W and Bias
      into fc_grad_sgd (to float32 rounding: W's update is one gemm accumulating into W), then
      ``fuse-optimizer``, the sgd, momentum or adam updates left into one
      op per group over buffers made by coalesce_tensor, each parameter and its state a view of its part
      (the scope keeps the views: setting or loading a parameter copies into its view). Each parameter gets
      exactly the update it got alone. With data parallelism it fuses the replicated program's updates of
      each stream over threads on one device; over several devices none (each parameter is read on every
      device). ``AsyncExecutor`` turns it off (Hogwild shares the parameters' own arrays).
    """

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
        self.fuse_conv_bn = True
        self.fuse_conv_add_act = True
        self.fuse_bn_act_ops = True
        self.fuse_gemm_epilogue = True
        self.fuse_elewise_add_act_ops = True
        self.fuse_softmax_with_cross_entropy = True
        self.fuse_all_optimizer_ops = True
        self.max_pool_with_index = True
        # Automatic placement (the auto-place pass, docs/placement.md): the ops nobody pinned go over
        # place_devices by a list scheduler on measured costs: cost_file's (blockir profile), else a calibration
        # run of the executor's own, cached per machine (blockir.runtime.calibration). Not with data parallelism.
        self.auto_place = False
        self.place_devices: list[str] = []
        self.cost_file: str | None = None

    def fusions(self) -> Fusions:
        """The fusion flags, in the order of the ``fuse`` pipeline's options (``conv_bn``, ``conv_add_act``,
        ``bn_act``, ``fc``, ``elementwise_act``, ``softmax_ce``, ``optimizer``, ``max_pool_index``): what an
        executor caches its plans by."""
        return (
            bool(self.fuse_conv_bn),
            bool(self.fuse_conv_add_act),
            bool(self.fuse_bn_act_ops),
            bool(self.fuse_gemm_epilogue),
            bool(self.fuse_elewise_add_act_ops),
            bool(self.fuse_softmax_with_cross_entropy),
            bool(self.fuse_all_optimizer_ops),
            bool(self.max_pool_with_index),
        )

    def placing(self) -> Placing | None:
        """The auto-placement asked for: (devices, cost file or ''), None when ``auto_place`` is off; an error
        when it is on without devices."""
        if not self.auto_place:
            return None
        devices = tuple(
            dict.fromkeys(checked_device(str(d), "BuildStrategy.place_devices") for d in self.place_devices)
        )
        if not devices:
            raise BlockirError("BuildStrategy.auto_place needs place_devices, e.g. ['cpu:0', 'cpu:1']")
        return devices, str(self.cost_file or "")


def build_strategy_or_default(strategy: BuildStrategy | None) -> BuildStrategy:
    """``strategy``, or a new :class:`BuildStrategy` when None; an error when it is not one."""
    if strategy is None:
        return BuildStrategy()
    if not isinstance(strategy, BuildStrategy):
        raise BlockirError(f"build_strategy must be a BuildStrategy, got {type(strategy).__name__}")
    return strategy


def fuse_pipeline(fusions: Fusions, keep: Iterable[str]) -> Fuse | None:
    """The ``fuse`` pipeline that :meth:`BuildStrategy.fusions` asks for, keeping the values of ``keep``
    (fetched and fed); None when every fusion is off."""
    if not any(fusions):
        return None
    conv_bn, conv_add_act, bn_act, fc, elementwise_act, softmax_ce, optimizer, max_pool_index = fusions
    return Fuse(
        keep=tuple(sorted(set(keep))),
        conv_bn=conv_bn,
        conv_add_act=conv_add_act,
        bn_act=bn_act,
        fc=fc,
        elementwise_act=elementwise_act,
        softmax_ce=softmax_ce,
        optimizer=optimizer,
        max_pool_index=max_pool_index,
    )


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
    """A program to run with ``build_strategy`` (default: :class:`BuildStrategy`'s defaults), replicated when
    :meth:`with_data_parallel` asks; an executor runs it like a program, fused as the strategy says."""

    def __init__(self, program: Program, build_strategy: BuildStrategy | None = None) -> None:
        if not isinstance(program, Program):
            raise BlockirError(f"CompiledProgram needs a Program, got {type(program).__name__}")
        self.program = program
        self.places: list[str] = []
        self.loss_name = ""
        self.build_strategy = build_strategy_or_default(build_strategy)
        self.exec_strategy = ExecutionStrategy()
        self._built: dict[tuple[int, tuple[str, ...], bool], Program] = {}

    def with_data_parallel(
        self,
        loss_name: str,
        build_strategy: BuildStrategy | None = None,
        exec_strategy: ExecutionStrategy | None = None,
        places: Sequence[str] | None = None,
    ) -> CompiledProgram:
        """Replicate the program over ``places`` (default :func:`cpu_places`), one replica per place;
        ``build_strategy`` replaces the one given when the program was made."""
        if (build_strategy or self.build_strategy).auto_place:
            raise BlockirError(AUTO_PLACE_WITH_DATA_PARALLEL)
        self.loss_name = getattr(loss_name, "name", loss_name)
        self.places = [checked_device(str(p), "a place of with_data_parallel") for p in (places or cpu_places())]
        if build_strategy is not None:
            self.build_strategy = build_strategy_or_default(build_strategy)
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
