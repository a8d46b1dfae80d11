"""The two ways an evaluation stops early, raised anywhere in the worker and turned into outcomes by
the entry point (entry.py): the task is broken, or the candidate failed in a classified way."""

from __future__ import annotations

import os
import traceback
from typing import Any


class TaskFailure(Exception):
    """The task itself is broken (not the candidate): reported as outcome task_error."""


def task_frame(exc: BaseException | None, task_path: str) -> str:
    """"path:line (in fn)" of the deepest frame of `exc` in the user's task file (the line of a SyntaxError
    in it); '' when none is there. A task error names the user's own line, not ours."""
    if exc is None:
        return ""
    if isinstance(exc, SyntaxError) and exc.filename and _same(exc.filename, task_path) and exc.lineno:
        return f"{task_path}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if _same(f.filename, task_path)]
    return f"{task_path}:{frames[-1].lineno} (in {frames[-1].name})" if frames else ""


def with_task_frame(message: str, exc: BaseException | None, task_path: str) -> str:
    """The message with the task's own frame in front of it (in place of a bare "path: " prefix)."""
    frame = task_frame(exc, task_path)
    if not frame:
        return message
    return frame + ": " + message.removeprefix(f"{task_path}: ")


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


class CandidateFailure(Exception):
    """The candidate failed in a classified way; a failed build carries its log and its own duration."""

    def __init__(self, outcome: str, message: str, log: str = "", tb: str = "",
                 build_seconds: float | None = None, findings: tuple[Any, ...] = ()) -> None:
        super().__init__(message)
        self.outcome, self.message, self.log, self.tb = outcome, message, log, tb
        self.build_seconds = build_seconds
        self.findings = findings  # the findings that ended the evaluation (e.g. weights_mutation)
