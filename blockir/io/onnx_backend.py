"""blockir as an ONNX backend (``onnx.backend.base.Backend``), so that ONNX's backend test suite runs against it::

    import onnx.backend.test
    import blockir.io.onnx_backend as backend

    globals().update(onnx.backend.test.BackendTest(backend, __name__).test_cases)

:func:`prepare` imports the model (:func:`blockir.io.onnx.import_model`) and returns a :class:`BlockirRep`
whose ``run`` feeds the inputs, in the graph's input order, and returns the outputs in the graph's output
order. A model whose ops need, as constants, values it takes as inputs (a ``Reshape`` whose shape is fed, a
``Slice`` whose starts are) is imported at its first run with those inputs' values fixed, and again whenever
they change: blockir specializes the program on them, as a JIT compiler does. A value computed from inputs
fixes the inputs it is computed from (traced through the graph, not through Shape and Size).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from blockir.errors import BlockirError
from blockir.io.onnx import OnnxModel, UnsupportedModelError, import_model, onnx_module
from blockir.runtime.executor import Executor
from blockir.runtime.scope import Scope

onnx = onnx_module()
from onnx.backend.base import Backend, BackendRep, Device, DeviceType  # noqa: E402

__all__ = ["BlockirBackend", "BlockirRep", "prepare", "run_model", "run_node", "supports_device"]


def _cuda_available() -> bool:
    try:
        import cupy
    except ImportError:
        return False
    try:
        return bool(cupy.cuda.is_available())
    except Exception:  # noqa: BLE001  # a broken driver install: no CUDA device
        return False


def _place(device: str) -> str:
    kind = Device(device).type
    if kind == DeviceType.CUDA:
        if not _cuda_available():
            raise BlockirError("device CUDA: no CUDA device here (cupy.cuda.is_available() is false)")
        return "cuda:0"
    return "cpu"


def _fixable(error: UnsupportedModelError, inputs: set[str], graph: Any) -> tuple[str, ...]:
    """The graph inputs whose values would let the import go on: ``error``'s problems are all values wanted as
    constants, each among ``inputs`` or computed from some of them (then those, traced back through ``graph``'s
    nodes; a Shape or Size reads only its input's shape, known at import); empty when another problem stands or
    no such input is left to fix."""
    if not error.needs or len(error.needs) != len(error.problems):
        return ()
    producers = {out: node for node in graph.node for out in node.output if out}
    found: dict[str, None] = {}
    pending, seen = list(error.needs), set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        node = producers.get(name)
        if node is not None:
            if node.op_type not in ("Shape", "Size"):
                pending.extend(i for i in node.input if i)
        elif name in inputs:
            found[name] = None
    return tuple(found)


def _array(value: Any) -> np.ndarray:
    return onnx.numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else np.asarray(value)


class BlockirRep(BackendRep):
    """A prepared model: the imported program and its parameters, run by one executor."""

    def __init__(self, model: Any, place: str, imported: OnnxModel | None, needs: tuple[str, ...]) -> None:
        self.model, self.place = model, place
        self.executor = Executor(place)
        self.imported = imported
        self.needs = needs  # inputs the program is specialized on (their values fixed at import)
        self.fixed: dict[str, np.ndarray] = {}
        self.where = model.graph.name or "<model>"
        self.inputs = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]

    def _program_for(self, values: dict[str, np.ndarray]) -> OnnxModel:
        if self.imported is not None and all(np.array_equal(self.fixed[n], values[n]) for n in self.needs):
            return self.imported
        while True:  # each import names the inputs it needs next (a Slice's ends once its starts are fixed)
            self.fixed = {n: values[n] for n in self.needs}
            try:
                self.imported = import_model(self.model, self.where, constants=self.fixed)
                return self.imported
            except UnsupportedModelError as e:
                more = _fixable(e, set(self.inputs) - set(self.needs), self.model.graph)
                if not more:
                    raise
                self.needs += more

    def run(self, inputs: Any, **kwargs: Any) -> tuple[np.ndarray, ...]:
        if isinstance(inputs, dict):
            values = {k: _array(v) for k, v in inputs.items()}
        else:
            given = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            values = {name: _array(v) for name, v in zip(self.inputs, given)}
        imported = self._program_for(values)
        scope = Scope()
        for name, value in imported.params.items():
            scope.set(name, value)
        feed = {imported.feed_name(n): values[n] for n in imported.onnx_feeds}
        outputs = self.executor.run(imported.program, feed=feed, scope=scope)
        return tuple(np.asarray(o) for o in outputs)


class BlockirBackend(Backend):
    """``onnx.backend.base.Backend`` over blockir's importer and executor."""

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> BlockirRep:
        place = _place(device)
        where = model.graph.name or "<model>"
        try:
            imported: OnnxModel | None = import_model(model, where)
            needs: tuple[str, ...] = ()
        except UnsupportedModelError as e:
            needs = _fixable(e, {i.name for i in model.graph.input}, model.graph)
            if not needs:
                raise
            imported = None
        return BlockirRep(model, place, imported, needs)

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[np.ndarray, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls, node: Any, inputs: Any, device: str = "CPU", outputs_info: Any = None, **kwargs: Any
    ) -> tuple[np.ndarray, ...]:
        helper = onnx.helper
        given = list(inputs)
        graph_inputs = [
            helper.make_tensor_value_info(
                name, onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype), np.asarray(v).shape
            )
            for name, v in zip(node.input, given)
        ]
        graph_outputs = [helper.make_empty_tensor_value_info(name) for name in node.output]
        graph = helper.make_graph([node], "run_node", graph_inputs, graph_outputs)
        model = helper.make_model(graph)
        return cls.run_model(model, given, device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = Device(device).type
        return kind == DeviceType.CPU or (kind == DeviceType.CUDA and _cuda_available())


prepare = BlockirBackend.prepare
run_model = BlockirBackend.run_model
run_node = BlockirBackend.run_node
supports_device = BlockirBackend.supports_device
