"""The run folder's typed records (engine/session/records.py): each round-trips through to_dict/from_dict, the
recorded run folder reads into them key for key, and an old-format run folder still opens (store, report, the
workbench's --open)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.results import to_dict
from cudaforge.engine.session import (
    CandidateMeta,
    CoderDraft,
    DecisionEntry,
    GpuInfo,
    JudgeDraft,
    Manifest,
    Recommendation,
    RoundMeta,
    RunStore,
    State,
    list_runs,
    round_status,
)
from cudaforge.engine.session.run_report import markdown_report
from tui_kit import FIXTURE_RUN

OLD_RUN = Path(__file__).parent / "fixtures" / "old_run" / "run"

FULL = [
    Manifest(run_id="r", schema=1, created=1.5, task_path="/t/task.py", task_name="t", task_sha256="ab" * 32,
             mode="auto", config={"session": {"rounds": 4}}, gpu=GpuInfo(device="cuda", index=1, name="NVIDIA H200",
                                                                         chip="GH100"),
             versions={"torch": "2.11"}),
    State(status="stopped", mode="review", stop_reason="max_rounds", stop_message="done", best_round=2,
          best_speedup=1.7, rounds_done=3, active_s=40.5, updated=2.5),
    RoundMeta(round=2, kind="optimize", parent=1, started_at=1.0, finished=True, finished_at=2.0, outcome="ok",
              speedup=1.2, progress={"head": 2, "best": 2}),
    CandidateMeta(format="nvrtc", origin="edited", explanation="fused"),
    CoderDraft(purpose="optimize", source="class ModelNew: ...", text="reply", explanation="why",
               error={"kind": "budget", "message": "cap"}, records=({"call_id": "c1"},), prompt={"system": "s"}),
    JudgeDraft(subject_round=1, mode="optimize", text="vectorize", source="llm", reply={"records": [{"call_id": "j"}]}),
    Recommendation(text="vectorize", source="person", mode="optimize", subject_round=1, draft=2),
    DecisionEntry(point="recommendation", n=2, by="person", action="branch", text=None, round=1, at=3.5),
]


@pytest.mark.parametrize("record", FULL, ids=lambda r: type(r).__name__)
def test_each_record_round_trips(record: Any) -> None:
    data = record.to_dict()
    assert json.loads(json.dumps(data)) == data  # JSON-ready
    assert type(record).from_dict(data) == record
    assert type(record).from_dict(json.loads(json.dumps(data))) == record


@pytest.mark.parametrize("record", FULL, ids=lambda r: type(r).__name__)
def test_from_dict_ignores_unknown_keys_and_defaults_missing_ones(record: Any) -> None:
    cls = type(record)
    assert cls.from_dict({"a_key_from_a_newer_version": 1}) == cls()
    assert cls.from_dict(None) == cls()
    first = dataclasses.fields(cls)[0].name
    assert cls.from_dict({first: getattr(record, first)}) == cls(**{first: getattr(record, first)})


def _read_like(record: Any, raw: dict[str, Any]) -> None:
    """Every key of the stored file reads back, by attribute, as the value stored."""
    for key, value in raw.items():
        got = getattr(record, key)
        if dataclasses.is_dataclass(got):
            got = {k: v for k, v in to_dict(got).items() if v is not None}
        elif isinstance(got, tuple):
            got = list(got)
        assert got == value, key


def _files(run: Path) -> list[tuple[type, Path]]:
    out: list[tuple[type, Path]] = [(Manifest, run / "manifest.json"), (State, run / "state.json")]
    for folder in sorted((run / "rounds").iterdir()):
        out += [(RoundMeta, folder / "round.json"), (CandidateMeta, folder / "candidate.json"),
                (Recommendation, folder / "recommendation.json")]
        out += [(CoderDraft, p) for p in sorted(folder.glob("coder-*.json"))]
        out += [(JudgeDraft, p) for p in sorted(folder.glob("judge-*.json"))]
        if (folder / "decisions.json").is_file():
            out += [(DecisionEntry, folder / "decisions.json")]
    return [(cls, p) for cls, p in out if p.is_file()]


@pytest.mark.parametrize("run", [FIXTURE_RUN, OLD_RUN], ids=["recorded", "old_format"])
def test_run_folder_files_read_into_their_records_key_for_key(run: Path) -> None:
    files = _files(run)
    assert {cls for cls, _ in files} >= {Manifest, State, RoundMeta, CandidateMeta, Recommendation, CoderDraft,
                                         JudgeDraft}
    for cls, path in files:
        loaded = json.loads(path.read_text())
        for raw in loaded if isinstance(loaded, list) else [loaded]:  # decisions.json: a list of entries
            record = cls.from_dict(raw)
            _read_like(record, raw)
            assert cls.from_dict(record.to_dict()) == record, path


def test_the_recorded_run_reads_by_attribute() -> None:
    store = RunStore.open(FIXTURE_RUN, read_only=True)
    manifest, state = store.manifest, store.state
    assert manifest.run_id == "demo-run" and manifest.task_name == "core_tasks" and manifest.rounds_limit == 3
    assert manifest.gpu == GpuInfo(device="cpu") and manifest.gpu.shown == "CPU"
    assert state.status == "finished" and state.best_round == 3 and state.stop_reason == "max_rounds"
    meta = store.round_meta(2)
    assert meta is not None and meta.kind == "repair" and meta.parent == 1 and meta.outcome == "wrong_result"
    rec = store.recommendation(2)
    assert rec is not None and rec.mode == "correct" and rec.subject_round == 1 and rec.draft == 1
    judge = store.judge_draft(2, 1)
    assert judge is not None and judge.subject_round == 1 and judge.text == rec.text
    assert [r.outcome for r in store.rounds()] == ["compile_error", "wrong_result", "ok"]


def test_an_old_format_run_folder_still_opens() -> None:
    before = {p: p.read_bytes() for p in OLD_RUN.rglob("*") if p.is_file()}
    store = RunStore.open(OLD_RUN, read_only=True)
    manifest, state = store.manifest, store.state
    assert manifest.run_id == "old-run" and manifest.task_name == "" and manifest.gpu is None
    assert manifest.versions == {} and manifest.mode == "" and manifest.rounds_limit == 3
    assert state.status == "stopped" and state.mode == "" and state.rounds_done == 0 and state.active_s == 0.0
    rounds = store.rounds()
    assert [r.outcome for r in rounds] == ["ok", "no_candidate", "running"]
    assert rounds[0].started_at == 0.0 and rounds[0].origin == "coder" and rounds[0].explanation == ""
    assert rounds[1].coder_error == "the reply has no python block"
    assert rounds[1].recommendation == "vectorize the loop" and rounds[1].judge_mode is None
    assert store.judge_draft(2, 1) == JudgeDraft(subject_round=1, mode="optimize", text="vectorize the loop",
                                                 source="heuristic")
    assert store.judge_draft(2, 1).records == ()  # type: ignore[union-attr]
    [summary] = list_runs(OLD_RUN.parent)
    assert summary.run_id == "old-run" and summary.status == "stopped" and summary.task_name == "?"
    report = markdown_report(store)
    assert "# cudaforge run old-run" in report and "- status: stopped (stopped_by_user)" in report
    assert "- device: ?" in report
    assert {p: p.read_bytes() for p in OLD_RUN.rglob("*") if p.is_file()} == before, "opening wrote nothing"


async def test_the_workbench_opens_an_old_format_run_folder(tmp_path: Path) -> None:
    from cudaforge.tui.app import WorkbenchApp
    from cudaforge.tui.cli import LaunchSpec

    app = WorkbenchApp(LaunchSpec(open_run=str(OLD_RUN), use_user_config=False), system_stats=False, cwd=tmp_path)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        m = app.model
        assert sorted(m.rounds) == [1, 2, 3]
        # the run is stopped: the round it left unfinished is shown 'stopped' (round_status + RoundView.abandoned)
        assert [m.rounds[n].status for n in (1, 2, 3)] == ["ok", "no_candidate", "stopped"]
        assert m.run_id == "old-run" and m.total_rounds == 3 and m.gpu_name == ""
        assert any("status stopped" in e for e in app.log_pane.entries)


def test_the_round_status_rule() -> None:
    """One rule for the run folder (RoundRecord.outcome) and the workbench (RoundView.status)."""
    assert round_status(None, coder_error=None, finished=False) == "running"
    assert round_status(None, coder_error=None, finished=True) == "no_candidate"
    assert round_status(None, coder_error="no code", finished=False) == "no_candidate"
    assert round_status(None, coder_error=None, finished=True, outcome="timeout") == "timeout"


def test_save_state_takes_only_state_fields(tmp_path: Path) -> None:
    from cudaforge.engine.task import load_task
    from session_kit import TASK

    store = RunStore.create(tmp_path, load_task(TASK), config={}, mode="auto", gpu=GpuInfo(device="cpu"))
    try:
        store.save_state(best_round=2, best_speedup=1.5)
        assert store.state.best_round == 2 and store.state.status == "running" and store.state.updated > 0
        with pytest.raises(TypeError, match="State has no field best"):
            store.save_state(best=2)
        assert store.manifest.gpu == GpuInfo(device="cpu") and store.manifest.task_name == "core_tasks"
    finally:
        store.close()
