"""Test cases of the fused ops (blockir.ops.fused), as data: expected values in plain numpy."""

from __future__ import annotations

from tests.ops.harness import Case

CASES: dict[str, list[Case]] = {}

INFER_ERRORS: list[tuple[str, Case, str]] = []

KERNEL_ERRORS: list[tuple[str, Case, str]] = []
