"""The typed result of evaluating one candidate, shared by the worker, the CLI, sessions and the UI.

Every class is a frozen dataclass so results can be passed between threads and stored as JSON
(`to_dict` / `from_dict` round-trip exactly).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

Outcome = Literal[
    "ok",  # compiled, correct, timed, no failing integrity finding
    "compile_error",
    "runtime_error",  # Python exception in the candidate (traceback kept)
    "wrong_result",
    "integrity_failure",  # correct numbers, but a failing integrity finding
    "timeout",
    "crash",  # the worker died from a signal or exited on its own
    "cuda_error",  # illegal address, launch failure, corrupted context
    "oom",
    "task_error",  # the task itself failed (bad get_inputs, Model does not build): exit 2
    "unavailable",  # a needed device or tool is missing: exit 3
]

Severity = Literal["fail", "warn", "info"]

# Said wherever a speedup would be printed for a timing that is no speed claim (Timing.speedup is None).
NO_SPEED_CLAIM = "interpreter time (Triton's interpreter on the CPU): no speed claim"


@dataclass(frozen=True)
class CompileResult:
    ok: bool
    format: str
    seconds: float = 0.0
    cached: bool = False
    log: str = ""
    triton: dict[str, Any] = field(default_factory=dict)  # Triton: version, interpreter, kernels, autotune choices


@dataclass(frozen=True)
class WorstElement:
    index: tuple[int, ...]
    expected: float
    got: float
    abs_err: float


@dataclass(frozen=True)
class OutputCheck:
    """How one output of the candidate compared with the reference in one trial."""

    index: int
    passed: bool
    shape_expected: tuple[int, ...]
    shape_got: tuple[int, ...]
    dtype_expected: str
    dtype_got: str
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0
    mismatches: int = 0
    numel: int = 0
    nonfinite_got: int = 0
    worst: tuple[WorstElement, ...] = ()
    reason: str = ""


@dataclass(frozen=True)
class TrialCheck:
    trial: int
    seed: int
    distribution: str
    order: str  # "reference_first" or "candidate_first"
    passed: bool
    outputs: tuple[OutputCheck, ...] = ()


@dataclass(frozen=True)
class Correctness:
    passed: bool
    trials: int
    trials_passed: int
    atol: float
    rtol: float
    outputs: tuple[OutputCheck, ...] = ()  # per output, the check from the worst trial
    trial_results: tuple[TrialCheck, ...] = ()


@dataclass(frozen=True)
class TimingStats:
    median_ms: float
    iqr_ms: float
    min_ms: float
    max_ms: float
    mean_ms: float
    trials: int
    method: str  # "cuda_event", "host_synchronized", "perf_counter", "triton_interpreter" or "cupti_busy"

    @property
    def spread(self) -> float:
        """IQR / median: what `noisy_timing` measures."""
        return self.iqr_ms / self.median_ms if self.median_ms > 0 else 0.0


@dataclass(frozen=True)
class Timing:
    reference: TimingStats
    candidate: TimingStats
    # reference median / candidate median, measured interleaved in one run; None when the candidate's
    # time is no speed claim (a Triton candidate run by Triton's interpreter on the CPU)
    speedup: float | None
    speedup_low: float  # (reference q25 / candidate q75): a pessimistic spread bound
    speedup_high: float
    host_reference: TimingStats | None = None
    host_candidate: TimingStats | None = None
    compile_baseline: TimingStats | None = None
    speedup_vs_compile: float | None = None
    l2_flush: bool = False
    warmup: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    # Noisy timing: how many times it was measured (re-measured while noisy), the threshold in force (None:
    # the rule was off or the result predates it) and, on the CPU device, torch's pinned thread count.
    measurements: int = 1
    noise_threshold: float | None = None
    cpu_threads: int | None = None
    # The CUPTI kernel-time timer (worker/kernel_timer.py): per side the union of every stream's kernel,
    # copy and memset intervals in each host-timed call; None with `kernel_timer` saying why it is absent.
    kernel_reference: TimingStats | None = None
    kernel_candidate: TimingStats | None = None
    kernel_timer: str = ""


@dataclass(frozen=True)
class Finding:
    """A named integrity or hygiene finding with its evidence, shown to the user as is."""

    name: str
    severity: Severity
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class KernelLaunch:
    """A kernel seen running during the candidate's forward pass."""

    name: str
    count: int
    device_time_us: float
    share: float  # of the candidate's total kernel time
    custom: bool  # compiled by the candidate (NVRTC / extension), not PyTorch's own


@dataclass(frozen=True)
class WorkerExit:
    reason: str  # "ok", "timeout", "crash", "exit", "oom", "killed"
    returncode: int | None = None
    signal: str | None = None
    seconds: float = 0.0
    phase: str = ""  # the phase that was running when the worker stopped


