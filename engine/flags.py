"""Command-line flags that `cudaforge` and `cudaforge-tui` share, and the one map from flags to config keys.

Choices come from the config schema (engine/config.py), so a flag offers exactly what a config file may say.
"""

from __future__ import annotations

import argparse
from typing import Any

from cudaforge.engine.config import MODES, choices

# Flag destination (argparse `dest`, also the LaunchSpec field) -> "section.key" it sets in the configuration.
FLAG_KEYS: dict[str, str] = {
    "device": "eval.device",
    "gpu": "eval.gpu",
    "trials": "eval.trials",
    "timing_trials": "timing.trials",
    "precision": "eval.precision",
    "atol": "eval.atol",
    "rtol": "eval.rtol",
    "gpu_memory_gb": "run.gpu_memory_gb",
    "rounds": "session.rounds",
    "target_speedup": "session.target_speedup",
    "cand_format": "session.format",
    "runs": "run.folder",
}


def flag_overrides(values: Any) -> dict[str, Any]:
    """ "section.key" -> value for each flag that was given; `values` is an argparse Namespace or a LaunchSpec."""
    return {key: getattr(values, name) for name, key in FLAG_KEYS.items() if getattr(values, name, None) is not None}


def add_device_flags(p: argparse.ArgumentParser, *, help_device: str | None = None,
                     help_gpu: str | None = None) -> None:
    """`--device cuda|cpu` ([eval] device) and `--gpu N` ([eval] gpu)."""
    p.add_argument("--device", choices=choices("eval", "device"), help=help_device)
    p.add_argument("--gpu", type=int, metavar="N", help=help_gpu)


def add_mode_flag(p: argparse.ArgumentParser, *, help: str | None = None) -> None:  # noqa: A002 (argparse's name)
    """`--mode review|auto|manual` ([session] mode)."""
    p.add_argument("--mode", choices=MODES, help=help)


def add_gpu_memory_flag(p: argparse.ArgumentParser) -> None:
    """`--gpu-memory-gb N` ([run] gpu_memory_gb): shared by `eval`, `run` and `cudaforge-tui`."""
    p.add_argument("--gpu-memory-gb", type=float, metavar="N",
                   help="cap each worker's device memory at N GiB (emulates a smaller card; CUDA only)")
