"""Admission policies of a sparse table's new ids in parameter-server training (Paddle's entries).

Given to ``bir.layers.embedding(..., entry=...)``, recorded on the ``lookup_table``
op as its ``entry`` attribute (``str(entry)``), applied by the servers
(:mod:`blockir.distributed.server`): an id not yet admitted reads as zeros and its
gradients are dropped.
"""

from __future__ import annotations

from blockir.errors import BlockirError

__all__ = ["CountFilterEntry", "ProbabilityEntry"]


class CountFilterEntry:
    """An id gets a row once pushes have carried it ``count`` times."""

    def __init__(self, count: int) -> None:
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise BlockirError(f"CountFilterEntry needs a count >= 1, got {count!r}")
        self.count = count

    def __str__(self) -> str:
        return f"count_filter:{self.count}"

    def __repr__(self) -> str:
        return f"CountFilterEntry({self.count})"


class ProbabilityEntry:
    """Each time a push carries an id without a row, it gets one with probability ``probability`` (a draw
    seeded by the table, the id and the sighting: the same ids are admitted in every run)."""

    def __init__(self, probability: float) -> None:
        if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
            raise BlockirError(f"ProbabilityEntry needs a probability in (0, 1], got {probability!r}")
        self.probability = float(probability)

    def __str__(self) -> str:
        return f"probability:{self.probability!r}"

    def __repr__(self) -> str:
        return f"ProbabilityEntry({self.probability!r})"
