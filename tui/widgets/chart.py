"""Speedup per round as horizontal text bars (no plotting dependency): the best round is starred,
failed rounds show their status glyph instead of a bar."""

from __future__ import annotations

from cudaforge.tui.format import status_glyph
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual.widgets import Static

_EIGHTHS = " ▏▎▍▌▋▊▉█"


class SpeedupChart(Static):
    BORDER_TITLE = "Speedup"

    def show(self, points: list[tuple[int, float | None, str]], best: int | None, width: int | None = None) -> None:
        set_text(self, render_chart(points, best, width or max(10, self.size.width - 14)))


def bar(value: float, scale: float, width: int) -> str:
    cells = max(0.0, value / scale * width) if scale > 0 else 0.0
    full = int(cells)
    frac = int((cells - full) * 8)
    return "█" * full + (_EIGHTHS[frac] if frac and full < width else "")


def render_chart(points: list[tuple[int, float | None, str]], best: int | None, width: int) -> Text:
    if not points:
        return Text("no rounds yet", style="dim")
    values = [v for _, v, _ in points if v is not None]
    scale = max([*values, 1.0])
    text = Text()
    for n, value, status in points[-40:]:
        text.append(f"r{n:<3}", style="bold" if n == best else "dim")
        if value is None:
            glyph, style = status_glyph(status)
            text.append(f"{glyph} {status}\n", style=style)
            continue
        colour = "green" if value >= 1.0 else "yellow"
        text.append(bar(value, scale, width), style=colour)
        text.append(f" {value:.2f}x" + (" ★" if n == best else "") + "\n", style="bold" if n == best else "")
    text.append(f"1.00x = {bar(1.0, scale, width).count('█')} cells", style="dim")
    return text
