"""Metric deltas between rounds: per kernel where names match, else per round totals (DESIGN)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.profiling import (
    NcuSettings,
    ProfileResult,
    interpret_output,
    metric_deltas,
    parse_query_metrics,
    plan_metrics,
)
from cudaforge.engine.profiling.history import ROUND_TOTAL
from cudaforge.engine.profiling.result import MetricValue

FIX = Path(__file__).parent / "fixtures" / "ncu"
DUR = "gpu__time_duration.sum"
DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"


def load(name: str, metrics: tuple[str, ...] | None = None) -> ProfileResult:
    avail = parse_query_metrics((FIX / "query_metrics_gh100.txt").read_text(encoding="utf-8"))
    plan = plan_metrics(metrics or NcuSettings().metrics(), avail)
    text = (FIX / name).read_text(encoding="utf-8")
    return interpret_output(text, "", returncode=0, timed_out=False, plan=plan)


@pytest.fixture(scope="module")
def three() -> ProfileResult:
    return load("ncu_raw_three_kernels.csv")


def _scaled(result: ProfileResult, kernel: str, metric: str, factor: float) -> ProfileResult:
    """A copy of `result` where one kernel's metric is multiplied (a fake 'next round')."""
    kernels = []
    for k in result.kernels:
        if k.name == kernel:
            mv = k.metrics[metric]
            metrics = dict(k.metrics)
            metrics[metric] = MetricValue(mv.value * factor, mv.unit, mv.raw, mv.raw_unit)  # type: ignore[operator]
            k = replace(k, metrics=metrics)
        kernels.append(k)
    return replace(result, kernels=tuple(kernels))


def test_first_round_has_no_comparison(three: ProfileResult) -> None:
    d = metric_deltas(three, None, None)
    assert d.mode == "per_round"
    total = d.round_total()
    assert total is not None and total.kernel == ROUND_TOTAL and total.launches == 3
    dur = next(x for x in total.deltas if x.metric == DUR)
    assert dur.current == pytest.approx(49.792 + 2204.896 + 342.656)
    assert dur.previous is None and dur.vs_previous is None


def test_per_kernel_when_names_match(three: ProfileResult) -> None:
    faster = _scaled(three, "cf_heavy", DUR, 0.5)
    d = metric_deltas(faster, three, three)
    assert d.mode == "per_kernel"
    assert [k.kernel for k in d.kernels][:3] == [k.name for k in three.kernels]
    heavy = next(k for k in d.kernels if k.kernel == "cf_heavy")
    dur = next(x for x in heavy.deltas if x.metric == DUR)
    assert dur.vs_previous == pytest.approx(-2204.896 / 2)
    assert dur.pct_vs_previous == pytest.approx(-50.0)
    assert dur.pct_vs_best == pytest.approx(-50.0)
    scale = next(k for k in d.kernels if k.kernel == "cf_scale")
    assert all(x.vs_previous == pytest.approx(0.0) for x in scale.deltas if x.previous is not None)
    # Requested (paper) names are reported, looked up through the substitutions.
    names = {x.metric for x in heavy.deltas}
    assert "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active" in names
    assert d.kernels[-1].kernel == ROUND_TOTAL


def test_round_totals_when_no_kernel_name_matches(three: ProfileResult) -> None:
    other = load("ncu_raw_failed_target.csv")  # only a FillFunctor kernel
    d = metric_deltas(three, other, None)
    assert d.mode == "per_round" and len(d.kernels) == 1
    dur = next(x for x in d.kernels[0].deltas if x.metric == DUR)
    assert dur.previous == pytest.approx(1.728)


def test_intensive_metrics_are_duration_weighted(three: ProfileResult) -> None:
    total = metric_deltas(three, None, None).round_total()
    assert total is not None
    got = next(x for x in total.deltas if x.metric == DRAM_PCT).current
    ks = three.kernels
    expected = sum(k.value(DRAM_PCT) * k.duration_us for k in ks) / sum(k.duration_us for k in ks)  # type: ignore[operator]
    assert got == pytest.approx(expected)


def test_repeated_launches_of_one_kernel_are_aggregated() -> None:
    bad = load("ncu_raw_bad_metric.csv", ("gpu__time_duration.sum",))  # three launches of one RNG kernel
    d = metric_deltas(bad, bad, None)
    rng = next(k for k in d.kernels if "distribution_elementwise" in k.kernel)
    assert rng.launches == 3
    dur = next(x for x in rng.deltas if x.metric == DUR)
    assert dur.current == pytest.approx(41.984 + 13.376 + 13.472)


def test_empty_and_serialisable(three: ProfileResult) -> None:
    empty = ProfileResult(ok=False, error_kind="no_kernels")
    assert metric_deltas(empty, three, three).mode == "none"
    json.dumps(metric_deltas(three, three, three).to_dict())
