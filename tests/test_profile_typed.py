"""The ncu profile and its analysis travel typed: from the run folder (a real recorded H200 profile in
tests/fixtures/tui_run) through RoundRecord and the events to the NCU pane, which reads attributes.
A field renamed in the analysis fails loudly instead of blanking the pane."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from types import SimpleNamespace

import pytest
from cudaforge.engine.profiling import ProfileResult
from cudaforge.engine.profiling.analysis import Analysis, KernelAnalysis
from cudaforge.engine.session import RunStore
from cudaforge.tui.widgets.metrics import render_metrics
from rich.console import Console

RUN = Path(__file__).parent / "fixtures" / "tui_run" / "run"
STORED = RUN / "rounds" / "003" / "profile.json"


def _text(renderable: object) -> str:
    console = Console(width=240, record=True, color_system=None)
    console.print(renderable)
    return console.export_text()


def test_recorded_analysis_round_trips_through_its_dict() -> None:
    data = json.loads(STORED.read_text())
    analysis = Analysis.from_dict(data["analysis"])
    assert analysis.kernels and analysis.findings
    assert analysis.to_dict() == data["analysis"]
    profile = ProfileResult.from_dict(data["profile"])
    assert profile.to_dict() == data["profile"]


def test_run_records_carry_typed_profile_and_analysis() -> None:
    record = RunStore.open(RUN, read_only=True).load_round(3)
    assert isinstance(record.profile, ProfileResult) and isinstance(record.analysis, Analysis)
    assert record.analysis == Analysis.from_dict(json.loads(STORED.read_text())["analysis"])
    assert RunStore.open(RUN, read_only=True).load_round(1).profile is None  # a compile error: nothing profiled


def test_ncu_pane_shows_every_kernel_verdict_and_finding_of_the_recorded_profile() -> None:
    record = RunStore.open(RUN, read_only=True).load_round(3)
    assert record.profile is not None and record.analysis is not None
    text = _text(render_metrics(record.profile, record.analysis, None, None))
    for k in record.analysis.kernels:
        assert k.bottleneck in text and k.short_name in text
    for f in record.analysis.findings:
        assert f.title in text and f"[{f.severity}]" in text
    assert "no analysis" not in text


def test_renaming_an_analysis_field_fails_loudly_instead_of_blanking_the_pane() -> None:
    record = RunStore.open(RUN, read_only=True).load_round(3)
    assert record.profile is not None and record.analysis is not None
    names = [f.name for f in fields(KernelAnalysis)]
    assert "bottleneck" in names
    # the same analysis with `bottleneck` renamed `verdict`, as a rename in the analysis module would give
    renamed = SimpleNamespace(
        kernels=[SimpleNamespace(**{("verdict" if n == "bottleneck" else n): getattr(k, n) for n in names})
                 for k in record.analysis.kernels],
        findings=record.analysis.findings, notes=record.analysis.notes)
    with pytest.raises(AttributeError, match="bottleneck"):
        render_metrics(record.profile, renamed, None, None)  # type: ignore[arg-type]


def test_a_profile_carries_the_profiled_workers_phases_through_its_dict() -> None:
    """Where a fresh profile's seconds went in the worker (the rest of its wall time is ncu's); records
    written before the field existed read back unchanged."""
    data = json.loads(STORED.read_text())["profile"]
    assert "worker_phases" not in data
    timed = replace(ProfileResult.from_dict(data), worker_phases={"build": 0.12, "gpu_wait": 0.4, "profile": 0.05})
    again = ProfileResult.from_dict(timed.to_dict())
    assert again.worker_phases == {"build": 0.12, "gpu_wait": 0.4, "profile": 0.05}
    assert again == timed
