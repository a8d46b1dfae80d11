"""KernelBench at its real scale: evaluate every problem with its own reference as the candidate.

Each problem's `Model`, renamed `ModelNew`, is the candidate. The expected verdict: correct, then not
accepted for `no_custom_kernel` (PyTorch did the work). Runs through the Evaluator with pre-warmed
spares and `--jobs` evaluations in flight (their builds overlap; the GPU work is serialized by the
per-GPU lock). Writes one row per problem as it finishes (stdout and `--rows`, flushed), then a table
per level: counts, the memory bound (evaluation peak - 1 GiB <= 1.25 x the reference's own peak,
engine/worker/memory.py), problems whose estimate fell below the measured peak, and evaluations per
minute. Each row has the estimate beside the peak, and the exclusive seconds (timed windows: the
`timing` phase, ncu's `profile`) beside the shared ones (every other phase the worker records, waits
and sub-phases left out). `--jobs` defaults to what the card's memory admits: the most evaluations
(at most MAX_JOBS) whose largest estimates fit the card's free memory together.

    python bench/kernelbench_sweep.py --levels 1 --jobs 4 --json out/level1.json
    python bench/kernelbench_sweep.py --levels 1 --gpu-memory-gb 24
    python bench/kernelbench_sweep.py --device cpu --list bench/kernelbench_cpu20.txt   # the CI subset
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import re
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudaforge.engine.worker.gpu_share import HOLD_TOTALS  # the worker's lock-hold totals, not phases
from cudaforge.engine.worker.memory import FACTOR

REPO = Path(__file__).resolve().parents[1]
DEFAULT_FOLDER = REPO.parent / "shared" / "kernelbench"
GIB = 1 << 30

# Few timed calls: the sweep checks verdicts and memory, it does not rank speed.
FAST_TIMING = {"warmup": 2, "warmup_ms": 0.0, "trials": 5, "min_time_ms": 0.0, "max_trials": 10, "host_trials": 3,
               "l2_flush": True, "baselines": ["eager"]}


def reference_as_candidate(source: str) -> str:
    """The problem's own reference, its class (and every use of the name) renamed ModelNew."""
    return re.sub(r"\bModel\b", "ModelNew", source)


def problems(folder: Path, levels: list[int], list_file: Path | None) -> list[Path]:
    if list_file is not None:
        names = [ln.split("#")[0].strip() for ln in list_file.read_text().splitlines()]
        return [folder / n for n in names if n]
    out: list[Path] = []
    for level in levels:
        files = sorted((folder / f"level{level}").glob("*.py"), key=lambda p: (int(p.stem.split("_")[0]), p.name))
        out += files
    return out


def name_of(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def longest_first(paths: list[Path], row_files: list[Path]) -> list[Path]:
    """`paths` in the order of their evaluation walls in earlier sweeps' rows (`--rows` files), the longest
    first, so the sweep does not end on one slot still running a long problem while the others idle (on the
    H200, level 1's longest took 120 s, its median 22 s). Problems no row names go first (their cost is
    unknown), in their own order; the order of equal walls is kept. A row's wall leaves out its spare wait."""
    walls: dict[str, float] = {}
    for f in row_files:
        for line in f.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError, AttributeError):
                row = json.loads(line)
                walls[row["problem"]] = float(row["wall_s"]) - float((row.get("phases") or {}).get("spare_wait", 0.0))
    return sorted(paths, key=lambda p: -walls.get(name_of(p), float("inf")))


def expected_verdict(result: Any) -> bool:
    """Correct, and not accepted because no custom kernel ran (the reference is plain PyTorch)."""
    correct = result.correctness is not None and result.correctness.passed
    failing = {f.name for f in result.findings if f.severity == "fail"}
    return bool(correct and not result.accepted and "no_custom_kernel" in failing)


# The worker's phases (engine/worker/pipeline.py): the checks before timing, and all it does under the GPU lock.
CHECK_PHASES = ("place", "reference", "correctness", "kernels", "fallback", "cache_probes", "shapes")
GPU_PHASES = (*CHECK_PHASES, "timing")
EXCLUSIVE_PHASES = ("timing", "profile")  # the phases that hold the GPU alone (a timed window, an ncu replay)
# Parts of the timing phase made side by side, before its window (draws, the timed check's expected outputs).
SHARED_PARTS = ("timing.draws", "timing.expected")
MAX_JOBS = 8


