"""One machine, many workers: the asynchronous (Hogwild) executor fed from files."""

from blockir.parallel.async_executor import MODES, AsyncExecutor, AsyncStats, Progress, WorkerStats

__all__ = ["MODES", "AsyncExecutor", "AsyncStats", "Progress", "WorkerStats"]
