"""Where the CUDA events and CUPTI's kernel time part on a short kernel (issue 23: gelu's events were 1.051x
its CUPTI busy time in sessions 9 and 12, on a 70 µs kernel).

One process, an example's reference and nvrtc candidate, timed in the ways that differ between the timed
window (engine/worker/timing.py: flush, start event, call, end event, back to back) and the host-timed
calls whose CUPTI records give the busy time (flush, synchronize, call, synchronize). For each way: the
events' median, the kernels' CUPTI median in the same calls (a second pass under the profiler) and their
ratio.

- window: as the timed window (the 256e6-byte flush written, then the call, no synchronize);
- window_sleep: the same with a 20 µs device sleep after the flush: the host has queued the call before
  the start event fires, whatever its launch takes;
- read_flush: the flush reads the buffer instead of writing it (no dirty lines left in L2);
- synced: flush, synchronize, then the call (as the host-timed calls run).

    python bench/event_gap.py [--example gelu] [--calls 300] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FLUSH_BYTES = 256_000_000


def example_sides(example: str) -> dict[str, Callable[[], Any]]:
    """An example's reference and nvrtc candidate on the GPU, each a call on the same inputs (seed 0)."""
    import torch
    from cudaforge.engine.worker.harness import import_file

    task = import_file(str(ROOT / "examples" / example / "task.py"), f"{example}_bench_task")
    cand = import_file(str(ROOT / "examples" / example / "nvrtc.py"), f"{example}_bench_candidate")
    torch.manual_seed(0)
    dev = torch.device("cuda")
    inputs = [x.to(dev) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    sides: dict[str, Callable[[], Any]] = {}
    for name, model in (("reference", task.Model(*task.get_init_inputs())),
                        ("candidate", cand.ModelNew(*task.get_init_inputs()))):
        model = model.to(dev).eval()
        sides[name] = lambda m=model: m(*inputs)
    return sides


def main(argv: list[str] | None = None) -> int:
    import torch
    from cudaforge.engine import observe
    from cudaforge.engine.worker.kernel_timer import activities_of

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", default="gelu")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    sides = example_sides(args.example)
    dev = torch.device("cuda")
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=dev)
    sink = torch.empty((), device=dev)
    cycles = int(20e-6 * torch.cuda.get_device_properties(dev).clock_rate * 1e3)  # clock_rate is in kHz

    def write_flush() -> None:
        flush.zero_()

    def read_flush() -> None:
        torch.sum(flush, 0, out=sink)

    ways: dict[str, tuple[Callable[[], None], bool]] = {
        "window": (write_flush, False),
        "window_sleep": (lambda: (write_flush(), torch.cuda._sleep(cycles)), False),
        "read_flush": (read_flush, False),
        "synced": (write_flush, True),
    }

    def run(fn: Callable[[], Any], pre: Callable[[], None], sync: bool, calls: int) -> list[float]:
        pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        with torch.no_grad():
            for start, end in pairs:
                pre()
                if sync:
                    torch.cuda.synchronize()
                start.record()
                out = fn()
                end.record()
                del out
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 for s, e in pairs]

    for fn in sides.values():  # warm-up: modules loaded, clocks up
        run(fn, write_flush, False, 50)
    rows = []
    for way, (pre, sync) in ways.items():
        for side, fn in sides.items():
            events = run(fn, pre, sync, args.calls)
            with observe.device_profile() as prof:
                run(fn, pre, sync, args.calls)
            acts = activities_of(prof)
            # the side's own kernels: not the flush's fill or reduction, not the sleep
            own = [a for a in acts if not any(k in a.name.lower() for k in ("fill", "reduce", "sleep", "spin"))]
            kernel = [(a.end_ns - a.start_ns) / 1e3 for a in own]
            ev, k = statistics.median(events), statistics.median(kernel) if kernel else float("nan")
            row = {"way": way, "side": side, "events_us": round(ev, 2), "cupti_us": round(k, 2),
                   "events_over_cupti": round(ev / k, 4) if kernel else None, "kernels_per_call": len(own) / args.calls}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(f"\n{args.example}: events against CUPTI kernel time, {args.calls} calls each (medians)")
    print("| way | side | events µs | CUPTI kernel µs | events / CUPTI |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['way']} | {r['side']} | {r['events_us']:.1f} | {r['cupti_us']:.1f} | {r['events_over_cupti']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