def exclusive_and_shared(phases: dict[str, float]) -> tuple[float, float]:
    """Seconds the evaluation held the GPU alone, and side by side. On a GPU these are the lock's own hold
    totals (HOLD_TOTALS: gpu_exclusive, gpu_shared), as the worker measured them. Where no lock is held (the
    CPU device), from the phases: the exclusive phases less their parts made before the window
    (SHARED_PARTS), and the rest; waits (`*_wait`) and other sub-phases (`phase.part`, already inside
    their phase) count in neither."""
    if "gpu_exclusive" in phases:
        return round(phases["gpu_exclusive"], 3), round(phases.get("gpu_shared", 0.0), 3)
    before_window = sum(phases.get(k, 0.0) for k in SHARED_PARTS)
    exclusive = sum(v for k, v in phases.items() if k in EXCLUSIVE_PHASES) - before_window
    shared = before_window + sum(v for k, v in phases.items()
                                 if k not in EXCLUSIVE_PHASES and k not in HOLD_TOTALS and "." not in k
                                 and not k.endswith("_wait"))
    return round(max(exclusive, 0.0), 3), round(shared, 3)


def row_of(path: Path, result: Any, wall_s: float) -> dict[str, Any]:
    m = result.memory
    ref = m.reference_peak_bytes if m else None
    peak = m.eval_peak_bytes if m else None
    bound_ok = None
    if ref and peak is not None:
        bound_ok = peak - GIB <= FACTOR * ref
    estimate = m.needed_bytes if m else None
    reserved = m.reserved_bytes if m else None
    phases = result.phases or {}
    exclusive_s, shared_s = exclusive_and_shared(phases)
    return {
        "problem": name_of(path), "level": path.parent.name, "outcome": result.outcome,
        "correct": bool(result.correctness is not None and result.correctness.passed),
        "expected": expected_verdict(result),
        "does_not_fit": bool(m is not None and m.fits is False),
        "reference_peak_gib": round(ref / GIB, 3) if ref else None,
        "eval_peak_gib": round(peak / GIB, 3) if peak is not None else None,
        "estimate_gib": round(estimate / GIB, 3) if estimate else None,
        "estimate_ok": None if not estimate or peak is None else estimate >= peak,
        # what the worker held in the card's ledger at the end (the estimate, grown after the reference)
        "reserved_gib": round(reserved / GIB, 3) if reserved else None,
        "reserved_ok": None if not reserved or peak is None else reserved >= peak,
        "process_peak_gib": round(m.process_peak_bytes / GIB, 3) if m and m.process_peak_bytes else None,
        # parked outputs' compared slices: read from their device heads, copied over from the host
        "compared_on_device_gib": round(m.compared_on_device_bytes / GIB, 3) if m and m.compared_on_device_bytes else 0.0,
        "compared_from_host_gib": round(m.compared_from_host_bytes / GIB, 3) if m and m.compared_from_host_bytes else 0.0,
        "ratio": m.ratio if m else None, "bound_ok": bound_ok,
        "footprint_gib": round(m.footprint_bytes / GIB, 3) if m and m.footprint_bytes is not None else None,
        "load_s": round(sum(phases.get(k, 0.0) for k in ("start", "load_task", "build", "init")), 3),
        "gpu_wait_s": round(phases.get("gpu_wait", 0.0), 3),
        "correctness_s": round(sum(phases.get(k, 0.0) for k in CHECK_PHASES), 3),
        "timing_s": round(phases.get("timing", 0.0), 3),
        "gpu_s": round(sum(phases.get(k, 0.0) for k in GPU_PHASES), 3),
        # the exclusive phases (timed windows, ncu) and the rest, as the module says; the lock's own
        # hold totals (gpu_exclusive / gpu_shared, GPU only) stay in "phases"
        "exclusive_s": exclusive_s, "shared_s": shared_s,
        "wall_s": round(wall_s, 3),
        "message": "" if expected_verdict(result) else result.message[:300],
        # where an unexpected verdict came from (a device call's rows are all there is to read afterwards)
        "traceback": "" if expected_verdict(result) else "\n".join((result.traceback or "").splitlines()[-16:]),
        "phases": {k: round(v, 3) for k, v in phases.items()},
        # which step set the peak (the worker's phases, each from its own start)
        "phase_peak_gib": {k: round(v / GIB, 3) for k, v in (m.phase_peak_bytes if m else {}).items()},
        "timing": timing_record(result.timing),
    }


