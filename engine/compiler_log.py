"""The one reader of compiler logs (nvcc, NVRTC, gcc/clang through load_inline, Triton): its diagnostics
(file, line, severity, text), which one is the first error, where it points in the candidate, and what
class of error it is.

The worker's outcome message (the headline), the LLM Judge's evidence, the offline Judge, the Coder's
history and the TUI's Compiler and Source panes all read a log through here, so they always point at
the same line. A diagnostic is a line the compiler wrote about the source ("main.cpp:6:5: error: ...",
"kernel.cu(4): error: ...", "ptxas error : ..."), never a build command, ninja's progress or torch's
"Error building extension" wrapper.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

ERROR = re.compile(r"(\berror\b|\bError\b|FAILED|Traceback)", re.IGNORECASE)  # colours a pane's lines
_AN_ERROR = re.compile(r"\berror\b", re.IGNORECASE)  # a line that states an error (the first one is "the" error)
WARNING = re.compile(r"\bwarning\b", re.IGNORECASE)
_SNIPPET = re.compile(r"^\s*(\d+)\s\|\s?(.*)$")  # gcc/clang/Triton source excerpt: "    5 |   return x * 2"
_LOCATION = re.compile(r"(?:\.(?:cpp|cu|cc|h|cuh)|kernel)[:(](\d+)(?::\d+)?\)?:?\s*(?:fatal\s+)?error",
                       re.IGNORECASE)
_CANDIDATE_LOCATION = re.compile(r"\bcandidate\.py:(\d+):\s*error", re.IGNORECASE)  # Triton, via the worker
# Lines that mention an error without being one: build commands, ninja's progress, -Werror flags, torch's
# wrapper around the whole log ("Error building extension 'x': [1/2] c++ ...").
_NOT_AN_ERROR = ("c++ ", "[1/", "[2/", "[3/", "FAILED:", "nvcc ", "Error building extension", "ninja:")
MAX_CHARS = 300
# gcc/clang (and the worker's Triton report): "path/main.cpp:6:5: error: message"
_GCC_DIAG = re.compile(r"^(?P<file>[^\s:][^:]*?):(?P<line>\d+):(?:(?P<col>\d+):)?\s*"
                       r"(?P<sev>fatal error|error|warning):\s*(?P<msg>.*)$")
# nvcc/NVRTC: "path/main.cu(12): error: message", "kernel(4): warning #177-D: message"
_NVCC_DIAG = re.compile(r"^(?P<file>[^\s()][^()]*?)\((?P<line>\d+)\):\s*"
                        r"(?P<sev>catastrophic error|fatal error|error|warning)(?:\s*#[\w-]+)?\s*:\s*(?P<msg>.*)$")
# Tools that name no source line: "ptxas error   : Entry function ... uses too much shared data",
# "ptxas fatal   : ...", "nvlink error   : ...", "/usr/bin/ld: main.o: undefined reference to `f'".
_TOOL_DIAG = re.compile(r"^(?P<file>(?:\S*/)?(?:ptxas|nvlink|fatbinary|ld|collect2))\b[^:]*?"
                        r"(?P<sev>fatal|error|warning)?\s*:\s*(?P<msg>.*)$")

# (class, pattern, hint): the first pattern that matches the error (else the whole log) names the class.
_CLASSES: tuple[tuple[str, str, str], ...] = (
    ("undeclared", r"identifier \"?(\w+)\"? is undefined|was not declared|undeclared identifier|is not defined",
     "declare or include what the message names (a missing #include, a typo, or a helper defined after its use)"),
    ("syntax", r"expected a [\"']?[;)}\]]|expected [‘'\"][,;)}\]][’'\"]|expected an expression|syntax error|invalid syntax",
     "fix the syntax at the reported line (a missing ';', bracket or parenthesis)"),
    ("types", r"no instance of overloaded function|no matching function|cannot convert|incompatible",
     "make the argument types match the function's declaration (cast explicitly, e.g. float vs double, const)"),
    ("resources", r"too many resources requested|out of resources",
     "reduce registers or shared memory per block, or launch fewer threads per block"),
    ("shared_memory", r"uses too much shared data|shared memory",
     "reduce the static shared memory, or use dynamic shared memory with the size attribute raised"),
    ("memory_access", r"illegal memory access|out of bounds|misaligned address",
     "guard every global index with the element count and check the index arithmetic and the grid size"),
    ("launch_config", r"invalid configuration argument|invalid argument",
     "check the launch configuration: block size <= 1024 threads, grid dimensions > 0, shared memory within the limit"),
    ("out_of_memory", r"out of memory|CUDA_ERROR_OUT_OF_MEMORY",
     "allocate less: reuse buffers, avoid materialising large intermediates"),
)


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of a compiler log: the file and 1-based line the compiler names (None for a tool
    that names none, e.g. ptxas), its severity ("error" or "warning"; fatal and catastrophic errors are
    errors), its message, the whole line as written and its 0-based index in the log (for stepping)."""

    file: str
    line: int | None
    severity: str
    message: str
    text: str
    log_index: int
    column: int | None = None


