"""A fleet script for the Ray tests: how worker 0 reaches the server. Its handle's connection (a Unix socket: the
same Ray node); the server's actor asked for its address from another node (TCP on the node's address), a call
over it, one with a wrong token refused; the TCP listeners (``/proc/net/tcp`` and ``tcp6``) while the data
plane's TCP listener is open. Written as JSON to ``OUT/data_plane.json``."""

import json
import sys
from pathlib import Path
from typing import cast

import ray
from ps_models import batch

from blockir.distributed import fleet
from blockir.distributed.api import ParameterServerAPI
from blockir.distributed.ray_backend import RayHandle
from blockir.distributed.wire import Address, ConnectionLost, WireClient, new_token
from tests.distributed.scenarios import (  # the tests run it with the checkout on PYTHONPATH
    serve_or_start_worker,
    sync_dense_role,
)

out = Path(sys.argv[1])
loss = sync_dense_role()


def tcp_listeners() -> list[str]:
    """Listening TCP sockets as ``host-hex:port-hex`` (/proc/net/tcp{,6}: state 0A)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A":
                found.append(fields[1])
    return found


exe = serve_or_start_worker()
if exe is not None:
    exe.run(fleet.main_program, feed=batch("dense", 0, 1), fetch_list=[loss])
    handle = cast(RayHandle, fleet.communicator().handles[0])
    same_node = handle._connected().address
    asked = handle.actor.endpoint.remote(handle.run, 0, "another-node")  # as a worker on another node asks
    tcp: Address = ray.get(asked)
    with WireClient(tcp, handle.token) as client:
        version = client.submit(ParameterServerAPI.version).result()
    with WireClient(tcp, new_token()) as stranger:
        try:
            stranger.submit(ParameterServerAPI.version).result()
            refused = False
        except ConnectionLost:
            refused = True
    report = {
        "same_node": same_node.kind,
        "other_node": tcp.kind,
        "other_node_host": tcp.host,
        "other_node_port": tcp.port,
        "version_over_tcp": version,
        "server_version": fleet.communicator().transport.call(0, ParameterServerAPI.version),
        "wrong_token_refused": refused,
        "tcp_listeners": tcp_listeners(),
    }
    (out / "data_plane.json").write_text(json.dumps(report))
    fleet.stop_worker()
