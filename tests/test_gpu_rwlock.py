"""The per-GPU reader/writer discipline across real processes (engine/gpu/rwlock.py, engine/gpu/ledger.py).

Each actor (tests/gpu_lock_actor.py) is its own Python process using the real lock API and recording
CLOCK_MONOTONIC timestamps (one clock for all processes). A holder's window is [acquired, synced]: taken
after its flock was granted and before it was let go, so it lies inside the time it really held the lock;
two such windows that overlap are two real holders at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from cudaforge.engine.gpu import ledger, rwlock

ACTOR = Path(__file__).parent / "gpu_lock_actor.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="flock and /proc: Linux")


class Actor:
    def __init__(self, lock: Path, role: str, hold_s: float, out: Path, *extra: str) -> None:
        self.out = out
        self.proc = subprocess.Popen([sys.executable, str(ACTOR), str(lock), role, str(hold_s), str(out), *extra])

    def record(self) -> dict:
        try:
            return json.loads(self.out.read_text())
        except (OSError, ValueError):
            return {}

    def wait_for(self, key: str, limit_s: float = 60.0) -> dict:
        end = time.monotonic() + limit_s
        while time.monotonic() < end:
            rec = self.record()
            if key in rec:
                return rec
            if self.proc.poll() not in (None, 0):
                raise AssertionError(f"actor exited with {self.proc.returncode}")
            time.sleep(0.01)
        raise AssertionError(f"actor never reached {key!r}")

    def finish(self) -> dict:
        assert self.proc.wait(60) == 0
        return self.record()


def _flocks(path: Path, kind: str, *, waiting: bool = False) -> int:
    """How many flocks of `kind` (READ: shared, WRITE: exclusive) are held (or, `waiting`, asked for) on
    `path`, from /proc/locks: how a test knows that a writer stands at the turnstile, not guesses it."""
    inode = os.stat(path).st_ino
    n = 0
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        blocked = len(fields) > 1 and fields[1] == "->"
        fields = [f for f in fields if f != "->"]
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[3] == kind and blocked == waiting \
                and fields[5].rsplit(":", 1)[-1] == str(inode):
            n += 1
    return n


def _until(check, limit_s: float = 60.0) -> None:
    end = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < end, "timed out waiting for the lock state"
        time.sleep(0.01)


def _window(rec: dict) -> tuple[int, int]:
    return rec["acquired"], rec["synced"]


def _overlap(a: dict, b: dict) -> bool:
    (a0, a1), (b0, b1) = _window(a), _window(b)
    return a0 < b1 and b0 < a1


def test_writers_hold_alone_and_readers_share(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    go = tmp_path / "go"
    readers = [Actor(lock, "read", 0.1, tmp_path / f"r{i}.json", "--until", str(go)) for i in range(4)]
    for r in readers:
        r.wait_for("acquired")
    writers = [Actor(lock, "write", 0.3, tmp_path / f"w{i}.json", "--sync-s", "0.05") for i in range(2)]
    turnstile = rwlock.writers_path(lock)
    _until(lambda: _flocks(turnstile, "READ") == 2)  # both writers stand at the turnstile
    late = [Actor(lock, "read", 0.3, tmp_path / f"late{i}.json") for i in range(2)]
    _until(lambda: _flocks(turnstile, "WRITE", waiting=True) == 2)  # both late readers wait behind them
    go.touch()
    recs = [a.finish() for a in readers + writers + late]
    r_recs, w_recs, late_recs = recs[:4], recs[4:6], recs[6:]
    # The four readers that came first held the GPU together (a common instant).
    assert max(r["acquired"] for r in r_recs) < min(r["synced"] for r in r_recs)
    # A writer's window overlaps no other holder's window: readers, late readers, the other writer.
    for w in w_recs:
        for other in recs:
            if other is not w:
                assert not _overlap(w, other), (w, other)
    # The late readers asked while both writers waited: they came in after the writers were served.
    for r in late_recs:
        assert r["acquired"] > max(w["synced"] for w in w_recs)


def test_a_waiting_writer_goes_before_later_readers(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    go = tmp_path / "go"
    first = Actor(lock, "read", 0.0, tmp_path / "r1.json", "--sync-s", "0.3", "--until", str(go))
    first.wait_for("acquired")
    writer = Actor(lock, "write", 0.2, tmp_path / "w.json")
    turnstile = rwlock.writers_path(lock)
    _until(lambda: _flocks(turnstile, "READ") == 1)  # the writer waits at the lock, its turnstile taken
    later = Actor(lock, "read", 0.1, tmp_path / "r2.json")
    _until(lambda: _flocks(turnstile, "WRITE", waiting=True) == 1)  # the later reader waits too
    time.sleep(0.2)
    assert "acquired" not in later.record(), "a later reader came in beside a waiting writer"
    go.touch()
    r1, w, r2 = first.finish(), writer.finish(), later.finish()
    assert w["acquired"] > r1["synced"], "the writer came in before the reader's device sync ended"
    assert r2["asked"] < w["acquired"] < r2["acquired"], "a later reader was served before the waiting writer"
    assert not _overlap(w, r1) and not _overlap(w, r2)


def test_no_upgrade_in_place(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    h = rwlock.acquire(lock, rwlock.READ)
    try:
        with pytest.raises(RuntimeError, match="never upgraded"):
            rwlock.acquire(lock, rwlock.WRITE)
    finally:
        h.release(sync=None)
    with rwlock.hold(lock, rwlock.WRITE, sync=None) as w:  # released first: then a writer may come
        assert w.held and w.kind == rwlock.WRITE
    assert not w.held


def test_a_killed_holder_leaves_the_lock_and_its_reservation_free(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    holder = Actor(lock, "write", 60.0, tmp_path / "w.json", "--reserve", "80", "--budget", "100")
    holder.wait_for("acquired")
    assert ledger.reserved_bytes(lock) == 80
    os.kill(holder.proc.pid, signal.SIGKILL)
    holder.proc.wait(30)
    reader = Actor(lock, "read", 0.0, tmp_path / "r.json", "--reserve", "80", "--budget", "100")
    rec = reader.finish()
    assert "admitted" in rec and "acquired" in rec
    assert ledger.reserved_bytes(lock) == 0  # the dead holder's entry was dropped, the reader's given back


def test_admission_refuses_beyond_the_budget_until_memory_is_released(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    go = tmp_path / "go"
    big = Actor(lock, "read", 0.0, tmp_path / "a.json", "--reserve", "60", "--budget", "100", "--until", str(go))
    big.wait_for("acquired")
    small = Actor(lock, "read", 0.0, tmp_path / "s.json", "--reserve", "30", "--budget", "100")
    small.wait_for("acquired")  # 60 + 30 fit in 100: side by side
    blocked = Actor(lock, "read", 0.0, tmp_path / "b.json", "--reserve", "50", "--budget", "100")
    blocked.wait_for("asked")
    time.sleep(0.5)
    assert "admitted" not in blocked.record(), "admitted beyond the budget"
    go.touch()
    a, s, b = big.finish(), small.finish(), blocked.finish()
    assert s["acquired"] < a["synced"], "two reservations that fit did not run side by side"
    # 60 + 50 > 100 (and 60 + 30 + 50): admitted only once the 60 were given back.
    assert b["admitted"] >= a["unreserved"]
    assert ledger.reserved_bytes(lock) == 0


def test_a_lone_reservation_is_admitted_even_above_the_budget(tmp_path: Path) -> None:
    lock = tmp_path / "gpu0.lock"
    r = ledger.reserve(lock, 500, 100, timeout_s=5)
    assert r is not None and ledger.reserved_bytes(lock) == 500
    r.release()
    assert ledger.reserved_bytes(lock) == 0


def test_the_worker_switches_read_write_read_without_an_upgrade(tmp_path: Path) -> None:
    """The worker's own sequence (engine/worker/gpu_share.py): reserve, read (checks), write (the timed
    window: another process's reader waits), read again (it comes in beside us), then everything goes."""
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    gpu_share.reserve(str(lock), 40, lambda: 100, label="test")
    gpu_share.read(str(lock))
    gpu_share.write(str(lock))  # releases the read hold first: no deadlock with itself
    other = Actor(lock, "read", 0.0, tmp_path / "r.json")
    try:
        _until(lambda: _flocks(rwlock.writers_path(lock), "WRITE", waiting=True) == 1)  # it waits
        time.sleep(0.4)
        assert "acquired" not in other.record(), "a reader came in during the timed window"
        gpu_share.read(str(lock))
        rec = other.finish()
        assert "acquired" in rec
        assert ledger.reserved_bytes(lock) == 40
    finally:
        gpu_share.release_all()
    assert ledger.reserved_bytes(lock) == 0
    held = gpu_share.seconds()
    assert held["gpu_exclusive"] >= 0.4 and held["gpu_shared"] > 0


