"""Training beyond one process: the parameter server, the fleet API and ``blockir launch`` (``docs/distributed.md``).

``from blockir.distributed import fleet`` is the API of a training script; the
admission policies of sparse tables' new ids are here too.
"""

from blockir.dsl.entry import CountFilterEntry, ProbabilityEntry

__all__ = ["CountFilterEntry", "ProbabilityEntry"]
