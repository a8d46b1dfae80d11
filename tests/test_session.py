"""The session loop on the CPU device, with the real evaluator and the real SDKs talking to the
scripted LLM server: a full seed/repair/optimize session, revert-to-best, every stop condition and
the review-mode decisions. (Crash/resume and batches: tests/test_session_resume.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.session import (
    CandidateEvaluated,
    CandidateProposed,
    Decision,
    DecisionNeeded,
    JudgeRecommended,
    ModeChanged,
    ProfileReady,
    Reverted,
    RoundFinished,
    RoundStarted,
    RunStore,
    ScriptedDriver,
    create_session,
)
from cudaforge.engine.session.decisions import QueueDriver
from llm_server import ScriptedLLMServer
from session_kit import (
    BROKEN,
    CORRECT,
    KEY,
    KEY_ENV,
    SLOW,
    TASK,
    WRONG,
    coder_reply,
    judge_correct_reply,
    judge_optimize_reply,
    session_config,
)

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer() as srv:
        yield srv


def _run(server: ScriptedLLMServer | None, cache_dir: Path, runs: Path, driver: Any = None, **over: Any):
    events: list[Any] = []
    config = session_config(server, cache_dir, **over)
    session = create_session(TASK, config, driver=driver, on_event=events.append, run_root=runs)
    return session, events


def _kinds(events: list[Any], cls: type) -> list[Any]:
    return [e for e in events if isinstance(e, cls)]


async def test_full_session_seed_repair_optimize_and_revert(server: ScriptedLLMServer, cache_dir: Path,
                                                            tmp_path: Path) -> None:
    # seed: compile error -> Judge diagnoses -> repair: correct -> Judge -> optimize: slower (revert)
    # -> Judge about the best round -> optimize: correct again.
    server.push(coder_reply(BROKEN), judge_correct_reply(), coder_reply(CORRECT), judge_optimize_reply(),
                coder_reply(SLOW), judge_optimize_reply("fuse the bias add"), coder_reply(CORRECT.replace("CI task",
                                                                                                     "CI task, v2")))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 4, "session.mode": "auto"})
    stopped = await session.run()

    assert stopped.reason == "max_rounds" and stopped.rounds_done == 4
    rounds = {e.round: e for e in _kinds(events, RoundFinished)}
    assert [rounds[n].outcome for n in (1, 2, 3, 4)] == ["compile_error", "ok", "ok", "ok"]
    assert [e.kind for e in _kinds(events, RoundStarted)] == ["seed", "repair", "optimize", "optimize"]
    # round 3 was slower than round 2: the next round builds on round 2 and the Judge looks at round 2
    reverted = _kinds(events, Reverted)
    assert [(e.round, e.to_round) for e in reverted if e.round < 4] == [(3, 2)]  # round 4 may be noise
    judged = {e.round: e for e in _kinds(events, JudgeRecommended)}
    assert judged[2].subject_round == 1 and judged[2].mode == "correct"
    assert judged[4].subject_round == 2 and judged[4].mode == "optimize"
    assert "fuse the bias add" in judged[4].text
    assert stopped.best_round in (2, 4)
    # the Coder's repair prompt carried the compile log and the Judge's diagnosis
    repair_prompt = server.requests[2].last_user_text
    assert "missing semicolon" in repair_prompt or "expected ';'" in repair_prompt
    assert "the C++ source does not compile" in repair_prompt
    assert server.remaining == 0 and len(server.requests) == 7

    store = RunStore.open(session.store.path, read_only=True)
    recs = store.rounds()
    assert [r.round for r in recs] == [1, 2, 3, 4] and all(r.finished for r in recs)
    assert recs[0].result is not None and recs[0].result.compile is not None and not recs[0].result.compile.ok
    assert recs[3].parent == 2 and recs[2].parent == 2 and recs[1].parent == 1
    assert len(store.calls()) == 7 and sum(r.cost_usd for r in recs) > 0
    # the event that ends a round carries what its calls cost: a UI needs no call log
    assert [(rounds[r.round].tokens, rounds[r.round].cost_usd) for r in recs] == [
        (r.tokens, pytest.approx(r.cost_usd)) for r in recs]
    assert all(rounds[n].tokens > 0 for n in (1, 2, 3, 4))
    state = store.state
    assert state.status == "finished" and state.best_round == stopped.best_round
    manifest = store.manifest
    assert manifest.schema == 1 and manifest.task_sha256 and manifest.versions["torch"]
    # nothing in the run folder holds the API key
    for path in store.path.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(errors="replace"), path


async def test_stop_at_target_speedup(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 5, "session.mode": "auto",
                                                            "session.target_speedup": 0.001})
    stopped = await session.run()
    assert stopped.reason == "target_speedup" and stopped.rounds_done == 1 and stopped.best_round == 1
    assert len(server.requests) == 1  # no Judge call for a round that will never run


async def test_stop_on_plateau(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT), judge_optimize_reply(), coder_reply(SLOW))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 6, "session.mode": "auto",
                                                            "session.plateau_rounds": 1})
    stopped = await session.run()
    assert stopped.reason == "plateau" and stopped.rounds_done == 2 and stopped.best_round == 1


async def test_stop_on_dollar_cap(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(WRONG), judge_correct_reply(), coder_reply(CORRECT))
    # one Coder call (1200 in + 800 out at the gpt-5 profile's price) costs more than this cap
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 5, "session.mode": "auto",
                                                            "budget.dollars": 0.001})
    stopped = await session.run()
    assert stopped.reason == "budget_dollars" and stopped.rounds_done == 1
    assert len(server.requests) == 1


async def test_stop_on_token_cap(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(WRONG), judge_correct_reply(), coder_reply(CORRECT))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 5, "session.mode": "auto",
                                                            "budget.tokens": 1500})
    stopped = await session.run()
    assert stopped.reason == "budget_tokens" and stopped.rounds_done == 1 and len(server.requests) == 1


async def test_stop_on_wall_time(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT + f"\n# {time.time_ns()}: a new text, so no cached result short-cuts it\n"))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 5, "session.mode": "auto",
                                                            "budget.wall_minutes": 0.005})
    stopped = await session.run()  # 0.3 s: round 1 starts in time, its evaluation takes longer
    assert stopped.reason == "budget_wall" and stopped.rounds_done == 1 and len(server.requests) == 1


async def test_revert_after_repeated_failures(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT), judge_optimize_reply(), coder_reply(WRONG), judge_correct_reply(),
                coder_reply(WRONG.replace("0.01)", "0.02)")), judge_optimize_reply("try again from the best"),
                coder_reply(CORRECT.replace("CI task", "CI task again")))
    session, events = _run(server, cache_dir, tmp_path, **{"session.rounds": 4, "session.mode": "auto",
                                                            "session.revert_after_failures": 2})
    stopped = await session.run()
    reverted = _kinds(events, Reverted)
    assert [(e.round, e.to_round) for e in reverted if e.round < 4] == [(3, 1)]
    starts = {e.round: e for e in _kinds(events, RoundStarted)}
    assert starts[3].parent == 2 and starts[3].kind == "repair"
    assert starts[4].parent == 1 and starts[4].kind == "optimize"
    assert stopped.reason == "max_rounds"


async def test_review_edit_regenerate_and_edited_recommendation(server: ScriptedLLMServer, cache_dir: Path,
                                                                tmp_path: Path) -> None:
    edited_rec = "Person: keep the loop but hoist the bias index out of it.  (kept verbatim)"
    server.push(coder_reply(WRONG), coder_reply(CORRECT, "second try"), judge_optimize_reply(),
                coder_reply(SLOW))
    driver = ScriptedDriver([
        Decision("regenerate"),  # round 1: throw the first draft away
        Decision("approve"),  # round 1: take the second draft
        Decision("edit", text=edited_rec),  # round 2: replace the Judge's recommendation
        Decision("edit", text=CORRECT.replace("CI task", "CI task, edited by a person")),  # round 2 candidate
    ])
    session, events = _run(server, cache_dir, tmp_path, driver=driver, **{"session.rounds": 2,
                                                                          "session.mode": "review"})
    stopped = await session.run()
    assert stopped.reason == "max_rounds"
    assert [(r.round, r.point) for r in driver.seen] == [(1, "candidate"), (1, "candidate"),
                                                          (2, "recommendation"), (2, "candidate")]
    store = RunStore.open(session.store.path, read_only=True)
    r1, r2 = store.rounds()
    assert r1.coder_drafts == 2 and "Correct C++ candidate" in (r1.candidate or "") and r1.origin == "coder"
    assert r2.recommendation == edited_rec and r2.judge_source == "person"
    assert r2.origin == "edited" and "edited by a person" in (r2.candidate or "")
    # the Coder read the edited recommendation word for word
    assert edited_rec in server.requests[3].last_user_text
    assert [e.origin for e in _kinds(events, CandidateProposed) if not e.replayed][-1] == "edited"


async def test_review_stop_leaves_a_resumable_run(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT))
    driver = ScriptedDriver([Decision("stop")])
    session, events = _run(server, cache_dir, tmp_path, driver=driver, **{"session.mode": "review"})
    stopped = await session.run()
    assert stopped.reason == "stopped_by_user" and stopped.rounds_done == 0
    assert not _kinds(events, CandidateEvaluated)
    state = RunStore.open(session.store.path, read_only=True).state
    assert state.status == "stopped" and state.stop_reason == "stopped_by_user"


async def test_pause_turns_auto_into_review_at_the_next_decision(server: ScriptedLLMServer, cache_dir: Path,
                                                                 tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT), judge_optimize_reply(), coder_reply(SLOW))
    driver = QueueDriver()
    events: list[Any] = []
    config = session_config(server, cache_dir, **{"session.rounds": 2, "session.mode": "auto"})

    def on_event(e: Any) -> None:
        events.append(e)
        if isinstance(e, RoundFinished) and e.round == 1:
            session.request_pause()
        if isinstance(e, DecisionNeeded):
            driver.answer(Decision("approve"))

    session = create_session(TASK, config, driver=driver, on_event=on_event, run_root=tmp_path)
    stopped = await session.run()
    assert stopped.reason == "max_rounds"
    assert _kinds(events, ModeChanged)[0].mode == "review"
    asked = [(e.round, e.point) for e in _kinds(events, DecisionNeeded)]
    assert asked == [(2, "recommendation"), (2, "candidate")]  # round 1 ran unattended
    assert RunStore.open(session.store.path, read_only=True).state.mode == "review"


async def test_branch_from_an_earlier_round(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    server.push(coder_reply(CORRECT), judge_optimize_reply(), coder_reply(WRONG), judge_correct_reply(),
                judge_optimize_reply("branch: start over from round 1"), coder_reply(SLOW))
    driver = ScriptedDriver([Decision("approve"), Decision("approve"), Decision("approve"),
                             Decision("branch", round=1), Decision("approve"), Decision("approve")])
    session, events = _run(server, cache_dir, tmp_path, driver=driver, **{"session.rounds": 3,
                                                                          "session.mode": "review"})
    await session.run()
    store = RunStore.open(session.store.path, read_only=True)
    r3 = store.rounds()[2]
    assert r3.parent == 1 and r3.kind == "optimize" and r3.subject_round == 1
    assert "start over from round 1" in (r3.recommendation or "")


async def test_manual_mode_without_llm_uses_the_heuristic_judge(cache_dir: Path, tmp_path: Path) -> None:
    driver = ScriptedDriver([Decision("edit", text=WRONG), Decision("approve"), Decision("edit", text=CORRECT)])
    session, events = _run(None, cache_dir, tmp_path, driver=driver, **{"session.rounds": 2})
    assert session.mode == "manual" and "No Coder LLM" in session.notice
    stopped = await session.run()
    assert stopped.reason == "max_rounds" and stopped.best_round == 2
    judged = _kinds(events, JudgeRecommended)
    assert len(judged) == 1 and judged[0].source == "heuristic" and judged[0].mode == "correct"
    assert judged[0].text.startswith("Critical issue: ")  # the offline Judge's JudgeReply.as_text()
    assert driver.seen[0].options == ("edit", "branch", "stop")


def test_run_folder_json_is_complete(cache_dir: Path, tmp_path: Path) -> None:
    """Every stored JSON file parses; an interrupted (unlocked, 'running') run lists as interrupted."""
    from cudaforge.engine.session import list_runs
    from cudaforge.engine.task import load_task

    store = RunStore.create(tmp_path, load_task(TASK), config={"session": {"rounds": 1}}, mode="auto")
    store.start_round(1, "seed", None)
    store.close()
    [summary] = list_runs(tmp_path)
    assert summary.status == "interrupted" and summary.rounds == 1
    for path in store.path.rglob("*.json"):
        json.loads(path.read_text())


async def test_resume_replays_decisions_in_order(cache_dir: Path, tmp_path: Path) -> None:
    """A rejected edit, a good edit, then stop; the resumed session asks only what was not answered."""
    from cudaforge.engine.session import Notice, resume_session

    first = ScriptedDriver([Decision("edit", text="this is not python ("), Decision("edit", text=WRONG),
                            Decision("stop")])
    session, events = _run(None, cache_dir, tmp_path, driver=first, **{"session.rounds": 2})
    stopped = await session.run()
    assert stopped.reason == "stopped_by_user" and stopped.rounds_done == 1
    assert any(isinstance(e, Notice) and e.level == "error" for e in events)  # the rejected edit, as a value
    assert [(r.round, r.point) for r in first.seen] == [(1, "candidate"), (1, "candidate"), (2, "recommendation")]
    eval1 = (session.store.round_dir(1) / "eval.json").read_bytes()

    second = ScriptedDriver([Decision("approve"), Decision("edit", text=CORRECT)])
    replay: list[Any] = []
    resumed = resume_session(session.store.path, driver=second, on_event=replay.append)
    stopped = await resumed.run()
    assert stopped.reason == "max_rounds" and stopped.best_round == 2
    assert [(r.round, r.point) for r in second.seen] == [(2, "recommendation"), (2, "candidate")]
    assert (session.store.round_dir(1) / "eval.json").read_bytes() == eval1
    assert any(isinstance(e, CandidateEvaluated) and e.replayed and e.round == 1 for e in replay)


async def test_a_rounds_profile_runs_beside_its_evaluation_and_goes_with_a_wrong_candidate(
        server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    """Session._start_profile with the real Profiler and sandbox; no ncu in CI, so `ncu` is a script that notes
    when it starts, takes 3 s where the profile would run and then fails. A wrong candidate's profile is
    cancelled at its verdict (the round does not wait for it, nothing is shown or stored); a correct one's
    begins before its evaluation ends (a new source: its build alone takes seconds) and is shown."""
    from cudaforge.engine.evaluation.profiler import Profiler
    from cudaforge.engine.profiling import NcuSettings

    started = tmp_path / "ncu_started"
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/sh\ncase \"$*\" in *--query-metrics*) exit 1 ;; esac\n"
                    f"date +%s.%N >> '{started}'\nsleep 3\necho 'no GPU here' >&2\nexit 1\n")
    fake.chmod(0o755)
    fresh = CORRECT.replace("CI task", "CI task, profiled beside its evaluation")
    server.push(coder_reply(WRONG), judge_correct_reply("the values are scaled wrong"), coder_reply(fresh))
    timed: list[tuple[float, Any]] = []
    config = session_config(server, cache_dir, **{"session.rounds": 2, "session.mode": "auto", "eval.spares": 0})
    session = create_session(TASK, config, on_event=lambda e: timed.append((time.time(), e)), run_root=tmp_path)
    session.profiler = Profiler(session.evaluator, NcuSettings(path=str(fake), timeout_s=30.0))
    stopped = await session.run()

    events = [e for _, e in timed]
    assert stopped.rounds_done == 2
    assert [e.outcome for e in _kinds(events, RoundFinished)] == ["wrong_result", "ok"]
    profiled = _kinds(events, ProfileReady)
    assert [e.round for e in profiled] == [2] and not profiled[0].profile.ok
    assert profiled[0].profile.error_kind != "ncu_missing", profiled[0].profile.message  # the script ran
    assert session.store.profile(1) is None and session.store.profile(2) is not None
    at = {(type(e).__name__, e.round): t for t, e in timed if isinstance(e, (CandidateEvaluated, RoundFinished))}
    assert at[("RoundFinished", 1)] - at[("CandidateEvaluated", 1)] < 2.0  # cancelled, not waited for (3 s)
    starts = [float(x) for x in started.read_text().split()]
    assert starts and starts[-1] < at[("CandidateEvaluated", 2)]  # round 2's profile began during its evaluation
