"""Training beyond one process: the parameter server, the fleet API and ``blockir launch`` (``docs/distributed.md``)."""
