"""This worker's place at the shared GPU: its memory reservation and its current read or write hold.

The worker's GPU steps (engine/worker/pipeline.py) say what they are: `read()` before side-by-side work
(context, placing, the reference, correctness, probes, shapes), `write()` before a timed window or an ncu
run. Switching releases the current hold first (after a device sync) and then waits for the other kind:
never an upgrade in place (engine/gpu/rwlock.py). The memory estimate is reserved once, before the first
hold that needs it, and given back when the worker lets the GPU go (engine/gpu/ledger.py).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TypeVar

from cudaforge.engine.gpu import rwlock
from cudaforge.engine.worker.harness import current_phase, current_step, phase

_STATE: dict[str, Any] = {"hold": None, "reservation": None, "host_reservation": None, "shared_s": 0.0,
                          "exclusive_s": 0.0, "since": 0.0, "yields": 0, "paused": 0,
                          "off_gpu_builds": 0, "window_ahead": None}
HOLD_TOTALS = ("gpu_exclusive", "gpu_shared", "gpu_yields", "gpu_window_pauses", "gpu_off_builds")  # seconds()' keys: no steps
HOLD_COUNTS = ("gpu_yields", "gpu_window_pauses", "gpu_off_builds")  # of those, the ones that count, not seconds
T = TypeVar("T")
GROW_TIMEOUT_S = 30.0  # two evaluations that each wait to grow beside the other would wait for ever
BUDGET_TTL_S = 1.0  # the card's budget is re-read at most this often while a reservation waits
rwlock.STEP_LABEL[0] = current_step  # the lock log (rwlock.LOG_ENV) names the step that took or dropped a hold


def _switch(lock_path: str | None, kind: str, wait_phase: str) -> None:
    from cudaforge.engine.gpu.rwlock import WRITE
    from cudaforge.engine.gpu.turns import acquire_as_job, announce_job

    current = _STATE["hold"]
    if current is not None and current.held and current.kind == kind:
        return
    release_hold()
    if not lock_path:
        return
    resume = current_phase()
    phase(wait_phase)
    try:
        _STATE["hold"] = acquire_as_job(lock_path, kind)  # idle spares' warm-ups let it go first while it waits
    finally:
        if kind == WRITE:
            _STATE["window_ahead"] = None  # the window it prepared for has the GPU (or never will)
        elif _STATE["window_ahead"] == lock_path:
            announce_job(lock_path)  # still preparing a window (window_ahead): spares still wait
    _STATE["since"] = time.monotonic()
    if resume and resume != wait_phase:
        phase(resume)  # the wait is its own phase; what follows belongs to the step that asked


def read(lock_path: str | None, wait_phase: str = "gpu_wait") -> None:
    """Hold the GPU as a reader (side by side with other readers, never inside a timed window)."""
    from cudaforge.engine.gpu.rwlock import READ

    _switch(lock_path, READ, wait_phase)


def yield_to_writers() -> None:
    """At a step boundary of side-by-side work: when another worker's timed window (or ncu run) waits,
    let the read hold go (after a device sync) and queue behind it. A reader that kept its hold through a
    whole correctness phase made every timed window wait for that phase (the writers' wait was most of a
    sweep's time); now a writer waits at most one step."""
    from cudaforge.engine.gpu.rwlock import READ, writer_waiting

    hold = _STATE["hold"]
    if hold is None or not hold.held or hold.kind != READ or not writer_waiting(hold.lock_path):
        return
    lock_path = hold.lock_path
    release_hold()
    read(lock_path, "gpu_wait")
    _STATE["yields"] += 1


def off_the_gpu(build: Callable[[], T], gpu_type: str = "cuda") -> T:
    """Run `build` (host work: a model constructed at the shape check's sizes) with the read hold let go, so a
    timed window waiting elsewhere need not wait for it; the hold is taken back before the first torch op
    that touches the GPU (a dispatch mode watches every op, factories' device arguments included) and in any
    case before this returns. Level3/2_ShallowWideMLP's Model took 14.7 s to construct at the smaller sizes
    (on the CPU here, one thread), all of it under a read hold before. A candidate's kernel launched through
    the driver API shows no torch op: as in its full-size import and constructor, which run before the
    worker's first hold, such a launch is not held back (it cannot change its own evaluation's timing)."""
    from cudaforge.engine.gpu.rwlock import READ
    from torch.utils._python_dispatch import TorchDispatchMode

    hold = _STATE["hold"]
    if hold is None or not hold.held or hold.kind != READ:
        return build()
    lock_path = hold.lock_path
    release_hold()

    class HoldAtTheFirstGpuOp(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if _STATE["hold"] is None and _touches(gpu_type, args, kwargs):
                read(lock_path, "gpu_wait")
            return func(*args, **kwargs)

    try:
        with HoldAtTheFirstGpuOp():
            return build()
    finally:
        read(lock_path, "gpu_wait")  # no-op where the first GPU op took it already
        _STATE["off_gpu_builds"] += 1


def without_hold(work: Callable[[], T]) -> T:
    """Run `work` (host or driver work that launches nothing and allocates nothing on the device: page-locking
    a host buffer, say) with a read hold let go (after a device sync), and take the read hold back after it;
    a timed window waiting elsewhere need not wait for it. A write hold (inside a timed window) or no hold is
    kept as it is."""
    from cudaforge.engine.gpu.rwlock import READ

    hold = _STATE["hold"]
    if hold is None or not hold.held or hold.kind != READ:
        return work()
    lock_path = hold.lock_path
    release_hold()
    try:
        return work()
    finally:
        read(lock_path, "gpu_wait")


def _touches(gpu_type: str, args: Any, kwargs: dict[str, Any]) -> bool:
    """Whether an op's arguments include a tensor on, or a device of, the GPU's type."""
    import torch
    from torch.utils._pytree import tree_leaves

    for leaf in tree_leaves((args, kwargs)):
        if isinstance(leaf, torch.Tensor) and leaf.device.type == gpu_type:
            return True
        if isinstance(leaf, torch.device) and leaf.type == gpu_type:
            return True
        if isinstance(leaf, str) and leaf.split(":", 1)[0] == gpu_type:
            return True
    return False


def window_ahead(lock_path: str | None) -> None:
    """A timed window is next, after the step that prepares it as a reader (the timed check's expected
    outputs): announced like a job waiting at the lock until its write hold is taken, so an idle spare starts
    no warm-up turn (a CUDA context: 0.2-2 s under load) that the window would then wait for. Spares'
    warm-ups were the last reader 86 of the H200 sweep's 250 windows waited for (36.9 s of their waits,
    session 16). A read hold taken meanwhile (a yield) keeps the announcement; the write hold, or the end of
    the worker's GPU work (release_all), ends it; a dead process's is ignored (engine/gpu/turns.py)."""
    from cudaforge.engine.gpu.turns import announce_job

    if lock_path:
        _STATE["window_ahead"] = lock_path
        announce_job(lock_path)


def write(lock_path: str | None, wait_phase: str = "timing_wait") -> None:
    """Hold the GPU alone: a timed window or an ncu run."""
    from cudaforge.engine.gpu.rwlock import WRITE

    _switch(lock_path, WRITE, wait_phase)


def write_wait_s() -> float:
    """How long the current write hold waited for the readers to drain (0.0 without one): what a timed window
    would pay again to take the GPU back after letting it go (runtime.TimedOutputCheck's `pause_cost_s`)."""
    hold = _STATE["hold"]
    return float(hold.waited_s) if hold is not None and hold.held and hold.kind == rwlock.WRITE else 0.0


@contextlib.contextmanager
def side_by_side(lock_path: str | None) -> Any:
    """Inside a timed window, a step that needs no GPU to itself (a large sampled output's compare, seconds
    of host-to-device slices): the write hold goes (after a device sync) for a read hold, other evaluations'
    side-by-side work runs beside it, and the write hold is taken back for the window's next timed call.
    Outside a write hold it changes nothing."""
    from cudaforge.engine.gpu.rwlock import WRITE

    hold = _STATE["hold"]
    if not lock_path or hold is None or not hold.held or hold.kind != WRITE:
        yield
        return
    read(lock_path, "gpu_wait")
    _STATE["paused"] += 1
    try:
        yield
    finally:
        write(lock_path, "timing_wait")


def hold_kind() -> str:
    """The hold this worker has now: rwlock.READ, rwlock.WRITE or "none" (the stack samples' grouping)."""
    hold = _STATE["hold"]
    return str(hold.kind) if hold is not None and hold.held else "none"


def release_hold() -> None:
    """Let the current hold go (the device synchronized first); the reservation stays."""
    hold = _STATE["hold"]
    _STATE["hold"] = None
    if hold is None or not hold.held:
        return
    key = "exclusive_s" if hold.kind == "write" else "shared_s"
    _STATE[key] += time.monotonic() - _STATE["since"]
    hold.release()


def reserve(lock_path: str | None, nbytes: int, budget: Any, label: str = "") -> None:
    """Wait until `nbytes` of device memory is admitted beside our other evaluations (phase memory_wait);
    `budget()` gives the bytes that our evaluations may use on the card together."""
    if not lock_path or _STATE["reservation"] is not None or nbytes <= 0:
        return
    from cudaforge.engine.gpu.ledger import reserve as ledger_reserve

    with _waiting_for_memory():
        _STATE["reservation"] = ledger_reserve(lock_path, nbytes, _cached(budget), label=label)


def reserve_host(lock_path: str | None, nbytes: int, budget: Any, label: str = "") -> float:
    """Wait until `nbytes` of host memory is admitted beside our other evaluations (phase host_wait), in a
    ledger of its own beside the GPU's (`<lock>.host`); `budget()` gives the host bytes our evaluations may
    use together. Kept until this process ends (a dead process's entry is dropped). Before it, a large
    evaluation that found the host short failed at once: on the H200 sweep run longest first, three 6 GiB
    elementwise problems started beside five others holding their host copies and failed (session 13).
    Returns the seconds waited (0.0 where there is no lock: one evaluation alone)."""
    if not lock_path or nbytes <= 0:
        return 0.0
    from cudaforge.engine.gpu.ledger import reserve as ledger_reserve

    with _waiting_for_memory("host_wait"):
        held = ledger_reserve(f"{lock_path}.host", nbytes, budget, label=label, poll_s=0.1)
    _STATE["host_reservation"] = held
    return held.waited_s if held is not None else 0.0


def grow_host(nbytes: int, budget: Any, timeout_s: float = GROW_TIMEOUT_S) -> str:
    """Grow the host reservation (reserve_host) to `nbytes` where a step finds it needs more than the
    estimate (a second input set on the host: memory.host_needed_bytes), waiting for admission without
    holding the GPU (phase host_wait) and resuming the hold it had. Returns "" or a note when it was not
    admitted within `timeout_s` (the step goes on: the host check before it said the host has the room)."""
    reservation = _STATE.get("host_reservation")
    if reservation is None or nbytes <= reservation.nbytes:
        return ""
    if _resized(reservation, nbytes, budget, timeout_s, "host_wait", poll_s=0.1):
        return ""
    return (f"the host reservation stayed at {reservation.nbytes / (1 << 30):.1f} GiB: {nbytes / (1 << 30):.1f} "
            f"GiB was not admitted within {timeout_s:g} s")


def _resized(reservation: Any, nbytes: int, budget: Any, timeout_s: float, wait_phase: str,
             poll_s: float = 0.02) -> bool:
    """Resize a ledger reservation without holding the GPU meanwhile (phase `wait_phase`, asking every
    `poll_s`), then take the hold it had again; whether it was admitted within `timeout_s`."""
    hold = _STATE["hold"]
    kind, lock_path = (hold.kind, hold.lock_path) if hold is not None and hold.held else (None, None)
    with _waiting_for_memory(wait_phase):
        ok = reservation.resize(nbytes, budget, poll_s=poll_s, timeout_s=timeout_s)
    if kind is not None:
        _switch(lock_path, kind, "gpu_wait")
    return bool(ok)


@contextlib.contextmanager
def _waiting_for_memory(wait_phase: str = "memory_wait") -> Any:
    """A wait for memory in a ledger: its own phase (memory_wait for the device, host_wait for the host),
    and never while holding the GPU (the holders ahead could not finish); the caller takes a hold again
    where it needs one."""
    release_hold()
    resume = current_phase()
    phase(wait_phase)
    try:
        yield
    finally:
        if resume and resume != wait_phase:
            phase(resume)


def reserved() -> int | None:
    """This worker's reservation now (bytes), None without one."""
    reservation = _STATE["reservation"]
    return int(reservation.nbytes) if reservation is not None else None


def grow(nbytes: int, budget: Any, timeout_s: float = GROW_TIMEOUT_S,
         before_growth: Callable[[], None] = lambda: None) -> str:
    """Grow this worker's reservation to `nbytes` once it knows more than its estimate did (the reference's
    measured peak: memory.reservation_after_reference), waiting for admission without holding the GPU
    (phase memory_wait) and resuming the hold it had. `before_growth` runs only where the reservation will
    grow, before its admission (the caller gives its allocator's cache back: admitted against the card's free
    memory, that cache would count as taken). Returns "" or a note when it was not admitted within
    `timeout_s` (the evaluation goes on within the reservation it has, as before)."""
    reservation = _STATE["reservation"]
    if reservation is None or nbytes <= reservation.nbytes:
        return ""
    before_growth()
    before = reservation.nbytes
    if _resized(reservation, nbytes, _cached(budget), timeout_s, "memory_wait"):
        return ""
    return (f"the reservation stayed at {before / (1 << 30):.1f} GiB: {nbytes / (1 << 30):.1f} GiB, what the "
            f"reference's measured peak asks, was not admitted within {timeout_s:g} s")


def _cached(budget: Any) -> Any:
    seen: dict[str, Any] = {}

    def get() -> int:
        now = time.monotonic()
        if "value" not in seen or now - seen["at"] > BUDGET_TTL_S:
            seen.update(value=int(budget()), at=now)
        return int(seen["value"])

    return get


def release_all() -> None:
    """The worker is done with the GPU (its memory freed): the hold, the reservation and any announcement of
    a window ahead go."""
    from cudaforge.engine.gpu.turns import withdraw_job

    if _STATE["window_ahead"]:
        withdraw_job(_STATE["window_ahead"])
        _STATE["window_ahead"] = None
    release_hold()
    reservation, _STATE["reservation"] = _STATE["reservation"], None
    if reservation is not None:
        with contextlib.suppress(OSError):
            reservation.release()


def seconds() -> dict[str, float]:
    """Seconds this worker held the GPU side by side (`gpu_shared`) and alone (`gpu_exclusive`) so far, the
    current hold included; empty when it never held it (the CPU device)."""
    totals = {"gpu_shared": _STATE["shared_s"], "gpu_exclusive": _STATE["exclusive_s"],
              "gpu_yields": float(_STATE["yields"]), "gpu_window_pauses": float(_STATE["paused"]),
              "gpu_off_builds": float(_STATE["off_gpu_builds"])}
    hold = _STATE["hold"]
    if hold is not None and hold.held:
        totals["gpu_exclusive" if hold.kind == "write" else "gpu_shared"] += time.monotonic() - _STATE["since"]
    return {k: round(v, 4) for k, v in totals.items()} if any(totals.values()) else {}
