"""NCU metrics pane: per kernel, each metric with its unit and its change against the previous (parent)
and the best round; kernels coloured by the analyzer's verdict, metrics a finding rests on coloured by
that finding's severity; then the analyzer's ranked findings."""

from __future__ import annotations

from cudaforge.engine.profiling import MetricDeltas, ProfileResult, metric_deltas
from cudaforge.engine.profiling.analysis import Analysis, KernelAnalysis, fmt_number
from cudaforge.tui.format import SEVERITY_STYLE, VERDICT_STYLE, fmt_delta_pct
from cudaforge.tui.model import RoundView, RunModel
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.geometry import Size
from textual.strip import Strip
from textual.widget import Widget

ROUND_TOTAL = "(round total)"


class RenderedOnce(Widget):
    """A rich renderable laid out once per content and width, then drawn from those lines.

    The metrics tables take 40-50 ms to lay out on a 2-core machine, and a Static lays its content
    out twice per layout (once to measure its height, once to draw): switching to this pane, scrolling
    it or any re-layout of the screen cost ~100 ms. Here a pane switch or a scroll draws stored lines."""

    DEFAULT_CSS = "RenderedOnce { height: auto; }"

    def __init__(self, renderable: RenderableType = "", *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._renderable = renderable
        self._lines: tuple[int, list[Strip]] | None = None  # (width, lines)
        self.layouts = 0  # how many times the renderable was laid out (tests read it)

    def update(self, renderable: RenderableType) -> None:
        self._renderable = renderable
        self._lines = None
        self.refresh(layout=True)

    def _strips(self, width: int) -> list[Strip]:
        if self._lines is None or self._lines[0] != width:
            console = self.app.console
            options = console.options.update(width=width, height=None)
            lines = console.render_lines(self._renderable, options, style=self.rich_style, pad=True)
            self._lines = (width, [Strip(line, width) for line in lines])
            self.layouts += 1
        return self._lines[1]

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._strips(width))

    def render_line(self, y: int) -> Strip:
        width = self.content_region.width or self.size.width
        lines = self._strips(width)
        return lines[y] if 0 <= y < len(lines) else Strip.blank(width, self.rich_style)


class MetricsPane(VerticalScroll):
    BORDER_TITLE = "NCU metrics"
    _shown: tuple[object, ...] | None = None

    def compose(self):  # type: ignore[no-untyped-def]
        yield RenderedOnce("", id="metrics-body")

    def show_round(self, model: RunModel, view: RoundView | None) -> None:
        """The round's profile against its parent's and the best round's, or why there is none."""
        if view is None:
            self.show(None, None, None, None, ("prev", "best"))
            return
        parent = model.get(view.parent)
        best = model.get(model.best_round) if model.best_round != view.round else None
        reason = ""
        if view.profile is None:
            if view.result is not None and view.result.device == "cpu":
                reason = "no NCU profile: this round ran on the CPU device (profiling needs CUDA and ncu)"
            elif view.result is not None and not view.result.accepted:
                reason = f"no NCU profile: the candidate was not accepted ({view.result.outcome})"
        self.show(view.profile, view.analysis, parent.profile if parent else None, best.profile if best else None,
                  (f"r{view.parent}" if parent else "prev", f"best r{model.best_round}" if best else "best"),
                  reason)

    def show(self, profile: ProfileResult | None, analysis: Analysis | None,
             previous: ProfileResult | None, best: ProfileResult | None, labels: tuple[str, str],
             reason: str = "") -> None:
        key = (id(profile), id(analysis), id(previous), id(best), labels, reason)
        if key == self._shown:
            return
        self._shown = key
        self.query_one("#metrics-body", RenderedOnce).update(
            render_metrics(profile, analysis, previous, best, labels, reason))


def _verdict_style(bottleneck: str) -> str:
    for key, style in VERDICT_STYLE.items():
        if bottleneck.startswith(key.split("-")[0]):
            return style
    return "white"


