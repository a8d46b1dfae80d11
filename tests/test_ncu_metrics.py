"""Metric sets and substitutions, checked against the real `ncu --query-metrics --chip gh100` list."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from cudaforge.engine.profiling import (
    CUDAFORGE_METRICS,
    MINIMAL_METRICS,
    PAPER_METRICS,
    parse_query_metrics,
    parse_raw_csv,
    plan_metrics,
    query_available_metrics,
)
from cudaforge.engine.profiling.metrics import base_name, finalize_plan, is_available

FIX = Path(__file__).parent / "fixtures" / "ncu"
FP32 = "sm__inst_executed_pipe_fp32.avg.pct_of_peak_sustained_active"
MEMDEP = "smsp__warp_issue_stalled_memory_dependency_per_warp_active.pct"


@pytest.fixture(scope="module")
def gh100() -> frozenset[str]:
    return parse_query_metrics((FIX / "query_metrics_gh100.txt").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def h200_columns() -> tuple[str, ...]:
    return parse_raw_csv((FIX / "ncu_raw_three_kernels.csv").read_text(encoding="utf-8")).columns


def test_query_list_parsed(gh100: frozenset[str]) -> None:
    assert len(gh100) > 3000
    for name in (
        "dram__bytes",
        "sm__inst_executed_pipe_fma",
        "sm__pipe_fma_cycles_active",
        "smsp__warp_issue_stalled_lg_throttle_per_warp_active",
        "gpu__time_duration",
        "l1tex__t_sector_hit_rate",
        "sm__throughput",
    ):
        assert name in gh100, name
    # The two paper metrics DESIGN.md says are missing on H200 really are missing.
    assert "sm__inst_executed_pipe_fp32" not in gh100
    assert "smsp__warp_issue_stalled_memory_dependency_per_warp_active" not in gh100
    # Wrapped description lines and table furniture are not metric names.
    assert not any(n.startswith(("-", "Metric", "activity")) for n in gh100)
    assert "sm__cycles_active" in gh100 and "TPC.TriageCompute.sm__cycles_active" in gh100


def test_set_composition() -> None:
    assert len(PAPER_METRICS) == 24
    assert CUDAFORGE_METRICS[:24] == PAPER_METRICS
    assert "gpu__time_duration.sum" in CUDAFORGE_METRICS
    assert "sm__throughput.avg.pct_of_peak_sustained_elapsed" in CUDAFORGE_METRICS
    assert len(set(CUDAFORGE_METRICS)) == len(CUDAFORGE_METRICS)


def test_substitutions_on_h200(gh100: frozenset[str]) -> None:
    plan = plan_metrics(CUDAFORGE_METRICS, gh100)
    assert plan.checked
    assert plan.substitutions == {
        FP32: "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active",
        MEMDEP: "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct",
    }
    assert plan.absent == ()
    assert FP32 not in plan.collect and MEMDEP not in plan.collect
    # Every requested metric is either collected under its name or substituted: nothing dropped.
    for name in CUDAFORGE_METRICS:
        assert name in plan.collect or name in plan.substitutions
    assert len(plan.collect) == len(CUDAFORGE_METRICS)


def test_every_collected_metric_is_a_column_of_the_real_h200_run(
    gh100: frozenset[str], h200_columns: tuple[str, ...]
) -> None:
    for metric_set in (CUDAFORGE_METRICS, MINIMAL_METRICS):
        plan = plan_metrics(metric_set, gh100)
        missing = [m for m in plan.collect if m not in h200_columns]
        assert missing == [], missing
        final = finalize_plan(plan, h200_columns)
        assert final.absent == () and final.substitutions == plan.substitutions


def test_launch_metrics_are_always_available(gh100: frozenset[str]) -> None:
    # launch__* are not in --query-metrics but the raw page always reports them.
    assert "launch__registers_per_thread" not in gh100
    assert is_available("launch__occupancy_limit_registers", gh100) is True
    assert is_available("sm__maximum_warps_per_active_cycle_pct", gh100) is True
    assert is_available("not__a_metric.sum", gh100) is False
    assert is_available("not__a_metric.sum", None) is None
    assert base_name("dram__bytes.sum.per_second") == "dram__bytes"


def test_chip_without_any_equivalent_reports_absent(gh100: frozenset[str]) -> None:
    poorer = gh100 - {"smsp__warp_issue_stalled_lg_throttle_per_warp_active"}
    plan = plan_metrics(CUDAFORGE_METRICS, poorer)
    # long_scoreboard is the other candidate but it is already in the set: not used twice.
    assert MEMDEP in plan.absent and MEMDEP not in plan.substitutions
    assert "no equivalent" in plan.absent_reasons[MEMDEP]


def test_fp32_falls_back_to_the_cycle_based_pipe_metric(gh100: frozenset[str]) -> None:
    plan = plan_metrics(CUDAFORGE_METRICS, gh100 - {"sm__inst_executed_pipe_fma"})
    assert plan.substitutions[FP32] == "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active"


def test_without_a_query_list_substitutes_are_chosen_from_the_csv(h200_columns: tuple[str, ...]) -> None:
    plan = plan_metrics(CUDAFORGE_METRICS, None)
    assert not plan.checked
    assert (
        FP32 in plan.collect and "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active" in plan.collect
    )
    final = finalize_plan(plan, h200_columns)
    assert final.substitutions[FP32] == "sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"
    assert final.substitutions[MEMDEP] == "smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct"
    assert final.absent == ()


def test_user_extra_metric_missing_on_chip(gh100: frozenset[str]) -> None:
    plan = plan_metrics(
        (*CUDAFORGE_METRICS, "sm__pipe_fp32_cycles_active.avg.pct_of_peak_sustained_active"), gh100
    )
    assert "sm__pipe_fp32_cycles_active.avg.pct_of_peak_sustained_active" in plan.absent


class FakeRun:
    """A process runner that writes canned output to the files it is given."""

    def __init__(self, stdout: str = "", returncode: int = 0, raises: Exception | None = None) -> None:
        self.stdout, self.returncode, self.raises = stdout, returncode, raises
        self.calls: list[list[str]] = []

    def __call__(self, argv, *, cwd, env, timeout_s, stdout_path, stderr_path):  # noqa: ANN001, ANN204
        self.calls.append(list(argv))
        if self.raises:
            raise self.raises
        Path(stdout_path).write_text(self.stdout, encoding="utf-8")
        Path(stderr_path).write_text("", encoding="utf-8")
        return SimpleNamespace(returncode=self.returncode, timed_out=False)


def test_query_is_cached_on_disk(tmp_path: Path) -> None:
    fake_ncu = tmp_path / "ncu"
    fake_ncu.write_text("#!/bin/sh\n")
    run = FakeRun((FIX / "query_metrics_gh100.txt").read_text(encoding="utf-8"))
    first = query_available_metrics(str(fake_ncu), "gh100", cache_dir=tmp_path / "cache", run=run)
    assert first and "dram__bytes" in first
    assert run.calls == [[str(fake_ncu), "--query-metrics", "--chip", "gh100"]]
    second = query_available_metrics(str(fake_ncu), "gh100", cache_dir=tmp_path / "cache", run=run)
    assert second == first and len(run.calls) == 1
    assert len(list((tmp_path / "cache").glob("query_metrics_gh100_*.txt"))) == 1
    # Another chip is another cache entry.
    query_available_metrics(str(fake_ncu), "ga100", cache_dir=tmp_path / "cache", run=run)
    assert len(run.calls) == 2


def test_failed_query_returns_none_and_caches_nothing(tmp_path: Path) -> None:
    assert query_available_metrics("ncu", "gh100", cache_dir=tmp_path, run=FakeRun("", returncode=1)) is None
    assert (
        query_available_metrics("ncu", "", cache_dir=tmp_path, run=FakeRun(raises=FileNotFoundError()))
        is None
    )
    assert list(tmp_path.iterdir()) == []
