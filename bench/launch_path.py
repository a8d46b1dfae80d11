"""Is a slow launch path a property of the CPU a timing thread runs on, of its process, or of a busy neighbour?

The H200's fidelity misses (bench/RESULTS.md, sessions 18-19) were whole event windows in which nearly every
call of a ~70 µs kernel was launched late: the host's path from the flush's launch to the call's (the
flush's ~50 µs on the GPU cover it) took longer than the flush, in one process of five, while the same
kernel's CUPTI time did not move. Those processes' host path was about twice as slow as the others', with no
other process taking their core. A host that falls behind the GPU between calls does not do that (the GPU
then starts each flush idle, and the flush still covers the launch); a slow launch path does.

This measures that path where it can vary. For each of several fresh processes (run one after another), with
its timing thread pinned to each CPU in turn: a fixed pure-Python loop (the CPU's speed for plain host work)
and an event window of the gelu example's reference and nvrtc candidate with the worker's own timer
(engine/worker/timing.py: flush, start event, call, end event; host_load's queue_us is that path, per side),
with each side's late share and median event time. Then, with `--pairs`, the same window on one CPU while a
busy loop runs pinned on each other CPU in turn: a CPU whose load slows the window's path is a hidden sibling
(the guest sees 16 single-thread cores; a hypervisor may place two of them on one physical core).

Reading it: a spread by CPU (some CPUs slow in every process) asks for the timing thread on a fast CPU; a
spread by process (a process slow on every CPU) asks what differs between processes: the allocator setting
is alternated between them with `--alloc-ab`, and with `--fork-ab` every other process is forked from this
one after it imported what the engine's zygote imports (engine/evaluation/zygote.py: torch and the
evaluation code, never CUDA) instead of started fresh. The misses began with the zygote (session 16: every
spread of session 15's 8-in-flight run was within 1.0 %). A sibling in the pairs asks to keep it idle.

    python bench/launch_path.py [--processes 4] [--cpus 0-15] [--calls 300] [--pairs 0,8] [--alloc-ab] [--fork-ab]
                                [--json OUT]
    python bench/launch_path.py --device cpu ...   # the same machinery without a GPU (host clock; no launch path)
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import statistics
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent
ALLOC_CONFS = ("expandable_segments:True", "")  # the workers' default (evaluator.ALLOC_CONF), then PyTorch's own
PY_LOOP_N = 20_000
FORK_TIMEOUT_S = 600.0


def parse_cpus(text: str) -> list[int]:
    """"0-3,8" -> [0, 1, 2, 3, 8]; "" -> the CPUs this process may run on."""
    if not text:
        return sorted(os.sched_getaffinity(0))
    cpus: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


def py_loop_us(repeats: int = 15) -> float:
    """Median µs of a fixed pure-Python loop: plain host speed on the CPU the thread is on."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        total = 0
        for k in range(PY_LOOP_N):
            total += k
        times.append((time.perf_counter() - t0) * 1e6)
    return round(statistics.median(times), 1)


def _sides(device: str) -> dict[str, Callable[[], Any]]:
    import torch

    if device == "cuda":
        sys.path.insert(0, str(ROOT))
        from event_gap import example_sides  # beside this file

        return example_sides("gelu")
    x = torch.randn(1 << 14)  # the host clock times the call itself: a small one keeps the CPU run short
    return {"reference": lambda: torch.nn.functional.gelu(x, approximate="tanh"),
            "candidate": lambda: torch.nn.functional.gelu(x)}


def _window(timer: Any, sides: dict[str, Callable[[], Any]], calls: int) -> dict[str, Any]:
    samples = timer.event_times(sides, warmup=10, trials=calls, warmup_ms=25.0)
    load = timer.host_load
    return {"event_us": {s: round(statistics.median(v) * 1e3, 2) for s, v in samples.items()},
            "late": timer.late_launches(),
            "queue_us": dict(load.queue_us) if load is not None else {},
            "iteration_us": dict(load.iteration_us) if load is not None else {},
            "on_cpu": round(load.cpu_s / load.wall_s, 3) if load is not None and load.wall_s > 0 else None,
            "preemptions": load.involuntary_switches if load is not None else None}


def _busy(cpu: int) -> subprocess.Popen[bytes]:
    code = (f"import os\nos.sched_setaffinity(0, {{{cpu}}})\n"
            "while True:\n    pass\n")
    return subprocess.Popen([sys.executable, "-c", code])


