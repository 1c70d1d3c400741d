"""The exceptions blockir raises. Every error a user can cause is a BlockirError."""

from __future__ import annotations


class BlockirError(Exception):
    """Base class of every error blockir reports to a user."""


class ProgramFormatError(BlockirError):
    """A file or byte string is not a valid blockir/Paddle ProgramDesc."""


class ParseError(BlockirError):
    """The text form could not be parsed; the message names line and column."""


class VerifyError(BlockirError):
    """A program violates an invariant; the message names the op in its text form.

    ``problems`` lists the violations one by one (the message alone when not given).
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems) if problems is not None else [message]


class ShapeError(BlockirError):
    """Shape or dtype inference rejected an op's inputs or attributes."""


class OpNotFoundError(BlockirError):
    """No op of that type is registered."""


class ExecutionError(BlockirError):
    """A kernel failed while running a program; the message names the op and its inputs."""
