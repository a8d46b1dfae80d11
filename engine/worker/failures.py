"""The two ways an evaluation stops early, raised anywhere in the worker and turned into outcomes by
the entry point (entry.py): the task is broken, or the candidate failed in a classified way."""

from __future__ import annotations


class TaskFailure(Exception):
    """The task itself is broken (not the candidate): reported as outcome task_error."""


class CandidateFailure(Exception):
    """The candidate failed in a classified way; a failed build carries its log and its own duration."""

    def __init__(self, outcome: str, message: str, log: str = "", tb: str = "",
                 build_seconds: float | None = None) -> None:
        super().__init__(message)
        self.outcome, self.message, self.log, self.tb = outcome, message, log, tb
        self.build_seconds = build_seconds
