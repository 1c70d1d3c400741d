"""The exceptions blockir raises. Every error a user can cause is a BlockirError."""

from __future__ import annotations

from typing import Any


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


class NanInfError(ExecutionError):
    """An op produced NaN or inf while the executor checks for them (``Executor(check_nan_inf=True)``).

    The message names the op in its text form, each output variable holding NaN or inf with how many,
    and the statistics of the op's inputs. ``op`` is the op's text form; ``counts`` maps each such
    output variable to its (NaN, inf) counts.
    """

    def __init__(self, message: str, op: str = "", counts: dict[str, tuple[int, int]] | None = None) -> None:
        super().__init__(message)
        self.op = op
        self.counts = dict(counts or {})


class PipelineError(BlockirError):
    """A pass pipeline string is malformed or names an unknown pass or option.

    The message quotes the pipeline and gives the column of the problem;
    ``pipeline`` and ``position`` (0-based) hold them.
    """

    def __init__(self, message: str, pipeline: str, position: int) -> None:
        super().__init__(message)
        self.pipeline = pipeline
        self.position = position


class PassError(BlockirError):
    """A pass raised, or produced a program the verifier rejects.

    The message names the pass, the passes before it and the reproducer: the
    program the pass received, saved as a ``.pb`` file that ``blockir opt`` reruns.
    ``report`` is the :class:`~blockir.passes.PassReport` of the passes that ran
    before it (``None`` where the error was built outside the pass manager).
    """

    def __init__(self, message: str, pass_name: str, before: list[str], reproducer: str, report: Any = None) -> None:
        super().__init__(message)
        self.pass_name = pass_name
        self.before = before
        self.reproducer = reproducer
        self.report = report


class ChannelClosedError(BlockirError):
    """A send on a closed channel (also when the channel closed while the send was blocked)."""


class ChannelTimeout(BlockirError, TimeoutError):
    """A channel operation or select did not complete within its timeout; it did not happen."""


class DeadlockError(BlockirError):
    """Every live thread that uses channels is blocked: none can make progress.

    The message names each blocked thread and what it waits for; ``blocked`` lists them.
    """

    def __init__(self, message: str, blocked: list[str] | None = None) -> None:
        super().__init__(message)
        self.blocked = list(blocked) if blocked is not None else []


class DataFeedError(BlockirError):
    """A data feed description or data file is missing, unreadable or malformed.

    The message names the file, and for a malformed line its number (1-based) and what was expected.
    """
