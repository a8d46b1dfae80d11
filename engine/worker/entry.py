"""The worker's process entry points: `main` runs one job (a spec file) and writes its report; `spare_main`
warms a spare up and then runs the one job it is sent. See __main__.py for the command lines."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cudaforge.engine.procstat import TICKS_PER_S, read_stat
from cudaforge.engine.worker.failures import CandidateFailure, TaskFailure, with_task_frame
from cudaforge.engine.worker.harness import (
    current_phase,
    phase,
    phases,
    reset_phases,
    set_progress,
    write_result,
)
from cudaforge.engine.worker.job import EvalJob, ReportDraft, WorkerReport


def main(argv: list[str]) -> int:
    job = EvalJob.from_dict(json.loads(Path(argv[0]).read_text()))
    set_progress(Path(job.progress_path))
    result_path = Path(job.result_path)
    if "spare_wait" not in phases():  # a fresh worker: how long Python took to get here (a spare's is its warm-up's)
        phases()["python_start"] = round(process_age(), 4)
    phase("start")
    report = ReportDraft(phases=phases())
    tracing = False
    try:
        from cudaforge.engine.worker import peak_trace, pipeline, stack_samples

        tracing = peak_trace.start()  # a diagnostic, only where CUDAFORGE_MEMORY_HISTORY asks for it
        stack_samples.start()  # likewise, where CUDAFORGE_STACK_SAMPLES asks for it

        if job.mode == "profile":
            pipeline.profile_run(job, report)
        else:
            pipeline.evaluate(job, report)
    except TaskFailure as exc:
        report.outcome = "task_error"
        report.message = with_task_frame(str(exc), exc.__cause__, job.task_path)
        report.traceback = traceback.format_exc()
    except CandidateFailure as exc:
        report.outcome, report.message, report.traceback = exc.outcome, exc.message, exc.tb
        report.findings.extend(exc.findings)
        report.note_build_failure(exc.log, exc.build_seconds)
    except Exception as exc:  # the worker must always report
        from cudaforge.engine.worker import memory

        if memory.is_oom(exc):  # wherever it happens (inputs, clones, the harness): the oom outcome
            report.outcome, report.message = "oom", memory.oom_message(exc, current_phase() or "start")
        else:
            report.outcome, report.message = "runtime_error", f"{type(exc).__name__}: {exc}"
        report.traceback = traceback.format_exc()
    phase("done")
    if tracing:
        peak_trace.write()
    with contextlib.suppress(Exception):
        from cudaforge.engine.worker import stack_samples

        stack_samples.write()
    done_at = time.perf_counter()
    report.phases = dict(phases())
    with contextlib.suppress(Exception):
        from cudaforge.engine.worker import gpu_share

        report.phases.update(gpu_share.seconds())  # held side by side / alone (not a step of its own)
    with contextlib.suppress(Exception):
        from cudaforge.engine.worker import memory

        report.memory = memory.finish(report.memory_notes)
    report.phases["finish"] = round(time.perf_counter() - done_at, 4)  # the report's own making
    sys.stdout.flush()
    sys.stderr.flush()
    # The app takes the result as soon as this file is in place (renamed: never half a file) and leaves the
    # rest of this process's life (below, and its CUDA context's teardown) to a background reaper.
    write_result(result_path, _typed(report))
    _exit(job.mode)


def _exit(mode: str) -> None:
    """Leave the GPU and end the process at once, skipping interpreter teardown (candidate extensions or
    CUDA state may hang or crash in destructors).

    An evaluation frees its device memory under its GPU hold, lets the hold go, gives its page-locked host
    buffers back and then its memory reservation (pipeline.release_gpu; else all go at exit). A profile
    exits straight away: ncu prints its report only once this process is gone, so every step here is on the
    round's path, and the exit itself does what release_gpu would (after the final synchronize of the
    profiled range no device work is queued): the kernel drops this process's flocks (the GPU turn) with its
    open files, the driver frees its memory with them, and its memory reservation counts until it is a zombie
    (engine/gpu/lock.py process_alive), i.e. until its device files are closed."""
    if mode != "profile":
        with contextlib.suppress(Exception):
            from cudaforge.engine.worker import pipeline

            pipeline.release_gpu()
    with contextlib.suppress(Exception):
        phase("exit")  # when the exit began: the app's read-back and benches see where the rest went
    sys.stdout.flush()
    sys.stderr.flush()
    # The context's teardown is driver work with no hold, as its creation was: the lock log shows when it began.
    from cudaforge.engine.gpu.rwlock import log_event

    log_event("begin", "exit")
    os._exit(0)


def _typed(report: ReportDraft) -> dict[str, Any]:
    """The report as the app will read it (WorkerReport's JSON); a report that cannot be finished is
    reported as the worker's own runtime error rather than lost."""
    try:
        return report.finish().to_dict()
    except Exception as exc:  # a bug in the worker: say so, keep what the app needs to show it
        return WorkerReport(outcome="runtime_error", message=f"the worker's report is malformed: {exc}",
                            traceback=traceback.format_exc(), phases=dict(phases())).to_dict()


def process_age() -> float:
    """Seconds since this process started (the kernel's start time of it; 0.0 where /proc cannot tell)."""
    stat = read_stat("/proc/self/stat")
    with contextlib.suppress(OSError, IndexError, ValueError):
        if stat is not None:
            uptime = float(Path("/proc/uptime").read_text().split()[0])
            return max(0.0, uptime - stat.field(22) / TICKS_PER_S)
    return 0.0


def _cupti_parts(prof: Any) -> dict[str, float]:
    """Where a profiler session's start and stop went (its own stats, where this torch keeps them):
    `cupti_prepare_s` (Kineto's set-up: loading and initialising CUPTI), `cupti_enable_s` (activity
    collection switched on), `cupti_disable_s` (switched off, records flushed). On the H200 the spare's
    CUPTI step took 4.5-6.9 s while these took 0.02 s: torch.profiler's start imported torch._inductor and
    torch._dynamo (observe.device_profile), now the spare's `counting_s` step where it is needed at all."""
    with contextlib.suppress(Exception):
        stats = prof._stats() if callable(prof._stats) else prof._stats
        return {f"cupti_{part}_s": round(getattr(stats, f"profiler_{part}_call_duration_us") / 1e6, 4)
                for part in ("prepare", "enable", "disable")}
    return {}


SPARE_JOB = "job.json"
FORKED = [False]  # this spare was forked from the zygote (engine/evaluation/zygote.py), its imports done there
SPARE_READY = "ready.json"


@contextlib.contextmanager
def _gpu_lock(path: str | None, has_job: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """Hold the per-GPU lock as a reader (when one is given) for the spare's GPU warm-up only; announced
    jobs (evaluations, profiles) take it first (engine/gpu/turns.py)."""
    if not path:
        yield
        return
    from cudaforge.engine.gpu.turns import warmup_turn

    with warmup_turn(path, has_job):
        yield


_NCU_WARM_SOURCE = "extern \"C\" __global__ void %s(float* x) { x[threadIdx.x] += 1.0f; }"


def _warm_ncu(gpu: int) -> None:
    """One tiny kernel inside the profiled range while ncu wraps this spare: ncu sets up its profiling session
    now, not in the job's profile. On the H200 the first profiled kernel of a process cost about 0.6 s more
    than a second one (bench/ncu_cost.py: 1.03 s against 0.40 s). The report drops its row
    (observe.NCU_WARM_KERNEL); its compile does not count as the candidate's cache use, nor its launch."""
    import torch
    from cudaforge.engine import nvrtc, observe

    with nvrtc.uncounted_compiles():
        kernel = nvrtc.load_kernel(_NCU_WARM_SOURCE % observe.NCU_WARM_KERNEL, observe.NCU_WARM_KERNEL, device=gpu)
    x = torch.zeros(32, device=f"cuda:{gpu}")
    with torch.cuda.nvtx.range(observe.PROFILED_RANGE):
        kernel(grid=(1,), block=(32,), args=(x,))
    torch.cuda.synchronize()
    nvrtc.LAUNCH_COUNTS.pop(observe.NCU_WARM_KERNEL, None)


def preload(device: str) -> None:
    """Import what a spare's job will need, and nothing that touches a GPU: torch, the evaluation code, the
    extension builder, psutil (the host-memory admission's: 0.17 s of a round's load_task), the profiler's
    module (observe.device_profile's), and on CUDA triton, when installed (a Triton round does not pay for its
    import). A spare calls it before its GPU warm-up; the zygote (engine/evaluation/zygote.py) once, before it
    forks any spare, so it must never initialise CUDA: a forked CUDA state is unusable."""
    import torch  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401
    from cudaforge.engine import nvrtc, observe  # noqa: F401
    from cudaforge.engine.worker import pipeline  # noqa: F401
    from torch.autograd import profiler  # noqa: F401

    with contextlib.suppress(ImportError):
        import psutil  # noqa: F401
    if device == "cuda":
        from cudaforge.engine.worker.triton_support import preload as preload_triton

        preload_triton()


def freeze_warm_objects() -> None:
    """Move every object made so far (torch's and the evaluation code's imports, a spare's warm-up) out of the
    collector's reach for this process's life (gc.freeze): the full collection before an evaluation's device
    memory goes back, under its GPU hold, then walks only what the job made (the imports' 300,000 objects,
    torch._dynamo's included, took 0.13 s a pass on the CPU build here), and so does every automatic
    oldest-generation pass during the checks. In the zygote it also keeps the collector from touching, and
    so copying, the pages its forks share."""
    import gc

    gc.collect()  # what the imports left in cycles goes first; the rest is frozen
    gc.freeze()


def preload_counting() -> None:
    """What the meta-device counts (footprint, FLOPs) of a job without TaskCounts import: torch._dynamo."""
    import torch._dynamo  # noqa: F401


def run(args: list[str]) -> int:
    """The worker's command line after `python -m cudaforge.engine.worker` (see __main__.py): a spare, or one
    job's spec file. The zygote's forked spares run it in-process."""
    if len(args) >= 1 and args[0] == "--spare":
        extra = args[4:]
        lock = extra[extra.index("--lock") + 1] if "--lock" in extra[:-1] else None
        return spare_main(args[1], args[2], int(args[3]), lock_path=lock, warm_cupti="--cupti" in extra,
                          warm_counting="--no-counting" not in extra, warm_ncu="--ncu-warm" in extra)
    return main(args)


def spare_main(workdir: str, device: str, gpu: int, lock_path: str | None = None, warm_cupti: bool = False,
               warm_counting: bool = True, warm_ncu: bool = False) -> int:
    """A pre-warmed spare: start Python, import torch and the evaluation code, create the CUDA
    context, then wait for `job.json` in `workdir` and run that one job (never a second).

    The idle wait is its own phase ("idle") with its own limit in the supervisor; once the job is
    read, the normal phases and limits apply. If the supervisor disappears, the spare exits.
    """
    root = Path(workdir)
    set_progress(root / "sandbox" / "progress.json")
    parent = os.getppid()  # before the warm-up: a supervisor killed meanwhile (e.g. with a Ray actor) is noticed
    phase("warm")
    warm_start = time.perf_counter()
    job = root / SPARE_JOB
    steps: dict[str, float] = {}  # where the warm-up's seconds go (ready.json), for benches and tests
    mark = [warm_start]
    # exec to here (the interpreter and its site imports), or, forked from the zygote, fork to here
    steps["fork_s" if FORKED[0] else "python_start_s"] = round(process_age(), 4)

    def step(name: str) -> None:
        now = time.perf_counter()
        steps[name] = round(now - mark[0], 4)
        mark[0] = now

    import torch
    from cudaforge.engine.worker import pipeline  # the evaluation code, loaded while the LLM thinks
    with contextlib.suppress(Exception):  # a failure here shows up again, properly reported, in the job
        from cudaforge.engine import nvrtc, observe
        from cudaforge.engine.gpu.context import open_context

        preload(device)
        step("import_s")
        if warm_counting:
            preload_counting()
            step("counting_s")
        if device == "cuda" and torch.cuda.is_available():
            # No hold: a context creation launches and allocates nothing of ours (engine/gpu/context.py), and
            # under a hold spares' context turns were the last reader 67-99 of the H200 sweeps' 250 windows
            # waited for (about 30 s of each sweep's drain, sessions 18 and 22).
            # Admitted by memory first, beside the evaluations' reservations; not under ncu, whose profiles
            # hold the GPU alone and whose budget reads the free memory only (pipeline._budget).
            # Begun between timed windows (a creation slows a window's driver calls), unless a job came.
            gap_s = open_context(gpu, None if warm_ncu else lock_path, job.exists)
            pipeline.GPU_STATE["context"] = True  # the job needs no turn at the lock for it
            nvrtc._driver()
            step("context_s")
            steps["context_gap_s"] = round(gap_s, 4)  # of context_s: waiting for a gap between windows
            if warm_ncu:  # a profile spare, under ncu: its session set up by a kernel ncu replays
                # A reader, as the checks' warm-up below: never inside a timed window, and beside other evaluations'
                # side-by-side work, which measures nothing. The warm-up's metrics are dropped, so it needs no
                # GPU to itself (as a writer it stalled the next round's correctness by 0.8 s in 3 of 7 H200
                # latency rounds). But the counters are one collector's at a time: two spares' warm-ups at once
                # made ncu kill one (turns.counters_turn), so the warm-ups take their turn first, before the read
                # hold (a writer waiting meanwhile is not held up by a reader queued behind another warm-up).
                from cudaforge.engine.gpu.turns import counters_turn

                with counters_turn(lock_path, job.exists) as turn:
                    step("ncu_counters_wait_s")
                    if turn:
                        with contextlib.suppress(Exception), _gpu_lock(lock_path, job.exists):
                            step("ncu_lock_wait_s")
                            _warm_ncu(gpu)
                step("ncu_warm_s")
            if warm_cupti:  # an evaluation's spare (not ncu's)
                from cudaforge.engine import check_kernels

                # The checks' fused kernels (and the allocator's first segment), in a turn of their own: a
                # timed window waiting meanwhile goes between the two.
                with _gpu_lock(lock_path, job.exists):
                    check_kernels.prepare(torch.device("cuda", gpu))
                step("check_kernels_s")
                # The checks' primitives once each, a turn for each: a waiting window goes between any two.
                # With them in the turn above, spares' warm-up turns were a waiting window's last holder for
                # 3.4 s in all in the H200's whole sweep (0.1 s in session 14's, without them).
                for warm_step in pipeline.warm_check_steps(torch.device("cuda", gpu)):
                    with contextlib.suppress(Exception), _gpu_lock(lock_path, job.exists):  # a job runs them anyway
                        warm_step()
                step("warm_checks_s")
                # The kernel check's first profiler session loads and starts CUPTI: do it now, while the
                # LLM thinks. Outside the GPU lock, so no queued evaluation waits behind it, and therefore
                # with no device work at all: starting the session loads CUPTI and enables its activity
                # records in this process; a kernel launched here could be time-sliced into another
                # evaluation's timing window.
                with observe.device_profile() as warm:
                    pass
                step("cupti_s")
                steps.update(_cupti_parts(warm))
    freeze_warm_objects()
    step("freeze_s")
    if device == "cuda" and torch.cuda.is_initialized():
        # A spare holds only its context until it gets a job; freeing device memory is device work (another
        # process's cudaFree slowed a timed window's calls by 11 %, bench/window_disturbance.py): a turn.
        with contextlib.suppress(Exception), _gpu_lock(lock_path, job.exists):
            torch.cuda.empty_cache()
    ready = {"pid": os.getpid(), "warm_s": round(time.perf_counter() - warm_start, 4), "device": device,
             "steps": steps}
    write_result(root / SPARE_READY, ready)
    ready_at = time.time()
    phase("idle")
    while not job.exists():
        if os.getppid() != parent:  # the supervisor is gone: nobody will ever send a job
            os._exit(3)
        time.sleep(0.002)
    seen = time.time()
    spec_path = json.loads(job.read_text())["spec"]
    waited = handoff = 0.0  # how long the job waited for this spare to finish warming up; to be noticed
    with contextlib.suppress(OSError):
        submitted = job.stat().st_mtime
        waited = max(0.0, ready_at - submitted)
        handoff = max(0.0, seen - max(submitted, ready_at))
    reset_phases()
    phases()["spare_wait"] = round(waited, 4)
    phases()["spare_handoff"] = round(handoff, 4)
    # Where this spare's warm-up went (bench/spare_wait.py reads them from eval.json).
    phases().update({f"spare_{k[:-2]}": v for k, v in ready["steps"].items()})
    return main([spec_path])
