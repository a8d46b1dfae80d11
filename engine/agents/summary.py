"""Compact text views of evaluation results, metrics and history, sized for prompts.

Prompts pay per token and models read the start and end of long logs best, so every block here
is bounded: log tails, a few worst elements, a fixed number of history lines.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudaforge.engine.results import NO_SPEED_CLAIM, EvalResult, OutputCheck, TimingStats

LOG_TAIL_LINES = 60
LOG_TAIL_CHARS = 4000


def tail(text: str, *, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS) -> str:
    """The last `lines` lines of `text`, at most `chars` characters, marked when cut."""
    text = text.rstrip()
    kept = text.splitlines()[-lines:]
    out = "\n".join(kept)
    if len(out) > chars:
        out = out[-chars:]
        out = out[out.find("\n") + 1 :] if "\n" in out else out
    if out != text:
        out = "[... earlier lines cut ...]\n" + out
    return out


_ERROR_LINE = re.compile(r"\berror\b", re.IGNORECASE)


def log_excerpt(text: str, *, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS) -> str:
    """The tail of a log, plus its first error line when the tail has cut it off: compilers
    report the cause first and its cascade after, so the first error is the one to fix."""
    end = tail(text, lines=lines, chars=chars)
    first = next((line.strip() for line in text.splitlines() if _ERROR_LINE.search(line)), None)
    if first and first not in end:
        return f"first error reported: {first[:500]}\n{end}"
    return end


def _num(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e4 or abs(value) < 1e-3:
        return f"{value:.3e}"
    return f"{value:.4g}"


def _ms(stats: TimingStats) -> str:
    return f"{stats.median_ms:.4g} ms (median of {stats.trials}, IQR {stats.iqr_ms:.2g} ms, {stats.method})"


def _output_line(check: OutputCheck) -> str:
    parts = [f"output {check.index}: {'ok' if check.passed else 'MISMATCH'}"]
    if tuple(check.shape_expected) != tuple(check.shape_got):
        parts.append(f"shape expected {tuple(check.shape_expected)} got {tuple(check.shape_got)}")
    else:
        parts.append(f"shape {tuple(check.shape_got)}")
    if check.dtype_expected != check.dtype_got:
        parts.append(f"dtype expected {check.dtype_expected} got {check.dtype_got}")
    else:
        parts.append(check.dtype_got)
    parts.append(f"max_abs_err {_num(check.max_abs_err)}, max_rel_err {_num(check.max_rel_err)}")
    if check.numel:
        share = 100.0 * check.mismatches / check.numel
        parts.append(f"mismatches {check.mismatches}/{check.numel} ({share:.3g}%)")
    if check.nonfinite_got:
        parts.append(f"non-finite values in candidate output: {check.nonfinite_got}")
    line = "; ".join(parts)
    if check.reason:
        line += f"; {check.reason}"
    for worst in check.worst[:3]:
        line += (
            f"\n    at {list(worst.index)}: expected {_num(worst.expected)} got {_num(worst.got)} "
            f"(abs err {_num(worst.abs_err)})"
        )
    return line


def summarize_result(result: EvalResult | None, *, include_logs: bool = True) -> str:
    """The measured outcome of one candidate as a compact text block for a prompt.

    `include_logs=False` leaves out compiler log, traceback and stderr, for prompts that show
    the error log in a section of its own.
    """
    if result is None:
        return "No measurement yet (this candidate has not been evaluated)."
    lines = [f"outcome: {result.outcome}" + (f" - {result.message}" if result.message else "")]
    if result.compile is not None:
        c = result.compile
        if c.ok:
            lines.append(f"compile: ok ({c.format}, {c.seconds:.2f} s{', cached' if c.cached else ''})")
        else:
            lines.append(f"compile: FAILED ({c.format})")
            if c.log.strip() and include_logs:
                lines.append("compiler log (tail):\n" + log_excerpt(c.log, lines=40, chars=3000))
    if result.correctness is not None:
        k = result.correctness
        verdict = "passed" if k.passed else "FAILED"
        lines.append(
            f"correctness: {verdict}, {k.trials_passed}/{k.trials} trials passed (atol {k.atol:g}, rtol {k.rtol:g})"
        )
        lines.extend("  " + _output_line(o) for o in k.outputs)
    if result.timing is not None:
        t = result.timing
        lines.append(f"timing: candidate {_ms(t.candidate)}; reference (eager PyTorch) {_ms(t.reference)}")
        lines.append(
            f"speedup vs eager: {t.speedup:.3g}x (spread {t.speedup_low:.3g}x to {t.speedup_high:.3g}x)"
            if t.speedup is not None
            else f"speedup vs eager: none, {NO_SPEED_CLAIM}"
        )
        if t.speedup_vs_compile is not None:
            lines.append(f"speedup vs torch.compile: {t.speedup_vs_compile:.3g}x")
        if t.host_candidate is not None and t.host_reference is not None:
            lines.append(
                f"host-synchronized timing: candidate {t.host_candidate.median_ms:.4g} ms, "
                f"reference {t.host_reference.median_ms:.4g} ms"
            )
    if result.kernels:
        launched = ", ".join(
            f"{k.name}{' (custom)' if k.custom else ''} x{k.count} {k.share * 100:.0f}%"
            for k in sorted(result.kernels, key=lambda k: -k.share)[:8]
        )
        lines.append(f"kernels launched (share of kernel time): {launched}")
    if result.findings:
        lines.append("integrity findings:")
        lines.extend(f"  [{f.severity}] {f.name}: {f.message}" for f in result.findings)
    if result.exit is not None and result.exit.reason != "ok":
        e = result.exit
        detail = (
            f" (signal {e.signal})" if e.signal else (f" (exit code {e.returncode})" if e.returncode else "")
        )
        phase = f" during {e.phase}" if e.phase else ""
        lines.append(f"worker: {e.reason}{detail}{phase} after {e.seconds:.1f} s")
    if include_logs and result.traceback.strip():
        lines.append("traceback (tail):\n" + tail(result.traceback, lines=30, chars=2500))
    elif include_logs and result.outcome != "ok" and result.stderr_tail.strip():
        lines.append("stderr (tail):\n" + tail(result.stderr_tail, lines=20, chars=1500))
    return "\n".join(lines)


def error_log_tail(
    result: EvalResult | None, *, lines: int = LOG_TAIL_LINES, chars: int = LOG_TAIL_CHARS
) -> str:
    """What went wrong, for the Judge's correction mode: compiler log, traceback or stderr tail."""
    if result is None:
        return "(no error log: the candidate was not evaluated)"
    parts: list[str] = []
    if result.compile is not None and not result.compile.ok and result.compile.log.strip():
        parts.append("compiler log:\n" + log_excerpt(result.compile.log, lines=lines, chars=chars))
    if result.traceback.strip():
        parts.append("traceback:\n" + tail(result.traceback, lines=lines, chars=chars))
    if not parts and result.stderr_tail.strip():
        parts.append("stderr:\n" + tail(result.stderr_tail, lines=lines, chars=chars))
    if not parts:
        parts.append(f"(no log: outcome {result.outcome}{' - ' + result.message if result.message else ''})")
    return "\n\n".join(parts)


