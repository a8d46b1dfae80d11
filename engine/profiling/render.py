"""The plain-text report of an ncu profile and its analysis, for `cudaforge profile`.

Rendering only: the numbers come from engine/profiling/result.py, the classes and findings from
engine/profiling/analysis.py.
"""

from __future__ import annotations

from cudaforge.engine.profiling.analysis import DURATION, Analysis, fmt_number
from cudaforge.engine.profiling.metrics import CUDAFORGE_METRICS
from cudaforge.engine.profiling.result import ProfileResult

_TABLE_EXTRA = (
    "launch__grid_size",
    "launch__block_size",
    "launch__waves_per_multiprocessor",
    "sm__maximum_warps_per_active_cycle_pct",
    "launch__occupancy_limit_warps",
    "launch__shared_mem_per_block",
)


def _table_metrics(result: ProfileResult) -> list[str]:
    requested = list(result.requested_metrics) or list(CUDAFORGE_METRICS)
    names = [result.used_name(m) for m in requested if m not in result.absent_metrics]
    if DURATION[0] in names:
        names.remove(DURATION[0])
    return list(dict.fromkeys([DURATION[0], *names, *_TABLE_EXTRA]))


def format_profile(profile_result: ProfileResult, analysis: Analysis | None = None) -> str:
    """Plain-text report: per kernel its metric table (metric, value, unit) and time share, then the
    ranked findings with evidence and recommendation. For `cudaforge profile`."""
    r = profile_result
    out: list[str] = []
    head = f"Nsight Compute: {len(r.kernels)} kernel launch(es), {fmt_number(r.total_time_us)} us GPU time"
    if r.chip:
        head += f", chip {r.chip}"
    if r.wall_s:
        head += f", ncu ran {r.wall_s:.1f} s"
    out.append(head)
    if not r.ok:
        out.append(f"PROFILE FAILED [{r.error_kind}]: {r.message}")
    elif r.message:
        out.append(r.message)
    for req, used in r.substitutions.items():
        out.append(f"substituted: {req} -> {used}")
    for name in r.absent_metrics:
        reason = r.absent_reasons.get(name, "")
        out.append(f"absent: {name}{' (' + reason + ')' if reason else ''}")
    by_id = {ka.launch_id: ka for ka in analysis.kernels} if analysis else {}
    names = _table_metrics(r)
    width = max([len(n) for n in names] + [20])
    for k, share in zip(r.kernels, r.kernel_time_shares(), strict=True):
        out.append("")
        grid = f"grid {k.grid}" if k.grid else ""
        block = f"block {k.block}" if k.block else ""
        dur = f"{fmt_number(k.duration_us)} us" if k.duration_us is not None else "? us"
        line = f"[{k.launch_id}] {k.short_name}  {grid} {block}  {dur} ({share:.1%} of GPU time)"
        ka = by_id.get(k.launch_id)
        if ka:
            line += f"  -> {ka.bottleneck}"
        out.append(line)
        if ka:
            out.append(f"    {ka.reason}")
        out.append(f"    {'metric':<{width}}  {'value':>16}  unit")
        for name in names:
            mv = k.metrics.get(name)
            if mv is None:
                continue
            shown = fmt_number(mv.value) if mv.value is not None else (mv.raw or "n/a")
            out.append(f"    {name:<{width}}  {shown:>16}  {mv.unit}")
    if analysis is not None:
        out.append("")
        if analysis.findings:
            out.append("Findings (most time at stake first):")
            for i, f in enumerate(analysis.findings, 1):
                out.append(f"{i:>2}. [{f.severity}] {f.kernel}: {f.title}")
                for e in f.evidence:
                    out.append(f"      evidence: {e.describe()}")
                out.append(f"      recommendation: {f.recommendation}")
        else:
            out.append("Findings: none")
        for note in analysis.notes:
            out.append(f"note: {note}")
    return "\n".join(out)
