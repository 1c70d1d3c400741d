"""Fused ops the fusion passes create: Fluid's ``fc``, ``fused_elemwise_activation`` and their gradients.

Kernels are written once against the array module ``ctx.xp``.
"""

from __future__ import annotations

from blockir.ir.schema import OpSchema

SCHEMAS: tuple[OpSchema, ...] = ()
