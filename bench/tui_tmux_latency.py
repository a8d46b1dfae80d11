"""Key-press-to-render latency in a real terminal, driven as a person drives it.

tmux runs `cudaforge-tui TASK --mode review --device cpu` (the CI task, its C++ candidate) with the
Coder and Judge answered at once by the scripted OpenAI-compatible server (tests/llm_server.py, real
SDK). While the rounds run, a pane key is sent every `--pane-every` seconds and `a` (approve) every
`--approve-every` seconds (when a decision is waiting, or not: a stray `a` is a warning, also drawn).
The app records one sample per key press (tui/latency.py: key event created -> refresh after it was
handled) and writes them at exit (CUDAFORGE_TUI_LATENCY=<file>.json); CUDAFORGE_TUI_STALLS=<file>
also records what blocked the event loop for more than 40 ms.

Usage: python bench/tui_tmux_latency.py [--seconds 60] [--rounds 6] [--json OUT] [--stalls OUT]
Prints a short table last. Needs tmux; CPU only (about --seconds + 30 s).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from llm_server import ScriptedLLMServer  # noqa: E402
from session_kit import CORRECT, KEY, KEY_ENV, TASK, coder_reply, judge_optimize_reply  # noqa: E402
from tui_kit import unique, write_config  # noqa: E402

PANE_KEYS = ("2", "3", "4", "5", "6", "1", "down", "up")


def tmux(socket: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, check=check, timeout=20)


def quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def summarize(samples: list[tuple[str, float]]) -> dict[str, object]:
    ms = [v for _, v in samples]
    approve = [v for k, v in samples if k == "a"]
    worst = max(samples, key=lambda s: s[1]) if samples else ("", 0.0)
    return {"keys": len(ms), "worst_ms": worst[1], "worst_key": worst[0],
            "median_ms": statistics.median(ms) if ms else None, "p95_ms": percentile(ms, 0.95) if ms else None,
            "over_100ms": sum(v > 100 for v in ms), "approve_keys": len(approve),
            "approve_worst_ms": max(approve) if approve else None,
            "approve_median_ms": statistics.median(approve) if approve else None}


def run(seconds: float, rounds: int, pane_every: float, approve_every: float, stalls_path: str) -> dict[str, object]:
    folder = Path(tempfile.mkdtemp(prefix="cf-tmux-latency-"))
    cache = Path(os.environ.get("CUDAFORGE_TEST_CACHE") or folder / "cache")
    socket = f"cf-bench-{os.getpid()}"
    script = []
    for i in range(rounds + 2):
        script += [coder_reply(unique(CORRECT, f"round {i}")), judge_optimize_reply(f"idea {i}")]
    samples_path = folder / "latency.json"
    with ScriptedLLMServer(script) as server:
        config = write_config(folder, cache, server, rounds=rounds)
        env = {KEY_ENV: KEY, "TERM": "xterm-256color", "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
               "CUDAFORGE_TUI_LATENCY": str(samples_path)}
        if stalls_path:
            env["CUDAFORGE_TUI_STALLS"] = stalls_path
        command = [sys.executable, "-m", "cudaforge.tui.app", str(TASK), "--config", str(config),
                   "--no-user-config", "--mode", "review"]
        line = (f"cd {quote(str(folder))} && env -u COLUMNS -u LINES "
                + " ".join(f"{k}={quote(v)}" for k, v in env.items()) + " " + " ".join(quote(c) for c in command)
                + "; echo exited $?; sleep 60")
        tmux(socket, "-f", "/dev/null", "new-session", "-d", "-s", "cf", "-x", "160", "-y", "45", "sleep 600")
        try:
            tmux(socket, "set-option", "-t", "cf", "window-size", "manual")
            tmux(socket, "resize-window", "-t", "cf", "-x", "160", "-y", "45")
            tmux(socket, "respawn-pane", "-k", "-t", "cf", line)
            end = time.monotonic() + 300
            while "Round 1 waits" not in (screen := tmux(socket, "capture-pane", "-p", "-t", "cf").stdout):
                if time.monotonic() > end:
                    raise SystemExit(f"the first decision never appeared; screen:\n{screen}")
                time.sleep(0.2)
            start = time.monotonic()
            next_approve = start
            presses = 0
            while time.monotonic() - start < seconds:
                now = time.monotonic()
                if now >= next_approve:
                    tmux(socket, "send-keys", "-t", "cf", "a")
                    next_approve = now + approve_every
                else:
                    tmux(socket, "send-keys", "-t", "cf", PANE_KEYS[presses % len(PANE_KEYS)])
                presses += 1
                screen = tmux(socket, "capture-pane", "-p", "-t", "cf").stdout
                if "session stopped" in screen:
                    break
                time.sleep(pane_every)
            elapsed = time.monotonic() - start
            tmux(socket, "send-keys", "-t", "cf", "C-q")
            end = time.monotonic() + 60
            while "exited " not in (after := tmux(socket, "capture-pane", "-p", "-J", "-t", "cf").stdout):
                if time.monotonic() > end:
                    raise SystemExit("the app did not exit")
                time.sleep(0.2)
        finally:
            tmux(socket, "kill-server", check=False)
    if samples_path.exists():
        samples = [(k, float(v)) for k, v in json.loads(samples_path.read_text())["samples_ms"]]
    else:  # an app without the per-sample dump (older code): only its printed summary
        import re

        m = re.search(r"over (\d+) keys: worst ([\d.]+) ms \(key '([^']*)'\), median ([\d.]+) ms", after)
        if m is None:
            raise SystemExit(f"no latency summary on the screen:\n{after}")
        shutil.rmtree(folder, ignore_errors=True)
        return {"keys": int(m[1]), "worst_ms": float(m[2]), "worst_key": m[3], "median_ms": float(m[4]),
                "p95_ms": None, "over_100ms": None, "approve_keys": None, "approve_worst_ms": None,
                "approve_median_ms": None, "seconds": round(elapsed, 1), "rounds_evaluated": None, "samples": []}
    runs = [p for p in (folder / "runs").iterdir() if p.is_dir()]
    finished = 0
    if runs:
        finished = sum(1 for r in (runs[0] / "rounds").iterdir() if (r / "eval.json").exists())
    out = summarize(samples)
    out.update(seconds=round(elapsed, 1), rounds_evaluated=finished, samples=samples)
    shutil.rmtree(folder, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--pane-every", type=float, default=0.3)
    ap.add_argument("--approve-every", type=float, default=4.5)
    ap.add_argument("--json", default="")
    ap.add_argument("--stalls", default="", help="write what blocked the event loop (> 40 ms) here")
    args = ap.parse_args()
    if shutil.which("tmux") is None:
        print("tmux is not installed", file=sys.stderr)
        return 3
    res = run(args.seconds, args.rounds, args.pane_every, args.approve_every, args.stalls)
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=1))
    print("| seconds | rounds evaluated | keys | worst ms (key) | median ms | p95 ms | > 100 ms | `a` keys | "
          "`a` worst ms | `a` median ms |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")

    def f(v: object) -> str:
        return f"{v:.0f}" if isinstance(v, float) else str(v)

    print(f"| {res['seconds']} | {res['rounds_evaluated']} | {res['keys']} | {f(res['worst_ms'])} "
          f"({res['worst_key']}) | {f(res['median_ms'])} | {f(res['p95_ms'])} | {res['over_100ms']} | "
          f"{res['approve_keys']} | {f(res['approve_worst_ms'])} | {f(res['approve_median_ms'])} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
