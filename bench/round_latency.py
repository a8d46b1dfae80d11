"""Round latency: engine time from candidate text to an evaluated and profiled result (LLM excluded).

Two pipelines over the same candidates, in one invocation:
- ours: `Evaluator` + `Profiler` as the session uses them: spare workers pre-warmed while "the LLM
  thinks" (the bench waits until they are ready; that wait is not round time), build caches, lighter
  headers in our inline examples. Each candidate gets a fresh nonce comment in its CUDA source, so it
  is a new candidate to every cache (NVRTC disk cache, load_inline build dir, result cache): the
  numbers are those of a new round, not of a cache hit. Afterwards the same candidate again: the
  result- and profile-cache hit time.
- naive: a fresh process per step (evaluation, then profile), no caches at all (empty NVRTC cache,
  build dir, ncu metric-query cache per step), and for `inline` a KernelBench-style build
  (`#include <torch/extension.h>` in the .cu). Two examples.

Phases: spawn (process start, torch import, CUDA context; for a spare only what was left; and the app's
hand-over and read-back), build (task load, candidate build, ModelNew init), correctness (every check
beside timing: placing, the reference, trials, kernel check, probes, shapes, and the GPU-lock waits),
timing, profile (what the profile adds after the evaluation: it starts beside it, as in a session round,
so only its exclusive ncu replay and the rest of its run past the evaluation's end count; `profile_own_s`
in the JSON is its whole wall), total (eval wall + profile). "without profile" in the table is a round of its
own per candidate (`eval_only_s`: a new nonce, the evaluation alone, no profile beside it); the naive
pipeline's is its total less its profile. Each row's `spawn_parts` and
`profile_parts` (JSON, and the medians printed last) say where spawn and profile went:
- spawn_parts: the worker's start (python_start, spare_wait, spare_handoff, start, context), the report's
  own making (finish), the app's parts (app.cache_key, app.submit, app.read: report written -> result in
  hand, app.assemble; app their sum) and `unaccounted` (the wall time no step claims). The evaluation takes
  the result at the worker's report: the worker's exit goes on in the background, shown apart as `exit_s`
  (report -> process gone; not round time).
- profile_parts: the profiled worker's phases, `release` (its report -> its exit began), `ncu_finish` (its
  exit and ncu's own report, which ncu prints only after the target is gone), app.submit / app.reap /
  app.interpret (app their sum) and `unaccounted` (until 2026-12-03 the whole rest, named `ncu_and_app`).

Usage: python bench/round_latency.py [--ours relu,softmax,...] [--naive relu,softmax] [--json OUT]
       python bench/round_latency.py --device cpu   (a smoke test without a GPU: tests/core_tasks, no ncu)
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudaforge.engine.candidate import Candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.evaluation.profiler import Profiler
from cudaforge.engine.profiling import NcuSettings
from cudaforge.engine.results import EvalResult
from cudaforge.engine.task import Task, load_task
from cudaforge.engine.worker.gpu_share import HOLD_TOTALS
from cudaforge.engine.worker.job import EvalJob

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CORE = ROOT / "tests" / "core_tasks"  # "core": the CI task and its C++ candidate (the --device cpu smoke test)
PHASES = ("spawn", "build", "correctness", "timing", "profile", "total")


def with_nonce(source: str) -> str:
    """A new candidate to every cache: a unique comment as the first line of the CUDA source."""
    nonce = f"// round {uuid.uuid4().hex}\n"
    new, n = re.subn(r"((?:SOURCE|CUDA_SRC)\s*=\s*r?'''\n?)", lambda m: m.group(1) + nonce, source, count=1)
    if n != 1:
        raise ValueError("no SOURCE/CUDA_SRC = r''' string to tag")
    return new


def fresh(source: str) -> str:
    """A new candidate to every cache (with_nonce), or at least a new module hash (a candidate without one)."""
    try:
        return with_nonce(source)
    except ValueError:
        return source + f"\n# round {uuid.uuid4().hex}\n"


def example(name: str, fmt: str) -> tuple[Path, Path]:
    """The task and the candidate of an example (`core`: tests/core_tasks, whatever the format)."""
    if name == "core":
        return CORE / "task.py", CORE / "correct.py"
    return EXAMPLES / name / "task.py", EXAMPLES / name / f"{fmt}.py"


def kernelbench_style(source: str) -> str:
    """Our inline example with KernelBench's header: torch/extension.h instead of the light c10 headers."""
    new, n = re.subn(r"#include <torch/types.h>\n(#include <c10/cuda/[^\n]+\n)+", "#include <torch/extension.h>\n"
                     "#include <c10/cuda/CUDAGuard.h>\n#include <c10/cuda/CUDAStream.h>\n"
                     "#include <c10/cuda/CUDAException.h>\n", source, count=1)
    if n != 1:
        raise ValueError("inline example without the expected header block")
    return new


