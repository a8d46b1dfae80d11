"""Plain-text rendering of evaluation results for the terminal (no rich: the engine stays UI-free)."""

from __future__ import annotations

import os
import re

from cudaforge.engine.results import NO_SPEED_CLAIM, EvalResult, Memory, Timing, TimingStats
from cudaforge.engine.speed_of_light import describe
from cudaforge.engine.worker.memory import FACTOR

TICK, CROSS = "PASS", "FAIL"


def _ms(t: TimingStats) -> str:
    return f"{t.median_ms * 1e3:9.1f} µs  (IQR {t.iqr_ms * 1e3:.1f} µs, {t.trials} trials)"


def user_traceback(tb: str, task_path: str) -> list[str]:
    """A task error's traceback cut to the user's own frames (those in the task file) and the exception
    line, from the last chained exception that passed through the task: what a task author needs,
    without our worker's frames (`--debug` shows the whole)."""
    name = os.path.realpath(task_path)
    best: list[str] = []
    out: list[str] = []
    keep = False
    for line in tb.strip().splitlines() + ["Traceback"]:
        m = _FRAME.match(line)
        if m:
            keep = os.path.realpath(m.group(1)) == name
        elif not line.startswith(" "):  # "Traceback ...", "The above exception ...", the exception itself
            keep = False
            if line.startswith("Traceback"):
                if any(_FRAME.match(x) for x in out):
                    best = out
                out = []
            elif line.strip() and not line.startswith(("The above", "During handling", "cudaforge.")):
                out.append(line)
            continue
        if keep:
            out.append(line)
    return best


_FRAME = re.compile(r'^\s*File "([^"]+)", line \d+')


def format_result(r: EvalResult, *, log_lines: int = 40, debug: bool = False) -> str:
    lines = [f"{'ACCEPTED' if r.accepted else 'NOT ACCEPTED'}: {r.outcome} — {r.message}"]
    lines.append(f"  task {r.task_path}  format {r.format}  device {r.device}{'  ' + r.gpu_name if r.gpu_name else ''}")
    if r.compile is not None:
        c = r.compile
        status = "ok" if c.ok else "FAILED"
        lines.append(f"compile: {status} in {c.seconds:.2f} s{' (cached)' if c.cached else ''}")
        if not c.ok and c.log:
            log = c.log.strip().splitlines()
            lines += ["  " + x for x in log[-log_lines:]]
    if r.correctness is not None:
        k = r.correctness
        lines.append(f"correctness: {TICK if k.passed else CROSS} {k.trials_passed}/{k.trials} trials "
                     f"(atol={k.atol:g}, rtol={k.rtol:g})")
        for o in k.outputs:
            lines.append(f"  output {o.index}: {TICK if o.passed else CROSS} shape {list(o.shape_got)} {o.dtype_got}"
                         f"  max abs {o.max_abs_err:.3g}  max rel {o.max_rel_err:.3g}  mismatches {o.mismatches}/{o.numel}"
                         + (f"  — {o.reason}" if o.reason else ""))
            for w in o.worst[:5] if not o.passed else ():
                lines.append(f"      at {list(w.index)}: expected {w.expected:.6g}, got {w.got:.6g}")
        failed = [t for t in k.trial_results if not t.passed]
        if failed:
            lines.append("  failed trials: " + ", ".join(f"#{t.trial} seed {t.seed} ({t.distribution}, {t.order})"
                                                          for t in failed))
    if r.timing is not None:
        t = r.timing
        lines.append("timing (" + ("CUDA events, L2 flushed" if t.l2_flush else t.candidate.method) + ", interleaved):")
        lines.append(f"  reference {_ms(t.reference)}")
        lines.append(f"  candidate {_ms(t.candidate)}")
        if t.compile_baseline is not None:
            lines.append(f"  compile   {_ms(t.compile_baseline)}")
        if t.speedup is None:
            lines.append(f"  speedup   none: {NO_SPEED_CLAIM}")
        else:
            lines.append(f"  speedup   {t.speedup:.3f}x  (spread {t.speedup_low:.3f}–{t.speedup_high:.3f})"
                         + (f"   vs torch.compile {t.speedup_vs_compile:.3f}x" if t.speedup_vs_compile else ""))
        if t.host_candidate is not None and t.host_reference is not None:
            lines.append(f"  device-synchronized host time: reference {t.host_reference.median_ms * 1e3:.1f} µs, "
                         f"candidate {t.host_candidate.median_ms * 1e3:.1f} µs")
        lines += ["  " + x for x in timing_notes(t)]
    if r.speed_of_light is not None:
        sol = r.speed_of_light
        head = f"{sol.sol_fraction:.1%} of speed of light" if sol.sol_fraction is not None else "absent"
        lines.append(f"speed of light: {head}")
        lines += ["  " + x for x in describe(sol)]
    if r.kernels:
        lines.append("kernels launched by the candidate:")
        for kl in r.kernels[:10]:
            lines.append(f"  {'custom ' if kl.custom else 'library'} {kl.count:4d}x {kl.share:6.1%}  {kl.name[:90]}")
    mem_line = format_memory(r.memory) if r.memory is not None else ""
    if mem_line:
        lines.append(mem_line)
    if r.findings:
        lines.append("integrity findings:")
        for f in r.findings:
            lines.append(f"  [{f.severity}] {f.name}: {f.message}")
    if r.exit is not None and r.exit.reason != "ok":
        lines.append(f"worker: {r.exit.reason} (code {r.exit.returncode}, signal {r.exit.signal}, "
                     f"phase '{r.exit.phase}', {r.exit.seconds:.1f} s)")
    if r.traceback and r.outcome == "task_error" and not debug:
        own = user_traceback(r.traceback, r.task_path)
        if own:
            lines.append("in your task (--debug shows the whole traceback):")
            lines += ["  " + x for x in own[-12:]]
    elif r.traceback and r.outcome in ("runtime_error", "cuda_error", "oom", "task_error"):
        lines.append("traceback (last lines):")
        lines += ["  " + x for x in r.traceback.strip().splitlines()[-12:]]
    if not r.accepted and r.stderr_tail.strip() and r.outcome in ("crash", "cuda_error", "timeout"):
        lines.append("worker stderr (tail):")
        lines += ["  " + x for x in r.stderr_tail.strip().splitlines()[-12:]]
    if r.phases:
        lines.append("phases: " + ", ".join(f"{k} {v:.2f}s" for k, v in r.phases.items() if v >= 0.005))
    return "\n".join(lines)


