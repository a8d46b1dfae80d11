"""Text helpers shared by the panes: numbers with units, status glyphs, diffs, compiler-log parsing.

Kept free of widgets so they can be tested and reused by the chart, the tree and the status bar.
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass

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


def fmt_number(value: float | None) -> str:
    """Compact, unit-free number: 3 significant digits, thousands grouped for large values."""
    if value is None:
        return "n/a"
    a = abs(value)
    if a == 0:
        return "0"
    if a >= 1e6:
        return f"{value:,.0f}"
    if a >= 100:
        return f"{value:,.1f}"
    if a >= 1:
        return f"{value:.2f}"
    if a >= 1e-3:
        return f"{value:.4f}"
    return f"{value:.3g}"


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

_ERROR = re.compile(r"(\berror\b|\bError\b|FAILED|Traceback)", re.IGNORECASE)
_WARNING = re.compile(r"\bwarning\b", re.IGNORECASE)
_SNIPPET = re.compile(r"^\s*(\d+)\s\|\s?(.*)$")  # gcc/clang source excerpt: "    5 |   return x * 2"
_LOCATION = re.compile(r"(?:\.(?:cpp|cu|cc|h|cuh)|kernel)[:(](\d+)(?::\d+)?\)?:?\s*(?:fatal\s+)?error",
                       re.IGNORECASE)


@dataclass(frozen=True)
class LogLine:
    text: str
    kind: str  # "error" | "warning" | "plain"


def classify_log(log: str) -> list[LogLine]:
    out = []
    for line in log.splitlines():
        if _ERROR.search(line) and "-Werror" not in line and not line.lstrip().startswith(("c++ ", "[1/")):
            kind = "error"
        elif _WARNING.search(line):
            kind = "warning"
        else:
            kind = "plain"
        out.append(LogLine(line, kind))
    return out


def failing_source_line(log: str, candidate: str) -> int | None:
    """The 0-based line of `candidate` that the first compiler error points at, if it can be found.

    First by the compiler's own source excerpt (gcc/clang print the offending line under the
    message), which is exact whatever the kernel string's position; else by the error's line number
    inside the first kernel source string of the candidate (NVRTC/nvcc print no excerpt)."""
    lines = log.splitlines()
    cand_lines = candidate.splitlines()
    for i, line in enumerate(lines):
        if not _ERROR.search(line) or line.lstrip().startswith(("c++ ", "[1/", "FAILED")):
            continue
        for follow in lines[i + 1:i + 4]:
            m = _SNIPPET.match(follow)
            if m and m.group(2).strip():
                text = m.group(2).rstrip()
                for j, cl in enumerate(cand_lines):
                    if cl.rstrip() == text or (len(text.strip()) > 6 and cl.strip() == text.strip()):
                        return j
        loc = _LOCATION.search(line)
        if loc:
            return _line_in_kernel_string(candidate, int(loc.group(1)))
    return None


def _line_in_kernel_string(candidate: str, line_no: int) -> int | None:
    """Map line `line_no` (1-based) of a generated source file to the candidate: the first
    multi-line string constant long enough holds the kernels; load_inline prepends one include line."""
    try:
        tree = ast.parse(candidate)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
            body_lines = node.value.split("\n")
            offset = 1 if "load_inline" in candidate else 0
            idx = line_no - 1 - offset
            if 0 <= idx < len(body_lines):
                # a raw string starting with a newline begins on the line after the opening quotes
                return node.lineno - 1 + idx
    return None
