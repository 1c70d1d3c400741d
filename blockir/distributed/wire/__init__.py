"""The parameter server's data plane: arrays between workers and servers over direct sockets.

``framing``: the frames (a fixed prefix, a struct-packed header laid out by the method's signature, the arrays'
raw bytes; never pickle). ``transport``: the server (a Unix socket or TCP listener, a thread per connection)
and the client (a pool of connections, request ids, calls in flight whose replies the threads waiting for them
read). The method table comes from a typed interface, :class:`~blockir.distributed.api.ParameterServerAPI` by
default. ``docs/distributed.md`` describes the format and its security rules.
"""

from blockir.distributed.wire.framing import ConnectionLost, FrameError, Limits, MethodTable, RemoteError, WireError
from blockir.distributed.wire.transport import Address, Pending, WireClient, WireServer, new_token

__all__ = [
    "Address",
    "ConnectionLost",
    "FrameError",
    "Limits",
    "MethodTable",
    "Pending",
    "RemoteError",
    "WireClient",
    "WireError",
    "WireServer",
    "new_token",
]
