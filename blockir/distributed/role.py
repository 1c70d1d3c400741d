"""A role of a parameter-server training run, and how a launch's roles ended: the records every module of
:mod:`blockir.distributed` shares (the lowest of its layers: it imports none of them).

:class:`Role` is what ``blockir launch`` tells each run of the script (through a context, or the environment:
:meth:`Role.env`, :meth:`Role.from_env`); :class:`LaunchResult` how the roles ended; :func:`restartable` whether
the launcher runs a failed role again; :func:`role_name` a role as messages name it (``worker 1``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from blockir.errors import BlockirError

__all__ = ["ROLES", "LaunchResult", "Role", "restartable", "role_name"]

ROLES = ("server", "worker")


@dataclass(frozen=True)
class Role:
    """Which role this run of the script plays, in which training run."""

    kind: str  # "server" or "worker"
    index: int
    servers: int
    workers: int
    run: str = "default"
    backend: str = "inprocess"
    timeout: float = 300.0  # how long to wait for servers, other workers, a sync step
    restart: int = 0  # how many times the launcher restarted this role
    checkpoint_dir: str | None = None  # where worker 0 checkpoints and a restarted server restores from
    checkpoint_every: int = 0  # steps between worker 0's checkpoints (0: only the one when it joins)

    def __post_init__(self) -> None:
        if self.kind not in ROLES:
            raise BlockirError(f"unknown role {self.kind!r} (expected server or worker)")
        if self.servers < 1:
            raise BlockirError(f"parameter-server training needs at least one server, got {self.servers}")
        if self.workers < 1:
            raise BlockirError(f"parameter-server training needs at least one worker, got {self.workers}")
        count = self.servers if self.kind == "server" else self.workers
        if not 0 <= self.index < count:
            raise BlockirError(f"{self.kind} index {self.index} is out of range (there are {count} {self.kind}s)")

    @staticmethod
    def from_env(env: Mapping[str, str]) -> Role:
        """The role the environment names (module docstring); an error naming what is missing or wrong."""
        if "BLOCKIR_ROLE" not in env:
            raise BlockirError(
                "fleet.init: no role (run the script with `blockir launch --servers S --workers W script.py`, "
                "which sets BLOCKIR_ROLE and the rest)"
            )

        def number(key: str, default: str | None = None) -> int:
            text = env.get(key, default)
            if text is None:
                raise BlockirError(f"fleet.init: {key} is not set")
            try:
                return int(text)
            except ValueError:
                raise BlockirError(f"fleet.init: {key}={text!r} is not a number") from None

        return Role(
            env["BLOCKIR_ROLE"],
            number("BLOCKIR_ROLE_INDEX", "0"),
            number("BLOCKIR_SERVERS"),
            number("BLOCKIR_WORKERS"),
            env.get("BLOCKIR_PS_RUN", "default"),
            env.get("BLOCKIR_PS_BACKEND", "inprocess"),
            float(env.get("BLOCKIR_PS_TIMEOUT", "300")),
            number("BLOCKIR_RESTART", "0"),
            env.get("BLOCKIR_CHECKPOINT_DIR") or None,
            number("BLOCKIR_CHECKPOINT_EVERY", "0"),
        )

    def env(self) -> dict[str, str]:
        """The environment that names this role (what :meth:`from_env` reads)."""
        return {
            "BLOCKIR_ROLE": self.kind,
            "BLOCKIR_ROLE_INDEX": str(self.index),
            "BLOCKIR_SERVERS": str(self.servers),
            "BLOCKIR_WORKERS": str(self.workers),
            "BLOCKIR_PS_RUN": self.run,
            "BLOCKIR_PS_BACKEND": self.backend,
            "BLOCKIR_PS_TIMEOUT": str(self.timeout),
            "BLOCKIR_RESTART": str(self.restart),
            "BLOCKIR_CHECKPOINT_DIR": self.checkpoint_dir or "",
            "BLOCKIR_CHECKPOINT_EVERY": str(self.checkpoint_every),
        }


@dataclass
class LaunchResult:
    """How the roles ended: ``failures`` maps a role's name (``worker 1``) to its error's text, ``restarts`` to
    the errors after which it was restarted."""

    failures: dict[str, str] = field(default_factory=dict)
    restarts: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures


def restartable(role: Role, max_restarts: int) -> bool:
    """Whether the launcher runs ``role`` again when it fails (:mod:`blockir.distributed.launch`'s docstring)."""
    if role.restart >= max_restarts:
        return False
    return role.kind == "worker" or (role.backend == "ray" and role.checkpoint_dir is not None)


def role_name(role: Role) -> str:
    return f"{role.kind} {role.index}"
