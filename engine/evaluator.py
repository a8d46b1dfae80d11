"""Evaluate a candidate against its task in a sandboxed worker process and return an EvalResult."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .candidate import Candidate
from .config import Config
from .gpu_lock import gpu_lock_path, other_gpu_processes
from .results import EvalResult, Finding, WorkerExit, from_dict
from .sandbox import ProcessOutcome, run_sandboxed, tail
from .task import Task

PHASE_GROUPS = {
    "gpu_wait_s": ("gpu_wait",),
    "load_s": ("start", "load_task", "build", "init"),
    "correctness_s": ("correctness", "kernels"),
    "timing_s": ("timing", "compile_baseline"),
    "profile_s": ("profile",),
}


def default_cache_dir() -> Path:
    env = os.environ.get("CUDAFORGE_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cudaforge"


@dataclass(frozen=True)
class EvalOptions:
    device: str = "cuda"
    gpu: int = 0
    precision: str = "fp32"
    trials: int = 5
    seed: int = 42
    atol: float | None = None
    rtol: float | None = None
    second_distribution: bool = True
    timing: Mapping[str, Any] = field(default_factory=lambda: {
        "warmup": 10, "trials": 50, "host_trials": 20, "l2_flush": True, "baselines": ["eager"]})
    timeouts: Mapping[str, float] = field(default_factory=lambda: {
        "load_s": 900.0, "correctness_s": 180.0, "timing_s": 300.0, "profile_s": 300.0, "gpu_wait_s": 3600.0})
    output_limit_bytes: int = 64 << 20
    open_files: int = 1024
    cache_dir: Path = field(default_factory=default_cache_dir)
    integrity_policy: Mapping[str, str] = field(default_factory=dict)
    speed_of_light_margin: float = 1.0
    peak_bandwidth_gbs: float | None = None
    python: str = sys.executable

    @classmethod
    def from_config(cls, config: Config, **overrides: Any) -> EvalOptions:
        ev, tm, to = config.section("eval"), config.section("timing"), config.section("timeouts")
        cache = config.get("run", "cache_dir")
        opts = cls(
            device=ev["device"], gpu=ev["gpu"], precision=ev["precision"], trials=ev["trials"], seed=ev["seed"],
            atol=ev["atol"], rtol=ev["rtol"], second_distribution=ev["second_distribution"],
            timing=dict(tm),
            timeouts={k: float(to[k]) for k in PHASE_GROUPS if k in to} | {"gpu_wait_s": 3600.0},
            output_limit_bytes=int(to["output_mb"]) << 20, open_files=int(to["open_files"]),
            cache_dir=Path(cache).expanduser() if cache else default_cache_dir(),
            integrity_policy=dict(config.get("integrity", "policy")),
            speed_of_light_margin=float(config.get("integrity", "speed_of_light_margin")),
        )
        return replace(opts, **overrides) if overrides else opts

    def phase_limits(self) -> dict[str, float]:
        return {phase: float(self.timeouts.get(group, 3600.0)) for group, phases in PHASE_GROUPS.items()
                for phase in phases}


# Default severities of findings; `[integrity] policy` overrides per name.
DEFAULT_POLICY = {"precision_downgrade": "warn", "pytorch_time_share": "warn", "weak_task_check": "warn",
                  "gpu_shared": "warn"}


def apply_policy(findings: tuple[Finding, ...], policy: Mapping[str, str]) -> tuple[Finding, ...]:
    out = []
    for f in findings:
        level = policy.get(f.name) or DEFAULT_POLICY.get(f.name)
        if level == "off":
            continue
        if level in ("fail", "warn") and level != f.severity:
            f = replace(f, severity=level)  # type: ignore[arg-type]
        out.append(f)
    return tuple(out)


class Evaluator:
    """Runs evaluations one at a time per GPU (file lock) in fresh sandboxed workers."""

    def __init__(self, options: EvalOptions, *, keep_workdirs: bool = False) -> None:
        self.options = options
        self.keep_workdirs = keep_workdirs

    def worker_spec(self, task: Task, candidate_path: Path, workdir: Path, mode: str = "evaluate",
                    candidate: Candidate | None = None) -> dict[str, Any]:
        o = self.options
        return {
            "mode": mode,
            "task_path": str(task.path),
            "candidate_path": str(candidate_path),
            "format": candidate.format if candidate else "",
            "device": o.device,
            "gpu": o.gpu,
            "precision": o.precision,
            "trials": o.trials,
            "seed": o.seed,
            "atol": o.atol,
            "rtol": o.rtol,
            "second_distribution": o.second_distribution,
            "timing": dict(o.timing),
            "cache_dir": str(o.cache_dir),
            "peak_bandwidth_gbs": o.peak_bandwidth_gbs,
            "speed_of_light_margin": o.speed_of_light_margin,
            "gpu_lock_path": str(gpu_lock_path(o.cache_dir, o.gpu)) if o.device == "cuda" else None,
            "result_path": str(workdir / "result.json"),
            "progress_path": str(workdir / "sandbox" / "progress.json"),
        }

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        cache = self.options.cache_dir
        env["CUDAFORGE_NVRTC_CACHE"] = str(cache / "nvrtc")
        env["TORCHINDUCTOR_CACHE_DIR"] = str(cache / "inductor")
        env["TORCH_EXTENSIONS_DIR"] = str(cache / "torch_extensions")
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        return env

    def prepare(self, task: Task, candidate: Candidate, mode: str = "evaluate") -> tuple[Path, Path, Path]:
        self.options.cache_dir.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix=f"cudaforge-{mode}-"))
        cand_path = workdir / "candidate.py"
        cand_path.write_text(candidate.source, encoding="utf-8")
        spec_path = workdir / "worker.json"
        spec_path.write_text(json.dumps(self.worker_spec(task, cand_path, workdir, mode, candidate)))
        return workdir, cand_path, spec_path

    async def evaluate(self, task: Task, candidate: Candidate) -> EvalResult:
        workdir, _, spec_path = self.prepare(task, candidate)
        try:
            warnings: list[Finding] = []
            if self.options.device == "cuda":
                others = await asyncio.to_thread(other_gpu_processes, self.options.gpu)
                if others:
                    warnings.append(Finding("gpu_shared", "warn", f"{len(others)} other process(es) use GPU "
                                            f"{self.options.gpu}; timings may be disturbed", {"pids": others}))
            # The worker takes the GPU lock itself once its build is done (builds may overlap).
            outcome, out_path, err_path = await run_sandboxed(
                [self.options.python, "-m", "cudaforge.engine.worker", str(spec_path)],
                workdir=workdir / "sandbox",
                env=self.worker_env(),
                phase_limits=self.options.phase_limits(),
                default_limit_s=float(self.options.timeouts.get("load_s", 900.0)),
                output_limit_bytes=self.options.output_limit_bytes,
                open_files=self.options.open_files,
            )
            return self.assemble(task, candidate, workdir, outcome, out_path, err_path, warnings)
        finally:
            if not self.keep_workdirs:
                shutil.rmtree(workdir, ignore_errors=True)

    def assemble(self, task: Task, candidate: Candidate, workdir: Path, outcome: ProcessOutcome, out_path: Path,
                 err_path: Path, warnings: list[Finding]) -> EvalResult:
        result_path = workdir / "result.json"
        stdout_tail, stderr_tail = tail(out_path), tail(err_path)
        raw: dict[str, Any] = {}
        if result_path.exists():
            with contextlib.suppress(ValueError, OSError):
                raw = json.loads(result_path.read_text())
        exit_reason = {"exited": "ok" if raw else "exit", "signal": "crash"}.get(outcome.reason, outcome.reason)
        worker_exit = WorkerExit(reason=exit_reason, returncode=outcome.returncode, signal=outcome.signal,
                                 seconds=outcome.seconds, phase=outcome.phase)
        base: dict[str, Any] = {
            "task_path": str(task.path), "candidate_hash": candidate.sha256, "format": candidate.format,
            "device": self.options.device, "stdout_tail": stdout_tail, "stderr_tail": stderr_tail,
        }
        if raw:
            data = {k: v for k, v in raw.items() if k in EvalResult.__dataclass_fields__}
            data.update(base)
            comp = data.get("compile")
            if comp is not None:
                comp.setdefault("ok", data.get("outcome") != "compile_error")
                comp.setdefault("format", candidate.format)
                if data.get("outcome") == "compile_error":
                    comp["ok"] = False
            data.setdefault("outcome", "runtime_error")
            data.setdefault("message", "")
            data["accepted"] = False
            result = from_dict(EvalResult, data)
            result = replace(result, exit=worker_exit)
        else:
            result = self._failure_without_result(base, outcome, worker_exit, stderr_tail)
        # Static checks again here, on the source the app holds: code in the worker could forge its result file.
        from .integrity import source_findings

        have = {f.name for f in result.findings}
        static = tuple(f for f in source_findings(candidate.source, task.source, precision=self.options.precision)
                       if f.name not in have)
        findings = apply_policy(tuple(warnings) + result.findings + static, self.options.integrity_policy)
        outcome_name = result.outcome
        message = result.message
        if outcome_name == "ok" and any(f.severity == "fail" for f in findings):
            outcome_name = "integrity_failure"
            message = "integrity: " + "; ".join(f.name for f in findings if f.severity == "fail")
        elif outcome_name == "ok":
            message = f"correct, {result.timing.speedup:.2f}x vs eager" if result.timing else "correct"
        return replace(result, findings=findings, outcome=outcome_name, message=message,
                       accepted=outcome_name == "ok")

    def _failure_without_result(self, base: dict[str, Any], outcome: ProcessOutcome, worker_exit: WorkerExit,
                                stderr_tail: str) -> EvalResult:
        phase = outcome.phase or "start"
        if outcome.reason == "timeout":
            name, msg = "timeout", f"timed out after {outcome.limit_s:g} s in phase '{phase}'; the worker was killed"
        elif outcome.reason == "output_limit":
            name, msg = "crash", f"killed for writing more than {self.options.output_limit_bytes / 2**20:g} MiB of output"
        elif outcome.reason == "cancelled":
            name, msg = "crash", "cancelled"
        elif outcome.reason == "signal":
            sig = outcome.signal or f"signal {-(outcome.returncode or 0)}"
            if outcome.signal == "SIGKILL":
                name, msg = "crash", f"worker killed by SIGKILL in phase '{phase}' (host out of memory?)"
            else:
                name, msg = "crash", f"worker crashed with {sig} in phase '{phase}'"
        elif outcome.reason == "supervisor_failed":
            name, msg = "crash", "the sandbox supervisor failed; see its log"
        else:
            name, msg = "crash", (f"worker exited with code {outcome.returncode} in phase '{phase}' without a result "
                                  "(the candidate called sys.exit/os._exit?)")
        if "CUDA error" in stderr_tail or "illegal memory access" in stderr_tail:
            name = "cuda_error"
        return EvalResult(outcome=name, accepted=False, message=msg, exit=worker_exit, **base)

