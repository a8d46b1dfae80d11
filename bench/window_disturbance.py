"""What does other processes' work do to a timed window? The evidence for what must hold the GPU lock.

A timed window (engine/worker/timing.py) holds the GPU alone; everything else of ours runs side by side as
a reader, and host work holds nothing (docs/ARCHITECTURE.md, "Sharing the GPU"). Whether a step needs a hold
is a question of fact: does it change another process's kernel times? This times the gelu example's
reference and nvrtc candidate with the window's own timer (engine/worker/timing.py Timer.event_times: the
flush, start event, call, end event, back to back, interleaved) while another process does one thing over
and over:

- idle: nothing (measured first and last: the drift between the two is the noise floor);
- kernel: tiny kernels in its own context, synchronized each time (the positive control: work the lock
  keeps out of windows);
- context: creates and destroys a CUDA context (the driver API's primary context, a 1 MiB allocation in it),
  as a spare's warm-up does once;
- spare-context: SPARE_CONTEXT_PROCESSES processes, each forking children that make their context with the
  engine's own open_context (engine/gpu/context.py, what a spare and a worker do without a hold) and exit,
  as a sweep's spares do several at once; its window is SPARE_CONTEXT_CALLS x --calls long, so that many
  creations fall inside it;
- alloc: allocates 2 GiB and gives it back to the driver (cudaMalloc / cudaFree: a worker's memory release);
- pin: page-locks and unlocks 1 GiB of host memory (cudaHostRegister / Unregister: the host buffers' trim);
- profiler: starts and stops a CUPTI session with no kernels (the kernel check's and the timer's stop);
- copy: 256 MiB device-to-host copies into page-locked memory (a reader's host copies);
- cpu: one busy Python loop per core (a loaded host: does the candidate's launch path, longer than the
  reference's, fall behind the flush that covers it? session 16's gelu outlier: its events 54 % slower in
  one run of eight started at once, its reference's not).

Per condition: each side's median and p90 event time, their ratios to idle's, the share of calls over 1.1x
idle's median, the share launched late (Timer.late_launches), the timing thread's time on a CPU and its
preemptions in the window (Timer.host_load), and how many times the disturber did its thing meanwhile.

With `--measure memory` the window is not timed kernels but this process's own device-memory work, what a
reader's steps do under their holds (a finished evaluation's release, a reference's first allocations):
each "call" allocates `--alloc-mib` of device memory and gives it back to the driver (cudaMalloc/cudaFree
through PyTorch's allocator, synchronized), timed on the host clock. Does another process's context
creation, which holds no lock, slow those (driver work, not kernels)?

    python bench/window_disturbance.py [--calls 2000] [--only context,alloc] [--json OUT]
    python bench/window_disturbance.py --measure memory --only spare-context,context [--calls 200]
    python bench/window_disturbance.py --disturb ACTION --stop FILE --count FILE   # one disturber (internal)
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ACTIONS = ("kernel", "context", "spare-context", "alloc", "pin", "profiler", "copy", "cpu")
SPARE_CONTEXT_PROCESSES = 4  # a sweep's spares warm several at once
SPARE_CONTEXT_CALLS = 10  # one creation takes 0.1-0.5 s; the idle window of 2,000 calls a side, ~0.3 s
SLOW = 1.10  # a call over this multiple of idle's median counts as disturbed


def _driver_context_loop() -> Callable[[], None]:
    """One primary context created, used (1 MiB allocated and freed) and destroyed per call, driver API."""
    cuda = ctypes.CDLL("libcuda.so.1")
    if cuda.cuInit(0) != 0:
        raise RuntimeError("cuInit failed")
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)

    def once() -> None:
        ctx, ptr = ctypes.c_void_p(), ctypes.c_uint64()
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) != 0:
            raise RuntimeError("cuDevicePrimaryCtxRetain failed")
        cuda.cuCtxSetCurrent(ctx)
        cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20))
        cuda.cuMemFree_v2(ptr)
        cuda.cuCtxSetCurrent(None)
        cuda.cuDevicePrimaryCtxRelease_v2(dev)  # the last reference: the context is destroyed

    return once


def _forked_context_loop() -> Callable[[], None]:
    """One child forked per call (torch imported here, CUDA never initialized in this process) that makes its
    context with the engine's open_context and exits: the context goes with the process, as a spare's does."""
    import torch  # noqa: F401  the children start with it imported, as forked spares do
    from cudaforge.engine.gpu.context import context_is_current, open_context

    def once() -> None:
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                open_context(0)
                code = 0 if context_is_current() else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"open_context in a forked child exited {os.waitstatus_to_exitcode(status)}")

    return once


def _torch_loop(action: str) -> Callable[[], None]:
    import torch

    dev = torch.device("cuda", 0)
    torch.zeros(1, device=dev)  # this process's own context, made before "ready"
    torch.cuda.synchronize()
    if action == "kernel":
        x = torch.zeros(1, device=dev)
        return lambda: (x.add_(1), torch.cuda.synchronize())  # type: ignore[func-returns-value]
    if action == "alloc":
        def alloc() -> None:
            t = torch.empty(2 << 30, dtype=torch.uint8, device=dev)
            del t
            torch.cuda.empty_cache()
        return alloc
    if action == "pin":
        buf = torch.empty(1 << 30, dtype=torch.uint8)
        buf.fill_(1)  # the pages exist before they are locked
        cudart = torch.cuda.cudart()

        def pin() -> None:
            cudart.cudaHostRegister(buf.data_ptr(), buf.numel(), 0)
            cudart.cudaHostUnregister(buf.data_ptr())
        return pin
    if action == "profiler":
        from cudaforge.engine.observe import device_profile

        def session() -> None:
            with device_profile():
                pass
        return session
    if action == "copy":
        src = torch.empty(256 << 20, dtype=torch.uint8, device=dev)
        dst = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
        return lambda: (dst.copy_(src), torch.cuda.synchronize())  # type: ignore[func-returns-value]
    raise ValueError(f"unknown action {action!r}")


def disturb(action: str, stop: Path, count: Path) -> int:
    """The disturber's loop: print "ready", repeat `action` until `stop` exists, write how often to `count`."""
    if action == "cpu":
        def once() -> None:
            sum(range(10_000))
    elif action == "context":
        once = _driver_context_loop()
    elif action == "spare-context":
        once = _forked_context_loop()
    else:
        once = _torch_loop(action)
    print("ready", flush=True)
    n = 0
    try:
        while not stop.exists():
            once()
            n += 1
    finally:
        count.write_text(str(n))  # a disturber that failed still says how often it did its thing
    return 0