def test_a_reader_yields_to_a_waiting_writer_at_a_step_boundary(tmp_path: Path) -> None:
    """gpu_share.yield_to_writers (called at every step boundary of the checks): with no writer waiting the
    read hold stays; with one waiting, the reader lets go, the writer's timed window runs alone, and the
    reader comes back only once it is over (CLOCK_MONOTONIC windows of both processes)."""
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    try:
        gpu_share.read(str(lock))
        first = gpu_share._STATE["hold"]
        assert not rwlock.writer_waiting(lock)
        gpu_share.yield_to_writers()
        assert gpu_share._STATE["hold"] is first, "no writer waits: the reader keeps its hold"
        writer = Actor(lock, rwlock.WRITE, 0.3, tmp_path / "w.json")
        writer.wait_for("asked")
        _until(lambda: rwlock.writer_waiting(lock) and _flocks(lock, "WRITE", waiting=True) == 1)
        released_at = time.monotonic_ns()
        gpu_share.yield_to_writers()
        back_at = time.monotonic_ns()
        rec = writer.finish()
        # "synced" is the writer's last instant provably under its hold (its release drops the flock after it);
        # "released" is stamped once the drop is done, which a loaded machine may schedule after our return.
        assert released_at <= rec["acquired"] and rec["synced"] <= back_at, (released_at, rec, back_at)
        assert gpu_share._STATE["hold"] is not first and gpu_share._STATE["hold"].held
        assert gpu_share.seconds()["gpu_yields"] >= 1
    finally:
        gpu_share.release_all()


