"""The raw-CSV parser and the classification of ncu runs, on real H200 output (tests/fixtures/ncu)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cudaforge.engine.profiling import (
    NcuSettings,
    ProfileResult,
    interpret_output,
    parse_query_metrics,
    parse_raw_csv,
    plan_metrics,
)
from cudaforge.engine.profiling.metrics import MetricPlan
from cudaforge.engine.profiling.parser import CsvParseError
from cudaforge.engine.profiling.result import short_kernel_name
from cudaforge.engine.profiling.units import normalize, parse_number

FIX = Path(__file__).parent / "fixtures" / "ncu"
SGEMM = "void cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>(T1::Params)"


def read(name: str) -> str:
    return (FIX / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def h200_plan() -> MetricPlan:
    return plan_metrics(NcuSettings().metrics(), parse_query_metrics(read("query_metrics_gh100.txt")))


def interpret(text: str, plan: MetricPlan, **kw: object) -> ProfileResult:
    args: dict[str, object] = {"returncode": 0, "timed_out": False, "plan": plan}
    args.update(kw)
    return interpret_output(text, "", **args)  # type: ignore[arg-type]


def test_three_kernels_rows_identity_and_units() -> None:
    parsed = parse_raw_csv(read("ncu_raw_three_kernels.csv"))
    assert parsed.found_header
    assert [k.name for k in parsed.kernels] == ["cf_scale", "cf_heavy", SGEMM]
    assert [k.launch_id for k in parsed.kernels] == [0, 1, 2]
    scale, heavy, gemm = parsed.kernels
    assert scale.grid == (65536, 1, 1) and scale.block == (256, 1, 1) and gemm.grid == (128, 1, 1)
    assert scale.cc == "9.0" and scale.stream == "7"
    assert "candidate" in scale.nvtx  # the NVTX state column is kept, not mistaken for a metric
    # Canonical units; the printed cell stays available.
    dur = scale.metrics["gpu__time_duration.sum"]
    assert (dur.value, dur.unit, dur.raw, dur.raw_unit) == (pytest.approx(49.792), "us", "49,792", "ns")
    bw = scale.metrics["dram__bytes.sum.per_second"]
    assert bw.unit == "GB/s" and bw.value == pytest.approx(2306.38046272494)
    assert (
        scale.metrics["dram__bytes_read.sum"].value == 67_113_984
        and scale.metrics["dram__bytes_read.sum"].unit == "byte"
    )
    assert heavy.metrics["launch__registers_per_thread"].value == 79
    assert heavy.metrics["launch__shared_mem_per_block"].unit == "byte/block"
    assert gemm.metrics["sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active"].value == pytest.approx(
        79.07
    )
    # Non-numeric cells keep their text.
    policy = scale.metrics["launch__cluster_scheduling_policy"]
    assert policy.value is None and policy.raw == "PolicySpread"
    # Device attributes are kept once, not per kernel.
    assert parsed.device["device__attribute_display_name"] == "NVIDIA H200"
    assert not any(m.startswith("device__attribute_") for m in scale.metrics)
    assert parsed.tool_lines[1].startswith("==PROF== Connected")


def test_three_kernels_interpreted_ok(h200_plan: MetricPlan) -> None:
    r = interpret(read("ncu_raw_three_kernels.csv"), h200_plan, chip="gh100", wall_s=7.5)
    assert r.ok and r.error_kind == "none"
    assert len(r.kernels) == 3
    assert r.absent_metrics == ()
    assert r.total_time_us == pytest.approx(49.792 + 2204.896 + 342.656)
    assert sum(r.kernel_time_shares()) == pytest.approx(1.0)
    assert "3 kernel launch(es)" in r.message and "substituted" in r.message


def test_failed_target_keeps_partial_kernels(h200_plan: MetricPlan) -> None:
    r = interpret(read("ncu_raw_failed_target.csv"), h200_plan, returncode=3)
    assert not r.ok and r.error_kind == "target_failed"
    assert "exited with code 3" in r.message and "\n" not in r.message
    assert len(r.kernels) == 1 and "FillFunctor" in r.kernels[0].name
    assert r.kernels[0].duration_us == pytest.approx(1.728)


def test_failed_target_says_its_own_last_words(h200_plan: MetricPlan) -> None:
    """ncu's messages go to the same stream as the target's: the target's own lines are its reason, kept whole
    in the result and its last one in the message; a target that printed nothing is said to have been silent."""
    ncu_lines = [line for line in read("ncu_raw_failed_target.csv").splitlines() if line.startswith("==")]
    stderr = "\n".join([ncu_lines[0], "Traceback (most recent call last):", '  File "x.py", line 3, in <module>',
                        ncu_lines[1], "RuntimeError: CUDA error: an illegal memory access was encountered",
                        *ncu_lines[2:]])
    r = interpret_output(read("ncu_raw_failed_target.csv"), stderr, returncode=3, timed_out=False, plan=h200_plan)
    assert r.error_kind == "target_failed" and "\n" not in r.message
    assert r.message.endswith("its last words: RuntimeError: CUDA error: an illegal memory access was encountered; "
                              "1 kernel(s) were profiled before it failed")
    assert r.target_stderr.splitlines()[0] == "Traceback (most recent call last):" and "==" not in r.target_stderr
    assert ProfileResult.from_dict(r.to_dict()).target_stderr == r.target_stderr
    silent = interpret_output(read("ncu_raw_failed_target.csv"), "\n".join(ncu_lines), returncode=3,
                              timed_out=False, plan=h200_plan)
    assert "it printed nothing" in silent.message and silent.target_stderr == ""
    assert "target_stderr" not in silent.to_dict()


def test_a_target_ncu_stopped_says_what_ncu_said(h200_plan: MetricPlan) -> None:
    """ncu's lines when another process held the GPU's counters (two profile spares' warm-ups at once, the
    H100, session 27): ncu stops the target, which prints nothing; the message carries ncu's reason."""
    stderr = "\n".join([
        "==PROF== Connected to process 1459 (/usr/bin/python3.12)",
        "==ERROR== An error was reported by the driver:",
        "==ERROR== Profiling failed because a driver resource was unavailable. Ensure that no other tool (like "
        "DCGM) is concurrently collecting profiling data.",
        '==ERROR== Failed to profile "cudaforge_ncu_warm" in process 1459',
        "==PROF== Trying to shutdown target application",
        "==ERROR== The application returned an error code (9).",
    ])
    r = interpret_output("", stderr, returncode=9, timed_out=False, plan=h200_plan)
    assert r.error_kind == "target_failed" and r.target_stderr == ""
    assert r.message.startswith("the profiled program exited with code 9 under ncu; it printed nothing")
    assert "; ncu said: An error was reported by the driver: Profiling failed because a driver resource was " \
           "unavailable." in r.message
    assert "error code (9)" not in r.message and r.message.endswith('"cudaforge_ncu_warm" in process 1459')