def timing_record(timing: Any) -> dict[str, Any] | None:
    """What made a problem's timed window as long as it was: how many times it was measured (a noisy window is
    measured again), the timed calls per side, the medians, the share of late launches and the timing
    thread's host load (CPU time against the wall and of it in the kernel, the allocator's device maps in the
    window, preemptions, the hypervisor's steal, per-call host medians). The exclusive seconds
    of the host-bound level-3 RNNs doubled between session 18 and 22; these say whether from re-measuring or
    from a slower host."""
    if timing is None:
        return None
    load = timing.settings.get("host_load") or {}
    return {
        "measurements": timing.measurements,
        "trials": timing.candidate.trials,
        "reference_ms": round(timing.reference.median_ms, 4), "candidate_ms": round(timing.candidate.median_ms, 4),
        "late_launches": timing.settings.get("late_launches") or {},
        # per side, the launch cover's spins summed (ms): what it added to the window (timing.LaunchCover)
        "launch_cover_ms": timing.settings.get("launch_cover_total_ms") or {},
        "host_load": {k: load[k] for k in ("wall_s", "cpu_s", "system_s", "device_maps", "involuntary_switches",
                                           "runnable", "steal_s", "iteration_us") if k in load},
    }


def failed_row(path: Path, message: str, wall_s: float) -> dict[str, Any]:
    """A problem the sweep could not even submit (the app-side task check refused it)."""
    return {"problem": name_of(path), "level": path.parent.name, "outcome": "task_error", "correct": False,
            "expected": False, "does_not_fit": False, "reference_peak_gib": None, "eval_peak_gib": None,
            "estimate_gib": None, "estimate_ok": None, "reserved_gib": None, "reserved_ok": None,
            "process_peak_gib": None, "compared_on_device_gib": 0.0, "compared_from_host_gib": 0.0,
            "ratio": None, "bound_ok": None, "footprint_gib": None, "load_s": 0.0, "gpu_wait_s": 0.0,
            "correctness_s": 0.0, "timing_s": 0.0, "gpu_s": 0.0, "exclusive_s": 0.0, "shared_s": 0.0,
            "wall_s": round(wall_s, 3), "message": message[:300], "traceback": "", "phases": {}, "phase_peak_gib": {}}


def format_row(r: dict[str, Any]) -> str:
    def g(v: Any) -> str:
        return "-" if v is None else f"{v:.2f}"

    verdict = "ok  " if r["expected"] else ("SKIP" if r["does_not_fit"] else "MISS")
    return (f"{verdict} {r['problem'][:44]:44s} {r['outcome']:17s} correct={'y' if r['correct'] else 'n'} "
            f"ref {g(r['reference_peak_gib']):>6s} GiB  peak {g(r['eval_peak_gib']):>6s} GiB"
            f"{'' if r['estimate_ok'] is not False else ' !'} est {g(r['estimate_gib']):>6s} GiB"
            f"{'' if r.get('reserved_ok') is not False else ' !'} reserved {g(r.get('reserved_gib')):>6s} GiB"
            f"  ratio {g(r['ratio']):>5s}"
            f"  load {r['load_s']:.1f}s checks {r['correctness_s']:.1f}s time {r['timing_s']:.1f}s gpu {r['gpu_s']:.1f}s"
            f" alone {r.get('exclusive_s', 0.0):.1f}s shared {r.get('shared_s', 0.0):.1f}s"
            f" wall {r['wall_s']:.1f}s"
            + (f"  | {r['message']}" if r["message"] else ""))


SLOW_CUPTI_START_S = 0.1


