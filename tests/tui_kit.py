"""Shared pieces of the TUI tests: config files for the app, waiting helpers, SVG snapshots.

The configuration points the Coder and Judge at the scripted LLM server (tests/llm_server.py,
the real openai SDK over 127.0.0.1) and runs candidates on the CPU device with the tests' build
cache, so every flow drives the real Session and evaluator. Candidates are the CI task's
(tests/core_tasks): one C++ extension, built once per test session and cached.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable
from pathlib import Path

import textual
from cudaforge.tui.app import WorkbenchApp
from cudaforge.tui.cli import LaunchSpec
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY_ENV, TASK
from textual.pilot import Pilot

SNAPSHOTS = Path(__file__).parent / "tui_snapshots"
FIXTURE_RUN = Path(__file__).parent / "fixtures" / "tui_run" / "run"
SIZE = (150, 44)


def write_config(folder: Path, cache_dir: Path, server: ScriptedLLMServer | None = None, *, rounds: int = 1,
                 judge: str = "llm", keymap: dict[str, str] | None = None) -> Path:
    """A commented cudaforge.toml: CPU device, fast trials, the scripted server as Coder and Judge."""
    lines = [
        "# cudaforge.toml written by the TUI tests (comments must survive the settings screen)",
        "[eval]",
        'device = "cpu"          # CI has no GPU',
        "trials = 2",
        "",
        "[timing]",
        "warmup = 1",
        "trials = 5",
        "host_trials = 3",
        "l2_flush = false",
        "noise_threshold = 0.0    # these flows are about the workbench; tests/test_noisy_timing.py covers noise",
        "",
        "[session]",
        f"rounds = {rounds}             # rounds per session",
        'format = "cpu"',
        "",
        "[budget]",
        "dollars = 100.0",
        "",
        "[run]",
        f'folder = "{folder / "runs"}"',
        f'cache_dir = "{cache_dir}"',
    ]
    if server is not None:
        llm = ['provider = "openai-compatible"', 'model = "gpt-5"', f'base_url = "{server.base_url_compat}"',
               f'api_key_env = "{KEY_ENV}"', "timeout_s = 20.0", "max_retries = 0"]
        lines += ["", "[coder]", *llm, "", "[judge]"]
        lines += llm if judge == "llm" else ['provider = "heuristic"']
    if keymap:
        lines += ["", "[keymap]", *(f'{k} = "{v}"' for k, v in keymap.items())]
    path = folder / "cudaforge.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def task_app(folder: Path, config: Path, *, task: Path = TASK, mode: str | None = None) -> WorkbenchApp:
    spec = LaunchSpec(task=str(task), config_file=str(config), mode=mode, use_user_config=False)
    return WorkbenchApp(spec, system_stats=False, cwd=folder)


def slow(source: str, seconds: float = 0.3) -> str:
    """The same extension with a sleep in forward: an evaluation that lasts several seconds (quit tests)."""
    out = source.replace("import torch\n", "import time\n\nimport torch\n", 1).replace(
        "    def forward(self, x):\n", f"    def forward(self, x):\n        time.sleep({seconds})\n", 1)
    assert out != source and "time.sleep" in out
    return out


def unique(source: str, tag: str) -> str:
    """The same module (same build) under a new hash: forces a fresh evaluation, not a cached result
    (also across test runs that share CUDAFORGE_TEST_CACHE)."""
    return source + f"\n# {tag} {uuid.uuid4().hex}\n"


async def wait_until(pilot: Pilot[int], predicate: Callable[[], object], timeout: float = 90.0,
                     what: str = "condition") -> None:
    """Let the app run until `predicate()` holds; fail with what was awaited and the app's log."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        if loop.time() > end:
            app = pilot.app
            log = getattr(app, "log_pane", None)
            entries = log.entries[-15:] if log is not None else []
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; log: {entries}")
        await pilot.pause(0.05)


def pending_point(app: WorkbenchApp, point: str, round: int | None = None) -> Callable[[], bool]:
    def check() -> bool:
        p = app._pending(point)
        return p is not None and (round is None or p.round == round)
    return check


def round_finished(app: WorkbenchApp, n: int) -> Callable[[], bool]:
    return lambda: (v := app.model.get(n)) is not None and v.finished


def assert_snapshot(app: WorkbenchApp, name: str, out_dir: Path) -> None:
    """Compare the screen with tests/tui_snapshots/NAME.svg; UPDATE_SNAPSHOTS=1 re-records it."""
    svg = app.export_screenshot(title="cudaforge")
    path = SNAPSHOTS / f"{name}.svg"
    if os.environ.get("UPDATE_SNAPSHOTS"):
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(svg, encoding="utf-8")
        (SNAPSHOTS / "TEXTUAL_VERSION").write_text(textual.__version__ + "\n", encoding="utf-8")
        return
    assert path.exists(), f"no snapshot {path}: run with UPDATE_SNAPSHOTS=1 to record it"
    expected = path.read_text(encoding="utf-8")
    if svg != expected:
        actual = out_dir / f"{name}.actual.svg"
        actual.write_text(svg, encoding="utf-8")
        raise AssertionError(f"screen differs from {path}; this run's screen: {actual} "
                             "(re-record with UPDATE_SNAPSHOTS=1 if the change is intended)")


def recorded_textual_version() -> str | None:
    p = SNAPSHOTS / "TEXTUAL_VERSION"
    return p.read_text().strip() if p.exists() else None


__all__ = ["CORRECT", "FIXTURE_RUN", "SIZE", "assert_snapshot", "pending_point", "recorded_textual_version",
           "round_finished", "slow", "task_app", "unique", "wait_until", "write_config"]
