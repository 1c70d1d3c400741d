"""A fleet script for the tests: worker 1 fails after its first step; the others would wait for it (sync)."""

from ps_models import batch, build

import blockir as bir
from blockir.distributed import fleet

fleet.init()
loss = build("dense")
strategy = fleet.DistributedStrategy()
strategy.a_sync = False
fleet.distributed_optimizer(bir.optimizer.SGD(0.1), strategy).minimize(loss)
if fleet.is_server():
    fleet.init_server()
    fleet.run_server()
else:
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    for step in range(5):
        if k == 1 and step == 1:
            raise RuntimeError("worker 1 gives up")
        exe.run(fleet.main_program, feed=batch("dense", k, n), fetch_list=[loss])
    fleet.stop_worker()
