"""One install gives the product: a fresh virtual environment that gets the CPU torch first and
then a plain, non-editable `pip install .` (no extras) runs `cudaforge-tui --help` and opens the
workbench (the recorded run, read-only) in Textual's headless test mode."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "examples" / "recorded"

pytestmark = [pytest.mark.timeout(900), pytest.mark.slow]

OPEN_THE_APP = textwrap.dedent("""
    import asyncio, sys
    from cudaforge.tui.app import WorkbenchApp
    from cudaforge.tui.cli import LaunchSpec

    async def main() -> None:
        app = WorkbenchApp(LaunchSpec(open_run=sys.argv[1], use_user_config=False), system_stats=False)
        async with app.run_test(size=(150, 44)) as pilot:
            await pilot.pause(0.5)
            assert app.model.read_only and app.model.rounds, "the recorded run did not load"
            print("opened", len(app.model.rounds), "rounds")
            await pilot.press("ctrl+q")

    asyncio.run(main())
""")


def _torch_spec() -> str:
    """The torch this test environment runs, so the fresh venv installs the same build (in CI:
    the CPU torch 2.13.0 that lies on disk) and never downloads a CUDA build."""
    import torch

    return f"torch=={torch.__version__.split('+')[0]}"


def test_plain_install_runs_the_workbench(tmp_path: Path) -> None:
    runs = sorted(p for p in RECORDED.iterdir() if p.is_dir()) if RECORDED.is_dir() else []
    if not runs:
        pytest.skip("examples/recorded holds no run folder")
    venv = tmp_path / "venv"
    try:
        _install_and_open(venv, tmp_path, runs[0])
    finally:  # the venv holds a whole torch (about 1 GB): not left for the rest of the run
        shutil.rmtree(venv, ignore_errors=True)


def _install_and_open(venv: Path, tmp_path: Path, run: Path) -> None:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, _torch_spec()], check=True, timeout=600, env=env)
    src = tmp_path / "src"  # a copy, so the build writes nothing into the checkout
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".venv", ".git", "runs", "*.egg-info", "build",
                                                             "__pycache__", ".cudaforge-cache"))
    subprocess.run([*pip, str(src)], check=True, timeout=600, env=env)
    help_run = subprocess.run([str(venv / "bin" / "cudaforge-tui"), "--help"], capture_output=True, text=True,
                              timeout=120, env=env)
    assert help_run.returncode == 0, help_run.stderr
    assert "usage: cudaforge-tui" in help_run.stdout
    run_copy = tmp_path / "run"
    shutil.copytree(run, run_copy)
    opened = subprocess.run([str(py), "-c", OPEN_THE_APP, str(run_copy)], capture_output=True, text=True,
                            timeout=300, env=env, cwd=tmp_path)
    assert opened.returncode == 0, opened.stderr[-3000:]
    assert "opened" in opened.stdout
