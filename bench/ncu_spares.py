"""Do ncu-wrapped spare profile workers warm side by side, or does each wait for the ncu before it to end?

Session 21 (H100): a round's profile, right after the round before it, waited for a spare that had only just
begun: the profiled worker's `spare_wait` (job written -> spare ready) was 6.25 s, the sum of its own warm-up
(Python start 0.09, import under ncu 4.87, context 0.20, ncu warm-up 1.08 s), so its Python started about when
the job was written, although the pool keeps two spares started with the session. One reading: ncu lets one
instance profile at a time and a second ncu starts its target only once the first has ended. This bench asks
the machine directly: it starts the pool's spares, waits for them, profiles one example with the oldest, then
waits again, and prints for each spare when its ncu was launched, when its Python started (the ready file's
warm-up seconds, counted back from the moment it was seen ready) and when it was ready.

    python bench/ncu_spares.py [--example relu] [--spares 2] [--wait 40] [--json OUT]

Exit 0 with a table and one verdict line; 2 where there is no CUDA device or no ncu.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

LATE_S = 1.5  # a Python start later than this after its ncu's launch is a spare held back


@dataclass(frozen=True)
class SpareTimes:
    """One spare's moments, in seconds from the bench's start (None: not seen)."""

    index: int
    launched: float
    python_started: float | None
    ready: float | None
    warm_steps: dict[str, float]
    used: bool  # the profile took it
    alive: bool = True  # still running at the bench's end (or used)

    @property
    def held_back_s(self) -> float | None:
        """Seconds from its ncu's launch to its Python's start."""
        return None if self.python_started is None else self.python_started - self.launched


def verdict(spares: list[SpareTimes], profile_ended: float | None) -> str:
    """One line: whether any spare's Python started late after its ncu, and whether that was at the profile's end."""
    late = [s for s in spares if s.held_back_s is not None and s.held_back_s > LATE_S]
    slow_warm = [s for s in spares if s.warm_steps.get("ncu_warm_s", 0.0) > LATE_S]
    never = [s for s in spares if s.ready is None and not s.used]
    if not late and not never and not slow_warm:
        return (f"side by side: every spare's Python started within {LATE_S} s of its ncu "
                f"(max {max((s.held_back_s or 0.0) for s in spares):.2f} s)")
    parts = []
    for s in late:
        assert s.python_started is not None
        where = ""
        if profile_ended is not None:
            where = f", {s.python_started - profile_ended:+.2f} s from the profile's end"
        parts.append(f"spare {s.index}: Python started {s.held_back_s:.2f} s after its ncu{where}")
    parts += [f"spare {s.index}: its ncu warm-up took {s.warm_steps['ncu_warm_s']:.2f} s" for s in slow_warm]
    parts += [f"spare {s.index}: not ready within the wait{'' if s.alive else ' (it ended)'}" for s in never]
    return "held back: " + "; ".join(parts)


def table(spares: list[SpareTimes], profile: tuple[float, float, bool] | None) -> str:
    lines = ["| spare | ncu launched s | Python started s | ready s | held back s | import s | ncu warm-up s | used |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]

    def f(v: float | None) -> str:
        return "—" if v is None else f"{v:.2f}"

    for s in spares:
        lines.append(f"| {s.index} | {f(s.launched)} | {f(s.python_started)} | {f(s.ready)} | {f(s.held_back_s)} | "
                     f"{f(s.warm_steps.get('import_s'))} | {f(s.warm_steps.get('ncu_warm_s'))} | "
                     f"{'yes' if s.used else ''} |")
    if profile is not None:
        lines.append(f"\nprofile: {profile[0]:.2f} -> {profile[1]:.2f} s, ok={profile[2]}")
    return "\n".join(lines)


async def measure(example_name: str, spares: int, wait_s: float) -> dict[str, Any]:
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.profiling import NcuSettings
    from cudaforge.engine.task import load_task
    from round_latency import example, fresh

    options = EvalOptions(device="cuda", spares=spares, cache_dir=Path(tempfile.mkdtemp(prefix="cf-ncu-spares-")),
                          result_cache=False)
    ev = Evaluator(options)
    prof = Profiler(ev, NcuSettings())
    t0 = time.monotonic()
    seen: dict[int, Any] = {}  # id(spare) -> spare, in the order met
    ready_at: dict[int, float] = {}
    ready_info: dict[int, dict[str, Any]] = {}  # its ready file, read when first seen (a used spare's goes with its job)

    def look() -> None:
        for spare in prof.spares:
            seen.setdefault(id(spare), spare)
        for key, spare in seen.items():
            if key not in ready_at and (info := spare.ready()) is not None:
                ready_at[key] = time.monotonic() - t0
                ready_info[key] = info

    async def wait_for_all(limit_s: float) -> None:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            look()
            if all(k in ready_at or s.used or not s.alive() for k, s in seen.items()):
                return
            await asyncio.sleep(0.02)

    profile: tuple[float, float, bool] | None = None
    try:
        if not prof.prewarm():
            raise SystemExit("ncu_spares: no ncu-wrapped spare could be started (ncu missing, or no CUDA device)")
        await wait_for_all(wait_s)
        task_path, cand_path = example(example_name, "nvrtc")
        began = time.monotonic() - t0

        async def keep_looking() -> None:  # a spare that becomes ready while the profile runs is seen then
            while True:
                look()
                await asyncio.sleep(0.02)

        watcher = asyncio.create_task(keep_looking())
        try:
            result = await prof.profile(load_task(task_path), Candidate.from_source(fresh(cand_path.read_text()),
                                                                                    path=cand_path))
        finally:
            watcher.cancel()
        profile = (began, time.monotonic() - t0, result.ok)
        look()
        await wait_for_all(wait_s)
        look()
        rows = []
        for i, (key, spare) in enumerate(seen.items()):
            info = ready_info.get(key, {})
            steps = {k: float(v) for k, v in (info.get("steps") or {}).items()}
            ready = ready_at.get(key)
            python_started = None
            if ready is not None and "warm_s" in info:
                python_started = ready - float(info["warm_s"]) - steps.get("python_start_s", 0.0)
            rows.append(SpareTimes(index=i, launched=spare.started - t0, python_started=python_started, ready=ready,
                                   warm_steps=steps, used=spare.used, alive=spare.used or spare.alive()))
    finally:
        await prof.aclose()
        await ev.aclose()
    return {"spares": rows, "profile": profile}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", default="relu")
    ap.add_argument("--spares", type=int, default=2, help="the pool's depth ([eval] spares; 2 by default)")
    ap.add_argument("--wait", type=float, default=40.0, help="seconds to wait for the spares, before and after")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if args.spares < 1:
        ap.error("--spares must be 1 or more (with none kept there is no spare to watch)")
    try:
        import torch

        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if not cuda:
        print("ncu_spares: needs a CUDA device (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    from cudaforge.engine.profiling import NcuSettings
    from cudaforge.engine.profiling.runner import resolve_ncu

    ncu_path = NcuSettings().path  # the one the bench's Profiler resolves
    if resolve_ncu(ncu_path) is None:
        print(f"ncu_spares: ncu not found ('{ncu_path}')", file=sys.stderr)
        return 2
    res = asyncio.run(measure(args.example, args.spares, args.wait))
    spares: list[SpareTimes] = res["spares"]
    ended = res["profile"][1] if res["profile"] else None
    print(table(spares, res["profile"]))
    print(verdict(spares, ended))
    if args.json:
        Path(args.json).write_text(json.dumps({"spares": [asdict(s) for s in spares], "profile": res["profile"],
                                               "verdict": verdict(spares, ended)}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
