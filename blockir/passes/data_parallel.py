"""``data-parallel``: replicate a training block over places, splitting the batch and reducing the gradients.

Options: ``places`` (one replica per entry: ``cpu,cpu`` is two host threads
over one copy of the parameters, ``cpu:0,cpu:1`` or ``cuda:0,cuda:1`` a full
copy per device), ``loss`` (the loss the backward starts from), ``strategy``
(``all-reduce`` or ``reduce``, Fluid's ``BuildStrategy.ReduceStrategy``),
``scale`` (``coeff-num-device``, Fluid's default ``GradientScaleStrategy``: each
replica's gradient weighs its share of the batch, 1/N for an even split; or
``one``: gradients summed), ``fetch`` (more variables to gather for fetching),
``sections`` (the parts' sizes are fed), ``collective`` (one ``device_allreduce`` per dense
gradient over the devices).

The global block (sub-blocks are refused: control flow is not replicated)
becomes, in program order:

1. a ``split_batch`` per fed variable (read by the model before any op writes
   it): ``x`` -> ``x@R0 .. x@R{N-1}`` and the shares ``x@SHARE@R{i}`` (the
   first feed's shares weigh the gradients); an even split, or with
   ``sections=true`` the sizes fed in ``x@SECTIONS`` (``CompiledProgram`` does
   so for a list of one feed dict per place, each replica computing on its own);
2. on each device but the first, a ``broadcast{init_only=true}`` per
   persistable it uses: ``w`` -> ``w@D1`` (device ``k`` of the distinct
   devices in ``places`` holds ``NAME@D{k}``, the first holds ``NAME``
   itself), made by the first run and kept in the scope after it;
3. the forward and backward ops (every op whose ``op_role`` is not Optimize or
   LRSched), once per replica, op by op, on the replica's place: what they
   write is renamed ``NAME@R{i}``, what they read is the replica's part of a
   feed, its device's copy of a persistable, or its own value;
4. right after the last replica writes a parameter's gradient, its
   ``allreduce`` (``Out = Σ share[i] * G@R{i}``): with ``all-reduce`` one per
   device into ``G`` (or ``G@D{k}``), each followed by nothing else; with
   ``reduce`` one on the parameter's owner device (round-robin over the
   devices, by parameter). With ``collective=true`` (``all-reduce``, several
   devices, a dense gradient) each device sums its own replicas' gradients
   instead (``G@D{k}@LOCAL``, weighted; skipped for one replica with
   ``scale=one``) and one ``device_allreduce`` over the devices adds the sums
   into every device's ``G`` / ``G@D{k}``: N-1 additions per device rather than
   N copies in and N-1 additions, and on CUDA one NCCL all-reduce
   (``CompiledProgram`` turns it on for ``cuda:N`` places). Sparse gradients
   are reduced by ``allreduce`` always (rows merged: NCCL has no such sum);
5. the optimizer: with ``all-reduce`` its ops once per device, on that
   device's copies (the copies stay identical); with ``reduce`` each
   parameter's ops on its owner only, then a ``broadcast`` of what they wrote
   to the other devices. Ops of no parameter (a learning-rate schedule) run on
   the first device, their persistable results broadcast;
6. a ``concat`` per gathered variable (the loss and ``fetch``): ``loss`` is
   then ``[N]``, one value per replica, as Fluid's ``ParallelExecutor`` gives.

Replicas sharing a device run on its compute streams ``DEVICE/compute{j}``
(``op_stream``), and the reductions and updates that follow are spread over the
same streams by parameter, balanced by size (the largest parameter first, each
to the stream with the fewest elements so far). Every op the pass creates records its lineage.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from blockir.errors import BlockirError
from blockir.ir import Block, Operator, Program, VarKind
from blockir.ir.devices import checked_device
from blockir.ir.schema import GRAD_SUFFIX, Lowering, OpRole, lowering_of
from blockir.passes.base import Pass, first_reads, mark_created, register_pass

__all__ = ["DataParallel", "copy_name", "replica_name"]

STRATEGIES = ("all-reduce", "reduce")
SCALES = ("coeff-num-device", "one")
_SHARED_ROLES = OpRole.OPTIMIZE | OpRole.LR_SCHED


def replica_name(name: str, replica: int) -> str:
    """``NAME@R{replica}``: replica ``replica``'s value of ``name``."""
    return f"{name}@R{replica}"


