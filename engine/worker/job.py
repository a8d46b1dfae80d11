"""The two messages between the app and the worker: the job it is given and the report it writes.

Both travel as JSON files (worker.json, result.json); these frozen dataclasses are what each side
reads, by attribute. The app builds an `EvalJob` (engine/evaluation/evaluator.py), the worker reads it with
`EvalJob.from_dict`; the worker fills a `ReportDraft` with typed records as the evaluation makes them,
freezes it into a `WorkerReport` at the end and writes that; the app reads it back with
`WorkerReport.from_dict` and builds the EvalResult from it field by field. Standard library and
engine/results.py only: the app imports this without torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from cudaforge.engine.results import (
    CompileResult,
    Correctness,
    Finding,
    KernelLaunch,
    Memory,
    Peaks,
    SpeedOfLight,
    TaskCounts,
    Timing,
    from_dict,
    to_dict,
)

Mode = Literal["evaluate", "profile"]


def build_log_beside(progress_path: str) -> str:
    """The build log's path for a worker whose progress file is `progress_path` (one rule for both sides)."""
    return str(Path(progress_path).with_name("build.log"))


@dataclass(frozen=True)
class EvalJob:
    """What one worker process does: the files, the device, the checks' settings and where to report."""

    task_path: str
    candidate_path: str
    result_path: str  # the report, written once, atomically, at the end
    progress_path: str  # the current phase, rewritten before each phase (the supervisor's limits)
    seed: int  # the base seed of every input draw (random per evaluation unless [eval] seed fixes it)
    mode: Mode = "evaluate"
    format: str = ""  # the candidate's format (cuda, triton, ...)
    device: str = "cuda"
    gpu: int = 0
    precision: str = "fp32"
    trials: int = 5
    atol: float | None = None  # None: the precision's default tolerance
    rtol: float | None = None
    second_distribution: bool = True
    timing: dict[str, Any] = field(default_factory=dict)  # [timing]: warmup, trials, l2_flush, ...
    cache_dir: str | None = None
    peaks: Peaks | None = None  # the GPU spec's bandwidth and FLOP peaks (speed of light, faster_than_memory_bound)
    speed_of_light_margin: float = 1.0
    gpu_lock_path: str | None = None  # the per-GPU lock that GPU work holds (CUDA only)
    gpu_memory_gb: float | None = None  # [run] gpu_memory_gb: the device-memory cap
    profile_repeats: int = 1  # profile mode: forward calls inside the profiled range
    # The task's footprint as an earlier evaluation counted it (profile mode reserves memory with it: the
    # meta-device count took 4 s in a process under ncu)
    footprint_bytes: int | None = None
    # The task's footprint and work as the app counted them on the meta device (fit.task_counts): taken
    # instead of counting them again here (memory.check_task, pipeline._speed_of_light)
    task_counts: TaskCounts | None = None

    @property
    def counts(self) -> TaskCounts | None:
        """`task_counts` where they were counted at this job's precision; else None (the worker counts)."""
        counts = self.task_counts
        return counts if counts is not None and counts.precision == self.precision else None

    @property
    def build_log_path(self) -> str:
        """Where the worker streams its build's output as it comes (beside the progress file): the app
        tails it while the build runs, since a build can take minutes and prints nothing else."""
        return build_log_beside(self.progress_path)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> EvalJob:
        """The job from its JSON; a key this worker does not know is an error (app and worker disagree)."""
        unknown = set(data) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"worker job has unknown keys: {', '.join(sorted(unknown))}")
        return from_dict(cls, data)


@dataclass(frozen=True)
class WorkerReport:
    """What the worker found. `None` marks a record the worker did not make (an early failure); the app's
    forgery check reads exactly that (an "ok" without the records every evaluation makes)."""

    outcome: str | None = None
    message: str = ""
    traceback: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    findings: tuple[Finding, ...] = ()
    numerics: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] | None = None
    seeds: tuple[int, ...] | None = None
    gpu_name: str = ""
    memory: Memory | None = None
    compile: CompileResult | None = None
    copied_parameters: tuple[str, ...] = ()
    correctness: Correctness | None = None
    kernels: tuple[KernelLaunch, ...] | None = None
    timing: Timing | None = None
    speed_of_light: SpeedOfLight | None = None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerReport:
        """The report from the worker's JSON. A compile record without `ok` (a failure's log only) is ok
        unless the outcome is compile_error; keys this version does not know are ignored."""
        data = dict(data)
        comp = data.get("compile")
        if isinstance(comp, dict):
            comp = {"format": "", **comp}
            comp["ok"] = comp.get("ok", True) and data.get("outcome") != "compile_error"
            data["compile"] = comp
        return from_dict(cls, data)


@dataclass
class ReportDraft:
    """The worker's report while the evaluation runs: WorkerReport's records, set one by one as each check
    makes its own (an early failure leaves the later ones None), frozen once at the end by `finish`."""

    outcome: str | None = None
    message: str = ""
    traceback: str = ""
    phases: dict[str, float] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    numerics: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, str] | None = None
    seeds: tuple[int, ...] | None = None
    gpu_name: str = ""
    memory: Memory | None = None
    compile: CompileResult | None = None
    copied_parameters: tuple[str, ...] = ()
    correctness: Correctness | None = None
    kernels: tuple[KernelLaunch, ...] | None = None
    timing: Timing | None = None
    speed_of_light: SpeedOfLight | None = None
    # What engine/worker/memory.py notes while the evaluation runs (bytes, the fit, messages by key); it
    # becomes the `memory` record at the end (memory.finish), whatever the outcome.
    memory_notes: dict[str, Any] = field(default_factory=dict)

    def note_build_failure(self, log: str, seconds: float | None) -> None:
        """A failed build's log and time on the compile record (made here if the build never got that far):
        the Compiler pane shows the log whatever failed after it. A failure with neither makes no record."""
        if not log and seconds is None:
            return
        compiled = self.compile or CompileResult(ok=True, format="")
        if log:
            compiled = dataclasses.replace(compiled, log=log)
        if seconds is not None:
            compiled = dataclasses.replace(compiled, seconds=seconds)
        self.compile = compiled

    def finish(self) -> WorkerReport:
        """The report as written. A compile record is not ok when the outcome is compile_error (a Triton
        kernel fails to compile at its first call, after the import went well): from_dict's rule."""
        compiled = self.compile
        if compiled is not None and self.outcome == "compile_error":
            compiled = dataclasses.replace(compiled, ok=False)
        return WorkerReport(
            outcome=self.outcome, message=self.message, traceback=self.traceback, phases=dict(self.phases),
            findings=tuple(self.findings), numerics=dict(self.numerics), versions=self.versions, seeds=self.seeds,
            gpu_name=self.gpu_name, memory=self.memory, compile=compiled, copied_parameters=self.copied_parameters,
            correctness=self.correctness, kernels=self.kernels, timing=self.timing,
            speed_of_light=self.speed_of_light)
