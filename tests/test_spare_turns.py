"""Spares for back-to-back rounds: the next spare starts when one takes its job, and an idle spare's
GPU warm-up lets announced jobs take the per-GPU lock first (engine/gpu/turns.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path

from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.gpu.turns import announce_job, jobs_dir, jobs_waiting, warmup_turn, withdraw_job
from cudaforge.engine.task import load_task

HERE = Path(__file__).parent / "core_tasks"
TASK = HERE / "task.py"


def _sleeper() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def _enter_in_thread(lock: str, has_job=lambda: False) -> tuple[threading.Event, threading.Thread]:
    entered = threading.Event()

    def warm() -> None:
        with warmup_turn(lock, has_job):
            entered.set()

    t = threading.Thread(target=warm, daemon=True)
    t.start()
    return entered, t


def test_idle_warm_up_waits_while_a_job_is_announced(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu0.lock")
    other = _sleeper()
    try:
        jobs_dir(lock).mkdir()
        (jobs_dir(lock) / str(other.pid)).touch()  # another process has a job and wants the GPU
        assert jobs_waiting(lock)
        entered, t = _enter_in_thread(lock)
        assert not entered.wait(0.6), "the warm-up took the GPU lock ahead of an announced job"
        (jobs_dir(lock) / str(other.pid)).unlink()  # the job holds the lock now (withdrawn)
        assert entered.wait(10)
        t.join(10)
    finally:
        other.kill()
        other.wait()


def test_announcements_of_dead_processes_are_ignored_and_removed(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu0.lock")
    gone = _sleeper()
    gone.kill()
    gone.wait()
    jobs_dir(lock).mkdir()
    (jobs_dir(lock) / str(gone.pid)).touch()
    assert not jobs_waiting(lock)
    assert not (jobs_dir(lock) / str(gone.pid)).exists()
    entered, t = _enter_in_thread(lock)
    assert entered.wait(10)
    t.join(10)


def test_a_spare_that_has_its_job_does_not_yield(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu0.lock")
    other = _sleeper()
    try:
        jobs_dir(lock).mkdir()
        (jobs_dir(lock) / str(other.pid)).touch()
        entered, t = _enter_in_thread(lock, has_job=lambda: True)
        assert entered.wait(10), "a spare with a job waited behind another job's announcement forever"
        t.join(10)
    finally:
        withdraw_job(lock)
        other.kill()
        other.wait()


def test_a_spare_with_its_job_is_announced_while_it_waits_and_not_once_it_holds_the_gpu(tmp_path: Path) -> None:
    """Announced only while it waits at the lock, as a job's worker is (gpu_share._switch): an announcement
    kept after the turn held every idle spare's warm-up back through the rest of this spare's warm-up and
    its job's wait for memory, and those spares were then handed jobs while still warming, and so on (session
    34's quarter sweep: spares yielded 10-30 s, jobs waited 62.7 s for their spares)."""
    import os

    from cudaforge.engine.gpu.rwlock import WRITE, acquire

    lock = str(tmp_path / "gpu0.lock")
    mine = jobs_dir(lock) / str(os.getpid())
    window = acquire(lock, WRITE)  # another process's timed window holds the GPU
    try:
        entered, t = _enter_in_thread(lock, has_job=lambda: True)
        deadline = time.monotonic() + 10
        while not mine.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert mine.exists() and not entered.is_set()  # waiting, announced
    finally:
        window.release(sync=None)
    assert entered.wait(10)
    t.join(10)
    assert not mine.exists()  # it held the GPU: the announcement went with its wait


def test_own_announcement_does_not_block_itself_and_is_withdrawn(tmp_path: Path) -> None:
    lock = str(tmp_path / "gpu0.lock")
    announce_job(lock)
    assert not jobs_waiting(lock)  # our own job never makes us wait
    withdraw_job(lock)
    assert list(jobs_dir(lock).iterdir()) == []


def _wait_ready(spare, limit_s: float = 120.0) -> dict:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        ready = spare.ready()
        if ready is not None:
            return ready
        time.sleep(0.05)
    raise AssertionError("spare never became ready")


