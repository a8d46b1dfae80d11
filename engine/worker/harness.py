"""The worker: load a task and a candidate, build, check correctness, time, and report.

Runs inside the sandbox (see engine/sandbox.py); everything here may be crashed or hung by the
candidate, so progress is written to a file before each phase and the result is written once,
atomically, at the end. The parent turns a missing result into a crash or timeout outcome.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import math
import os
import statistics
import sys
import threading
import time
import traceback
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..results import TimingStats

_PROGRESS: Path | None = None
EXT_RANGE = "cudaforge_ext::"  # profiler label of extension-function calls while `label_calls` is set
_PHASES: dict[str, float] = {}
_PHASE_START: list[Any] = [None, 0.0]


class TaskFailure(Exception):
    """The task itself is broken (not the candidate): reported as outcome task_error."""


class CandidateFailure(Exception):
    def __init__(self, outcome: str, message: str, log: str = "", tb: str = "") -> None:
        super().__init__(message)
        self.outcome, self.message, self.log, self.tb = outcome, message, log, tb


def phase(name: str) -> None:
    """Record the start of a phase (for per-phase time limits and for crash reports)."""
    now = time.perf_counter()
    if _PHASE_START[0] is not None:
        _PHASES[_PHASE_START[0]] = round(_PHASES.get(_PHASE_START[0], 0.0) + now - _PHASE_START[1], 4)
    _PHASE_START[0], _PHASE_START[1] = name, now
    if _PROGRESS is not None:
        tmp = _PROGRESS.with_suffix(".tmp")
        tmp.write_text(json.dumps({"phase": name, "since": time.time(), "phases": _PHASES}))
        os.replace(tmp, _PROGRESS)


def import_file(path: str, module_name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ build cache and launch hooks


class BuildRecorder:
    """Wraps load_inline: a content-keyed build directory per extension, build time, call counts."""

    def __init__(self, cache_root: Path | None) -> None:
        self.cache_root = cache_root
        self.seconds = 0.0
        self.cached = True
        self.builds = 0
        self.calls: dict[str, int] = {}
        self.extension_functions: set[str] = set()
        self.label_calls = False  # label each call for torch.profiler (the CPU pytorch_fallback check)

    def install(self) -> None:
        import torch.utils.cpp_extension as cpp_ext

        original = cpp_ext.load_inline
        recorder = self

        def load_inline(name: str, cpp_sources: Any, cuda_sources: Any = None, *args: Any, **kwargs: Any) -> Any:
            import torch

            if recorder.cache_root is not None and not kwargs.get("build_directory"):
                key_material = json.dumps(
                    [name, cpp_sources, cuda_sources, list(args), sorted((k, repr(v)) for k, v in kwargs.items()),
                     torch.__version__, str(torch.version.cuda), sys.version_info[:2]],
                    default=str,
                )
                key = hashlib.sha256(key_material.encode()).hexdigest()[:24]
                build_dir = recorder.cache_root / f"{name}-{key}"
                build_dir.mkdir(parents=True, exist_ok=True)
                kwargs["build_directory"] = str(build_dir)
                was_built = any(build_dir.glob("*.so"))
            else:
                was_built = False
            start = time.perf_counter()
            module = original(name, cpp_sources, cuda_sources, *args, **kwargs)
            recorder.seconds += time.perf_counter() - start
            recorder.builds += 1
            recorder.cached = recorder.cached and was_built
            return recorder.wrap_module(module)

        cpp_ext.load_inline = load_inline

    def wrap_module(self, module: Any) -> Any:
        """A proxy whose functions count their calls: the CPU/inline 'custom code ran' evidence."""
        recorder = self

        class Counted:
            def __getattr__(self, attr: str) -> Any:
                value = getattr(module, attr)
                if callable(value) and not attr.startswith("__"):
                    qual = f"{getattr(module, '__name__', 'ext')}.{attr}"
                    recorder.extension_functions.add(qual)

                    def counted(*a: Any, **k: Any) -> Any:
                        if recorder.label_calls:
                            import torch

                            with torch.profiler.record_function(EXT_RANGE + qual):
                                out = value(*a, **k)
                        else:
                            out = value(*a, **k)  # a call that raises did no work: count it only after
                        recorder.calls[qual] = recorder.calls.get(qual, 0) + 1
                        return out

                    return counted
                return value

        return Counted()


def custom_launches(recorder: BuildRecorder) -> dict[str, int]:
    counts = dict(recorder.calls)
    nvrtc = sys.modules.get("cudaforge.engine.nvrtc")
    if nvrtc is not None:
        counts.update({f"nvrtc:{k}": v for k, v in nvrtc.LAUNCH_COUNTS.items()})
    triton_launches = sys.modules.get("cudaforge.engine.worker.triton_support")
    if triton_launches is not None:
        counts.update(triton_launches.launches())
    return counts


def reset_launches(recorder: BuildRecorder) -> None:
    recorder.calls.clear()
    nvrtc = sys.modules.get("cudaforge.engine.nvrtc")
    if nvrtc is not None:
        nvrtc.LAUNCH_COUNTS.clear()
    triton_launches = sys.modules.get("cudaforge.engine.worker.triton_support")
    if triton_launches is not None:
        triton_launches.LAUNCH_COUNTS.clear()


# ------------------------------------------------------------------ inputs


def to_device(value: Any, device: Any, float_dtype: Any) -> Any:
    import torch

    if isinstance(value, torch.Tensor):
        t = value.to(device)
        if t.is_floating_point() and float_dtype is not None and t.dtype != float_dtype:
            t = t.to(float_dtype)
        return t
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device, float_dtype) for v in value)
    return value


def clone_inputs(inputs: list[Any]) -> list[Any]:
    import torch

    from .memory import side

    with side("inputs"):  # an OOM here names the inputs side
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def shift_distribution(inputs: list[Any], seed: int) -> list[Any]:
    """A second input distribution: scaled and offset, with a few large values mixed in."""
    import torch

    gens: dict[str, Any] = {}
    out = []
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0 and x.is_contiguous() \
                and x.dtype == torch.float32:
            # In place and in slices: the draw is ours, and full-size temporaries cost its size again each.
            key = str(x.device)
            if key not in gens:
                gens[key] = torch.Generator(device=x.device).manual_seed(seed)
            flat = x.view(-1)
            step = 1 << 23
            for start in range(0, flat.numel(), step):
                part = flat[start:start + step]
                part.mul_(2.0).add_(0.5)
                mask = torch.rand(part.shape, generator=gens[key], device=x.device) < 0.001
                part[mask] *= 8.0
                del mask
            out.append(x)
        elif isinstance(x, torch.Tensor) and x.is_floating_point() and x.numel() > 0:
            y = x.float() * 2.0 + 0.5
            key = str(y.device)
            if key not in gens:  # drawn where the tensor lives: no host-side pass over large inputs
                gens[key] = torch.Generator(device=y.device).manual_seed(seed)
            mask = torch.rand(y.shape, generator=gens[key], device=y.device) < 0.001
            y = torch.where(mask, y * 8.0, y)
            out.append(y.to(x.dtype))
        else:
            out.append(x)
    _settle(out)
    return out


def make_inputs(task: types.ModuleType, seed: int, device: Any, float_dtype: Any) -> list[Any]:
    """The task's inputs for `seed`, on `device`.

    On a GPU, `get_inputs()` runs under that device as the default (seeded the same way): a
    32M-element `randn` takes microseconds there instead of ~0.3 s on the host plus the copy. A task
    whose `get_inputs()` cannot run that way is drawn on the host, as KernelBench does. The draws are
    waited for, so no pending work spills into what is measured next."""
    import torch

    from .memory import is_oom, side

    raw = None
    if getattr(device, "type", "cpu") == "cuda":
        torch.manual_seed(seed)
        try:
            with torch.device(device), side("inputs"):
                raw = task.get_inputs()
        except Exception as exc:
            if is_oom(exc):
                raise
            raw = None
    try:
        if raw is None:
            torch.manual_seed(seed)
            raw = task.get_inputs()
    except Exception as exc:
        raise TaskFailure(f"get_inputs() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(raw, (list, tuple)):
        raise TaskFailure(f"get_inputs() must return a list or tuple of inputs, got {type(raw).__name__}")
    with side("inputs"):
        out = [to_device(x, device, float_dtype) for x in raw]
        _settle(out)
    return out


def _settle(values: list[Any]) -> None:
    """Wait for the device work that produced `values` (nothing to do on the CPU)."""
    import torch

    if any(isinstance(v, torch.Tensor) and v.is_cuda for v in values):
        torch.cuda.synchronize()


# ------------------------------------------------------------------ numerics


def set_reference_numerics() -> dict[str, Any]:
    """IEEE fp32 for the correctness reference: TF32 off for matmul and cuDNN."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    return {"matmul_allow_tf32": False, "cudnn_allow_tf32": False, "float32_matmul_precision": "highest"}


