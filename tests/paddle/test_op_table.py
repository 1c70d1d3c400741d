"""``docs/paddle.md``'s table of Paddle's op types is current (the default tier: it needs no Paddle)."""

from __future__ import annotations

from tests.paddle.op_table import OPS, paddle_ops, table, written


def test_the_list_is_paddle_3_3_1s_op_protos() -> None:
    ops = paddle_ops()
    assert len(ops) == 764 and "PaddlePaddle 3.3.1" in OPS.read_text().splitlines()[0]
    assert ops["conv2d"] and ops["relu6"] and not ops["feed"]  # gradients where Paddle has them


def test_docs_hold_the_current_table() -> None:
    assert written() == table(), "python scripts/paddle_op_table.py"


def test_the_table_says_what_blockir_has() -> None:
    rows = {line.split("`")[1]: line for line in table().splitlines() if line.startswith("| `")}
    assert len(rows) == 764
    assert rows["conv2d"] == "| `conv2d` | yes | yes | yes |"
    assert rows["feed"] == "| `feed` | yes |  |  |"
    assert rows["conv3d"] == "| `conv3d` | yes | yes | yes |"
    assert rows["complex"] == "| `complex` | no | yes | no |"
