"""Which tensors make one KernelBench problem's evaluation peak (the memory rule's outliers).

Evaluates the problem's own `Model`, renamed `ModelNew`, as the candidate (as bench/kernelbench_sweep.py
does) in one worker that records the allocator's history (engine/worker/peak_trace.py), then prints the
reference's peak, the evaluation's peak and phase peaks, and the largest tensors alive at the peak with
the frames that made them.

    python bench/peak_trace.py ../shared/kernelbench/level1/97_ScaledDotProductAttention.py --gpu-memory-gb 24
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

GIB = 1 << 30


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task", help="a KernelBench problem file")
    ap.add_argument("--gpu-memory-gb", type=float, default=None, help="the per-worker cap (as the sweep's)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="cpu: no trace, the peaks only")
    ap.add_argument("--out", default=None, help="folder for peak_trace.json and the report (a temporary one)")
    args = ap.parse_args(argv)
    task = Path(args.task).resolve()
    if not task.is_file():
        print(f"{task}: no such problem file", file=sys.stderr)
        return 2
    out = Path(args.out or tempfile.mkdtemp(prefix="peak_trace-")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    candidate = out / "candidate.py"
    candidate.write_text(re.sub(r"\bModel\b", "ModelNew", task.read_text(encoding="utf-8")), encoding="utf-8")
    env = dict(os.environ, CUDAFORGE_MEMORY_HISTORY=str(out))
    command = [sys.executable, "-m", "cudaforge.engine.cli", "eval", str(task), str(candidate), "--json",
               "--device", args.device]
    if args.gpu_memory_gb:
        command += ["--gpu-memory-gb", str(args.gpu_memory_gb)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    try:
        report = json.loads(done.stdout)
    except ValueError:
        print(f"cudaforge eval gave no JSON (exit {done.returncode}): {done.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    (out / "result.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    mem = report.get("memory") or {}
    ref, peak = mem.get("reference_peak_bytes") or 0, mem.get("eval_peak_bytes") or 0
    print(f"{task.parent.name}/{task.stem}: outcome {report.get('outcome')}")
    print(f"ratio {mem.get('ratio')} (peak {peak / GIB:.2f} GiB, reference {ref / GIB:.2f} GiB)")
    phases = mem.get("phase_peak_bytes") or {}
    print("phase peaks (GiB): " + ", ".join(f"{k} {v / GIB:.2f}" for k, v in phases.items() if v))
    trace_file = out / "peak_trace.json"
    if not trace_file.is_file():
        error = out / "peak_trace.error"
        print("no peak trace: " + (error.read_text().strip() if error.is_file() else "the worker wrote none"))
        return 1
    for k, device in enumerate(json.loads(trace_file.read_text())["devices"]):
        print(f"device trace {k}: {device['peak_bytes'] / GIB:.2f} GiB at its peak, "
              f"{device['live_at_peak']} allocations live; the largest:")
        for entry in device["largest"]:
            print(f"  {entry['bytes'] / GIB:7.3f} GiB  " + " <- ".join(entry["frames"][:4]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