def timing_notes(t: Timing) -> list[str]:
    """The timing's own evidence: its spread against the noise threshold, how often it was measured, the
    pinned CPU threads. Shared by `cudaforge eval` and the Correctness pane; empty for results that predate it."""
    lines = []
    if t.noise_threshold is not None:
        noisy = max(t.reference.spread, t.candidate.spread) > t.noise_threshold
        lines.append(f"spread (IQR / median): reference {t.reference.spread:.2f}, candidate {t.candidate.spread:.2f}"
                     f" ({'NOISY: over' if noisy else 'within'} {t.noise_threshold:g}; measured {t.measurements}x)")
    if t.cpu_threads is not None:
        lines.append(f"torch threads pinned to {t.cpu_threads} for both sides")
    if t.kernel_candidate is not None and t.kernel_reference is not None:
        ratios = [f"{name} {ev.median_ms / k.median_ms:.2f}" for name, ev, k in
                  (("reference", t.reference, t.kernel_reference), ("candidate", t.candidate, t.kernel_candidate))
                  if k.median_ms > 0]
        lines.append(f"CUPTI kernel busy time: reference {t.kernel_reference.median_ms * 1e3:.1f} µs, candidate "
                     f"{t.kernel_candidate.median_ms * 1e3:.1f} µs (CUDA events / busy: {', '.join(ratios) or '-'})")
    elif t.kernel_timer:
        lines.append(f"CUPTI kernel timer {t.kernel_timer}")
    return lines


def format_memory(m: Memory) -> str:
    """One line: the reference's own peak, the evaluation's, their ratio, the card (and cap); or why the
    task does not fit. Shared by `cudaforge eval` and the Correctness pane."""
    if m.message:
        return f"memory: {m.message}"
    parts = []
    if m.reference_peak_bytes is not None:
        parts.append(f"reference peak {_gib(m.reference_peak_bytes)}")
    if m.eval_peak_bytes is not None:
        parts.append(f"evaluation peak {_gib(m.eval_peak_bytes)}")
    if m.ratio is not None:
        parts.append(f"(peak - 1 GiB) / reference {m.ratio:.2f}x (bound {FACTOR:g}x)")
    if m.total_bytes is not None:
        parts.append(f"card {_gib(m.total_bytes)}")
    if m.cap_bytes:
        parts.append(f"cap {_gib(m.cap_bytes)}")
    if not parts and m.footprint_bytes is not None:
        parts.append(f"footprint {_gib(m.footprint_bytes)} (inputs + outputs + parameters)")
    line = "memory: " + ", ".join(parts) if parts else ""
    if m.note:
        line = (line + "; " if line else "memory: ") + m.note
    return line


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