def diagnostics(log: str) -> list[Diagnostic]:
    """Every diagnostic of `log`, in order (errors and warnings; gcc's notes and "In function" context,
    build commands and tracebacks are not diagnostics)."""
    return [d for i, line in enumerate(log.splitlines()) if (d := _diagnostic(line, i)) is not None]


def error_count(log: str) -> int:
    """How many errors the log reports: diagnostics of severity error, not lines that say "error"."""
    return sum(1 for d in diagnostics(log) if d.severity == "error")


def _diagnostic(line: str, index: int) -> Diagnostic | None:
    stripped = line.strip()
    if not stripped or stripped.startswith(_NOT_AN_ERROR) or stripped.lower().startswith("traceback"):
        return None
    for pattern in (_GCC_DIAG, _NVCC_DIAG):
        m = pattern.match(stripped)
        if m:
            sev = "warning" if m.group("sev") == "warning" else "error"
            col = m.groupdict().get("col")
            return Diagnostic(m.group("file"), int(m.group("line")), sev, m.group("msg").strip(), stripped,
                              index, int(col) if col else None)
    m = _TOOL_DIAG.match(stripped)
    if m:
        msg = m.group("msg").strip()
        sev = m.group("sev")
        if sev is None and "undefined reference" not in msg and "multiple definition" not in msg:
            return None  # ld's "in function" context, not a diagnostic
        return Diagnostic(m.group("file").rsplit("/", 1)[-1], None, "warning" if sev == "warning" else "error",
                          msg, stripped, index)
    return None


@dataclass(frozen=True)
class CompilerError:
    """The first error of a log: its text (one line), the 0-based line of the candidate it points at
    (None when it cannot be placed), its class ("other" when none of ours matches) and a fix hint."""

    text: str
    line: int | None = None
    kind: str = "other"
    hint: str | None = None
    diagnostic: Diagnostic | None = None  # the diagnostic it is, when the log has one

    @property
    def headline(self) -> str:
        """One line for the user and the agents: the diagnostic's message with the candidate's line
        (1-based) first and the compiler's own place after it, e.g.
        "line 9: error: expected ';' before 'const' (main.cpp:6:5)"; the compiler's line when it cannot be placed."""
        d = self.diagnostic
        if d is None:
            return self.text
        name = d.file.rsplit("/", 1)[-1]
        if self.line is None:  # the compiler's own line, its file named without the build folder
            return d.text.replace(d.file, name, 1)[:MAX_CHARS]
        where = name + (f":{d.line}" if d.line is not None else "") + (f":{d.column}" if d.column is not None else "")
        return f"line {self.line + 1}: {d.severity}: {d.message}"[:MAX_CHARS] + f" ({where})"


def line_kind(line: str) -> str:
    """'error', 'warning' or 'plain': how a pane colours one log line (a traceback's header too)."""
    if ERROR.search(line) and "-Werror" not in line and not line.lstrip().startswith(("c++ ", "[1/")):
        return "error"
    if WARNING.search(line):
        return "warning"
    return "plain"