def summarize(rows: list[dict[str, Any]], wall_s: float) -> dict[str, Any]:
    levels: dict[str, dict[str, Any]] = {}
    for r in rows:
        lv = levels.setdefault(r["level"], {"problems": 0, "correct": 0, "expected": 0, "does_not_fit": 0, "oom": 0,
                                            "unavailable": 0, "task_error": 0, "bound_violations": 0,
                                            "estimate_below_peak": 0, "reserved_below_peak": 0, "max_ratio": 0.0,
                                            "exclusive_s": 0.0, "shared_s": 0.0})
        lv["problems"] += 1
        lv["correct"] += r["correct"]
        lv["expected"] += r["expected"]
        lv["does_not_fit"] += r["does_not_fit"]
        lv["oom"] += r["outcome"] == "oom" and not r["does_not_fit"]
        lv["unavailable"] += r["outcome"] == "unavailable"
        lv["task_error"] += r["outcome"] == "task_error"
        lv["bound_violations"] += r["bound_ok"] is False
        lv["estimate_below_peak"] += r.get("estimate_ok") is False
        lv["reserved_below_peak"] += r.get("reserved_ok") is False
        lv["exclusive_s"] = round(lv["exclusive_s"] + r.get("exclusive_s", 0.0), 3)
        lv["shared_s"] = round(lv["shared_s"] + r.get("shared_s", 0.0), 3)
        if r["ratio"] is not None:
            lv["max_ratio"] = max(lv["max_ratio"], r["ratio"])
    phase_totals: dict[str, float] = {}
    for r in rows:
        for k, v in (r.get("phases") or {}).items():
            phase_totals[k] = round(phase_totals.get(k, 0.0) + v, 3)
    return {"levels": levels, "problems": len(rows), "wall_s": round(wall_s, 1), "phase_totals": phase_totals,
            "handed_ahead": sum(1 for r in rows if r.get("handed_ahead")),
            "memory_wait_s": round(sum((r.get("phases") or {}).get("memory_wait", 0.0) for r in rows), 1),
            "launch_cover_s": round(sum(sum(((r.get("timing") or {}).get("launch_cover_ms") or {}).values())
                                        for r in rows) / 1e3, 2),
            # CUPTI's start, held alone, ran 9 ms a window alone and 58 ms beside another process's context
            # creation (H200, session 39): the windows where it ran over SLOW_CUPTI_START_S are counted
            "slow_cupti_starts": sum(1 for r in rows
                                     if (r.get("phases") or {}).get("timing.cupti_start", 0.0) > SLOW_CUPTI_START_S),
            "compared_on_device_gib": round(sum(r.get("compared_on_device_gib") or 0.0 for r in rows), 1),
            "compared_from_host_gib": round(sum(r.get("compared_from_host_gib") or 0.0 for r in rows), 1),
            "evaluations_per_minute": round(len(rows) / wall_s * 60, 2) if wall_s > 0 else None}


