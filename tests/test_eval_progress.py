"""The typed progress path of a running evaluation: the worker's progress file and build log tailed into
EvalProgress values, and `cudaforge eval`'s phase line on a terminal and elsewhere."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

from cudaforge.engine.evaluation.progress import EvalProgress, PhaseLine, watch
from cudaforge.engine.worker.job import build_log_beside


def _phase(path: Path, name: str, since: float) -> None:
    path.write_text(json.dumps({"phase": name, "since": since, "phases": {}}))


async def test_watch_reports_phases_and_complete_build_lines(tmp_path: Path) -> None:
    progress = tmp_path / "progress.json"
    log = Path(build_log_beside(str(progress)))
    assert log == tmp_path / "build.log"
    seen: list[EvalProgress] = []
    _phase(progress, "build", 100.0)
    task = asyncio.ensure_future(watch(progress, seen.append, poll_s=0.01))
    await asyncio.sleep(0.05)
    log.write_bytes(b"[1/2] c++ -c main.cpp\n[2/2] c++ main.o -sha")  # the second line is not complete yet
    await asyncio.sleep(0.05)
    _phase(progress, "correctness", 101.0)
    with log.open("ab") as fh:
        fh.write(b"red -o x.so\n")
    task.cancel()  # the lines printed since the last poll still come
    await asyncio.gather(task, return_exceptions=True)
    assert seen[0] == EvalProgress("build", 100.0, ())
    lines = [line for p in seen for line in p.build_lines]
    assert lines == ["[1/2] c++ -c main.cpp", "[2/2] c++ main.o -shared -o x.so"]
    assert seen[-1].phase == "correctness" and seen[-1].since == 101.0


def test_the_phase_line_off_a_terminal_prints_one_line_per_phase() -> None:
    out = io.StringIO()
    clock = iter([10.0, 12.5, 14.0, 20.0]).__next__
    line = PhaseLine(out, clock=clock)
    line.update(EvalProgress("load_task", 9.0))
    line.update(EvalProgress("build", 10.0))
    line.update(EvalProgress("init", 12.0))  # still the build, as a person names it
    line.update(EvalProgress("correctness", 12.5))
    line.close()
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    assert text.splitlines() == ["  loading the task …", "  loading the task: 1.0 s", "  build …",
                                 "  build: 2.5 s", "  correctness …", "  correctness: 1.5 s"]


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_phase_line_on_a_terminal_rewrites_one_line_with_the_time_so_far() -> None:
    out = _Tty()
    now = [100.0]
    line = PhaseLine(out, clock=lambda: now[0])
    line.update(EvalProgress("build", 97.0))
    now[0] = 130.0
    line.tick()
    line.update(EvalProgress("timing", 130.0))
    now[0] = 131.0
    line.close()
    text = out.getvalue()
    assert "\r  build 3 s\x1b[K" in text and "\r  build 33 s\x1b[K" in text
    assert text.endswith("\r  timing 1.0 s\x1b[K\n") and text.count("\n") == 1
