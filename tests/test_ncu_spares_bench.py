"""bench/ncu_spares.py off the GPU: its reading of the spares' moments (a Python start held back after its ncu's
launch, and where that falls against the profile's end), and its refusal where there is no CUDA device (the
measurement itself runs in gpu_check's `ncu-spares` step)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
try:
    import ncu_spares
finally:
    sys.path.pop(0)

SpareTimes = ncu_spares.SpareTimes


def test_spares_started_side_by_side_read_as_such() -> None:
    spares = [SpareTimes(0, 0.00, 0.05, 6.0, {"import_s": 4.8}, used=True),
              SpareTimes(1, 0.01, 0.07, 6.3, {"import_s": 5.0}, used=False)]
    line = ncu_spares.verdict(spares, profile_ended=8.0)
    assert line.startswith("side by side"), line
    assert "0.06 s" in line  # the larger of the two delays


def test_a_spare_whose_python_waits_for_the_profile_is_named_with_its_delay() -> None:
    """The session-21 shape: the second spare's Python starts when the first one's ncu ends (the profile's end),
    and a third, started at the profile, is not ready within the wait."""
    spares = [SpareTimes(0, 0.00, 0.05, 6.0, {}, used=True),
              SpareTimes(1, 0.01, 9.10, 15.2, {}, used=False),
              SpareTimes(2, 7.00, None, None, {}, used=False)]
    line = ncu_spares.verdict(spares, profile_ended=9.0)
    assert line.startswith("held back: "), line
    assert "spare 1: Python started 9.09 s after its ncu, +0.10 s from the profile's end" in line
    assert "spare 2: not ready within the wait" in line and "(it ended)" not in line
    assert "spare 0" not in line
    rows = ncu_spares.table(spares, (7.0, 9.0, True)).splitlines()
    assert rows[3].startswith("| 1 | 0.01 | 9.10 | 15.20 | 9.09 |"), rows[3]
    assert rows[4].startswith("| 2 | 7.00 | — | — | — |"), rows[4]
    assert rows[-1] == "profile: 7.00 -> 9.00 s, ok=True"


def test_a_slow_ncu_warm_up_and_a_spare_that_ended_are_named() -> None:
    """Where ncu lets the Python start but holds its first profiled kernel, the warm-up step shows it; a spare
    that died before it was ready is said to have ended."""
    spares = [SpareTimes(0, 0.0, 0.05, 6.0, {"ncu_warm_s": 0.9}, used=True),
              SpareTimes(1, 0.0, 0.06, 14.0, {"ncu_warm_s": 7.8}, used=False),
              SpareTimes(2, 7.0, None, None, {}, used=False, alive=False)]
    line = ncu_spares.verdict(spares, profile_ended=9.0)
    assert line == "held back: spare 1: its ncu warm-up took 7.80 s; spare 2: not ready within the wait (it ended)"


def test_without_a_cuda_device_it_says_so_and_exits_2() -> None:
    try:
        import torch
    except ImportError:
        pytest.skip("torch is not installed")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: gpu_check's ncu-spares step runs the bench")
    done = subprocess.run([sys.executable, str(REPO / "bench" / "ncu_spares.py")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == "ncu_spares: needs a CUDA device (torch.cuda.is_available() is False)"


def test_no_spares_is_a_one_line_usage_error() -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "ncu_spares.py"), "--spares", "0"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("--spares must be 1 or more (with none kept there is no spare "
                                                         "to watch)")