def test_bad_metric_is_reported_absent_not_dropped() -> None:
    requested = ("gpu__time_duration.sum", "not__a_metric.sum")
    plan = plan_metrics(requested, None)
    r = interpret(read("ncu_raw_bad_metric.csv"), plan)
    assert r.ok and len(r.kernels) == 7
    assert r.absent_metrics == ("not__a_metric.sum",)
    assert "not reported" in r.absent_reasons["not__a_metric.sum"]
    assert "not__a_metric.sum" in r.message
    # No NVTX filter in that run: no NVTX column, kernel names still found by header name.
    assert [k.short_name for k in r.kernels][3:6] == ["cf_scale", "cf_heavy", short_kernel_name(SGEMM)]


def test_permission_denied_message_says_how_to_fix(h200_plan: MetricPlan) -> None:
    r = interpret(read("synth_permission_denied.txt"), h200_plan, returncode=1)
    assert r.error_kind == "permission_denied" and not r.ok
    assert "NVreg_RestrictProfilingToAdminUsers=0" in r.message and "root" in r.message
    assert "ERR_NVGPUCTRPERM" in r.log_tail


def test_permission_denied_is_found_on_stderr_too(h200_plan: MetricPlan) -> None:
    r = interpret_output(
        "", read("synth_permission_denied.txt"), returncode=1, timed_out=False, plan=h200_plan
    )
    assert r.error_kind == "permission_denied"


def test_no_kernels_in_range(h200_plan: MetricPlan) -> None:
    r = interpret(read("synth_no_kernels.txt"), h200_plan)
    assert r.error_kind == "no_kernels" and "nvtx.range('candidate')" in r.message


def test_header_without_rows_is_no_kernels(h200_plan: MetricPlan) -> None:
    lines = read("ncu_raw_three_kernels.csv").splitlines()
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    r = interpret("\n".join(lines[: header_at + 2]), h200_plan)
    assert r.error_kind == "no_kernels"


def test_truncated_row_is_a_parse_error(h200_plan: MetricPlan) -> None:
    lines = read("ncu_raw_three_kernels.csv").splitlines()
    lines[-1] = lines[-1].rsplit(",", 3)[0]
    r = interpret("\n".join(lines), h200_plan)
    assert r.error_kind == "parse_error" and "cells" in r.message
    with pytest.raises(CsvParseError):
        parse_raw_csv("\n".join(lines))


def test_timeout(h200_plan: MetricPlan) -> None:
    r = interpret("", h200_plan, returncode=None, timed_out=True, timeout_s=120.0, launch_count=20)
    assert r.error_kind == "timeout" and "120 s" in r.message and "launch_count" in r.message


def test_ncu_error_without_output(h200_plan: MetricPlan) -> None:
    r = interpret("==ERROR== Unrecognized option '--bogus'\n", h200_plan, returncode=1)
    assert r.error_kind == "target_failed" and "Unrecognized option" in r.message


