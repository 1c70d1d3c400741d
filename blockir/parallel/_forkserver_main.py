"""Preloaded by the async executor's forkserver: runs the caller's main script there, once.

A process started by ``forkserver`` first runs the parent's main script (as ``__mp_main__``) unless
the forkserver it was forked from already has. ``set_forkserver_preload(["__main__"])`` is meant to
do that once in the forkserver, but before Python 3.14 it never does (CPython gh-137996), so every
worker paid for re-running the script and its imports: 40 ms per run for the benchmark's. While the
parent starts the forkserver, :data:`MAIN_ENV` holds the script's path, ``sys.argv`` and ``sys.path``
(JSON, from :func:`main_script`); importing this module there runs the script as the forkserver's
``__main__`` with them, as a fixed CPython does. If that fails, the forkserver carries on without it
and each worker runs the script itself, as before (and reports the error).
"""

from __future__ import annotations

import json
import os
import sys
from contextlib import suppress
from multiprocessing import process, spawn

MAIN_ENV = "BLOCKIR_FORKSERVER_MAIN"


def main_script() -> str | None:
    """What the forkserver needs to run this process's main script (JSON), or None if it has none."""
    data = spawn.get_preparation_data("blockir-async")
    if "init_main_from_path" not in data:
        return None
    return json.dumps({"path": data["init_main_from_path"], "argv": data["sys_argv"], "sys_path": data["sys_path"]})


def _preload() -> None:
    script = os.environ.pop(MAIN_ENV, None)
    if not script:
        return
    main = json.loads(script)
    sys.argv[:], sys.path[:] = main["argv"], main["sys_path"]  # as the script sees them in a worker
    current = process.current_process()
    current._inheriting = True  # type: ignore[attr-defined]  # as in a worker: a script without a main guard fails
    try:
        with suppress(BaseException):  # the workers run it themselves, and report what fails
            spawn.import_main_path(main["path"])
    finally:
        del current._inheriting  # type: ignore[attr-defined]


_preload()