def test_host_work_lets_the_read_hold_go_for_a_waiting_writer_and_takes_it_back(tmp_path: Path) -> None:
    """gpu_share.without_hold (a host buffer's page-lock): the read hold goes before the work, so a writer
    waiting meanwhile takes the GPU during it, and a read hold is taken back after the writer let go."""
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    try:
        gpu_share.read(str(lock))
        writer = Actor(lock, rwlock.WRITE, 0.3, tmp_path / "w.json")
        writer.wait_for("asked")
        _until(lambda: rwlock.writer_waiting(lock) and _flocks(lock, "WRITE", waiting=True) == 1)

        def host_work() -> str:
            assert gpu_share.hold_kind() == "none"
            return str(writer.wait_for("acquired")["acquired"])  # the writer got the GPU during the work

        acquired = int(gpu_share.without_hold(host_work))
        back_at = time.monotonic_ns()
        rec = writer.finish()
        assert acquired == rec["acquired"] and rec["synced"] <= back_at
        assert gpu_share.hold_kind() == rwlock.READ
        # Inside a write hold (a timed window) the work runs under it: a window never lets the GPU go for it.
        gpu_share.write(str(lock))
        assert gpu_share.without_hold(gpu_share.hold_kind) == rwlock.WRITE
    finally:
        gpu_share.release_all()


def _worker_job(tmp_path: Path, lock: Path, options: object = None, task_path: Path | None = None,
                candidate_path: Path | None = None) -> tuple[Path, Path, dict]:
    """A real worker's job (default: CPU device, the CI task, the correct candidate) given the GPU lock
    `lock`: (its folder, its spec file, the spec), to run with `python -m cudaforge.engine.worker SPEC` there."""
    from cudaforge.engine.candidate import load_candidate
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.task import load_task

    core = Path(__file__).parent / "core_tasks"
    ev = Evaluator(options or EvalOptions(device="cpu", cache_dir=tmp_path / "cache", result_cache=False))
    workdir, _, spec_path = ev.prepare(load_task(task_path or core / "task.py"),
                                       load_candidate(candidate_path or core / "correct.py"))
    spec = json.loads(spec_path.read_text())
    spec["gpu_lock_path"] = str(lock)
    spec_path.write_text(json.dumps(spec))
    (workdir / "sandbox").mkdir(exist_ok=True)  # the sandbox's folder (run here without the supervisor)
    return workdir, spec_path, spec