def test_stderr_fixture_is_empty_and_stdout_carries_everything(h200_plan: MetricPlan) -> None:
    r = interpret_output(
        read("ncu_raw_three_kernels.csv"),
        read("ncu_stderr.txt"),
        returncode=0,
        timed_out=False,
        plan=h200_plan,
    )
    assert r.ok


def test_stray_target_lines_after_header_do_not_shift_columns() -> None:
    lines = read("ncu_raw_three_kernels.csv").splitlines()
    header_at = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    lines.insert(header_at + 3, "target says hello")
    lines.insert(header_at + 3, "==PROF== something")
    assert len(parse_raw_csv("\n".join(lines)).kernels) == 3


def test_round_trip_through_json(h200_plan: MetricPlan) -> None:
    r = interpret(read("ncu_raw_three_kernels.csv"), h200_plan, command=("ncu", "x"))
    again = ProfileResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert again == r


@pytest.mark.parametrize(
    ("cell", "expected"),
    [
        ("65,536", 65536.0),
        ("2,306,380,462,724.94", 2306380462724.94),
        ("0", 0.0),
        ("-3.5", -3.5),
        ("1e-3", 1e-3),
        ("n/a", None),
        ("", None),
        ("(256, 1, 1)", None),
        ("PolicySpread", None),
    ],
)
def test_parse_number(cell: str, expected: float | None) -> None:
    assert parse_number(cell) == expected


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [
        (49_792, "ns", (49.792, "us")),
        (1.5, "usecond", (1.5, "us")),
        (2.0, "msecond", (2000.0, "us")),
        (3.0, "Mbyte", (3e6, "byte")),
        (1.0, "KiB", (1024.0, "byte")),
        (2_306_380_462_724.94, "byte/s", (2306.38046272494, "GB/s")),
        (1.2, "Tbyte/second", (1200.0, "GB/s")),
        (64.0, "Kbyte/block", (64000.0, "byte/block")),
        (1.98, "cycle/nsecond", (1980.0, "MHz")),
        (47.96, "%", (47.96, "%")),
        (16, "register/thread", (16, "register/thread")),
        (None, "byte", (None, "byte")),
    ],
)
def test_units_are_normalised(value: float | None, unit: str, expected: tuple[float | None, str]) -> None:
    got = normalize(value, unit)
    assert got[1] == expected[1]
    assert got[0] == (pytest.approx(expected[0]) if expected[0] is not None else None)


def test_auto_scaled_units_variant_parses_to_the_same_values() -> None:
    # The same kernel as ncu would print with scaled units (other pages/versions).
    text = (
        '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
        '"Device","CC","gpu__time_duration.sum","dram__bytes_read.sum","dram__bytes.sum.per_second"\n'
        '"","","","","","","","","","","","usecond","Mbyte","Tbyte/second"\n'
        '"0","1","python","host","cf_scale","1","7","(256, 1, 1)","(65536, 1, 1)","0","9.0","49.79","67.11","2.31"\n'
    )
    k = parse_raw_csv(text).kernels[0]
    assert k.duration_us == pytest.approx(49.79)
    assert k.metrics["dram__bytes_read.sum"].value == pytest.approx(67.11e6)
    assert k.metrics["dram__bytes.sum.per_second"].value == pytest.approx(2310.0)


def test_short_kernel_names() -> None:
    assert short_kernel_name("cf_scale") == "cf_scale"
    assert short_kernel_name(SGEMM) == "cutlass::Kernel2<cutlass_80_simt_sgemm_256x128_8x4_nn_align1>"
    long = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char *, 1>>(int, T2, T3)"
    assert short_kernel_name(long) == "at::native::vectorized_elementwise_kernel<...>"


def test_a_profile_spares_warm_up_kernel_is_not_in_the_report(h200_plan: MetricPlan) -> None:
    """The spare's warm-up kernel (observe.NCU_WARM_KERNEL, launched in the profiled range so ncu's session is
    set up before the job) is dropped; ncu is asked for one launch more for it, so a run without a warm-up
    keeps `launch_count`; a report of the warm-up alone says no kernel of the candidate was profiled."""
    from cudaforge.engine.observe import NCU_WARM_KERNEL

    text = read("ncu_raw_three_kernels.csv").replace('","cf_scale"', f'","{NCU_WARM_KERNEL}"')
    r = interpret(text, h200_plan, chip="gh100", launch_count=20)
    assert r.ok and len(r.kernels) == 2 and NCU_WARM_KERNEL not in {k.name for k in r.kernels}
    assert "2 kernel launch(es)" in r.message
    plain = interpret(read("ncu_raw_three_kernels.csv"), h200_plan, chip="gh100", launch_count=2)
    assert [k.launch_id for k in plain.kernels] == [0, 1]  # no warm-up row: launch_count holds
    only_warm = "\n".join(line for line in text.splitlines() if "cf_heavy" not in line and '"2"' not in line[:5])
    alone = interpret(only_warm, h200_plan, chip="gh100", launch_count=20)
    assert not alone.ok and alone.error_kind == "no_kernels"
