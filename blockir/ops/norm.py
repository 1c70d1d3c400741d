"""Normalization and dropout ops with Paddle's semantics: ``batch_norm``, ``layer_norm``, ``dropout``.

Kernels are written once against the array module ``ctx.xp``.
"""

from __future__ import annotations

from blockir.ir.schema import OpSchema

SCHEMAS: tuple[OpSchema, ...] = ()
