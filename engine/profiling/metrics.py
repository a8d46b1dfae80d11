"""Metric sets, their per-chip availability, and the substitutes for metrics a chip lacks.

ncu silently drops a metric the chip does not have (verified on an H200 with ncu 2025.3: an
unknown name gives no column and no error). So before profiling we ask `ncu --query-metrics
--chip <chip>` what exists (cached on disk), replace a missing metric by its closest equivalent, and
record what has no equivalent as absent. After the run, anything requested that has no CSV column
is reported absent too. Nothing disappears without a trace.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

# The CudaForge paper's 24-metric key subset (its Table 8), as published.
PAPER_METRICS: tuple[str, ...] = (
    "sm__cycles_active.avg",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_blocks",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__registers_per_thread",
    "sm__inst_executed.sum",
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active",
    "sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes.sum.per_second",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
    "l1tex__t_sector_hit_rate.pct",
    "l1tex__throughput.avg.pct_of_peak_sustained_active",
    "lts__t_sector_hit_rate.pct",
    "lts__throughput.avg.pct_of_peak_sustained_active",
    "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct",
    "smsp__warp_issue_stalled_short_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    "smsp__warp_issue_stalled_barrier_per_warp_active.pct",
    "smsp__warp_issue_stalled_branch_resolving_per_warp_active.pct",
    "smsp__sass_average_branch_targets_threads_uniform.pct",
)
# The paper's set has no kernel duration and no SM throughput; both are needed for shares and SOL.
ADDED_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
)
# FP32 FLOP counters (per-thread FFMA/FADD/FMUL executed) so the analyzer can place a kernel on the
# roofline (achieved FLOP/s and FLOP per DRAM byte). Not in the paper's set; they cost SASS
# instrumentation passes, which is why the "minimal" set leaves them out.
FLOP_METRICS: tuple[str, ...] = (
    "sm__sass_thread_inst_executed_op_ffma_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fadd_pred_on.sum",
    "sm__sass_thread_inst_executed_op_fmul_pred_on.sum",
)
CUDAFORGE_METRICS: tuple[str, ...] = PAPER_METRICS + ADDED_METRICS + FLOP_METRICS
# One cheap pass: duration, the two speed-of-light figures, DRAM traffic and occupancy.
MINIMAL_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__bytes_read.sum",
    "dram__bytes_write.sum",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__registers_per_thread",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_blocks",
)
METRIC_SETS: dict[str, tuple[str, ...]] = {"cudaforge": CUDAFORGE_METRICS, "minimal": MINIMAL_METRICS}

# Closest equivalents, tried in order; the first one the chip has is used.
SUBSTITUTES: dict[str, tuple[str, ...]] = {
    # GH100 has no fp32 pipe counter: FP32 FFMA/FMUL/FADD issue to the fma pipes (fmaheavy +
    # fmalite). The instruction-issue utilisation of the fma pipes is the same kind of measure as
    # the original (warp instructions executed on a pipe, % of peak, active cycles). It also counts
    # IMAD, so integer-heavy address code inflates it; the cycle-based pipe figure is next best.
    "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active": (
        "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active",
        "sm__pipe_fp32_cycles_active.avg.pct_of_peak_sustained_active",
    ),
    # Pre-Volta "memory dependency" ("a memory operation cannot be performed because the required
    # resources are not available or fully utilized, or too many requests of a given type are
    # outstanding") was split on Volta+ into long_scoreboard (waiting for an L1TEX result) and
    # lg_throttle (the local/global LSU queue is full). long_scoreboard is already in the set, so
    # substituting it would measure the same thing twice; lg_throttle is the half whose description
    # matches and keeps the information the paper wanted. GH100 has both (query-metrics, 2025.3).
    "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct": (
        "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
        "smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct",
    ),
}

# Names that `--query-metrics` does not list but the raw page always reports: launch attributes,
# device attributes and a few derived occupancy figures (seen in the H200 raw CSV fixtures).
ALWAYS_REPORTED_PREFIXES: tuple[str, ...] = ("launch__", "device__", "profiler__", "derived__")
ALWAYS_REPORTED: frozenset[str] = frozenset(
    {
        "sm__maximum_warps_per_active_cycle_pct",
        "sm__maximum_warps_avg_per_active_cycle",
        "smsp__maximum_warps_avg_per_active_cycle",
    }
)

_QUERY_TYPES = {"Counter", "Ratio", "Throughput", "Metric", "Raw", "Derived"}


def base_name(metric: str) -> str:
    """The base metric a full name is built from: `dram__bytes.sum.per_second` -> `dram__bytes`."""
    return metric.split(".", 1)[0]


def parse_query_metrics(text: str) -> frozenset[str]:
    """Base metric names from `ncu --query-metrics [--chip X]` output (a fixed-width table whose
    descriptions wrap onto indented lines). Group-qualified names (`TPC.TriageCompute.sm__x`) are
    kept whole and also recorded by their last component."""
    names: set[str] = set()
    for line in text.splitlines():
        if not line or line[0].isspace() or line.startswith(("==", "-")):
            continue
        parts = line.split()
        if len(parts) < 2 or "__" not in parts[0]:
            continue
        if parts[1] not in _QUERY_TYPES and not re.match(r"^[A-Z][a-z]+$", parts[1]):
            continue
        names.add(parts[0])
        if "." in parts[0]:
            names.add(parts[0].rsplit(".", 1)[1])
    return frozenset(names)


def is_available(metric: str, available: frozenset[str] | None) -> bool | None:
    """True/False from the chip's list; None when no list is known (decided after the run)."""
    if metric.startswith(ALWAYS_REPORTED_PREFIXES) or metric in ALWAYS_REPORTED:
        return True
    if available is None:
        return None
    return base_name(metric) in available


