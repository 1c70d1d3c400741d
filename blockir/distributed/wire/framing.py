"""Frames of the data plane: a fixed prefix, a struct-packed header laid out by the method's signature, then the
arrays' raw bytes.

A frame is ``PREFIX`` (magic ``BIRW``, version, kind, method id, request id, header length; 20 bytes), then the
header, then each array's bytes in the order the header lists them. The header holds the values of the method's
arguments (a request) or of its result (a reply) in the order of its signature: ``int`` as int64, ``float`` as
float64, ``bool`` as a byte, ``str`` as a length and UTF-8, a list or dict as a count and its items (a dict's
keys are strings), a tuple as its items, and an array as its dtype code (Paddle's ``VarType`` numbers), its
number of dimensions, its shape and its byte length. An error reply's header is the exception's type name and
its message. Nothing else can be expressed: no object of another type is ever made from a frame.

Decoding checks every claim against :class:`Limits` and the signature before a byte of array data is read, and
allocates each array once: its bytes are received straight into it. Any violation is a :class:`FrameError`.
"""

from __future__ import annotations

import enum
import hashlib
import inspect
import math
import socket
import struct
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from blockir.distributed.api import ArrayOf
from blockir.errors import BlockirError
from blockir.ir.dtypes import DTYPE_TO_PROTO

MAGIC = b"BIRW"
VERSION = 1
PREFIX = struct.Struct("<4sBBHQI")  # magic, version, kind, method id, request id, header length
_IOV_MAX = 1024  # buffers per sendmsg (Linux's IOV_MAX)

# The dtypes the wire carries, by their VarType code; little-endian on the wire.
WIRE_DTYPES: dict[int, np.dtype] = {
    code: np.dtype(name).newbyteorder("<") for name, code in DTYPE_TO_PROTO.items() if name != "bfloat16"
}
_CODES: dict[np.dtype, int] = {dtype: code for code, dtype in WIRE_DTYPES.items()}


class WireError(BlockirError):
    """The data plane failed."""


class FrameError(WireError):
    """A frame breaks the method's signature or the limits (sent or received); a received one closes the
    connection."""


class ConnectionLost(WireError):
    """A connection to a server failed or was closed; the calls in flight on it fail with it. ``address``: the
    server's."""

    def __init__(self, message: str, address: object = None) -> None:
        super().__init__(message)
        self.address = address


class RemoteError(BlockirError):
    """The server's method raised: ``kind`` is its exception's type name, ``message`` its message."""

    def __init__(self, method: str, kind: str, message: str) -> None:
        super().__init__(f"{method} failed on the server: {kind}: {message}")
        self.kind = kind
        self.message = message


class Kind(enum.IntEnum):
    REQUEST = 1
    REPLY = 2
    ERROR = 3


_KINDS = {int(kind): kind for kind in Kind}


@dataclass(frozen=True)
class Limits:
    """The most a frame may hold; a frame over any of them is refused (on sending and on receiving)."""

    header_bytes: int = 1 << 20
    arrays: int = 4096
    ndim: int = 16
    array_bytes: int = 1 << 30
    total_bytes: int = 1 << 31


DEFAULT_LIMITS = Limits()


class _Writer:
    __slots__ = ("parts", "arrays", "total", "limits")

    def __init__(self, limits: Limits) -> None:
        self.parts: list[bytes] = []
        self.arrays: list[np.ndarray] = []
        self.total = 0
        self.limits = limits


class _Reader:
    __slots__ = ("data", "pos", "arrays", "total", "limits")

    def __init__(self, data: bytes | bytearray, limits: Limits) -> None:
        self.data = data
        self.pos = 0
        self.arrays: list[np.ndarray] = []
        self.total = 0
        self.limits = limits

    def take(self, fmt: struct.Struct) -> tuple[Any, ...]:
        end = self.pos + fmt.size
        if end > len(self.data):
            raise FrameError(f"the header ends at byte {len(self.data)}, inside a value at byte {self.pos}")
        values = fmt.unpack_from(self.data, self.pos)
        self.pos = end
        return values

    def take_str(self) -> str:
        (n,) = self.take(_COUNT)
        end = self.pos + n
        if end > len(self.data):
            raise FrameError(f"the header ends at byte {len(self.data)}, inside a string of {n} bytes")
        try:
            text = str(self.data[self.pos : end], "utf-8")
        except UnicodeDecodeError as e:
            raise FrameError(f"a string is not UTF-8: {e}") from None
        self.pos = end
        return text


