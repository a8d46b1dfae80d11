"""Text helpers shared by the panes: numbers with units, status glyphs, diffs, compiler-log parsing.

Kept free of widgets so they can be tested and reused by the chart, the tree and the status bar.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from cudaforge.engine.compiler_log import first_error, line_kind

STATUS_STYLE = {
    "ok": ("✓", "green"),
    "compile_error": ("✗", "red"),
    "runtime_error": ("✗", "red"),
    "wrong_result": ("≠", "red"),
    "integrity_failure": ("!", "magenta"),
    "timeout": ("⏱", "red"),
    "crash": ("✗", "red"),
    "cuda_error": ("✗", "red"),
    "oom": ("✗", "red"),
    "task_error": ("✗", "red"),
    "unavailable": ("?", "yellow"),
    "no_candidate": ("–", "yellow"),
    "running": ("…", "cyan"),
}

VERDICT_STYLE = {  # the analyzer's bottleneck classes
    "memory-bound": "yellow",
    "compute-bound": "green",
    "latency-bound": "magenta",
    "launch-bound": "cyan",
    "unknown": "white",
}
SEVERITY_STYLE = {"high": "bold red", "medium": "yellow", "low": "dim", "fail": "bold red", "warn": "yellow",
                  "info": "dim"}


def status_glyph(status: str) -> tuple[str, str]:
    return STATUS_STYLE.get(status, ("?", "white"))


def fmt_speedup(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}x"


def fmt_dollars(value: float, known: bool = True) -> str:
    if not known:
        return f"${value:.3f}+?"
    return f"${value:.3f}" if value < 10 else f"${value:.2f}"


def fmt_tokens(value: int) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 1_000:
        return f"{value / 1_000:.1f}k"
    return str(value)


def fmt_err(value: float) -> str:
    return f"{value:.3g}"


def fmt_elapsed(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds < 3600 else f"{seconds // 3600}h{seconds % 3600 // 60:02d}"


def fmt_delta_pct(current: float | None, other: float | None) -> str:
    if current is None or other is None:
        return ""
    if other == 0:
        return "=" if current == 0 else "new"
    pct = (current - other) / abs(other) * 100.0
    if abs(pct) < 0.05:
        return "="
    return f"{pct:+.1f}%"


def unified_diff(old: str, new: str, old_name: str, new_name: str) -> list[str]:
    return list(difflib.unified_diff(old.splitlines(), new.splitlines(), old_name, new_name, lineterm=""))


# ---- compiler logs -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class LogLine:
    text: str
    kind: str  # "error" | "warning" | "plain"


def classify_log(log: str) -> list[LogLine]:
    return [LogLine(line, line_kind(line)) for line in log.splitlines()]


def failing_source_line(log: str, candidate: str) -> int | None:
    """The 0-based line of `candidate` that the first compiler error points at, if it can be found."""
    err = first_error(log, candidate)
    return err.line if err is not None else None
