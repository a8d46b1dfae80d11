"""Spare wait per round in a scripted session, and evaluation throughput with several in flight.

Session: `examples/<task>` (default gelu, 32M elements), 4 rounds in auto mode, nvrtc, NCU on, the
Coder and Judge SCRIPTED (tests/llm_server.py through the real openai SDK) and answering at once:
the case where a spare that starts warming only when the LLM starts thinking makes the next round
wait (8-11 s per round on main at 95c6c90; 2.6 s median with one spare kept, 2026-12-03). Each round's
candidate is the example with a fresh nonce (a new candidate to every cache). Per round, from eval.json:
`spare_wait` (how long the job waited for its spare), where that spare's warm-up went (import, waiting
for the GPU lock, CUDA context, CUPTI, and CUPTI's own start / stop), the app's own seconds of the
evaluation (`app`: hand-over, read-back of the report, checks), and the round's evaluate / profile
seconds. `--spares N` sets `[eval] spares` (default: the configuration's). The session stops starting
rounds after `--wall-s` (40 s; a round lasts ~5-6 s), so `--skip-throughput` ends within a minute on the GPU.

Throughput: `--evals N` candidates (the examples' nvrtc modules with nonces, round robin) through one
Evaluator, `--jobs J` at a time, with spares (prewarm once; each evaluation starts the next spare when
it takes one) and without (a fresh worker per evaluation): evaluations per minute.

    python bench/spare_wait.py [--task gelu] [--rounds 4] [--evals 21] [--jobs 4] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from cudaforge.engine.candidate import Candidate  # noqa: E402
from cudaforge.engine.config import load_config  # noqa: E402
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator  # noqa: E402
from cudaforge.engine.session import PhaseChanged, RoundFinished, RunStore, create_session  # noqa: E402
from cudaforge.engine.task import load_task  # noqa: E402
from llm_server import Reply, ScriptedLLMServer  # noqa: E402
from round_latency import with_nonce  # noqa: E402

EXAMPLES = REPO / "examples"
KEY_ENV = "CF_SCRIPTED_KEY"
# spare_fork: a spare forked from the zygote (engine/evaluation/zygote.py), fork to warm-up; spare_python_start an
# exec'd one's, exec to warm-up: one of the two is set.
# Each warm-up step's column: its phase key in eval.json and its header.
WARM_COLUMNS = (("spare_python_start", "spare: python start"), ("spare_fork", "fork (zygote)"),
                ("spare_import", "import"), ("spare_counting", "counting (torch._dynamo)"),
                ("spare_context", "context (no hold)"), ("spare_context_gap", "of it, gap wait"),
                ("spare_check_kernels", "check kernels"),
                ("spare_warm_checks", "warm checks"), ("spare_cupti", "CUPTI"),
                ("spare_cupti_prepare", "CUPTI prepare"), ("spare_cupti_enable", "enable"),
                ("spare_cupti_disable", "disable"), ("spare_freeze", "gc freeze"), ("spare_handoff", "hand-off"),
                ("app", "app"))
WARM = tuple(key for key, _ in WARM_COLUMNS)


def _coder(source: str) -> Reply:
    return Reply(text=f"Here is the module.\n\n```python\n{source}```\n")


def _judge(i: int) -> Reply:
    return Reply(text=json.dumps({"bottleneck": "memory bound", "method": f"idea {i}",
                                  "plan": "keep the kernel, tune the block size", "evidence": []}))


async def session_rounds(task: str, rounds: int, out: Path, device: str = "cuda", spares: int | None = None,
                         wall_s: float = 40.0) -> list[dict[str, Any]]:
    os.environ[KEY_ENV] = "scripted-not-a-key"
    if device == "cuda":
        task_path, source, fmt = EXAMPLES / task / "task.py", (EXAMPLES / task / "nvrtc.py").read_text(), "nvrtc"
    else:  # a smoke test of this bench without a GPU: the CI task and its C++ candidate
        core = REPO / "tests" / "core_tasks"
        task_path, source, fmt = core / "task.py", (core / "correct.py").read_text(), "cpu"
    script: list[Reply] = []
    for i in range(rounds + 1):
        script += [_coder(_new(source)), _judge(i)]
    llm = {"provider": "openai-compatible", "model": "scripted", "api_key_env": KEY_ENV, "timeout_s": 60.0,
           "max_retries": 0}
    timeline: list[tuple[float, int, str]] = []
    takes: dict[int, Any] = {}  # round -> what its profile found in the profile spare pool (PoolTake)
    made: list[Any] = []  # the session, once made (the events below read its profiler)

    t0 = time.time()

    def on_event(e: Any) -> None:
        if isinstance(e, PhaseChanged):
            timeline.append((e.started_at, e.round, e.phase))
            print(f"[{time.time() - t0:6.1f} s] round {e.round}: {e.phase}", file=sys.stderr, flush=True)
        elif isinstance(e, RoundFinished):
            timeline.append((time.time(), e.round, "done"))
            profiler = getattr(made[0], "profiler", None) if made else None
            takes[e.round] = getattr(profiler, "last_take", None)
            print(f"[{time.time() - t0:6.1f} s] round {e.round}: done", file=sys.stderr, flush=True)

    with ScriptedLLMServer(script) as server:
        flat: dict[str, Any] = {"eval.device": device, "session.rounds": rounds, "session.mode": "auto",
                                "session.format": fmt, "run.folder": str(out / "runs"), "budget.dollars": 10.0,
                                "eval.spares": spares, "budget.wall_minutes": wall_s / 60}
        if os.environ.get("CUDAFORGE_CACHE_DIR"):
            flat["run.cache_dir"] = os.environ["CUDAFORGE_CACHE_DIR"]
        for role in ("coder", "judge"):
            flat.update({f"{role}.{k}": v for k, v in llm.items()} | {f"{role}.base_url": server.base_url_compat})
        session = create_session(task_path, load_config(None, flat, use_user_config=False), on_event=on_event)
        made.append(session)
        await session.run()
    phases: dict[int, dict[str, float]] = {}
    for (t, n, phase), (t_next, _, _) in zip(timeline, timeline[1:], strict=False):
        if phase != "done":
            phases.setdefault(n, {}).setdefault(phase, 0.0)
            phases[n][phase] += t_next - t
    rows = []
    for rec in RunStore(session.store.path, read_only=True).rounds():
        p, wp = phases.get(rec.round, {}), (rec.result.phases if rec.result else {})
        rows.append({"round": rec.round, "outcome": rec.outcome, "spare_wait_s": wp.get("spare_wait"),
                     **{k + "_s": wp.get(k) for k in WARM},
                     "evaluate_s": sum(p.get(k, 0.0) for k in ("compiling", "verifying", "timing")),
                     "profile_s": p.get("profiling", 0.0),
                     "profile_ok": rec.profile is not None and rec.profile.ok,
                     # the profile's job waiting for its ncu-wrapped spare's warm-up (bench/ncu_spares.py asks why)
                     "profile_spare_wait_s": rec.profile.worker_phases.get("spare_wait") if rec.profile else None,
                     "profile_error": "" if rec.profile is None or rec.profile.ok else
                     f"{rec.profile.error_kind}: {rec.profile.message[:300]}",
                     # a failed profile's evidence: ncu's own lines and the target's, ncu's exit code
                     "profile_failure": {} if rec.profile is None or rec.profile.ok else {
                         "returncode": rec.profile.returncode, "ncu": rec.profile.log_tail,
                         "target_stderr": rec.profile.target_stderr, "worker_phases": rec.profile.worker_phases},
                     "profile_take": dataclasses.asdict(takes[rec.round]) if takes.get(rec.round) else None})
    return rows


def _new(source: str) -> str:
    """A new candidate to every cache (NVRTC source nonce), or at least a new module hash (cpu.py)."""
    try:
        return with_nonce(source)
    except ValueError:
        return source + f"\n# {time.time_ns()}\n"


async def throughput(evals: int, jobs: int, spares: bool, cache: Path, device: str = "cuda") -> dict[str, Any]:
    if device == "cuda":
        names = sorted(p.parent.name for p in EXAMPLES.glob("*/nvrtc.py") if (p.parent / "task.py").exists())
        work = [(load_task(EXAMPLES / n / "task.py"), EXAMPLES / n / "nvrtc.py") for n in names]
    else:  # a smoke test without a GPU: the CI task (the examples' full sizes take minutes each on a CPU)
        core = REPO / "tests" / "core_tasks"
        work = [(load_task(core / "task.py"), core / "correct.py")]
    ev = Evaluator(EvalOptions(device=device, cache_dir=cache))
    sem = asyncio.Semaphore(jobs)
    outcomes: list[str] = []
    waits: list[float] = []

    async def one(i: int) -> None:
        task, path = work[i % len(work)]
        async with sem:
            r = await ev.evaluate(task, Candidate.from_source(_new(path.read_text()), path=path))
            outcomes.append(r.outcome)
            if "spare_wait" in r.phases:
                waits.append(r.phases["spare_wait"])

    if spares:
        ev.prewarm()
    start = time.perf_counter()
    try:
        await asyncio.gather(*(one(i) for i in range(evals)))
    finally:
        await ev.aclose()
    wall = time.perf_counter() - start
    return {"spares": spares, "evals": evals, "jobs": jobs, "wall_s": round(wall, 1),
            "per_minute": round(60.0 * evals / wall, 1), "ok": outcomes.count("ok"),
            "spare_used": len(waits), "spare_wait_median_s": statistics.median(waits) if waits else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="gelu")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--evals", type=int, default=21)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--skip-session", action="store_true")
    ap.add_argument("--skip-throughput", action="store_true")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this bench without a GPU")
    ap.add_argument("--spares", type=int, default=None, help="[eval] spares (default: the configuration's)")
    ap.add_argument("--wall-s", type=float, default=40.0, help="no round starts after this many seconds")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="cf-spare-wait-"))
    res: dict[str, Any] = {}
    if not args.skip_session:
        started = time.perf_counter()
        res["session"] = asyncio.run(session_rounds(args.task, args.rounds, out, args.device, args.spares,
                                                    args.wall_s))
        res["session_wall_s"] = round(time.perf_counter() - started, 1)
    if not args.skip_throughput:
        res["throughput"] = [asyncio.run(throughput(args.evals, args.jobs, spares, out / f"cache-{spares}",
                                                        args.device))
                             for spares in (False, True)]
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1, default=str))

    def f(v: Any) -> str:
        return "—" if v is None else f"{v:.2f}" if isinstance(v, float) else str(v)

    if "session" in res:
        where = args.task if args.device == "cuda" else "tests/core_tasks (CPU smoke)"
        asked = args.spares if args.spares is not None else load_config(None, use_user_config=False).get("eval", "spares")
        kept = EvalOptions(device=args.device, spares=asked).spare_depth  # one at most on the CPU device
        print(f"\nscripted session, {where}, replies at once, {kept} spare(s) kept (seconds):")
        print("| round | outcome | spare_wait | " + " | ".join(label for _, label in WARM_COLUMNS)
              + " | evaluate | profile | profile's spare wait |")
        print("|" + " --- |" * (len(WARM) + 6))
        for r in res["session"]:
            print(f"| {r['round']} | {r['outcome']} | {f(r['spare_wait_s'])} | " + " | ".join(
                f(r[k + '_s']) for k in WARM) + f" | {f(r['evaluate_s'])} | {f(r['profile_s'])} | "
                f"{f(r['profile_spare_wait_s'])} |")
        for r in res["session"]:
            take = r.get("profile_take")
            if take:  # why a profile waited for its spare, if it did (engine/evaluation/spare.py PoolTake)
                print(f"round {r['round']}: profile spare pool at the take: {take['live']} live, taken "
                      f"{'ready' if take['taken_ready'] else 'warming'} at {f(take['taken_age_s'])} s old, others "
                      f"{', '.join(f'{a:.2f}' for a in take['waiting_ages_s']) or 'none'} s old; since the "
                      f"previous take {take['dropped_dead']} dead, {take['dropped_other_key']} for other options, "
                      f"{take['started']} started")
                for death in take.get("deaths") or ():
                    print(f"  a dead one: {death}")
        for r in res["session"]:
            if r["profile_error"]:
                print(f"round {r['round']}: profile failed: {r['profile_error']}")
                failure = r.get("profile_failure") or {}
                print(f"  ncu exit code {failure.get('returncode')}; ncu said:\n    "
                      + "\n    ".join((failure.get("ncu") or "(nothing)").splitlines()))
                print("  the target's stderr:\n    "
                      + "\n    ".join((failure.get("target_stderr") or "(nothing)").splitlines()))
        waits = [r["spare_wait_s"] for r in res["session"] if r["spare_wait_s"] is not None]
        later = waits[1:] or waits  # round 0's spare starts with the session
        if waits:
            print(f"\nspare wait per round: median {statistics.median(later):.2f} s, max {max(later):.2f} s "
                  f"(rounds after the first; target <= 0.5 s); session {res['session_wall_s']:.1f} s")
    if "throughput" in res:
        print(f"\nthroughput, {args.evals} {'nvrtc' if args.device == 'cuda' else 'cpu'} evaluations, {args.jobs} in flight, one Evaluator:")
        print("| spares | wall s | evaluations/min | ok | evaluations that took a spare | median spare_wait s |")
        print("| --- | --- | --- | --- | --- | --- |")
        for t in res["throughput"]:
            print(f"| {'yes' if t['spares'] else 'no'} | {t['wall_s']} | {t['per_minute']} | {t['ok']}/{t['evals']} | "
                  f"{t['spare_used']} | {f(t['spare_wait_median_s'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
