"""Does the engine's speedup agree with an independent measurement, and does it repeat?

For every example's nvrtc candidate: 5 engine evaluations (fresh each time: result cache off, a
pre-warmed spare worker each time), then, in this process, `triton.testing.do_bench` (its L2 flush,
`return_mode="median"`) of the reference and the candidate on the same inputs. Gates: the engine's
median speedup agrees with do_bench's within 5 %, and the 5 engine measurements of the candidate's
time spread by at most 3 % (max/min) when the kernel takes 50 µs or longer (shorter: reported only).

Usage: python bench/timing_fidelity.py [--repeats 5] [--tasks relu,softmax] [--parallel 8] [--json OUT]
                                       [--proc-samples]
`--parallel N` keeps N evaluations in flight (N evaluators, each with its spare): the timed windows still
hold the GPU alone (the per-GPU reader/writer lock), everything else of the N runs side by side, so the
gates then say whether timing stays true under load. For a missed spread it prints, beside the slowest run's
clocks, what its timing thread's host did in the window (timing.HostLoad: CPU time, preemptions) against the
fastest run's; `--proc-samples` also samples every process's CPU time (bench/proc_activity.py) and names the
processes that ran during the slowest window.
Engine evaluations run first, do_bench last, so this process holds no CUDA context while the engine's
workers time (it would be "another process on the GPU").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.task import load_task

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proc_activity import ProcessActivity  # noqa: E402  (bench/ is no package)

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
AGREE = 0.05
SPREAD = 1.03
GATED_US = 50.0


async def engine_runs(tasks: list[str], repeats: int, options: EvalOptions) -> dict[str, list[dict[str, Any]]]:
    """Three evaluators take turns: the next ones' spares warm up while the current one evaluates
    (in a session a spare warms while the LLM thinks); each spare runs one evaluation only. A timed
    window never overlaps other GPU work (the per-GPU reader/writer lock); a warming spare only imports
    torch and creates its context."""
    evs = [Evaluator(options) for _ in range(3)]
    evs[0].prewarm()
    evs[1].prewarm()
    out: dict[str, list[dict[str, Any]]] = {}
    k = 0
    try:
        for name in tasks:
            task = load_task(EXAMPLES / name / "task.py")
            cand = load_candidate(EXAMPLES / name / "nvrtc.py")
            rows = []
            for i in range(repeats):
                ev = evs[k % 3]
                k += 1
                evs[(k + 1) % 3].prewarm()
                r = await ev.evaluate(task, cand, use_cache=False)
                rows.append(_row(r, ev.last_wall_s))
                print(f"engine {name} #{i}: {r.outcome} {r.message} ({ev.last_wall_s:.1f} s)", file=sys.stderr,
                      flush=True)
            out[name] = rows
    finally:
        for ev in evs:
            await ev.aclose()
    return out


async def engine_runs_parallel(tasks: list[str], repeats: int, options: EvalOptions,
                               parallel: int) -> dict[str, list[dict[str, Any]]]:
    """Every (task, repeat) evaluation with `parallel` in flight: one Evaluator per slot, each with a
    spare that is replaced as soon as it takes its job."""
    work = [(name, i) for i in range(repeats) for name in tasks]
    loaded = {name: (load_task(EXAMPLES / name / "task.py"), load_candidate(EXAMPLES / name / "nvrtc.py"))
              for name in tasks}
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in tasks}
    evs = [Evaluator(options) for _ in range(max(1, parallel))]

    async def slot(ev: Evaluator) -> None:
        ev.prewarm()
        while work:
            name, i = work.pop(0)
            task, cand = loaded[name]
            r = await ev.evaluate(task, cand, use_cache=False)
            out[name].append(_row(r, ev.last_wall_s))
            print(f"engine {name} #{i}: {r.outcome} {r.message} ({ev.last_wall_s:.1f} s)", file=sys.stderr,
                  flush=True)

    try:
        await asyncio.gather(*(slot(ev) for ev in evs))
    finally:
        for ev in evs:
            await ev.aclose()
    return out


def _us(stats: Any) -> float | None:
    return stats.median_ms * 1e3 if stats is not None else None


def _row(r: Any, wall_s: float) -> dict[str, Any]:
    """One evaluation: its event medians, and beside them CUPTI's busy time and the host-synchronized time of
    the calls timed after the window, which say whether a slow run's kernels ran slower or the host launched
    them late (session 16's gelu outlier: its candidate's events 54 % slower in one run, its reference not)."""
    t = r.timing
    return {"outcome": r.outcome, "speedup": t.speedup if t else None,
            "ref_us": _us(t.reference) if t else None, "cand_us": _us(t.candidate) if t else None,
            "ref_busy_us": _us(t.kernel_reference) if t else None, "cand_busy_us": _us(t.kernel_candidate) if t else None,
            "ref_host_us": _us(t.host_reference) if t else None, "cand_host_us": _us(t.host_candidate) if t else None,
            "measurements": t.measurements if t else None,
            # per side, the share of timed calls the GPU may have waited for the host in (Timer.late_launches)
            "late_launches": dict(t.settings.get("late_launches") or {}) if t else {},
            # per side, the longest spin its timed calls were queued behind (timing.LaunchCover)
            "launch_cover_us": dict(t.settings.get("launch_cover_us") or {}) if t else {},
            # ... and all its spins together, ms: what the cover added to the window's wall
            "launch_cover_total_ms": dict(t.settings.get("launch_cover_total_ms") or {}) if t else {},
            # the timing thread's CPU time, preemptions and the machine's runnable threads in the window
            "host_load": dict(t.settings.get("host_load") or {}) if t else {},
            "findings": [f"{f.severity}:{f.name}" for f in r.findings], "wall_s": wall_s,
            "worker": worker_kind(r.phases)}


def worker_kind(phases: dict[str, float]) -> str:
    """How the evaluation's worker started: "forked" from the zygote (engine/evaluation/zygote.py), "exec'd"
    (a spare started as a new interpreter), "direct" (no spare). The fidelity misses began with the zygote."""
    if "spare_fork" in phases:
        return "forked"
    return "exec'd" if "spare_python_start" in phases else "direct"


def late_by_worker(engine: dict[str, list[dict[str, Any]]], share: float = 0.5) -> dict[str, tuple[int, int]]:
    """Per worker kind: (runs whose either side had at least `share` of its timed calls launched late, runs)."""
    out: dict[str, tuple[int, int]] = {}
    for runs in engine.values():
        for r in runs:
            if r.get("outcome") != "ok":
                continue
            kind = r.get("worker", "-")
            late, total = out.get(kind, (0, 0))
            out[kind] = (late + (max((r.get("late_launches") or {}).values(), default=0.0) >= share), total + 1)
    return out


def _import(path: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def do_bench_speedup(name: str, seed: int) -> dict[str, float]:
    """Reference and candidate medians from triton's do_bench, models built the engine's way."""
    import torch
    from triton.testing import do_bench

    task = _import(EXAMPLES / name / "task.py", f"fid_task_{name}")
    cand = _import(EXAMPLES / name / "nvrtc.py", f"fid_cand_{name}")
    init = task.get_init_inputs()
    torch.manual_seed(seed)
    model = task.Model(*init).cuda().eval()
    torch.manual_seed(seed)
    model_new = cand.ModelNew(*init).cuda().eval()
    with torch.no_grad():
        new_state = model_new.state_dict()
        for k, v in model.state_dict().items():
            if k in new_state and new_state[k].shape == v.shape:
                new_state[k].copy_(v)
    torch.manual_seed(seed)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        ref_ms = do_bench(lambda: model(*inputs), warmup=25, rep=200, return_mode="median")
        cand_ms = do_bench(lambda: model_new(*inputs), warmup=25, rep=200, return_mode="median")
    return {"ref_us": ref_ms * 1e3, "cand_us": cand_ms * 1e3, "speedup": ref_ms / cand_ms}


def summarize(engine: dict[str, list[dict[str, Any]]], bench: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    rows = []
    for name, runs in engine.items():
        ok = [r for r in runs if r["speedup"] is not None]
        if not ok:
            rows.append({"task": name, "error": runs[0]["outcome"] if runs else "no runs"})
            continue
        speedups = [r["speedup"] for r in ok]
        cand = [r["cand_us"] for r in ok]
        eng = statistics.median(speedups)
        db = bench.get(name, {})
        agree = abs(eng / db["speedup"] - 1) if db else None
        spread = max(cand) / min(cand)
        gated = statistics.median(cand) >= GATED_US
        rows.append({
            "task": name, "engine_speedup": eng, "engine_speedups": speedups, "engine_cand_us": statistics.median(cand),
            "engine_ref_us": statistics.median(r["ref_us"] for r in ok), "do_bench": db,
            "agreement": agree, "agree_ok": agree is not None and agree <= AGREE,
            "time_spread": spread, "speedup_spread": max(speedups) / min(speedups), "spread_gated": gated,
            "spread_ok": (spread <= SPREAD) if gated else None, "runs": len(ok),
            "findings": sorted({f for r in ok for f in r["findings"]}),
            # the runs whose candidate timed slowest and fastest, with what the other clocks said of them
            "slowest_run": {k: max(ok, key=lambda r: r["cand_us"]).get(k) for k in RUN_KEYS},
            "fastest_run": {k: min(ok, key=lambda r: r["cand_us"]).get(k) for k in RUN_KEYS},
        })
    return rows


RUN_KEYS = ("cand_us", "cand_busy_us", "cand_host_us", "ref_us", "ref_busy_us", "measurements", "late_launches",
            "launch_cover_us", "launch_cover_total_ms", "host_load", "worker")


def us(value: Any) -> str:
    """Microseconds to one decimal, "-" where a clock had no figure."""
    return f"{value:.1f}" if isinstance(value, (int, float)) else "-"


def _shares(late: dict[str, float] | None) -> str:
    """Timer.late_launches per side as "candidate 93 %, reference 0 %", "-" where the run had none."""
    return ", ".join(f"{side} {share:.0%}" for side, share in sorted(late.items())) if late else "-"


def _shares_us(values: dict[str, float] | None) -> str:
    return ", ".join(f"{side} {v:.1f}" for side, v in sorted(values.items())) if values else "-"


def _cover(run: dict[str, Any]) -> str:
    """A run's launch cover per side: its longest spin (µs) / all its spins (ms), "-" without one."""
    longest, total = run.get("launch_cover_us") or {}, run.get("launch_cover_total_ms") or {}
    if not longest:
        return "-"
    return ", ".join(f"{side} {us:.1f} / {total[side]:.1f}" if side in total else f"{side} {us:.1f}"
                     for side, us in sorted(longest.items()))


