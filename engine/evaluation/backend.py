"""Where evaluations and profiles run: the seam between a Session and the machines that do the work.

A Session holds an `EvalBackend` and (on CUDA, with ncu on) a `ProfileBackend`. The local ones are
`Evaluator` and `Profiler` (sandboxed workers on this host); a batch on a Ray cluster hands its
sessions proxies (engine/session/ray_backend.py) that send the same jobs to actors on other nodes
and return the same typed results. `local_parts` builds the local pair from a configuration; the
factory uses it for local sessions and each Ray actor uses it on its own node, so both build their
evaluator the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.config import Config
    from cudaforge.engine.evaluation.evaluator import Evaluator
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.profiling import ProfileResult
    from cudaforge.engine.results import EvalResult
    from cudaforge.engine.task import Task


class EvalBackend(Protocol):
    """Evaluates a candidate on its task; `prewarm` is a hint (start a spare worker), `aclose` frees."""

    async def evaluate(self, task: Task, candidate: Candidate, *, use_cache: bool = True) -> EvalResult: ...

    def prewarm(self) -> bool: ...

    async def aclose(self) -> None: ...


class ProfileBackend(Protocol):
    """Profiles a correct candidate with Nsight Compute."""

    async def profile(self, task: Task, candidate: Candidate, *, use_cache: bool = True) -> ProfileResult: ...

    def prewarm(self) -> bool: ...

    async def aclose(self) -> None: ...


class SessionBackend(Protocol):
    """What a batch gives the factory instead of local parts: each session's evaluator and profiler,
    and the GPU spec of the machines that evaluate (None when unknown or on the CPU device)."""

    gpu_spec: Any

    def session_parts(self, config: Config) -> tuple[EvalBackend, ProfileBackend | None]: ...


def device_gpu_spec(config: Config, gpu: int | None = None) -> Any:
    """The GPU spec of this host's CUDA device (None on the CPU device or when no GPU answers)."""
    if config.get("eval", "device") != "cuda":
        return None
    try:
        from cudaforge.engine.gpu.specs import gpu_spec_for_device

        return gpu_spec_for_device(config.get("eval", "gpu") if gpu is None else gpu)
    except Exception:
        return None


def local_parts(config: Config, gpu_spec: Any) -> tuple[Evaluator, Profiler | None]:
    """The evaluator (result cache on) and, on CUDA with ncu enabled, the profiler of this host."""
    from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
    from cudaforge.engine.speed_of_light import peaks_from_spec

    peak = getattr(gpu_spec, "dram_bandwidth_gbs", None) if gpu_spec is not None else None
    evaluator = Evaluator(EvalOptions.from_config(config, peak_bandwidth_gbs=peak, peaks=peaks_from_spec(gpu_spec),
                                                  result_cache=True))
    profiler = None
    ncu = ncu_settings(config)
    if ncu is not None:
        from cudaforge.engine.evaluation.profiler import Profiler

        profiler = Profiler(evaluator, ncu, chip=getattr(gpu_spec, "chip", "") or "")
    return evaluator, profiler


def ncu_settings(config: Config) -> Any:
    """The `[ncu]` settings when candidates are profiled (CUDA device, ncu enabled), else None."""
    if config.get("eval", "device") != "cuda":
        return None
    from cudaforge.engine.profiling import NcuSettings

    table = dict(config.section("ncu"))
    ncu = NcuSettings.from_table(table, source="config") if table else NcuSettings()
    return ncu if ncu.enabled else None
