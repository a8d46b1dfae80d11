"""The workbench in a real terminal: tmux runs `cudaforge-tui`, the test reads the screen with
capture-pane and types with send-keys. Covers what Pilot's headless driver cannot: a real tty, and
App.suspend() for the $EDITOR round trip. Skipped only where tmux is not installed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, TASK, coder_reply
from tui_kit import write_config

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")


class Terminal:
    """One tmux server on a private socket, one window running one command."""

    def __init__(self, socket: str) -> None:
        self.socket = socket

    def tmux(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert TMUX is not None
        return subprocess.run([TMUX, "-L", self.socket, *args], capture_output=True, text=True, check=check,
                              timeout=20)

    def start(self, command: list[str], env: dict[str, str], cwd: Path) -> None:
        exports = " ".join(f"{k}={_quote(v)}" for k, v in env.items())
        line = f"cd {_quote(str(cwd))} && env -u COLUMNS -u LINES {exports} " + " ".join(_quote(c) for c in command)
        line += "; echo exited $?; sleep 60"  # keep the pane: what the app printed on exit stays readable
        # a detached session has no client to size it: fix the window size before the app starts
        self.tmux("-f", "/dev/null", "new-session", "-d", "-s", "cf", "-x", "160", "-y", "45", "sleep 600")
        self.tmux("set-option", "-t", "cf", "window-size", "manual")
        self.tmux("resize-window", "-t", "cf", "-x", "160", "-y", "45")
        self.tmux("respawn-pane", "-k", "-t", "cf", line)

    def screen(self) -> str:
        result = self.tmux("capture-pane", "-p", "-t", "cf", check=False)
        return result.stdout

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", "cf", *keys)

    def alive(self) -> bool:
        return self.tmux("has-session", "-t", "cf", check=False).returncode == 0

    def wait_for(self, text: str, timeout: float = 120.0) -> str:
        end = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < end:
            screen = self.screen()
            if text in screen:
                return screen
            if not self.alive():
                break
            time.sleep(0.2)
        raise AssertionError(f"{text!r} never appeared on the screen; last screen:\n{screen}")

    def wait_exited(self, timeout: float = 60.0) -> str:
        """Wait until the app has exited; returns the terminal's text after it (what it printed)."""
        return self.wait_for("exited ", timeout)

    def kill(self) -> None:
        self.tmux("kill-server", check=False)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


@pytest.fixture
def terminal(tmp_path: Path) -> Iterator[Terminal]:
    term = Terminal(f"cf-test-{os.getpid()}-{tmp_path.name}")
    yield term
    term.kill()


def app_command(config: Path) -> list[str]:
    return [sys.executable, "-m", "cudaforge.tui.app", str(TASK), "--config", str(config), "--no-user-config"]


def base_env() -> dict[str, str]:
    return {KEY_ENV: KEY, "TERM": "xterm-256color", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
            "CUDAFORGE_TUI_LATENCY": "1"}


def only_run(folder: Path) -> Path:
    runs = [p for p in (folder / "runs").iterdir() if p.is_dir()]
    assert len(runs) == 1
    return runs[0]


def test_smoke_in_a_real_terminal(tmp_path: Path, cache_dir: Path, terminal: Terminal) -> None:
    with ScriptedLLMServer([coder_reply(CORRECT)]) as server:
        config = write_config(tmp_path, cache_dir, server, rounds=1)
        terminal.start(app_command(config), base_env(), tmp_path)
        terminal.wait_for("Round 1 waits")
        screen = terminal.wait_for("class ModelNew")  # the Coder's candidate in the Source pane
        assert "Rounds" in screen and "Source" in screen and "a approve" in screen
        terminal.keys("a")
        screen = terminal.wait_for("max_rounds")
        assert "✓" in screen and "r1" in screen
        terminal.keys("3")
        assert "trials passed" in terminal.wait_for("trials passed")
        terminal.keys("C-q")
        after = terminal.wait_exited()
    assert "exited 0" in after
    assert "key-press-to-render latency" in after and "run folder:" in after
    print(next(line for line in after.splitlines() if "latency" in line))
    state = json.loads((only_run(tmp_path) / "state.json").read_text())
    assert state["status"] == "finished"


def test_editor_round_trip(tmp_path: Path, cache_dir: Path, terminal: Terminal) -> None:
    editor = tmp_path / "fake-editor.sh"
    editor.write_text("#!/bin/sh\nprintf '# edited in EDITOR\\n' >> \"$1\"\n", encoding="utf-8")
    editor.chmod(0o755)
    with ScriptedLLMServer([coder_reply(CORRECT)]) as server:
        config = write_config(tmp_path, cache_dir, server, rounds=1)
        env = {**base_env(), "EDITOR": str(editor), "VISUAL": ""}
        terminal.start(app_command(config), env, tmp_path)
        terminal.wait_for("Round 1 waits")
        terminal.keys("o")
        screen = terminal.wait_for("edited, approve sends your text")
        assert "Rounds" in screen, "the app came back after the editor"
        terminal.keys("a")
        terminal.wait_for("max_rounds")
        terminal.keys("C-q")
        assert "exited 0" in terminal.wait_exited()
    round_dir = only_run(tmp_path) / "rounds" / "001"
    assert (round_dir / "candidate.py").read_text().rstrip().endswith("# edited in EDITOR")
    assert json.loads((round_dir / "candidate.json").read_text())["origin"] == "edited"