def test_a_real_worker_times_only_once_other_holders_are_gone(tmp_path: Path) -> None:
    """The worker pipeline itself (CPU device, the CI task), given a GPU lock path: its timed window waits
    for another process's read hold to end (phase timing_wait), and it records that it held the lock alone."""
    lock, go = tmp_path / "gpu0.lock", tmp_path / "go"
    workdir, spec_path, spec = _worker_job(tmp_path, lock)
    other = Actor(lock, "read", 0.0, tmp_path / "r.json", "--until", str(go))
    other.wait_for("acquired")
    worker = subprocess.Popen([sys.executable, "-m", "cudaforge.engine.worker", str(spec_path)], cwd=workdir)
    progress = Path(spec["progress_path"])
    try:
        end = time.monotonic() + 600
        while time.monotonic() < end and worker.poll() is None:
            with contextlib.suppress(OSError, ValueError):
                if json.loads(progress.read_text())["phase"] == "timing_wait":
                    break
            time.sleep(0.05)
        assert worker.poll() is None, "the worker ended without waiting for its timed window"
        time.sleep(0.5)
        assert json.loads(progress.read_text())["phase"] == "timing_wait", "it timed beside another holder"
        go.touch()
        assert worker.wait(600) == 0
    finally:
        go.touch()
        if worker.poll() is None:
            worker.kill()
    reader = other.finish()
    result = json.loads((workdir / "result.json").read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    assert result["outcome"] == "ok", result.get("message")
    assert result["phases"]["timing_wait"] >= 0.5 and result["phases"]["gpu_exclusive"] > 0
    assert reader["synced"] < time.monotonic_ns()


def _logged_worker(tmp_path: Path, *job: object) -> tuple[dict, list[tuple[str, str, str]]]:
    """Run a real worker (_worker_job's arguments after the lock) with a lock log (rwlock.LOG_ENV): its
    result, once it is "ok", and its own lines of the log, (event, kind, step) in order: its holds' (kinds
    read and write) and the hold-free driver work's (context, pin, unpin, exit)."""
    lock, log = tmp_path / "gpu0.lock", tmp_path / "lock.log"
    workdir, spec_path, _ = _worker_job(tmp_path, lock, *job)
    worker = subprocess.Popen([sys.executable, "-m", "cudaforge.engine.worker", str(spec_path)], cwd=workdir,
                              env={**os.environ, rwlock.LOG_ENV: str(log)})
    assert worker.wait(600) == 0
    result = json.loads((workdir / "result.json").read_text())
    shutil.rmtree(workdir, ignore_errors=True)
    assert result["outcome"] == "ok", result.get("message")
    rows = [line.split() for line in log.read_text().splitlines()]
    return result, [(event, kind, step) for _, pid, event, kind, step in rows if int(pid) == worker.pid]


def test_a_finished_evaluation_lets_the_gpu_go_before_its_host_buffers_are_trimmed(tmp_path: Path) -> None:
    """A real worker (CPU device; after its timed window it holds the lock as a reader through the shape check)
    drops its last hold once its report is written and its device memory freed, before its page-locked host
    buffers are trimmed and the process ends (the lock log, CUDAFORGE_LOCK_LOG, in step order). Its last line
    is the exit's beginning (its CUDA context's teardown holds nothing: bench/windows_beside_creations.py)."""
    result, mine = _logged_worker(tmp_path)
    assert ("got", rwlock.WRITE, "timing.events") in mine or ("got", rwlock.WRITE, "timing_wait") in mine, mine
    assert _holds(mine)[-1] == ("drop", rwlock.READ, "done.release"), mine[-4:]
    assert mine[-1][:2] == ("begin", "exit"), mine[-4:]


def _holds(lines: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
    return [line for line in lines if line[1] in (rwlock.READ, rwlock.WRITE)]


@pytest.mark.gpu
def test_the_kernel_check_and_the_end_hold_no_gpu_for_host_work(tmp_path: Path, gpu_options: object) -> None:
    """A real evaluation on the GPU (the relu example, nvrtc): the kernel check lets its read hold go once its
    profiled call is over and takes it back after the profiler's records are read (the stop and the reading
    are host work), and the evaluation's last drop is its release's."""
    examples = Path(__file__).parent.parent / "examples" / "relu"
    result, lines = _logged_worker(tmp_path, gpu_options, examples / "task.py", examples / "nvrtc.py")
    mine = _holds(lines)
    k = mine.index(("drop", rwlock.READ, "kernels"))
    assert mine[k + 1] == ("want", rwlock.READ, "gpu_wait"), mine[k:k + 3]
    assert result["phases"]["kernels.cupti_stop"] >= 0 and "kernels.cupti_read" in result["phases"]
    assert mine[-1] == ("drop", rwlock.READ, "done.release"), mine[-4:]


def test_a_reservation_grows_only_where_it_fits_beside_the_others(tmp_path: Path) -> None:
    """ledger.Reservation.resize: admitted as a new reservation would be (alone always), else refused after
    its timeout with the reservation as it was; admitted once the other gives its memory back."""
    lock = tmp_path / "gpu0.lock"
    mine = ledger.reserve(lock, 30, 100, timeout_s=5)
    assert mine is not None and mine.resize(500, 100, timeout_s=1)  # alone: above the budget too
    assert mine.resize(30, 100, timeout_s=1) and ledger.reserved_bytes(lock) == 30
    go = tmp_path / "go"
    other = Actor(lock, "read", 0.0, tmp_path / "o.json", "--reserve", "60", "--budget", "100", "--until", str(go))
    other.wait_for("acquired")
    assert not mine.resize(50, 100, timeout_s=0.3)  # 60 + 50 > 100
    assert mine.nbytes == 30 and ledger.reserved_bytes(lock) == 90
    assert mine.resize(40, 100, timeout_s=1)  # 60 + 40 fit
    go.touch()
    other.finish()
    assert mine.resize(90, 100, timeout_s=5) and ledger.reserved_bytes(lock) == 90
    mine.release()
    assert ledger.reserved_bytes(lock) == 0


def test_the_worker_grows_its_reservation_without_holding_the_gpu_and_resumes_its_hold(tmp_path: Path) -> None:
    """gpu_share.grow (after the reference's measured peak): it lets its read hold go while it waits for
    memory (a writer waiting for the readers to drain is never blocked by it), takes the hold again, and
    says so in a note where the memory was not admitted in time."""
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    go = tmp_path / "go"
    other = Actor(lock, "read", 0.0, tmp_path / "o.json", "--reserve", "60", "--budget", "100", "--until", str(go))
    other.wait_for("acquired")
    gpu_share.reserve(str(lock), 30, lambda: 100, label="test")
    gpu_share.read(str(lock))
    before_growths: list[int] = []  # the reservation each before_growth call saw: only growths call it

    def before_growth() -> None:
        before_growths.append(int(gpu_share.reserved() or 0))

    try:
        note = gpu_share.grow(50, lambda: 100, timeout_s=0.3, before_growth=before_growth)
        assert "stayed at" in note and gpu_share.reserved() == 30
        assert gpu_share._STATE["hold"] is not None and gpu_share._STATE["hold"].held  # the read hold is back
        # A smaller size never shrinks it, and calls no before_growth.
        assert gpu_share.grow(20, lambda: 100, before_growth=before_growth) == "" and gpu_share.reserved() == 30
        go.touch()
        other.finish()
        assert gpu_share.grow(80, lambda: 100, timeout_s=5, before_growth=before_growth) == ""
        assert gpu_share.reserved() == 80 and before_growths == [30, 30]
        assert ledger.reserved_bytes(lock) == 80
    finally:
        gpu_share.release_all()
    assert ledger.reserved_bytes(lock) == 0 and gpu_share.reserved() is None


def test_a_timed_window_lets_the_gpu_go_for_a_side_by_side_step_and_takes_it_back(tmp_path: Path) -> None:
    """gpu_share.side_by_side inside a write hold (a large sampled output's compare): another process's
    reader waits while the window holds the GPU, comes in during the step, and the write hold is back
    (that reader gone) once the step ends; outside a write hold it changes nothing."""
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    try:
        gpu_share.read(str(lock))
        first = gpu_share._STATE["hold"]
        with gpu_share.side_by_side(str(lock)):
            assert gpu_share._STATE["hold"] is first, "a read hold is left as it is"
        gpu_share.write(str(lock))
        reader = Actor(lock, rwlock.READ, 0.2, tmp_path / "r.json")
        reader.wait_for("asked")
        time.sleep(0.3)
        assert "acquired" not in reader.record(), "a reader came in during the timed window"
        with gpu_share.side_by_side(str(lock)):
            assert gpu_share._STATE["hold"].kind == rwlock.READ
            assert gpu_share.write_wait_s() == 0.0  # no write hold: nothing to pay to take one back
            rec = reader.wait_for("acquired")
        back_at = time.monotonic_ns()
        assert gpu_share._STATE["hold"].kind == rwlock.WRITE and gpu_share._STATE["hold"].held
        # Taking the GPU back waited for that reader's step: what the next pause would cost (the bar a
        # compare must pass to be sent side by side, TimedOutputCheck's pause_cost_s).
        assert gpu_share.write_wait_s() > 0.0
        rec = reader.finish()
        assert rec["synced"] <= back_at, "the window came back while the reader still held the GPU"
        assert gpu_share.seconds()["gpu_window_pauses"] == 1
    finally:
        gpu_share.release_all()


def test_a_host_reservation_waits_for_another_evaluations_host_memory(tmp_path: Path) -> None:
    """gpu_share.reserve_host: host memory has a ledger of its own beside the GPU's (`<lock>.host`). An
    evaluation whose host estimate does not fit beside a live one's waits (phase host_wait) until that one
    is gone, instead of failing for host memory our own other evaluation holds; memory.host_budget counts
    the other's private resident memory, at most its reservation, as available."""
    import threading

    from cudaforge.engine.worker import gpu_share, harness, memory

    lock = tmp_path / "gpu0.lock"
    go = tmp_path / "go"
    other = Actor(Path(f"{lock}.host"), "read", 0.0, tmp_path / "o.json", "--reserve", "60", "--budget", "100",
                  "--until", str(go))
    other.wait_for("acquired")
    entries = ledger.live_entries(f"{lock}.host")
    assert [e.nbytes for e in entries] == [60]
    resident = memory.anon_resident_bytes(entries[0].pid)
    assert resident > 0
    available = memory.host_available_bytes()
    budget = memory.host_budget(str(lock))()
    if available is not None:  # psutil installed: what is available, plus the other's 60 bytes it holds
        assert abs(budget - (available + 60)) < 256 << 20
    harness.reset_phases()
    harness.phase("load_task")
    done: list[float] = []
    waiter = threading.Thread(target=lambda: done.append(gpu_share.reserve_host(str(lock), 50, lambda: 100)))
    waiter.start()
    time.sleep(0.6)
    assert not done, "admitted beside 60 of 100 reserved bytes"
    go.touch()
    other.finish()
    waiter.join(30)
    assert done and done[0] > 0.4
    assert harness.phases().get("host_wait", 0) > 0.4 and harness.current_phase() == "load_task"


def test_the_host_reservation_grows_where_it_fits_and_resumes_the_phase(tmp_path: Path) -> None:
    """gpu_share.grow_host (a second input set on the host): alone it is admitted at once; beside another
    evaluation's reservation that leaves no room it gives up after its timeout with a note, the
    reservation as it was, and the phase the step was in resumes either way."""
    from cudaforge.engine.worker import gpu_share, harness

    lock = tmp_path / "gpu0.lock"
    harness.reset_phases()
    harness.phase("cache_probes")
    gpu_share._STATE["host_reservation"] = None
    assert gpu_share.reserve_host(str(lock), 40, lambda: 100) < 0.5  # alone: admitted at once
    try:
        assert gpu_share.grow_host(70, lambda: 100) == ""
        assert ledger.reserved_bytes(f"{lock}.host") == 70
        go = tmp_path / "go"
        other = Actor(Path(f"{lock}.host"), "read", 0.0, tmp_path / "o.json", "--reserve", "20", "--budget", "100",
                      "--until", str(go))
        other.wait_for("acquired")
        note = gpu_share.grow_host(90, lambda: 100, timeout_s=0.3)  # 20 + 90 > 100
        assert "stayed at" in note and ledger.reserved_bytes(f"{lock}.host") == 90  # 70 + 20
        assert harness.current_phase() == "cache_probes" and harness.phases().get("host_wait", 0) >= 0.3
        go.touch()
        other.finish()
    finally:
        gpu_share._STATE["host_reservation"].release()
        gpu_share._STATE["host_reservation"] = None


def test_the_tasks_own_construction_runs_without_the_hold_until_its_first_gpu_op(tmp_path: Path) -> None:
    """gpu_share.off_the_gpu (the shape check's construction of the task's Model at its smaller sizes): the
    read hold goes for the host part, so a writer waiting meanwhile runs its window then, not after the
    build; the first op that touches the guarded device type takes the read hold back before it runs (the
    meta device stands in for CUDA here); a write hold is never let go for it."""
    import torch
    from cudaforge.engine.worker import gpu_share

    lock = tmp_path / "gpu0.lock"
    seen: dict[str, object] = {}
    builds = gpu_share._STATE["off_gpu_builds"]
    try:
        gpu_share.read(str(lock))
        writer = Actor(lock, rwlock.WRITE, 0.3, tmp_path / "w.json")
        writer.wait_for("asked")
        _until(lambda: rwlock.writer_waiting(lock) and _flocks(lock, "WRITE", waiting=True) == 1)

        def build() -> torch.Tensor:
            seen["hold_while_building"] = gpu_share._STATE["hold"]
            host = torch.nn.Linear(64, 64)  # host work under the mode: no hold taken for it
            seen["after_host_op"] = gpu_share._STATE["hold"]
            rec = writer.wait_for("released")  # the waiting window ran during the build
            seen["window"] = rec
            on_device = torch.empty(4, device="meta") + host.bias.detach().to("meta")[:4]
            seen["hold_at_device_op"] = gpu_share._STATE["hold"]
            seen["back"] = time.monotonic_ns()
            return on_device

        seen["called"] = time.monotonic_ns()  # the writer was still waiting behind the read hold
        out = gpu_share.off_the_gpu(build, gpu_type="meta")
        writer.finish()
        assert out.device.type == "meta"
        assert seen["hold_while_building"] is None and seen["after_host_op"] is None
        window = seen["window"]
        assert seen["called"] <= window["acquired"] and window["synced"] <= seen["back"], (seen, window)
        hold = seen["hold_at_device_op"]
        assert hold is not None and hold.held and hold.kind == rwlock.READ, "the device op ran without the hold"
        assert gpu_share._STATE["hold"] is hold and gpu_share.seconds()["gpu_off_builds"] == builds + 1

        before = gpu_share._STATE["off_gpu_builds"]
        assert gpu_share.off_the_gpu(lambda: 7, gpu_type="meta") == 7  # no device op: the hold is back anyway
        assert gpu_share._STATE["hold"].held and gpu_share._STATE["hold"].kind == rwlock.READ
        assert gpu_share._STATE["off_gpu_builds"] == before + 1

        gpu_share.write(str(lock))
        window_hold = gpu_share._STATE["hold"]
        assert gpu_share.off_the_gpu(lambda: gpu_share._STATE["hold"], gpu_type="meta") is window_hold
    finally:
        gpu_share.release_all()
    assert gpu_share.off_the_gpu(lambda: "no lock", gpu_type="meta") == "no lock"  # the CPU device: no hold


@pytest.mark.gpu
def test_a_spare_makes_its_context_between_windows_holding_nothing(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A real spare on the GPU, started while a writer (a timed window's stand-in) holds the lock: it waits for
    the window to end before it makes its CUDA context (a creation slows the window's driver calls; its wait
    is logged), holding nothing meanwhile; its context is then made with no hold of its own, and its first hold
    (the checks' warm-up) comes after (engine/gpu/context.py)."""
    from cudaforge.engine.gpu.lock import _compute_apps
    from cudaforge.engine.worker.entry import SPARE_READY

    lock, log, go = tmp_path / "gpu0.lock", tmp_path / "lock.log", tmp_path / "go"
    monkeypatch.setenv(rwlock.LOG_ENV, str(log))  # the writer's and the spare's holds, in one log
    writer = Actor(lock, rwlock.WRITE, 0.0, tmp_path / "w.json", "--until", str(go))
    writer.wait_for("acquired")
    workdir = tmp_path / "spare"
    (workdir / "sandbox").mkdir(parents=True)
    spare = subprocess.Popen([sys.executable, "-m", "cudaforge.engine.worker", "--spare", str(workdir), "cuda", "0",
                              "--lock", str(lock), "--cupti"])

    def mine() -> list[list[str]]:
        return [line.split() for line in log.read_text().splitlines() if line.split()[1] == str(spare.pid)] \
            if log.exists() else []

    try:
        _until(lambda: any(row[2:4] == ["wait", "context"] for row in mine()) or spare.poll() is not None, 180)
        assert spare.poll() is None, f"the spare exited with {spare.returncode}"
        time.sleep(0.3)  # well inside the gate's limit (rwlock.BETWEEN_WINDOWS_LIMIT_S)
        assert [row[2:4] for row in mine()] == [["wait", "context"]], mine()
        assert not any(row["pid"] == spare.pid for row in _compute_apps(0)), "a context made inside the window"
        assert _flocks(lock, "READ") == 0  # it holds nothing while it waits
        go.touch()
        _until(lambda: (workdir / SPARE_READY).exists(), 120)
    finally:
        go.touch()
        spare.kill()
        spare.wait(30)
    writer.finish()
    ready = json.loads((workdir / SPARE_READY).read_text())
    assert ready["steps"]["context_s"] > 0 and "check_kernels_s" in ready["steps"]
    assert 0.3 <= ready["steps"]["context_gap_s"] <= ready["steps"]["context_s"]
    order = [(int(pid), event, kind) for _, pid, event, kind, _ in (line.split() for line in log.read_text().splitlines())]
    drop = order.index((writer.proc.pid, "drop", rwlock.WRITE))
    assert order.index((spare.pid, "wait", "context")) < drop < order.index((spare.pid, "begin", "context")), order
    # the context made with no hold: its creation ends before the spare's first want
    assert order.index((spare.pid, "end", "context")) < order.index((spare.pid, "want", rwlock.READ)), order


BETWEEN = textwrap.dedent("""
    import json, os, sys, time
    from cudaforge.engine.gpu import rwlock
    lock, out, limit, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    asked = time.monotonic_ns()
    waited = rwlock.between_windows(lock, lambda: bool(go) and os.path.exists(go), limit_s=limit, kind="context")
    json.dump({"asked": asked, "went": time.monotonic_ns(), "waited_s": waited}, open(out, "w"))
""")


def _between(lock: Path, out: Path, limit_s: float = 60.0, go: Path | None = None) -> subprocess.Popen:
    """The gate in its own process; its `wait` goes to a lock log beside `out` (`_waiting` reads it)."""
    env = {**os.environ, rwlock.LOG_ENV: str(out.with_suffix(".log"))}
    return subprocess.Popen([sys.executable, "-c", BETWEEN, str(lock), str(out), str(limit_s), str(go or "")], env=env)


def _waiting(out: Path) -> None:
    """Until the gate of `_between(..., out)` logged that it waits (so a test acts only once it does)."""
    log = out.with_suffix(".log")
    _until(lambda: log.exists() and " wait context " in log.read_text())


def test_work_between_windows_starts_only_once_the_waiting_and_holding_writers_are_gone(tmp_path: Path) -> None:
    """rwlock.between_windows (a context creation's gate, engine/gpu/context.py): a process that asks while one
    writer holds the GPU and another waits for it goes only after both let go, holding nothing meanwhile; with
    no writer it goes at once. Shown with the processes' own CLOCK_MONOTONIC stamps."""
    lock, go = tmp_path / "gpu0.lock", tmp_path / "go"
    reader = Actor(lock, "read", 0.0, tmp_path / "r.json", "--until", str(go))
    reader.wait_for("acquired")
    writer = Actor(lock, "write", 0.3, tmp_path / "w.json")  # waits for the reader: a window's drain
    turnstile = rwlock.writers_path(lock)
    _until(lambda: _flocks(turnstile, "READ") == 1)
    gate = _between(lock, tmp_path / "g.json")
    _waiting(tmp_path / "g.json")
    time.sleep(0.3)
    assert gate.poll() is None, "went while a writer waited"
    go.touch()
    reader.finish()
    w = writer.finish()
    assert gate.wait(60) == 0
    g = json.loads((tmp_path / "g.json").read_text())
    assert g["asked"] < w["acquired"] and g["went"] > w["synced"], (g, w)
    assert g["waited_s"] > 0.0
    # With no writer, it goes at once, and a writer asking right after is not held up by it: it holds nothing.
    alone = _between(lock, tmp_path / "alone.json")
    assert alone.wait(60) == 0
    assert json.loads((tmp_path / "alone.json").read_text())["waited_s"] == 0.0
    assert _flocks(lock, "READ") == 0 and _flocks(lock, "WRITE") == 0


def test_work_between_windows_goes_anyway_after_its_limit(tmp_path: Path) -> None:
    """A writer that holds on past the limit does not keep the work from starting (a spare still makes its
    context); the wait is the limit, not the window."""
    lock, go = tmp_path / "gpu0.lock", tmp_path / "go"
    writer = Actor(lock, "write", 0.0, tmp_path / "w.json", "--until", str(go))
    writer.wait_for("acquired")
    try:
        gate = _between(lock, tmp_path / "g.json", limit_s=0.4)
        assert gate.wait(60) == 0
        g = json.loads((tmp_path / "g.json").read_text())
        assert 0.4 <= g["waited_s"] < 5.0
        assert "synced" not in writer.record()  # the writer still held the GPU when the work went
    finally:
        go.touch()
    writer.finish()


def test_work_between_windows_goes_at_once_when_told(tmp_path: Path) -> None:
    """`stop()` ends the wait (a spare handed its job needs its context now), while the writer still holds."""
    lock, release, job = tmp_path / "gpu0.lock", tmp_path / "release", tmp_path / "job"
    writer = Actor(lock, "write", 0.0, tmp_path / "w.json", "--until", str(release))
    writer.wait_for("acquired")
    try:
        gate = _between(lock, tmp_path / "g.json", go=job)
        _waiting(tmp_path / "g.json")
        time.sleep(0.3)
        assert gate.poll() is None, "went while the writer held and nothing told it to"
        job.touch()
        assert gate.wait(60) == 0
        assert "synced" not in writer.record()
        assert 0.0 < json.loads((tmp_path / "g.json").read_text())["waited_s"] < 5.0
    finally:
        release.touch()
    writer.finish()


def test_a_context_creation_waits_for_the_window_and_logs_its_wait(tmp_path: Path) -> None:
    """engine/gpu/context.open_context itself, in a real process with a writer holding the GPU: its `wait`, then
    the writer's drop, then its `begin context`, in one lock log. On this CPU-only torch the CUDA call that
    follows fails, which the script reports; the GPU test of a spare's context checks the call itself."""
    lock, go, log = tmp_path / "gpu0.lock", tmp_path / "go", tmp_path / "lock.log"
    env = {**os.environ, rwlock.LOG_ENV: str(log)}
    writer = subprocess.Popen([sys.executable, str(ACTOR), str(lock), "write", "0.0", str(tmp_path / "w.json"),
                               "--until", str(go)], env=env)
    _until(lambda: "acquired" in (json.loads((tmp_path / "w.json").read_text())
                                  if (tmp_path / "w.json").exists() else {}))
    script = textwrap.dedent("""
        import sys
        from cudaforge.engine.gpu.context import open_context
        try:
            print("waited", open_context(0, sys.argv[1]))
        except Exception as exc:
            print("call", type(exc).__name__)
    """)
    maker = subprocess.Popen([sys.executable, "-c", script, str(lock)], env=env, stdout=subprocess.PIPE, text=True)
    _until(lambda: log.exists() and " wait context " in log.read_text())
    time.sleep(0.3)
    go.touch()
    out, _ = maker.communicate(timeout=120)
    assert writer.wait(60) == 0
    lines = [line.split() for line in log.read_text().splitlines()]
    order = [(int(pid), event, kind) for _, pid, event, kind, _ in lines]
    wait, drop = order.index((maker.pid, "wait", "context")), order.index((writer.pid, "drop", "write"))
    begin = order.index((maker.pid, "begin", "context"))
    assert wait < drop < begin, order
    assert out.strip(), out