def format_summary(summary: dict[str, Any]) -> str:
    lines = [f"{'level':8s} {'problems':>8s} {'correct':>8s} {'expected':>8s} {'no-fit':>7s} {'oom':>4s} "
             f"{'unavail':>7s} {'task_err':>8s} {f'bound>{FACTOR:g}x':>9s} {'est<peak':>8s} {'rsv<peak':>8s} {'max ratio':>9s} "
             f"{'excl s':>8s} {'shared s':>8s}"]
    for name, lv in sorted(summary["levels"].items()):
        lines.append(f"{name:8s} {lv['problems']:8d} {lv['correct']:8d} {lv['expected']:8d} {lv['does_not_fit']:7d} "
                     f"{lv['oom']:4d} {lv['unavailable']:7d} {lv['task_error']:8d} {lv['bound_violations']:9d} "
                     f"{lv['estimate_below_peak']:8d} {lv.get('reserved_below_peak', 0):8d} {lv['max_ratio']:9.2f} "
                     f"{lv['exclusive_s']:8.1f} "
                     f"{lv['shared_s']:8.1f}")
    lines.append(f"{summary['problems']} problems in {summary['wall_s']:.1f} s wall: "
                 f"{summary['evaluations_per_minute']} evaluations/minute")
    if summary.get("memory_wait_s") or summary.get("handed_ahead"):
        lines.append(f"waiting for memory: {summary.get('memory_wait_s', 0.0):.1f} s summed; "
                     f"{summary.get('handed_ahead', 0)} problems went ahead of a larger one that did not fit then")
    if summary.get("launch_cover_s"):
        lines.append(f"launch cover: {summary['launch_cover_s']:.2f} s of spins in the timed windows, summed")
    parts = summary.get("phase_totals") or {}
    if "timing.events" in parts:  # the timed windows' own parts, each held alone
        lines.append(f"inside the timed windows, summed: events {parts.get('timing.events', 0.0):.1f} s, CUPTI start "
                     f"{parts.get('timing.cupti_start', 0.0):.1f} s ({summary.get('slow_cupti_starts', 0)} windows over "
                     f"{SLOW_CUPTI_START_S * 1e3:.0f} ms), host-timed calls {parts.get('timing.host_calls', 0.0):.1f} s")
    if summary.get("compared_on_device_gib") or summary.get("compared_from_host_gib"):
        lines.append(f"parked outputs' compares: {summary.get('compared_on_device_gib', 0.0):.1f} GiB read from their "
                     f"device heads, {summary.get('compared_from_host_gib', 0.0):.1f} GiB copied over from the host")
    totals = sorted((summary.get("phase_totals") or {}).items(), key=lambda kv: -kv[1])
    if totals:  # where the workers' seconds went, summed over all problems (under the GPU lock or not)
        lines.append("phase seconds, all problems: " + ", ".join(f"{k} {v:.1f}" for k, v in totals[:12]))
    return "\n".join(lines)


class ProblemQueue:
    """The problems in their sweep order (longest first), each handed to the next free slot: the first one
    whose memory estimate fits what our evaluations have not reserved yet, among the next `lookahead`, else
    the first counted one further on that fits, else the first. Longest first put the largest level-1
    problems side by side at the start, and three of them waited 28-38 s for memory while their slots did
    nothing (memory_wait 171 s summed, H200 session 16). The next 16 were still all large ones at the start:
    the H200 sweeps of sessions 18 and 22 ran 6 evaluations, not 8, for their first 45 s, the other two
    slots waiting for memory, so a slot looks further on, among the problems already counted.

    `estimate_of(path)` is the problem's reservation where it is counted already (None: unknown, it fits);
    `budget` the bytes our evaluations may reserve together (None: no memory to mind, the CPU device). A
    problem handed out counts its estimate until `done(path)`, since its worker reserves only after its
    build; `take(reserved_now)` also counts what the GPU's ledger holds (grown reservations included)."""

    def __init__(self, paths: list[Path], estimate_of: Callable[[Path], int | None], budget: int | None,
                 lookahead: int = 16, look_further: bool = True) -> None:
        self.paths, self.estimate_of, self.budget, self.lookahead = list(paths), estimate_of, budget, lookahead
        self.look_further = look_further  # False: past the lookahead, the first in order (before session 23)
        self.in_flight: dict[Path, int] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def take(self, reserved_now: int = 0) -> tuple[Path, int] | None:
        """The next problem and how many it was handed out ahead of (0: in its turn); None when none is left."""
        if not self.paths:
            return None
        pick = 0
        if self.budget is not None:
            free = self.budget - max(sum(self.in_flight.values()), reserved_now)
            fits = (k for k, path in enumerate(self.paths[:self.lookahead])
                    if (need := self.estimate_of(path)) is None or need <= free)
            # further on, only a counted one: an unknown one there may be as large as those it would pass
            further = (k for k, path in enumerate(self.paths[self.lookahead:], start=self.lookahead)
                       if (need := self.estimate_of(path)) is not None and need <= free)
            pick = next(fits, None)
            if pick is None:
                pick = next(further, 0) if self.look_further else 0
        path = self.paths.pop(pick)
        self.in_flight[path] = self.estimate_of(path) or 0
        return path, pick

    def done(self, path: Path) -> None:
        self.in_flight.pop(path, None)


def count_order(paths: list[Path]) -> list[Path]:
    """The order the counter counts the problems in: from both ends of the sweep's order in turn (the largest,
    the smallest, the next largest, ...), so the first slots know both the problems they would take in order
    and the small ones that fit beside them."""
    order: list[Path] = []
    low, high = 0, len(paths) - 1
    while low <= high:
        order.append(paths[low])
        if high != low:
            order.append(paths[high])
        low, high = low + 1, high - 1
    return order


