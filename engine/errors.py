"""Errors the engine raises to its callers; each carries the process exit code it maps to."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_OK = 0
EXIT_NOT_ACCEPTED = 1
EXIT_BAD_INPUT = 2
EXIT_UNAVAILABLE = 3
EXIT_INTERRUPTED = 130


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """" (did you mean 'x'?)" for the closest known name, '' when none is close: every unknown config key
    and section says it the same way."""
    hint = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean '{hint[0]}'?)" if hint else ""


class CudaforgeError(Exception):
    """An error meant for the user: a one-line message and an exit code, never a traceback."""

    exit_code: int = EXIT_BAD_INPUT

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        return self.message


class UsageError(CudaforgeError):
    """Bad command-line usage."""


class ConfigError(CudaforgeError):
    """A configuration file or value is invalid; the message names the file and key."""


class TaskError(CudaforgeError):
    """A task file cannot be used; the message names the file, the line if any, and the cause."""


class CandidateError(CudaforgeError):
    """A candidate file cannot be read or has no ModelNew."""


class ToolUnavailable(CudaforgeError):
    """A needed tool or device (GPU, nvcc, ncu, counters) is not available."""

    exit_code = EXIT_UNAVAILABLE
