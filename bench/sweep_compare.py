"""Two KernelBench sweeps' rows side by side: where the seconds moved.

Every session since 32 compared a new sweep with an older one by hand (phase sums, each problem's windows,
the spares' waits), and one such comparison found session 34's regression (spares waiting 62.7 s for their
warm-ups) only a session later. This reads two `kernelbench_sweep.py` rows files and prints, over the problems
both ran (a quarter sweep against a whole one compares its quarter):

- each sweep's verdicts, out-of-memory count, highest memory ratio and summed walls;
- the phase sums (every phase and sub-phase the rows carry) that changed most;
- the problems whose windows (`exclusive_s`) changed most, with their timed reference medians and the timing
  thread's host wall (`timing.host_load`), which tell a slower host from more timed work.

    python bench/sweep_compare.py BEFORE.rows.jsonl AFTER.rows.jsonl [--top 15] [--json OUT]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cudaforge.engine.worker.gpu_share import HOLD_COUNTS  # phases that count (yields, pauses), not seconds


@dataclass(frozen=True)
class SweepSide:
    """One sweep's figures over the compared problems."""

    path: str
    problems: int
    expected: int
    oom: int
    max_ratio: float
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class WindowChange:
    """One problem's window against the other sweep's: seconds held alone, the reference's timed median and the
    timing thread's wall in its window (None where a row has no timing)."""

    problem: str
    exclusive_before: float
    exclusive_after: float
    reference_ms_before: float | None
    reference_ms_after: float | None
    host_wall_before: float | None
    host_wall_after: float | None

    @property
    def change_s(self) -> float:
        return self.exclusive_after - self.exclusive_before


@dataclass(frozen=True)
class Comparison:
    before: SweepSide
    after: SweepSide
    only_before: int
    only_after: int
    windows: list[WindowChange]

    def phase_changes(self, top: int) -> list[tuple[str, float, float]]:
        """The `top` phases whose sums changed most: (phase, before, after)."""
        names = set(self.before.phases) | set(self.after.phases)
        ranked = sorted(names, key=lambda k: (-abs(self.after.phases.get(k, 0.0) - self.before.phases.get(k, 0.0)), k))
        return [(k, self.before.phases.get(k, 0.0), self.after.phases.get(k, 0.0)) for k in ranked[:top]]


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """A rows file's rows by problem (the last row of a problem wins); a line that is not a row is an error."""
    rows: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            rows[str(row["problem"])] = row
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}:{number}: not a sweep row ({type(exc).__name__}: {exc})") from None
    return rows


def _side(path: Path, rows: list[dict[str, Any]]) -> SweepSide:
    phases: collections.Counter[str] = collections.Counter()
    for row in rows:
        for name, seconds in (row.get("phases") or {}).items():
            if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
                phases[name] += float(seconds)
    return SweepSide(path=str(path), problems=len(rows), expected=sum(bool(r.get("expected")) for r in rows),
                     oom=sum(r.get("outcome") == "oom" for r in rows),
                     max_ratio=max((float(r.get("ratio") or 0.0) for r in rows), default=0.0),
                     wall_s=round(sum(float(r.get("wall_s") or 0.0) for r in rows), 3),
                     phases={k: round(v, 3) for k, v in phases.items()})


def _timing(row: dict[str, Any], key: str) -> float | None:
    timing = row.get("timing") or {}
    value = (timing.get("host_load") or {}).get("wall_s") if key == "host_wall" else timing.get(key)
    return float(value) if isinstance(value, (int, float)) else None


def compare(before_path: Path, after_path: Path) -> Comparison:
    before, after = read_rows(before_path), read_rows(after_path)
    common = [p for p in before if p in after]
    windows = [WindowChange(p, float(before[p].get("exclusive_s") or 0.0), float(after[p].get("exclusive_s") or 0.0),
                            _timing(before[p], "reference_ms"), _timing(after[p], "reference_ms"),
                            _timing(before[p], "host_wall"), _timing(after[p], "host_wall")) for p in common]
    windows.sort(key=lambda w: (-abs(w.change_s), w.problem))
    return Comparison(_side(before_path, [before[p] for p in common]), _side(after_path, [after[p] for p in common]),
                      only_before=len(before) - len(common), only_after=len(after) - len(common), windows=windows)


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_comparison(c: Comparison, top: int = 15) -> str:
    lines = [f"{c.before.problems} problems in both sweeps ({c.only_before} only before, {c.only_after} only after)",
             "", "| sweep | as expected | OOM | max ratio | walls summed, s |", "| --- | --- | --- | --- | --- |"]
    for label, side in (("before", c.before), ("after", c.after)):
        lines.append(f"| {label}: {side.path} | {side.expected}/{side.problems} | {side.oom} | {side.max_ratio:.2f} "
                     f"| {side.wall_s:.1f} |")
    lines += ["", "| phase (summed over the problems) | before, s | after, s | change, s |", "| --- | --- | --- | --- |"]
    for name, old, new in c.phase_changes(top):
        label = f"{name} (a count, not seconds)" if name in HOLD_COUNTS else name
        lines.append(f"| {label} | {old:.1f} | {new:.1f} | {new - old:+.1f} |")
    lines += ["", "| problem | held alone before, s | after, s | change, s | reference median before, ms | after, ms "
                  "| timing thread's wall before, s | after, s |", "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for w in c.windows[:top]:
        lines.append(f"| {w.problem} | {w.exclusive_before:.3f} | {w.exclusive_after:.3f} | {w.change_s:+.3f} "
                     f"| {_num(w.reference_ms_before, 2)} | {_num(w.reference_ms_after, 2)} "
                     f"| {_num(w.host_wall_before, 3)} | {_num(w.host_wall_after, 3)} |")
    total = sum(w.change_s for w in c.windows)
    lines += ["", f"held alone, summed: {sum(w.exclusive_before for w in c.windows):.1f} s before, "
                  f"{sum(w.exclusive_after for w in c.windows):.1f} s after ({total:+.1f} s)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", help="the older sweep's rows (kernelbench_sweep.py --rows)")
    ap.add_argument("after", help="the newer sweep's rows")
    ap.add_argument("--top", type=int, default=15, help="how many phases and problems to list")
    ap.add_argument("--json", help="write the comparison here too")
    args = ap.parse_args(argv)
    paths = [Path(args.before), Path(args.after)]
    for path in paths:
        if not path.is_file():
            print(f"sweep_compare: {path}: no such file", file=sys.stderr)
            return 2
    try:
        result = compare(*paths)
    except ValueError as exc:
        print(f"sweep_compare: {exc}", file=sys.stderr)
        return 2
    if result.before.problems == 0:
        print(f"sweep_compare: {paths[0]} and {paths[1]} have no problem in common", file=sys.stderr)
        return 2
    print(format_comparison(result, args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(asdict(result), indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