class Disturbers:
    """`processes` disturber subprocesses doing `action` while the window is timed (a context manager)."""

    def __init__(self, action: str, processes: int = 1) -> None:
        self.action, self.processes = action, processes
        self.folder = Path(tempfile.mkdtemp(prefix="cudaforge-disturb-"))
        self.procs: list[subprocess.Popen[str]] = []
        self.counts = 0

    def __enter__(self) -> Disturbers:
        stop = self.folder / "stop"
        for k in range(self.processes):
            self.procs.append(subprocess.Popen(
                [sys.executable, __file__, "--disturb", self.action, "--stop", str(stop),
                 "--count", str(self.folder / f"count{k}")], stdout=subprocess.PIPE, text=True))
        for proc in self.procs:
            line = proc.stdout.readline() if proc.stdout else ""
            if line.strip() != "ready":
                self._end(check=False)
                raise RuntimeError(f"disturber {self.action!r} did not start (exit {proc.poll()})")
        time.sleep(0.2)  # its loop is running
        return self

    def _end(self, check: bool = True) -> None:
        (self.folder / "stop").touch()
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in self.folder.glob("count*"):
            self.counts += int(f.read_text() or 0)
            f.unlink()
        (self.folder / "stop").unlink(missing_ok=True)
        self.folder.rmdir()
        failed = [p.returncode for p in self.procs if p.returncode != 0]
        if failed and check:  # the window was not disturbed as the row would say
            raise RuntimeError(f"disturber {self.action!r} failed (exit {failed[0]}) after {self.counts} times")

    def __exit__(self, *exc: object) -> None:
        self._end()


def window(timer: Any, sides: dict[str, Callable[[], Any]], calls: int) -> dict[str, list[float]]:
    """The timed window itself (engine/worker/timing.py Timer.event_times: flush, start event, call, end event,
    no synchronize in between; the sides interleaved, their order flipped every round). Samples in ms; the
    timer keeps the window's late launches and its host load."""
    return timer.event_times(sides, warmup=20, trials=calls)


def memory_window(dev: Any, calls: int, alloc_bytes: int) -> dict[str, list[float]]:
    """`calls` device allocations of `alloc_bytes` each given back to the driver at once, each timed (ms) on
    the host clock from the allocation to the end of the free, the device synchronized on both sides."""
    import torch

    samples: list[float] = []
    for _ in range(calls):
        torch.cuda.synchronize(dev)
        start = time.perf_counter()
        block = torch.empty(alloc_bytes, dtype=torch.uint8, device=dev)
        torch.cuda.synchronize(dev)
        del block
        torch.cuda.empty_cache()
        torch.cuda.synchronize(dev)
        samples.append((time.perf_counter() - start) * 1e3)
    return {"alloc_free": samples}


