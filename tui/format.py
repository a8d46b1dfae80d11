"""Text helpers shared by the panes: numbers with units, status glyphs, diffs, compiler-log parsing.

Kept free of widgets so they can be tested and reused by the chart, the tree and the status bar.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from cudaforge.engine.compiler_log import first_error, is_error_line, line_kind

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
    "stopped": ("■", "yellow"),  # left unfinished when its session stopped
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


def judge_mode_label(mode: str) -> str:
    """How the Judge's mode reads: "correct" (the stored value, kept so old run folders open) is a repair."""
    return {"correct": "repair"}.get(mode, mode)


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


# A compiler's own diagnostic: "file:12:5: error: ...", "kernel.cu(12): error: ...", "error: ..." (nvcc).
_DIAGNOSTIC = re.compile(r"(?::\d+(?::\d+)?:|\(\d+\):?)\s*(?:fatal\s+)?error\b|^\s*(?:fatal\s+)?error\s*:",
                         re.IGNORECASE)
# Lines that state that a build failed without being a diagnostic (the summary of ninja, torch or Python).
_BUILD_SUMMARY = ("ninja: build stopped", "Error building extension", "RuntimeError: Error building extension",
                  "subprocess.CalledProcessError")


def diagnostic_lines(lines: list[LogLine]) -> list[int]:
    """The indices of the log's diagnostics: what the Compiler pane counts and `n`/`N` step through.
    The compiler's own "file:line: error" lines where there are any; else the lines that state an error
    (a Python exception's message), never ninja's progress, its "build stopped" or a traceback's header.
    A diagnostic printed twice counts once. The one rule for both; engine/compiler_log.py's reader of
    diagnostics may take its place."""
    stated = [i for i, line in enumerate(lines)
              if is_error_line(line.text) and not line.text.lstrip().startswith(_BUILD_SUMMARY)]
    precise = [i for i in stated if _DIAGNOSTIC.search(lines[i].text)]
    seen: set[str] = set()
    unique = []
    for i in precise or stated:  # a log repeated (the build error inside its own traceback) counts once
        if lines[i].text.strip() not in seen:
            seen.add(lines[i].text.strip())
            unique.append(i)
    return unique


def failing_source_line(log: str, candidate: str) -> int | None:
    """The 0-based line of `candidate` that the first compiler error points at, if it can be found."""
    err = first_error(log, candidate)
    return err.line if err is not None else None
