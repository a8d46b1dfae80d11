"""Where a sweep's GPU time went, from the lock log (CUDAFORGE_LOCK_LOG, engine/gpu/rwlock.py).

Every process that takes the per-GPU reader/writer lock appends `time pid event kind step` lines to the log
(event: want, got, drop, gave_up; kind: read or write; step: the worker's phase and sub-phase when it
happened). This rebuilds the lock's timeline and splits the wall into:

- exclusive: a writer (a timed window, an ncu run) holds the GPU;
- drain: a writer waits while readers still hold it (they finish their current step first);
- handover: a writer waits and nobody holds the GPU (the lock passing hands);
- shared: readers hold it and no writer waits;
- idle: nobody holds it.

It also says which reader steps drained longest: the time a reader was the only holder while a writer
waited (everyone else waited for that one step), by the step that reader dropped its hold in; each window's
whole wait by the step of the last reader it waited for; how long readers waited in all, while a writer
held or drained; and the spares' context turns (each spare process's first `warm` hold, its CUDA context) by
how many other context turns overlapped them: concurrent context creations slow each other (H200 sweeps,
sessions 18 and 22: a median 0.45-0.59 s alone, 1.6-2.6 s beside four or more), and a window that comes
during one waits for it. Since context creations hold nothing (engine/gpu/context.py), they are logged as
`begin`/`end` of kind `context`, and it counts those that overlapped a window or its drain.

Three figures watch fixed costs that no phase clock sees: every hold's length by the step it ended in (a
finished evaluation's release grew from 0.08 s to 0.4-0.6 s a hold when the trials began keeping their
allocator cache, sessions 18-22, and nothing showed it), the releases that overlapped a context
creation against those that did not (creations slow other processes' frees, session 25), and each spare's
wait from its context to its first warm-up turn (10-30 s in session 34's quarter sweep against 0.3 s before,
seen only when jobs began to wait for their spares).

    python bench/lock_timeline.py LOCKLOG [--json OUT] [--top 12]     # LOCKLOG may be gzipped (.gz), as committed
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LockEvent:
    t: float
    pid: int
    event: str
    kind: str
    step: str


def read_log(path: Path) -> list[LockEvent]:
    """The log's events in time order; a `.gz` log (how bench/results keeps them) is read through gzip."""
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    events = []
    for line in raw.decode("utf-8", errors="replace").splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        try:
            events.append(LockEvent(float(parts[0]), int(parts[1]), parts[2], parts[3], parts[4]))
        except ValueError:
            continue
    return sorted(events, key=lambda e: e.t)


OVERLAP_CAP = 4  # context turns beside this many others or more are counted together


def context_turns(events: list[LockEvent]) -> dict[str, list[float]]:
    """Each spare's context turn (a process's first read hold taken in step `warm`), grouped by how many other
    context turns overlapped it (0 .. OVERLAP_CAP, the last meaning "or more"): group -> [turns, median s]."""
    first: dict[int, float] = {}  # pid -> when its first warm hold began
    turns: list[tuple[float, float]] = []
    done: set[int] = set()
    for e in events:
        if e.kind != "read" or e.step != "warm" or e.pid in done:
            continue
        if e.event == "got" and e.pid not in first:
            first[e.pid] = e.t
        elif e.event == "drop" and e.pid in first:
            turns.append((first.pop(e.pid), e.t))
            done.add(e.pid)
    groups: dict[int, list[float]] = collections.defaultdict(list)
    for start, end in turns:
        beside = sum(1 for s, e in turns if s < end and e > start) - 1
        groups[min(beside, OVERLAP_CAP)].append(end - start)
    return {str(k): [float(len(groups[k])), round(statistics.median(groups[k]), 3)] for k in sorted(groups)}


RELEASE_STEP = "done.release"  # the label of a finished evaluation's last hold (pipeline.release_gpu)


Held = list[tuple[str, str, float, float]]  # holds(): (kind, the step it ended in, got, dropped)


def holds(events: list[LockEvent]) -> Held:
    """Every hold: (kind, the step it ended in, got, dropped)."""
    since: dict[tuple[int, str], float] = {}
    out = []
    for e in events:
        if e.kind not in ("read", "write"):
            continue
        if e.event == "got":
            since[(e.pid, e.kind)] = e.t
        elif e.event == "drop" and (e.pid, e.kind) in since:
            out.append((e.kind, e.step, since.pop((e.pid, e.kind)), e.t))
    return out


def _p90(ordered: list[float]) -> float:
    """The 90th percentile of sorted values (the nearest rank at or above), rounded as the tables print."""
    return round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3)


