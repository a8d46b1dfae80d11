"""Speedup per round as horizontal text bars (no plotting dependency): the best round is starred,
failed rounds show their status glyph instead of a bar; a round's % of speed of light and its hold
follow its bar."""

from __future__ import annotations

from cudaforge.tui.format import status_glyph
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual.widgets import Static

_EIGHTHS = " ▏▎▍▌▋▊▉█"


class SpeedupChart(Static):
    BORDER_TITLE = "Speedup"

    def show(self, points: list[tuple[int, float | None, str]], best: int | None, width: int | None = None,
             notes: dict[int, str] | None = None) -> None:
        set_text(self, render_chart(points, best, width or max(10, self.size.width - 14), notes))


def bar(value: float, scale: float, width: int) -> str:
    cells = max(0.0, value / scale * width) if scale > 0 else 0.0
    full = int(cells)
    frac = int((cells - full) * 8)
    return "█" * full + (_EIGHTHS[frac] if frac and full < width else "")


def render_chart(points: list[tuple[int, float | None, str]], best: int | None, width: int,
                 notes: dict[int, str] | None = None) -> Text:
    """`notes`: per round, what follows its speedup (its % of speed of light, held for review)."""
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
        text.append(f" {value:.2f}x" + (" ★" if n == best else ""), style="bold" if n == best else "")
        note = (notes or {}).get(n)
        text.append(f" {note}\n" if note else "\n", style="yellow" if note and "held" in note else "dim")
    text.append(f"1.00x = {bar(1.0, scale, width).count('█')} cells", style="dim")
    return text