def test_cuda_evaluator_starts_the_next_spare_when_one_takes_its_job(tmp_path: Path, monkeypatch) -> None:
    """Back-to-back rounds: the next spare is started at submit, not after the evaluation, so its
    process start and imports overlap the evaluation. (No GPU here: the job itself fails with
    'CUDA unavailable', which is fine; what is checked is the spare hand-over.)"""
    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    ev = Evaluator(EvalOptions(device="cuda", cache_dir=tmp_path / "cache", spares=1))
    task, cand = load_task(TASK), load_candidate(HERE / "correct.py")
    try:
        ev.prewarm()
        first = ev.spare
        ready = _wait_ready(first)
        assert ready["steps"]["import_s"] > 0  # where the warm-up's seconds went
        t0 = time.monotonic()
        result = asyncio.run(ev.evaluate(task, cand))
        t1 = time.monotonic()
        assert result.exit is not None and "spare_wait" in result.phases
        second = ev.spare
        assert second is not None and second is not first and second.alive()
        # Started at submit (not after the evaluation): the worker's run lies between its start and t1.
        assert t0 <= second.started <= t1 - 0.5 * result.exit.seconds
        second_ready = _wait_ready(second)
        assert second_ready["pid"] != ready["pid"]
    finally:
        asyncio.run(ev.aclose())
    assert ev.spare is None


def test_cpu_evaluator_keeps_prewarm_for_the_caller(tmp_path: Path) -> None:
    """On the CPU device the evaluation times on the host: no spare imports torch beside it."""
    ev = Evaluator(EvalOptions(device="cpu", cache_dir=tmp_path / "cache"))
    try:
        ev.prewarm()
        first = ev.spare
        _wait_ready(first)
        asyncio.run(ev.evaluate(load_task(TASK), load_candidate(HERE / "correct.py")))
        assert ev.spare is None
    finally:
        asyncio.run(ev.aclose())


# ------------------------------------------------------------------ how many spares (issue #22)