def hold_lengths(held: Held) -> dict[str, list[float]]:
    """`kind step` -> [holds, seconds in all, median s, 90th percentile s], the largest sum first."""
    lengths: dict[str, list[float]] = collections.defaultdict(list)
    for kind, step, got, dropped in held:
        lengths[f"{kind} {step}"].append(dropped - got)
    out = {}
    for key, v in sorted(lengths.items(), key=lambda kv: -sum(kv[1])):
        v.sort()
        out[key] = [float(len(v)), round(sum(v), 3), round(statistics.median(v), 3), _p90(v)]
    return out


def _context_spans(events: list[LockEvent], first: str, then: str) -> list[tuple[float, float]]:
    """Each process's span from its `first` to its next `then` event of kind context: (from, to)."""
    began: dict[int, float] = {}
    out = []
    for e in events:
        if e.kind != "context":
            continue
        if e.event == first:
            began[e.pid] = e.t
        elif e.event == then and e.pid in began:
            out.append((began.pop(e.pid), e.t))
    return out


def context_creations(events: list[LockEvent]) -> list[tuple[float, float]]:
    """Each CUDA context creation logged without a hold (`begin`/`end` of kind `context`): (began, ended)."""
    return _context_spans(events, "begin", "end")


SLOW_FIRST_TURN_S = 5.0  # a spare that waited longer for its first warm-up turn is counted apart


def spares_first_turn(events: list[LockEvent]) -> list[float]:
    """Each spare's wait from its CUDA context (`end context`) to its first warm-up turn (its first `want` in
    step `warm`): the time it yielded to announced jobs (engine/gpu/turns.py) before its warm-up could start.
    In session 34's quarter sweep spares waited 10-30 s here (a job's announcement kept too long), 0.3 s in
    session 33's; no figure showed it until jobs waited for their spares."""
    made: dict[int, float] = {}  # pid -> when its context was made, until its first turn is counted
    counted: set[int] = set()  # later warm-up turns are no first turns
    waits: list[float] = []
    for e in events:
        if e.kind == "context" and e.event == "end" and e.pid not in made and e.pid not in counted:
            made[e.pid] = e.t
        elif e.event == "want" and e.kind == "read" and e.step == "warm" and e.pid in made:
            waits.append(e.t - made.pop(e.pid))
            counted.add(e.pid)
    return waits


def first_turn_summary(waits: list[float]) -> list[float]:
    """[spares, median s, p90 s, max s, spares over SLOW_FIRST_TURN_S] of spares_first_turn's waits."""
    if not waits:
        return []
    ordered = sorted(waits)
    return [float(len(ordered)), round(statistics.median(ordered), 3), _p90(ordered), round(ordered[-1], 3),
            float(sum(w > SLOW_FIRST_TURN_S for w in ordered))]


def _overlaps(span: tuple[float, float], others: list[tuple[float, float]]) -> bool:
    return any(start < span[1] and end > span[0] for start, end in others)


def _gap_waits(events: list[LockEvent]) -> list[float]:
    """[n, median s, summed s] of the creations' waits for a gap between windows (`wait` to `begin` of kind
    context: rwlock.between_windows); [0, 0, 0] in logs from before creations waited."""
    waits = [b - a for a, b in _context_spans(events, "wait", "begin")]
    return [float(len(waits)), round(statistics.median(waits), 3) if waits else 0.0, round(sum(waits), 3)]


def creations_beside(events: list[LockEvent], held: Held) -> dict[str, list[float]]:
    """What the hold-free context creations overlapped: `creations` [n, median s]; `in_windows` [n] of them
    during a writer's wait or hold (a window or its drain); the finished evaluations' releases that overlapped
    a creation (`releases_beside` [n, median s]) and those that did not (`releases_apart`). Empty where the
    log has no creations (logs from before they were logged)."""
    made = context_creations(events)
    if not made:
        return {}
    wanted: dict[int, float] = {}
    writing: list[tuple[float, float]] = []  # each writer's want -> drop
    for e in events:
        if e.kind != "write":
            continue
        if e.event == "want":
            wanted[e.pid] = e.t
        elif e.event in ("drop", "gave_up") and e.pid in wanted:
            writing.append((wanted.pop(e.pid), e.t))
    releases = [(got, dropped) for kind, step, got, dropped in held if kind == "read" and step == RELEASE_STEP]
    beside = [b - a for a, b in releases if _overlaps((a, b), made)]
    apart = [b - a for a, b in releases if not _overlaps((a, b), made)]

    def summary(v: list[float]) -> list[float]:
        return [float(len(v)), round(statistics.median(v), 3) if v else 0.0]

    return {"creations": summary([b - a for a, b in made]),
            "in_windows": [float(sum(_overlaps(c, writing) for c in made))],
            "gap_waits": _gap_waits(events),
            "releases_beside": summary(beside), "releases_apart": summary(apart)}