_COUNT = struct.Struct("<I")
_ARRAY = struct.Struct("<BB")  # dtype code, ndim


class Codec(Protocol):
    """How one type of the signature is laid out in the header."""

    def encode(self, w: _Writer, value: Any) -> None: ...

    def decode(self, r: _Reader) -> Any: ...


@dataclass(frozen=True)
class _None:
    def encode(self, w: _Writer, value: Any) -> None:
        if value is not None:
            raise FrameError(f"expected None, got {type(value).__name__}")

    def decode(self, r: _Reader) -> Any:
        return None


@dataclass(frozen=True)
class _Scalar:
    what: str
    fmt: struct.Struct = field(repr=False)
    accepts: tuple[type, ...] = field(repr=False)

    def encode(self, w: _Writer, value: Any) -> None:
        if type(value) is not self.accepts[0] and (  # the common case first: the builtin type itself
            not isinstance(value, self.accepts) or (isinstance(value, bool) and bool not in self.accepts)
        ):
            raise FrameError(f"expected {self.what}, got {type(value).__name__}")
        try:
            w.parts.append(self.fmt.pack(value))
        except struct.error as e:
            raise FrameError(f"{value!r} is not {self.what}: {e}") from None

    def decode(self, r: _Reader) -> Any:
        return r.take(self.fmt)[0]


_ENCODED: dict[str, bytes] = {}  # short strings as the header holds them: the names a frame repeats at every call
_ENCODED_MOST = 4096


@dataclass(frozen=True)
class _Str:
    def encode(self, w: _Writer, value: Any) -> None:
        data = _ENCODED.get(value) if type(value) is str else None
        if data is None:
            if not isinstance(value, str):
                raise FrameError(f"expected a str, got {type(value).__name__}")
            text = value.encode()
            data = _COUNT.pack(len(text)) + text
            if type(value) is str and len(text) <= 256:
                if len(_ENCODED) >= _ENCODED_MOST:
                    _ENCODED.clear()
                _ENCODED[value] = data
        w.parts.append(data)

    def decode(self, r: _Reader) -> Any:
        return r.take_str()


_SHAPES = tuple(struct.Struct(f"<{n}qQ") for n in range(256))  # by ndim: the shape, then the byte length
_HEADS = tuple(struct.Struct(f"<BB{n}qQ") for n in range(256))  # by ndim: _ARRAY, then _SHAPES[ndim]


@dataclass(frozen=True)
class _Array:
    spec: ArrayOf
    allowed: frozenset[np.dtype] = field(repr=False, compare=False, default=frozenset())

    @staticmethod
    def of(spec: ArrayOf) -> _Array:
        return _Array(spec, frozenset(np.dtype(name).newbyteorder("<") for name in spec.dtypes))

    def _check(self, dtype: np.dtype, ndim: int, limits: Limits, arrays: int, nbytes: int, total: int) -> None:
        """What the signature and the limits allow of an array (the header's next)."""
        if self.allowed and dtype not in self.allowed:
            raise FrameError(f"expected an array of {' or '.join(self.spec.dtypes)}, got {dtype}")
        if self.spec.ndim is not None and ndim != self.spec.ndim:
            raise FrameError(f"expected an array of {self.spec.ndim} dimensions, got {ndim}")
        if ndim > limits.ndim:
            raise FrameError(f"an array of {ndim} dimensions (at most {limits.ndim})")
        if arrays >= limits.arrays:
            raise FrameError(f"more than {limits.arrays} arrays")
        if nbytes > limits.array_bytes:
            raise FrameError(f"an array of {nbytes} bytes (at most {limits.array_bytes})")
        if total + nbytes > limits.total_bytes:
            raise FrameError(f"more than {limits.total_bytes} bytes of arrays")

    def encode(self, w: _Writer, value: Any) -> None:
        if type(value) is not np.ndarray and not isinstance(value, np.ndarray):
            raise FrameError(f"expected a numpy array, got {type(value).__name__}")
        code = _CODES.get(value.dtype)
        if code is None and value.dtype.byteorder == ">":
            value = value.astype(value.dtype.newbyteorder("<"))
            code = _CODES.get(value.dtype)
        if code is None:
            raise FrameError(f"arrays of {value.dtype} cannot be sent (the wire carries {_dtype_names()})")
        ndim, nbytes = value.ndim, value.nbytes
        self._check(value.dtype, ndim, w.limits, len(w.arrays), nbytes, w.total)
        if not value.flags.c_contiguous:
            value = np.ascontiguousarray(value)
        w.parts.append(_HEADS[ndim].pack(code, ndim, *value.shape, nbytes))
        w.total += nbytes
        w.arrays.append(value)

    def decode(self, r: _Reader) -> Any:
        code, ndim = r.take(_ARRAY)
        dtype = WIRE_DTYPES.get(code)
        if dtype is None:
            raise FrameError(f"unknown dtype code {code} (the wire carries {_dtype_names()})")
        if ndim > r.limits.ndim:
            raise FrameError(f"an array of {ndim} dimensions (at most {r.limits.ndim})")
        *shape, nbytes = r.take(_SHAPES[ndim])
        if shape and min(shape) < 0:
            raise FrameError(f"an array of shape {shape}")
        if math.prod(shape) * dtype.itemsize != nbytes:
            raise FrameError(f"an array of {dtype}{shape} claims {nbytes} bytes")
        self._check(dtype, ndim, r.limits, len(r.arrays), nbytes, r.total)
        r.total += nbytes
        array = np.empty(shape, dtype)
        r.arrays.append(array)
        return array


