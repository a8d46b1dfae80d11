"""bench/sweep_compare.py: two sweeps' rows side by side, over the problems both ran."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from sweep_compare import compare, format_comparison, main  # noqa: E402


def _row(problem: str, *, wall: float, exclusive: float, phases: dict[str, float], outcome: str = "integrity_failure",
         reference_ms: float | None = None, host_wall: float | None = None) -> dict:
    timing = None if reference_ms is None else {"reference_ms": reference_ms, "host_load": {"wall_s": host_wall}}
    return {"problem": problem, "expected": outcome != "oom", "outcome": outcome, "ratio": 1.1, "wall_s": wall,
            "exclusive_s": exclusive, "phases": phases, "timing": timing}


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_phase_sums_and_windows_over_the_problems_both_sweeps_ran(tmp_path: Path) -> None:
    before = _write(tmp_path / "before.rows.jsonl", [
        _row("level1/a", wall=10.0, exclusive=0.5, phases={"spare_wait": 0.0, "cache_probes": 2.0, "gpu_yields": 3.0},
             reference_ms=3.0, host_wall=0.6),
        _row("level3/rnn", wall=20.0, exclusive=1.0, phases={"spare_wait": 0.0, "cache_probes": 1.0},
             reference_ms=40.0, host_wall=0.4),
        _row("level2/only_before", wall=99.0, exclusive=9.0, phases={"spare_wait": 50.0}, outcome="oom"),
    ])
    after = _write(tmp_path / "after.rows.jsonl", [
        _row("level1/a", wall=12.0, exclusive=0.5, phases={"spare_wait": 4.0, "cache_probes": 2.5, "gpu_yields": 5.0},
             reference_ms=3.1, host_wall=0.6),
        _row("level3/rnn", wall=21.0, exclusive=1.7, phases={"spare_wait": 0.5, "cache_probes": 1.0},
             reference_ms=68.0, host_wall=0.7),
    ])
    c = compare(before, after)
    assert (c.before.problems, c.only_before, c.only_after) == (2, 1, 0)  # the oom row ran in one sweep only
    assert (c.before.oom, c.before.wall_s, c.after.wall_s) == (0, 30.0, 33.0)
    assert c.phase_changes(2) == [("spare_wait", 0.0, 4.5), ("gpu_yields", 3.0, 5.0)]
    assert [w.problem for w in c.windows] == ["level3/rnn", "level1/a"]  # the largest change in the windows first
    assert round(c.windows[0].change_s, 3) == 0.7
    text = format_comparison(c)
    assert "| spare_wait | 0.0 | 4.5 | +4.5 |" in text
    assert "| gpu_yields (a count, not seconds) | 3.0 | 5.0 | +2.0 |" in text
    assert "| level3/rnn | 1.000 | 1.700 | +0.700 | 40.00 | 68.00 | 0.400 | 0.700 |" in text
    assert text.endswith("held alone, summed: 1.5 s before, 2.2 s after (+0.7 s)")


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    good = _write(tmp_path / "good.rows.jsonl", [_row("level1/a", wall=1.0, exclusive=0.1, phases={})])
    broken = tmp_path / "broken.rows.jsonl"
    broken.write_text(json.dumps(_row("level1/a", wall=1.0, exclusive=0.1, phases={})) + "\nnot json\n")
    other = _write(tmp_path / "other.rows.jsonl", [_row("level2/b", wall=1.0, exclusive=0.1, phases={})])
    assert main([str(good), str(tmp_path / "missing.rows.jsonl")]) == 2
    assert capsys.readouterr().err.strip().endswith("missing.rows.jsonl: no such file")
    assert main([str(good), str(broken)]) == 2
    assert "broken.rows.jsonl:2: not a sweep row" in capsys.readouterr().err
    assert main([str(good), str(other)]) == 2
    assert "no problem in common" in capsys.readouterr().err
    out = tmp_path / "c.json"
    assert main([str(good), str(good), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["before"]["problems"] == 1
