"""Rewrite the table of Paddle's op types in ``docs/paddle.md`` from ``tests/paddle/paddle_ops.txt`` and the registry.

python scripts/paddle_op_table.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.paddle.op_table import DOC, rewrite  # noqa: E402

if __name__ == "__main__":
    print(f"{DOC}: {'rewritten' if rewrite() else 'already current'}")