class NaiveEvaluator(Evaluator):
    """Fresh process per step and no caches: every step gets empty NVRTC and build cache dirs (the
    GPU lock stays shared so GPU phases still never overlap)."""

    def __init__(self, options: EvalOptions, scratch: Path) -> None:
        super().__init__(replace(options, result_cache=False))
        self.scratch = scratch

    def _fresh(self) -> Path:
        return Path(tempfile.mkdtemp(prefix="naive-", dir=self.scratch))

    def worker_job(self, *args: Any, **kwargs: Any) -> EvalJob:
        return replace(super().worker_job(*args, **kwargs), cache_dir=str(self._fresh()))

    def worker_env(self) -> dict[str, str]:
        env = super().worker_env()
        fresh = self._fresh()
        env["CUDAFORGE_NVRTC_CACHE"] = str(fresh / "nvrtc")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(fresh / "inductor")
        env["TORCH_EXTENSIONS_DIR"] = str(fresh / "torch_extensions")
        return env

    def prewarm(self) -> bool:
        return False


class NaiveProfiler(Profiler):
    def _prepare(self, ncu: str, target: list[str]) -> Any:
        from cudaforge.engine.profiling import prepare_profile

        assert isinstance(self.evaluator, NaiveEvaluator)
        return prepare_profile(target, settings=self.settings, ncu_path=ncu, chip=self.chip,
                               cache_dir=self.evaluator._fresh() / "ncu")

    def prewarm(self) -> bool:
        return False


CHECKS = ("place", "reference", "correctness", "kernels", "fallback", "cache_probes", "shapes")
WAITS = ("gpu_wait", "context_wait", "memory_wait", "timing_wait")
SPAWN_PARTS = ("python_start", "spare_wait", "spare_handoff", "start", "context", "finish")
NOT_STEPS = HOLD_TOTALS  # seconds holding the GPU (and counts), beside the steps
ON_THE_PATH = ("spare_wait", "spare_handoff")  # a spare's records that are round time (its warm-up's are not)


def is_step(name: str) -> bool:
    """Whether a phase is one of the round's top-level steps: sub-parts (`a.b`) lie inside their step, the
    held-GPU totals lie beside the steps, and a spare's warm-up (`spare_<step>`) came before the job."""
    return "." not in name and name not in NOT_STEPS and (not name.startswith("spare_") or name in ON_THE_PATH)


def step_seconds(phases: dict[str, float]) -> float:
    return sum(v for k, v in phases.items() if is_step(k))


def phase_row(result: EvalResult, eval_wall: float, profile_wall: float) -> dict[str, float]:
    p = result.phases
    named = {
        "build": sum(p.get(k, 0.0) for k in ("load_task", "build", "init")),
        "correctness": sum(p.get(k, 0.0) for k in (*CHECKS, *WAITS)),  # every check beside timing, and the waits
        "timing": sum(p.get(k, 0.0) for k in ("timing", "compile_baseline")),
    }
    # Everything else of the evaluation's wall time is getting a worker to run: process and
    # interpreter start, torch import, CUDA context, spare hand-over, result read-back.
    named["spawn"] = max(0.0, eval_wall - sum(named.values()))
    named["profile"] = profile_wall
    named["total"] = eval_wall + profile_wall
    return named


def spawn_parts(result: EvalResult, eval_wall: float) -> dict[str, float]:
    """Where the spawn went: the worker's own start phases (a spare's wait and hand-off included), the report's
    making, the app's parts (`app.*`, and `app` their sum) and what no step claims (`unaccounted`)."""
    p = result.phases
    parts = {k: round(p.get(k, 0.0), 4) for k in SPAWN_PARTS}
    parts.update({k: round(v, 4) for k, v in p.items() if k == "app" or k.startswith("app.")})
    parts.setdefault("app", 0.0)
    parts["unaccounted"] = round(max(0.0, eval_wall - step_seconds(p)), 4)
    return parts