def host_line(load: dict[str, Any] | None) -> str:
    """timing.HostLoad of one window in words, "-" where the run had none."""
    if not load or not load.get("wall_s"):
        return "-"
    return (f"timing thread on a CPU {load['cpu_s'] / load['wall_s']:.0%} of the {load['wall_s'] * 1e3:.0f} ms window, "
            f"{load['involuntary_switches']} preemptions, {load['voluntary_switches']} waits, "
            f"{load['runnable']} threads runnable at its end, {load.get('system_s', 0) * 1e3:.0f} ms in the kernel, "
            f"{load.get('device_maps', -1)} allocator device maps, {load.get('steal_s', 0) * 1e3:.0f} ms stolen by "
            f"the hypervisor, on CPU {load.get('cpu', -1)}; host µs from flush to end event queued: "
            f"{_shares_us(load.get('queue_us'))}; per iteration: {_shares_us(load.get('iteration_us'))}")


def activity_line(activity: Any, load: dict[str, Any] | None) -> str:
    """The processes that used the CPUs during one window (bench/proc_activity.py), "" without samples."""
    if activity is None or not load or not load.get("wall_s"):
        return ""
    cores, top = activity.between(load["started_at"], load["started_at"] + load["wall_s"])
    if not top:
        return ""
    named = "; ".join(f"{u.label} (pid {u.pid}) {u.cpu_s:.2f} s" for u in top)
    return f"\n  CPUs busy then: {cores:.1f} cores; most: {named}"