def render_metrics(current: ProfileResult | None, analysis: Analysis | None,
                   previous: ProfileResult | None, best: ProfileResult | None,
                   labels: tuple[str, str] = ("prev", "best"), reason: str = "") -> RenderableType:
    """The pane's content; reads the typed profile and analysis by attribute (a renamed field fails
    loudly here and in the type check, instead of blanking the pane)."""
    if current is None:
        return Text(reason or "no profile for this round (profiling runs on CUDA, for correct candidates)",
                    style="dim")
    parts: list[RenderableType] = []
    if not current.ok:
        parts.append(Text(f"profile failed ({current.error_kind}): {current.message}", style="bold red"))
    deltas = metric_deltas(current, previous, best)
    by_kernel = {k.kernel: k for k in deltas.kernels}
    kernel_info: dict[int, KernelAnalysis] = {k.launch_id: k for k in analysis.kernels} if analysis else {}
    findings = analysis.findings if analysis else ()
    evidence: dict[tuple[str, str], str] = {}  # (kernel short name, metric) -> severity
    for f in findings:
        for ev in f.evidence:
            evidence.setdefault((f.kernel, ev.metric), f.severity)
    names = _metric_names(current)
    shares = current.kernel_time_shares()
    head = Text()
    head.append(f"{len(current.kernels)} kernel(s), {current.total_time_us:.1f} us", style="bold")
    head.append(f"   Δ {labels[0]} / Δ {labels[1]} ({_mode_text(deltas)})", style="dim")
    if current.substitutions:
        head.append("   substituted: " + ", ".join(f"{a.split('.')[0]}→{b.split('.')[0]}"
                                                  for a, b in current.substitutions.items()), style="dim")
    parts.append(head)
    for k, share in zip(current.kernels, shares, strict=False):
        info = kernel_info.get(k.launch_id)
        bottleneck = (info.bottleneck if info else "") or "no analysis"
        title = Text()
        title.append(f"[{k.launch_id}] {k.short_name}", style="bold")
        title.append(f"  {share:.0%} of GPU time  ", style="dim")
        title.append(bottleneck, style=f"bold {_verdict_style(bottleneck)}")
        if info and info.reason:
            title.append(f"  {info.reason}", style="dim")
        table = Table(title=title, title_justify="left", expand=True, show_edge=False, pad_edge=False)
        table.add_column("metric", no_wrap=True, overflow="ellipsis", ratio=3)
        table.add_column("value", justify="right", no_wrap=True)
        table.add_column("unit", no_wrap=True)
        table.add_column(f"Δ {labels[0]}", justify="right", no_wrap=True)
        table.add_column(f"Δ {labels[1]}", justify="right", no_wrap=True)
        kd = {d.metric: d for d in by_kernel[k.name].deltas} if k.name in by_kernel else {}
        for name in names:
            used = current.used_name(name)
            mv = k.metrics.get(used)
            if mv is None:
                continue
            d = kd.get(name)
            sev = evidence.get((k.short_name, used)) or evidence.get((k.short_name, name))
            style = SEVERITY_STYLE.get(sev, "") if sev else ""
            table.add_row(Text(name, style=style), fmt_number(mv.value, aligned=True), mv.unit,
                          _delta(d.current if d else None, d.previous if d else None),
                          _delta(d.current if d else None, d.best if d else None))
        parts.append(table)
    total = by_kernel.get(ROUND_TOTAL)
    if total is not None and (total.matched_previous or total.matched_best):
        table = Table(title=Text("round total", style="bold"), title_justify="left", expand=True, show_edge=False)
        for col in ("metric", "value", "unit", f"Δ {labels[0]}", f"Δ {labels[1]}"):
            table.add_column(col, no_wrap=True)
        for d in total.deltas:
            table.add_row(d.metric, fmt_number(d.current, aligned=True), d.unit, _delta(d.current, d.previous),
                          _delta(d.current, d.best))
        parts.append(table)
    if findings:
        parts.append(Text("analyzer findings (best opportunity first)", style="bold underline"))
        for i, f in enumerate(findings, 1):
            line = Text(f"{i}. ")
            line.append(f"[{f.severity}] ", style=SEVERITY_STYLE.get(f.severity, ""))
            line.append(f"{f.kernel}: {f.title}", style="bold")
            line.append(f"\n   → {f.recommendation}")
            parts.append(line)
    for note in (analysis.notes if analysis else ()):
        parts.append(Text(f"note: {note}", style="dim"))
    if current.absent_metrics:
        parts.append(Text("absent on this chip: " + ", ".join(current.absent_metrics), style="dim"))
    return Group(*parts)


def _metric_names(current: ProfileResult) -> list[str]:
    names = list(current.requested_metrics) or sorted({m for k in current.kernels for m in k.metrics})
    if "gpu__time_duration.sum" in names:
        names.remove("gpu__time_duration.sum")
    return ["gpu__time_duration.sum", *names]


def _mode_text(deltas: MetricDeltas) -> str:
    return {"per_kernel": "per kernel where names match", "per_round": "per round totals",
            "none": "no kernels"}[deltas.mode]


def _delta(current: float | None, other: float | None) -> Text:
    text = fmt_delta_pct(current, other)
    if not text or text == "=":
        return Text(text, style="dim")
    return Text(text, style="cyan")
