"""Round latency on CPU: result-cache keys and hits, the spare worker's lifecycle, NVRTC argument packing."""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import subprocess
import sys
import textwrap
import time
import timeit
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation import result_cache
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.results import EvalResult, Finding, WorkerExit
from cudaforge.engine.task import load_task

HERE = Path(__file__).parent / "core_tasks"
TASK = HERE / "task.py"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], limit_s: float = 15.0) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if not any(_alive(p) for p in pids):
            return True
        time.sleep(0.05)
    return False


def _wait_ready(ev: Evaluator, limit_s: float = 60.0) -> dict:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        spare = ev.spare
        assert spare is not None
        ready = spare.ready()
        if ready is not None:
            return ready
        assert spare.alive(), (spare.sandbox_dir / "stderr.txt").read_text(errors="replace")
        time.sleep(0.05)
    raise AssertionError("the spare never became ready")


# ------------------------------------------------------------------ cache keys


BASE_SETTINGS = {"device": "cuda", "precision": "fp32", "trials": 5, "seed": 42, "atol": None, "rtol": None,
                 "second_distribution": True, "timing": {"warmup": 10, "trials": 50}, "integrity_policy": {},
                 "speed_of_light_margin": 1.0, "peak_bandwidth_gbs": 4800.0}
BASE_ENV = {"device": {"device": "cuda", "name": "NVIDIA H200", "driver": "580.159.04"},
            "software": {"python": "3.12.3", "torch": "2.11.0", "torch_cuda": "13.0", "cudaforge": "0.1.0",
                         "code": "abc"}}


def test_cache_key_is_deterministic_and_order_independent() -> None:
    k1 = result_cache.eval_cache_key("cand", "task", BASE_SETTINGS, BASE_ENV)
    reordered = dict(reversed(list(BASE_SETTINGS.items())))
    assert result_cache.eval_cache_key("cand", "task", reordered, BASE_ENV) == k1
    assert len(k1) == 64 and int(k1, 16) >= 0


@pytest.mark.parametrize("change", [
    ("candidate", None), ("task", None), ("settings", ("trials", 6)), ("settings", ("atol", 1e-3)),
    ("settings", ("timing", {"warmup": 10, "trials": 51})), ("settings", ("device", "cpu")),
    ("env", ("device", {"device": "cuda", "name": "NVIDIA H100", "driver": "580.159.04"})),
    ("env", ("device", {"device": "cuda", "name": "NVIDIA H200", "driver": "590.1"})),
    ("env", ("software", {**BASE_ENV["software"], "torch": "2.12.0"})),
    ("env", ("software", {**BASE_ENV["software"], "code": "abd"})),
])
def test_cache_key_changes_with_everything_that_decides_a_result(change) -> None:
    base = result_cache.eval_cache_key("cand", "task", BASE_SETTINGS, BASE_ENV)
    what, kv = change
    cand, task, settings, env = "cand", "task", dict(BASE_SETTINGS), dict(BASE_ENV)
    if what == "candidate":
        cand = "cand2"
    elif what == "task":
        task = "task "
    elif what == "settings":
        settings[kv[0]] = kv[1]
    else:
        env[kv[0]] = kv[1]
    assert result_cache.eval_cache_key(cand, task, settings, env) != base


def test_eval_settings_ignore_timeouts_and_paths(cpu_options) -> None:
    a = result_cache.eval_settings(cpu_options)
    b = result_cache.eval_settings(replace(cpu_options, timeouts={"load_s": 1.0}, cache_dir=Path("/elsewhere")))
    assert a == b
    assert result_cache.eval_settings(replace(cpu_options, seed=7)) != a


def test_profile_key_depends_on_ncu_settings() -> None:
    k = result_cache.profile_cache_key("e" * 64, {"settings": {"metric_set": "cudaforge"}, "chip": "gh100"})
    assert k != result_cache.profile_cache_key("e" * 64, {"settings": {"metric_set": "minimal"}, "chip": "gh100"})
    assert k != result_cache.profile_cache_key("f" * 64, {"settings": {"metric_set": "cudaforge"}, "chip": "gh100"})