def child(device: str, cpus: list[int], calls: int, pairs: list[int]) -> dict[str, Any]:
    """One process's rows: per CPU its loop speed and window; per pair (window CPU, busy CPU) the window."""
    import torch
    from cudaforge.engine.worker import timing

    timing.capture_clocks()
    dev = torch.device(device)
    l2 = int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20)) if device == "cuda" else 0
    timer = timing.Timer(dev, device == "cuda", l2)
    rows: list[dict[str, Any]] = []
    pair_rows: list[dict[str, Any]] = []
    with torch.no_grad():
        sides = _sides(device)
        for cpu in cpus:
            os.sched_setaffinity(0, {cpu})
            rows.append({"cpu": cpu, "py_loop_us": py_loop_us(), **_window(timer, sides, calls)})
        for cpu in pairs:
            os.sched_setaffinity(0, {cpu})
            for other in cpus:
                if other == cpu:
                    continue
                busy = _busy(other)
                try:
                    time.sleep(0.05)  # the loop is running
                    pair_rows.append({"cpu": cpu, "busy_cpu": other, "py_loop_us": py_loop_us(),
                                      **_window(timer, sides, calls)})
                finally:
                    busy.kill()
                    busy.wait()
    return {"pid": os.getpid(), "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "rows": rows,
            "pairs": pair_rows, "forked": False}