def timeline(events: list[LockEvent]) -> dict[str, object]:
    """The split of the wall (seconds), the reader steps that drained longest, readers' waits."""
    split = collections.Counter()
    sole_drain: collections.Counter[str] = collections.Counter()  # a drain's sole holder's step -> seconds
    readers: dict[int, float] = {}  # pid -> since when it holds
    writers: dict[int, float] = {}
    wanting: dict[int, tuple[str, float]] = {}  # pid -> (kind, since when it waits)
    reader_wait = collections.Counter()  # "behind_writer" (a writer held or drained) / "other"
    pending_sole: dict[int, float] = {}  # reader pid -> seconds it was the sole holder during drains (not yet dropped)
    # each writer's whole wait, by the step of the last reader that let the GPU go during it (the one it waited
    # for last): "(a writer)" where no reader did (it waited behind another window)
    last_holder: collections.Counter[str] = collections.Counter()
    last_holder_n: collections.Counter[str] = collections.Counter()
    last_read_drop: tuple[float, str] = (float("-inf"), "")
    if not events:
        return {"wall_s": 0.0, "split_s": {}, "sole_drain_s": {}, "reader_wait_s": {}, "windows": 0,
                "last_holder_s": {}, "last_holder_n": {}, "context_turns": {}, "hold_lengths": {}, "creations": {},
                "spares_first_turn": []}
    windows = 0
    last = events[0].t
    for e in events:
        span = e.t - last
        if span > 0:
            writer_waits = any(kind == "write" for kind, _ in wanting.values())
            readers_wait = sum(1 for kind, _ in wanting.values() if kind == "read")
            if writers:
                state = "exclusive"
            elif writer_waits and readers:
                state = "drain"
            elif writer_waits:
                state = "handover"
            elif readers:
                state = "shared"
            else:
                state = "idle"
            split[state] += span
            if state == "drain" and len(readers) == 1:
                (pid,) = readers
                pending_sole[pid] = pending_sole.get(pid, 0.0) + span
            key = "behind_writer" if state in ("exclusive", "drain", "handover") else "other"
            reader_wait[key] += span * readers_wait
        last = e.t
        if e.event == "want":
            wanting[e.pid] = (e.kind, e.t)
        elif e.event == "gave_up":
            wanting.pop(e.pid, None)
        elif e.event == "got":
            _, since = wanting.pop(e.pid, (e.kind, e.t))
            (writers if e.kind == "write" else readers)[e.pid] = e.t
            windows += e.kind == "write"
            if e.kind == "write":
                step = last_read_drop[1] if last_read_drop[0] >= since else "(a writer)"
                last_holder[step] += e.t - since
                last_holder_n[step] += 1
        elif e.event == "drop":
            (writers if e.kind == "write" else readers).pop(e.pid, None)
            if e.kind == "read":
                last_read_drop = (e.t, e.step)
            if e.kind == "read" and e.pid in pending_sole:
                sole_drain[e.step] += pending_sole.pop(e.pid)
    wall = events[-1].t - events[0].t
    held = holds(events)
    return {"wall_s": round(wall, 3), "split_s": {k: round(v, 3) for k, v in split.most_common()},
            "sole_drain_s": {k: round(v, 3) for k, v in sole_drain.most_common()},
            "reader_wait_s": {k: round(v, 3) for k, v in reader_wait.items()}, "windows": windows,
            "last_holder_s": {k: round(v, 3) for k, v in last_holder.most_common()},
            "last_holder_n": dict(last_holder_n), "context_turns": context_turns(events),
            "hold_lengths": hold_lengths(held), "creations": creations_beside(events, held),
            "spares_first_turn": first_turn_summary(spares_first_turn(events))}


