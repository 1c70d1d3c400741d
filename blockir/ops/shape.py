"""Shape ops with Paddle's semantics: ``transpose2``, ``flatten_contiguous_range``, ``squeeze2``, ``unsqueeze2``,
``split``, ``slice``.

Kernels are written once against the array module ``ctx.xp``.
"""

from __future__ import annotations

from blockir.ir.schema import OpSchema

SCHEMAS: tuple[OpSchema, ...] = ()
