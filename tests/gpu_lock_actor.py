"""One process acting at the per-GPU reader/writer lock through the real API, for tests/test_gpu_rwlock.py.

    python tests/gpu_lock_actor.py LOCK ROLE HOLD_S OUT.json [--reserve BYTES --budget BYTES] [--sync-s S] [--until FILE]

ROLE is `read` or `write`. It records, in CLOCK_MONOTONIC nanoseconds (one clock for every process on the
machine), when it asked, when it was admitted (memory) and when it held the lock, when its sync before the
release ended (its last instant under the hold: the flock drops after it), and when the release had returned
(after the drop, so another process may hold the lock before this stamp); it writes OUT.json when it asks (so a test can wait for that) and again
at the end. `--sync-s` makes the release's device sync take that long (a stand-in for queued kernels).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from cudaforge.engine.gpu import ledger, rwlock


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("lock")
    ap.add_argument("role", choices=(rwlock.READ, rwlock.WRITE))
    ap.add_argument("hold_s", type=float)
    ap.add_argument("out")
    ap.add_argument("--reserve", type=int, default=0)
    ap.add_argument("--budget", type=int, default=0)
    ap.add_argument("--sync-s", type=float, default=0.0)
    ap.add_argument("--until", default="", help="hold until this file exists (then HOLD_S more)")
    args = ap.parse_args()
    out = Path(args.out)
    rec: dict[str, object] = {"pid": os.getpid(), "role": args.role, "asked": time.monotonic_ns()}
    out.write_text(json.dumps(rec))
    reservation = None
    if args.reserve:
        reservation = ledger.reserve(args.lock, args.reserve, args.budget, label=f"actor {os.getpid()}")
        rec["admitted"] = time.monotonic_ns()
    hold = rwlock.acquire(args.lock, args.role)
    rec["acquired"] = time.monotonic_ns()
    out.write_text(json.dumps(rec))
    while args.until and not Path(args.until).exists():
        time.sleep(0.005)
    time.sleep(args.hold_s)

    def sync() -> None:
        time.sleep(args.sync_s)
        rec["synced"] = time.monotonic_ns()

    hold.release(sync)
    rec["released"] = time.monotonic_ns()
    if reservation is not None:
        reservation.release()
        rec["unreserved"] = time.monotonic_ns()
    out.write_text(json.dumps(rec))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
