"""`cudaforge-tui` refuses a missing task file or run folder before the app opens: one line, exit 2, and
no hang without a terminal (the real entry point in a subprocess, stdin and stdout not a terminal)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(("args", "line"), [
    (["nothere.py"], "cudaforge-tui: nothere.py: task file not found"),
    (["--open", "runs/nothere"], "cudaforge-tui: runs/nothere: not a run folder (no manifest.json)"),
    (["--resume", "runs/nothere"], "cudaforge-tui: runs/nothere: not a run folder (no manifest.json)"),
])
def test_a_missing_file_is_refused_before_the_app_opens(tmp_path: Path, args: list[str], line: str) -> None:
    code = "import sys; from cudaforge.tui.app import main; sys.exit(main())"
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=tmp_path, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == line and proc.stdout == ""