def summarize(name: str, samples: dict[str, list[float]], idle: dict[str, float] | None,
              count: int | None, timer: Any = None) -> dict[str, Any]:
    """One condition's row: per side median/p90 (µs), ratios to idle's medians, the share of slow calls; with
    the window's timer, the share of calls launched late and the timing thread's time on a CPU."""
    row: dict[str, Any] = {"condition": name, "disturbances": count}
    if timer is not None:
        row["late_launches"] = timer.late_launches()
        load = timer.host_load
        row["on_cpu"] = round(load.cpu_s / load.wall_s, 4) if load is not None and load.wall_s > 0 else None
        row["preemptions"] = load.involuntary_switches if load is not None else None
    for side, s in samples.items():
        med = statistics.median(s)
        p90 = statistics.quantiles(s, n=10)[-1] if len(s) >= 2 else s[0]
        row[f"{side}_median_us"] = round(med * 1e3, 2)
        row[f"{side}_p90_us"] = round(p90 * 1e3, 2)
        if idle is not None:
            row[f"{side}_ratio"] = round(med / idle[side], 4)
            row[f"{side}_slow_share"] = round(sum(v > SLOW * idle[side] for v in s) / len(s), 4)
    return row


def format_table(rows: list[dict[str, Any]], sides: list[str]) -> str:
    head = ["condition", "done", *[f"{s} {k}" for s in sides for k in ("median µs", "p90 µs", "/idle", "slow", "late")],
            "timer thread on a CPU", "preemptions"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['condition']} | {r['error']} |" + " |" * (len(head) - 2))
            continue
        cells = [r["condition"], "-" if r.get("disturbances") is None else str(r["disturbances"])]
        for s in sides:
            ratio, slow = r.get(f"{s}_ratio"), r.get(f"{s}_slow_share")
            late = (r.get("late_launches") or {}).get(s)
            cells += [f"{r[f'{s}_median_us']:.1f}", f"{r[f'{s}_p90_us']:.1f}",
                      "-" if ratio is None else f"{ratio:.3f}", "-" if slow is None else f"{slow:.1%}",
                      "-" if late is None else f"{late:.1%}"]
        on_cpu, preempted = r.get("on_cpu"), r.get("preemptions")
        cells += ["-" if on_cpu is None else f"{on_cpu:.0%}", "-" if preempted is None else str(preempted)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="timed calls of each side per condition")
    ap.add_argument("--only", default=",".join(ACTIONS), help="the conditions besides idle (comma-separated)")
    ap.add_argument("--example", default="gelu")
    ap.add_argument("--json", default="")
    ap.add_argument("--measure", choices=("kernels", "memory"), default="kernels",
                    help="what the window times: the example's kernels, or this process's device allocations and frees")
    ap.add_argument("--alloc-mib", type=int, default=2048, help="--measure memory: each allocation's size")
    ap.add_argument("--disturb", choices=ACTIONS, help=argparse.SUPPRESS)
    ap.add_argument("--stop", help=argparse.SUPPRESS)
    ap.add_argument("--count", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.disturb:
        return disturb(args.disturb, Path(args.stop), Path(args.count))
    actions = [a for a in args.only.split(",") if a]
    unknown = [a for a in actions if a not in ACTIONS]
    if unknown:
        print(f"window_disturbance: unknown condition {unknown[0]!r} (known: {', '.join(ACTIONS)})", file=sys.stderr)
        return 2
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from event_gap import example_sides  # beside this file

    if not torch.cuda.is_available():
        print("window_disturbance: no CUDA device", file=sys.stderr)
        return 3
    from cudaforge.engine.worker import timing

    dev = torch.device("cuda")
    memory = args.measure == "memory"
    timer = None
    if not memory:  # the worker's own timer, its flush sized as the worker sizes it (at least do_bench's 256e6 bytes)
        timing.capture_clocks()
        timer = timing.Timer(dev, True, int(getattr(torch.cuda.get_device_properties(dev), "L2_cache_size", 50 << 20)))
    with torch.no_grad():
        sides = None if memory else example_sides(args.example)
        names = ["alloc_free"] if sides is None else list(sides)

        def timed(calls: int) -> dict[str, list[float]]:
            return memory_window(dev, calls, args.alloc_mib << 20) if sides is None else window(timer, sides, calls)

        idle_samples = timed(args.calls)
        idle = {s: statistics.median(v) for s, v in idle_samples.items()}
        rows = [summarize("idle", idle_samples, None, None, timer)]
        for action in actions:
            try:
                processes = {"cpu": os.cpu_count() or 1, "spare-context": SPARE_CONTEXT_PROCESSES}.get(action, 1)
                calls = args.calls * (SPARE_CONTEXT_CALLS if action == "spare-context" else 1)
                with Disturbers(action, processes) as d:
                    samples = timed(calls)
            except RuntimeError as exc:  # a disturber that cannot run here: the other conditions still count
                rows.append({"condition": action, "error": str(exc)})
                continue
            rows.append(summarize(action, samples, idle, d.counts, timer))
        rows.append(summarize("idle again", timed(args.calls), idle, None, timer))
    what = f"{args.alloc_mib} MiB device allocations given back at once" if memory else f"the {args.example} example"
    print(f"{torch.cuda.get_device_name(dev)}, torch {torch.__version__}, {what}, "
          f"{args.calls} timed calls per side per condition", flush=True)
    print(format_table(rows, names), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "calls": args.calls, "example": args.example}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