@dataclass(frozen=True)
class Memory:
    """Device memory of one evaluation (bytes, from PyTorch's allocator; None off CUDA).

    The design's bound: (eval_peak_bytes - 1 GiB) <= 1.25 x reference_peak_bytes. The footprint (inputs +
    the forward's tensors at most + the reference's and the candidate's parameters, counted on the meta
    device) decides before the build whether the task fits."""

    reference_peak_bytes: int | None = None  # one reference call with its inputs, outputs and parameters
    eval_peak_bytes: int | None = None  # the whole evaluation
    ratio: float | None = None  # (eval peak - 1 GiB) / reference peak
    total_bytes: int | None = None  # the card's total
    cap_bytes: int | None = None  # [run] gpu_memory_gb, when set
    free_bytes: int | None = None  # free on the card when the task was checked
    footprint_bytes: int | None = None
    input_bytes: int | None = None
    output_bytes: int | None = None
    param_bytes: int | None = None
    needed_bytes: int | None = None  # 1.25 x footprint + 1 GiB (worker/memory.py needed_bytes)
    # CUDA with the GPU lock: the worker's reservation in the card's ledger at the end (the estimate, grown to
    # what the reference's measured peak asks: memory.reservation_after_reference)
    reserved_bytes: int | None = None
    fits: bool | None = None
    reason: str = ""  # why the footprint is incomplete (a task that cannot run on the meta device)
    message: str = ""  # the "does not fit" line
    note: str = ""  # e.g. the cap ignored on the CPU device
    reference_call_s: float | None = None  # the measured reference call's wall time
    process_peak_bytes: int | None = None  # CUDA: the process's device memory as NVML counts it (context included)
    host_needed_bytes: int | None = None  # host memory for the copies waiting there (memory.host_needed_bytes)
    host_peak_bytes: int | None = None  # CPU device with accounting: the bytes the host copies held at most
    forward_peak_bytes: int | None = None  # the reference forward's own tensors at most, counted on the meta device
    phase_peak_bytes: dict[str, int] = field(default_factory=dict)  # each worker phase's own peak: which step set it
    # CUDA: bytes of parked outputs' compared slices read from their device heads, and copied over from the
    # host (worker/device_heads.py)
    compared_on_device_bytes: int | None = None
    compared_from_host_bytes: int | None = None


@dataclass(frozen=True)
class Peaks:
    """The GPU spec's figures a speed-of-light floor is computed with (engine/speed_of_light.py)."""

    gpu: str = ""
    dram_bandwidth_gbs: float | None = None
    fp32_tflops: float | None = None
    tf32_tensor_tflops: float | None = None
    fp16_tensor_tflops: float | None = None
    bf16_tensor_tflops: float | None = None


@dataclass(frozen=True)
class SpeedOfLight:
    """How close the candidate is to the hardware's limit: floor = max(bytes / DRAM bandwidth,
    FLOPs / peak). Only the byte floor is a true floor (`faster_than_memory_bound`); the FLOP floor
    feeds `sol_fraction` and holds. `None` parts are unknown, and `note` says why."""

    input_bytes: int = 0  # read: the inputs
    param_bytes: int = 0  # read: parameters and buffers
    output_bytes: int = 0  # written: the outputs
    flops: int | None = None  # torch.utils.flop_counter.FlopCounterMode on the reference
    bandwidth_gbs: float | None = None
    peak_tflops: float | None = None
    peak: str = ""  # which peak the FLOPs are held to: "fp32", "tf32_tensor", "fp16_tensor", "bf16_tensor"
    byte_floor_ms: float | None = None
    flop_floor_ms: float | None = None
    floor_ms: float | None = None
    bound: str = ""  # "memory" or "compute": which floor is the larger
    candidate_ms: float | None = None
    sol_fraction: float | None = None  # floor / candidate median
    gpu: str = ""
    note: str = ""

    @property
    def bytes(self) -> int:
        return self.input_bytes + self.param_bytes + self.output_bytes


@dataclass(frozen=True)
class TaskCounts:
    """What the app counted of a task on the meta device, once, in a subprocess (memory.footprint_main), at
    one precision: the footprint record (memory.meta_footprint's bytes per part, `footprint_bytes`,
    `reason`) and the reference call's work (speed_of_light.count_work: bytes and FLOPs; None where it
    could not be counted there). A job that carries them spares its worker both counts, whose dispatch
    modes import torch._dynamo (seconds of a worker's start, a spare's warm-up included); the counts depend
    on the task's shapes, never on its draws."""

    precision: str
    footprint: dict[str, Any]
    work: SpeedOfLight | None = None


@dataclass(frozen=True)
class EvalResult:
    outcome: Outcome
    accepted: bool
    task_path: str
    candidate_hash: str
    format: str
    device: str
    gpu_name: str = ""
    message: str = ""  # one line saying what happened, for humans
    compile: CompileResult | None = None
    correctness: Correctness | None = None
    timing: Timing | None = None
    findings: tuple[Finding, ...] = ()
    kernels: tuple[KernelLaunch, ...] = ()
    exit: WorkerExit | None = None
    traceback: str = ""
    stdout_tail: str = ""
    stderr_tail: str = ""
    phases: dict[str, float] = field(default_factory=dict)  # seconds per phase
    versions: dict[str, str] = field(default_factory=dict)
    numerics: dict[str, Any] = field(default_factory=dict)  # TF32 flags of reference and baseline
    seeds: tuple[int, ...] = ()
    cached: bool = False
    memory: Memory | None = None
    speed_of_light: SpeedOfLight | None = None

    @property
    def sol_fraction(self) -> float | None:
        return self.speed_of_light.sol_fraction if self.speed_of_light else None

    @property
    def speedup(self) -> float | None:
        return self.timing.speedup if self.timing else None

    @property
    def noisy(self) -> bool:
        """Its timing stayed noisy (`noisy_timing`): no result, so never best, never a seed, never fast."""
        return any(f.name == "noisy_timing" for f in self.findings)

    def failing_findings(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "fail")

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalResult:
        return from_dict(cls, data)


def to_dict(obj: Any) -> Any:
    """JSON-ready form of a results dataclass (tuples become lists)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: Any, data: Any) -> Any:
    """Rebuild a dataclass (or a typed value) from `to_dict` output, following the type hints."""
    return _convert(cls, data)


def _convert(tp: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(args[0], value) if len(args) == 1 else value
    if origin is tuple:
        args = typing.get_args(tp)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_convert(args[0], v) for v in value)
        return tuple(value)
    if origin in (dict, list, Literal):
        return value
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in value:
                kwargs[f.name] = _convert(hints[f.name], value[f.name])
        return tp(**kwargs)
    return value