async def memory_budget(options: Any, jobs: int, spares_per_slot: int) -> int | None:
    """What our evaluations may reserve together on the card (None off CUDA, or where nvidia-smi cannot say):
    its free memory now less a CUDA context for each of our processes to come (every slot's worker and
    spares), as the workers' own budget counts them (pipeline._budget)."""
    if options.device != "cuda":
        return None
    from cudaforge.engine.evaluation.fit import card_free_bytes
    from cudaforge.engine.gpu.lock import CONTEXT_BYTES

    free = await asyncio.to_thread(card_free_bytes, options.gpu)
    return None if free is None else free - CONTEXT_BYTES * jobs * (1 + spares_per_slot)


async def sweep(paths: list[Path], options: Any, jobs: int, rows_path: Path | None, quiet: bool = False,
                spares_per_slot: int | None = None, give_up_after: int = 0,
                count_ahead: bool = True, look_further: bool = True) -> list[dict[str, Any]]:
    """Every problem through `jobs` slots side by side. A slot's evaluator keeps `spares_per_slot` spare
    workers warming (`[eval] spares`; on a GPU: interpreter, torch, CUDA context, CUPTI; about 8-10 s on
    the H200) and hands out the oldest: with one, an evaluation shorter than a warm-up waited for the next
    spare (`spare_wait` about 8 s a problem in session 8's capped shard); with two, each spare has two
    evaluations' time to get ready. Default: two on a GPU, one on the CPU device (where a spare importing
    torch beside a host-timed evaluation disturbs it). `give_up_after` N > 0: when the first N rows are all
    unexpected, no slot takes another problem (a broken build must not spend a whole device call).
    `count_ahead`: the problems' footprints and work are counted in one process ahead of the slots
    (fit.TaskCounter) and handed to their jobs, so no spare imports what counting needs (torch._dynamo:
    about half of a spare's warm-up CPU); else each worker counts its own problem."""
    if spares_per_slot is None:
        spares_per_slot = 2 if options.device == "cuda" else 1
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.evaluation.fit import TaskCounter
    from cudaforge.engine.gpu.ledger import reserved_bytes
    from cudaforge.engine.gpu.lock import gpu_lock_path
    from cudaforge.engine.task import load_task
    from cudaforge.engine.worker.memory import estimate_bytes

    counter = None
    # The first hand-outs plan with counts (a few ms each once the counter has imported): the largest problems
    # and the smallest, which fill the slots the largest leave no memory for (count_order).
    counted_first: list[Path] = []
    if count_ahead:
        counter = TaskCounter(python=options.python, precision=options.precision,
                              seed=options.seed if options.seed is not None else 42)
        order = count_order(list(paths)) if look_further else list(paths)
        counter.ahead(order)
        counted_first = order[:2 * max(1, jobs)] if look_further else []
    cap = int(options.gpu_memory_gb * GIB) if options.gpu_memory_gb else None

    def estimate_of(path: Path) -> int | None:
        counts = counter.counted(path) if counter is not None else None
        if counts is None or "footprint_bytes" not in counts.footprint:
            return None
        need = estimate_bytes(int(counts.footprint["footprint_bytes"]), cap)
        return min(need, cap) if cap else need

    queue = ProblemQueue(paths, estimate_of, await memory_budget(options, jobs, spares_per_slot),
                         look_further=look_further)
    lock_path = gpu_lock_path(options.gpu) if queue.budget is not None else None
    rows: list[dict[str, Any]] = []
    out = rows_path.open("a", encoding="utf-8") if rows_path else None

    def gave_up() -> bool:
        first = rows[:give_up_after]
        return give_up_after > 0 and len(first) == give_up_after and not any(r["expected"] for r in first)

    async def slot() -> None:
        evaluator = Evaluator(dataclasses.replace(options, spares=max(1, spares_per_slot)))
        if counter is not None:
            evaluator.expect_task_counts()
        # Every slot's first spares at once: forked from the zygote once it has imported, not each importing
        # torch beside the others (Evaluator.zygote_ready); all slots share that one zygote.
        await evaluator.zygote_ready()
        evaluator.prewarm()
        try:
            if counter is not None and queue.budget is not None:
                for path in counted_first:
                    await counter.counts_of(path)
            while queue and not gave_up():
                # the GPU's ledger is read off the event loop; the queue itself only on it
                held = await asyncio.to_thread(reserved_bytes, lock_path) if lock_path is not None else 0
                taken = queue.take(held)
                if taken is None:
                    break
                path, ahead = taken
                start = time.perf_counter()
                counts_wait = 0.0
                try:
                    task = load_task(path)
                    if counter is not None:
                        counted = time.perf_counter()
                        counts = await counter.counts_of(path)
                        counts_wait = time.perf_counter() - counted
                        if counts is not None:
                            evaluator.use_task_counts(task, counts)
                    cand = Candidate(source=reference_as_candidate(task.source), format="python")
                    running = asyncio.ensure_future(evaluator.evaluate(task, cand, use_cache=False))
                    await asyncio.sleep(0.05)  # the job has taken the spare: warm the next one meanwhile
                    evaluator.prewarm()
                    result = await running
                    row = row_of(path, result, time.perf_counter() - start)
                except Exception as exc:  # one problem must not end the sweep
                    row = failed_row(path, f"{type(exc).__name__}: {exc}", time.perf_counter() - start)
                queue.done(path)
                row["counts_wait_s"] = round(counts_wait, 3)  # waiting for the counter (count_ahead)
                row["handed_ahead"] = ahead  # problems it went before: they did not fit in memory then
                rows.append(row)
                if not quiet:
                    print(format_row(row), flush=True)
                if out is not None:
                    out.write(json.dumps(row) + "\n")
                    out.flush()
        finally:
            await evaluator.aclose()

    try:
        await asyncio.gather(*(slot() for _ in range(max(1, jobs))))
    finally:
        if counter is not None:
            await counter.aclose()
        if out is not None:
            out.close()
    return rows