def table(rows: list[dict[str, Any]], activity: Any = None) -> str:
    out = ["| task | engine speedup (median of 5) | do_bench speedup | agree | engine cand µs | do_bench cand µs | "
           "time spread max/min | speedup spread | gated |",
           "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['task']} | {r['error']} | | | | | | | |")
            continue
        db = r["do_bench"]
        agree = f"{r['agreement'] * 100:.1f} % {'ok' if r['agree_ok'] else 'MISS'}" if r["agreement"] is not None else "-"
        spread = f"{(r['time_spread'] - 1) * 100:.1f} %"
        gate = ("ok" if r["spread_ok"] else "MISS") if r["spread_gated"] else "not gated (<50 µs)"
        out.append(f"| {r['task']} | {r['engine_speedup']:.3f}× | {db.get('speedup', 0):.3f}× | {agree} | "
                   f"{r['engine_cand_us']:.1f} | {db.get('cand_us', 0):.1f} | {spread} | "
                   f"{(r['speedup_spread'] - 1) * 100:.1f} % | {gate} |")
    out += ["", "| task | slowest run: calls launched late | its launch cover: longest µs / all ms | fastest run: late "
            "| cover |",
            "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if "error" not in r:
            w, f = r["slowest_run"], r["fastest_run"]
            out.append(f"| {r['task']} | {_shares(w.get('late_launches'))} | {_cover(w)} | "
                       f"{_shares(f.get('late_launches'))} | {_cover(f)} |")
    slow = [r for r in rows if "error" not in r and r["spread_gated"] and not r["spread_ok"]]
    for r in slow:  # a missed spread: events against CUPTI's busy time in the slowest run
        w = r["slowest_run"]
        out.append(f"\n{r['task']}, slowest run: candidate events {us(w['cand_us'])} µs, CUPTI busy "
                   f"{us(w['cand_busy_us'])} µs, host-synchronized {us(w['cand_host_us'])} µs; reference events "
                   f"{us(w['ref_us'])} µs, busy {us(w['ref_busy_us'])} µs; windows measured {w['measurements']}; "
                   f"calls launched late: {_shares(w.get('late_launches'))}; worker {w.get('worker', '-')}\n"
                   f"  host in the slowest run's window: {host_line(w.get('host_load'))}\n"
                   f"  host in the fastest run's window: {host_line(r['fastest_run'].get('host_load'))}; calls "
                   f"launched late {_shares(r['fastest_run'].get('late_launches'))}; worker "
                   f"{r['fastest_run'].get('worker', '-')}"
                   f"{activity_line(activity, w.get('host_load'))}")
    return "\n".join(out)


def verdict(rows: list[dict[str, Any]]) -> str:
    """The targets in a few words (the last line, which bench/gpu_check.sh's table shows): how many tasks agree
    with do_bench within 5 % with a spread of at most 3 % (where gated), and which missed."""
    missed = [r["task"] for r in rows if "error" in r or not r["agree_ok"] or (r["spread_gated"] and not r["spread_ok"])]
    return f"{len(rows) - len(missed)} of {len(rows)} ok" + (f", missed: {', '.join(missed)}" if missed else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tasks", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--parallel", type=int, default=1, help="evaluations in flight (1: one at a time)")
    ap.add_argument("--seed", type=int, default=0, help="do_bench's model and input seed (the engine draws its own)")
    ap.add_argument("--no-launch-cover", action="store_true",
                    help="time with the flush alone ([timing] launch_cover = false): the A/B of timing.LaunchCover")
    ap.add_argument("--proc-samples", action="store_true",
                    help="sample every process's CPU time, to name what ran during a slow window (Linux)")
    args = ap.parse_args()
    if args.parallel < 1 or args.repeats < 1:
        print("--parallel and --repeats must be at least 1", file=sys.stderr)
        return 2
    tasks = [t for t in args.tasks.split(",") if t] or sorted(p.parent.name for p in EXAMPLES.glob("*/nvrtc.py"))
    options = EvalOptions(device="cuda", spares=1)  # the bench takes turns among its evaluators itself
    if args.cache_dir:
        options = EvalOptions(device="cuda", cache_dir=Path(args.cache_dir), spares=1)
    if args.no_launch_cover:
        options = dataclasses.replace(options, timing={**options.timing, "launch_cover": False})
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        activity = stack.enter_context(ProcessActivity()) if args.proc_samples else None
        engine = asyncio.run(engine_runs(tasks, args.repeats, options) if args.parallel == 1
                             else engine_runs_parallel(tasks, args.repeats, options, args.parallel))
    bench = {}
    for name in tasks:
        try:
            bench[name] = do_bench_speedup(name, args.seed)
        except Exception as exc:  # noqa: BLE001 - reported in the table, the others still run
            print(f"do_bench {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    rows = summarize(engine, bench)
    print(table(rows, activity))
    print("\nruns with half or more of a side's timed calls launched late, by worker: " + ", ".join(
        f"{kind} {late} of {total}" for kind, (late, total) in sorted(late_by_worker(engine).items())))
    print(f"\n{len(tasks)} tasks × {args.repeats} engine runs ({args.parallel} in flight) + do_bench in "
          f"{time.perf_counter() - start:.0f} s; {verdict(rows)}")
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / \
        f"{datetime.date.today().isoformat()}-timing_fidelity.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"rows": rows, "engine": engine, "do_bench": bench, "parallel": args.parallel},
                               indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
