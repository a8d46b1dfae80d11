"""Are torch.compile's artifacts reused across processes (sessions)? Two evaluations with the
torch.compile baseline, each in a fresh worker, sharing one cache dir (TORCHINDUCTOR_CACHE_DIR is
set under it by the Evaluator): the first starts from an empty cache, the second from the first's.

Usage: python bench/inductor_cache.py [--task-dir DIR] [--candidate nvrtc.py] [--device cuda|cpu] [--json OUT]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.task import load_task

ROOT = Path(__file__).resolve().parent.parent


async def run(task_dir: Path, candidate: str, cache: Path, device: str) -> list[dict]:
    options = EvalOptions(device=device, cache_dir=cache, result_cache=False,
                          timing={"warmup": 10, "trials": 50, "host_trials": 20, "l2_flush": True,
                                  "baselines": ["eager", "compile"]})
    task = load_task(task_dir / "task.py")
    cand = load_candidate(task_dir / candidate)
    rows = []
    for label in ("cold inductor cache", "warm inductor cache (new process)"):
        r = await Evaluator(options).evaluate(task, cand)
        t = r.timing
        rows.append({"run": label, "outcome": r.outcome, "compile_baseline_s": r.phases.get("compile_baseline"),
                     "compile_us": t.compile_baseline.median_ms * 1e3 if t and t.compile_baseline else None,
                     "speedup_vs_compile": t.speedup_vs_compile if t else None,
                     "error": (t.settings.get("compile_baseline_error") if t else None) or r.message})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task-dir", default=str(ROOT / "examples" / "relu"))
    ap.add_argument("--candidate", default="nvrtc.py")
    ap.add_argument("--json", default="")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = ap.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="cf-inductor-"))
    rows = asyncio.run(run(Path(args.task_dir), args.candidate, cache, args.device))
    print("| run | outcome | torch.compile (first calls incl. compile) s | compiled µs | speedup vs compile |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['run']} | {r['outcome']} | {r['compile_baseline_s']} | "
              f"{r['compile_us'] and round(r['compile_us'], 1)} | {r['speedup_vs_compile'] and round(r['speedup_vs_compile'], 3)} |")
    inductor = cache / "inductor"
    files = sum(1 for p in inductor.rglob("*") if p.is_file()) if inductor.exists() else 0
    print(f"files under {inductor}: {files}")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "inductor_files": files}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
