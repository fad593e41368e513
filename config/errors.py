"""Typed errors that the CLI turns into one clear line and an exit code (DESIGN invariant 5)."""
from __future__ import annotations


class UsageError(Exception):
    """A bad flag, a bad file or a bad value from the user: printed as one line, exit code 2.

    ``lines`` holds one message per problem (``costscale validate`` prints them all).
    """

    exit_code = 2

    def __init__(self, message: str, lines: list[str] | None = None) -> None:
        super().__init__(message)
        self.lines = lines if lines is not None else [message]


class ConfigError(UsageError):
    """The YAML config is unreadable, malformed or invalid."""