@dataclass(frozen=True)
class _List:
    item: Codec

    def encode(self, w: _Writer, value: Any) -> None:
        if type(value) is not list and (isinstance(value, str | bytes) or not isinstance(value, Sequence)):
            raise FrameError(f"expected a list, got {type(value).__name__}")
        w.parts.append(_COUNT.pack(len(value)))
        for v in value:
            self.item.encode(w, v)

    def decode(self, r: _Reader) -> Any:
        (n,) = r.take(_COUNT)
        if n > len(r.data) - r.pos:  # every item takes at least a byte
            raise FrameError(f"a list of {n} items in a header of {len(r.data)} bytes")
        return [self.item.decode(r) for _ in range(n)]


@dataclass(frozen=True)
class _Dict:
    value: Codec

    def encode(self, w: _Writer, value: Any) -> None:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise FrameError(f"expected a dict, got {type(value).__name__}")
        w.parts.append(_COUNT.pack(len(value)))
        for k, v in value.items():
            _STR.encode(w, k)
            try:
                self.value.encode(w, v)
            except FrameError as e:
                raise FrameError(f"[{k!r}]: {e}") from None

    def decode(self, r: _Reader) -> Any:
        (n,) = r.take(_COUNT)
        if n > len(r.data) - r.pos:
            raise FrameError(f"a dict of {n} items in a header of {len(r.data)} bytes")
        out = {}
        for _ in range(n):
            key = r.take_str()
            if key in out:
                raise FrameError(f"the key {key!r} twice in a dict")
            out[key] = self.value.decode(r)
        return out


@dataclass(frozen=True)
class _Tuple:
    items: tuple[Codec, ...]
    names: tuple[str, ...] = ()  # a method's parameters: errors name the one at fault

    def _where(self, i: int) -> str:
        return f"argument {self.names[i]!r}" if self.names else f"item {i}"

    def encode(self, w: _Writer, value: Any) -> None:
        if not isinstance(value, tuple | list) or len(value) != len(self.items):
            raise FrameError(f"expected a tuple of {len(self.items)}, got {type(value).__name__}")
        for i, (codec, v) in enumerate(zip(self.items, value)):
            try:
                codec.encode(w, v)
            except FrameError as e:
                raise FrameError(f"{self._where(i)}: {e}") from None

    def decode(self, r: _Reader) -> Any:
        values = []
        for i, codec in enumerate(self.items):
            try:
                values.append(codec.decode(r))
            except FrameError as e:
                raise FrameError(f"{self._where(i)}: {e}") from None
        return tuple(values)


_STR = _Str()
_SCALARS: dict[object, Codec] = {
    None: _None(),
    type(None): _None(),
    int: _Scalar("an int", struct.Struct("<q"), (int, np.integer)),
    float: _Scalar("a float", struct.Struct("<d"), (float, int, np.floating, np.integer)),
    bool: _Scalar("a bool", struct.Struct("<?"), (bool, np.bool_)),
}
_SCALARS[str] = _STR
_ERROR = _Tuple((_STR, _STR))  # an error reply: the exception's type name, its message