def forked_child(device: str, cpus: list[int], calls: int, pairs: list[int], alloc_conf: str) -> dict[str, Any]:
    """One process forked from this one (which imported as the zygote does, no CUDA): its rows, through a pipe.
    A child that does not answer within FORK_TIMEOUT_S is killed (a lock another thread held at the fork)."""
    if threading.active_count() > 1:
        raise RuntimeError("this process runs threads: a fork would copy their locks held (run the bench alone)")
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: CUDA is first initialized here, as in a forked spare
        os.close(read_end)
        code = 1
        try:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)  # the spare's environment is its own again
            os.environ["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
            with os.fdopen(write_end, "w") as out:
                out.write(json.dumps({**child(device, cpus, calls, pairs), "forked": True}))
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + FORK_TIMEOUT_S
    with os.fdopen(read_end, "rb") as src:
        while True:
            ready, _, _ = select.select([src], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise RuntimeError(f"the forked process {pid} gave no result within {FORK_TIMEOUT_S:.0f} s: killed")
            chunk = os.read(src.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    text = b"".join(chunks).decode()
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not text:
        raise RuntimeError(f"the forked process {pid} failed (status {status})")
    return json.loads(text)


def zygote_imports(device: str) -> None:
    """What the engine's zygote imports before it forks a spare (never CUDA: NVML's device count)."""
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    from cudaforge.engine.worker.entry import preload, preload_counting

    preload(device)
    preload_counting()


def _median(values: list[Any]) -> float | None:
    present = [v for v in values if v is not None]
    return round(statistics.median(present), 1) if present else None


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def _side_value(row: dict[str, Any], key: str, side: str) -> float | None:
    return (row.get(key) or {}).get(side)


def summarize(processes: list[dict[str, Any]], side: str = "reference") -> str:
    """Per process and per CPU: the median of the loop time, the path (queue_us) and the late share, for one
    side; then whether the path's spread lies between processes or between CPUs; then the pairs' slowest."""
    lines = [f"side: {side}; path = host µs from the flush's launch to the end event's (timing.HostLoad.queue_us)",
             "| process | alloc conf | loop µs | path µs (min-max over CPUs) | late (median) | event µs |",
             "| --- | --- | --- | --- | --- | --- |"]
    by_cpu: dict[int, list[dict[str, Any]]] = {}
    spreads: dict[str, list[float | None]] = {"process path": [], "process loop": [], "CPU path": [], "CPU loop": []}
    for k, p in enumerate(processes):
        rows = p["rows"]
        paths = [v for v in (_side_value(r, "queue_us", side) for r in rows) if v is not None]
        loop = _median([r["py_loop_us"] for r in rows])
        spreads["process path"].append(_median(paths))
        spreads["process loop"].append(loop)
        extent = f" ({min(paths):.1f}-{max(paths):.1f})" if paths else ""
        how = "forked" if p.get("forked") else "fresh"
        lines.append(f"| {k} (pid {p['pid']}, {how}) | {p['alloc_conf'] or '(none)'} | {_fmt(loop)} "
                     f"| {_fmt(_median(paths))}{extent} | {_fmt(_median([_side_value(r, 'late', side) for r in rows]))} "
                     f"| {_fmt(_median([_side_value(r, 'event_us', side) for r in rows]))} |")
        for r in rows:
            by_cpu.setdefault(r["cpu"], []).append(r)
    lines += ["", "| CPU | loop µs | path µs (median over processes) | late (median) |", "| --- | --- | --- | --- |"]
    alone: dict[int, tuple[float | None, float | None]] = {}  # per CPU: (path, loop), medians over processes
    for cpu in sorted(by_cpu):
        rows = by_cpu[cpu]
        path = _median([_side_value(r, "queue_us", side) for r in rows])
        loop = _median([r["py_loop_us"] for r in rows])
        alone[cpu] = (path, loop)
        spreads["CPU path"].append(path)
        spreads["CPU loop"].append(loop)
        lines.append(f"| {cpu} | {_fmt(loop)} | {_fmt(path)} | {_fmt(_median([_side_value(r, 'late', side) for r in rows]))} |")
    lines += ["", "spread (max/min of the medians): " + ", ".join(
        f"{what} {_ratio(values)}" for what, values in spreads.items())]
    pairs = [r for p in processes for r in p["pairs"]]
    if pairs:
        worst = sorted(pairs, key=lambda r: (_side_value(r, "queue_us", side) or 0.0, r["py_loop_us"]), reverse=True)
        lines += ["", "pairs, the five slowest (window CPU + busy CPU: path µs, alone; loop µs, alone): "
                  + "; ".join(f"{r['cpu']}+{r['busy_cpu']}: {_fmt(_side_value(r, 'queue_us', side))}, "
                              f"{_fmt(alone.get(r['cpu'], (None, None))[0])}; {r['py_loop_us']:g}, "
                              f"{_fmt(alone.get(r['cpu'], (None, None))[1])}" for r in worst[:5])]
    return "\n".join(lines)


def _has_cuda() -> bool:
    """A CUDA device, asked without initializing CUDA here (NVML's count): forks made later can still use it."""
    env = {**os.environ, "PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
    done = subprocess.run([sys.executable, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                          env=env, capture_output=True, timeout=300)
    return done.returncode == 0


def _ratio(values: list[float | None]) -> str:
    positive = [v for v in values if v is not None and v > 0]
    return f"{max(positive) / min(positive):.2f}x" if positive else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--processes", type=int, default=4, help="fresh processes, one after another")
    ap.add_argument("--cpus", default="", help="CPUs to pin the timing thread to, e.g. 0-15 (default: all allowed)")
    ap.add_argument("--calls", type=int, default=300, help="timed calls per side per window")
    ap.add_argument("--pairs", default="", help="window CPUs for the busy-neighbour test, e.g. 0,8 (first process)")
    ap.add_argument("--alloc-ab", action="store_true", help="alternate the processes' PYTORCH_CUDA_ALLOC_CONF "
                                                            "between the workers' default and none")
    ap.add_argument("--fork-ab", action="store_true", help="every other process forked from this one after the "
                                                           "zygote's imports, the others started fresh")
    ap.add_argument("--json", default="")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    try:
        cpus = parse_cpus(args.cpus)
        pairs = parse_cpus(args.pairs) if args.pairs else []
    except ValueError:
        print(f"launch_path: --cpus/--pairs must look like 0-3,8 (got {args.cpus!r} / {args.pairs!r})", file=sys.stderr)
        return 2
    if args.child:
        print(json.dumps(child(args.device, cpus, args.calls, pairs)))
        return 0
    if args.fork_ab:
        zygote_imports(args.device)  # before any CUDA call in this process: its forks initialize their own
    if args.device == "cuda" and not _has_cuda():
        print("launch_path: no CUDA device (--device cpu runs the machinery on the host)", file=sys.stderr)
        return 3
    processes: list[dict[str, Any]] = []
    for k in range(args.processes):
        alloc_conf = ALLOC_CONFS[k % 2] if args.alloc_ab else os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ALLOC_CONFS[0])
        own_pairs = pairs if k == 0 else []
        if args.fork_ab and (k // (2 if args.alloc_ab else 1)) % 2 == 1:  # each allocator setting both ways
            try:
                processes.append(forked_child(args.device, cpus, args.calls, own_pairs, alloc_conf))
            except RuntimeError as exc:
                print(f"launch_path: process {k}: {exc}", file=sys.stderr)
                return 1
            continue
        env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": alloc_conf}
        env.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--device", args.device,
               "--cpus", ",".join(map(str, cpus)), "--calls", str(args.calls)]
        if own_pairs:
            cmd += ["--pairs", ",".join(map(str, own_pairs))]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            print(f"launch_path: process {k} failed (exit {done.returncode}): {done.stderr.strip()[-400:]}",
                  file=sys.stderr)
            return 1
        processes.append(json.loads(done.stdout.strip().splitlines()[-1]))
    for side in ("reference", "candidate"):
        print(summarize(processes, side), end="\n\n", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": args.device, "calls": args.calls, "processes": processes},
                                              indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