def is_error_line(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and bool(_AN_ERROR.search(line)) and "-Werror" not in line \
        and not stripped.lower().startswith("traceback") and not stripped.startswith(_NOT_AN_ERROR)


def first_error(log: str, candidate: str = "") -> CompilerError | None:
    """The first error diagnostic of `log`, placed in `candidate` where it can be; None for an empty log.
    A log without diagnostics (an exception's text) falls back to its first line that states an error,
    else its last line (Python tracebacks end there)."""
    lines = log.splitlines()
    errors = [d for d in diagnostics(log) if d.severity == "error"]
    if errors:  # placed by its own line and excerpt only, so the line always belongs to the message
        first = errors[0]
        kind, hint = _classify_at(lines, first.log_index)
        line = _candidate_line(lines, first.log_index, candidate) if candidate else None
        return CompilerError(first.text[:MAX_CHARS], line, kind, hint, first)
    for i, line in enumerate(lines):
        if is_error_line(line):
            return _error_at(lines, i, candidate)
    rest = [line.strip() for line in lines if line.strip() and not line.startswith("[...")]
    if not rest:
        return None
    kind, hint = classify(log)
    return CompilerError(rest[-1][:MAX_CHARS], None, kind, hint)


def first_error_text(log: str) -> str:
    """Just the first error's text ('' for an empty log)."""
    err = first_error(log)
    return err.text if err is not None else ""


def headline(log: str, candidate: str = "") -> str:
    """The first error as one line, with the candidate's line where it can be placed ('' for an empty log):
    what the worker's message, the CLI, batch progress, the Judge's evidence and the Coder's history say."""
    err = first_error(log, candidate)
    return err.headline if err is not None else ""


def classify(text: str) -> tuple[str, str | None]:
    """(class, hint) of an error message or log; ("other", None) when no rule matches."""
    for kind, pattern, hint in _CLASSES:
        if re.search(pattern, text, re.IGNORECASE):
            return kind, hint
    return "other", None


def _classify_at(lines: list[str], i: int) -> tuple[str, str | None]:
    """The class of the error at lines[i]: by its own line, else by the few lines after it."""
    kind, hint = classify(lines[i])
    if kind == "other":
        kind, hint = classify("\n".join(lines[i:i + 6]))
    return kind, hint


def _error_at(lines: list[str], i: int, candidate: str) -> CompilerError:
    text = lines[i].strip()[:MAX_CHARS]
    kind, hint = _classify_at(lines, i)
    line = None
    if candidate:  # the first error that can be placed (an error may be the compiler's summary line)
        for k in range(i, len(lines)):
            if is_error_line(lines[k]) or ERROR.search(lines[k]):
                line = _candidate_line(lines, k, candidate)
                if line is not None:
                    break
    return CompilerError(text, line, kind, hint)


def _candidate_line(lines: list[str], i: int, candidate: str) -> int | None:
    """Where the error at `lines[i]` points in `candidate`: first by the compiler's own source excerpt
    (exact wherever the kernel string sits), else by a candidate.py line number (Triton), else by the
    line number inside the candidate's first multi-line string (NVRTC and nvcc print no excerpt)."""
    cand_lines = candidate.splitlines()
    for follow in lines[i + 1:i + 4]:
        if _diagnostic(follow, 0) is not None:
            break  # the next diagnostic's excerpt is not this one's
        m = _SNIPPET.match(follow)
        if m and m.group(2).strip():
            text = m.group(2).rstrip()
            for j, cl in enumerate(cand_lines):
                if cl.rstrip() == text or (len(text.strip()) > 6 and cl.strip() == text.strip()):
                    return j
    loc = _CANDIDATE_LOCATION.search(lines[i])
    if loc and 0 < int(loc.group(1)) <= len(cand_lines):
        return int(loc.group(1)) - 1
    loc = _LOCATION.search(lines[i])
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
