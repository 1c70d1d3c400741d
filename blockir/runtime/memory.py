"""How glibc's malloc treats the memory a process frees: keep it for reuse, or hand it back.

By default glibc hands large freed blocks back to the system (``munmap``, or a trim of the heap's top)
and faults them in again on the next allocation. A training step allocates and frees the same large
temporaries every time, so a process that runs steps back to back pays page faults for each: on
bow_net about 140,000 per 40,000 instances (15% of a worker's time), and in two replicas training an
MLP side by side (``docs/data_parallel.md``) they cost both threads the kernel's time. Fixed
thresholds (which also end glibc's adjusting them) keep the memory, at the cost of up to
``M_TRIM_THRESHOLD`` of freed memory held by the process. Both calls are process-wide and do nothing
where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
from contextlib import suppress

__all__ = ["keep_freed_memory", "release_freed_memory"]

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)


def keep_freed_memory() -> None:
    """Have malloc keep freed memory for reuse in this process: blocks up to 32 MiB from the heap, up to
    256 MiB of freed memory kept (no-op where the C library is not glibc)."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 256 << 20)
    mallopt(_M_MMAP_THRESHOLD, 32 << 20)  # glibc's largest


def release_freed_memory() -> None:
    """Hand the memory malloc keeps back to the system (no-op where the C library is not glibc)."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)
