"""Metric changes between rounds: what the last edit did to the counters, and how far from the best.

DESIGN decision: deltas are per kernel where kernel names match (same launch name in both rounds),
else per round totals. A round total adds up extensive quantities (time, bytes, instructions,
cycles) and averages intensive ones (%, rates, per-thread figures) weighted by kernel duration, so
a rewrite that fuses three kernels into one is still compared fairly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from cudaforge.engine.profiling.metrics import CUDAFORGE_METRICS
from cudaforge.engine.profiling.result import KernelProfile, ProfileResult

ROUND_TOTAL = "(round total)"
_EXTENSIVE_UNITS = {"us", "byte", "inst", "cycle"}


@dataclass(frozen=True)
class MetricDelta:
    """One metric now, in the previous round and in the best round so far."""

    metric: str  # the requested (paper) name
    unit: str
    current: float | None
    previous: float | None = None
    best: float | None = None

    @property
    def vs_previous(self) -> float | None:
        return _diff(self.current, self.previous)

    @property
    def vs_best(self) -> float | None:
        return _diff(self.current, self.best)

    @property
    def pct_vs_previous(self) -> float | None:
        return _pct(self.current, self.previous)

    @property
    def pct_vs_best(self) -> float | None:
        return _pct(self.current, self.best)

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "unit": self.unit,
            "current": self.current,
            "previous": self.previous,
            "best": self.best,
            "vs_previous": self.vs_previous,
            "vs_best": self.vs_best,
        }


@dataclass(frozen=True)
class KernelDeltas:
    """Deltas for one kernel name (or for the whole round, `kernel == ROUND_TOTAL`)."""

    kernel: str
    matched_previous: bool
    matched_best: bool
    launches: int
    deltas: tuple[MetricDelta, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "matched_previous": self.matched_previous,
            "matched_best": self.matched_best,
            "launches": self.launches,
            "deltas": [d.to_dict() for d in self.deltas],
        }


@dataclass(frozen=True)
class MetricDeltas:
    """All deltas of a round. `mode` says which comparison the DESIGN rule picked."""

    mode: Literal["per_kernel", "per_round", "none"]
    kernels: tuple[KernelDeltas, ...]  # matched kernels first, the round total last

    def round_total(self) -> KernelDeltas | None:
        return next((k for k in self.kernels if k.kernel == ROUND_TOTAL), None)

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "kernels": [k.to_dict() for k in self.kernels]}


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def _pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or b == 0:
        return None
    return (a - b) / abs(b) * 100.0


def _is_extensive(name: str, unit: str) -> bool:
    return unit in _EXTENSIVE_UNITS and "pct" not in name and "per_second" not in name


def _aggregate(kernels: Sequence[KernelProfile], metric: str, used: str) -> tuple[float | None, str]:
    """Sum extensive metrics, duration-weighted mean of intensive ones, over `kernels`."""
    values: list[tuple[float, float]] = []
    unit = ""
    for k in kernels:
        mv = k.metrics.get(used)
        if mv is None or mv.value is None:
            continue
        unit = mv.unit
        values.append((mv.value, k.duration_us or 0.0))
    if not values:
        return None, unit
    if _is_extensive(used, unit):
        return sum(v for v, _ in values), unit
    total_w = sum(w for _, w in values)
    if total_w <= 0:
        return sum(v for v, _ in values) / len(values), unit
    return sum(v * w for v, w in values) / total_w, unit


def _metric_list(current: ProfileResult, metrics: Sequence[str] | None) -> list[str]:
    if metrics is not None:
        names = list(metrics)
    elif current.requested_metrics:
        names = list(current.requested_metrics)
    else:
        present = {m for k in current.kernels for m in k.metrics}
        names = [m for m in CUDAFORGE_METRICS if m in present]
    if "gpu__time_duration.sum" not in names:
        names.insert(0, "gpu__time_duration.sum")
    return [n for n in names if n not in current.absent_metrics]


def _group(result: ProfileResult | None) -> dict[str, list[KernelProfile]]:
    groups: dict[str, list[KernelProfile]] = {}
    if result is None:
        return groups
    for k in result.kernels:
        groups.setdefault(k.name, []).append(k)
    return groups


def metric_deltas(
    current: ProfileResult,
    previous: ProfileResult | None,
    best: ProfileResult | None,
    *,
    metrics: Sequence[str] | None = None,
) -> MetricDeltas:
    """Each metric's change against the previous and the best round: per kernel for kernel names
    present in both rounds, plus the round totals (always, last). Metrics default to the ones the
    current round requested (absent ones skipped), looked up through each round's substitutions."""
    if not current.kernels:
        return MetricDeltas(mode="none", kernels=())
    names = _metric_list(current, metrics)
    cur_groups, prev_groups, best_groups = _group(current), _group(previous), _group(best)

    def deltas_for(
        cur: Sequence[KernelProfile],
        prev: Sequence[KernelProfile] | None,
        bst: Sequence[KernelProfile] | None,
    ) -> tuple[MetricDelta, ...]:
        out = []
        for name in names:
            value, unit = _aggregate(cur, name, current.used_name(name))
            p = b = None
            if prev and previous is not None:
                p, _ = _aggregate(prev, name, previous.used_name(name))
            if bst and best is not None:
                b, _ = _aggregate(bst, name, best.used_name(name))
            if value is None and p is None and b is None:
                continue
            out.append(MetricDelta(metric=name, unit=unit, current=value, previous=p, best=b))
        return tuple(out)

    entries: list[KernelDeltas] = []
    for kname, group in cur_groups.items():
        prev = prev_groups.get(kname)
        bst = best_groups.get(kname)
        if prev is None and bst is None:
            continue
        entries.append(
            KernelDeltas(
                kernel=kname,
                matched_previous=prev is not None,
                matched_best=bst is not None,
                launches=len(group),
                deltas=deltas_for(group, prev, bst),
            )
        )
    mode: Literal["per_kernel", "per_round", "none"] = "per_kernel" if entries else "per_round"
    entries.append(
        KernelDeltas(
            kernel=ROUND_TOTAL,
            matched_previous=previous is not None and bool(previous.kernels),
            matched_best=best is not None and bool(best.kernels),
            launches=len(current.kernels),
            deltas=deltas_for(
                current.kernels,
                previous.kernels if previous is not None else None,
                best.kernels if best is not None else None,
            ),
        )
    )
    return MetricDeltas(mode=mode, kernels=tuple(entries))