def _dtype_names() -> str:
    return ", ".join(d.name for d in WIRE_DTYPES.values())


def codec_of(hint: object) -> Codec:
    """The layout of a type of a signature; a TypeError naming the type when the wire cannot carry it."""
    if hint in _SCALARS:
        return _SCALARS[hint]
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is np.ndarray or origin is np.ndarray:
        return _Array.of(ArrayOf())
    if origin is typing.Annotated and (args[0] is np.ndarray or typing.get_origin(args[0]) is np.ndarray):
        spec = next((m for m in args[1:] if isinstance(m, ArrayOf)), ArrayOf())
        return _Array.of(spec)
    if origin in (list, Sequence) and len(args) == 1:
        return _List(codec_of(args[0]))
    if origin in (dict, Mapping) and len(args) == 2 and args[0] is str:
        return _Dict(codec_of(args[1]))
    if origin is tuple and args and Ellipsis not in args:
        return _Tuple(tuple(codec_of(a) for a in args))
    raise TypeError(f"the wire cannot carry {_name(hint)}")


def _name(hint: object) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else repr(hint)


@dataclass(frozen=True)
class Method:
    """A method of the interface as the wire knows it."""

    id: int
    name: str
    signature: inspect.Signature
    params: _Tuple
    result: Codec
    function: Callable[..., Any]

    def arguments(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        """The call's arguments in the signature's order (defaults filled in)."""
        if not kwargs and len(args) == len(self.params.items):
            return args
        try:
            bound = self.signature.bind(None, *args, **kwargs)
        except TypeError as e:
            raise FrameError(f"{self.name}: {e}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())[1:]


class MethodTable:
    """The methods of a ``typing.Protocol`` class, numbered 1, 2, ... in the order of their names."""

    def __init__(self, interface: type) -> None:
        functions: dict[str, Callable[..., Any]] = {}
        for klass in reversed(interface.__mro__):
            if klass in (object, Protocol, typing.Generic):
                continue
            for name, f in vars(klass).items():
                if inspect.isfunction(f) and not name.startswith("_"):
                    functions[name] = f
        self.interface = interface
        self.methods: dict[int, Method] = {}
        self.by_function: dict[Callable[..., Any], Method] = {}
        for i, name in enumerate(sorted(functions), start=1):
            f = functions[name]
            hints = typing.get_type_hints(f, include_extras=True)
            signature = inspect.signature(f)
            codecs, names = [], []
            for p in list(signature.parameters.values())[1:]:
                if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    raise TypeError(f"{interface.__name__}.{name}: parameter {p.name!r} must be positional")
                if p.name not in hints:
                    raise TypeError(f"{interface.__name__}.{name}: parameter {p.name!r} has no type")
                try:
                    codecs.append(codec_of(hints[p.name]))
                except TypeError as e:
                    raise TypeError(f"{interface.__name__}.{name}: {p.name} ({_name(hints[p.name])}): {e}") from None
                names.append(p.name)
            if "return" not in hints:
                raise TypeError(f"{interface.__name__}.{name}: its result has no type")
            try:
                result = codec_of(hints["return"])
            except TypeError as e:
                raise TypeError(f"{interface.__name__}.{name}: its result ({_name(hints['return'])}): {e}") from None
            method = Method(i, name, signature, _Tuple(tuple(codecs), tuple(names)), result, f)
            self.methods[i] = method
            self.by_function[f] = method
        self.digest = _digest(self.methods)


def _digest(methods: dict[int, Method]) -> bytes:
    """What the two ends compare at the handshake: the same table, or no connection."""
    text = repr([(m.id, m.name, m.params, m.result) for m in methods.values()])
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


def encode(kind: Kind, method: int, request: int, codec: Codec, value: Any, limits: Limits) -> list[Any]:
    """A frame's buffers: the prefix and header, then the arrays' bytes (for ``socket.sendmsg``)."""
    w = _Writer(limits)
    codec.encode(w, value)
    header = b"".join(w.parts)
    if len(header) > limits.header_bytes:
        raise FrameError(f"a header of {len(header)} bytes (at most {limits.header_bytes})")
    buffers: list[Any] = [PREFIX.pack(MAGIC, VERSION, kind, method, request, len(header)) + header]
    buffers.extend(a.data.cast("B") for a in w.arrays if a.nbytes)
    return buffers


def encode_error(method: Method, request: int, error: BaseException, limits: Limits) -> list[Any]:
    """An error reply: the exception's type name and as much of its message as the header holds."""
    kind = type(error).__name__[:64]
    room = max(0, min(4096, limits.header_bytes - 2 * _COUNT.size - len(kind.encode())))
    message = str(error).encode()[:room].decode(errors="ignore")
    return encode(Kind.ERROR, method.id, request, _ERROR, (kind, message), limits)


def error_of(method: Method, value: tuple[str, str]) -> RemoteError:
    return RemoteError(method.name, value[0], value[1])


def send(sock: socket.socket, buffers: list[Any]) -> None:
    """Send every byte of ``buffers`` (``sendmsg``: gathered by the kernel, no joined copy; each a buffer of
    bytes, none empty)."""
    left, first = sum(map(len, buffers)), 0
    while True:
        sent = sock.sendmsg(buffers if first == 0 and len(buffers) <= _IOV_MAX else buffers[first : first + _IOV_MAX])
        left -= sent
        if not left:  # at once, as a blocking socket with room for the frame does
            return
        while sent >= len(buffers[first]):
            sent -= len(buffers[first])
            first += 1
        if sent:
            buffers[first] = memoryview(buffers[first])[sent:]


def _recv_exact(sock: socket.socket, view: memoryview, idle: bool) -> bool:
    """Fill ``view`` from ``sock``. False: the peer closed before the first byte, where ``idle`` (between
    frames) allows it; a frame cut short (closed or silent past the socket's timeout) is a FrameError."""
    got, n = 0, len(view)
    while got < n:
        try:
            k = sock.recv_into(view[got:])
        except (TimeoutError, BlockingIOError):  # SO_RCVTIMEO ran out: EAGAIN
            if idle and got == 0:
                continue
            raise FrameError(f"truncated frame: {got} of {n} bytes came, then nothing for {_stall(sock):g} s") from None
        if k == 0:
            if idle and got == 0:
                return False
            raise FrameError(f"truncated frame: the peer closed the connection after {got} of {n} bytes")
        got += k
    return True


_TIMEVAL = struct.Struct("@ll")


def _stall(sock: socket.socket) -> float:
    """How long a receive on ``sock`` waits (its ``SO_RCVTIMEO``, or Python's timeout)."""
    timeout = sock.gettimeout()
    if timeout is not None:
        return timeout
    seconds, micros = _TIMEVAL.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, _TIMEVAL.size))
    return seconds + micros / 1e6