def _gone(pids: list[int], limit_s: float = 15.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not any(Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[-1].split()[0]
                   != "Z" for p in pids):
            return True
        time.sleep(0.05)
    return False


def test_two_spares_are_kept_warm_the_oldest_is_handed_out_and_all_are_killed_at_close(tmp_path: Path,
                                                                                       monkeypatch) -> None:
    """`spares = 2` on CUDA: two spares warm at once, the next evaluation takes the oldest ready one, a new one
    is started in its place, and aclose() kills every one of them. (No GPU here: the job fails with 'CUDA
    unavailable', which is fine; what is checked is the pool.)"""
    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    ev = Evaluator(EvalOptions(device="cuda", cache_dir=tmp_path / "cache", spares=2))
    try:
        assert ev.prewarm()
        oldest, younger = ev.spares
        assert oldest.started <= younger.started and ev.spare is oldest
        assert ev.prewarm() and ev.spares == (oldest, younger)  # cheap to call again: the same two
        pids = [_wait_ready(s)["pid"] for s in (oldest, younger)]
        t0 = time.monotonic()
        result = asyncio.run(ev.evaluate(load_task(TASK), load_candidate(HERE / "correct.py")))
        t1 = time.monotonic()
        assert result.exit is not None and "spare_wait" in result.phases
        assert oldest.used and not younger.used  # the oldest ready one ran the job
        assert len(ev.spares) == 2 and ev.spares[0] is younger and ev.spares[1] is not oldest  # one more started
        third = ev.spares[1]
        assert t0 <= third.started <= t1 - 0.5 * result.exit.seconds  # at submit, not after the evaluation
        assert _gone([pids[0]])  # used once, then gone
        supervisors = [s.handle.proc.pid for s in ev.spares]
    finally:
        asyncio.run(ev.aclose())
    assert ev.spares == () and ev.spare is None
    assert _gone([pids[1], *supervisors])
    assert not younger.workdir.exists() and not third.workdir.exists()


def test_a_younger_ready_spare_goes_before_an_older_one_still_warming(tmp_path: Path) -> None:
    """The pool's choice, on real sandboxed spares (their worker wrapped in a sleeper, so they are ready only
    when the test writes their ready.json): the oldest ready one; when none is ready, the oldest (furthest
    along); dead ones and other options' are dropped."""
    import json

    from cudaforge.engine.evaluation.spare import SparePool, start_spare

    sleeper = (sys.executable, "-c", "import time; time.sleep(60)")

    def start(key: str = "k") -> object:
        return start_spare(key=key, prefix=sleeper, python=sys.executable, device="cpu", gpu=0, env={},
                           phase_limits={}, default_limit_s=60, output_limit_bytes=1 << 20, open_files=256,
                           warm_limit_s=60)

    def ready(spare) -> None:
        (spare.workdir / "ready.json").write_text(json.dumps({"pid": 0, "warm_s": 0, "steps": {}}))

    pool = SparePool()
    assert pool.fill("k", 3, start) == 3
    a, b, c = pool.spares
    taken: list[object] = []  # spares handed out later, killed at the end
    try:
        ready(b)
        assert pool.take("k") is b  # a still warming, b ready: b
        took = pool.last_take  # what the take found, for a job that waited on its spare to say why
        assert took is not None and took.live == 3 and took.taken_ready and took.dropped_dead == 0
        assert took.taken_age_s is not None and len(took.waiting_ages_s) == 2
        assert took.waiting_ages_s[0] >= took.taken_age_s  # a is older than b
        assert pool.take("k") is a  # none ready: the oldest
        assert pool.last_take is not None and not pool.last_take.taken_ready and pool.last_take.live == 2
        c.kill(remove=False)
        assert pool.take("k") is None  # a dead spare is never handed out
        assert pool.last_take is not None and pool.last_take.dropped_dead == 1 and pool.last_take.taken_age_s is None
        assert pool.fill("k", 1, start) == 1
        other = pool.spares[0]
        assert pool.take("other options") is None and not other.alive()  # started for other options: killed
        assert pool.last_take is not None and pool.last_take.dropped_other_key == 1
        assert pool.last_take.started == 1  # the fill since the take before
        # A spare that dies between two takes is replaced by the next fill (a session's prewarm): the take
        # after it still counts the dead one and the starts, and hands out the oldest survivor.
        assert pool.fill("k", 2, start) == 2
        first, second = pool.spares
        first.kill(remove=False)
        assert pool.fill("k", 2, start) == 1
        assert pool.take("k") is second
        took = pool.last_take
        assert took is not None and took.dropped_dead == 1 and took.dropped_other_key == 0 and took.started == 3
        last = pool.take("k")
        assert last is not None and pool.last_take is not None
        assert (pool.last_take.dropped_dead, pool.last_take.started) == (0, 0)  # counted once, at the first take
        taken.extend((second, last))
    finally:
        for spare in (a, b, c, *taken, *pool.clear()):
            spare.kill()


def test_a_spare_found_dead_says_why_at_the_next_take() -> None:
    """A spare that dies before any job reaches it leaves no result behind: the take that drops it keeps its
    supervisor's outcome and its worker's last stderr line (one real sandboxed process that fails at once)."""
    from cudaforge.engine.evaluation.spare import SparePool, start_spare

    dying = (sys.executable, "-c", "import sys; sys.stderr.write('warm-up failed: no device\\n'); sys.exit(7)")

    def start() -> object:
        return start_spare(key="k", prefix=dying, python=sys.executable, device="cpu", gpu=0, env={},
                           phase_limits={}, default_limit_s=60, output_limit_bytes=1 << 20, open_files=256,
                           warm_limit_s=60)

    pool = SparePool()
    pool.fill("k", 1, start)
    (spare,) = pool.spares
    deadline = time.monotonic() + 30
    while spare.alive() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.take("k") is None
    took = pool.last_take
    assert took is not None and took.dropped_dead == 1 and len(took.deaths) == 1
    assert took.deaths[0].startswith("exited (code 7) in phase")
    assert took.deaths[0].endswith("last stderr line: warm-up failed: no device")
    assert not spare.workdir.exists()  # dropped: its files are gone, the note is what is left
    assert pool.take("k") is None
    assert pool.last_take is not None and pool.last_take.deaths == ()  # a death is told once, at the first take


SPARE_TURN = """
import sys, time
from cudaforge.engine.gpu.turns import warmup_turn
with warmup_turn(sys.argv[1], lambda: False):
    print(time.monotonic_ns(), flush=True)
"""


def test_a_window_being_prepared_keeps_idle_warm_ups_out_until_it_holds_the_gpu(tmp_path: Path) -> None:
    """gpu_share.window_ahead: while a worker prepares its timed window as a reader, an idle spare in another
    process starts no warm-up turn (the window would wait for it), a yield meanwhile keeps it so, and the
    warm-up comes in only after the window has had the GPU."""
    from cudaforge.engine.worker import gpu_share

    lock = str(tmp_path / "gpu0.lock")
    spare = None
    try:
        gpu_share.read(lock)
        gpu_share.window_ahead(lock)
        spare = subprocess.Popen([sys.executable, "-c", SPARE_TURN, lock], stdout=subprocess.PIPE, text=True)
        time.sleep(0.8)
        assert spare.poll() is None, "the spare's warm-up went ahead of a window being prepared"
        gpu_share.release_hold()  # a yield at a step boundary: the window is still being prepared
        gpu_share.read(lock)
        time.sleep(0.5)
        assert spare.poll() is None, "a yield let the spare's warm-up in ahead of the window"
        gpu_share.write(lock)
        window_at = time.monotonic_ns()
        assert not (jobs_dir(lock) / str(__import__("os").getpid())).exists()  # the announcement ended
        time.sleep(0.3)
        gpu_share.release_hold()
        assert spare.stdout is not None
        entered_at = int(spare.stdout.readline())
        assert spare.wait(30) == 0
        assert entered_at > window_at
    finally:
        gpu_share.release_all()
        if spare is not None and spare.poll() is None:
            spare.kill()
    assert gpu_share._STATE["window_ahead"] is None


COUNTERS_TURN = """
import sys, time
from cudaforge.engine.gpu.turns import counters_turn
with counters_turn(sys.argv[1], lambda: False) as turn:
    began = time.monotonic_ns()
    time.sleep(0.3)
    print(turn, began, time.monotonic_ns(), flush=True)
"""


def test_ncu_warm_ups_take_the_counters_one_at_a_time(tmp_path: Path) -> None:
    """Two ncu-wrapped spares that profile their warm-up kernels at once: ncu fails the second ("a driver
    resource was unavailable") and kills it. Across real processes, the counters turn is held by one at a
    time (the recorded spans never overlap), and a spare handed its job while it waits gets no turn and
    stops waiting (its profile is a writer of the GPU lock, which excludes warm-ups anyway)."""
    from cudaforge.engine.gpu.turns import counters_turn

    lock = str(tmp_path / "gpu0.lock")
    procs = [subprocess.Popen([sys.executable, "-c", COUNTERS_TURN, lock], stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    spans = []
    for proc in procs:
        out, _ = proc.communicate(timeout=60)
        held, began, ended = out.split()
        assert held == "True" and proc.returncode == 0
        spans.append((int(began), int(ended)))
    spans.sort()
    for (_, ended), (began, _) in zip(spans, spans[1:], strict=False):
        assert began >= ended, "two warm-ups held the counters at once"
    with counters_turn(lock, lambda: False) as mine:
        assert mine
        waited = time.monotonic()
        holder = subprocess.run([sys.executable, "-c", COUNTERS_TURN.replace("lambda: False", "lambda: True"), lock],
                                capture_output=True, text=True, timeout=60)
        assert holder.stdout.split()[0] == "False"  # had its job: no turn, no wait
        assert time.monotonic() - waited < 5
    with counters_turn(None, lambda: False) as free:
        assert free  # no lock (the CPU device): nothing to take


def test_the_lock_log_names_announcements_and_whom_a_yielding_warm_up_waits_for(tmp_path: Path, monkeypatch) -> None:
    """A spare that yields long says in the lock log which processes it yields to (session 34's spares yielded
    10-30 s, session 33's 0.3 s), and each announcement and withdrawal is a line of its own."""
    from cudaforge.engine.gpu import rwlock, turns

    log = tmp_path / "lock.log"
    monkeypatch.setenv(rwlock.LOG_ENV, str(log))
    monkeypatch.setattr(turns, "LOG_YIELD_AFTER_S", 0.2)
    lock = str(tmp_path / "gpu0.lock")
    other = _sleeper()
    try:
        (jobs_dir(lock)).mkdir(parents=True)
        (jobs_dir(lock) / str(other.pid)).touch()  # another live process's job
        with warmup_turn(lock, lambda: False, max_yield_s=0.5) as waited:
            assert waited >= 0.5
        announce_job(lock)
        withdraw_job(lock)
    finally:
        other.kill()
        other.wait()
    lines = [line.split() for line in log.read_text().splitlines()]
    yields = [parts for parts in lines if parts[2] == "yield"]
    assert [parts[3] for parts in yields] == [f"jobs:{other.pid}"] * 2  # at once, and once more after 0.2 s
    assert [parts[2:4] for parts in lines if parts[3] == "job"] == [["announce", "job"], ["withdraw", "job"]]
    assert all(len(parts) == 5 for parts in lines)  # bench/lock_timeline.py reads five fields a line
