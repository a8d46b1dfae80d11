"""Correctness pane: per output the verdict, shape/dtype, max abs/rel error, mismatches and the worst
elements (index, expected, got); the timing summary; the integrity findings with their evidence."""

from __future__ import annotations

from cudaforge.engine.result_text import format_memory, timing_notes
from cudaforge.engine.results import NO_SPEED_CLAIM, EvalResult, OutputCheck
from cudaforge.tui.format import SEVERITY_STYLE, fmt_err, fmt_speedup, status_glyph
from cudaforge.tui.model import RoundView, RunModel
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static


class CorrectnessPane(VerticalScroll):
    BORDER_TITLE = "Correctness"

    def compose(self):  # type: ignore[no-untyped-def]
        yield Static("", id="correctness-body")

    _shown: int | None = None

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        self.show(view.result if view else None)

    def show(self, result: EvalResult | None) -> None:
        if id(result) == self._shown:
            return
        self._shown = id(result)
        self.query_one("#correctness-body", Static).update(render_correctness(result))


def render_correctness(result: EvalResult | None) -> RenderableType:
    if result is None:
        return Text("not evaluated yet", style="dim")
    parts: list[RenderableType] = []
    glyph, style = status_glyph(result.outcome)
    head = Text()
    head.append(f"{glyph} {result.outcome}", style=f"bold {style}")
    head.append(f"  {result.message}" if result.message else "")
    parts.append(head)
    corr = result.correctness
    if corr is not None:
        parts.append(Text(f"trials passed {corr.trials_passed}/{corr.trials}   atol {corr.atol:g}  rtol {corr.rtol:g}",
                          style="green" if corr.passed else "red"))
        table = Table(title="outputs (worst trial)", expand=True, title_justify="left", show_lines=False)
        for col in ("#", "verdict", "shape expected / got", "dtype", "max abs", "max rel", "mismatches"):
            table.add_column(col, no_wrap=True)
        for out in corr.outputs:
            table.add_row(*_output_row(out))
        parts.append(table)
        for out in corr.outputs:
            if out.worst:
                worst = Table(title=f"output {out.index}: worst elements", title_justify="left")
                for col in ("index", "expected", "got", "abs err"):
                    worst.add_column(col, no_wrap=True)
                for w in out.worst:
                    worst.add_row(str(tuple(w.index)), f"{w.expected:.6g}", f"{w.got:.6g}", fmt_err(w.abs_err))
                parts.append(worst)
            if out.reason:
                parts.append(Text(f"output {out.index}: {out.reason}", style="red"))
    elif result.outcome not in ("ok",):
        parts.append(Text("no correctness check ran (see the Compiler pane for the log)", style="dim"))
    if result.timing is not None:
        t = result.timing
        parts.append(Text(
            f"timing: reference {t.reference.median_ms:.4f} ms, candidate {t.candidate.median_ms:.4f} ms "
            f"(median of {t.candidate.trials}, {t.candidate.method}) → "
            + (f"speedup {fmt_speedup(t.speedup)} [{t.speedup_low:.2f}–{t.speedup_high:.2f}]"
               if t.speedup is not None else NO_SPEED_CLAIM)
            + (f", vs torch.compile {fmt_speedup(t.speedup_vs_compile)}" if t.speedup_vs_compile else ""),
            style="bold"))
        for note in timing_notes(t):
            parts.append(Text(note, style="yellow" if note.startswith("spread") and "NOISY" in note else "dim"))
    if result.memory is not None and format_memory(result.memory):
        parts.append(Text(format_memory(result.memory), style="red" if result.memory.fits is False else "dim"))
    if result.findings:
        table = Table(title="integrity findings", expand=True, title_justify="left")
        for col in ("finding", "severity", "what"):
            table.add_column(col)
        for f in result.findings:
            table.add_row(f.name, Text(f.severity, style=SEVERITY_STYLE.get(f.severity, "")), f.message)
        parts.append(table)
    else:
        parts.append(Text("integrity findings: none", style="dim"))
    if result.kernels:
        table = Table(title="kernels that ran", title_justify="left")
        for col in ("kernel", "calls", "custom", "share"):
            table.add_column(col)
        for k in result.kernels:
            table.add_row(k.name[:60], str(k.count), "yes" if k.custom else "no", f"{k.share:.0%}")
        parts.append(table)
    return Group(*parts)


def _output_row(out: OutputCheck) -> list[Text | str]:
    verdict = Text("pass", style="green") if out.passed else Text("FAIL", style="bold red")
    shape = f"{tuple(out.shape_expected)} / {tuple(out.shape_got)}"
    dtype = out.dtype_expected if out.dtype_expected == out.dtype_got else f"{out.dtype_expected} / {out.dtype_got}"
    mism = f"{out.mismatches}/{out.numel}" + (f" ({out.nonfinite_got} non-finite)" if out.nonfinite_got else "")
    return [str(out.index), verdict, shape, dtype, fmt_err(out.max_abs_err), fmt_err(out.max_rel_err), mism]
