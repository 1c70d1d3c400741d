"""The op library: one schema per op type, with its kernel and gradient maker.

Importing this package registers every schema listed below in the IR's registry
(:mod:`blockir.ir.schema`). Each module keeps its schemas in a ``SCHEMAS`` tuple.
"""

from blockir.ir.schema import find, register
from blockir.ops import (
    activation,
    channel,
    control_flow,
    conv,
    distributed,
    fused,
    fused_conv,
    index,
    logic,
    math,
    nn,
    norm,
    optimizer,
    parallel,
    random,
    reduce,
    rnn,
    sequence,
    shape,
    tensor,
    transfer,
    vision,
)
from blockir.ops.values import LoDTensor, SelectedRows, TensorArray

MODULES = (
    math,
    activation,
    reduce,
    logic,
    tensor,
    index,
    nn,
    conv,
    vision,
    norm,
    shape,
    fused,
    fused_conv,
    sequence,
    rnn,
    random,
    transfer,
    optimizer,
    channel,
    control_flow,
    parallel,
    distributed,
)

for _module in MODULES:
    for _schema in _module.SCHEMAS:
        if find(_schema.type) is not _schema:
            register(_schema)

__all__ = ["LoDTensor", "SelectedRows", "TensorArray", "MODULES"]
