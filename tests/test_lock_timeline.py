"""The lock log (engine/gpu/rwlock.py, CUDAFORGE_LOCK_LOG) written by real processes, and what
bench/lock_timeline.py makes of it: drains attributed to the reader step that held the writer back."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from lock_timeline import LockEvent, context_turns, format_timeline, main, read_log, timeline  # noqa: E402

HOLDER = textwrap.dedent("""
    import sys, time
    from cudaforge.engine.gpu import rwlock
    lock, kind, label, delay, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5])
    rwlock.STEP_LABEL[0] = lambda: label
    time.sleep(delay)
    with rwlock.hold(lock, kind, sync=None):
        time.sleep(hold)
""")


def test_timeline_of_real_processes(tmp_path: Path) -> None:
    lock, log = tmp_path / "gpu0.lock", tmp_path / "lock.log"
    env = {**os.environ, "CUDAFORGE_LOCK_LOG": str(log)}

    def start(kind: str, label: str, delay: float, hold: float) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), kind, label, str(delay), str(hold)], env=env)

    # A reader holds 1.2 s; a writer comes at 0.4 s and waits for it (the drain), then holds 0.5 s; a second
    # reader comes at 0.7 s and waits behind the writer.
    procs = [start("read", "correctness.compare", 0.0, 1.2)]
    time.sleep(0.4)
    procs.append(start("write", "timing", 0.0, 0.5))
    time.sleep(0.3)
    procs.append(start("read", "cache_probes", 0.0, 0.1))
    for p in procs:
        assert p.wait(timeout=60) == 0
    events = read_log(log)
    assert [e.event for e in events].count("got") == 3 and [e.event for e in events].count("drop") == 3
    t = timeline(events)
    split = t["split_s"]
    assert t["windows"] == 1
    assert 0.3 <= split["exclusive"] <= 1.0, split  # the writer's 0.5 s hold
    assert split["drain"] >= 0.3, split  # the writer waited from ~0.4 s to ~1.2 s for the first reader
    assert set(t["sole_drain_s"]) == {"correctness.compare"}  # the step that held the writer back
    assert t["sole_drain_s"]["correctness.compare"] >= 0.3
    assert t["reader_wait_s"]["behind_writer"] >= 0.5  # the second reader waited through drain and window
    text = format_timeline(t)
    assert "| drain |" in text and "correctness.compare" in text


def test_timeline_by_hand() -> None:
    e = [LockEvent(0.0, 1, "want", "read", "a"), LockEvent(0.0, 1, "got", "read", "a"),
         LockEvent(1.0, 2, "want", "write", "timing"), LockEvent(3.0, 1, "drop", "read", "correctness"),
         LockEvent(3.0, 2, "got", "write", "timing"), LockEvent(4.0, 2, "drop", "write", "timing"),
         LockEvent(5.0, 3, "want", "read", "b"), LockEvent(5.0, 3, "got", "read", "b"),
         LockEvent(6.0, 3, "drop", "read", "b")]
    t = timeline(e)
    assert t["wall_s"] == 6.0
    assert t["split_s"] == {"drain": 2.0, "shared": 2.0, "exclusive": 1.0, "idle": 1.0}
    assert t["sole_drain_s"] == {"correctness": 2.0}
    assert t["last_holder_s"] == {"correctness": 2.0} and t["last_holder_n"] == {"correctness": 1}


def test_each_windows_wait_goes_to_the_last_reader_it_waited_for_or_to_the_window_before_it() -> None:
    """Two readers drain for writer 3; writer 4 arrives during 3's window and waits only behind it."""
    e = [LockEvent(0.0, 1, "got", "read", "shapes"), LockEvent(0.0, 2, "got", "read", "kernels"),
         LockEvent(1.0, 3, "want", "write", "timing_wait"), LockEvent(1.5, 2, "drop", "read", "kernels"),
         LockEvent(2.5, 1, "drop", "read", "shapes"), LockEvent(2.5, 3, "got", "write", "timing.events"),
         LockEvent(3.0, 4, "want", "write", "timing_wait"), LockEvent(3.5, 3, "drop", "write", "timing"),
         LockEvent(3.5, 4, "got", "write", "timing.events"), LockEvent(4.0, 4, "drop", "write", "timing")]
    t = timeline(e)
    assert t["last_holder_s"] == {"shapes": 1.5, "(a writer)": 0.5}
    assert t["last_holder_n"] == {"shapes": 1, "(a writer)": 1}
    text = format_timeline(t)
    assert "| shapes | 1 | 1.5 |" in text and "| (a writer) | 1 | 0.5 |" in text