def _metric_value(value: Any) -> tuple[str, str]:
    """(value, unit) from a (value, unit) pair, a {'value','unit'} mapping, an object or a bare value."""
    if isinstance(value, (tuple, list)) and len(value) == 2:
        v, unit = value
    elif isinstance(value, Mapping):
        v, unit = value.get("value"), value.get("unit", "")
    elif hasattr(value, "value"):
        v, unit = value.value, getattr(value, "unit", "")
    else:
        v, unit = value, ""
    if v is None:  # ncu printed n/a
        return "n/a", ""
    shown = _num(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
    return shown, str(unit or "")


def format_metrics(metrics: Any) -> str:
    """Per-kernel NCU metrics as text lines `name = value unit`, grouped by kernel.

    Accepts a preformatted string; a mapping kernel -> {metric: value}; or a sequence of rows
    with a kernel name (`kernel` or `name`) and a `metrics` mapping (attributes or keys).
    Values may be (value, unit) pairs, {'value', 'unit'} mappings or objects with `.value`/`.unit`.
    """
    if metrics is None:
        return "(no hardware metrics: profiling was off or unavailable)"
    if isinstance(metrics, str):
        return metrics.strip() or "(no hardware metrics)"
    groups: list[tuple[str, Mapping[str, Any]]] = []
    if isinstance(metrics, Mapping):
        groups = [(str(k), v) for k, v in metrics.items()]
    else:
        for row in metrics:
            get = (
                row.get
                if isinstance(row, Mapping)
                else (lambda key, default=None, r=row: getattr(r, key, default))
            )
            name = get("kernel") or get("name") or "kernel"
            groups.append((str(name), get("metrics") or {}))
    if not groups:
        return "(no hardware metrics)"
    out: list[str] = []
    for name, values in groups:
        out.append(f"kernel {name}:")
        for metric, value in values.items():
            shown, unit = _metric_value(value)
            out.append(f"  {metric} = {shown}{' ' + unit if unit else ''}")
    return "\n".join(out)


def metric_names(metrics: Any) -> set[str]:
    """The metric names present in `metrics` (any shape `format_metrics` accepts but a string)."""
    names: set[str] = set()
    if metrics is None or isinstance(metrics, str):
        return names
    if isinstance(metrics, Mapping):
        for values in metrics.values():
            names.update(str(k) for k in values)
        return names
    for row in metrics:
        values = row.get("metrics") if isinstance(row, Mapping) else getattr(row, "metrics", None)
        names.update(str(k) for k in (values or {}))
    return names


def format_findings(findings: Iterable[Any] | str | None) -> str:
    """Analyzer findings as bullet lines; accepts strings or objects with name/message fields."""
    if findings is None:
        return "(no analyzer findings)"
    if isinstance(findings, str):
        return findings.strip() or "(no analyzer findings)"
    lines = []
    for f in findings:
        if isinstance(f, str):
            lines.append(f"- {f}")
            continue
        get = f.get if isinstance(f, Mapping) else (lambda key, default=None, o=f: getattr(o, key, default))
        name, message = get("name", ""), get("message", "") or get("summary", "") or str(f)
        severity = get("severity", "")
        prefix = f"[{severity}] " if severity else ""
        lines.append(f"- {prefix}{name + ': ' if name else ''}{message}")
    return "\n".join(lines) if lines else "(no analyzer findings)"


@dataclass(frozen=True)
class RoundNote:
    """One earlier round, as the Coder should remember it: what was tried, what it gave."""

    round: int
    action: str  # "seed", or the Judge's method / the person's instruction in a few words
    outcome: str  # EvalResult.outcome
    speedup: float | None = None
    detail: str = ""  # one line: the error, or what the profile said
    best: bool = False
    repeat_of: int | None = None  # the round whose candidate this one repeated exactly

    @classmethod
    def from_result(
        cls, round: int, action: str, result: EvalResult | None, *, best: bool = False,
        repeat_of: int | None = None,
    ) -> RoundNote:
        """A note from a round's result; the detail is its one-line message."""
        if result is None:
            return cls(round, action, "not evaluated", best=best, repeat_of=repeat_of)
        return cls(round, action, result.outcome, result.speedup, result.message, best, repeat_of)


def format_history(notes: Sequence[RoundNote], *, limit: int = 10) -> str:
    """Earlier rounds, oldest first, one line each; keeps the best round when cutting."""
    if not notes:
        return "(no earlier rounds)"
    shown = list(notes)
    if len(shown) > limit:
        kept = shown[-(limit - 1) :]
        best = [n for n in shown[: -(limit - 1)] if n.best]
        shown = best[-1:] + kept
    lines = []
    for n in shown:
        speed = f", {n.speedup:.3g}x" if n.speedup is not None else ""
        detail = f" - {n.detail.strip().splitlines()[0][:160]}" if n.detail.strip() else ""
        mark = "  <- best so far" if n.best else ""
        repeat = f" (REPEAT: identical to round {n.repeat_of}'s candidate, not a new result)" if n.repeat_of else ""
        lines.append(f"- round {n.round} [{n.action}]: {n.outcome}{speed}{detail}{repeat}{mark}")
    if len(notes) > len(shown):
        lines.insert(0, f"({len(notes) - len(shown)} older rounds not shown)")
    if notes[-1].repeat_of is not None:
        lines.append(f"Round {notes[-1].round} sent back round {notes[-1].repeat_of}'s candidate unchanged: it was "
                     "not evaluated anew and gained nothing. Write a different candidate this time.")
    return "\n".join(lines)