@dataclass(frozen=True)
class MetricPlan:
    """What to pass to `--metrics`, and how it relates to what was asked for."""

    requested: tuple[str, ...]
    collect: tuple[str, ...]
    substitutions: dict[str, str] = field(default_factory=dict)  # requested -> substitute
    absent: tuple[str, ...] = ()
    absent_reasons: dict[str, str] = field(default_factory=dict)
    checked: bool = False  # True when a query-metrics list was available


def plan_metrics(requested: Sequence[str], available: frozenset[str] | None) -> MetricPlan:
    """Resolve the requested names against what the chip offers.

    Without a list (`available is None`) every name and every substitute is collected, and the
    choice is made after the run from the CSV columns (`finalize_plan`).
    """
    collect: list[str] = []
    subs: dict[str, str] = {}
    absent: list[str] = []
    reasons: dict[str, str] = {}
    req = list(dict.fromkeys(requested))

    def add(name: str) -> None:
        if name not in collect:
            collect.append(name)

    for name in req:
        ok = is_available(name, available)
        if ok is None:
            add(name)
            for alt in SUBSTITUTES.get(name, ()):
                if alt not in req:
                    add(alt)
            continue
        if ok:
            add(name)
            continue
        chosen = None
        for alt in SUBSTITUTES.get(name, ()):
            if alt in req and alt != name:
                continue  # already measured under its own name: would be a duplicate
            if is_available(alt, available):
                chosen = alt
                break
        if chosen is not None:
            subs[name] = chosen
            add(chosen)
        else:
            absent.append(name)
            reasons[name] = "not offered on this chip (ncu --query-metrics) and no equivalent"
    return MetricPlan(
        requested=tuple(req),
        collect=tuple(collect),
        substitutions=subs,
        absent=tuple(absent),
        absent_reasons=reasons,
        checked=available is not None,
    )


def finalize_plan(plan: MetricPlan, columns: Iterable[str]) -> MetricPlan:
    """After the run: pick substitutes by what ncu actually reported and name every requested
    metric that has no column (ncu drops unknown names without a word)."""
    cols = set(columns)
    subs = dict(plan.substitutions)
    absent = list(plan.absent)
    reasons = dict(plan.absent_reasons)
    for name in plan.requested:
        if name in absent:
            continue
        if name in subs:
            if subs[name] not in cols:
                del subs[name]
                absent.append(name)
                reasons[name] = f"substitute {plan.substitutions[name]} was not reported by ncu"
            continue
        if name in cols:
            continue
        alt = next(
            (a for a in SUBSTITUTES.get(name, ()) if a in cols and a not in plan.requested),
            None,
        )
        if alt is not None:
            subs[name] = alt
        else:
            absent.append(name)
            reasons[name] = "not reported by ncu (the chip or this ncu version lacks it)"
    return MetricPlan(
        requested=plan.requested,
        collect=plan.collect,
        substitutions=subs,
        absent=tuple(absent),
        absent_reasons=reasons,
        checked=plan.checked,
    )


def query_cache_path(cache_dir: Path, ncu_path: str, chip: str) -> Path:
    """Cache file for one (ncu binary, chip): keyed by the binary's path, size and mtime so an
    upgraded ncu is queried afresh without running `ncu --version` every time."""
    try:
        st = os.stat(ncu_path)
        ident = f"{os.path.realpath(ncu_path)}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        ident = ncu_path
    digest = hashlib.sha256(ident.encode()).hexdigest()[:12]
    safe_chip = re.sub(r"[^A-Za-z0-9_.-]", "_", chip or "device")
    return cache_dir / f"query_metrics_{safe_chip}_{digest}.txt"


def read_cached_query(path: Path) -> frozenset[str] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    names = parse_query_metrics(text)
    return names or None


def write_cached_query(path: Path, text: str) -> None:
    """Atomic write (temp file + rename) so two sessions never read half a cache file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name, dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def default_cache_dir() -> Path:
    """~/.cache/cudaforge/ncu (XDG_CACHE_HOME respected)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "cudaforge" / "ncu"
