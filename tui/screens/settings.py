"""Settings screen: the common keys of cudaforge.toml, written with engine.config.save_value (tomlkit,
so comments and layout survive) to the --config file if one was given, else ./cudaforge.toml.

Values are validated as the engine reads them before anything is written: a bad value is shown
under the form and the file is left untouched. Changes take effect in the next session."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cudaforge.engine.config import SCHEMA, Config, config_from_data, config_to_data, save_value
from cudaforge.engine.errors import ConfigError
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static


@dataclass(frozen=True)
class Field:
    section: str
    key: str
    kind: type  # str, int, float or bool
    hint: str = ""

    @property
    def id(self) -> str:
        return f"set-{self.section}-{self.key}"


FIELDS: tuple[Field, ...] = (
    Field("session", "mode", str, "review | auto | manual"),
    Field("session", "rounds", int, "rounds per session"),
    Field("session", "format", str, "nvrtc | inline | cpu | triton"),
    Field("session", "target_speedup", float, "stop when reached (empty: none)"),
    Field("eval", "device", str, "cuda | cpu"),
    Field("eval", "gpu", int, "CUDA device index"),
    Field("eval", "trials", int, "correctness trials"),
    Field("budget", "dollars", float, "dollar cap per session"),
    Field("coder", "provider", str, "openai | anthropic | openai-compatible (empty: none, manual mode)"),
    Field("coder", "model", str, "e.g. gpt-5, claude-sonnet-4-6"),
    Field("coder", "base_url", str, "for openai-compatible servers"),
    Field("coder", "api_key_env", str, "name of the environment variable with the key"),
    Field("judge", "provider", str, "heuristic | openai | anthropic | openai-compatible"),
    Field("judge", "model", str, ""),
    Field("ncu", "enabled", bool, "true | false: profile correct CUDA candidates"),
)


def _shown(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_field(field: Field, text: str) -> Any:
    """Typed value of an input; empty means "not set" (the key is removed from the file)."""
    text = text.strip()
    if not text:
        return None
    where = f"[{field.section}] {field.key}"
    try:
        if field.kind is bool:
            if text.lower() not in ("true", "false"):
                raise ValueError
            return text.lower() == "true"
        if field.kind is int:
            return int(text)
        if field.kind is float:
            return float(text)
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not {field.kind.__name__}") from None
    return text


class SettingsScreen(ModalScreen[bool]):
    """Returns True when something was saved."""

    BINDINGS = [Binding("escape", "cancel", "Close", id="settings_close"),
                Binding("ctrl+s", "save", "Save", id="settings_save")]

    def __init__(self, config: Config, write_path: Path) -> None:
        super().__init__()
        self.config = config
        self.write_path = write_path
        self.saved: list[str] = []  # "[section] key" of every value written

    def current(self, field: Field) -> Any:
        return self.config.section(field.section).get(field.key)

    def compose(self) -> ComposeResult:
        with Vertical(id="settings-box"):
            yield Static(f"Settings — saved to {self.write_path} (comments kept; next session uses them)",
                         id="settings-title")
            with VerticalScroll(id="settings-scroll"), Grid(id="settings-grid"):
                for field in FIELDS:
                    yield Label(f"[{field.section}] {field.key}")
                    yield Input(_shown(self.current(field)), placeholder=field.hint, id=field.id)
            yield Static("", id="settings-error")
            with Horizontal(id="settings-buttons"):
                yield Button("Save (ctrl+s)", id="settings-save", variant="success")
                yield Button("Cancel (esc)", id="settings-cancel")

    def changes(self) -> list[tuple[Field, Any]]:
        out = []
        for field in FIELDS:
            text = self.query_one(f"#{field.id}", Input).value
            if text.strip() != _shown(self.current(field)):
                out.append((field, parse_field(field, text)))
        return out

    def validate(self, changes: list[tuple[Field, Any]]) -> None:
        """Check the merged result as the engine will read it; raises ConfigError naming the key."""
        data = config_to_data(self.config)
        for field, value in changes:
            table = data.setdefault(field.section, {})
            if value is None:
                table.pop(field.key, None)
            else:
                table[field.key] = value
        for field, value in changes:
            if field.section in SCHEMA and value is None and not SCHEMA[field.section][field.key].optional:
                raise ConfigError(f"[{field.section}] {field.key} cannot be empty")
        config_from_data(data, source=str(self.write_path))

    def action_save(self) -> None:
        error = self.query_one("#settings-error", Static)
        try:
            changes = self.changes()
            self.validate(changes)
            for field, value in changes:
                save_value(self.write_path, field.section, field.key, value)
        except ConfigError as exc:
            error.update(f"[b red]not saved:[/] {exc.message}")
            return
        except OSError as exc:
            error.update(f"[b red]not saved:[/] {self.write_path}: {exc.strerror or exc}")
            return
        self.saved = [f"[{f.section}] {f.key}" for f, _ in changes]
        self.dismiss(bool(changes))

    def action_cancel(self) -> None:
        self.dismiss(False)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "settings-save":
            self.action_save()
        else:
            self.action_cancel()
