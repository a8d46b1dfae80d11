"""The evaluation flow run inside the worker: build, correctness trials, integrity checks, timing."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cudaforge.engine import observe, speed_of_light
from cudaforge.engine.compiler_log import headline
from cudaforge.engine.gpu.context import open_context
from cudaforge.engine.integrity import evidence, precision, streams
from cudaforge.engine.integrity import runtime as runtime_checks
from cudaforge.engine.integrity.outputs import VerifiedCall, check_cache_reuse
from cudaforge.engine.integrity.static import source_findings
from cudaforge.engine.observe import custom_launches, reset_launches, signature
from cudaforge.engine.results import (
    CompileResult,
    Correctness,
    Finding,
    KernelLaunch,
    SpeedOfLight,
    Timing,
    TrialCheck,
)
from cudaforge.engine.worker import (
    device_heads,
    gpu_share,
    init_replay,
    memory,
    shared_weights,
    stream_capture,
    triton_support,
)
from cudaforge.engine.worker.compare import DEFAULT_TOLERANCE, compare_output, flatten_outputs
from cudaforge.engine.worker.failures import CandidateFailure, TaskFailure
from cudaforge.engine.worker.harness import (
    PHASE_END_HOOKS,
    BuildRecorder,
    add_part,
    clone_inputs,
    current_numerics,
    import_file,
    make_inputs,
    phase,
    set_default_numerics,
    set_reference_numerics,
    shift_distribution,
    sub_phase,
    thread_names,
    versions,
)
from cudaforge.engine.worker.host_buffers import POOL as HOST_POOL
from cudaforge.engine.worker.job import EvalJob, ReportDraft
from cudaforge.engine.worker.kernel_timer import activities_of, with_kernel_timer
from cudaforge.engine.worker.timing import (
    REAL_CLOCKS,
    HookChain,
    ThreadPin,
    Timer,
    capture_clocks,
    quartiles,
    stats,
    until_quiet,
)

_CUDA_ERROR = re.compile(r"CUDA error|illegal memory access|an illegal instruction|unspecified launch failure|"
                         r"misaligned address|CUDA_ERROR|device-side assert|AcceleratorError", re.I)


def classify_exception(exc: BaseException, where: str) -> CandidateFailure:
    """Map an exception raised by candidate code to an outcome class."""
    tb = traceback.format_exc()
    triton_failure = _triton_failure(exc, tb)
    if triton_failure is not None:
        return triton_failure
    name = type(exc).__name__
    text = f"{name}: {exc}"
    first_line = text.strip().splitlines()[0][:300] if text.strip() else name
    if memory.is_oom(exc):
        side = "candidate" if "ModelNew" in where else None
        return CandidateFailure("oom", memory.oom_message(exc, where, side), tb=tb)
    if _CUDA_ERROR.search(text) or name == "AcceleratorError":
        return CandidateFailure("cuda_error", f"CUDA error during {where}: {first_line}", tb=tb)
    return CandidateFailure("runtime_error", f"{first_line} (during {where})", tb=tb)


_SPEC_PATHS: dict[str, str] = {}  # the candidate's file, for mapping Triton errors to its lines


def _triton_failure(exc: BaseException, tb: str) -> CandidateFailure | None:
    """A missing triton (exit 3, with the install command) or a Triton kernel that does not compile."""
    missing = triton_support.missing_triton(exc)
    if missing is not None:
        return CandidateFailure("unavailable", missing, tb=tb)
    path = _SPEC_PATHS.get("candidate")
    failure = triton_support.compile_failure(exc, path) if path else None
    if failure is not None:
        return CandidateFailure("compile_error", failure[0], log=failure[1], tb=tb)
    return None


def _is_build_error(exc: BaseException) -> bool:
    name = type(exc).__name__
    text = str(exc)
    return name in ("NvrtcError", "CalledProcessError") or "Error building extension" in text or \
        "Kernel compilation failed" in text or "nvrtc" in text.lower() and "error" in text.lower()


def _device(job: EvalJob) -> Any:
    import torch

    if job.device == "cuda":
        if not torch.cuda.is_available():
            raise CandidateFailure("unavailable", "no CUDA device is available (use --device cpu)")
        index = job.gpu
        if index >= torch.cuda.device_count():
            raise CandidateFailure("unavailable", f"GPU {index} does not exist ({torch.cuda.device_count()} visible)")
        device = torch.device("cuda", index)
        create_context(job, device)
        return device
    return torch.device("cpu")


def _float_dtype(precision: str) -> Any:
    import torch

    return {"fp32": None, "fp16": torch.float16, "bf16": torch.bfloat16}[precision]


def load_task(job: EvalJob, device: Any) -> tuple[Any, list[Any], Any]:
    import torch

    phase("load_task")
    try:
        task = import_file(job.task_path, "cudaforge_task")
    except ModuleNotFoundError as exc:
        raise CandidateFailure("unavailable", memory.missing_module_message(job.task_path, exc)) from None
    except Exception as exc:
        raise TaskFailure(f"{job.task_path}: importing the task raised {type(exc).__name__}: {exc}") from exc
    for name in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(task, name):
            raise TaskFailure(f"{job.task_path}: missing `{name}`")
    try:
        init = task.get_init_inputs()
    except Exception as exc:
        raise TaskFailure(f"{job.task_path}: get_init_inputs() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(init, (list, tuple)):
        raise TaskFailure(f"{job.task_path}: get_init_inputs() must return a list or tuple, got {type(init).__name__}")
    torch.manual_seed(job.seed)
    try:
        model = _recorded(CONSTRUCTION, lambda: task.Model(*init))  # for the candidate's (build_candidate)
    except Exception as exc:
        raise TaskFailure(f"{job.task_path}: Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}") from exc
    return task, list(init), model.eval()


# The reference's construction, recorded for the candidate's: its fills are replayed where they repeat
# exactly (init_replay.py), then let go, before the reference's host weights move to the device.
CONSTRUCTION = init_replay.ConstructionRecord()


def _recorded(record: Any, build: Any) -> Any:
    """`build()` (a reference's construction) with its large random fills recorded in `record`, those that
    live on in the model it returns."""
    try:
        with init_replay.recording(record):
            model = build()
    except BaseException:
        record.clear()
        raise
    record.keep_only(model)
    return model


def _replayed(record: Any, build: Any) -> Any:
    """`build()` (a candidate's construction) with `record`'s fills replayed, which are let go after it; the
    seconds spent copying them are the current phase's `replay` part."""
    stats = init_replay.ReplayStats()
    try:
        with init_replay.replaying(record, stats):
            return build()
    finally:
        record.clear()
        if stats.replayed:
            add_part("replay", stats.seconds)


def place(model: Any, job: EvalJob, device: Any) -> Any:
    """Move a model to the device and the job's precision: under the GPU lock on CUDA, so copying its
    weights never falls inside another evaluation's timing window."""
    float_dtype = _float_dtype(job.precision)
    model = model.to(device)
    if float_dtype is not None:
        model = model.to(float_dtype)
    return model.eval()


def build_candidate(job: EvalJob, recorder: BuildRecorder, task: Any, init: list[Any],
                    device: Any) -> tuple[Any, CompileResult]:
    """Import the candidate and build its ModelNew: the model and the build's compile record."""
    import torch

    phase("build")
    _SPEC_PATHS["candidate"] = job.candidate_path
    if job.format == "triton":
        triton_support.install()  # before the candidate's kernels are decorated
    start = time.perf_counter()
    try:
        module = import_file(job.candidate_path, "cudaforge_candidate")
    except SystemExit as exc:
        raise CandidateFailure("crash", f"candidate called sys.exit({exc.code}) at import") from None
    except Exception as exc:
        if _is_build_error(exc):
            raise _compile_failure(str(exc), job, start) from None
        raise classify_exception(exc, "candidate import") from None
    build_seconds = time.perf_counter() - start
    if not hasattr(module, "ModelNew"):
        raise CandidateFailure("runtime_error", "the candidate defines no ModelNew")
    phase("init")
    torch.manual_seed(job.seed)
    try:
        model_new = _replayed(CONSTRUCTION, lambda: module.ModelNew(*init))
    except Exception as exc:
        if _is_build_error(exc):
            raise _compile_failure(str(exc), job, start) from None
        raise classify_exception(exc, "ModelNew(*get_init_inputs())") from None
    if not isinstance(model_new, torch.nn.Module):
        raise CandidateFailure("runtime_error", "ModelNew(...) is not a torch.nn.Module")
    nvrtc = sys.modules.get("cudaforge.engine.nvrtc")
    nvrtc_hits = getattr(nvrtc, "CACHE_STATS", {}) if nvrtc else {}
    cached = (recorder.builds > 0 and recorder.cached) or (nvrtc_hits.get("compiled", 0) == 0 and nvrtc_hits.get("hits", 0) > 0)
    # The log: the steps of a build that worked (its warnings too) for the Compiler pane.
    return model_new, CompileResult(ok=True, format=job.format, seconds=round(build_seconds, 4), cached=cached,
                                    log=_build_output(job))


def _compile_failure(log: str, job: EvalJob, start: float) -> CandidateFailure:
    """A failed build: the headline is the log's first diagnostic placed in the candidate (engine/compiler_log.py),
    and the time is the build's own (from the start of the import to the failure)."""
    try:
        source = Path(job.candidate_path).read_text(encoding="utf-8")
    except OSError:
        source = ""
    return CandidateFailure("compile_error", "compile error: " + (headline(log, source) or "(no log)"), log=log,
                            tb=traceback.format_exc(), build_seconds=round(time.perf_counter() - start, 4))


def _build_output(job: EvalJob, limit: int = 20000) -> str:
    """What the build streamed into its log (the last `limit` characters)."""
    try:
        return Path(job.build_log_path).read_text(encoding="utf-8", errors="replace")[-limit:]
    except OSError:
        return ""


def copy_parameters(model: Any, model_new: Any) -> list[str]:
    """Copy parameters and buffers whose names and shapes match, so honest rewrites are not failed by init order."""
    import torch

    copied = []
    ref_state = model.state_dict()
    new_state = model_new.state_dict()
    with torch.no_grad():
        for name, value in new_state.items():
            src = ref_state.get(name)
            if src is not None and src.shape == value.shape:
                if value.data_ptr() != src.data_ptr() or value.dtype != src.dtype:  # else shared: the same memory
                    value.copy_(src.to(value.dtype))
                copied.append(name)
    return copied


def _poison(outputs: list[Any]) -> None:
    """Overwrite the reference's output memory so a candidate that reads it back cannot pass."""
    import torch

    for t in outputs:
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            with contextlib.suppress(RuntimeError):
                t.fill_(float("nan"))
        elif isinstance(t, torch.Tensor):
            with contextlib.suppress(RuntimeError):
                t.fill_(0)


REFERENCE_SEEN = {"mutates": False}  # the correctness trials saw the reference change its inputs in place
# The correctness trials that passed, as the cache probes recognise them (outputs.VerifiedCall): the probes
# draw at the trials' seeds, and a candidate handing back a trial's output bit for bit needs no compare again.
VERIFIED: list[VerifiedCall] = []


def correctness(job: EvalJob, task: Any, model: Any, model_new: Any, device: Any, findings: list[Finding]) -> Correctness:
    import torch

    phase("correctness")
    float_dtype = _float_dtype(job.precision)
    atol_d, rtol_d = DEFAULT_TOLERANCE[job.precision]
    atol = job.atol if job.atol is not None else atol_d
    rtol = job.rtol if job.rtol is not None else rtol_d
    trials = job.trials
    base_seed = job.seed
    plan = [(i, base_seed + i, "task") for i in range(trials)]
    if job.second_distribution:
        plan.append((trials, base_seed + 10_000, "shifted"))
    results: list[TrialCheck] = []
    worst: dict[int, Any] = {}
    fixed = runtime_checks.FixedValueProbe(atol, rtol)
    VERIFIED.clear()
    mutated: set[int] = set()
    aliased = False
    subclass_types: set[str] = set()
    for i, seed, dist in plan:
        observe.checkpoint()  # a timed window waiting elsewhere goes first (gpu_share.yield_to_writers)
        order = "reference_first" if i % 2 == 0 else "candidate_first"
        trial = _trial(task, model, model_new, device, float_dtype, seed, dist, order, fixed if dist == "task" else None)
        expected, got, cand_mutated, trial_aliased, ref_mutates, verified = trial
        REFERENCE_SEEN["mutates"] = REFERENCE_SEEN["mutates"] or ref_mutates
        if cand_mutated:
            mutated.update(cand_mutated)
        aliased = aliased or trial_aliased
        if len(got) != len(expected):
            raise CandidateFailure("wrong_result", f"ModelNew returned {len(got)} outputs, the reference {len(expected)}")
        subclass_types.update(type(t).__name__ for t in got if isinstance(t, torch.Tensor) and type(t) is not torch.Tensor)
        with sub_phase("compare"):
            checks = tuple(compare_output(k, e, g, atol, rtol) for k, (e, g) in enumerate(zip(expected, got, strict=True)))
        passed = all(c.passed for c in checks)
        if passed and dist == "task":
            VERIFIED.append(verified)
        results.append(TrialCheck(trial=i, seed=seed, distribution=dist, order=order, passed=passed, outputs=checks))
        for c in checks:
            prev = worst.get(c.index)
            if prev is None or (prev.passed and not c.passed) or (prev.passed == c.passed and c.max_abs_err > prev.max_abs_err):
                worst[c.index] = c
        del got, expected, checks, trial
        with sub_phase("release"):
            memory.between_trials()
    with sub_phase("release"):
        memory.release_if_large(gpu_share.reserved())  # the step's cache goes back where it outgrew the reservation
    findings.extend(evidence.correctness_findings(mutated, aliased, subclass_types))
    weak = fixed.finding(trials)
    if weak is not None:
        findings.append(weak)
    passed_trials = sum(r.passed for r in results)
    return Correctness(passed=passed_trials == len(results), trials=len(results), trials_passed=passed_trials,
                       atol=atol, rtol=rtol, outputs=tuple(worst[k] for k in sorted(worst)), trial_results=tuple(results))


def _draw(task: Any, seed: int, device: Any, float_dtype: Any, dist: str) -> list[Any]:
    with sub_phase("draw"):
        inputs = make_inputs(task, seed, device, float_dtype)
        return shift_distribution(inputs, seed) if dist == "shifted" else inputs


def _aliases(outputs: list[Any], inputs: list[Any]) -> bool:
    return bool(observe.storage_addresses(outputs) & observe.storage_addresses(inputs))


def _trial(task: Any, model: Any, model_new: Any, device: Any, float_dtype: Any, seed: int, dist: str, order: str,
           fixed: Any) -> tuple[list[Any], list[Any], set[int], bool, bool, VerifiedCall]:
    """One correctness trial: (expected, got, inputs the candidate changed, candidate aliases its inputs,
    the reference changed its inputs, the trial as the cache probes recognise it: its inputs' and both
    outputs' signatures, the outputs fingerprinted with the inputs after each call, one sync).

    Memory (engine/worker/memory.py): one input set on the device, one output set (two where a second fits
    the memory rule beside the reference's peak: memory.park), and no copy of the inputs anywhere. The
    inputs are fingerprinted once after the draw (observe.fingerprint: keyed per process, computed where
    they live); each side's call is followed by another fingerprint,
    so a side that changed them is seen without a clone or a host snapshot. The side that runs second
    gets the draw itself where the first left it unchanged, else a fresh draw of the same seed (the
    same values: draws are deterministic). The side that ran first waits where memory.park puts it: on
    the device (kept alive, so no later allocation gets its memory) where it fits, else on the host (the
    reference's poisoned on the device first, so a candidate reading freed memory finds NaN)."""
    import torch

    inputs = _draw(task, seed, device, float_dtype, dist)
    tensors = [k for k, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    with sub_phase("fingerprint"):
        drawn = observe.fingerprints(inputs)
    drawn_as = signature(inputs, drawn)
    set_reference_numerics()
    outputs_as: dict[str, tuple[Any, ...]] = {}  # "reference" / "candidate" -> its outputs' signature

    def changed_since_draw(outputs: list[Any]) -> tuple[set[int], list[Any]]:
        """The inputs changed since the draw, and the outputs' fingerprints (one pass, one sync)."""
        with sub_phase("fingerprint"):
            now = observe.fingerprints([*inputs, *outputs])
        return {k for k in tensors if now[k] != drawn[k]}, now[len(inputs):]

    def reference() -> tuple[list[Any], set[int]]:
        with sub_phase("reference"):
            out = flatten_outputs(_run_reference(model, inputs, device))
        changed, prints = changed_since_draw(out)
        outputs_as["reference"] = tuple(prints)
        if fixed is not None:
            with sub_phase("fixed_value"):
                fixed.add(out)
        return out, changed

    def candidate() -> tuple[list[Any], set[int], bool]:
        with sub_phase("candidate"):
            got = flatten_outputs(_run_candidate(model_new, inputs, device))
        with sub_phase("mutation"):
            changed, prints = changed_since_draw(got)
        outputs_as["candidate"] = signature(got, prints)
        return got, changed, _aliases(got, inputs)

    def redrawn() -> list[Any]:
        nonlocal inputs
        inputs = []  # the changed set goes before the fresh one comes: one input set on the device
        with sub_phase("restore"):
            return _draw(task, seed, device, float_dtype, dist)

    if order == "reference_first":
        ref_out, ref_changed = reference()
        ref_aliased = _aliases(ref_out, inputs)
        with sub_phase("to_host"):
            expected, copied = memory.park(ref_out, beside=inputs)
        if copied:
            _poison(ref_out)  # outputs that are its inputs' memory poison those: the candidate gets them back below
        del ref_out
        if ref_changed or ref_aliased:
            inputs = redrawn()
        # A step boundary before the candidate runs (only here: after a candidate's call, a yield's sync could
        # finish its unwaited work before its output is compared): the drains of the H200 sweeps' lock
        # timelines were longest behind readers one whole trial from their last boundary.
        observe.checkpoint()
        got, mutated, cand_aliased = candidate()
    else:
        got_dev, mutated, cand_aliased = candidate()
        with sub_phase("to_host"):
            got, _ = memory.park(got_dev, beside=inputs)
        del got_dev
        if mutated or cand_aliased:
            inputs = redrawn()
        expected, ref_changed = reference()
        ref_aliased = _aliases(expected, inputs)
    # Where the reference changed an input (an in-place task), what the candidate did to it is its answer.
    mutated -= ref_changed
    verified = VerifiedCall(inputs=drawn_as, reference=outputs_as["reference"], candidate=outputs_as["candidate"])
    return expected, got, mutated, cand_aliased and not ref_aliased, bool(ref_changed), verified


def _run_reference(model: Any, inputs: list[Any], device: Any) -> Any:
    import torch

    try:
        with torch.no_grad():
            out = model(*inputs)
        if device.type == "cuda":
            torch.cuda.synchronize()
    except Exception as exc:
        if memory.is_oom(exc):
            raise CandidateFailure("oom", memory.oom_message(exc, "Model.forward", "reference"),
                                   tb=traceback.format_exc()) from None
        raise
    return out


# The backend numerics flags around every candidate call (integrity/precision.py: `precision_flags`).
PRECISION = precision.PrecisionWatch()


def _run_candidate(model_new: Any, inputs: list[Any], device: Any, check_weights: bool = True) -> Any:
    """One candidate call; then the shared weights' check, unless the caller runs it itself (after a
    profiled call: the fingerprints' own kernels are no candidate kernels)."""
    import torch

    try:
        with PRECISION.call("ModelNew.forward"), torch.no_grad():
            out = model_new(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
    except SystemExit as exc:
        raise CandidateFailure("crash", f"the candidate called sys.exit({exc.code}) in forward") from None
    except Exception as exc:
        raise classify_exception(exc, "ModelNew.forward") from None
    if check_weights:
        check_shared_weights("ModelNew.forward")
    return out


def check_shared_weights(where: str) -> None:
    """End the evaluation with a failing `weights_mutation` where the candidate changed weights it shares
    with the reference (shared_weights.py), before the reference computes with them again."""
    if not shared_weights.SHARED.watching:
        return
    with sub_phase("shared_weights"):  # the fingerprints' cost, beside each phase that calls the candidate
        found = shared_weights.mutation_finding(where)
    if found is not None:
        raise CandidateFailure("integrity_failure", f"integrity: {found.message}", findings=(found,))


def check_custom_code(job: EvalJob, recorder: BuildRecorder, model_new: Any, draw: Any, device: Any,
                      findings: list[Finding]) -> tuple[tuple[KernelLaunch, ...], streams.StreamUse | None]:
    """Establish from what actually ran whether custom code did the work, and what else launched; on a GPU
    also which streams the device work ran on (the side-stream check's reason to run: streams.StreamUse;
    None off CUDA). `draw()` gives a fresh input set (a draw, not a clone: one input set on the device)."""
    import torch

    phase("kernels")
    reset_launches(recorder)
    kernels: list[KernelLaunch] = []
    stream_use: streams.StreamUse | None = None
    if device.type == "cuda":
        inputs = draw()
        # The calling stream's marker: a one-element device-to-device copy on it, waited for before the
        # call, so its CUPTI record names the calling stream and precedes all of forward's work (a copy:
        # cuda_kernel_totals leaves it out of the kernel list).
        marker, marked = torch.zeros(1, device=device), torch.empty(1, device=device)
        torch.cuda.synchronize(device)
        with contextlib.ExitStack() as stopping, observe.device_profile() as prof:
            marked.copy_(marker)
            torch.cuda.current_stream(device).synchronize()
            _run_candidate(model_new, inputs, device, check_weights=False)
            # The device work is over (the call synchronized): the read hold goes before the session stops,
            # and comes back once its records are read, as around the timed window's CUPTI session
            # (kernel_timer.with_kernel_timer): both are host work, and under the hold a timed window waiting
            # elsewhere waited for them (the kernel check was the last holder for 11 s of the H200 sweep's
            # windows' waits, session 16).
            gpu_share.release_hold()
            stopping.enter_context(sub_phase("cupti_stop"))
        del inputs, marker, marked
        with sub_phase("cupti_read"):
            with contextlib.suppress(Exception):  # unreadable records: the static warning alone gates the check
                stream_use = streams.off_stream_work(activities_of(prof))
            totals = runtime_checks.cuda_kernel_totals(prof)
        gpu_share.read(job.gpu_lock_path, "gpu_wait")
        check_shared_weights("ModelNew.forward")  # outside the profile: its sums are not the candidate's
        custom_names = _candidate_kernel_names(Path(job.candidate_path).read_text())
        grand = sum(v[1] for v in totals.values()) or 1.0
        for name, (count, us) in sorted(totals.items(), key=lambda kv: -kv[1][1]):
            custom = any(c in name for c in custom_names)
            kernels.append(KernelLaunch(name=name, count=int(count), device_time_us=round(us, 3),
                                        share=round(us / grand, 4), custom=custom))
        launches = custom_launches(recorder)
        ran_custom = any(k.custom for k in kernels) or any(v > 0 for v in launches.values())
    else:
        _run_candidate(model_new, draw(), device)
        launches = custom_launches(recorder)
        ran_custom = any(v > 0 for v in launches.values())
        kernels = [KernelLaunch(name=n, count=c, device_time_us=0.0, share=0.0, custom=True) for n, c in launches.items()]
    no_custom = evidence.custom_code_finding(ran_custom, [k.name for k in kernels])
    if no_custom is not None:
        findings.append(no_custom)
    return tuple(kernels), stream_use


def check_stream_capture(model_new: Any, draw: Any, device: Any, reasons: list[str],
                         findings: list[Finding]) -> str:
    """The side-stream check (integrity/streams.py): one forward under CUDA stream capture, outside any
    timed window and before timing. Work forked from the calling stream and never joined back is a failing
    `hidden_async_work`, whatever the clocks say; a capture that cannot decide is `stream_capture_skipped`
    (info). The candidate's own exceptions here decide nothing and fail nothing; one plain call afterwards
    shows the process still runs the candidate. Returns the check's note (timing.settings)."""
    import torch

    with sub_phase("stream_capture"):
        memory.release()  # the capture's private pool takes fresh segments: give the cached ones back first
        inputs = draw()

        def call(values: list[Any]) -> Any:
            with PRECISION.call("ModelNew.forward (under stream capture)"), torch.no_grad():
                return model_new(*values)

        try:
            outcome = stream_capture.capture_forward(call, inputs, device)
        except SystemExit as exc:
            raise CandidateFailure("crash", f"the candidate called sys.exit({exc.code}) in forward "
                                            "(under stream capture)") from None
        except Exception as exc:  # not the forward's own (recorded in the outcome): the device failed
            raise classify_exception(exc, "ModelNew.forward (under stream capture)") from None
        del inputs
        try:
            torch.cuda.synchronize(device)  # work the forward ran outside the capture, if any, is over
        except Exception as exc:
            raise classify_exception(exc, "ModelNew.forward (under stream capture)") from None
        decision = streams.capture_decision(outcome, reasons)
        try:
            _run_candidate(model_new, draw(), device)  # usable after the capture, before the timed calls
        except CandidateFailure as exc:
            exc.message = f"{exc.message}; after the side-stream check ({decision.note})"
            raise
        memory.release()
    if decision.finding is not None:
        findings.append(decision.finding)
    skipped = streams.undecided_finding(decision, reasons)
    if skipped is not None:
        findings.append(skipped)
    return decision.note


def _candidate_kernel_names(source: str) -> set[str]:
    names = set(re.findall(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?\w[\w\s\*:<>,]*?\b(\w+)\s*\(", source))
    names.update(re.findall(r"load_kernel\(\s*\w+\s*,\s*[\"'](\w+)", source))
    names.update(triton_support.jit_function_names(source))  # Triton names a kernel after its function
    return {n for n in names if n not in ("void",)}


def timing(job: EvalJob, task: Any, model: Any, model_new: Any, device: Any, findings: list[Finding],
           default_numerics: dict[str, Any], tolerance: tuple[float, float]) -> tuple[Timing, SpeedOfLight]:
    """Time the reference and the candidate; `tolerance` is correctness's (atol, rtol), for the timed outputs.
    Returns the timing and the speed-of-light record."""
    import torch

    phase("timing")
    t = job.timing
    # Two input draws, rotated call by call and shared by both sides (see runtime_checks.Rotation); where a
    # second draw would break the memory rule, one draw whose two contents alternate in place.
    with sub_phase("draws"):
        first = make_inputs(task, job.seed + 30_000, device, _float_dtype(job.precision))
    draws: Any
    if memory.second_draw_fits(memory.tensor_bytes(first)):
        with sub_phase("draws"):
            draws = [first, make_inputs(task, job.seed + 30_001, device, _float_dtype(job.precision))]
        rotation_note = "two input draws"
    else:
        draws = runtime_checks.FlippingDraw(first)
        rotation_note = "one input draw, flipped in place between calls (a second would not fit the memory rule)"
    inputs = first
    set_default_numerics(default_numerics)  # the eager baseline is timed with PyTorch's defaults
    l2 = 0
    if device.type == "cuda":
        l2 = int(getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 << 20))
    # The host's load is read from the reference's queueing, never from candidate code's (timing.LaunchCover).
    timer = Timer(device, bool(t["l2_flush"]), l2, launch_cover=bool(t.get("launch_cover", True)),
                  cover_load_from="reference")
    candidate_calls = runtime_checks.Rotation(model_new, draws)
    fns: dict[str, Any] = {"reference": runtime_checks.Rotation(model, draws), "candidate": candidate_calls}
    atol, rtol = runtime_checks.timed_tolerance(float(tolerance[0]), float(tolerance[1]), default_numerics, device)
    output_check = runtime_checks.TimedOutputCheck(
        candidate_calls, model, device, atol=atol, rtol=rtol, compare=compare_output,
        protected=observe.storage_addresses([*first, *(draws[1] if isinstance(draws, list) else []),
                                             *model.parameters(), *model.buffers()]),
        sync=REAL_CLOCKS["synchronize"] if device.type == "cuda" else (lambda: None),
        numerics=(set_reference_numerics, lambda: set_default_numerics(default_numerics)),
        # Waited for, in pieces: before the window the copies' step boundaries let other windows go first.
        to_host=lambda values: memory.host_copy(values),
        keep=memory.ExpectedPlace(),  # small expected outputs stay on the device
        side_by_side=lambda: gpu_share.side_by_side(job.gpu_lock_path),  # a large compare lets the GPU go
        pause_cost_s=gpu_share.write_wait_s,  # ... when it took longer than the window's drain
        reference_mutates=REFERENCE_SEEN["mutates"])
    compiled_note = None
    if "compile" in t.get("baselines", []):
        phase("compile_baseline")
        try:
            compiled = torch.compile(model)
            for _ in range(3):
                _call(compiled, first)
            fns["compile"] = lambda: _call(compiled, first)  # the reference's own inputs: no third copy
        except Exception as exc:
            compiled_note = f"torch.compile failed: {type(exc).__name__}: {str(exc)[:200]}"
        phase("timing")
    # From here idle spares start no warm-up the window would wait for. Said before the cache probes instead
    # (session 20), it held the spares back most of the H200 sweep: with 8 in flight some worker is nearly
    # always in its probes, the spares waited 3,138 s in all for their warm-up turns (199 s from here) and the
    # jobs 230 s for their spares (0 s), and the sweep took 382 s (361 s) (session 22).
    gpu_share.window_ahead(job.gpu_lock_path)
    with sub_phase("expected"):  # the timed check's expected outputs, side by side, before the window
        output_check.prepare(part=sub_phase)
    gpu_share.write(job.gpu_lock_path)  # the timed window holds the GPU alone (readers drained and synced)
    pin = ThreadPin(torch.get_num_threads()) if device.type == "cpu" else None  # both sides, every call
    prepare = runtime_checks.RotationPrepare(fns)  # a flip happens here, outside the timed window
    hooks = HookChain(prepare, output_check, PRECISION, *([pin] if pin is not None else []))
    interpreted = job.format == "triton" and triton_support.interpreting()
    # Noisy timing is no result: re-measured while either side's spread is over the threshold (integrity/
    # evidence.py `noisy_timing`); interpreter time makes no speed claim, so it is measured once.
    threshold = 0.0 if interpreted else float(t.get("noise_threshold", 0.0))
    try:
        with sub_phase("events"):
            samples, measurements = until_quiet(
                lambda: timer.event_times(fns, int(t["warmup"]), int(t["trials"]), warmup_ms=float(t.get("warmup_ms", 0.0)),
                                          min_time_ms=float(t.get("min_time_ms", 0.0)),
                                          max_time_ms=float(t.get("max_time_ms", 0.0)),
                                          max_trials=int(t["max_trials"]) if t.get("max_trials") else None, hooks=hooks),
                threshold, int(t.get("noise_retries", 0)))
        if isinstance(draws, runtime_checks.FlippingDraw):
            draws.frozen = True  # no flip kernels among the host-timed calls' (the CUPTI busy time)
        host, busy, kernel_note = with_kernel_timer(  # CUPTI on the host-timed calls, not in the event window
            timer, lambda flush: timer.host_times({k: fns[k] for k in ("reference", "candidate")},
                                                  int(t["host_trials"]), hooks=PRECISION, flush=flush)
            if device.type == "cuda" else None,
            # The device work is over: the GPU goes (the release syncs first) while CUPTI stops and its records
            # are read, host work that holds no writer back; side-by-side work takes its read hold below.
            done=gpu_share.release_hold, part=sub_phase)
        gpu_share.read(job.gpu_lock_path, "gpu_wait")
    except CandidateFailure:
        raise
    except Exception as exc:
        raise classify_exception(exc, "timing") from None
    method = "cuda_event" if device.type == "cuda" else "perf_counter"
    ref_s, cand_s = stats(samples["reference"], method), stats(samples["candidate"], method)
    noisy = evidence.noisy_timing_finding(ref_s, cand_s, threshold, measurements)
    if noisy is not None:
        findings.append(noisy)
    if interpreted:  # interpreter time: reported, but no speed claim is made from it
        cand_s = stats(samples["candidate"], triton_support.INTERPRETER_METHOD)
    r25, r75 = quartiles(samples["reference"])
    c25, c75 = quartiles(samples["candidate"])
    speedup = ref_s.median_ms / cand_s.median_ms if cand_s.median_ms > 0 else float("inf")
    kwargs: dict[str, Any] = {}
    if host is not None:
        host_wall, host_events = host
        kwargs["host_reference"] = stats(host_wall["reference"], "host_synchronized")
        kwargs["host_candidate"] = stats(host_wall["candidate"], "host_synchronized")
        hidden = evidence.hidden_work_finding(kwargs["host_reference"], kwargs["host_candidate"],
                                              stats(host_events["reference"], method),
                                              stats(host_events["candidate"], method))
        if hidden is not None:
            findings.append(hidden)
    kwargs["kernel_timer"] = kernel_note
    if busy.get("candidate") and busy.get("reference"):
        kwargs["kernel_reference"] = stats(busy["reference"], "cupti_busy")
        kwargs["kernel_candidate"] = stats(busy["candidate"], "cupti_busy")
        disagree = evidence.timer_disagreement_finding(cand_s.median_ms, kwargs["kernel_candidate"].median_ms,
                                                       ref_s.median_ms, kwargs["kernel_reference"].median_ms)
        if disagree is not None:
            findings.append(disagree)
    if "compile" in samples:
        comp = stats(samples["compile"], method)
        kwargs["compile_baseline"] = comp
        kwargs["speedup_vs_compile"] = comp.median_ms / cand_s.median_ms if cand_s.median_ms > 0 else None
    settings = {"numerics": current_numerics(), "input_rotation": rotation_note}
    late = timer.late_launches()
    if late:  # where the GPU may have waited for our host inside timed calls (timing.Timer.late_launches)
        settings["late_launches"] = late
    if timer.cover is not None:  # the longest spin each side's timed calls were queued behind (timing.LaunchCover)
        settings["launch_cover_us"] = {n: round(us, 1) for n, us in timer.cover.largest_us.items()}
        # ... and all the spins together: what the cover added to the window's wall
        settings["launch_cover_total_ms"] = {n: round(us / 1e3, 2) for n, us in timer.cover.total_us.items()}
    if timer.host_load is not None:  # the timing thread's CPU time and preemptions in that window
        settings["host_load"] = timer.host_load.as_setting()
    if compiled_note:
        settings["compile_baseline_error"] = compiled_note
    low, high = (r25 / c75 if c75 > 0 else 0.0), (r75 / c25 if c25 > 0 else 0.0)
    if interpreted:
        speedup, low, high = None, 0.0, 0.0
        kwargs["speedup_vs_compile"] = None
    timing_result = Timing(reference=ref_s, candidate=cand_s, speedup=speedup, speedup_low=low, speedup_high=high,
                           l2_flush=timer.flush_buffer is not None, warmup=int(t["warmup"]), settings=settings,
                           measurements=measurements, noise_threshold=threshold or None,
                           cpu_threads=pin.threads if pin is not None else None, **kwargs)
    with sub_phase("speed_of_light"):
        sol = _speed_of_light(job, inputs, model, cand_s.median_ms, device, tolerance, findings)
    findings.extend(output_check.findings())
    findings.extend(runtime_checks.clock_findings(timer.clock_totals))
    return timing_result, sol


def _call(model: Any, inputs: list[Any]) -> Any:
    import torch

    with torch.no_grad():
        return model(*inputs)


def _speed_of_light(job: EvalJob, inputs: list[Any], model: Any, cand_ms: float, device: Any,
                    tolerance: tuple[float, float], findings: list[Finding]) -> SpeedOfLight:
    """The speed-of-light record (engine/speed_of_light.py), and `faster_than_memory_bound` for a
    candidate faster than moving its inputs, parameters and outputs once at the GPU's DRAM bandwidth."""
    import torch

    def real_output_bytes() -> int:  # measured once already, else one more reference call
        if "output_bytes" in memory.REFERENCE_IO:
            return memory.REFERENCE_IO["output_bytes"]
        with torch.no_grad():
            return memory.tensor_bytes(flatten_outputs(model(*clone_inputs(inputs))))

    counted = job.counts.work if job.counts is not None else None
    # The app's count of the same call (fit.task_counts), where the inputs and parameters here are the ones it
    # counted: else counted here.
    if counted is not None and (counted.input_bytes, counted.param_bytes) == speed_of_light.read_bytes(model, inputs):
        work = counted
    else:
        work = speed_of_light.count_work(model, inputs, real_output_bytes=real_output_bytes,
                                         quiet_meta=memory._fast_meta_rnns())
    peaks = job.peaks if device.type == "cuda" else None
    sol = speed_of_light.floor(work, peaks, job.precision, tolerance[0], tolerance[1], cand_ms)
    if sol.bandwidth_gbs:
        too_fast = evidence.speed_of_light_finding(cand_ms, sol.bytes, sol.bandwidth_gbs, job.speed_of_light_margin)
        if too_fast is not None:
            findings.append(too_fast)
    return sol


def shape_check(job: EvalJob, task: Any, init: list[Any], model: Any, model_new: Any, device: Any,
                atol: float, rtol: float) -> list[Finding]:
    """Correctness once more at a second, smaller set of the task's sizes (runtime_checks.shape_findings)."""
    phase("shapes")
    float_dtype = _float_dtype(job.precision)

    def compare(expected: list[Any], got: list[Any]) -> str:
        if len(got) != len(expected):
            return f"{len(got)} outputs instead of {len(expected)}"
        for k, (e, g) in enumerate(zip(expected, got, strict=True)):
            c = compare_output(k, e, g, atol, rtol)
            if not c.passed:
                return f"output {k}: {c.reason}"
        return ""

    seed = job.seed + 40_000
    bound = memory.rule_allocator_bytes()
    variant_record = init_replay.ConstructionRecord()

    def within_the_rule(call: Any) -> Any:
        """A call of the check under the memory rule's allocator bound: at odd sizes cuDNN took workspaces
        of several times the reference's peak (level3/45_UNetSoftmax: 4.29 GiB for a 0.68 GiB reference,
        H200 2026-12-03). Where it runs out of memory there it runs again under the cap alone, as before,
        so the bound never decides a verdict."""
        try:
            with memory.allocator_bound(device, bound):
                return call()
        except CandidateFailure as exc:
            if exc.outcome != "oom":
                raise
        memory.release()
        return call()

    return runtime_checks.shape_findings(
        task, Path(job.task_path).read_text(encoding="utf-8"), job.task_path, init, model, model_new,
        type(model_new), prepare=lambda m: place(m, job, device), inputs_for=lambda module: make_inputs(module, seed, device, float_dtype),
        run_reference=lambda m, inp: within_the_rule(lambda: _run_reference(m, inp, device)),
        run_candidate=lambda m, inp: within_the_rule(lambda: _run_candidate(m, inp, device)), compare=compare,
        copy_parameters=copy_parameters, seed=seed, evict=lambda: _evict(model, model_new), to_host=memory.host_copy,
        # One copy of the smaller models' weights too: at full size level3/2_ShallowWideMLP (8 GiB of weights)
        # peaked at 12.07 GiB in this check with two copies (H200, 2026-12-03); their fingerprints are checked
        # after the candidate's call as at full size.
        share=lambda reference, candidate: shared_weights.share(reference, candidate, float_dtype),
        # Both models at the smaller sizes are built on the host without the read hold (level3/2_ShallowWideMLP:
        # 14.7 s each here, one CPU thread): the shape check was the longest sole holder of the H200 sweep's
        # drains (23.6 s, session 16). The first GPU op takes the hold back. The candidate's full-size import
        # and constructor already run before its first hold (builds side by side): no new exposure. As at full
        # size, the reference's construction is recorded and the candidate's replays its fills.
        build_model=lambda build, role: gpu_share.off_the_gpu(
            (lambda: _recorded(variant_record, build)) if role == "reference" else
            (lambda: _replayed(variant_record, build)), device.type))


def _evict(*models: Any) -> None:
    """Free the full-size models' device memory before the shape check builds its own (they are not used
    again): their parameters and buffers become empty tensors."""
    import torch

    check_shared_weights("the checks")  # the last look at the shared weights: they go now
    shared_weights.SHARED.clear()
    for m in models:
        with contextlib.suppress(Exception), torch.no_grad():
            for t in [*m.parameters(), *m.buffers()]:
                t.data = torch.empty(0, dtype=t.dtype, device=t.device)
    memory.release()


def _place_both(job: EvalJob, model: Any, model_new: Any, device: Any) -> tuple[Any, Any]:
    try:
        model = place(model, job, device)
    except Exception as exc:
        if memory.is_oom(exc):
            raise CandidateFailure("oom", memory.oom_message(exc, "moving Model to the device", "reference"),
                                   tb=traceback.format_exc()) from None
        raise TaskFailure(f"{job.task_path}: moving Model to the device raised {type(exc).__name__}: {exc}") from exc
    # One copy of the weights: the candidate's matching ones become the reference's before it moves.
    shared_weights.share(model, model_new, _float_dtype(job.precision))
    try:
        model_new = place(model_new, job, device)
    except Exception as exc:
        raise classify_exception(exc, "moving ModelNew to the device") from None
    return model, model_new


GPU_STATE = {"context": False}  # set by a spare that created its CUDA context during its warm-up


def warm_check_steps(device: Any) -> list[Callable[[], None]]:
    """The checks' own primitives, run once each on a few small tensors (a spare's warm-up, each step a
    reader's turn of its own, so a timed window waiting meanwhile waits for one step, tens of ms, not for
    all of them: 0.39 s median together in the H200 sweeps): the first call of each in a process pays for
    what it loads (the lazily loaded kernel modules of the PyTorch ops they use, a device generator, pinned
    host memory), and in a round every one of them is on the path: on the H200 a round's first fixed-value
    bounds took 50 ms and its shifted draw 44 ms (stack samples, 2026-12-04). Nothing here touches a task;
    the last step frees what the others allocated, device memory included (a free is device work)."""
    import torch
    from cudaforge.engine.integrity.outputs import _constant_values, reference_spreads

    held: dict[str, Any] = {}

    def tensors() -> None:
        held["x"] = torch.randn(4096, device=device)
        held["y"] = held["x"] + 1e-3

    def compares() -> None:
        x, y = held["x"], held["y"]
        compare_output(0, x, y, 1e-4, 1e-4)  # the failing path too: worst elements and their coordinates
        compare_output(0, x, x.clone(), 1e-4, 1e-4)

    def host_compare() -> None:  # a host-parked slice, the pinned allocator
        compare_output(0, memory.host_copy([held["x"]])[0], held["y"], 1e-4, 1e-4)

    def fingerprints() -> None:
        observe.fingerprints([held["x"], held["x"].to(torch.int32)])

    def probes() -> None:
        x = held["x"]
        probe = runtime_checks.FixedValueProbe(1e-4, 1e-4)
        probe.add([x])
        reference_spreads([x])
        _constant_values([x])
        runtime_checks.largest_magnitude(x)

    def shifted() -> None:
        shift_distribution([held["x"].clone(), held["x"].to(torch.float16)], seed=0)

    # Not the checks' primitives but a task's first matmul and convolution: cuBLAS, cuBLASLt and cuDNN are
    # loaded and their handles made at a process's first call into each (cuDNN's libraries alone are hundreds
    # of MB). In the H200 sweep of session 33 the reference's first call, under a read hold, took 0.66 s median
    # on the convolution problems and 0.23 s on the matmul ones, against 0.12 and 0.04 s for all their later
    # correctness calls together; every round's worker paid that again. Two steps: two shorter turns.
    def blas() -> None:
        if device.type == "cuda":
            a = torch.ones(8, 8, device=device)
            torch.mm(a, a)
            torch.nn.functional.linear(a, a, a[0])  # addmm with a bias: the cuBLASLt path

    def cudnn() -> None:
        if device.type == "cuda":
            a = torch.ones(1, 1, 8, 8, device=device)
            torch.nn.functional.conv2d(a, a[:, :, :3, :3])

    def free() -> None:
        held.clear()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
            if clear_workspaces is not None:  # cuBLAS's workspaces (the handles stay): nothing is left allocated
                clear_workspaces()
            torch.cuda.empty_cache()

    return [tensors, compares, host_compare, fingerprints, probes, shifted, blas, cudnn, free]


def create_context(job: EvalJob, device: Any) -> None:
    """Create this worker's CUDA context (a spare did it in its warm-up): with no hold of the GPU lock, since
    it launches and allocates nothing of ours (engine/gpu/context.py); the first device work after it is
    a reader's. The build that follows holds nothing either."""
    if device.type != "cuda":
        return
    import torch

    if GPU_STATE["context"]:
        torch.cuda.set_device(device)  # the spare's, made in its warm-up
        return
    phase("context")
    gap_s = open_context(device.index if device.index is not None else 0,
                         job.gpu_lock_path if job.mode != "profile" else None)
    add_part("gap", gap_s)  # of the phase: waiting for a gap between timed windows (engine/gpu/context.py)
    GPU_STATE["context"] = True


def _budget(job: EvalJob, device: Any) -> Any:
    """The bytes our evaluations may reserve together on this card: its free memory plus what our other
    processes hold now (their reservations are counted instead), less one context per process of ours.
    The free memory and our processes' usage are read as of one moment (lock.card_share)."""
    import torch

    def budget() -> int:
        from cudaforge.engine.gpu.lock import card_share

        def free() -> int:
            return int(torch.cuda.mem_get_info(device)[0])

        # Under ncu no nvidia-smi child (ncu would inject itself into it) and no listing: free memory alone,
        # which counts our others' reservations twice where they already hold them (safe, only stricter).
        share = card_share(job.gpu, free) if job.mode != "profile" else None
        return share.budget() if share is not None else free()

    return budget


def _reservation_bytes(job: EvalJob, task: Any, init: list[Any], mem: dict[str, Any]) -> int:
    """The evaluation's memory estimate (the memory rule's, engine/worker/memory.py), under the cap when set."""
    if "footprint_bytes" not in mem and job.counts is not None:
        mem.update(job.counts.footprint)  # the app's count (fit.task_counts)
    if "footprint_bytes" not in mem and job.footprint_bytes:
        mem["footprint_bytes"] = job.footprint_bytes  # counted by this task's evaluation (profile mode)
    if "footprint_bytes" not in mem:
        mem.update(memory.meta_footprint(task, init, job.seed, _float_dtype(job.precision)))
    cap = memory.CAP.get("bytes")
    need = int(memory.estimate_bytes(int(mem["footprint_bytes"]), int(cap) if cap else None))
    return min(need, int(cap)) if cap else need


def _grow_reservation(job: EvalJob, device: Any, mem: dict[str, Any]) -> None:
    """Side by side with others, reserve what the reference's measured peak says the evaluation will hold
    where that is more than the estimate (memory.reservation_after_reference), so a task whose estimate
    was short does not take memory the ledger promised to another evaluation."""
    if not job.gpu_lock_path or device.type != "cuda":
        return
    need = memory.reservation_after_reference()
    if need is not None:
        note = gpu_share.grow(need, _budget(job, device), before_growth=memory.release)
        if note:
            mem["note"] = "; ".join(n for n in (mem.get("note", ""), note) if n)
    mem["reserved_bytes"] = gpu_share.reserved()


def _host_admission(job: EvalJob) -> Any:
    """How the task check reserves its host estimate beside our other evaluations (None: no GPU lock, so
    no others to share the host with, or no reading of the host's available memory to admit against)."""
    if not job.gpu_lock_path or memory.host_available_bytes() is None:
        return None
    lock_path = job.gpu_lock_path
    return lambda nbytes: gpu_share.reserve_host(lock_path, nbytes, memory.host_budget(lock_path),
                                                 label=memory.task_name(job.task_path))


def _grow_host(job: EvalJob, mem: dict[str, Any], extra: int) -> None:
    """A second input set on the host (the cache probes: memory.host_needed_bytes): the host estimate, its
    reservation beside our other evaluations and the host buffers' budget grow by `extra` bytes."""
    need = int(mem.get("host_needed_bytes") or 0) + int(extra)
    mem["host_needed_bytes"] = need
    HOST_POOL.budget = max(HOST_POOL.budget, need)
    if job.gpu_lock_path:
        note = gpu_share.grow_host(need, memory.host_budget(job.gpu_lock_path))
        if note:
            mem["note"] = "; ".join(n for n in (mem.get("note", ""), note) if n)


def release_gpu() -> None:
    """Free this worker's device memory under its GPU hold, let the hold go, give the page-locked host buffers
    back, then the memory reservation. Freeing device memory changes other processes' kernel times (another
    process's 2 GiB cudaMalloc/cudaFree loop made the gelu example's timed calls 10.8 % slower on the H200,
    bench/window_disturbance.py), so it stays inside the hold; unlocking host memory changed nothing there,
    and the trim of large buffers is slow, so it runs after. Memory the candidate still holds (a module-level
    cache) goes with the process: the reservation then stays until the worker exits (a dead process's
    reservation is dropped)."""
    # No yield to a waiting writer first: it would save a window at most the release's own hold (3.2 s of
    # the H200 sweep's drains, session 22's lock log), while a yield behind a long writer (an ncu replay) could
    # outlast EXIT_GRACE_S, and the worker killed then frees its memory with no hold at all.
    memory.release(full=True, host_buffers=False)
    with sub_phase("release"):  # the lock log's label of this last drop
        gpu_share.release_hold()
    with contextlib.suppress(Exception):
        HOST_POOL.trim()
    if memory.held_bytes() > memory.SLACK_BYTES // 4:
        return
    gpu_share.release_all()


def _acquire_gpu(job: EvalJob, task: Any, init: list[Any], device: Any, mem: dict[str, Any]) -> None:
    """After the build (builds run side by side): reserve the evaluation's (or profile's) memory, then hold
    the GPU as a reader; a timed window or ncu's replay takes the write hold later."""
    if not job.gpu_lock_path or device.type != "cuda":
        return
    gpu_share.reserve(job.gpu_lock_path, _reservation_bytes(job, task, init, mem), _budget(job, device),
                      label=f"{job.mode} {memory.task_name(job.task_path)}")
    mem["reserved_bytes"] = gpu_share.reserved()
    gpu_share.read(job.gpu_lock_path, "gpu_wait")


def evaluate(job: EvalJob, report: ReportDraft) -> None:
    """The whole evaluation, each record set on `report` as soon as it is made: what an early failure
    leaves unset stays None (the app's forgery check reads exactly that)."""
    import torch

    findings: list[Finding] = []  # on the report at the end: a failure midway reports none
    report.versions = versions()
    report.seeds = (job.seed,)  # drawn at random per evaluation unless [eval] seed fixes it
    default_numerics = current_numerics()
    report.numerics = {"reference": {"matmul_allow_tf32": False, "cudnn_allow_tf32": False,
                                     "float32_matmul_precision": "highest"},
                       "eager_baseline": default_numerics}
    device = _device(job)  # its CUDA context made (no hold: engine/gpu/context.py)
    device_heads.reset_counts()  # the spare's warm-up compared a slice too
    memory.start_accounting(device)  # the CPU device's tensor bytes, when asked for (memory.ACCOUNTING_ENV)
    if device.type == "cuda":
        report.gpu_name = torch.cuda.get_device_name(device)
    mem = report.memory_notes  # the Memory record at the end (memory.finish)
    mem["note"] = memory.apply_cap(job, device)
    memory.reset_peak()
    if memory.note_phase_peak not in PHASE_END_HOOKS:
        PHASE_END_HOOKS.append(memory.note_phase_peak)  # each phase's own peak (Memory.phase_peak_bytes)
    recorder = BuildRecorder(Path(job.cache_dir) / "extensions" if job.cache_dir else None,
                             Path(job.build_log_path))
    recorder.install()
    identity = evidence.harness_identity()
    capture_clocks()
    PRECISION.capture()
    threads_before = thread_names()
    # Static integrity checks read the sources before any candidate code runs (it cannot rewrite them first).
    source_checks = source_findings(Path(job.candidate_path).read_text(encoding="utf-8"),
                                    Path(job.task_path).read_text(encoding="utf-8"), precision=job.precision)
    task, init, model = load_task(job, device)
    memory.check_task(job, task, init, device, _float_dtype(job.precision), mem,  # before the candidate
                      admit_host=_host_admission(job))
    with PRECISION.call("the candidate's import and ModelNew(...)"):
        model_new, compiled = build_candidate(job, recorder, task, init, device)
    report.compile = compiled
    subclassed = evidence.subclass_finding(task, sys.modules.get("cudaforge_candidate"))
    if subclassed is not None:
        findings.append(subclassed)
    findings.extend(source_checks)
    observe.on_checkpoint(gpu_share.yield_to_writers)
    HOST_POOL.unheld = gpu_share.without_hold  # a large buffer's page-lock (a pass over GiBs) holds no window back
    _acquire_gpu(job, task, init, device, mem)
    phase("place")
    if not job.gpu_lock_path:  # else the reservation was admitted against the card (engine/gpu/ledger.py)
        memory.recheck_fit(job, device, mem)
    model, model_new = _place_both(job, model, model_new, device)
    report.copied_parameters = tuple(copy_parameters(model, model_new))
    observe.checkpoint()
    phase("reference")  # the reference's own peak is the first step of the checks
    memory.measure_reference(lambda: make_inputs(task, job.seed, device, _float_dtype(job.precision)),
                             lambda inp: _run_reference(model, inp, device), flatten_outputs, mem)
    _grow_reservation(job, device, mem)
    memory.release_within(gpu_share.reserved())  # the trials draw the reference's sizes again
    corr = correctness(job, task, model, model_new, device, findings)
    report.correctness = corr
    observe.checkpoint()
    def draw() -> list[Any]:  # the kernel and fallback checks' inputs: drawn afresh each time, never cloned
        return make_inputs(task, job.seed, device, _float_dtype(job.precision))

    observe.checkpoint()
    kernels, stream_use = check_custom_code(job, recorder, model_new, draw, device, findings)
    report.kernels = kernels
    extra_threads = thread_names() - threads_before
    if not corr.passed:
        report.findings = findings + PRECISION.findings()
        report.outcome = "wrong_result"
        failed = [t for t in corr.trial_results if not t.passed]
        first = next((o for o in failed[0].outputs if not o.passed), None) if failed else None
        report.message = (f"wrong result in {len(failed)} of {corr.trials} trials"
                          + (f" ({failed[0].distribution} inputs): output {first.index}: {first.reason}"
                             if first else ""))
        return
    capture_note = ""
    reasons = streams.capture_reasons(any(f.name == "side_stream" for f in source_checks), stream_use)
    if device.type == "cuda" and reasons:  # only with a reason: a candidate on one stream pays nothing
        observe.checkpoint()
        capture_note = check_stream_capture(model_new, draw, device, reasons, findings)
        check_shared_weights("the side-stream check")
    phase("fallback")
    observe.checkpoint()
    fallback = runtime_checks.fallback_finding(lambda inputs: _run_reference(model, inputs, device),
                                               lambda inputs: _run_candidate(model_new, inputs, device),
                                               draw, device, kernels, recorder)
    if fallback is not None:
        findings.append(fallback)
    memory.release_within(gpu_share.reserved())
    observe.checkpoint()
    phase("cache_probes")
    findings.extend(check_cache_reuse(
        lambda inp: _run_candidate(model_new, inp, device), lambda inp: _run_reference(model, inp, device),
        lambda seed: make_inputs(task, seed, device, _float_dtype(job.precision)),
        atol=corr.atol, rtol=corr.rtol, seed=job.seed, to_host=memory.host_copy,  # the trials' seeds: VERIFIED
        park_output=lambda out, inputs: memory.park(out, beside=inputs)[0],
        fresh_beside=memory.second_draw_fits(int(memory.REFERENCE_IO.get("input_bytes", 0))),
        reference_mutates=REFERENCE_SEEN["mutates"],
        host_input_room=lambda nbytes: _grow_host(job, mem, nbytes), verified=tuple(VERIFIED), part=sub_phase))
    memory.release_within(gpu_share.reserved())
    observe.checkpoint()
    timed, report.speed_of_light = timing(job, task, model, model_new, device, findings, default_numerics,
                                          (corr.atol, corr.rtol))
    check_shared_weights("the timed calls")
    if capture_note:  # what the side-stream check decided, beside the timing it protects
        timed = dataclasses.replace(timed, settings={**timed.settings, "stream_capture": capture_note})
    report.timing = timed
    set_reference_numerics()
    observe.checkpoint()
    findings.extend(shape_check(job, task, init, model, model_new, device, corr.atol, corr.rtol))
    if job.format == "triton":  # after timing: the configurations autotuning chose are final
        triton_build = triton_support.build_info(sys.modules.get("cudaforge_candidate"))
        report.compile = dataclasses.replace(compiled, triton=triton_build)
    findings.extend(f for f in (evidence.tampering_finding(identity, evidence.harness_identity()),
                                evidence.threads_finding(extra_threads)) if f is not None)
    findings.extend(PRECISION.findings())
    check_shared_weights("the checks")
    report.findings = streams.fold_hidden_work(findings)
    report.outcome = "ok"


def profile_run(job: EvalJob, report: ReportDraft) -> None:
    """Profile mode: run only the candidate's forward inside an NVTX range that ncu filters on."""
    import torch

    device = _device(job)  # its CUDA context made (no hold: engine/gpu/context.py)
    recorder = BuildRecorder(Path(job.cache_dir) / "extensions" if job.cache_dir else None,
                             Path(job.build_log_path))
    recorder.install()
    task, init, model = load_task(job, device)
    model_new, _ = build_candidate(job, recorder, task, init, device)
    with sub_phase("footprint"):
        mem: dict[str, Any] = {}
        _reservation_bytes(job, task, init, mem)
    # Placing, the inputs and the warm-up call side by side with other work (a reader): nothing of them is
    # measured. Only ncu's replay of the profiled range holds the GPU alone, so a round whose profile runs
    # beside its evaluation (Session._start_profile) stops the evaluation's checks for the replay only.
    _acquire_gpu(job, task, init, device, mem)
    phase("place")
    model, model_new = _place_both(job, model, model_new, device)
    copy_parameters(model, model_new)
    with sub_phase("inputs"):
        inputs = make_inputs(task, job.seed, device, _float_dtype(job.precision))
    phase("profile")
    with sub_phase("warmup"):  # outside the profiled range (on the same inputs: one set on the device)
        _call(model_new, inputs)
        torch.cuda.synchronize()
    gpu_share.write(job.gpu_lock_path, "gpu_wait")  # the replay holds the GPU alone (readers drained, synced)
    with sub_phase("replay"), torch.cuda.nvtx.range(observe.PROFILED_RANGE):  # ncu's replay passes of each kernel
        for _ in range(job.profile_repeats):
            _call(model_new, inputs)
        torch.cuda.synchronize()
    report.outcome = "ok"
    report.message = "profiled"
