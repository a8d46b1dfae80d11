"""The timed windows' parts beside CUDA context creations and apart from them, from a sweep's lock log and rows;
and the CUPTI start beside each kind of driver work that holds no GPU lock (creations, large page-locks and
unlocks, workers' exits), where the log has them (since session 42).

    python bench/windows_beside_creations.py SWEEP.locklog.gz SWEEP.rows.jsonl

Why: a window's CUPTI start (held alone) took a median 58 ms where another process's context creation overlapped
the window and 9 ms where none did (H200 sweep of session 39), which is why creations now start between windows
(engine/gpu/rwlock.between_windows). This shows, for any sweep, whether that still holds and how many windows a
creation overlapped, and where creations began (no writer / a writer waiting / a writer holding).

The log names processes, the rows problems: each write hold (got -> drop) is matched to the row whose
`gpu_exclusive` phase has the same length within MATCH_S, each row used once (both clocks time the same hold;
holds left unmatched are counted, not guessed).
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kernelbench_sweep import SLOW_CUPTI_START_S as SLOW_S  # noqa: E402  (the sweep summary's own bound)
from lock_timeline import LockEvent, read_log  # noqa: E402

MATCH_S = 0.003
PARTS = ("timing.cupti_start", "timing.host_calls", "timing.events", "gpu_exclusive")


# Driver work that holds no GPU lock, logged as begin/end spans (a context's creation, a large host buffer's
# page-lock and unlock: engine/worker/host_buffers.py) or, for a worker's exit (its context's teardown), a begin only.
SPANS = ("context", "pin", "unpin")
POINTS = ("exit",)


@dataclass(frozen=True)
class Window:
    seconds: float
    beside: frozenset[str]  # the SPANS under way when it began or begun during it; the POINTS that came during it

    @property
    def beside_creation(self) -> bool:
        return "context" in self.beside


def windows(events: list[LockEvent]) -> list[Window]:
    """Each write hold, and the hold-free driver work beside it."""
    running: dict[str, set[int]] = {kind: set() for kind in SPANS}
    out: list[Window] = []
    got: float | None = None
    seen: set[str] = set()
    for e in events:
        if e.kind in SPANS and e.event == "begin":
            running[e.kind].add(e.pid)
            if got is not None:
                seen.add(e.kind)
        elif e.kind in SPANS and e.event == "end":
            running[e.kind].discard(e.pid)
        elif e.kind in POINTS and e.event == "begin" and got is not None:
            seen.add(e.kind)
        elif e.kind == "write" and e.event == "got":
            got, seen = e.t, {kind for kind, pids in running.items() if pids}
        elif e.kind == "write" and e.event == "drop" and got is not None:
            out.append(Window(round(e.t - got, 3), frozenset(seen)))
            got, seen = None, set()
    return out


def creation_starts(events: list[LockEvent]) -> dict[str, int]:
    """Where creations began: with no writer about, while one waited for the GPU, while one held it."""
    wanting: set[int] = set()
    holding = False
    where: collections.Counter[str] = collections.Counter()
    for e in events:
        if e.kind == "write" and e.event == "want":
            wanting.add(e.pid)
        elif e.kind == "write" and e.event == "got":
            holding = True
        elif e.kind == "write" and e.event in ("drop", "gave_up"):
            holding = False
            wanting.discard(e.pid)
        elif e.kind == "context" and e.event == "begin":
            where["holding" if holding else "waiting" if wanting else "free"] += 1
    return {k: where.get(k, 0) for k in ("free", "waiting", "holding")}


def match(found: list[Window], rows: list[dict]) -> tuple[list[tuple[Window, dict]], int]:
    """Each window paired with the row of the same exclusive seconds (within MATCH_S); the unmatched count."""
    free = [(round((r.get("phases") or {}).get("gpu_exclusive", 0.0), 3), r) for r in rows]
    used: set[int] = set()
    pairs, unmatched = [], 0
    for w in found:
        best = min(((abs(w.seconds - s), i) for i, (s, _) in enumerate(free) if i not in used), default=None)
        if best is None or best[0] > MATCH_S:
            unmatched += 1
            continue
        used.add(best[1])
        pairs.append((w, free[best[1]][1]))
    return pairs, unmatched


def _figures(rows: list[dict], part: str) -> tuple[str, str, str, str]:
    """`part` over `rows`: how many, median s, summed s, how many over SLOW_S, as printed."""
    v = [(r.get("phases") or {}).get(part, 0.0) for r in rows]
    return (str(len(v)), f"{statistics.median(v) if v else 0.0:.3f}", f"{sum(v):.1f}",
            str(sum(x > SLOW_S for x in v)))


def table(pairs: list[tuple[Window, dict]]) -> list[str]:
    lines = ["| part (held alone) | windows beside a creation: n / median s / summed s / over 0.1 s "
             "| apart: n / median s / summed s / over 0.1 s |", "| --- | --- | --- |"]
    for part in PARTS:
        cells = [" / ".join(_figures([r for w, r in pairs if w.beside_creation is beside], part))
                 for beside in (True, False)]
        lines.append(f"| {part} | {cells[0]} | {cells[1]} |")
    return lines


def by_kind(pairs: list[tuple[Window, dict]], part: str = "timing.cupti_start") -> list[str]:
    """`part` in the windows beside each kind of hold-free driver work, and in those beside none."""
    lines = [f"| {part} in windows beside | windows | median s | summed s | over 0.1 s |", "| --- | --- | --- | --- | --- |"]
    groups = [(kind, [r for w, r in pairs if kind in w.beside]) for kind in (*SPANS, *POINTS)]
    groups.append(("none of them", [r for w, r in pairs if not w.beside]))
    for name, rows in groups:
        lines.append(f"| {name} | " + " | ".join(_figures(rows, part)) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("rows", type=Path)
    args = ap.parse_args(argv)
    events = read_log(args.log)
    rows = [json.loads(line) for line in args.rows.read_text().splitlines() if line.strip()]
    pairs, unmatched = match(windows(events), rows)
    print("\n".join(table(pairs)))
    print()
    print("\n".join(by_kind(pairs)))
    starts = creation_starts(events)
    print(f"\n{len(pairs)} windows matched to their problems, {unmatched} not; creations began with no writer about "
          f"{starts['free']}, while a writer waited {starts['waiting']}, while one held the GPU {starts['holding']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