def profile_parts(profile: Any, profile_wall: float) -> dict[str, float]:
    """Where the profile went: the profiled worker's phases, the worker's exit and ncu's report (`release`,
    `ncu_finish`), the app's parts (`app.*`, `app`) and what no step claims (`unaccounted`)."""
    p = dict(profile.worker_phases or {})
    parts = {k: round(v, 4) for k, v in p.items() if k not in NOT_STEPS and (not k.startswith("spare_")
                                                                             or k in ON_THE_PATH)}
    parts["unaccounted"] = round(max(0.0, profile_wall - step_seconds(p)), 4)
    return parts


async def wait_ready(*spares: Any, limit_s: float = 120.0) -> float:
    start = time.perf_counter()
    while time.perf_counter() - start < limit_s:
        if all(s is None or s.ready() is not None or not s.alive() for s in spares):
            break
        await asyncio.sleep(0.05)
    return time.perf_counter() - start


def fmt_phases(phases: dict[str, float] | None) -> str:
    return " ".join(f"{k}={v:.3f}" for k, v in (phases or {}).items() if v >= 0.0005)


async def one_round(ev: Evaluator, prof: Profiler, task: Task, cand: Candidate, prewarm: bool) -> dict[str, Any]:
    warm_wait = 0.0
    if prewarm:
        ev.prewarm()
        prof.prewarm()
        # The LLM would be thinking now: every spare warm, the ones started when the last round took its spares
        # included (a later spare's GPU warm-up beside a round was an artefact of replies at once).
        warm_wait = await wait_ready(*ev.spares, *prof.spares)
    ev.last_exit_s = None
    t0 = time.perf_counter()
    # As the session's round does (Session._start_profile): the profile starts beside the evaluation and is
    # kept once the evaluation accepts the candidate; only its exclusive ncu replay waits for the GPU.
    profiling = asyncio.create_task(prof.profile(task, cand))
    profiled_at: list[float] = []
    profiling.add_done_callback(lambda _: profiled_at.append(time.perf_counter()))
    result = await ev.evaluate(task, cand)
    evaluated_at = time.perf_counter()
    eval_wall = evaluated_at - t0
    if prewarm:
        ev.prewarm()  # the next candidate's worker warms while this one is profiled
    profile = await profiling
    profile_wall = max(0.0, profiled_at[0] - evaluated_at)  # what the profile adds to the round
    profile_own = profiled_at[0] - t0
    await ev.settle()  # the evaluation's worker, exiting in the background meanwhile: how long it took
    row = phase_row(result, eval_wall, profile_wall)
    return {"outcome": result.outcome,
            "profile_own_s": round(profile_own, 4),  # its whole wall, begun with the evaluation
            "message": result.message, "profile_ok": profile.ok, "exit_s": ev.last_exit_s,
            "profile_error": profile.error_kind, "profile_message": profile.message[:200],
            "kernels_profiled": len(profile.kernels), "phases": row, "worker_phases": result.phases,
            "profile_worker_phases": profile.worker_phases, "spawn_parts": spawn_parts(result, eval_wall),
            "profile_parts": profile_parts(profile, profile_wall),
            "compile_s": result.compile.seconds if result.compile else None, "warm_wait_s": round(warm_wait, 2)}


