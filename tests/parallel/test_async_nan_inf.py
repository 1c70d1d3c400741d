"""AsyncExecutor(check_nan_inf=True): thread and process workers stop at the first op producing NaN or inf."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import blockir as bir
from blockir.errors import BlockirError, NanInfError
from blockir.parallel.async_executor import MODES
from tests.parallel.test_async_executor import PROTOTXT, bow, started, write_parts


@pytest.mark.timeout(120)
@pytest.mark.parametrize("mode", MODES)
def test_workers_stop_at_the_op_producing_nan_and_without_the_check_train_on(tmp_path: Path, mode: str) -> None:
    desc = bir.DataFeedDesc(PROTOTXT)
    files = write_parts(tmp_path, desc, parts=2, docs=40)
    main, startup, _, _, loss, acc = bow()
    scope = started(startup)
    scope.get("fc_0.w_0")[3, 1] = np.nan  # a parameter gone bad: the first op reading it makes NaN
    checking = bir.AsyncExecutor("cpu", check_nan_inf=True)
    assert repr(checking) == "AsyncExecutor('cpu', check_nan_inf=True)"
    with pytest.raises(BlockirError) as info:
        checking.run_from_files(main, desc, files, 2, [loss, acc], mode=mode, scope=scope)
    message = str(info.value)
    assert message.startswith("async worker ") and "op produced NaN or inf (check_nan_inf)" in message
    assert "in op: %fc_0.tmp_1 = fc(Input=%sequence_pool_0.tmp_0, W=%fc_0.w_0, Bias=%fc_0.b_0)" in message  # fused
    assert "W=fc_0.w_0: float32[8, 2] min " in message and ", 1 NaN, 0 inf" in message
    if mode == "thread":
        assert isinstance(info.value.__cause__, NanInfError)
    cost, _ = bir.AsyncExecutor("cpu").run_from_files(main, desc, files, 2, [loss, acc], mode=mode, scope=scope)
    assert np.isnan(cost)
