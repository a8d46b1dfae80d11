"""A batch of KernelBench's ten largest level-1 problems, 4 sessions at once, scripted replies (issue 13).

The Coder's replies are SCRIPTED (tests/llm_server.py answers the real openai SDK on 127.0.0.1): for
each task, the problem's own reference renamed ModelNew. Everything else is real: the batch runs 4
sessions at once on the one GPU, each evaluation in its sandboxed worker. The point is memory: no
evaluation may run out of memory because of another. Prints one row per task (round outcome, the
evaluation's peak memory, the reference's, their ratio) and the count of `oom` outcomes.

    python3 bench/batch_largest.py --out DIR [--gpu-memory-gb N] [--count 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from cudaforge.engine.config import load_config  # noqa: E402
from cudaforge.engine.session import RunStore  # noqa: E402
from cudaforge.engine.session.batch import Batch, format_summary, run_batch  # noqa: E402
from cudaforge.engine.worker.memory import GIB, meta_footprint  # noqa: E402
from kernelbench_sweep import DEFAULT_FOLDER, reference_as_candidate  # noqa: E402
from llm_server import RecordedRequest, Reply, ScriptedLLMServer  # noqa: E402

KEY_ENV = "CF_SCRIPTED_KEY"


def largest(folder: Path, count: int) -> list[Path]:
    """The `count` level-1 problems with the largest footprint (inputs + outputs + parameters, meta device)."""
    import importlib.util

    sizes = []
    for path in sorted((folder / "level1").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"kb1_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
        spec.loader.exec_module(module)  # type: ignore[union-attr]
        fp = meta_footprint(module, list(module.get_init_inputs()), 42)
        sizes.append((fp["footprint_bytes"], path))
    return [p for _, p in sorted(sizes, key=lambda x: -x[0])[:count]]


def _share(source: str, prompt: str) -> float:
    lines = [ln for ln in source.splitlines() if ln.strip()]
    return sum(1 for ln in lines if ln in prompt) / max(1, len(lines))


def responder_for(tasks: list[Path]):  # -> Callable[[RecordedRequest], Reply]
    sources = {p: p.read_text() for p in tasks}

    def respond(req: RecordedRequest) -> Reply:
        if "You are the Judge" in req.system:
            return Reply(text=json.dumps({"bottleneck": "PyTorch does the work", "method": "write a kernel",
                                          "plan": "a custom kernel for the main operator", "evidence": []}))
        prompt = req.last_user_text
        # The task whose source the prompt quotes (else the one with the largest share of its lines quoted).
        quoted = [p for p in tasks if sources[p].strip() in prompt]
        best = quoted[0] if len(quoted) == 1 else max(tasks, key=lambda p: _share(sources[p], prompt))
        code = reference_as_candidate(sources[best]).rstrip("\n") + "\n"  # the closing fence on its own line
        return Reply(text=f"The reference, as ModelNew.\n\n```python\n{code}```\n")

    return respond


async def run(out: Path, tasks: list[Path], gpu_memory_gb: float | None, jobs: int, device: str = "cuda"
              ) -> dict[str, Any]:
    os.environ[KEY_ENV] = "scripted-not-a-key"
    with ScriptedLLMServer([responder_for(tasks)] * (len(tasks) * 6)) as server:
        flat: dict[str, Any] = {"eval.device": device, "session.rounds": 1, "session.mode": "auto",
                                "session.format": "nvrtc", "run.folder": str(out / "runs"), "budget.dollars": 10.0,
                                "ncu.enabled": False, "timing.trials": 5, "timing.min_time_ms": 0.0,
                                "timing.warmup_ms": 0.0, "timing.host_trials": 3}
        if gpu_memory_gb:
            flat["run.gpu_memory_gb"] = gpu_memory_gb
        for role in ("coder", "judge"):
            for k, v in {"provider": "openai-compatible", "model": "scripted", "base_url": server.base_url_compat,
                         "api_key_env": KEY_ENV, "timeout_s": 60.0, "max_retries": 0}.items():
                flat[f"{role}.{k}"] = v
        config = load_config(None, flat, use_user_config=False)
        batch = Batch.create(out / "runs", tasks, config)
        summary = await run_batch(batch, on_event=lambda task, e: None, jobs=jobs)
    rows = []
    for row in summary.rows:
        rounds = list(RunStore(Path(row.run_dir), read_only=True).rounds()) if row.run_dir else []
        for rec in rounds:
            m = rec.result.memory if rec.result else None
            rows.append({"task": Path(row.task).stem, "status": row.status, "outcome": rec.outcome,
                         "ref_gib": m.reference_peak_bytes / GIB if m and m.reference_peak_bytes else None,
                         "peak_gib": m.eval_peak_bytes / GIB if m and m.eval_peak_bytes else None,
                         "ratio": m.ratio if m else None,
                         "message": rec.result.message[:160] if rec.result else ""})
        if not rounds:
            rows.append({"task": Path(row.task).stem, "status": row.status, "outcome": row.stop_reason,
                         "ref_gib": None, "peak_gib": None, "ratio": None, "message": row.message[:160]})
    table = format_summary(summary)
    return {"rows": rows, "summary_table": table, "oom": sum(r["outcome"] == "oom" for r in rows),
            "wall_s": summary.wall_s}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--folder", default=str(DEFAULT_FOLDER))
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--jobs", type=int, default=4)
    ap.add_argument("--gpu-memory-gb", type=float)
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: a smoke test of the script")
    ap.add_argument("--list", help="problem paths relative to --folder instead of the largest level-1 ones")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.list:
        tasks = [Path(args.folder) / ln.strip() for ln in Path(args.list).read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")]
    else:
        tasks = largest(Path(args.folder), args.count)
    report = asyncio.run(run(out, tasks, args.gpu_memory_gb, args.jobs, args.device))
    (out / "batch_largest.json").write_text(json.dumps(report, indent=1, default=str))
    print(report["summary_table"])
    print(f"\n{'task':40s} {'status':8s} {'outcome':18s} {'ref GiB':>8s} {'peak GiB':>8s} {'ratio':>6s}")
    for r in report["rows"]:
        def g(v: Any) -> str:
            return "-" if v is None else f"{v:.2f}"

        print(f"{r['task'][:40]:40s} {r['status']:8s} {r['outcome']:18s} {g(r['ref_gib']):>8s} {g(r['peak_gib']):>8s} "
              f"{g(r['ratio']):>6s}" + (f"  | {r['message']}" if r["outcome"] not in ("integrity_failure", "ok") else ""))
    print(f"batch of {len(tasks)} problems ({'from --list' if args.list else 'the largest of level 1'}), "
          f"{args.jobs} sessions at once: "
          f"{report['oom']} oom outcomes, wall {report['wall_s']:.0f} s")
    return 0 if report["oom"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
