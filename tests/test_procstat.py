"""engine/procstat.py, the one reader of /proc/<pid>/stat lines: a command name with spaces and parentheses
does not shift the fields; the readers built on it (the lock's process identity, the window's CPU, a
worker's age, the benches' per-process CPU time) read a live process right."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from cudaforge.engine.gpu.lock import process_alive, process_start
from cudaforge.engine.procstat import parse_stat, read_stat
from cudaforge.engine.worker import timing
from cudaforge.engine.worker.entry import process_age

linux_only = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="/proc is Linux's")


def test_a_command_name_with_spaces_and_parentheses_keeps_the_fields_in_place() -> None:
    line = b"4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 17 5 0 0 20 0 1 0 987654 1 2\n"
    stat = parse_stat(line)
    assert stat is not None and stat.comm == "my (odd) name"
    assert stat.text(3) == "S" and stat.field(4) == 1
    assert stat.field(14) + stat.field(15) == 22  # utime + stime
    assert stat.field(22) == 987654  # the start time
    with pytest.raises(IndexError):
        stat.field(60)
    with pytest.raises(IndexError):
        stat.text(2)  # the command name is not a field after it
    with pytest.raises(ValueError):
        stat.field(3)  # the state is a letter


def test_a_line_without_a_command_name_or_a_missing_file_is_none(tmp_path: Path) -> None:
    assert parse_stat(b"4242 no name here") is None
    assert read_stat(tmp_path / "absent") is None


@linux_only
def test_the_readers_built_on_it_read_this_process() -> None:
    stat = read_stat("/proc/self/stat")
    assert stat is not None and stat.text(3) == "R"  # it runs while it reads itself
    assert process_start(os.getpid()) == stat.text(22) != ""
    assert process_alive(os.getpid(), stat.text(22))
    assert not process_alive(os.getpid(), str(stat.field(22) + 1))  # another process that had this pid
    assert 0.0 < process_age() < 24 * 3600.0
    assert 0 <= timing._processor() < 4 * (os.cpu_count() or 1)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
    try:
        import proc_activity
    finally:
        sys.path.pop(0)
    seen = proc_activity._read_cpu()
    assert os.getpid() in seen and seen[os.getpid()][1] >= 0
