"""bench/window_disturbance.py off the GPU: its disturbers start, run and stop as real processes, and a
condition's row and the table say what the timed samples show (the GPU part runs in gpu_check's
`disturbance` step)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
try:
    import window_disturbance as wd
finally:
    sys.path.pop(0)


def test_disturbers_run_until_told_to_stop_and_count_what_they_did() -> None:
    with wd.Disturbers("cpu", processes=2) as disturbers:
        assert len(disturbers.procs) == 2 and all(p.poll() is None for p in disturbers.procs)
        time.sleep(0.3)
    assert all(p.returncode == 0 for p in disturbers.procs)
    assert disturbers.counts > 2  # both loops ran, many times each
    assert not disturbers.folder.exists()  # its stop and count files are gone


def test_a_disturber_that_cannot_start_is_an_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wd, "__file__", str(REPO / "bench" / "no_such_script.py"))
    with pytest.raises(RuntimeError, match="did not start"), wd.Disturbers("cpu"):
        pass


def test_a_conditions_row_compares_each_side_with_idle_and_the_table_shows_it() -> None:
    idle = {"reference": 0.070, "candidate": 0.072}
    samples = {"reference": [0.070] * 90 + [0.071] * 10,  # unchanged
               "candidate": [0.072] * 50 + [0.110] * 50}  # half the calls 53 % slower
    import torch
    from cudaforge.engine.worker import timing

    timer = timing.Timer(torch.device("cpu"), False, 0)  # a window of its own, on the host clock: its host load
    timer.event_times({"reference": lambda: sum(range(2000)), "candidate": lambda: sum(range(3000))}, 1, 20)
    row = wd.summarize("cpu", samples, idle, count=12, timer=timer)
    assert row["late_launches"] == {}  # no CUDA events here: no launch can be late
    assert 0 < row["on_cpu"] <= 1.5 and row["preemptions"] >= 0
    assert row["reference_ratio"] == pytest.approx(1.0, abs=0.01) and row["reference_slow_share"] == 0.0
    assert row["candidate_ratio"] == pytest.approx(1.264, abs=0.01) and row["candidate_slow_share"] == 0.5
    assert row["candidate_median_us"] == pytest.approx(91.0) and row["disturbances"] == 12
    table = wd.format_table([wd.summarize("idle", samples, None, None), row], ["reference", "candidate"])
    lines = table.splitlines()
    assert lines[0].startswith("| condition | done | reference median µs")
    assert lines[2].startswith("| idle | - | 70.0 |") and lines[2].endswith("| - | - | - | - | - |")
    assert lines[3].startswith("| cpu | 12 | 70.0 |")
    assert lines[3].endswith(f"| 1.264 | 50.0% | - | {row['on_cpu']:.0%} | {row['preemptions']} |")
    failed = wd.format_table([{"condition": "pin", "error": "disturber 'pin' did not start (exit 1)"}],
                             ["reference", "candidate"]).splitlines()[2]
    assert failed.startswith("| pin | disturber 'pin' did not start") and failed.count("|") == lines[3].count("|")


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="with a GPU the children make their contexts")
def test_a_disturber_whose_action_fails_makes_an_error_not_a_quiet_row() -> None:
    """spare-context's forked children cannot make a context without a GPU: the disturber exits non-zero and
    the condition is an error (no row saying the window was disturbed and nothing changed)."""
    with pytest.raises(RuntimeError, match="disturber 'spare-context' failed \\(exit 1\\) after 0 times"), \
            wd.Disturbers("spare-context", processes=1):
        time.sleep(1.0)


def test_an_unknown_condition_is_refused_with_the_known_ones() -> None:
    assert wd.main(["--only", "context,teleport"]) == 2


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="the GPU machine runs the real bench")
@pytest.mark.parametrize("measure", ["kernels", "memory"])
def test_without_a_gpu_it_says_so_and_exits_3(capsys: pytest.CaptureFixture[str], measure: str) -> None:
    assert wd.main(["--only", "cpu", "--calls", "10", "--measure", measure]) == 3
    assert "no CUDA device" in capsys.readouterr().err
