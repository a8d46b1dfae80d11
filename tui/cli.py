"""The `cudaforge-tui` command line: what to open, as a LaunchSpec the App starts from."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

from cudaforge.engine.errors import EXIT_BAD_INPUT
from cudaforge.engine.flags import add_device_flags, add_gpu_memory_flag, add_mode_flag


@dataclass(frozen=True)
class LaunchSpec:
    """One of: a task to start a session on, a run folder to resume, or a run folder to browse."""

    task: str | None = None
    resume: str | None = None
    open_run: str | None = None
    config_file: str | None = None
    mode: str | None = None
    device: str | None = None
    gpu: int | None = None
    rounds: int | None = None
    runs: str | None = None  # --runs DIR: [run] folder
    use_user_config: bool = True
    gpu_memory_gb: float | None = None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cudaforge-tui",
        description="The cudaforge workbench: a person, a Coder LLM and a Judge optimize a task's CUDA kernels "
                    "round by round.",
        epilog="Keys: F1 help, ctrl+p command palette, ctrl+q quit. Configuration: cudaforge.toml.")
    p.add_argument("task", nargs="?", help="a KernelBench-format task file")
    p.add_argument("--resume", metavar="RUN", help="continue a stopped or crashed run folder")
    p.add_argument("--open", dest="open_run", metavar="RUN", help="browse a run folder read-only")
    p.add_argument("--config", dest="config_file", metavar="F", help="config file (settings are saved there)")
    add_mode_flag(p)
    add_device_flags(p)
    p.add_argument("--rounds", type=int, metavar="N")
    p.add_argument("--runs", metavar="DIR", help="folder for new run folders (default [run] folder)")
    add_gpu_memory_flag(p)
    p.add_argument("--no-user-config", action="store_true", help="ignore ~/.config/cudaforge/cudaforge.toml")
    return p


def parse_args(argv: list[str]) -> LaunchSpec | int:
    """A LaunchSpec, or the exit code after a one-line usage error on stderr."""
    parser = build_parser()
    try:
        ns = parser.parse_args(argv)
    except SystemExit as exc:  # argparse printed its message (or --help)
        return int(exc.code or 0) and EXIT_BAD_INPUT
    chosen = [x for x in (ns.task, ns.resume, ns.open_run) if x]
    if len(chosen) != 1:
        print("cudaforge-tui: give exactly one of TASK, --resume RUN or --open RUN", file=sys.stderr)
        return EXIT_BAD_INPUT
    if ns.rounds is not None and ns.rounds < 1:
        print("cudaforge-tui: --rounds must be at least 1", file=sys.stderr)
        return EXIT_BAD_INPUT
    # refused before the app opens: a missing file is one line and exit 2, with or without a terminal
    if ns.task and not Path(ns.task).is_file():
        print(f"cudaforge-tui: {ns.task}: task file not found", file=sys.stderr)
        return EXIT_BAD_INPUT
    folder = ns.resume or ns.open_run
    if folder and not Path(folder, "manifest.json").is_file():
        print(f"cudaforge-tui: {folder}: not a run folder (no manifest.json)", file=sys.stderr)
        return EXIT_BAD_INPUT
    return LaunchSpec(task=ns.task, resume=ns.resume, open_run=ns.open_run, config_file=ns.config_file,
                      mode=ns.mode, device=ns.device, gpu=ns.gpu, rounds=ns.rounds, runs=ns.runs,
                      use_user_config=not ns.no_user_config, gpu_memory_gb=ns.gpu_memory_gb)
