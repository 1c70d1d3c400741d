"""A fleet script for the tests: train a model for some steps, write what came out.

    python sync_train.py OUT MODEL OPTIMIZER STEPS MODE [ENTRY [SAVE_DIR save|delta|load]]

MODEL ``dense`` or ``sparse``, OPTIMIZER ``sgd``, ``adam`` or ``adagrad``, MODE ``sync``, ``async`` or ``geoK``
(GEO-SGD exchanging every K steps), ENTRY
``count2`` for a CountFilterEntry(2) table (ps_models.py). Each worker trains on its share of one fixed batch.
Worker ``k`` writes ``OUT/worker{k}.npz``: its losses, its dense parameters and, from worker 0, the table's
rows at the batch's ids as the servers hold them. Server ``k`` writes ``OUT/server{k}.npz``: the ids of the rows
it holds and how many updates it applied. With SAVE_DIR: ``save`` saves the model there at the end (worker 0's
fleet.save_persistables), ``delta`` saves fully after STEPS steps and as a delta after STEPS more, ``load``
starts from it (the servers' init_server(SAVE_DIR), worker 0's load_vars).
"""

import sys

import numpy as np
from ps_models import MIN_BLOCK, OPTIMIZERS, TABLE, batch, build

import blockir as bir
from blockir.distributed import fleet

out, model, optimizer, steps, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
entry = sys.argv[6] if len(sys.argv) > 6 else ""
save_dir, phase = (sys.argv[7], sys.argv[8]) if len(sys.argv) > 8 else ("", "")  # phase: save (at the end) or load

fleet.init()
loss = build(model, entry)
strategy = fleet.DistributedStrategy(min_block_size=MIN_BLOCK)
strategy.a_sync = mode != "sync"
if mode.startswith("geo"):  # geo1, geo3: GEO-SGD exchanging every 1 or 3 steps
    strategy.a_sync_configs = {"k_steps": int(mode[3:])}
fleet.distributed_optimizer(OPTIMIZERS[optimizer](), strategy).minimize(loss)

if fleet.is_server():
    fleet.init_server(save_dir if phase == "load" else None)
    fleet.run_server()
    server = fleet.server()
    np.savez(
        f"{out}/server{fleet.server_index()}.npz",
        version=server.version(),
        **{table: server.table_ids(table) for table in server.shards},
    )
else:
    exe = bir.Executor("cpu")
    exe.run(fleet.startup_program)
    if phase == "load" and fleet.is_first_worker():  # the dense parameters and their optimizer state
        bir.io.load_vars(exe, save_dir, main_program=loss.block.program, vars=fleet.dense_vars(loss.block.program))
    fleet.init_worker()
    k, n = fleet.worker_index(), fleet.worker_num()
    losses = [exe.run(fleet.main_program, feed=batch(model, k, n), fetch_list=[loss])[0] for _ in range(steps)]
    if phase == "delta":  # a full save, STEPS more steps, then a delta save of what they changed
        fleet.barrier_worker()
        if k == 0:
            fleet.save_persistables(exe, save_dir, mode=0)
        fleet.barrier_worker()
        losses += [exe.run(fleet.main_program, feed=batch(model, k, n), fetch_list=[loss])[0] for _ in range(steps)]
    fleet.communicator().stop()  # async: everything pushed
    fleet.barrier_worker()
    scope = bir.global_scope()
    values = {p.name: np.array(scope.get(p.name)) for p in fleet.main_program.all_parameters()}
    if model == "sparse" and k == 0:
        seen = np.unique(np.concatenate([batch(model, j, n)["words"].data[:, 0] for j in range(n)]))
        values["seen"] = seen
        values["table"] = fleet.communicator().pull_sparse(TABLE, seen)
    np.savez(f"{out}/worker{k}.npz", losses=np.array(losses), **values)
    if phase in ("save", "delta") and k == 0:
        fleet.save_persistables(exe, save_dir, mode=1 if phase == "delta" else 0)
    fleet.barrier_worker()  # worker 0's pulls (and save) come before anybody's stop
    fleet.stop_worker()