def set_stall(sock: socket.socket, seconds: float) -> None:
    """Make ``sock`` blocking, each send or receive giving up after ``seconds`` without progress (the kernel's
    ``SO_SNDTIMEO``/``SO_RCVTIMEO``: no poll before every call, as Python's own timeouts make)."""
    sock.settimeout(None)
    timeval = _TIMEVAL.pack(int(seconds), int(seconds % 1 * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)


Lookup = Callable[[int, int, int], tuple[Method, Codec]]
"""(kind, method id, request id) -> the method and the layout of the frame's header, or a FrameError."""


def receive(sock: socket.socket, limits: Limits, lookup: Lookup) -> tuple[Kind, Method, int, Any] | None:
    """The next frame from ``sock``: its kind, method, request id and value (arrays received into arrays of
    their own); None when the peer closed the connection between frames."""
    prefix = bytearray(PREFIX.size)
    if not _recv_exact(sock, memoryview(prefix), idle=True):
        return None
    magic, version, kind, method_id, request, length = PREFIX.unpack(prefix)
    if magic != MAGIC or version != VERSION:
        raise FrameError(f"not a frame of this data plane (magic {magic!r}, version {version})")
    if kind not in _KINDS:
        raise FrameError(f"unknown frame kind {kind}")
    if length > limits.header_bytes:
        raise FrameError(f"a header of {length} bytes (at most {limits.header_bytes})")
    method, codec = lookup(kind, method_id, request)
    header = bytearray(length)
    _recv_exact(sock, memoryview(header), idle=False)
    r = _Reader(header, limits)
    try:
        value = codec.decode(r)
    except FrameError as e:
        raise FrameError(f"{method.name}: {e}") from None
    if r.pos != length:
        raise FrameError(f"{method.name}: {length - r.pos} bytes left over in the header")
    for array in r.arrays:
        if array.nbytes:
            _recv_exact(sock, array.data.cast("B"), idle=False)
    return _KINDS[kind], method, request, value
