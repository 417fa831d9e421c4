"""How the command line reports an error: one line, never a traceback (``--debug`` shows one)."""

from __future__ import annotations

import sys

from omnigym.core.config import ConfigError


class UsageError(Exception):
    """A mistake in what the user asked for; the message names it and the flag or key that fixes it."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    UsageError,
    ConfigError,
    FileNotFoundError,
    NotADirectoryError,
    IsADirectoryError,
    PermissionError,
    ValueError,
    KeyError,
    TypeError,
)


def report_error(command: str, exc: BaseException) -> int:
    """Print ``exc`` as one line and return the exit status: 2 for a user's error, 1 for a bug."""
    message = _one_line(exc)
    for prefix in (f"{command}: ", f"{command.split()[0]}: "):  # the prefix says it already
        message = message.removeprefix(prefix)
    if isinstance(exc, USER_ERRORS) or _is_gymnasium_error(exc):
        print(f"omnigym {command}: error: {message}", file=sys.stderr)
        return 2
    print(
        f"omnigym {command}: internal error: {type(exc).__name__}: {message} "
        "(rerun with --debug for the traceback, and please report it)",
        file=sys.stderr,
    )
    return 1


def _one_line(exc: BaseException) -> str:
    """The exception's message on one line (a ``KeyError``'s without its quotes)."""
    text = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(text.split()) or type(exc).__name__


def _is_gymnasium_error(exc: BaseException) -> bool:
    """Gymnasium's own errors (unknown env id, namespace, version) are the user's to fix."""
    import gymnasium.error

    return isinstance(exc, gymnasium.error.Error)