async def default_jobs(paths: list[Path], options: Any) -> int:
    """What the card's memory admits: the most evaluations (at most MAX_JOBS) whose largest estimates
    (memory.estimate_bytes of each problem's meta footprint, under the cap) fit its free memory together.
    The CPU device, or a card nvidia-smi cannot read: MAX_JOBS // 2."""
    import os

    from cudaforge.engine.evaluation.fit import card_free_bytes, task_footprint
    from cudaforge.engine.worker.memory import estimate_bytes

    free = card_free_bytes(options.gpu) if options.device == "cuda" else None
    if free is None:
        return MAX_JOBS // 2
    cap = int(options.gpu_memory_gb * GIB) if options.gpu_memory_gb else None
    gate = asyncio.Semaphore(os.cpu_count() or 4)

    async def estimate(path: Path) -> int:
        async with gate:
            fp = await task_footprint(path, python=options.python, precision=options.precision)
        footprint = int(fp.get("footprint_bytes", 0))
        need = estimate_bytes(footprint, cap)
        return min(need, cap) if cap else need

    needs = sorted(await asyncio.gather(*(estimate(p) for p in paths)), reverse=True)
    jobs, total = 0, 0
    for need in needs[:MAX_JOBS]:
        if total + need > free:
            break
        jobs, total = jobs + 1, total + need
    print(f"--jobs {max(1, jobs)}: the {max(1, jobs)} largest estimates take {total / GIB:.1f} GiB of "
          f"{free / GIB:.1f} GiB free", file=sys.stderr, flush=True)
    return max(1, jobs)