def _result(outcome: str = "ok", **kw) -> EvalResult:
    return EvalResult(outcome=outcome, accepted=outcome == "ok", task_path="t.py", candidate_hash="h", format="cpu",
                      device="cpu", exit=WorkerExit(reason="ok"), **kw)


def test_only_deterministic_undisturbed_outcomes_are_cacheable() -> None:
    assert result_cache.is_cacheable(_result("ok"))
    assert result_cache.is_cacheable(_result("compile_error"))
    assert result_cache.is_cacheable(_result("wrong_result"))
    for outcome in ("timeout", "crash", "cuda_error", "oom", "runtime_error", "integrity_failure", "task_error",
                    "unavailable"):
        assert not result_cache.is_cacheable(_result(outcome)), outcome
    shared = _result("ok", findings=(Finding("gpu_shared", "warn", "2 other processes"),))
    assert not result_cache.is_cacheable(shared)
    assert not result_cache.is_cacheable(_result("ok", cached=True))


def test_old_result_json_without_cached_field_loads() -> None:
    data = _result("ok").to_dict()
    del data["cached"]
    assert EvalResult.from_dict(data).cached is False


def test_environment_is_read_without_importing_torch() -> None:
    code = ("import sys; from cudaforge.engine.evaluation import result_cache as r; e = r.environment('cpu', 0); "
            "print(e['software']['torch'], 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[0] not in ("", "unknown") and out[1] == "False"


# ------------------------------------------------------------------ result cache, end to end


def test_identical_candidate_is_served_from_the_result_cache(cpu_options, tmp_path: Path) -> None:
    opts = replace(cpu_options, cache_dir=tmp_path / "cache", result_cache=True)
    # the build cache is per cache_dir: share the session's so the C++ build is not repeated
    (tmp_path / "cache").mkdir()
    (cpu_options.cache_dir / "extensions").mkdir(parents=True, exist_ok=True)
    os.symlink(cpu_options.cache_dir / "extensions", tmp_path / "cache" / "extensions")
    ev = Evaluator(opts)
    task, cand = load_task(TASK), load_candidate(HERE / "correct.py")
    first = asyncio.run(ev.evaluate(task, cand))
    assert first.accepted and not first.cached, first.message
    start = time.perf_counter()
    second = asyncio.run(ev.evaluate(task, cand))
    elapsed = time.perf_counter() - start
    assert second.cached and elapsed < 1.0
    assert replace(second, cached=False) == first
    fresh = asyncio.run(ev.evaluate(task, cand, use_cache=False))
    assert fresh.accepted and not fresh.cached
    # a runtime error is not stored: evaluating it again runs it again
    bad = load_candidate(HERE / "exception.py")
    assert asyncio.run(ev.evaluate(task, bad)).outcome == "runtime_error"
    again = asyncio.run(ev.evaluate(task, bad))
    assert again.outcome == "runtime_error" and not again.cached
    stored = list((tmp_path / "cache" / "results").rglob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["result"]["outcome"] == "ok"


def test_freezing_the_warm_objects_leaves_the_collector_only_what_comes_after() -> None:
    """entry.freeze_warm_objects (a spare's and the zygote's, after their imports): the imports' objects are
    frozen, so a full collection no longer walks them, while a cycle made afterwards is still collected."""
    probe = (
        "import gc, json\n"
        "from cudaforge.engine.worker.entry import freeze_warm_objects, preload\n"
        "preload('cpu')\n"
        "tracked = len(gc.get_objects())\n"
        "freeze_warm_objects()\n"
        "class Node:\n"
        "    pass\n"
        "a, b = Node(), Node()\n"
        "a.other, b.other = b, a\n"
        "del a, b\n"
        "print(json.dumps({'tracked': tracked, 'frozen': gc.get_freeze_count(),\n"
        "                  'left': len(gc.get_objects()), 'collected': gc.collect()}))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=300, check=True)
    counts = json.loads(out.stdout.strip().splitlines()[-1])
    assert counts["frozen"] >= 0.9 * counts["tracked"] > 50_000, counts  # torch's imports: over 100,000 objects
    assert counts["left"] < 0.01 * counts["tracked"], counts
    assert counts["collected"] >= 2, counts  # the two nodes of the cycle made after the freeze


# ------------------------------------------------------------------ spare worker


def test_spare_is_created_used_once_replaced_only_on_prewarm_and_killed(cpu_options) -> None:
    ev = Evaluator(cpu_options)
    task, cand = load_task(TASK), load_candidate(HERE / "correct.py")
    assert ev.spare is None
    assert ev.prewarm()
    spare = ev.spare
    assert spare is not None
    assert ev.prewarm() and ev.spare is spare  # cheap to call again: the same spare
    first_pid = _wait_ready(ev)["pid"]
    sup_pid = spare.handle.proc.pid
    r = asyncio.run(ev.evaluate(task, cand))
    assert r.accepted, r.message + r.stderr_tail
    assert "spare_wait" in r.phases and r.phases.get("start", 99) < 1.0  # no process start paid here
    assert "spare_freeze" in r.phases  # its warm objects out of the collector's reach (freeze_warm_objects)
    assert ev.spare is None  # used once, not replaced by itself
    assert _wait_gone([first_pid, sup_pid])
    # without prewarm the next evaluation starts a fresh worker
    r2 = asyncio.run(ev.evaluate(task, cand))
    assert r2.accepted and "spare_wait" not in r2.phases and ev.spare is None
    assert ev.prewarm()
    second_pid = _wait_ready(ev)["pid"]
    assert second_pid != first_pid
    sup2 = ev.spare.handle.proc.pid
    workdir = ev.spare.workdir
    asyncio.run(ev.aclose())
    assert ev.spare is None
    assert _wait_gone([second_pid, sup2])
    assert not workdir.exists()


def test_spare_is_not_reused_after_a_crash_and_phase_limits_apply(cpu_options) -> None:
    opts = replace(cpu_options, timeouts={**cpu_options.timeouts, "correctness_s": 3.0})
    ev = Evaluator(opts)
    task = load_task(TASK)
    ev.prewarm()
    pid = _wait_ready(ev)["pid"]
    crashed = asyncio.run(ev.evaluate(task, load_candidate(HERE / "crash.py")))
    assert crashed.outcome == "crash" and ev.spare is None
    assert _wait_gone([pid])
    ev.prewarm()
    pid = _wait_ready(ev)["pid"]
    start = time.monotonic()
    hung = asyncio.run(ev.evaluate(task, load_candidate(HERE / "hang.py")))
    assert hung.outcome == "timeout" and hung.exit is not None and hung.exit.phase == "correctness"
    assert time.monotonic() - start < 30  # the correctness limit, not the idle limit, applied
    assert _wait_gone([pid]) and ev.spare is None


def test_idle_spare_dies_at_its_idle_limit_and_evaluation_falls_back(cpu_options) -> None:
    ev = Evaluator(replace(cpu_options, spare_idle_s=1.0))
    ev.prewarm()
    pid = _wait_ready(ev)["pid"]
    assert _wait_gone([pid], limit_s=20)
    spare = ev.spare
    assert spare is not None
    end = time.monotonic() + 10
    while spare.alive() and time.monotonic() < end:
        time.sleep(0.05)
    assert not spare.alive()
    r = asyncio.run(ev.evaluate(load_task(TASK), load_candidate(HERE / "correct.py")))
    assert r.accepted and "spare_wait" not in r.phases


def test_spare_dies_with_the_app(cpu_options, tmp_path: Path) -> None:
    """The app exits without aclose (os._exit skips atexit too): the supervisor notices and kills the tree."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys, time
        from pathlib import Path
        from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
        ev = Evaluator(EvalOptions(device="cpu", cache_dir=Path({str(cpu_options.cache_dir)!r})))
        ev.prewarm()
        while ev.spare.ready() is None:
            time.sleep(0.05)
        print(json.dumps([ev.spare.ready()["pid"], ev.spare.handle.proc.pid]), flush=True)
        os._exit(0)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    worker, supervisor = json.loads(out.stdout.strip().splitlines()[-1])
    assert _wait_gone([worker, supervisor], limit_s=15)


def test_gpu_lock_is_one_per_machine_whatever_the_cache_dir(cpu_options, tmp_path: Path, monkeypatch) -> None:
    """Two sessions with different cache dirs must still never time on one GPU at the same moment."""
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    monkeypatch.delenv("CUDAFORGE_LOCK_DIR", raising=False)
    specs = [Evaluator(EvalOptions(device="cuda", gpu=1, cache_dir=tmp_path / d)).worker_job(
        load_task(TASK), tmp_path / "c.py", tmp_path / d) for d in ("a", "b")]
    assert specs[0].gpu_lock_path == specs[1].gpu_lock_path
    assert specs[0].gpu_lock_path.endswith("gpu1.lock") and str(tmp_path) not in specs[0].gpu_lock_path
    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    spec = Evaluator(EvalOptions(device="cuda", gpu=0, cache_dir=tmp_path / "a")).worker_job(
        load_task(TASK), tmp_path / "c.py", tmp_path / "a")
    assert spec.gpu_lock_path == str(tmp_path / "locks" / "gpu0.lock")


def test_spare_gpu_warm_up_waits_for_the_gpu_lock(tmp_path: Path) -> None:
    """A spare creates its CUDA context only while holding the per-GPU lock, never during a timing."""
    import threading

    from cudaforge.engine.worker.entry import _gpu_lock
    from filelock import FileLock

    path = str(tmp_path / "gpu0.lock")
    entered = threading.Event()

    def warm() -> None:
        with _gpu_lock(path):
            entered.set()

    holder = FileLock(path)
    holder.acquire()
    t = threading.Thread(target=warm)
    t.start()
    assert not entered.wait(0.5)  # another worker is timing: the warm-up waits
    holder.release()
    assert entered.wait(10)
    t.join(10)
    with _gpu_lock(None):  # CPU device: no lock at all
        pass


def test_cuda_spare_is_started_with_the_gpu_lock_and_cupti_warm_up(tmp_path: Path, monkeypatch) -> None:
    """The evaluation spare holds the lock while warming and starts CUPTI; on a machine without a GPU it
    skips the GPU part and is ready all the same."""
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    monkeypatch.setenv("CUDAFORGE_LOCK_DIR", str(tmp_path / "locks"))
    ev = Evaluator(EvalOptions(device="cuda", cache_dir=tmp_path / "cache"))
    try:
        assert ev.prewarm()
        end = time.monotonic() + 120
        while ev.spare.ready() is None and time.monotonic() < end:
            time.sleep(0.05)
        ready = ev.spare.ready()
        assert ready is not None, "spare never became ready"
        argv = Path(f"/proc/{ready['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"--lock" in argv and argv[argv.index(b"--lock") + 1] == str(tmp_path / "locks" / "gpu0.lock").encode()
        assert b"--cupti" in argv
    finally:
        asyncio.run(ev.aclose())


# ------------------------------------------------------------------ NVRTC argument packing (no GPU needed)


def _kernel(types: list[str]):
    from cudaforge.engine import nvrtc

    return nvrtc.Kernel("k", ctypes.c_void_p(0), ctypes.c_void_p(0), types)


def test_fast_packing_writes_each_argument_by_its_declared_type() -> None:
    import struct

    k = _kernel(["pointer", "float", "long long", "double", "int", "unsigned char", "bool"])
    layout = k.layout
    assert layout is not None
    values = layout.values((0x1234_5678_9ABC, 0.5, -3, 0.25, 7, 200, True), "k")
    assert values is not None
    block = layout.take()
    assert layout.pack(block, values)
    raw = bytes(block[0])
    ptrs = [block[1][i] for i in range(7)]
    base = ctypes.addressof(block[0])
    offsets = [p - base for p in ptrs]
    assert offsets == [0, 8, 16, 24, 32, 36, 37]  # each naturally aligned
    assert struct.unpack_from("<Q", raw, 0)[0] == 0x1234_5678_9ABC
    assert struct.unpack_from("<f", raw, 8)[0] == 0.5
    assert struct.unpack_from("<q", raw, 16)[0] == -3
    assert struct.unpack_from("<d", raw, 24)[0] == 0.25
    assert struct.unpack_from("<i", raw, 32)[0] == 7
    assert raw[36] == 200 and raw[37] == 1


def test_arguments_outside_the_fast_path_fall_back_to_ctypes_semantics() -> None:
    k = _kernel(["pointer", "unsigned int"])
    layout = k.layout
    assert layout is not None
    assert layout.values((0, ctypes.c_uint32(5)), "k") is None  # a ctypes value: slow path
    values = layout.values((0, -1), "k")  # ctypes wraps -1 into an unsigned; struct refuses: slow path
    assert values is not None and not layout.pack(layout.take(), values)
    packed = k._pack((0, -1))
    assert packed[1].value == 2**32 - 1
    assert _kernel(["pointer", "char"]).layout is None  # no fast layout for types it does not cover


def test_fast_packing_costs_a_fraction_of_the_old_per_call_work() -> None:
    """Micro-benchmark of the host-side work per launch (the driver call itself needs a GPU)."""
    k = _kernel(["pointer", "pointer", "float", "long long", "double", "int"])
    args = (1 << 40, 2 << 40, 0.5, 12345, 0.25, 3)
    layout = k.layout
    assert layout is not None

    def fast() -> None:
        values = layout.values(args, "k")
        block = layout.take()
        layout.pack(block, values)
        layout.pool.append(block)

    def old() -> None:  # what every launch did before: ctypes objects and a fresh pointer array
        packed = k._pack(args)
        (ctypes.c_void_p * len(packed))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in packed])

    n = 20000
    fast_us = min(timeit.repeat(fast, number=n, repeat=3)) / n * 1e6
    old_us = min(timeit.repeat(old, number=n, repeat=3)) / n * 1e6
    print(f"per-launch packing: fast {fast_us:.2f} µs, old {old_us:.2f} µs")
    assert fast_us * 2 < old_us


# ------------------------------------------------------------------ timing window (CPU clock, same rule as on the GPU)


def test_timer_warms_up_for_a_minimum_time_and_times_short_calls_longer() -> None:
    """Short callables get more trials (about min_time_ms each, capped); long ones keep the minimum count."""
    import torch
    from cudaforge.engine.worker.timing import Timer

    calls = {"short": 0, "long": 0}

    def call(name: str, seconds: float):
        def run() -> None:
            calls[name] += 1
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
        return run

    timer = Timer(torch.device("cpu"), l2_flush=False, l2_bytes=0)
    start = time.perf_counter()
    short = timer.event_times({"short": call("short", 0.0002)}, warmup=2, trials=5, warmup_ms=20.0,
                              min_time_ms=30.0, max_trials=400)
    # Warm-up by time: ~20 ms of 0.2 ms calls is ~100 calls, not the 2 asked for; trials ~30 ms / 0.2 ms = ~150,
    # within the cap. The floors leave room for a loaded machine, where each busy-wait call takes longer in wall
    # time (two CI runs on 2 cores: 35 warm-up calls), and still tell the time rule from the counts (2 and 5).
    assert calls["short"] - len(short["short"]) >= 10
    assert 25 <= len(short["short"]) <= 400
    assert time.perf_counter() - start < 5
    capped = timer.event_times({"short": call("short", 0.0002)}, warmup=2, trials=5, warmup_ms=0.0,
                               min_time_ms=1000.0, max_trials=40)
    assert len(capped["short"]) == 40
    long = timer.event_times({"long": call("long", 0.01)}, warmup=1, trials=5, warmup_ms=0.0, min_time_ms=20.0,
                             max_trials=400)
    assert len(long["long"]) == 5  # 5 x 10 ms already exceed 20 ms: the minimum count stands
    fixed = timer.event_times({"short": call("short", 0.0002)}, warmup=1, trials=7)
    assert len(fixed["short"]) == 7  # without the time rules: the old fixed counts
    # max_time_ms: a long pair warms up for a quarter of it (2 rounds of 2 x 10 ms, not 10) and is timed about
    # max_time_ms per callable (100 ms / 10 ms = 10 trials, not 50); a short pair keeps its counts.
    calls.clear()
    calls.update(reference=0, candidate=0)
    both = {"reference": call("reference", 0.01), "candidate": call("candidate", 0.01)}
    bounded = timer.event_times(both, warmup=10, trials=50, min_time_ms=20.0, max_trials=400, max_time_ms=100.0)
    assert [len(v) for v in bounded.values()] == [10, 10] and calls["reference"] == calls["candidate"] == 12, calls
    calls.update(reference=0, candidate=0)  # the cap holds without min_time_ms too
    alone = timer.event_times(both, warmup=10, trials=50, max_time_ms=100.0)
    assert [len(v) for v in alone.values()] == [10, 10] and calls["reference"] == calls["candidate"] == 12, calls
    calls["short"] = 0
    quick = timer.event_times({"short": call("short", 0.0002)}, warmup=10, trials=50, max_time_ms=100.0)
    assert len(quick["short"]) == 50 and calls["short"] == 60, calls


# ------------------------------------------------------------------ the result at the report, the exit in the background

LINGER_S = 3.0
_LINGERING = f'''"""Correct in plain PyTorch; its worker lingers {LINGER_S} s after writing its report (its exit path sleeps)."""

import time

import torch
import torch.nn as nn
from cudaforge.engine.worker import pipeline

_release = pipeline.release_gpu


def _linger():
    time.sleep({LINGER_S})
    _release()


pipeline.release_gpu = _linger


class ModelNew(nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(cols))

    def forward(self, x):
        return torch.relu(x) * 0.5 + self.bias
'''


def test_the_result_comes_at_the_report_and_the_worker_is_reaped_after(cpu_options, tmp_path: Path) -> None:
    """The evaluation returns while its worker still lives (lingering after its report); the worker is reaped,
    and its work folder removed, afterwards: `settle()` waits for that."""
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.evaluation.sandbox import live_sandbox_pids

    ev = Evaluator(cpu_options)
    ev.prewarm()
    pid = _wait_ready(ev)["pid"]
    workdir = ev.spare.workdir
    supervisor = ev.spare.handle.proc.pid

    async def go() -> tuple[EvalResult, bool, float]:
        start = time.monotonic()
        result = await ev.evaluate(load_task(TASK), Candidate.from_source(_LINGERING))
        alive_at_return = _alive(pid)
        await ev.settle()
        return result, alive_at_return, time.monotonic() - start

    result, alive_at_return, total = asyncio.run(go())
    assert result.exit is not None and result.exit.reason == "ok", result.message + result.stderr_tail
    assert result.correctness is not None and result.correctness.passed
    assert alive_at_return, "the evaluation waited for the worker's exit"
    assert {"app", "app.submit", "app.read", "app.assemble", "finish"} <= set(result.phases)
    assert result.phases["app.read"] < 1.0  # the exit is not in it
    assert not _alive(pid) and supervisor not in live_sandbox_pids()
    assert ev.last_exit_s is not None and ev.last_exit_s >= LINGER_S * 0.8 and total >= LINGER_S
    assert not workdir.exists()  # removed once the worker was gone
    asyncio.run(ev.aclose())
