"""Nsight Compute profiling: the ncu runner, its raw-CSV parser, metric sets and substitutions.

Public API: `run_profile` (or `prepare_profile` + your own runner + `interpret_output`),
`ProfileResult`/`KernelProfile`/`MetricValue`, `NcuSettings`, `metric_deltas`.
"""

from cudaforge.engine.profiling.history import KernelDeltas, MetricDelta, MetricDeltas, metric_deltas
from cudaforge.engine.profiling.metrics import (
    CUDAFORGE_METRICS,
    METRIC_SETS,
    MINIMAL_METRICS,
    PAPER_METRICS,
    SUBSTITUTES,
    MetricPlan,
    parse_query_metrics,
    plan_metrics,
)
from cudaforge.engine.profiling.parser import CsvParseError, ParsedOutput, parse_raw_csv
from cudaforge.engine.profiling.result import (
    ERROR_KINDS,
    ErrorKind,
    KernelProfile,
    MetricValue,
    ProfileResult,
)
from cudaforge.engine.profiling.runner import (
    PreparedProfile,
    build_ncu_command,
    interpret_output,
    prepare_profile,
    query_available_metrics,
    run_process,
    run_profile,
)
from cudaforge.engine.profiling.settings import NcuSettings

__all__ = [
    "CUDAFORGE_METRICS",
    "ERROR_KINDS",
    "METRIC_SETS",
    "MINIMAL_METRICS",
    "PAPER_METRICS",
    "SUBSTITUTES",
    "CsvParseError",
    "ErrorKind",
    "KernelDeltas",
    "KernelProfile",
    "MetricDelta",
    "MetricDeltas",
    "MetricPlan",
    "MetricValue",
    "NcuSettings",
    "ParsedOutput",
    "PreparedProfile",
    "ProfileResult",
    "build_ncu_command",
    "interpret_output",
    "metric_deltas",
    "parse_query_metrics",
    "parse_raw_csv",
    "plan_metrics",
    "prepare_profile",
    "query_available_metrics",
    "run_process",
    "run_profile",
]
