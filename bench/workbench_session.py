"""One review-mode workbench session on the GPU, driven by Pilot (headless), with SCRIPTED LLM replies.

The real app, Session, evaluator (CUDA compile, verification, timing) and Nsight Compute profiler run
on the local GPU; the Coder's and Judge's replies come from tests/llm_server.py (the real openai SDK
over 127.0.0.1), so no API key is needed and the session is repeatable. Every decision is approved
with the `a` key, as a person would; between keys the pane keys are pressed to measure the worst
key-press-to-render latency while rounds run. Saves an SVG screenshot (the best round's NCU pane)
and prints a summary with the latency figure.

    python bench/workbench_session.py docs/screenshot.svg [--task examples/softmax/task.py] [--gpu 0] [--triton]

--triton: the Coder is asked for (and replies with) Triton candidates, triton_kernel.py beside the task.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "bench"))

from cudaforge.tui.app import WorkbenchApp  # noqa: E402
from cudaforge.tui.cli import LaunchSpec  # noqa: E402
from llm_server import Reply, ScriptedLLMServer  # noqa: E402
from screenshot import save_best_round  # noqa: E402

KEY_ENV = "CF_BENCH_SCRIPTED_KEY"
PANE_KEYS = ("2", "3", "4", "5", "1", "0")


def coder(source: str, note: str) -> Reply:
    return Reply(text=f"{note} (scripted reply)\n\n```python\n{source}```\n", input_tokens=8000, output_tokens=3000)


def judge(method: str) -> Reply:
    return Reply(text=json.dumps({"bottleneck": "DRAM bandwidth (scripted reply)", "method": method,
                                  "plan": "keep the kernel and re-measure; this bench scripts the Judge",
                                  "evidence": ["dram__throughput.avg.pct_of_peak_sustained_elapsed"]}),
                 input_tokens=8000, output_tokens=500)


def write_config(folder: Path, base_url: str, gpu: int, rounds: int, device: str, fmt: str | None = None) -> Path:
    llm = (f'provider = "openai-compatible"\nmodel = "scripted"\nbase_url = "{base_url}"\n'
           f'api_key_env = "{KEY_ENV}"\ntimeout_s = 60.0\nmax_retries = 0\n')
    text = (f'# bench/workbench_session.py: CUDA device, scripted Coder and Judge\n[eval]\ndevice = "{device}"\ngpu = {gpu}\n\n'
            f'[session]\nrounds = {rounds}\nformat = "{fmt or ("nvrtc" if device == "cuda" else "cpu")}"\n\n[run]\nfolder = "{folder / "runs"}"\n\n'
            f"[coder]\n{llm}\n[judge]\n{llm}")
    path = folder / "cudaforge.toml"
    path.write_text(text, encoding="utf-8")
    return path


async def drive(app: WorkbenchApp, svg: Path, timeout: float, pane: str) -> None:
    async with app.run_test(size=(160, 48)) as pilot:
        end = time.monotonic() + timeout
        i = 0
        while app.model.stopped is None:
            if time.monotonic() > end:
                raise SystemExit(f"timed out; log: {app.log_pane.entries[-10:]}")
            if app._pending() is not None:
                await pilot.pause(0.3)  # the person reads the draft
                await pilot.press("a")
            else:
                await pilot.press(PANE_KEYS[i % len(PANE_KEYS)])  # use the UI while the round runs
                i += 1
                await pilot.pause(0.2)
        await save_best_round(app, pilot, svg, pane,
                              f"cudaforge-tui ({app.model.gpu_name or 'GPU'} session, scripted LLM replies)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("svg", type=Path, help="where to save the SVG screenshot")
    p.add_argument("--task", type=Path, default=REPO / "examples" / "softmax" / "task.py")
    p.add_argument("--candidate", type=Path, help="the Coder's module (default: nvrtc.py beside the task)")
    p.add_argument("--gpu", type=int, default=0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                   help="cpu: the same flow with C++ candidates (a --candidate cpu.py), no NCU")
    p.add_argument("--story", action="store_true",
                   help="softmax only: the scripted 4-round story of bench/scripted_session.py (compile error, repair, "
                        "optimize, regression)")
    p.add_argument("--triton", action="store_true", help="Triton replies: [session] format = \"triton\" and "
                   "triton_kernel.py beside the task as the Coder's module")
    p.add_argument("--copy-run", type=Path, help="also write the run folder as a .tgz here")
    p.add_argument("--pane", default=None, help="pane key for the screenshot (default: 4 = NCU on cuda, 1 on cpu)")
    args = p.parse_args()
    default = "triton_kernel.py" if args.triton else "nvrtc.py" if args.device == "cuda" else "cpu.py"
    candidate = (args.candidate or args.task.parent / default).read_text(encoding="utf-8")
    os.environ[KEY_ENV] = "scripted-not-a-key"
    script = [coder(candidate, "Seed: one thread per element")]
    for n in range(2, args.rounds + 1):
        script += [judge("vectorized 128-bit loads"), coder(candidate + f"\n# round {n}\n", "Same kernel, re-measured")]
    if args.story:
        from scripted_session import softmax_script

        script = softmax_script()
        args.rounds = 4
    folder = Path(tempfile.mkdtemp(prefix="cf-tui-bench-"))
    with ScriptedLLMServer(script) as server:
        config = write_config(folder, server.base_url_compat, args.gpu, args.rounds, args.device,
                              "triton" if args.triton else None)
        app = WorkbenchApp(LaunchSpec(task=str(args.task), config_file=str(config), mode="review",
                                      use_user_config=False), cwd=folder)
        pane = args.pane or ("4" if args.device == "cuda" else "1")
        asyncio.run(drive(app, args.svg, args.timeout, pane))
    m = app.model
    print("| round | kind | outcome | speedup | profile |")
    print("| --- | --- | --- | --- | --- |")
    for n, v in sorted(m.rounds.items()):
        prof = "none" if v.profile is None else ("ok" if v.profile.ok else v.profile.error_kind)
        sp = f"{v.speedup:.2f}x" if v.speedup else "—"
        print(f"| {n} | {v.kind} | {v.status} | {sp} | {prof} |")
    print(f"GPU: {m.gpu_name}; stop: {m.stopped.reason if m.stopped else '?'}; run folder: {m.run_dir}")
    print(f"LLM replies: scripted ({len(server.requests)} requests)")
    print(app.latency.summary())
    print(f"screenshot: {args.svg}")
    if args.copy_run and m.run_dir:
        import tarfile

        args.copy_run.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(args.copy_run, "w:gz") as tar:
            tar.add(m.run_dir, arcname=Path(m.run_dir).name)
        print(f"run folder archived: {args.copy_run}")
    return 0 if m.stopped is not None and m.stopped.reason == "max_rounds" else 1


if __name__ == "__main__":
    sys.exit(main())