def make_options(device: str, gpu: int, gpu_memory_gb: float | None, trials: int, cache_dir: Path | None) -> Any:
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    opts = EvalOptions(device=device, gpu=gpu, trials=trials, timing=dict(FAST_TIMING), gpu_memory_gb=gpu_memory_gb)
    if device == "cuda":
        try:
            from cudaforge.engine.gpu.specs import gpu_spec_for_device

            prof = gpu_spec_for_device(gpu)
            bandwidth = getattr(prof, "dram_bandwidth_gbs", None) if prof else None
            if bandwidth:
                opts = replace(opts, peak_bandwidth_gbs=float(bandwidth))
        except Exception:  # the speed-of-light check is optional here
            pass
    if cache_dir is not None:
        opts = replace(opts, cache_dir=cache_dir)
    return opts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", nargs="?", default=str(DEFAULT_FOLDER), help="KernelBench problems (level1..3)")
    ap.add_argument("--levels", default="1,2,3", help="comma-separated levels (default 1,2,3)")
    ap.add_argument("--list", dest="list_file", help="file of problem paths relative to the folder (one a line)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--gpu", type=int, default=0)
    ap.add_argument("--gpu-memory-gb", type=float, help="cap each worker's device memory (emulate a smaller card)")
    ap.add_argument("--jobs", type=int, help="evaluations in flight (default: what the card's memory admits, at "
                    f"most {MAX_JOBS}; builds overlap)")
    ap.add_argument("--trials", type=int, default=3, help="correctness trials per problem (+ the shifted one)")
    ap.add_argument("--spares-per-slot", type=int,
                    help="spare workers warming per slot (each evaluation takes one; default 2 on a GPU, 1 on the CPU)")
    ap.add_argument("--shard", default="1/1", metavar="K/N", help="only every N-th problem, starting at the K-th")
    ap.add_argument("--json", help="write rows and summary as one JSON document here")
    ap.add_argument("--rows", help="append one JSON line per problem here as it finishes")
    ap.add_argument("--cache-dir", help="the Evaluator's cache folder")
    ap.add_argument("--order-from", nargs="*", default=[], metavar="ROWS",
                    help="earlier sweeps' --rows files: run the problems longest first by their walls there")
    ap.add_argument("--count-in-workers", action="store_true",
                    help="let each worker count its own problem's footprint and work (default: one process counts "
                         "them all ahead, and spares start without what counting needs)")
    ap.add_argument("--give-up-after", type=int, default=0, metavar="N",
                    help="stop taking problems when the first N rows are all unexpected (0: never)")
    ap.add_argument("--no-look-further", dest="look_further", action="store_false",
                    help="where none of the next 16 problems fits in memory, take the next anyway (it waits in its "
                         "worker), as before session 23, instead of a smaller counted one further on")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    if not folder.is_dir():
        print(f"kernelbench_sweep: {folder} is absent; nothing to sweep (see ../shared/kernelbench/README.md)",
              file=sys.stderr)
        return 3
    levels = [int(x) for x in args.levels.split(",") if x.strip()]
    paths = problems(folder, levels, Path(args.list_file) if args.list_file else None)
    k, n = (int(x) for x in args.shard.split("/"))
    paths = paths[k - 1::n]
    missing = [f for f in args.order_from if not Path(f).is_file()]
    if missing:
        print(f"kernelbench_sweep: --order-from: no such rows file: {missing[0]}", file=sys.stderr)
        return 2
    if args.order_from:
        paths = longest_first(paths, [Path(f) for f in args.order_from])
    options = make_options(args.device, args.gpu, args.gpu_memory_gb, args.trials,
                           Path(args.cache_dir) if args.cache_dir else None)
    if args.jobs is None:
        args.jobs = asyncio.run(default_jobs(paths, options))
    print(f"sweeping {len(paths)} problems on {args.device}, {args.jobs} in flight"
          + (f", cap {args.gpu_memory_gb:g} GiB" if args.gpu_memory_gb else "")
          + (", next in order past the lookahead" if not args.look_further else ""), file=sys.stderr, flush=True)
    start = time.perf_counter()
    rows = asyncio.run(sweep(paths, options, args.jobs, Path(args.rows) if args.rows else None,
                             spares_per_slot=args.spares_per_slot, give_up_after=args.give_up_after,
                             count_ahead=not args.count_in_workers, look_further=args.look_further))
    if args.give_up_after and len(rows) < len(paths) and not any(r["expected"] for r in rows[:args.give_up_after]):
        print(f"kernelbench_sweep: gave up: the first {args.give_up_after} rows were all unexpected",
              file=sys.stderr, flush=True)
    summary = summarize(rows, time.perf_counter() - start)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "summary": summary}, indent=1))
    print(format_summary(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
