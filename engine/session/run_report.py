"""A run as text: the round table for the terminal, the markdown report and the exported best kernel."""

from __future__ import annotations

import time
from pathlib import Path

from cudaforge.engine.errors import UsageError
from cudaforge.engine.fsutil import atomic_write_text
from cudaforge.engine.llm.prices import format_cost
from cudaforge.engine.results import NO_SPEED_CLAIM
from cudaforge.engine.session.records import GpuInfo
from cudaforge.engine.session.store import RoundRecord, RunStore
from cudaforge.engine.speed_of_light import short

BAR_WIDTH = 30


def _when(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def best_round(rounds: list[RoundRecord]) -> RoundRecord | None:
    """The accepted round with the highest speedup (earliest on a tie); where no accepted round's time is
    a speed claim (Triton's interpreter on the CPU), the latest accepted round. A noisy timing is no
    result (EvalResult.noisy): such a round is never the best. A round held for review (engine/hold.py)
    counts only once a person accepted it."""
    rounds = [r for r in rounds if r.result is None or not r.result.noisy]
    accepted = [r for r in rounds if r.speedup is not None and r.counts]
    if accepted:
        return max(accepted, key=lambda r: (r.speedup, -r.round))
    unclaimed = [r for r in rounds if r.counts]
    return unclaimed[-1] if unclaimed else None


def timed_by(method: str) -> str:
    """How a timing was taken, in words: CUDA events on a GPU, the host's clock on the CPU device."""
    return {"cuda_event": "CUDA-event timed", "perf_counter": "timed by the host clock (CPU device)",
            "triton_interpreter": "timed in Triton's interpreter (CPU device)"}.get(
        method, f"timed by {method}")


def _speed(r: RoundRecord) -> str:
    return f"{r.speedup:.2f}x vs eager" if r.speedup is not None else f"accepted, {NO_SPEED_CLAIM}"


def hold_label(r: RoundRecord) -> str:
    """'held', 'accepted by X', 'rejected by X' (or '' for a round never held)."""
    if not r.hold:
        return ""
    if r.ruling is None:
        return "held"
    return f"{r.ruling.ruling}ed by {r.ruling.who}"


def round_rows(rounds: list[RoundRecord]) -> list[tuple[str, ...]]:
    best = best_round(rounds)
    rows = []
    for r in rounds:
        sp = f"{r.speedup:.2f}x" if r.speedup is not None else "-"
        sol = short(r.result.speed_of_light) if r.result is not None and r.result.accepted else ""
        mark = ("best" if best is not None and r.round == best.round
                else "noisy timing" if r.result is not None and r.result.noisy else hold_label(r))
        rows.append((str(r.round), r.kind, "-" if r.parent is None else str(r.parent), r.outcome, sp, sol or "-",
                     f"{r.tokens}", format_cost(r.cost_usd), mark))
    return rows


def format_rounds(store: RunStore) -> str:
    """The round table printed at the end of `cudaforge run`."""
    rounds = store.rounds()
    head = ("round", "kind", "parent", "outcome", "speedup", "SOL", "tokens", "cost", "")
    rows = [head, *round_rows(rounds)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    best = best_round(rounds)
    lines.append("")
    if best is not None:
        lines.append(f"best: round {best.round}, {_speed(best)} -> {store.round_dir(best.round)}/candidate.py")
    else:
        lines.append("no correct candidate yet")
    pending = [r.round for r in rounds if r.pending]
    if pending:
        lines.append(f"held for review: round(s) {', '.join(map(str, pending))} (rule: cudaforge rule {store.path})")
    lines.append(f"run folder: {store.path}  (resume: cudaforge resume {store.path})")
    return "\n".join(lines)


def markdown_report(store: RunStore) -> str:
    """The markdown report that `export` writes beside the kernel."""
    manifest = store.manifest
    rounds = store.rounds()
    best = best_round(rounds)
    state = store.state
    calls = store.calls()
    tokens = sum(c.usage.total_tokens for c in calls)
    dollars = sum(c.cost_usd or 0.0 for c in calls)
    unpriced = sum(1 for c in calls if c.cost_usd is None and c.usage.total_tokens)
    cost = format_cost(dollars, known=not unpriced)
    gpu = manifest.gpu or GpuInfo(device="?")
    versions = manifest.versions
    out = [f"# cudaforge run {manifest.run_id}", "",
           f"- task: `{manifest.task_path}` (sha256 {manifest.task_sha256[:12]}; the run evaluates "
           "its copy, task.py)",
           f"- device: {gpu.device or '?'} {gpu.name or ''}".rstrip(),
           f"- versions: cudaforge {versions.get('cudaforge')}, torch {versions.get('torch')}, "
           f"python {versions.get('python')}",
           f"- status: {state.status} ({state.stop_reason or '-'}): {state.stop_message or ''}",
           f"- LLM usage: {len(calls)} calls, {tokens} tokens, {cost}"
           + (f" ({unpriced} calls unpriced: the cost is unknown)" if unpriced else ""),
           ""]
    if best is not None and best.speedup is None:
        out.append(f"**Best: round {best.round}, {_speed(best)}.**")
    elif best is not None and best.result is not None and best.result.timing is not None:
        t = best.result.timing
        out.append(f"**Best: round {best.round}, {best.speedup:.2f}x vs eager PyTorch** "
                   f"(candidate median {t.candidate.median_ms * 1000:.1f} us, reference "
                   f"{t.reference.median_ms * 1000:.1f} us; both {timed_by(t.candidate.method)}, "
                   "interleaved in one run).")
    elif best is not None:
        out.append(f"**Best: round {best.round}, {best.speedup:.2f}x vs eager PyTorch.**")
    else:
        out.append("**No correct candidate.**")
    out += ["", "## Rounds", "", "| round | kind | parent | outcome | speedup | SOL | tokens | cost | |",
            "|---|---|---|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(row) + " |" for row in round_rows(rounds)]
    out += ["", "## Speedup per round", "", "```"]
    top = max((r.speedup or 0.0 for r in rounds), default=0.0) or 1.0
    for r in rounds:
        if r.speedup is None:
            out.append(f"{r.round:>3} | {r.outcome}")
        else:
            out.append(f"{r.round:>3} | {'#' * max(1, round(BAR_WIDTH * r.speedup / top))} {r.speedup:.2f}x")
    out += ["```", ""]
    held = [r for r in rounds if r.hold]
    if held:
        out += ["## Held for review", ""]
        for r in held:
            ruling = (f"{r.ruling.ruling} by {r.ruling.who} at {_when(r.ruling.time)}"
                      + (f": {r.ruling.reason}" if r.ruling.reason else "")) if r.ruling else "not yet ruled"
            out.append(f"- round {r.round}: {ruling}; held because " + "; ".join(h.message for h in r.hold))
        out.append("")
    out += ["## Recommendations", ""]
    for r in rounds:
        if r.recommendation:
            who = {"person": "edited by the person", "heuristic": "heuristic Judge", "llm": "LLM Judge",
                   "fallback": "fallback"}.get(r.judge_source or "", r.judge_source or "")
            first = r.recommendation.strip().splitlines()[0] if r.recommendation.strip() else ""
            out.append(f"- round {r.round} (about round {r.subject_round}, {who}): {first}")
    return "\n".join(out) + "\n"


def export_best(run_dir: str | Path, out: str | Path, *, format: str = "standalone",
                report: str | Path | None = None, round: int | None = None) -> tuple[Path, Path]:
    """Write the best (or a chosen) round's candidate as a module that needs only torch, plus the report.

    format: "standalone" keeps the candidate's own format (nvrtc gets our NVRTC helper inlined; a Triton
    candidate needs torch and triton);
    "inline" converts an nvrtc candidate to the KernelBench load_inline format.
    """
    store = RunStore.open(run_dir, read_only=True)
    rounds = store.rounds()
    chosen = next((r for r in rounds if r.round == round), None) if round is not None else best_round(rounds)
    if chosen is None or chosen.candidate is None:
        what = f"round {round}" if round is not None else "a correct round"
        raise UsageError(f"{store.path}: has no {what} with a candidate to export")
    source = chosen.candidate
    if chosen.format == "nvrtc" or "cudaforge.engine.nvrtc" in source:
        from cudaforge.engine import convert

        source = convert.to_inline(source) if format == "inline" else convert.to_standalone(source)
    elif chosen.format == "triton" and format != "inline":
        from cudaforge.engine import convert

        source = convert.triton_standalone(source)
    elif format == "inline" and chosen.format not in ("inline", "cpu"):
        raise UsageError(f"round {chosen.round} is a {chosen.format} candidate; only nvrtc converts to inline")
    out = Path(out)
    header = (f'"""Exported by cudaforge from run {store.run_id}, round {chosen.round}'
              + (f" ({chosen.speedup:.2f}x vs eager when measured)" if chosen.speedup else "") + '."""\n')
    atomic_write_text(out, header + source)
    report_path = Path(report) if report is not None else out.with_suffix(".md")
    atomic_write_text(report_path, markdown_report(store))
    return out, report_path
