"""Each default and choice is written once (issue 24): a grep over engine/ and tui/ keeps copies from coming back."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from cudaforge.engine.config import GPU_WAIT_S, MODES, SCHEMA, config_from_data
from cudaforge.engine.evaluation.evaluator import EvalOptions
from cudaforge.engine.profiling.analysis import fmt_number

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for d in ("engine", "tui") for p in (ROOT / d).rglob("*.py"))


def _hits(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return [f"{p.relative_to(ROOT)}:{i}" for p in SOURCES
            for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if rx.search(line)]


@pytest.mark.parametrize(("what", "pattern"), [
    ("the 900 s load timeout", r"\b900(\.0)?\b"),
    ("the 3600 s GPU wait", r"\b3600\.0\b"),
    ("the tuple of mode names", r"""["']review["'],\s*["']auto["'],\s*["']manual["']"""),
    ("the candidate formats a Coder writes", r"""\(["']nvrtc["'],\s*["']inline["'],\s*["']cpu["'],\s*["']triton["']\)"""),
    ("the timing baselines", r"""\(["']eager["'],\s*["']compile["']\)"""),
    ("the --gpu-memory-gb flag", r"""["']--gpu-memory-gb["']"""),
    ("the --mode flag", r"""["']--mode["']"""),
    ("the --device flag", r"""["']--device["']"""),
    ("a number formatter", r"def fmt_number\("),
    ("the gpu_memory_gb GiB -> bytes conversion", r"gpu_memory_gb\)?\)? \* GIB|float\(gb\) \* GIB"),
])
def test_written_once(what: str, pattern: str) -> None:
    hits = _hits(pattern)
    assert len(hits) <= 1, f"{what} is written {len(hits)} times: {hits}"


def test_eval_options_defaults_are_the_schema() -> None:
    """EvalOptions() and EvalOptions.from_config(the built-in defaults) are the same options."""
    built_in = EvalOptions.from_config(config_from_data({}))
    plain = EvalOptions()
    differ = [f.name for f in dataclasses.fields(EvalOptions) if getattr(plain, f.name) != getattr(built_in, f.name)]
    assert differ == []
    assert plain.load_s == SCHEMA["timeouts"]["load_s"].default
    assert plain.phase_limits()["gpu_wait"] == GPU_WAIT_S
    assert SCHEMA["session"]["mode"].choices is MODES


def test_one_number_formatter_keeps_both_styles() -> None:
    """The reports' style (trailing zeros dropped) and the metrics table's (fixed decimals) are one function."""
    assert [fmt_number(v) for v in (None, 0, 2.5e6, 1234.5, 1.5, 0.01234)] == ["n/a", "0", "2.5e+06", "1,234", "1.5",
                                                                               "0.0123"]
    assert [fmt_number(v, aligned=True) for v in (2.5e6, 1234.5, 1.5, 0.01234, 1e-5)] == [
        "2,500,000", "1,234.5", "1.50", "0.0123", "1e-05"]