def copy_name(name: str, device_index: int) -> str:
    """``NAME`` on the first device, ``NAME@D{k}`` on device ``k`` of the distinct devices."""
    return name if device_index == 0 else f"{name}@D{device_index}"


def _role(op: Operator) -> int:
    role = op.attrs.get("op_role", OpRole.FORWARD)
    return role if isinstance(role, int) else OpRole.FORWARD


@register_pass
@dataclass(frozen=True)
class DataParallel(Pass):
    """Replicate forward and backward over places; split feeds, reduce gradients, update (module docstring)."""

    name: ClassVar[str] = "data-parallel"
    summary: ClassVar[str] = "replicate the block per place, split the batch, all-reduce gradients, broadcast params"

    places: tuple[str, ...] = field(metadata={"help": "one replica per place: cpu,cpu (threads) or cpu:0,cpu:1"})
    loss: str = field(metadata={"help": "the loss variable the backward starts from"})
    strategy: str = field(default="all-reduce", metadata={"help": "all-reduce or reduce (one owner per parameter)"})
    scale: str = field(default="coeff-num-device", metadata={"help": "coeff-num-device (by batch share) or one"})
    fetch: tuple[str, ...] = field(default=(), metadata={"help": "more variables to gather along axis 0"})
    sections: bool = field(
        default=False, metadata={"help": "the parts' sizes are fed, as NAME@SECTIONS (false: an even split)"}
    )
    collective: bool = field(
        default=False,
        metadata={"help": "all-reduce dense gradients over devices with one device_allreduce (NCCL on CUDA)"},
    )

    def __post_init__(self) -> None:
        if not self.places:
            raise BlockirError("the data-parallel option places needs at least one place")
        canonical = tuple(checked_device(p, "the data-parallel option places") for p in self.places)
        object.__setattr__(self, "places", canonical)
        if self.strategy not in STRATEGIES:
            raise BlockirError(
                f"the data-parallel option strategy must be {' or '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if self.scale not in SCALES:
            raise BlockirError(f"the data-parallel option scale must be {' or '.join(SCALES)}, got {self.scale!r}")

    def run(self, program: Program) -> bool:
        _Replicate(self, program.global_block()).run()
        return True


class _Replicate:
    def __init__(self, options: DataParallel, block: Block) -> None:
        self.o = options
        self.block = block
        self.n = len(options.places)
        self.devices = list(dict.fromkeys(options.places))
        self.device_of = [self.devices.index(p) for p in options.places]  # replica -> device index
        self.lanes = [options.places[:i].count(p) for i, p in enumerate(options.places)]  # replica -> j on device
        self.ops = list(block.ops)
        self._check()
        self.model = [op for op in self.ops if not _role(op) & _SHARED_ROLES]
        self.shared = [op for op in self.ops if _role(op) & _SHARED_ROLES]
        self.written = {n for op in self.model for n in op.output_names()}
        self.persistable = {n for n in self._read_by(self.model + self.shared) if self._var(n).persistable}
        self.fed = self._fed()
        self.grads = self._grads()
        self.copies: dict[tuple[str, int], Operator | None] = {}  # (persistable, device) -> its first reader
        self._lanes: dict[int, dict[str, int]] = {}  # lanes on a device -> parameter -> its lane

    # -- checks ------------------------------------------------------------------------------------------
    def _check(self) -> None:
        if self.block.program.num_blocks > 1:
            raise BlockirError("data-parallel: the program has sub-blocks; control flow is not replicated")
        if not self.block.has_var(self.o.loss):
            names = [v for v in self.block.vars if not v.endswith(GRAD_SUFFIX)]
            close = difflib.get_close_matches(self.o.loss, names, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise BlockirError(f"data-parallel: the loss {self.o.loss!r} is not a variable of the program{hint}")
        if not any(_role(op) & OpRole.BACKWARD for op in self.ops) or not self.block.has_var(self.o.loss + GRAD_SUFFIX):
            raise BlockirError(
                f"data-parallel: the program has no backward from {self.o.loss!r} (append_backward, or an "
                f"optimizer's minimize, adds it)"
            )
        framing = [op for op in self.ops if lowering_of(op.type) in _FRAME]
        if framing:
            raise BlockirError(
                f"data-parallel: the program has feed/fetch ops (an inference model?); give a training program: "
                f"{framing[0]}"
            )
        for name in self.o.fetch:
            if not self.block.has_var(name):
                raise BlockirError(f"data-parallel: the fetch {name!r} is not a variable of the program")

    # -- what the block has ------------------------------------------------------------------------------
    def _var(self, name: str) -> Any:
        return self.block.var(name)

    @staticmethod
    def _read_by(ops: Sequence[Operator]) -> list[str]:
        return list(dict.fromkeys(n for op in ops for n in op.input_names()))

    def _fed(self) -> list[str]:
        """Variables the model reads before any model op writes them that are neither persistable nor made by a
        shared op: the batch."""
        made_by_shared = {n for op in self.shared for n in op.output_names()}
        fed = first_reads(self.model, self.persistable | made_by_shared)
        if not fed:
            raise BlockirError("data-parallel: the model reads no fed variable; there is no batch to split")
        return fed

    def _grads(self) -> dict[str, str]:
        """Gradient -> parameter, from the optimizer ops' ``op_role_var`` (parameter, gradient pairs)."""
        grads: dict[str, str] = {}
        for op in self.shared:
            pairs = list(op.attrs.get("op_role_var", ()))
            for param, grad in zip(pairs[::2], pairs[1::2]):
                if grad in self.written:
                    grads[grad] = param
        return grads

    # -- building ------------------------------------------------------------------------------------------
    def _stream(self, device_index: int, lane: int) -> dict[str, str]:
        place = self.devices[device_index]
        return {"op_stream": f"{place}/compute{lane}"} if self.o.places.count(place) > 1 else {}

    def _declare(self, name: str, like: str, device: str | None = None) -> str:
        if not self.block.has_var(name):
            fields = self._var(like).fields()
            fields.pop("name")
            if device is not None:
                fields["device"] = device
            self.block.create_var(name, **fields)
        return name

    def _emit(
        self,
        type: str,
        inputs: dict[str, list[str]],
        outputs: dict[str, list[str]],
        attrs: dict[str, Any],
        origin: Sequence[Operator],
        like: Operator | None = None,
    ) -> Operator:
        op = self.block.append_op(type, inputs, outputs, {}, infer=False)
        if like is not None:
            for k, v in like.attrs.items():
                op.set_attr(k, v, like.attr_types[k])
        for k, v in attrs.items():
            op.set_attr(k, v)
        mark_created(op, DataParallel.name, list(origin))
        return op

    def _on(self, name: str, device_index: int, reader: Operator) -> str:
        """The copy of persistable ``name`` on device ``device_index`` (declared, and noted for its broadcast)."""
        if device_index:
            self.copies.setdefault((name, device_index), reader)
            self._declare(copy_name(name, device_index), name, self.devices[device_index])
        return copy_name(name, device_index)

    def _replica_input(self, name: str, replica: int, reader: Operator, produced: set[str]) -> str:
        if name in self.persistable:
            return self._on(name, self.device_of[replica], reader)
        if name in produced or name in self.fed:
            return replica_name(name, replica)
        return name  # made by a shared op (a learning-rate schedule): insert-copies moves it

    def run(self) -> None:
        shares = self._split()
        broadcast_at = len(self.block.ops)
        last_write: dict[str, int] = {}  # gradient -> the model op that writes it last
        for k, op in enumerate(self.model):
            last_write.update((n, k) for n in op.output_names() if n in self.grads)
        reduce_after: dict[int, list[str]] = {}
        for grad, k in sorted(last_write.items()):
            reduce_after.setdefault(k, []).append(grad)
        produced: set[str] = set()
        for k, op in enumerate(self.model):
            for replica in range(self.n):
                self._replica(op, replica, produced)
            produced.update(op.output_names())
            for grad in reduce_after.get(k, ()):
                self._reduce(grad, op, shares)
        self._optimizer()
        for name in [self.o.loss, *self.o.fetch]:
            self._gather(name)
        self._broadcasts(broadcast_at)
        for op in self.ops:
            self.block.remove_op(op)
        used = {n for op in self.block.ops for n in (*op.input_names(), *op.output_names())}
        for name in sorted(self.written - used):  # now only per replica: fetching it names its replicas
            self.block.remove_var(name)

    def _split(self) -> list[str]:
        shares: list[str] = []
        first_reader = {n: next(op for op in self.model if n in op.input_names()) for n in self.fed}
        for name in self.fed:
            parts = [self._declare(replica_name(name, i), name) for i in range(self.n)]
            mine = [f"{name}@SHARE@R{i}" for i in range(self.n)]
            for share in mine:
                if not self.block.has_var(share):
                    self.block.create_var(share, shape=(1,), dtype="float64")
            inputs = {"X": [name]}
            if self.o.sections:
                inputs["Sections"] = [f"{name}@SECTIONS"]
                if not self.block.has_var(inputs["Sections"][0]):
                    self.block.create_var(inputs["Sections"][0], shape=(self.n,), dtype="int64", need_check_feed=True)
            self._emit(
                "split_batch",
                inputs,
                {"Out": parts, "Share": mine},
                {"replicas": self.n},
                [first_reader[name]],
            )
            shares = shares or mine
        return shares

    def _replica(self, op: Operator, replica: int, produced: set[str]) -> None:
        inputs = {s: [self._replica_input(n, replica, op, produced) for n in names] for s, names in op.inputs.items()}
        outputs = {}
        for slot, names in op.outputs.items():
            if any(n in self.persistable for n in names):
                raise BlockirError(f"data-parallel: a replicated op writes a persistable variable: {op}")
            outputs[slot] = [self._declare(replica_name(n, replica), n) for n in names]
        attrs = {"op_device": self.o.places[replica], **self._stream(self.device_of[replica], self.lanes[replica])}
        self._emit(op.type, inputs, outputs, attrs, [op], like=op)

    def _owners(self, param: str) -> list[int]:
        """The devices whose copy of ``param`` is updated: all (all-reduce), or its owner (reduce)."""
        if self.o.strategy == "all-reduce" or len(self.devices) == 1:
            return list(range(len(self.devices)))
        index = sorted(set(self.grads.values())).index(param)
        return [index % len(self.devices)]

    def _lane(self, param: str, device_index: int) -> int:
        """The stream (lane) of a parameter's reduction and update on a device: the parameters are spread over
        the device's replica streams by size, the largest first, each to the lane with the fewest elements."""
        lanes = self.o.places.count(self.devices[device_index])
        if lanes not in self._lanes:
            load = [0] * lanes
            chosen: dict[str, int] = {}
            for name in sorted(set(self.grads.values()), key=lambda n: (-self._size(n), n)):
                chosen[name] = load.index(min(load))
                load[chosen[name]] += self._size(name)
            self._lanes[lanes] = chosen
        return self._lanes[lanes][param]

    def _size(self, name: str) -> int:
        shape = self._var(name).shape or ()
        return int(np.prod([max(d, 1) for d in shape], dtype=np.int64))

    def _reduce(self, grad: str, writer: Operator, shares: list[str]) -> None:
        param = self.grads[grad]
        if self._collective(grad):
            self._reduce_collective(grad, writer, shares)
            return
        for d in self._owners(param):
            out = self._declare(copy_name(grad, d), grad, self.devices[d])
            inputs = {"X": [replica_name(grad, i) for i in range(self.n)]}
            if self.o.scale == "coeff-num-device":
                inputs["Share"] = shares
            attrs = {"op_device": self.devices[d], "op_role": OpRole.BACKWARD, **self._stream(d, self._lane(param, d))}
            self._emit("allreduce", inputs, {"Out": [out]}, attrs, [writer])

    def _collective(self, grad: str) -> bool:
        return (
            self.o.collective
            and self.o.strategy == "all-reduce"
            and len(self.devices) > 1
            and self._var(grad).kind is VarKind.LOD_TENSOR
        )

    def _reduce_collective(self, grad: str, writer: Operator, shares: list[str]) -> None:
        """Each device's replicas' gradients summed there (weighted by their shares), then one
        ``device_allreduce`` of the sums over the devices into ``G`` / ``G@D{k}``."""
        param = self.grads[grad]
        local = []
        for d, device in enumerate(self.devices):
            mine = [i for i in range(self.n) if self.device_of[i] == d]
            if len(mine) == 1 and self.o.scale == "one":
                local.append(replica_name(grad, mine[0]))
                continue
            inputs = {"X": [replica_name(grad, i) for i in mine]}
            if self.o.scale == "coeff-num-device":
                inputs["Share"] = [shares[i] for i in mine]
            out = self._declare(f"{copy_name(grad, d)}@LOCAL", grad, device)
            attrs = {"op_device": device, "op_role": OpRole.BACKWARD, **self._stream(d, self._lane(param, d))}
            self._emit("allreduce", inputs, {"Out": [out]}, attrs, [writer])
            local.append(out)
        outs = [self._declare(copy_name(grad, d), grad, device) for d, device in enumerate(self.devices)]
        self._emit(
            "device_allreduce",
            {"X": local},
            {"Out": outs},
            {"devices": list(self.devices), "op_device": self.devices[0], "op_role": OpRole.BACKWARD},
            [writer],
        )

    def _optimizer(self) -> None:
        for op in self.shared:
            pairs = list(op.attrs.get("op_role_var", ()))
            param = pairs[0] if pairs and pairs[0] in set(self.grads.values()) else None
            devices = self._owners(param) if param is not None else [0]
            for d in devices:
                inputs = {s: [self._shared_input(n, d, op) for n in names] for s, names in op.inputs.items()}
                outputs = {
                    s: [self._on(n, d, op) if n in self.persistable else n for n in names]
                    for s, names in op.outputs.items()
                }
                lane = self._lane(param, d) if param is not None else 0
                self._emit(
                    op.type, inputs, outputs, {"op_device": self.devices[d], **self._stream(d, lane)}, [op], like=op
                )
                for name in op.output_names():
                    if name in self.persistable and (len(devices) < len(self.devices)):
                        self._refresh(name, d, op)

    def _shared_input(self, name: str, device_index: int, reader: Operator) -> str:
        if name in self.grads:
            return copy_name(name, device_index)
        if name in self.persistable:
            return self._on(name, device_index, reader)
        return name

    def _refresh(self, name: str, source: int, writer: Operator) -> None:
        """Broadcast persistable ``name``, just written on device ``source``, to every other device's copy."""
        for d in range(len(self.devices)):
            if d != source:
                target = self._on(name, d, writer)
                self._emit(
                    "broadcast",
                    {"X": [copy_name(name, source)]},
                    {"Out": [target]},
                    {"dst_device": self.devices[d], "op_device": self.devices[d]},
                    [writer],
                )

    def _gather(self, name: str) -> None:
        if name not in self.written:
            return
        writer = next(op for op in reversed(self.model) if name in op.output_names())
        var = self._var(name)
        if var.shape:
            var.shape = (-1 if var.shape[0] < 0 else var.shape[0] * self.n, *var.shape[1:])
        self._emit(
            "concat",
            {"X": [replica_name(name, i) for i in range(self.n)]},
            {"Out": [name]},
            {"axis": 0, "op_device": self.devices[0]},
            [writer],
        )

    def _broadcasts(self, at: int) -> None:
        """The initial broadcasts, moved to position ``at`` (after the splits, before the replicas)."""
        made = []
        for (name, d), reader in sorted(self.copies.items(), key=lambda item: (item[0][1], item[0][0])):
            target = copy_name(name, d)
            made.append(
                self._emit(
                    "broadcast",
                    {"X": [name], "Current": [target]},
                    {"Out": [target]},
                    {"dst_device": self.devices[d], "op_device": self.devices[d], "init_only": True},
                    [reader] if reader is not None else [],
                )
            )
        broadcast = {id(op) for op in made}
        order = [op for op in self.block.ops if id(op) not in broadcast]
        self.block.reorder_ops(order[:at] + made + order[at:])


_FRAME = (Lowering.FEED, Lowering.FETCH)