async def ours(tasks: list[str], fmt: str, options: EvalOptions, settings: NcuSettings,
               concurrent: bool = False) -> list[dict[str, Any]]:
    async def one(name: str, ev: Evaluator, prof: Profiler) -> dict[str, Any] | None:
        task_path, path = example(name, fmt)
        if not path.exists():
            return None
        task = load_task(task_path)
        cand = Candidate.from_source(fresh(path.read_text()), path=path)
        row = await one_round(ev, prof, task, cand, prewarm=True)
        t0 = time.perf_counter()
        again = await ev.evaluate(task, cand)
        again_profile = await prof.profile(task, cand)
        row["cached_s"] = time.perf_counter() - t0
        row["cached_hit"] = again.cached and again_profile.cached
        # A round without a profile (a new nonce: a new candidate again), the evaluation alone on the GPU: what
        # the round costs where ncu is off or absent ("without profile" in the table).
        ev.prewarm()
        await wait_ready(*ev.spares)
        alone = Candidate.from_source(fresh(path.read_text()), path=path)
        t0 = time.perf_counter()
        alone_result = await ev.evaluate(task, alone)
        row["eval_only_s"] = round(time.perf_counter() - t0, 4)
        row["eval_only_outcome"] = alone_result.outcome
        row["eval_only_phases"] = alone_result.phases
        await ev.settle()
        row.update(task=name, format=fmt, pipeline="ours")
        print(f"ours  {fmt:6s} {name:14s} {row['outcome']:10s} total {row['phases']['total']:6.2f} s "
              f"(profile adds {row['phases']['profile']:.2f} s, its own wall {row['profile_own_s']:.2f} s, "
              f"ok={row['profile_ok']}) cached {row['cached_s']:.3f} s; without a profile {row['eval_only_s']:.2f} s",
              file=sys.stderr, flush=True)
        print(f"      eval phases {fmt_phases(row['worker_phases'])}\n      profile worker phases "
              f"{fmt_phases(row['profile_worker_phases'])}", file=sys.stderr, flush=True)
        return row

    pairs = []
    for _ in tasks if concurrent else [0]:
        ev = Evaluator(options)
        pairs.append((ev, Profiler(ev, settings)))
    try:
        if concurrent:  # inline: the examples' builds overlap (GPU phases still wait for the lock)
            rows = await asyncio.gather(*(one(n, *pair) for n, pair in zip(tasks, pairs, strict=True)))
        else:
            rows = [await one(n, *pairs[0]) for n in tasks]
    finally:
        for ev, prof in pairs:
            await ev.aclose()
            await prof.aclose()
    return [r for r in rows if r is not None]


async def naive(tasks: list[str], fmt: str, options: EvalOptions, settings: NcuSettings,
                scratch: Path) -> list[dict[str, Any]]:
    async def one(name: str) -> dict[str, Any] | None:
        path = EXAMPLES / name / f"{fmt}.py"
        if not path.exists():
            return None
        source = path.read_text()
        if fmt == "inline":
            source = kernelbench_style(source)
        ev = NaiveEvaluator(options, scratch)
        prof = NaiveProfiler(ev, settings)
        task = load_task(EXAMPLES / name / "task.py")
        row = await one_round(ev, prof, task, Candidate.from_source(with_nonce(source), path=path), prewarm=False)
        row.update(task=name, format=fmt, pipeline="naive")
        print(f"naive {fmt:6s} {name:14s} {row['outcome']:10s} total {row['phases']['total']:6.2f} s",
              file=sys.stderr, flush=True)
        return row

    # The examples run side by side (builds overlap on 16 cores; GPU phases wait for the shared lock).
    rows = await asyncio.gather(*(one(n) for n in tasks))
    return [r for r in rows if r is not None]


def ninja_times(root: Path) -> list[dict[str, Any]]:
    """Per-object compile seconds from the .ninja_log of every build dir under `root`."""
    out = []
    for log in root.rglob(".ninja_log"):
        objs = {}
        for line in log.read_text().splitlines()[1:]:
            parts = line.split("\t")
            if len(parts) >= 4:
                objs[parts[3]] = (int(parts[1]) - int(parts[0])) / 1000
        out.append({"dir": log.parent.name, "objects": objs})
    return out