def set_default_numerics(defaults: dict[str, Any]) -> dict[str, Any]:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = defaults["matmul_allow_tf32"]
    torch.backends.cudnn.allow_tf32 = defaults["cudnn_allow_tf32"]
    torch.set_float32_matmul_precision(defaults["float32_matmul_precision"])
    return dict(defaults)


def current_numerics() -> dict[str, Any]:
    import torch

    return {
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


# ------------------------------------------------------------------ timing


def stats(samples_ms: list[float], method: str) -> TimingStats:
    s = sorted(samples_ms)
    q = statistics.quantiles(s, n=4) if len(s) >= 2 else [s[0], s[0], s[0]]
    return TimingStats(median_ms=statistics.median(s), iqr_ms=q[2] - q[0], min_ms=s[0], max_ms=s[-1],
                       mean_ms=statistics.fmean(s), trials=len(s), method=method)


def quartiles(samples: list[float]) -> tuple[float, float]:
    q = statistics.quantiles(sorted(samples), n=4) if len(samples) >= 2 else [samples[0]] * 3
    return q[0], q[2]


REAL_CLOCKS: dict[str, Any] = {"perf_counter": time.perf_counter, "monotonic": time.monotonic}


def capture_clocks() -> None:
    """Keep references to the timing functions before the candidate is imported, so patching
    them later cannot falsify our numbers (it is still reported as harness_tampering)."""
    import torch

    REAL_CLOCKS["perf_counter"] = time.perf_counter
    REAL_CLOCKS["monotonic"] = time.monotonic
    REAL_CLOCKS["synchronize"] = torch.cuda.synchronize
    REAL_CLOCKS["event"] = torch.cuda.Event


class Timer:
    """Interleaved timing of several callables with an L2 flush before every call."""

    def __init__(self, device: Any, l2_flush: bool, l2_bytes: int) -> None:
        import torch

        self.device = device
        self.cuda = device.type == "cuda"
        self.flush_buffer = None
        if self.cuda and l2_flush:
            self.flush_buffer = torch.empty(max(2 * l2_bytes, 64 << 20) // 4, dtype=torch.float32, device=device)
        # The real clocks, captured before any candidate code ran (see capture_clocks).
        self._sync = REAL_CLOCKS["synchronize"] if self.cuda else (lambda *a: None)
        self._perf = REAL_CLOCKS["perf_counter"]
        self._event = REAL_CLOCKS["event"] if self.cuda else None
        self._mono = REAL_CLOCKS["monotonic"]
        # CPU: each callable's total on the timer clock and on an independent clock (checks.clock_findings).
        self.clock_totals: dict[str, tuple[float, float]] = {}

    def flush(self) -> None:
        if self.flush_buffer is not None:
            self.flush_buffer.zero_()

    def event_times(self, fns: dict[str, Callable[[], Any]], warmup: int, trials: int, *, warmup_ms: float = 0.0,
                    min_time_ms: float = 0.0, max_trials: int | None = None, hooks: Any = None) -> dict[str, list[float]]:
        """Interleaved samples (ms) of each callable, flushed before every call.

        Warm-up runs `warmup` rounds and at least `warmup_ms`, so clocks that dropped while the GPU sat
        idle (a worker waiting for its turn) have come back up before anything is timed. Then at least
        `trials` rounds, more for short callables until each has about `min_time_ms` of samples (at most
        `max_trials`): 50 calls of a 60 µs kernel are a 3 ms window, too short to repeat to a few %.

        `hooks` (optional: begin(trials), before(name), after(name, output)) run outside the timed window of
        each timed call; checks.TimedOutputCheck compares sampled outputs there."""
        names = list(fns)
        start = self._perf()
        rounds = 0
        while rounds < warmup or (self._perf() - start) * 1e3 < warmup_ms:
            for n in names:
                fns[n]()
            rounds += 1
            if warmup_ms > 0 and rounds % 8 == 0:
                self._sync()  # keep the host from racing ahead of the device
        self._sync()
        if min_time_ms > 0 and rounds > 0:
            per_call_ms = (self._perf() - start) * 1e3 / (rounds * len(names))
            wanted = math.ceil(min_time_ms / max(per_call_ms, 1e-6))
            trials = max(trials, min(wanted, max_trials or wanted))
        samples: dict[str, list[float]] = {n: [] for n in names}
        if hooks is not None:
            hooks.begin(trials)
        # Events are created before the loop: nothing but the call itself sits between start and end.
        events = [(self._event(enable_timing=True), self._event(enable_timing=True))
                  for _ in range(trials * len(names))] if self.cuda else []
        recorded: list[tuple[str, Any, Any]] = []
        for i in range(trials):
            order = names if i % 2 == 0 else names[::-1]
            for j, n in enumerate(order):
                if hooks is not None:
                    hooks.before(n)
                self.flush()
                if self.cuda:
                    # No synchronize between calls: the host queues the next call while the flush runs,
                    # so the window holds the call's GPU work, not our launch latency after an idle GPU
                    # (waiting per call added 5-40 µs of jitter to 70-150 µs kernels on an H200).
                    start_ev, end_ev = events[i * len(names) + j]
                    start_ev.record()
                    out = fns[n]()
                    end_ev.record()
                    recorded.append((n, start_ev, end_ev))
                else:
                    m0, t0 = self._mono(), self._perf()
                    out = fns[n]()
                    t1, m1 = self._perf(), self._mono()
                    samples[n].append((t1 - t0) * 1e3)
                    timer_s, mono_s = self.clock_totals.get(n, (0.0, 0.0))
                    self.clock_totals[n] = (timer_s + t1 - t0, mono_s + m1 - m0)
                if hooks is not None:
                    hooks.after(n, out)
                del out
        if recorded:
            self._sync()
            for n, start_ev, end_ev in recorded:
                samples[n].append(start_ev.elapsed_time(end_ev))
        return samples

    def host_times(self, fns: dict[str, Callable[[], Any]], trials: int) -> tuple[dict[str, list[float]],
                                                                                 dict[str, list[float]]]:
        """CUDA only: device-wide synchronized host timing, with CUDA events on the current stream around
        the same calls: (host ms, event ms). Work hidden on side streams or threads is in the first, not
        the second."""
        names = list(fns)
        host: dict[str, list[float]] = {n: [] for n in names}
        event: dict[str, list[float]] = {n: [] for n in names}
        for i in range(trials):
            order = names if i % 2 == 0 else names[::-1]
            for n in order:
                self.flush()
                self._sync()
                start_ev, end_ev = self._event(enable_timing=True), self._event(enable_timing=True)
                t0 = self._perf()
                start_ev.record()
                fns[n]()
                end_ev.record()
                self._sync()
                host[n].append((self._perf() - t0) * 1e3)
                event[n].append(start_ev.elapsed_time(end_ev))
        return host, event


# ------------------------------------------------------------------ main flow


def write_result(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, default=str))
    os.replace(tmp, path)


def versions() -> dict[str, str]:
    import platform

    import torch

    out = {"python": platform.python_version(), "torch": torch.__version__, "cuda": str(torch.version.cuda)}
    with contextlib.suppress(Exception):
        if torch.cuda.is_available():
            out["compute_capability"] = ".".join(map(str, torch.cuda.get_device_capability()))
    return out


def main(argv: list[str]) -> int:
    global _PROGRESS
    spec = json.loads(Path(argv[0]).read_text())
    _PROGRESS = Path(spec["progress_path"])
    if spec.get("gpu_lock_path"):
        from ..gpu_turns import announce_job

        announce_job(spec["gpu_lock_path"])  # a job: idle spares let it take the GPU lock first
    result_path = Path(spec["result_path"])
    phase("start")
    result: dict[str, Any] = {"phases": _PHASES, "findings": [], "numerics": {}}
    try:
        from . import evaluate

        if spec.get("mode") == "profile":
            evaluate.profile_run(spec, result)
        else:
            evaluate.evaluate(spec, result)
    except TaskFailure as exc:
        result.update(outcome="task_error", message=str(exc), traceback=traceback.format_exc(limit=8))
    except CandidateFailure as exc:
        result.update(outcome=exc.outcome, message=exc.message, traceback=exc.tb)
        if exc.log:
            result.setdefault("compile", {})["log"] = exc.log
    except Exception as exc:  # the worker must always report
        from . import memory

        if memory.is_oom(exc):  # wherever it happens (inputs, clones, the harness): the oom outcome
            result.update(outcome="oom", message=memory.oom_message(exc, _PHASE_START[0] or "start"),
                          traceback=traceback.format_exc())
        else:
            result.update(outcome="runtime_error", message=f"{type(exc).__name__}: {exc}",
                          traceback=traceback.format_exc())
    phase("done")
    result["phases"] = dict(_PHASES)
    with contextlib.suppress(Exception):
        from . import memory

        memory.finish(result)
    write_result(result_path, result)
    with contextlib.suppress(Exception):
        from . import evaluate

        evaluate.release_gpu()  # memory freed before the GPU lock goes (else the lock goes at exit)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: candidate extensions or CUDA state may hang or crash in destructors.
    os._exit(0)


SPARE_JOB = "job.json"
SPARE_READY = "ready.json"


@contextlib.contextmanager
def _gpu_lock(path: str | None, has_job: Callable[[], bool] = lambda: False) -> Iterator[None]:
    """Hold the per-GPU file lock (when one is given) for the spare's GPU warm-up only; announced jobs
    (evaluations, profiles) take it first (engine/gpu_turns.py)."""
    if not path:
        yield
        return
    from ..gpu_turns import warmup_turn

    with warmup_turn(path, has_job):
        yield


def spare_main(workdir: str, device: str, gpu: int, lock_path: str | None = None, warm_cupti: bool = False) -> int:
    """A pre-warmed spare: start Python, import torch and the evaluation code, create the CUDA
    context, then wait for `job.json` in `workdir` and run that one job (never a second).

    The idle wait is its own phase ("idle") with its own limit in the supervisor; once the job is
    read, the normal phases and limits apply. If the supervisor disappears, the spare exits.
    """
    global _PROGRESS
    root = Path(workdir)
    _PROGRESS = root / "sandbox" / "progress.json"
    parent = os.getppid()  # before the warm-up: a supervisor killed meanwhile (e.g. with a Ray actor) is noticed
    phase("warm")
    warm_start = time.perf_counter()
    job = root / SPARE_JOB
    steps: dict[str, float] = {}  # where the warm-up's seconds go (ready.json), for benches and tests
    mark = [warm_start]

    def step(name: str) -> None:
        now = time.perf_counter()
        steps[name] = round(now - mark[0], 4)
        mark[0] = now

    import torch

    from . import evaluate  # noqa: F401 - imported for its side effect: the evaluation code is loaded
    with contextlib.suppress(Exception):  # a failure here shows up again, properly reported, in the job
        import torch.utils.cpp_extension  # noqa: F401
        from torch.profiler import ProfilerActivity, profile

        from .. import nvrtc
        step("import_s")
        if device == "cuda" and torch.cuda.is_available():
            from .triton_support import preload

            preload()  # triton, when installed: a Triton round does not pay for its import
            with _gpu_lock(lock_path, job.exists):
                step("lock_wait_s")
                torch.cuda.set_device(gpu)
                torch.zeros(1, device=f"cuda:{gpu}")
                torch.cuda.synchronize()
                nvrtc._driver()
                step("context_s")
                if warm_cupti:
                    # The kernel check's first torch.profiler session loads and starts CUPTI (~3 s on
                    # an H200): do it now, while the LLM thinks.
                    with profile(activities=[ProfilerActivity.CUDA]):
                        torch.zeros(1, device=f"cuda:{gpu}").add_(1)
                        torch.cuda.synchronize()
                    step("cupti_s")
    if device == "cuda":
        with contextlib.suppress(Exception):
            torch.cuda.empty_cache()  # a spare holds only its context until it gets a job
    ready = {"pid": os.getpid(), "warm_s": round(time.perf_counter() - warm_start, 4), "device": device,
             "steps": steps}
    write_result(root / SPARE_READY, ready)
    phase("idle")
    while not job.exists():
        if os.getppid() != parent:  # the supervisor is gone: nobody will ever send a job
            os._exit(3)
        time.sleep(0.002)
    spec_path = json.loads(job.read_text())["spec"]
    if lock_path:
        from ..gpu_turns import announce_job

        announce_job(lock_path)  # from now until it holds the lock, idle spares' warm-ups wait for it
    waited = 0.0  # how long the job waited for this spare to finish warming up
    with contextlib.suppress(OSError):
        waited = max(0.0, time.time() - job.stat().st_mtime - 0.002)
    _PHASES.clear()
    _PHASES["spare_wait"] = round(waited, 4)
    # Where this spare's warm-up went (bench/spare_wait.py reads them from eval.json).
    _PHASES.update({f"spare_{k[:-2]}": v for k, v in ready["steps"].items()})
    _PHASE_START[0], _PHASE_START[1] = None, 0.0
    return main([spec_path])


def thread_names() -> set[str]:
    return {t.name for t in threading.enumerate()}
