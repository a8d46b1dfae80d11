"""Roofline and occupancy analysis of an Nsight Compute profile.

From the per-kernel counters and the GPU spec's peaks, each kernel is classified (memory-bound,
compute-bound, latency/occupancy-bound, launch-overhead-bound) and findings are ranked by the share
of GPU time they put at stake. Every finding carries its evidence (metric, value, the GPU's peak,
the threshold used) and one concrete recommendation, so a person or a Judge can check it.
The analysis is a tree of frozen dataclasses that round-trips through `to_dict`/`from_dict`, so run
records and events carry it typed. The offline Judge (engine/agents/offline_judge.py) reads it; the
text report is engine/profiling/render.py.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from cudaforge.engine.gpu.specs import GpuSpec
from cudaforge.engine.profiling.result import KernelProfile, ProfileResult

MEMORY_BOUND = "memory-bound"
COMPUTE_BOUND = "compute-bound"
LATENCY_BOUND = "latency/occupancy-bound"
LAUNCH_BOUND = "launch-overhead-bound"
UNKNOWN = "unknown"

# Thresholds (documented in each finding's evidence).
TINY_KERNEL_US = 10.0  # below this a launch costs about as much as the work (launch ~2-5 µs)
HIGH_UTILIZATION_PCT = 60.0  # a unit this busy is "the" bottleneck (Nsight Compute's SOL rule)
ISSUE_BOUND_PCT = 80.0  # SM throughput this high with idle FP pipes: instruction-issue bound
MEMORY_LATENCY_DRAM_PCT = 40.0  # below the roof but busy DRAM + long-scoreboard stalls: memory-bound
CACHE_BOUND_DRAM_PCT = 30.0  # busy L1/L2 with DRAM below this: the caches, not DRAM, are the limit
SATURATED_DRAM_PCT = 75.0  # beyond this only moving fewer bytes helps
LOW_OCCUPANCY_PCT = 50.0
STALL_PCT = 20.0  # a stall reason holding warps this often is worth a finding
TENSOR_IDLE_PCT = 1.0
DIVERGENCE_UNIFORM_PCT = 80.0
L2_HIT_LOW_PCT = 40.0
TAIL_LOSS = 0.25  # fraction of the last wave left empty

# Metric names, with fallbacks (substitutes and older-chip spellings) in order.
DURATION = ("gpu__time_duration.sum", "gpu__time_duration.avg")
DRAM_PCT = (
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
)
DRAM_BW = ("dram__bytes.sum.per_second",)
DRAM_READ = ("dram__bytes_read.sum",)
DRAM_WRITE = ("dram__bytes_write.sum",)
L2_PCT = (
    "lts__throughput.avg.pct_of_peak_sustained_active",
    "lts__throughput.avg.pct_of_peak_sustained_elapsed",
)
L1_PCT = (
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "l1tex__throughput.avg.pct_of_peak_sustained_elapsed",
)
L1_HIT = ("l1tex__t_sector_hit_rate.pct",)
L2_HIT = ("lts__t_sector_hit_rate.pct",)
SM_PCT = ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
FP32_PIPE = (
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_fp32_cycles_active.avg.pct_of_peak_sustained_active",
)
TENSOR_PIPE = (
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed",
)
FFMA = (
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "smsp__sass_thread_inst_executed_op_ffma_pred_on.sum",
)
FADD = ("sm__sass_thread_inst_executed_op_fadd_pred_on.sum",)
FMUL = ("sm__sass_thread_inst_executed_op_fmul_pred_on.sum",)
WARPS_ACTIVE = ("sm__warps_active.avg.pct_of_peak_sustained_active",)
THEORETICAL_OCC = ("sm__maximum_warps_per_active_cycle_pct",)
REGS = ("launch__registers_per_thread",)
SMEM_PER_BLOCK = ("launch__shared_mem_per_block", "launch__shared_mem_per_block_allocated")
GRID_SIZE = ("launch__grid_size",)
BLOCK_SIZE = ("launch__block_size",)
WAVES = ("launch__waves_per_multiprocessor",)
BRANCH_UNIFORM = ("smsp__sass_average_branch_targets_threads_uniform.pct",)
OCCUPANCY_LIMITS = {
    "registers": "launch__occupancy_limit_registers",
    "shared memory": "launch__occupancy_limit_shared_mem",
    "warps": "launch__occupancy_limit_warps",
    "blocks": "launch__occupancy_limit_blocks",
    "barriers": "launch__occupancy_limit_barriers",
}
STALLS: dict[str, tuple[str, str, str]] = {
    # reason: (metric, what it means, what to do)
    "long_scoreboard": (
        "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
        "warps wait for global/local memory (L1TEX) results",
        "keep more independent loads in flight per thread (unroll, load several elements before using "
        "them, prefetch into registers or shared memory with cp.async), and check for local-memory spills",
    ),
    "short_scoreboard": (
        "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
        "warps wait for shared-memory or special-function (MIO) results",
        "cut shared-memory traffic and bank conflicts (pad shared arrays, read 128-bit vectors, keep reused "
        "values in registers) and avoid transcendental math in the inner loop",
    ),
    "barrier": (
        "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
        "warps wait at __syncthreads for slower warps of their block",
        "use fewer block-wide barriers (warp shuffles for reductions, double-buffered shared tiles) and give "
        "every warp of a block the same amount of work",
    ),
    "branch_resolving": (
        "smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct",
        "warps wait for branch targets to be computed",
        "make branches uniform per warp or branch-free (predication, select), and hoist conditions out of loops",
    ),
    "lg_throttle": (
        "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
        "the local/global load-store queue is full",
        "issue fewer, wider memory instructions (128-bit float4 loads/stores) and avoid local-memory arrays",
    ),
    "mio_throttle": (
        "smsp__warp_issue_stalled_mio_throttle_per_warp_active.pct",
        "the MIO queue (shared memory, special functions) is full",
        "issue fewer shared-memory instructions (vectorize them, keep data in registers) and fewer atomics",
    ),
    "memory_dependency": (
        "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
        "warps wait for memory operations to be accepted",
        "issue fewer, wider memory instructions and spread accesses so fewer requests queue up",
    ),
}


@dataclass(frozen=True)
class Evidence:
    """One number a finding rests on, with the peak and threshold it was compared against."""

    metric: str  # an ncu metric name, or "derived:<what>" for values computed from several metrics
    value: float | None
    unit: str = ""
    peak: float | None = None  # the GPU spec's peak for this quantity, same unit
    threshold: float | None = None
    comparison: str = ""  # how the threshold was applied, e.g. ">=", "<"
    note: str = ""

    def describe(self) -> str:
        shown = "n/a" if self.value is None else fmt_number(self.value)
        text = f"{self.metric} = {shown}{(' ' + self.unit) if self.unit else ''}"
        extras = []
        if self.peak is not None:
            extras.append(f"peak {fmt_number(self.peak)}{(' ' + self.unit) if self.unit else ''}")
        if self.threshold is not None:
            extras.append(f"threshold {self.comparison} {fmt_number(self.threshold)}".replace("  ", " "))
        if self.note:
            extras.append(self.note)
        return text + (f" ({'; '.join(extras)})" if extras else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "value": self.value,
            "unit": self.unit,
            "peak": self.peak,
            "threshold": self.threshold,
            "comparison": self.comparison,
            "note": self.note,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Evidence:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


@dataclass(frozen=True)
class PerfFinding:
    """A ranked observation about one kernel: what, the evidence, what to do next."""

    name: str  # stable id, e.g. "dram_bandwidth", "occupancy", "stall_long_scoreboard"
    kernel: str  # the kernel's short name
    launch_id: int
    title: str  # one line, with the key numbers
    method: str  # the optimization in a few words
    recommendation: str  # concrete enough to implement
    evidence: tuple[Evidence, ...] = ()
    score: float = 0.0  # time share x estimated recoverable fraction: the ranking key
    severity: str = "low"  # "high" | "medium" | "low", from the score

    @property
    def message(self) -> str:
        """One line for prompt lists (engine/agents/summary.format_findings reads `message`)."""
        ev = "; ".join(e.describe() for e in self.evidence[:4])
        return f"{self.kernel}: {self.title}. Evidence: {ev}. Recommendation: {self.recommendation}"

    @property
    def metrics(self) -> tuple[str, ...]:
        """The ncu metric names this finding rests on (derived values left out)."""
        return tuple(dict.fromkeys(e.metric for e in self.evidence if not e.metric.startswith("derived:")))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kernel": self.kernel,
            "launch_id": self.launch_id,
            "title": self.title,
            "method": self.method,
            "recommendation": self.recommendation,
            "evidence": [e.to_dict() for e in self.evidence],
            "score": self.score,
            "severity": self.severity,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PerfFinding:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        fields["evidence"] = tuple(Evidence.from_dict(e) for e in d.get("evidence", ()))
        return cls(**fields)


@dataclass(frozen=True)
class KernelAnalysis:
    """One kernel launch placed on the roofline, with its occupancy and its findings."""

    launch_id: int
    name: str
    short_name: str
    duration_us: float | None
    time_share: float
    bottleneck: str
    reason: str  # one line: why this class, with numbers
    dram_gbs: float | None = None
    dram_pct_of_peak: float | None = None
    fp32_tflops: float | None = None
    fp32_pct_of_peak: float | None = None
    arithmetic_intensity: float | None = None  # FP32 FLOP per DRAM byte
    ridge_point: float | None = None
    theoretical_occupancy_pct: float | None = None
    achieved_occupancy_pct: float | None = None
    blocks_per_sm: int | None = None
    occupancy_limiters: tuple[str, ...] = ()
    waves: float | None = None
    findings: tuple[PerfFinding, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "findings"}
        out["occupancy_limiters"] = list(self.occupancy_limiters)
        out["findings"] = [f.to_dict() for f in self.findings]
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KernelAnalysis:
        fields = {k: d[k] for k in cls.__dataclass_fields__ if k in d}
        fields["occupancy_limiters"] = tuple(d.get("occupancy_limiters", ()))
        fields["findings"] = tuple(PerfFinding.from_dict(f) for f in d.get("findings", ()))
        return cls(**fields)


@dataclass(frozen=True)
class Analysis:
    """The analysis of one profile: per-kernel classes and all findings, best opportunity first."""

    gpu: str
    kernels: tuple[KernelAnalysis, ...] = ()
    findings: tuple[PerfFinding, ...] = ()
    total_time_us: float = 0.0
    profile_ok: bool = True
    profile_message: str = ""
    notes: tuple[str, ...] = ()  # caveats: substituted metrics, unknown peaks

    def top(self, n: int = 3) -> tuple[PerfFinding, ...]:
        return self.findings[:n]

    def summary(self, max_findings: int = 6) -> str:
        """Plain text for prompts: one line per kernel, then the ranked findings."""
        if not self.kernels:
            return f"(no kernels analysed: {self.profile_message or 'no profile'})"
        lines = []
        for k in self.kernels:
            dur = f"{fmt_number(k.duration_us)} us" if k.duration_us is not None else "? us"
            lines.append(
                f"- {k.short_name} [{k.launch_id}] {dur}, {k.time_share:.0%} of GPU time: {k.bottleneck} ({k.reason})"
            )
        for i, f in enumerate(self.findings[:max_findings], 1):
            lines.append(f"{i}. [{f.severity}] {f.message}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu,
            "kernels": [k.to_dict() for k in self.kernels],
            "findings": [f.to_dict() for f in self.findings],
            "total_time_us": self.total_time_us,
            "profile_ok": self.profile_ok,
            "profile_message": self.profile_message,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Analysis:
        """The inverse of `to_dict` (a run record or an event's payload back to the typed tree)."""
        return cls(
            gpu=d["gpu"],
            kernels=tuple(KernelAnalysis.from_dict(k) for k in d.get("kernels", ())),
            findings=tuple(PerfFinding.from_dict(f) for f in d.get("findings", ())),
            total_time_us=d.get("total_time_us", 0.0),
            profile_ok=d.get("profile_ok", True),
            profile_message=d.get("profile_message", ""),
            notes=tuple(d.get("notes", ())),
        )


def fmt_number(value: float | None, *, aligned: bool = False) -> str:
    """A number as reports show it: thousands separators, trailing zeros dropped, 3 significant digits when
    small. `aligned` (a table column, the workbench's metrics): fixed decimals per magnitude, so digits line up."""
    if value is None:
        return "n/a"
    if value == 0:
        return "0"
    a = abs(value)
    if a >= 1e6:
        return f"{value:,.0f}" if aligned else f"{value:.3g}"
    if a >= 100:
        return f"{value:,.1f}" if aligned else f"{value:,.0f}"
    if a >= 1:
        return f"{value:.2f}" if aligned else f"{value:.2f}".rstrip("0").rstrip(".")
    if aligned and a >= 1e-3:
        return f"{value:.4f}"
    return f"{value:.3g}"


def _ev(k: KernelProfile, names: tuple[str, ...], **kw: Any) -> Evidence:
    """Evidence from the first available metric of `names` on kernel `k`."""
    used = k.which(*names) or names[0]
    mv = k.metrics.get(used)
    fallback_unit = kw.pop("unit", "")
    unit = mv.unit if mv is not None and mv.unit else fallback_unit
    return Evidence(metric=used, value=mv.value if mv else None, unit=unit, **kw)


def _severity(score: float) -> str:
    return "high" if score >= 0.25 else "medium" if score >= 0.08 else "low"


class _Kernel:
    """Derived quantities of one kernel, computed once."""

    def __init__(self, k: KernelProfile, gpu: GpuSpec, share: float) -> None:
        self.k = k
        self.gpu = gpu
        self.share = share
        self.duration = k.duration_us
        self.dram_pct = k.value(*DRAM_PCT)
        self.l2_pct = k.value(*L2_PCT)
        self.l1_pct = k.value(*L1_PCT)
        self.sm_pct = k.value(*SM_PCT)
        self.fp32_pipe = k.value(*FP32_PIPE)
        self.tensor_pipe = k.value(*TENSOR_PIPE)
        read, write = k.value(*DRAM_READ), k.value(*DRAM_WRITE)
        self.dram_bytes = (read or 0.0) + (write or 0.0) if (read is not None or write is not None) else None
        bw = k.value(*DRAM_BW)
        if bw is None and self.dram_bytes is not None and self.duration:
            bw = self.dram_bytes / (self.duration * 1e-6) / 1e9
        self.dram_gbs = bw
        ffma, fadd, fmul = k.value(*FFMA), k.value(*FADD), k.value(*FMUL)
        if ffma is None and fadd is None and fmul is None:
            self.flops = None
        else:
            self.flops = 2 * (ffma or 0.0) + (fadd or 0.0) + (fmul or 0.0)
        self.tflops = (
            self.flops / (self.duration * 1e-6) / 1e12 if self.flops is not None and self.duration else None
        )
        self.flop_pct = (
            self.tflops / gpu.fp32_tflops * 100 if self.tflops is not None and gpu.fp32_tflops else None
        )
        self.ai = self.flops / self.dram_bytes if self.flops is not None and self.dram_bytes else None
        self.ridge = gpu.ridge_point()
        self.regs = k.value(*REGS)
        self.block_threads = k.value(*BLOCK_SIZE) or (math.prod(k.block) if k.block else None)
        self.grid_blocks = k.value(*GRID_SIZE) or (math.prod(k.grid) if k.grid else None)
        self.warps_per_block = math.ceil(self.block_threads / 32) if self.block_threads else None
        self.limits = {
            label: int(v) for label, metric in OCCUPANCY_LIMITS.items() if (v := k.value(metric)) is not None
        }
        self.blocks_per_sm = min(self.limits.values()) if self.limits else None
        self.theoretical = k.value(*THEORETICAL_OCC)
        if (
            self.theoretical is None
            and self.blocks_per_sm is not None
            and self.warps_per_block
            and gpu.max_warps_per_sm
        ):
            self.theoretical = min(
                100.0, self.blocks_per_sm * self.warps_per_block / gpu.max_warps_per_sm * 100
            )
        self.achieved = k.value(*WARPS_ACTIVE)
        self.waves = k.value(*WAVES)
        if self.waves is None and self.grid_blocks and self.blocks_per_sm and gpu.sm_count:
            self.waves = self.grid_blocks / (self.blocks_per_sm * gpu.sm_count)
        self.smem_block = k.value(*SMEM_PER_BLOCK)
        self.stalls = {
            reason: (metric, v)
            for reason, (metric, _, _) in STALLS.items()
            if (v := k.value(metric)) is not None
        }
        self.compute_util = max(
            (v for v in (self.fp32_pipe, self.tensor_pipe, self.flop_pct) if v is not None), default=None
        )
        self.memory_util = max(
            (v for v in (self.dram_pct, self.l2_pct, self.l1_pct) if v is not None), default=None
        )

    def top_stall(self) -> tuple[str, str, float] | None:
        if not self.stalls:
            return None
        reason, (metric, value) = max(self.stalls.items(), key=lambda item: item[1][1])
        return reason, metric, value

    def binding_limiters(self) -> list[str]:
        """Occupancy limiters that set the resident-block count, the carveout artefact removed.

        The driver sizes the shared-memory carveout to the occupancy other limits allow, so a shared
        memory limit tied with another limiter is not the cause when the full carveout would fit more.
        """
        if not self.limits or self.blocks_per_sm is None:
            return []
        binding = [label for label, v in self.limits.items() if v == self.blocks_per_sm]
        full = self.smem_blocks_at_full_carveout()
        if "shared memory" in binding and len(binding) > 1 and full is not None and full > self.blocks_per_sm:
            binding.remove("shared memory")
        return binding

    def smem_blocks_at_full_carveout(self) -> int | None:
        if not self.smem_block or not self.gpu.shared_mem_per_sm_kb:
            return None
        return int(self.gpu.shared_mem_per_sm_kb * 1024 // self.smem_block)


def classify(kd: _Kernel) -> tuple[str, str]:
    """(class, reason) for one kernel, from speed-of-light utilisation and the roofline."""
    if kd.duration is not None and kd.duration < TINY_KERNEL_US:
        return (
            LAUNCH_BOUND,
            f"{fmt_number(kd.duration)} us < {TINY_KERNEL_US:g} us: launch overhead is comparable to the work",
        )
    cu, mu = kd.compute_util, kd.memory_util
    if cu is None and mu is None and kd.sm_pct is None:
        return UNKNOWN, "no throughput metrics"
    if cu is not None and cu >= HIGH_UTILIZATION_PCT and (mu is None or cu >= mu):
        what = "FP32 pipe" if (kd.fp32_pipe or 0) >= (kd.tensor_pipe or 0) else "tensor pipe"
        flop = (
            f", {fmt_number(kd.tflops)} TFLOPS FP32 = {fmt_number(kd.flop_pct)}% of peak" if kd.tflops is not None else ""
        )
        return COMPUTE_BOUND, f"{what} at {fmt_number(cu)}% of peak >= {HIGH_UTILIZATION_PCT:g}%{flop}"
    if mu is not None and mu >= HIGH_UTILIZATION_PCT:
        parts = []
        if kd.dram_pct is not None:
            parts.append(f"DRAM {fmt_number(kd.dram_pct)}%")
        if kd.l2_pct is not None:
            parts.append(f"L2 {fmt_number(kd.l2_pct)}%")
        if kd.l1_pct is not None:
            parts.append(f"L1 {fmt_number(kd.l1_pct)}%")
        ai = f"; {fmt_number(kd.ai)} FLOP/byte vs ridge {fmt_number(kd.ridge)}" if kd.ai is not None and kd.ridge else ""
        return MEMORY_BOUND, f"memory unit at {fmt_number(mu)}% of peak ({', '.join(parts)}){ai}"
    stall = kd.top_stall()
    if (
        kd.ai is not None
        and kd.ridge
        and kd.ai < kd.ridge
        and (kd.dram_pct or 0) >= MEMORY_LATENCY_DRAM_PCT
        and stall is not None
        and stall[0] == "long_scoreboard"
    ):
        return MEMORY_BOUND, (
            f"{fmt_number(kd.ai)} FLOP/byte below ridge {fmt_number(kd.ridge)}, DRAM {fmt_number(kd.dram_pct)}% and warps "
            f"waiting on memory {fmt_number(stall[2])}% of the time"
        )
    if kd.sm_pct is not None and kd.sm_pct >= ISSUE_BOUND_PCT:
        return COMPUTE_BOUND, f"SM throughput {fmt_number(kd.sm_pct)}% >= {ISSUE_BOUND_PCT:g}% (instruction issue)"
    occ = kd.theoretical
    if occ is not None and occ < LOW_OCCUPANCY_PCT:
        limiters = ", ".join(kd.binding_limiters()) or "launch configuration"
        return LATENCY_BOUND, (
            f"no unit >= {HIGH_UTILIZATION_PCT:g}% busy and theoretical occupancy {fmt_number(occ)}% "
            f"(limited by {limiters}) leaves too few warps to hide latency"
        )
    why = f"top stall {stall[0]} {fmt_number(stall[2])}%" if stall else "no stall data"
    return LATENCY_BOUND, f"no unit >= {HIGH_UTILIZATION_PCT:g}% busy; {why}"


def _finding(
    kd: _Kernel,
    name: str,
    title: str,
    method: str,
    recommendation: str,
    weight: float,
    evidence: list[Evidence],
) -> PerfFinding:
    score = round(kd.share * max(0.0, min(1.0, weight)), 4)
    return PerfFinding(
        name=name,
        kernel=kd.k.short_name,
        launch_id=kd.k.launch_id,
        title=title,
        method=method,
        recommendation=recommendation,
        evidence=tuple(evidence),
        score=score,
        severity=_severity(score),
    )


def _memory_findings(kd: _Kernel, gpu: GpuSpec) -> list[PerfFinding]:
    out = []
    k = kd.k
    peak_bw = gpu.dram_bandwidth_gbs
    bw_ev = (
        _ev(k, DRAM_BW, peak=peak_bw)
        if k.which(*DRAM_BW)
        else Evidence("derived:dram_bandwidth", kd.dram_gbs, "GB/s", peak=peak_bw, note="bytes / duration")
    )
    ev = [
        bw_ev,
        _ev(k, DRAM_PCT, threshold=HIGH_UTILIZATION_PCT, comparison=">="),
        _ev(k, L2_PCT, threshold=HIGH_UTILIZATION_PCT, comparison=">="),
    ]
    if kd.ai is not None:
        ev.append(
            Evidence(
                "derived:fp32_flop_per_dram_byte",
                kd.ai,
                "FLOP/byte",
                threshold=kd.ridge,
                comparison="<",
                note="ridge point",
            )
        )
    stall = kd.top_stall()
    if stall and stall[0] == "long_scoreboard":
        ev.append(_ev(k, (stall[1],), threshold=STALL_PCT, comparison=">="))
    dram = kd.dram_pct or 0.0
    if dram >= SATURATED_DRAM_PCT:
        out.append(
            _finding(
                kd,
                "dram_bandwidth_saturated",
                f"at the DRAM roof: {fmt_number(kd.dram_gbs)} GB/s of {fmt_number(peak_bw)} GB/s ({fmt_number(dram)}%)",
                "move fewer bytes (fusion, narrower types)",
                "Bandwidth is nearly saturated, so only less traffic helps: fuse this kernel with its producer or "
                "consumer so intermediates stay in registers/shared memory, read each input once, and use a "
                "narrower storage type only if the task's tolerance allows it.",
                0.35,
                ev,
            )
        )
    elif dram >= CACHE_BOUND_DRAM_PCT or max(kd.l2_pct or 0, kd.l1_pct or 0) < HIGH_UTILIZATION_PCT:
        out.append(
            _finding(
                kd,
                "dram_bandwidth",
                f"memory-bound at {fmt_number(dram)}% of peak DRAM bandwidth ({fmt_number(kd.dram_gbs)} of {fmt_number(peak_bw)} GB/s)",
                "vectorized, coalesced accesses with more bytes in flight",
                "Use 128-bit accesses (float4/int4 with a scalar tail), process 4-8 elements per thread in a "
                "grid-stride loop sized to a few waves of the SMs, keep consecutive threads on consecutive "
                "addresses, and fuse neighbouring elementwise steps to cut the bytes moved.",
                max(0.15, 1.0 - dram / 90.0),
                ev,
            )
        )
    else:
        out.append(
            _finding(
                kd,
                "cache_throughput",
                f"L2/L1 throughput bound (L2 {fmt_number(kd.l2_pct)}%, L1 {fmt_number(kd.l1_pct)}%) while DRAM is at {fmt_number(dram)}%",
                "fewer, better-coalesced cache accesses",
                "The caches, not DRAM, are the busy unit: coalesce accesses (a warp should read contiguous 128-byte "
                "segments), load reused data once into shared memory or registers instead of re-reading it "
                "through L1/L2, and avoid scattered atomics.",
                max(0.15, 1.0 - (kd.memory_util or 0) / 90.0),
                [
                    _ev(k, L2_PCT, threshold=HIGH_UTILIZATION_PCT, comparison=">="),
                    _ev(k, L1_PCT),
                    _ev(k, DRAM_PCT),
                ],
            )
        )
    l2_hit = k.value(*L2_HIT)
    if l2_hit is not None and l2_hit < L2_HIT_LOW_PCT and kd.dram_bytes:
        out.append(
            _finding(
                kd,
                "l2_hit_rate",
                f"L2 hit rate {fmt_number(l2_hit)}%: most requests go to DRAM",
                "improve data reuse through L2/shared memory",
                "If blocks re-read the same data (stencils, matmul tiles, broadcasts), tile it in shared memory and "
                "order the blocks so neighbours share tiles while they are still in L2; a pure stream reads each "
                "byte once and cannot do better.",
                0.15,
                [_ev(k, L2_HIT, threshold=L2_HIT_LOW_PCT, comparison="<"), _ev(k, L1_HIT), _ev(k, DRAM_READ)],
            )
        )
    return out


def _compute_findings(kd: _Kernel, gpu: GpuSpec) -> list[PerfFinding]:
    out = []
    k = kd.k
    fp32_ev = _ev(k, FP32_PIPE, threshold=HIGH_UTILIZATION_PCT, comparison=">=")
    flop_ev = Evidence("derived:fp32_tflops", kd.tflops, "TFLOPS", peak=gpu.fp32_tflops)
    tensor = kd.tensor_pipe
    fp32_heavy = (kd.fp32_pipe or 0) >= HIGH_UTILIZATION_PCT or (kd.flop_pct or 0) >= HIGH_UTILIZATION_PCT
    if fp32_heavy and (tensor is None or tensor < TENSOR_IDLE_PCT):
        name_hint = bool(re.search(r"gemm|matmul|mma|conv|dot", k.name, re.IGNORECASE))
        tf32 = gpu.tf32_tensor_tflops
        bf16 = gpu.bf16_tensor_tflops or gpu.fp16_tensor_tflops
        peaks = []
        if tf32:
            peaks.append(f"TF32 {fmt_number(tf32)}")
        if bf16:
            peaks.append(f"BF16/FP16 {fmt_number(bf16)}")
        avail = (
            f" ({', '.join(peaks)} TFLOPS dense available vs FP32 {fmt_number(gpu.fp32_tflops)})" if peaks else ""
        )
        out.append(
            _finding(
                kd,
                "tensor_cores_idle",
                f"FP32 FMA-bound on CUDA cores with the tensor pipe idle{' (a matrix product)' if name_hint else ''}{avail}",
                "move the matrix math to tensor cores",
                "Rewrite the inner product with tensor-core MMA (WMMA or mma.sync, cuBLAS/CUTLASS-style tiles staged "
                "in shared memory). The task checks FP32 at tight tolerance, so plain TF32 (10-bit mantissa) will "
                "likely fail correctness: use 3xTF32 split-precision (a = a_hi + a_lo) to keep FP32 accuracy, or "
                "BF16/FP16 inputs with FP32 accumulation only if the tolerance allows.",
                0.8 if name_hint else 0.5,
                [fp32_ev, _ev(k, TENSOR_PIPE, threshold=TENSOR_IDLE_PCT, comparison="<"), flop_ev],
            )
        )
    elif kd.flop_pct is not None and kd.flop_pct < 30 and (kd.fp32_pipe or 0) >= HIGH_UTILIZATION_PCT:
        out.append(
            _finding(
                kd,
                "non_flop_instructions",
                f"FMA pipe {fmt_number(kd.fp32_pipe)}% busy but only {fmt_number(kd.flop_pct)}% of peak FP32 FLOP/s",
                "cut integer/index arithmetic",
                "The fma pipe is busy with non-FLOP work (IMAD index math, conversions): hoist index computations "
                "out of loops, use 32-bit indices, precompute strides, and unroll so addresses become immediates.",
                0.4,
                [fp32_ev, flop_ev],
            )
        )
    else:
        pct = kd.compute_util or 0.0
        out.append(
            _finding(
                kd,
                "compute_roof",
                f"compute-bound at {fmt_number(pct)}% of the busiest math pipe",
                "do less math per output",
                "Remove redundant arithmetic (reuse computed values, strength-reduce divisions and pow/exp, fold "
                "constants), and where the math is a matrix product use tensor cores.",
                max(0.1, 1.0 - pct / 95.0),
                [fp32_ev, _ev(k, TENSOR_PIPE), _ev(k, SM_PCT), flop_ev],
            )
        )
    return out


def _occupancy_finding(kd: _Kernel, gpu: GpuSpec) -> PerfFinding | None:
    occ = kd.theoretical
    if occ is None or occ >= LOW_OCCUPANCY_PCT or kd.blocks_per_sm is None:
        return None
    k = kd.k
    limiters = kd.binding_limiters()
    b = kd.blocks_per_sm
    target = b + 1
    steps = []
    ev = [
        _ev(k, THEORETICAL_OCC, unit="%", threshold=LOW_OCCUPANCY_PCT, comparison="<"),
        _ev(k, WARPS_ACTIVE, unit="%"),
    ]
    if "registers" in limiters and kd.regs and kd.block_threads and gpu.registers_per_sm:
        max_regs = int(gpu.registers_per_sm // (target * kd.block_threads)) // 8 * 8
        threads = int(kd.block_threads)
        steps.append(
            f"cap registers at {max_regs}/thread (now {int(kd.regs)}) with __launch_bounds__({threads}, {target}) "
            "or fewer live values (smaller per-thread arrays, recompute instead of keeping)"
        )
        ev.append(_ev(k, REGS, peak=float(gpu.max_registers_per_thread or 255)))
        ev.append(_ev(k, (OCCUPANCY_LIMITS["registers"],), unit="block"))
    if "shared memory" in limiters and kd.smem_block and gpu.shared_mem_per_sm_kb:
        max_smem = int(gpu.shared_mem_per_sm_kb * 1024 // target) - 1024
        steps.append(
            f"shrink shared memory to <= {max_smem // 1024} KB per block (now {fmt_number(kd.smem_block / 1024)} KB), "
            "e.g. smaller tiles or fewer pipeline stages"
        )
        ev.append(_ev(k, SMEM_PER_BLOCK, peak=gpu.shared_mem_per_sm_kb * 1024))
        ev.append(_ev(k, (OCCUPANCY_LIMITS["shared memory"],), unit="block"))
    if "blocks" in limiters and kd.block_threads:
        steps.append(
            f"use larger blocks (now {int(kd.block_threads)} threads): the per-SM block limit binds first"
        )
        ev.append(_ev(k, (OCCUPANCY_LIMITS["blocks"],), unit="block"))
    if "barriers" in limiters:
        steps.append("use fewer named barriers per block")
    if not steps:
        steps.append("launch more warps per SM (larger blocks or more blocks)")
    full = kd.smem_blocks_at_full_carveout()
    note = ""
    if (
        "shared memory" not in limiters
        and full is not None
        and k.value(OCCUPANCY_LIMITS["shared memory"]) == b
    ):
        note = f" (shared memory would allow {full} blocks at the full {fmt_number(gpu.shared_mem_per_sm_kb)} KB carveout)"
    return _finding(
        kd,
        "occupancy",
        f"theoretical occupancy {fmt_number(occ)}% ({b} block(s)/SM), limited by {', '.join(limiters) or 'the launch'}{note}",
        "raise occupancy",
        "To fit " + str(target) + " blocks per SM: " + "; ".join(steps) + ".",
        0.5 * (1 - occ / 100.0) + 0.1,
        ev,
    )


def _stall_finding(kd: _Kernel) -> PerfFinding | None:
    stall = kd.top_stall()
    if stall is None or stall[2] < STALL_PCT:
        return None
    reason, metric, value = stall
    _, meaning, advice = STALLS[reason]
    return _finding(
        kd,
        f"stall_{reason}",
        f"{meaning} ({fmt_number(value)}% of active warp cycles)",
        f"reduce {reason.replace('_', ' ')} stalls",
        advice[0].upper() + advice[1:] + ".",
        min(0.6, value / 100.0 * 0.6),
        [Evidence(metric, value, "%", threshold=STALL_PCT, comparison=">=")],
    )


def _launch_findings(kd: _Kernel, gpu: GpuSpec) -> list[PerfFinding]:
    out = []
    k = kd.k
    if kd.duration is not None and kd.duration < TINY_KERNEL_US:
        out.append(
            _finding(
                kd,
                "tiny_launch",
                f"tiny kernel: {fmt_number(kd.duration)} us, {fmt_number(kd.grid_blocks)} block(s)",
                "fuse launches",
                "Fuse this kernel with the kernels before/after it (one launch doing several steps), or make "
                "each launch do more work; at this size the launch overhead dominates.",
                0.6,
                [
                    Evidence(
                        k.which(*DURATION) or DURATION[0],
                        kd.duration,
                        "us",
                        threshold=TINY_KERNEL_US,
                        comparison="<",
                    ),
                    _ev(k, GRID_SIZE),
                ],
            )
        )
        return out
    sms = gpu.sm_count
    if kd.grid_blocks is not None and sms and kd.grid_blocks < sms:
        out.append(
            _finding(
                kd,
                "grid_too_small",
                f"grid of {int(kd.grid_blocks)} blocks leaves {sms - int(kd.grid_blocks)} of {sms} SMs idle",
                "launch at least one block per SM",
                "Split the work into more, smaller blocks (e.g. split the reduction/K dimension, or smaller tiles) "
                "so every SM gets at least one block, ideally several.",
                1.0 - kd.grid_blocks / sms,
                [_ev(k, GRID_SIZE, peak=float(sms), note="SM count")],
            )
        )
    elif kd.waves is not None and 1.0 <= kd.waves < 4.0:
        full = math.ceil(kd.waves)
        loss = (full - kd.waves) / full
        if loss >= TAIL_LOSS:
            out.append(
                _finding(
                    kd,
                    "tail_effect",
                    f"{fmt_number(kd.waves)} waves: the last wave leaves SMs idle for ~{loss:.0%} of the run",
                    "balance the grid to whole waves",
                    f"Choose a grid that is a multiple of {sms} SMs x {kd.blocks_per_sm} resident block(s), or use a "
                    "persistent grid-stride kernel with exactly one full wave.",
                    loss * 0.5,
                    [_ev(k, WAVES, threshold=TAIL_LOSS, comparison="tail loss >=")],
                )
            )
    return out


def _divergence_finding(kd: _Kernel) -> PerfFinding | None:
    k = kd.k
    uniform = k.value(*BRANCH_UNIFORM)
    if uniform is None or uniform <= 0 or uniform >= DIVERGENCE_UNIFORM_PCT:
        return None  # 0 means no branches were executed
    branch_stall = kd.stalls.get("branch_resolving", ("", 0.0))[1]
    return _finding(
        kd,
        "branch_divergence",
        f"only {fmt_number(uniform)}% of branch targets are uniform across the warp",
        "make branches warp-uniform",
        "Reorganise the work so all 32 threads of a warp take the same path (sort/partition work by branch, "
        "assign conditions per warp rather than per thread) or compute both sides and select.",
        (1 - uniform / 100.0) * 0.3 + branch_stall / 100.0,
        [
            Evidence(BRANCH_UNIFORM[0], uniform, "%", threshold=DIVERGENCE_UNIFORM_PCT, comparison="<"),
            *([_ev(k, (STALLS["branch_resolving"][0],))] if "branch_resolving" in kd.stalls else []),
        ],
    )


def analyze(profile_result: ProfileResult, gpu_spec: GpuSpec) -> Analysis:
    """Classify each profiled kernel and rank the findings by the share of GPU time at stake."""
    notes = []
    for req, used in profile_result.substitutions.items():
        notes.append(f"{req} measured as {used}")
    if profile_result.absent_metrics:
        notes.append("absent on this GPU: " + ", ".join(profile_result.absent_metrics))
    if gpu_spec.missing_fields:
        notes.append(
            f"GPU spec lacks {', '.join(gpu_spec.missing_fields)}: comparisons with those peaks skipped"
        )
    shares = profile_result.kernel_time_shares()
    kernels: list[KernelAnalysis] = []
    findings: list[PerfFinding] = []
    for k, share in zip(profile_result.kernels, shares, strict=True):
        kd = _Kernel(k, gpu_spec, share)
        bottleneck, reason = classify(kd)
        kf: list[PerfFinding] = []
        if bottleneck == LAUNCH_BOUND:
            kf += _launch_findings(kd, gpu_spec)
        else:
            if bottleneck == MEMORY_BOUND:
                kf += _memory_findings(kd, gpu_spec)
            elif bottleneck == COMPUTE_BOUND:
                kf += _compute_findings(kd, gpu_spec)
            elif bottleneck in (LATENCY_BOUND, UNKNOWN):  # occupancy needs only launch__* metrics
                occ = _occupancy_finding(kd, gpu_spec)
                if occ:
                    kf.append(occ)
            stall = _stall_finding(kd)
            covered = (
                bottleneck == MEMORY_BOUND and stall is not None and stall.name == "stall_long_scoreboard"
            )
            if stall and bottleneck != COMPUTE_BOUND and not covered:
                kf.append(stall)
            div = _divergence_finding(kd)
            if div:
                kf.append(div)
            kf += _launch_findings(kd, gpu_spec)
        kf.sort(key=lambda f: -f.score)
        findings += kf
        kernels.append(
            KernelAnalysis(
                launch_id=k.launch_id,
                name=k.name,
                short_name=k.short_name,
                duration_us=kd.duration,
                time_share=share,
                bottleneck=bottleneck,
                reason=reason,
                dram_gbs=kd.dram_gbs,
                dram_pct_of_peak=(kd.dram_gbs / gpu_spec.dram_bandwidth_gbs * 100)
                if kd.dram_gbs is not None and gpu_spec.dram_bandwidth_gbs
                else kd.dram_pct,
                fp32_tflops=kd.tflops,
                fp32_pct_of_peak=kd.flop_pct,
                arithmetic_intensity=kd.ai,
                ridge_point=kd.ridge,
                theoretical_occupancy_pct=kd.theoretical,
                achieved_occupancy_pct=kd.achieved,
                blocks_per_sm=kd.blocks_per_sm,
                occupancy_limiters=tuple(kd.binding_limiters()),
                waves=kd.waves,
                findings=tuple(kf),
            )
        )
    tiny = [ka for ka in kernels if ka.bottleneck == LAUNCH_BOUND]
    if len(kernels) >= 3 and len(tiny) * 2 >= len(kernels):
        total_tiny = sum(ka.time_share for ka in tiny)
        findings.append(
            PerfFinding(
                name="many_small_launches",
                kernel="(all kernels)",
                launch_id=-1,
                title=f"{len(tiny)} of {len(kernels)} launches are under {TINY_KERNEL_US:g} us",
                method="fuse kernels",
                recommendation="Fuse the chain of small kernels into one (or a few) launches that keep intermediates "
                "in registers or shared memory.",
                evidence=tuple(
                    Evidence(
                        DURATION[0],
                        ka.duration_us,
                        "us",
                        threshold=TINY_KERNEL_US,
                        comparison="<",
                        note=ka.short_name,
                    )
                    for ka in tiny[:4]
                ),
                score=round(0.6 * total_tiny + 0.05, 4),
                severity=_severity(0.6 * total_tiny + 0.05),
            )
        )
    findings.sort(key=lambda f: -f.score)
    return Analysis(
        gpu=gpu_spec.name,
        kernels=tuple(kernels),
        findings=tuple(findings),
        total_time_us=profile_result.total_time_us,
        profile_ok=profile_result.ok,
        profile_message=profile_result.message,
        notes=tuple(notes),
    )