def median_phases(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {p: statistics.median(r["phases"][p] for r in rows) for p in PHASES} if rows else {}


def table(results: dict[str, list[dict[str, Any]]]) -> str:
    out = ["| format | pipeline | n | " + " | ".join(f"{p} s" for p in PHASES)
           + " | without profile s | naive/ours (total) | cached s |",
           "| --- | --- | --- | " + " | ".join("---" for _ in PHASES) + " | --- | --- | --- |"]
    for fmt in ("nvrtc", "inline", "cpu"):
        o = [r for r in results.get("ours", []) if r["format"] == fmt]
        n = [r for r in results.get("naive", []) if r["format"] == fmt]
        mo, mn = median_phases(o), median_phases(n)
        for name, rows, med in (("ours", o, mo), ("naive", n, mn)):
            if not rows:
                continue
            ratio = f"{mn['total'] / mo['total']:.1f}×" if name == "naive" and mo and mn else ""
            cached = f"{statistics.median(r['cached_s'] for r in rows):.3f}" if name == "ours" else ""
            without = statistics.median(r["eval_only_s"] if "eval_only_s" in r
                                        else r["phases"]["total"] - r["phases"]["profile"] for r in rows)
            out.append(f"| {fmt} | {name} | {len(rows)} | " + " | ".join(f"{med[p]:.2f}" for p in PHASES)
                       + f" | {without:.2f} | {ratio} | {cached} |")
    out += ["", "| pipeline | format | task | outcome | profile | spawn | build | correctness | timing | profile s | "
            "total s | cached s |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for pipeline in ("ours", "naive"):
        for r in results.get(pipeline, []):
            ph = r["phases"]
            out.append(f"| {pipeline} | {r['format']} | {r['task']} | {r['outcome']} | "
                       f"{'ok' if r['profile_ok'] else r['profile_error']} | " + " | ".join(
                           f"{ph[p]:.2f}" for p in PHASES) + f" | {r.get('cached_s', float('nan')):.3f} |")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ours", default="relu,softmax,layernorm,matmul,maxpool2d")
    ap.add_argument("--ours-inline", default="relu,softmax")
    ap.add_argument("--naive", default="relu,softmax")
    ap.add_argument("--formats", default="nvrtc,inline")
    ap.add_argument("--cache-dir", default="")
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"),
                    help="cpu: a smoke test without a GPU (tests/core_tasks three times, no ncu, no naive pipeline)")
    args = ap.parse_args()
    if args.device == "cpu":
        args.ours, args.formats, args.naive = "core,core,core", "cpu", ""
    cache = Path(args.cache_dir) if args.cache_dir else Path(tempfile.mkdtemp(prefix="cf-latency-cache-"))
    options = EvalOptions(device=args.device, cache_dir=cache, result_cache=True)
    settings = NcuSettings()
    formats = [f for f in args.formats.split(",") if f]
    scratch = Path(tempfile.mkdtemp(prefix="cf-naive-"))
    results: dict[str, list[dict[str, Any]]] = {"ours": [], "naive": []}
    start = time.perf_counter()
    path = Path(args.json) if args.json else ROOT / "bench" / "results" / \
        f"{datetime.date.today().isoformat()}-round_latency.json"
    path.parent.mkdir(parents=True, exist_ok=True)

    def dump() -> None:  # after every section, so a run cut short still leaves its numbers
        path.write_text(json.dumps({"results": results}, indent=2, default=str))

    async def run() -> None:
        for fmt in formats:
            names = (args.ours_inline if fmt == "inline" else args.ours).split(",")
            results["ours"] += await ours([n for n in names if n], fmt, options, settings,
                                          concurrent=fmt == "inline")
            dump()
        for fmt in formats:
            results["naive"] += await naive([n for n in args.naive.split(",") if n], fmt, options, settings, scratch)
            dump()

    asyncio.run(run())
    builds = {"ours": ninja_times(cache / "extensions"), "naive": ninja_times(scratch),
              "ccache": shutil.which("ccache")}
    print(table(results))
    print("\ninline build objects (s, from .ninja_log):")
    for who in ("ours", "naive"):
        for b in builds[who]:
            print(f"  {who:5s} {b['dir'][:40]:40s} " + ", ".join(f"{k}: {v:.1f}" for k, v in b["objects"].items()))
    print(f"ccache on PATH: {builds['ccache']}")
    for key in ("spawn_parts", "profile_parts"):
        rows = [r[key] for r in results["ours"] if r.get(key)]
        names = sorted({k for r in rows for k in r})
        if rows:
            print(f"\nours, median {key.replace('_', ' ')} (s): " + ", ".join(
                f"{k} {statistics.median(r.get(k, 0.0) for r in rows):.3f}" for k in names))
    exits = [r["exit_s"] for r in results["ours"] if r.get("exit_s") is not None]
    if exits:
        print(f"\nours, the evaluation worker's exit after its report (background, not round time): median "
              f"{statistics.median(exits):.3f} s, max {max(exits):.3f} s")
    print(f"\nbench wall {time.perf_counter() - start:.0f} s")
    path.write_text(json.dumps({"results": results, "builds": builds}, indent=2, default=str))
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
