"""bench/windows_beside_creations.py: a sweep's timed windows matched to their problems' rows by their held
seconds, split by whether a CUDA context creation overlapped them, and where the creations began."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from lock_timeline import LockEvent  # noqa: E402
from windows_beside_creations import by_kind, creation_starts, main, match, windows  # noqa: E402

EVENTS = [
    LockEvent(0.0, 9, "begin", "context", "warm"),  # under way when the first window begins
    LockEvent(0.1, 1, "want", "write", "timing_wait"), LockEvent(0.2, 1, "got", "write", "timing_wait"),
    LockEvent(0.4, 9, "end", "context", "warm"), LockEvent(0.5, 1, "drop", "write", "timing"),
    LockEvent(1.0, 2, "want", "write", "timing_wait"), LockEvent(1.02, 8, "begin", "context", "warm"),
    LockEvent(1.08, 8, "end", "context", "warm"), LockEvent(1.1, 2, "got", "write", "timing_wait"),
    LockEvent(1.3, 2, "drop", "write", "timing"),
    LockEvent(2.0, 3, "want", "write", "timing_wait"), LockEvent(2.0, 3, "got", "write", "timing_wait"),
    LockEvent(2.25, 7, "begin", "context", "warm"), LockEvent(2.3, 7, "end", "context", "warm"),
    LockEvent(2.4, 3, "drop", "write", "timing"),
    LockEvent(3.0, 4, "want", "write", "timing_wait"), LockEvent(3.0, 4, "got", "write", "timing_wait"),
    LockEvent(3.6, 4, "drop", "write", "timing"),  # no creation anywhere near
]


def _row(problem: str, exclusive: float, cupti_start: float) -> dict:
    return {"problem": problem, "phases": {"gpu_exclusive": exclusive, "timing.cupti_start": cupti_start,
                                           "timing.events": 0.1, "timing.host_calls": 0.02}}


def test_windows_are_matched_to_their_rows_and_split_by_a_creation_beside_them(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    found = windows(EVENTS)
    assert [(w.seconds, w.beside_creation) for w in found] == [(0.3, True), (0.2, False), (0.4, True), (0.6, False)]
    # The second window: the creation began during its drain and ended before it began, so it overlapped none.
    rows = [_row("a", 0.3, 0.06), _row("c", 0.401, 0.2), _row("d", 0.6, 0.009), _row("x", 9.0, 0.5)]
    pairs, unmatched = match(found, rows)
    assert [(w.seconds, r["problem"]) for w, r in pairs] == [(0.3, "a"), (0.4, "c"), (0.6, "d")]
    assert unmatched == 1  # the 0.2 s window has no row of its length: counted, not guessed
    assert creation_starts(EVENTS) == {"free": 1, "waiting": 1, "holding": 1}
    log, rows_file = tmp_path / "sweep.locklog", tmp_path / "rows.jsonl"
    log.write_text("".join(f"{e.t} {e.pid} {e.event} {e.kind} {e.step}\n" for e in EVENTS))
    rows_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(log), str(rows_file)]) == 0
    out = capsys.readouterr().out
    assert "| timing.cupti_start | 2 / 0.130 / 0.3 / 1 | 1 / 0.009 / 0.0 / 0 |" in out
    assert "3 windows matched to their problems, 1 not; creations began with no writer about 1, while a writer " \
           "waited 1, while one held the GPU 1" in out


def test_the_cupti_start_is_split_by_each_kind_of_hold_free_driver_work_beside_the_window() -> None:
    """Large page-locks and unlocks (begin/end spans) and workers' exits (a begin only: the context's teardown
    follows it) are counted like creations: a window is beside each kind under way or begun during it."""
    events = [
        LockEvent(0.0, 5, "begin", "unpin", "-"), LockEvent(0.1, 1, "got", "write", "timing_wait"),
        LockEvent(0.2, 5, "end", "unpin", "-"), LockEvent(0.3, 1, "drop", "write", "timing"),
        LockEvent(1.0, 2, "got", "write", "timing_wait"), LockEvent(1.1, 6, "begin", "exit", "exit"),
        LockEvent(1.2, 7, "begin", "pin", "-"), LockEvent(1.3, 7, "end", "pin", "-"),
        LockEvent(1.5, 2, "drop", "write", "timing"),
        LockEvent(2.0, 6, "begin", "exit", "exit"),  # between windows: beside none
        LockEvent(3.0, 3, "got", "write", "timing_wait"), LockEvent(3.1, 3, "drop", "write", "timing"),
    ]
    found = windows(events)
    assert [sorted(w.beside) for w in found] == [["unpin"], ["exit", "pin"], []]
    pairs, unmatched = match(found, [_row("a", 0.2, 0.3), _row("b", 0.5, 0.05), _row("c", 0.1, 0.008)])
    assert unmatched == 0
    lines = by_kind(pairs)
    assert "| unpin | 1 | 0.300 | 0.3 | 1 |" in lines and "| exit | 1 | 0.050 | 0.1 | 0 |" in lines
    assert "| context | 0 | 0.000 | 0.0 | 0 |" in lines and "| none of them | 1 | 0.008 | 0.0 | 0 |" in lines