def format_timeline(t: dict[str, object], top: int = 12) -> str:
    wall = float(t["wall_s"]) or 1.0  # type: ignore[arg-type]
    lines = [f"lock timeline: {t['wall_s']} s, {t['windows']} exclusive holds",
             "| state | seconds | share of the wall |", "| --- | --- | --- |"]
    for state, s in t["split_s"].items():  # type: ignore[union-attr]
        lines.append(f"| {state} | {s:.1f} | {100 * s / wall:.1f} % |")
    lines += ["", "| reader step that alone held a writer back | seconds |", "| --- | --- |"]
    for step, s in list(t["sole_drain_s"].items())[:top]:  # type: ignore[union-attr]
        lines.append(f"| {step} | {s:.1f} |")
    lines += ["", "| the last reader a window waited for, by its step | windows | their waits, s |", "| --- | --- | --- |"]
    counts = t.get("last_holder_n") or {}
    for step, s in list((t.get("last_holder_s") or {}).items())[:top]:  # type: ignore[union-attr]
        lines.append(f"| {step} | {counts.get(step, 0)} | {s:.1f} |")  # type: ignore[union-attr]
    turns = t.get("context_turns") or {}
    if turns:
        lines += ["", "| spares' context turns, by how many others overlapped each | turns | median s |",
                  "| --- | --- | --- |"]
        for k, (n, median) in turns.items():  # type: ignore[union-attr]
            label = f"{k} or more" if int(k) == OVERLAP_CAP else k
            lines.append(f"| {label} | {int(n)} | {median:.2f} |")
    lengths = t.get("hold_lengths") or {}
    if lengths:
        lines += ["", "| holds, by the step they ended in | holds | seconds | median s | p90 s |",
                  "| --- | --- | --- | --- | --- |"]
        for key, (n, total, median, p90) in list(lengths.items())[:top]:  # type: ignore[union-attr]
            lines.append(f"| {key} | {int(n)} | {total:.1f} | {median:.3f} | {p90:.3f} |")
    made = t.get("creations") or {}
    if made:
        (n, median), (inside,) = made["creations"], made["in_windows"]  # type: ignore[index]
        (nb, mb), (na, ma) = made["releases_beside"], made["releases_apart"]  # type: ignore[index]
        gaps = made.get("gap_waits") or [0.0, 0.0, 0.0]  # type: ignore[union-attr]
        lines += ["", f"context creations (no hold): {int(n)}, median {median:.2f} s; {int(inside)} during a window "
                      f"or its drain; {int(gaps[0])} waited for a gap between windows (median {gaps[1]:.2f} s, "
                      f"{gaps[2]:.1f} s in all)", f"finished evaluations' releases beside a creation: {int(nb)}, median "
                      f"{mb:.3f} s; apart from any: {int(na)}, median {ma:.3f} s"]
    first = t.get("spares_first_turn") or []
    if first:
        n, median, p90, longest, slow = first  # type: ignore[misc]
        lines += ["", f"spares' wait from their context to their first warm-up turn: {int(n)} spares, median "
                      f"{median:.2f} s, p90 {p90:.2f} s, max {longest:.2f} s, {int(slow)} over {SLOW_FIRST_TURN_S:g} s"]
    waits = t["reader_wait_s"]
    lines += ["", f"readers waited {waits.get('behind_writer', 0.0):.1f} s (summed over readers) while a writer held, "  # type: ignore[union-attr]
                  f"drained or took the GPU, {waits.get('other', 0.0):.1f} s otherwise"]  # type: ignore[union-attr]
    return "\n".join(lines)


BRIEF_LABEL = "in brief: "  # the full timeline's last line: the brief line after this label


def brief(t: dict[str, object]) -> str:
    """One line for a run's table of key figures (bench/gpu_check.sh): the drain and the windows' own time,
    the finished evaluations' median release hold, and how many context creations came during a window."""
    split = t.get("split_s") or {}
    line = (f"drain {split.get('drain', 0.0):.1f} s, exclusive {split.get('exclusive', 0.0):.1f} s "  # type: ignore[union-attr]
            f"of {float(t['wall_s']):.1f} s")  # type: ignore[arg-type]
    release = (t.get("hold_lengths") or {}).get(f"read {RELEASE_STEP}")  # type: ignore[union-attr]
    if release:
        line += f"; releases {release[2]:.2f} s median"
    made = t.get("creations") or {}
    if made:
        line += f"; {int(made['in_windows'][0])} of {int(made['creations'][0])} context creations in a window"  # type: ignore[index]
    first = t.get("spares_first_turn") or []
    if first:
        line += f"; spares' first turn p90 {first[2]:.2f} s"  # type: ignore[index]
    return line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", help="the lock log (CUDAFORGE_LOCK_LOG of the run)")
    ap.add_argument("--json", help="write the figures here too")
    ap.add_argument("--top", type=int, default=12, help="how many reader steps to list")
    ap.add_argument("--brief", action="store_true", help="print one line of key figures only")
    args = ap.parse_args(argv)
    path = Path(args.log)
    if not path.is_file():
        print(f"lock_timeline: {path}: no such file (was CUDAFORGE_LOCK_LOG set for the run?)", file=sys.stderr)
        return 2
    events = read_log(path)
    if not events:  # all zeros would read as a sweep with no drain
        print(f"lock_timeline: {path}: no lock events (expected lines 'time pid event kind step')", file=sys.stderr)
        return 2
    t = timeline(events)
    # The full timeline ends with the brief line too, so bench/gpu_check.sh reads the log once for both.
    print(brief(t) if args.brief else f"{format_timeline(t, args.top)}\n\n{BRIEF_LABEL}{brief(t)}")
    if args.json:
        Path(args.json).write_text(json.dumps(t, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