def test_cli_names_a_missing_log(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main([str(tmp_path / "none.log")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_context_turns_are_each_spares_first_warm_hold_grouped_by_overlap() -> None:
    """Spares 1 and 2 make their contexts at the same time (each beside one other), spare 3 alone later; the
    later warm holds of 1 (its check kernels) and a job's read hold are no context turns."""
    holds = [(1, "warm", 0.0, 1.0), (2, "warm", 0.5, 2.0), (1, "warm", 2.1, 2.2), (9, "correctness", 3.0, 3.5),
             (3, "warm", 4.0, 4.4)]  # (pid, step, got, dropped): read holds
    e = sorted((LockEvent(t, pid, event, "read", step) for pid, step, got, dropped in holds
                for event, t in (("got", got), ("drop", dropped))), key=lambda ev: ev.t)
    turns = context_turns(e)
    assert turns == {"0": [1.0, 0.4], "1": [2.0, 1.25]}
    text = format_timeline(timeline(e))
    assert "| 0 | 1 | 0.40 |" in text and "| 1 | 2 | 1.25 |" in text


def test_hold_lengths_by_the_step_each_hold_ended_in() -> None:
    """Every hold's length, by kind and the step it ended in, the largest sum first: what shows a fixed cost
    per evaluation growing (a finished evaluation's release went from 0.08 s to 0.4-0.6 s unnoticed)."""
    e = [LockEvent(0.0, 1, "got", "read", "reference"), LockEvent(0.5, 1, "drop", "read", "done.release"),
         LockEvent(0.0, 2, "got", "read", "a"), LockEvent(0.2, 2, "drop", "read", "done.release"),
         LockEvent(0.3, 3, "want", "write", "timing_wait"), LockEvent(0.5, 3, "got", "write", "timing_wait"),
         LockEvent(0.6, 3, "drop", "write", "timing"), LockEvent(0.7, 2, "got", "read", "shapes"),
         LockEvent(0.8, 2, "drop", "read", "shapes")]
    lengths = timeline(e)["hold_lengths"]
    assert list(lengths) == ["read done.release", "read shapes", "write timing"]
    n, total, median, p90 = lengths["read done.release"]
    assert (n, total, median, p90) == (2.0, 0.7, 0.35, 0.5)
    assert lengths["write timing"][:2] == [1.0, 0.1]
    assert "| read done.release | 2 | 0.7 | 0.350 | 0.500 |" in format_timeline(timeline(e))


def test_context_creations_beside_windows_and_releases() -> None:
    """Creations logged without a hold (begin/end of kind context): how many overlapped a window or its drain,
    and the finished evaluations' releases that overlapped one against those that did not."""
    e = [LockEvent(0.0, 1, "got", "read", "shapes"), LockEvent(1.0, 1, "drop", "read", "done.release"),
         LockEvent(0.5, 9, "begin", "context", "warm"), LockEvent(0.8, 9, "end", "context", "warm"),
         LockEvent(2.0, 2, "got", "read", "shapes"), LockEvent(2.2, 2, "drop", "read", "done.release"),
         LockEvent(3.0, 3, "want", "write", "timing_wait"), LockEvent(3.1, 8, "begin", "context", "warm"),
         LockEvent(3.2, 3, "got", "write", "timing_wait"), LockEvent(3.4, 8, "end", "context", "warm"),
         LockEvent(3.5, 3, "drop", "write", "timing")]
    made = timeline(e)["creations"]
    assert made["creations"] == [2.0, 0.3] and made["in_windows"] == [1.0]
    assert made["releases_beside"] == [1.0, 1.0] and made["releases_apart"] == [1.0, 0.2]
    text = format_timeline(timeline(e))
    assert "context creations (no hold): 2, median 0.30 s; 1 during a window or its drain" in text
    assert "releases beside a creation: 1, median 1.000 s; apart from any: 1, median 0.200 s" in text
    assert timeline(e[:2])["creations"] == {}  # a log without creations (older sweeps) shows none


def test_creations_that_waited_for_a_gap_between_windows_are_counted() -> None:
    """A creation that found a writer waiting logs `wait context` first (rwlock.between_windows); the timeline
    counts those waits to their `begin`, and shows the count, median and sum."""
    e = [LockEvent(0.0, 3, "want", "write", "timing_wait"), LockEvent(0.1, 8, "wait", "context", "warm"),
         LockEvent(0.2, 3, "got", "write", "timing_wait"), LockEvent(0.6, 3, "drop", "write", "timing"),
         LockEvent(0.7, 8, "begin", "context", "warm"), LockEvent(1.0, 8, "end", "context", "warm"),
         LockEvent(1.1, 9, "begin", "context", "warm"), LockEvent(1.2, 9, "end", "context", "warm")]
    made = timeline(e)["creations"]
    assert made["gap_waits"] == [1.0, 0.6, 0.6] and made["in_windows"] == [0.0]
    assert "1 waited for a gap between windows (median 0.60 s, 0.6 s in all)" in format_timeline(timeline(e))
    # the wait is no reader's: the window's split counts no reader waiting behind it
    assert timeline(e)["reader_wait_s"].get("behind_writer", 0.0) == 0.0


def test_a_context_creation_is_logged_around_the_drivers_work(tmp_path: Path) -> None:
    """engine/gpu/context.py logs `begin`/`end context` through rwlock.log_event, which real processes append
    to the lock log with their holds; the timeline reads them back (the CUDA call itself needs a GPU: the
    GPU test of a spare's context checks those lines there)."""
    log = tmp_path / "lock.log"
    script = textwrap.dedent("""
        import time
        from cudaforge.engine.gpu import rwlock
        rwlock.STEP_LABEL[0] = lambda: "warm"
        rwlock.log_event("begin", "context")
        time.sleep(0.3)
        rwlock.log_event("end", "context")
    """)
    env = {**os.environ, "CUDAFORGE_LOCK_LOG": str(log)}
    assert subprocess.run([sys.executable, "-c", script], env=env, timeout=120).returncode == 0
    events = read_log(log)
    assert [(ev.event, ev.kind, ev.step) for ev in events] == [("begin", "context", "warm"), ("end", "context", "warm")]
    (n, median), = [timeline(events)["creations"]["creations"]]
    assert n == 1 and median >= 0.3


def test_brief_line_for_the_key_figures_table(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """`--brief`: the one line bench/gpu_check.sh adds to a sweep's key figures (drain, exclusive, wall, the
    releases' median hold, creations during a window)."""
    log = tmp_path / "lock.log"
    log.write_text("\n".join(f"{t} {pid} {event} {kind} {step}" for t, pid, event, kind, step in [
        (0.0, 1, "got", "read", "shapes"), (0.5, 9, "begin", "context", "warm"), (1.0, 2, "want", "write", "timing_wait"),
        (1.1, 9, "end", "context", "warm"), (1.5, 1, "drop", "read", "done.release"),
        (1.5, 2, "got", "write", "timing_wait"), (2.0, 2, "drop", "write", "timing")]) + "\n")
    assert main([str(log), "--brief"]) == 0
    line = capsys.readouterr().out.strip()
    assert line == "drain 0.5 s, exclusive 0.5 s of 2.0 s; releases 1.50 s median; 1 of 1 context creations in a window"
    assert main([str(log)]) == 0  # the full timeline ends with the same line, read from there by gpu_check.sh
    assert capsys.readouterr().out.strip().splitlines()[-1] == "in brief: " + line


def test_a_gzipped_log_reads_as_the_plain_one_and_a_log_without_events_is_refused(
        tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    """bench/results keeps the lock logs gzipped: they read as the plain file does. A log with no lock event
    (a wrong file, an empty log) is an error, not a timeline of zeros that reads as a sweep without a drain."""
    lines = "\n".join(f"{t} {pid} {event} {kind} {step}" for t, pid, event, kind, step in [
        (0.0, 1, "got", "read", "shapes"), (1.0, 2, "want", "write", "timing_wait"),
        (1.5, 1, "drop", "read", "done.release"), (1.5, 2, "got", "write", "timing_wait"),
        (2.0, 2, "drop", "write", "timing")]) + "\n"
    plain, packed = tmp_path / "lock.log", tmp_path / "lock.log.gz"
    plain.write_text(lines)
    packed.write_bytes(gzip.compress(lines.encode()))
    assert read_log(packed) == read_log(plain) != []
    assert main([str(packed), "--brief"]) == 0
    assert capsys.readouterr().out.strip().startswith("drain 0.5 s, exclusive 0.5 s of 2.0 s")
    empty = tmp_path / "empty.log.gz"
    empty.write_bytes(gzip.compress(b"not a lock log\n"))
    assert main([str(empty), "--brief"]) == 2
    assert "no lock events" in capsys.readouterr().err


def test_each_spares_wait_from_its_context_to_its_first_warm_up_turn() -> None:
    """Spare 1 asks for its first warm-up turn 0.2 s after its context, spare 2 only 12 s after (it yielded to
    announced jobs); a later turn of spare 1 and a job's read are no first turns."""
    from lock_timeline import first_turn_summary, spares_first_turn

    e = [LockEvent(0.0, 1, "begin", "context", "warm"), LockEvent(1.0, 1, "end", "context", "warm"),
         LockEvent(1.2, 1, "want", "read", "warm"), LockEvent(1.2, 1, "got", "read", "warm"),
         LockEvent(1.3, 1, "drop", "read", "warm"), LockEvent(2.0, 2, "end", "context", "warm"),
         LockEvent(3.0, 1, "want", "read", "warm"), LockEvent(3.0, 1, "got", "read", "warm"),
         LockEvent(3.1, 1, "drop", "read", "warm"), LockEvent(5.0, 9, "want", "read", "gpu_wait"),
         LockEvent(5.0, 9, "got", "read", "gpu_wait"), LockEvent(6.0, 9, "drop", "read", "correctness"),
         LockEvent(14.0, 2, "want", "read", "warm"), LockEvent(14.0, 2, "got", "read", "warm"),
         LockEvent(14.1, 2, "drop", "read", "warm")]
    waits = spares_first_turn(e)
    assert [round(w, 3) for w in waits] == [0.2, 12.0]
    assert first_turn_summary(waits) == [2.0, 6.1, 12.0, 12.0, 1.0]
    t = timeline(e)
    assert t["spares_first_turn"] == [2.0, 6.1, 12.0, 12.0, 1.0]
    assert "2 spares, median 6.10 s, p90 12.00 s, max 12.00 s, 1 over 5 s" in format_timeline(t)
    from lock_timeline import brief
    assert brief(t).endswith("; spares' first turn p90 12.00 s")
