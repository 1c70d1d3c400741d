"""Convolution and pooling ops with Paddle's semantics: ``conv2d``, ``depthwise_conv2d``, ``pool2d``.

Kernels are written once against the array module ``ctx.xp``.
"""

from __future__ import annotations

from blockir.ir.schema import OpSchema

SCHEMAS: tuple[OpSchema, ...] = ()
