"""Status bar: phase with elapsed time, round k/N, best speedup, tokens and dollars, GPU, CPU and memory."""

from __future__ import annotations

import time

import psutil
from cudaforge.tui.format import fmt_dollars, fmt_elapsed, fmt_speedup, fmt_tokens
from cudaforge.tui.model import RunModel
from cudaforge.tui.widgets.static import set_text
from rich.text import Text
from textual.widgets import Static

_PHASE_STYLE = {"thinking": "magenta", "judging": "magenta", "compiling": "yellow", "verifying": "cyan",
                "timing": "cyan", "profiling": "blue", "waiting": "bold green", "idle": "dim"}


class StatusBar(Static):
    """Redrawn from the model on every event and once a second by the App's clock."""

    def __init__(self, system_stats: bool = True, **kwargs: object) -> None:
        super().__init__("", **kwargs)  # type: ignore[arg-type]
        self.system_stats = system_stats
        if system_stats:
            psutil.cpu_percent(None)  # primes the counter: the next call measures since now

    def show(self, model: RunModel, now: float | None = None) -> None:
        text = render_status(model, now if now is not None else time.time(), self.system_stats)
        set_text(self, text, layout=False)  # one line, full width: its size never follows the text


def render_status(model: RunModel, now: float, system_stats: bool) -> Text:
    text = Text()
    if model.read_only:
        text.append(" read-only ", style="bold black on yellow")
        text.append(f" {model.run_status} " if model.run_status else " ")
    elif model.stopped is not None:
        text.append(" stopped ", style="bold black on grey70")
        text.append(f" {model.stopped.reason} ")
    else:
        phase = model.phase
        text.append(f" {phase} ", style=f"reverse {_PHASE_STYLE.get(phase, '')}")
        if model.phase_started and phase != "idle":
            text.append(f" {fmt_elapsed(now - model.phase_started)}")
        text.append(" ")
    rounds = model.total_rounds or len(model.rounds)
    current = model.current_round or model.latest() or 0
    text.append(f"│ round {current}/{rounds} ")
    if model.mode:
        text.append(f"│ {model.mode} ", style="cyan")
    text.append("│ best ")
    text.append(fmt_speedup(model.best_speedup), style="bold green" if model.best_speedup else "dim")
    if model.best_round is not None:
        text.append(f" (r{model.best_round})", style="dim")
    text.append(f" │ {fmt_tokens(model.tokens)} tok {fmt_dollars(model.dollars, model.cost_known)} ")
    text.append(f"│ {model.gpu_name or 'GPU ?'} ")
    if system_stats:
        mem = psutil.virtual_memory()
        text.append(f"│ CPU {psutil.cpu_percent(None):.0f}% mem {mem.percent:.0f}% ", style="dim")
    return text
