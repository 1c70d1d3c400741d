"""A fleet script for the multi-node test on Ray (one server, two workers, each role placed on a node by the
launcher's resources): each worker runs three sync steps, then writes ``OUT/nodes-worker-K.json``: its Ray node,
its handle's data-plane connections (each one's kind, read from its socket, and this end) and the server actor's
report (its node, the connections its listeners serve: each one's kind and peer)."""

import json
import sys
from pathlib import Path
from typing import cast

import ray
from ps_models import batch

from blockir.distributed import fleet
from blockir.distributed.ray_backend import RayHandle
from tests.distributed.scenarios import (  # the tests run it with the checkout on PYTHONPATH
    serve_or_start_worker,
    sync_dense_role,
)

out = Path(sys.argv[1])
loss = sync_dense_role()
exe = serve_or_start_worker()
if exe is not None:
    me = fleet.worker_index()
    for _ in range(3):
        exe.run(fleet.main_program, feed=batch("dense", me, 2), fetch_list=[loss])
    handle = cast(RayHandle, fleet.communicator().handles[0])
    report = {
        "node": ray.get_runtime_context().get_node_id(),
        "connections": handle.connections(),
        "server": ray.get(handle.actor.data_plane.remote(handle.run, 0)),
    }
    (out / f"nodes-worker-{me}.json").write_text(json.dumps(report))
    fleet.stop_worker()
