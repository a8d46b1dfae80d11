"""What a large copy to the host costs into new memory, and into a buffer an earlier copy wrote
(engine/worker/host_buffers.py): the fixed cost the reused buffers remove, and the bench that would
show it coming back.

On CUDA, device-to-host through the worker's own memory.host_copy, with the pool off (every copy in new
pageable memory), on with pageable buffers, and on with page-locked ones (the worker's setting), and each
copy back to the device as a compare's slices take it (the "host to device" rows). On the CPU device, host-to-host copies into new memory and into a
reused buffer (the same page-fault cost, without a GPU).

The "first copy" rows make a new buffer for every copy (the pool trimmed before each), with 4 KiB pages and
advised for transparent huge pages (host_buffers.advise_huge_pages): what each evaluation pays once per
buffer, since each is a new process.

    python bench/host_copy_bench.py                     # 1 GiB, 4 copies each way, on CUDA when there is one
    python bench/host_copy_bench.py --gib 4 --device cpu --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

GIB = 1 << 30


def _cuda_rates(nbytes: int, copies: int) -> dict[str, list[float]]:
    import torch
    from cudaforge.engine.worker import memory
    from cudaforge.engine.worker.host_buffers import POOL

    source = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").uniform_()
    torch.cuda.synchronize()
    rates: dict[str, list[float]] = {}
    for label, budget, pin in (("new memory", 0, False), ("reused buffer", 2 * nbytes, False),
                               ("page-locked buffer", 2 * nbytes, True)):
        POOL.budget, POOL.pin = budget, pin
        POOL.trim()
        rates[label] = []
        back = rates[f"{label}, host to device"] = []
        for _ in range(copies):
            start = time.perf_counter()
            (host,) = memory.host_copy([source])  # waits for the copy
            rates[label].append(nbytes / GIB / (time.perf_counter() - start))
            start = time.perf_counter()
            again = host.to("cuda", non_blocking=True)  # as a compare's slices come back
            torch.cuda.synchronize()
            back.append(nbytes / GIB / (time.perf_counter() - start))
            del host, again  # as a correctness trial drops its expected output before the next
    for huge in (False, True):
        POOL.budget, POOL.pin, POOL.huge_pages = 2 * nbytes, True, huge
        first = rates[f"first copy, page-locked, {_pages(huge)}"] = []
        for _ in range(copies):
            POOL.trim()
            start = time.perf_counter()
            (host,) = memory.host_copy([source])  # a new buffer: page-locked (its pass) and written
            first.append(nbytes / GIB / (time.perf_counter() - start))
            del host
    POOL.budget, POOL.pin, POOL.huge_pages = 0, False, True
    POOL.trim()
    return rates


def _pages(huge: bool) -> str:
    return "huge pages" if huge else "4 KiB pages"


def _cpu_rates(nbytes: int, copies: int) -> dict[str, list[float]]:
    import torch
    from cudaforge.engine.worker.host_buffers import HostBuffers

    source = torch.empty(nbytes, dtype=torch.uint8).random_()
    rates: dict[str, list[float]] = {"new memory": [], "reused buffer": []}
    for _ in range(copies):
        start = time.perf_counter()
        fresh = torch.empty_like(source)
        fresh.copy_(source)
        rates["new memory"].append(nbytes / GIB / (time.perf_counter() - start))
        del fresh
    pool = HostBuffers(budget=2 * nbytes)
    for _ in range(copies):
        start = time.perf_counter()
        kept = pool.empty_like(source)
        assert kept is not None
        kept.copy_(source)
        rates["reused buffer"].append(nbytes / GIB / (time.perf_counter() - start))
        del kept
    for huge in (False, True):
        fresh_pool = HostBuffers(budget=2 * nbytes, huge_pages=huge)
        first = rates[f"first copy, {_pages(huge)}"] = []
        for _ in range(copies):
            fresh_pool.trim()
            start = time.perf_counter()
            made = fresh_pool.empty_like(source)
            assert made is not None
            made.copy_(source)
            first.append(nbytes / GIB / (time.perf_counter() - start))
            del made
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of each copy in GiB (1)")
    ap.add_argument("--copies", type=int, default=4, help="copies each way (4; the first reused one makes the buffer)")
    ap.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    ap.add_argument("--json", help="write the rates here")
    args = ap.parse_args(argv)
    import torch

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    nbytes = int(args.gib * GIB) // 4 * 4
    rates = (_cuda_rates if device == "cuda" else _cpu_rates)(nbytes, args.copies)
    where = "device to host, memory.host_copy" if device == "cuda" else "host to host"
    print(f"{args.gib:g} GiB copies, {where} ({device}), GiB/s per copy:")
    print("| into | " + " | ".join(f"copy {i + 1}" for i in range(args.copies)) + " | median of copies 2+ |")
    print("| --- |" + " --- |" * (args.copies + 1))
    summary: dict[str, Any] = {"device": device, "gib": args.gib, "rates_gib_s": rates}
    later_of: dict[str, float] = {}
    for label, values in rates.items():
        later = later_of[label] = statistics.median(values[1:]) if len(values) > 1 else values[0]
        summary[f"median_{label.replace(' ', '_')}"] = round(later, 3)
        print(f"| {label} | " + " | ".join(f"{v:.2f}" for v in values) + f" | {later:.2f} |")
    new, reused = summary["median_new_memory"], summary["median_reused_buffer"]
    print(f"reused buffers: {reused / new:.2f}x the rate of new memory (copies 2+)")
    kind = "first copy, page-locked" if device == "cuda" else "first copy"
    small, huge = (later_of[f"{kind}, {_pages(h)}"] for h in (False, True))
    summary["first_copy_huge_over_small"] = round(huge / small, 3)
    print(f"first copies into new buffers: huge pages {huge / small:.2f}x the rate of 4 KiB pages (copies 2+)")
    if "median_page-locked_buffer" in summary:
        locked = summary["median_page-locked_buffer"]
        print(f"page-locked buffers: {locked / reused:.2f}x the rate of reused pageable ones (copies 2+)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
