"""Held for review: the [hold] rules, a headless session whose honest round trips a lowered
`[hold] speedup`, the re-run in a fresh worker, `cudaforge rule` (listing and non-interactive rulings),
rulings that survive resume, the export report and the batch summary's held count."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.cli import main
from cudaforge.engine.config import load_config
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.hold import HoldSettings, hold_reasons
from cudaforge.engine.results import EvalResult, Finding, SpeedOfLight, Timing, TimingStats
from cudaforge.engine.session import RoundFinished, RunStore, create_session, resume_session
from cudaforge.engine.session.batch import TaskOutcome, summarize
from cudaforge.engine.session.events import RerunFinished, RoundHeld, RulingMade
from cudaforge.engine.session.rulings import RULINGS_FILE, read_rulings
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, SLOW, TASK, coder_reply, judge_optimize_reply, session_config

pytestmark = pytest.mark.timeout(900)

# CORRECT is about 200x faster than SLOW (the same kernel once instead of 200 times): a threshold between
# their speedups holds the honest CORRECT rounds and lets SLOW through.
HOLD_SPEEDUP = 0.05


def _stats(ms: float) -> TimingStats:
    return TimingStats(ms, 0.0, ms, ms, ms, 10, "cuda_event")


def _result(speedup: float, sol: float | None = None, findings: tuple[Finding, ...] = (),
            accepted: bool = True) -> EvalResult:
    timing = Timing(_stats(speedup), _stats(1.0), speedup, speedup, speedup)
    return EvalResult(outcome="ok" if accepted else "wrong_result", accepted=accepted, task_path="t.py",
                      candidate_hash="h", format="nvrtc", device="cuda", timing=timing, findings=findings,
                      speed_of_light=SpeedOfLight(sol_fraction=sol) if sol is not None else None)


def test_hold_rules() -> None:
    s = HoldSettings()
    assert hold_reasons(_result(2.0, 0.5), s) == ()
    assert [r.kind for r in hold_reasons(_result(12.0, 0.5), s)] == ["speedup"]
    assert [r.kind for r in hold_reasons(_result(2.0, 0.95), s)] == ["sol"]
    warn = Finding("side_stream", "warn", "work on a side stream")
    assert [r.kind for r in hold_reasons(_result(2.0, findings=(warn,)), s)] == ["finding"]
    assert hold_reasons(_result(2.0, findings=(Finding("side_stream", "info", "x"),)), s) == ()
    assert hold_reasons(_result(50.0, 1.5, accepted=False), s) == ()  # only passing results are held
    every = HoldSettings(every_best=True)
    assert [r.kind for r in hold_reasons(_result(2.0), every, new_best=True)] == ["every_best"]
    assert hold_reasons(_result(2.0), every, new_best=False) == ()
    assert "12.00x" in hold_reasons(_result(12.0), s)[0].message


def test_hold_config_section(tmp_path: Path) -> None:
    cfg = load_config(None, {"hold.speedup": 4, "hold.findings": ["noisy_timing"]}, cwd=tmp_path,
                      use_user_config=False)
    assert HoldSettings.from_config(cfg) == HoldSettings(speedup=4.0, findings=("noisy_timing",))
    assert HoldSettings.from_config(load_config(None, cwd=tmp_path, use_user_config=False)) == HoldSettings()
    (tmp_path / "bad.toml").write_text("[hold]\nspeed = 3\n")
    with pytest.raises(ConfigError, match=r"\[hold\] unknown key 'speed'"):
        load_config(tmp_path / "bad.toml", cwd=tmp_path, use_user_config=False)
    (tmp_path / "bad2.toml").write_text('[hold]\nfindings = ["side_streams"]\n')
    with pytest.raises(ConfigError, match="unknown finding 'side_streams'"):
        load_config(tmp_path / "bad2.toml", cwd=tmp_path, use_user_config=False)


def test_batch_counts_held_rounds_and_geomean_sol() -> None:
    rows = [TaskOutcome("a", "done", correct=True, best_speedup=2.0, best_sol=0.5),
            TaskOutcome("b", "done", correct=True, best_speedup=1.0, best_sol=0.125, held=1),
            TaskOutcome("c", "done", correct=False, held=2)]
    s = summarize(rows, 1.0)
    assert s.held == 3 and s.geomean_sol == pytest.approx(0.25)
    assert s.to_dict()["geomean_sol"] == pytest.approx(0.25)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer() as srv:
        yield srv


async def _cli(*argv: str) -> tuple[int, str]:
    """`cudaforge ARGV` (it runs its own event loop: in a thread here)."""
    out = io.StringIO()
    with redirect_stdout(out):
        code = await asyncio.to_thread(main, list(argv))
    return code, out.getvalue()


async def test_headless_run_keeps_held_rounds_aside_and_cudaforge_rule(server: ScriptedLLMServer, cache_dir: Path,
                                                                       tmp_path: Path) -> None:
    server.push(coder_reply(SLOW), judge_optimize_reply(), coder_reply(CORRECT), judge_optimize_reply(),
                coder_reply(CORRECT.replace("CI task", "CI task, v2")))
    events: list[Any] = []
    config = session_config(server, cache_dir, **{"session.rounds": 3, "session.mode": "auto",
                                                  "hold.speedup": HOLD_SPEEDUP, "session.revert_on_regression": False})
    session = create_session(TASK, config, on_event=events.append, run_root=tmp_path)
    stopped = await session.run()
    run = session.store.path

    held = {e.round: e for e in events if isinstance(e, RoundHeld)}
    assert sorted(held) == [2, 3] and held[2].reasons[0].kind == "speedup"
    reruns = {e.round: e.result for e in events if isinstance(e, RerunFinished)}
    assert sorted(reruns) == [2, 3] and all(r.accepted for r in reruns.values())
    store = RunStore.open(run, read_only=True)
    recs = {r.round: r for r in store.rounds()}
    assert recs[2].result is not None and recs[2].rerun is not None
    assert recs[2].rerun.seeds != recs[2].result.seeds  # a fresh worker with new seeds, not the result cache
    assert not recs[2].rerun.cached
    # held rounds are not best and do not seed: round 3 built on round 1, the best stayed round 1
    assert stopped.best_round == 1 and store.state.best_round == 1
    assert recs[3].parent == 1 and recs[3].kind == "optimize"
    assert all(e.best_round == 1 for e in events if isinstance(e, RoundFinished))

    code, listing = await _cli("rule", str(run))  # stdin is no terminal here: it lists and says how to rule
    assert code == 0 and "== round 2 ==" in listing and "== round 3 ==" in listing
    assert "HELD FOR REVIEW" in listing and "re-run" in listing and "speed of light" in listing
    assert "rule with: cudaforge rule" in listing
    code, listed = await _cli("rule", str(run), "--json")
    assert [r["round"] for r in json.loads(listed)] == [2, 3]

    assert (await _cli("rule", str(run), "--reject", "2", "--reason", "the timer looks off", "--who", "ana"))[0] == 0
    assert RunStore.open(run, read_only=True).state.best_round == 1  # rejecting keeps the previous best
    assert (await _cli("rule", str(run), "--accept", "3", "--who", "ana"))[0] == 0
    assert RunStore.open(run, read_only=True).state.best_round == 3  # accepting makes it best
    assert (await _cli("rule", str(run), "--accept", "2"))[0] == 2  # already ruled: bad input, one line
    assert (await _cli("rule", str(run), "--accept", "1"))[0] == 2  # never held
    rulings = read_rulings(run)
    assert (rulings[2].ruling, rulings[2].reason, rulings[2].who) == ("reject", "the timer looks off", "ana")
    assert rulings[3].ruling == "accept" and rulings[3].time > 0
    assert len((run / RULINGS_FILE).read_text().splitlines()) == 2

    out = tmp_path / "best.py"
    assert (await _cli("export", str(run), "--out", str(out)))[0] == 0
    report = out.with_suffix(".md").read_text()
    assert "## Held for review" in report and "reject by ana" in report and "the timer looks off" in report
    assert "**Best: round 3" in report

    # resume: the rulings are read back and the best is the accepted round
    server.push(judge_optimize_reply(), coder_reply(SLOW.replace("slow", "slow, v3")))
    resumed_events: list[Any] = []
    resumed = resume_session(run, overrides={"session.rounds": 4}, on_event=resumed_events.append)
    again = await resumed.run()
    assert again.best_round == 3
    made = [e for e in resumed_events if isinstance(e, RulingMade)]
    assert [(e.ruling.round, e.ruling.ruling, e.replayed) for e in made] == [(2, "reject", True), (3, "accept", True)]
    assert RunStore.open(run, read_only=True).load_round(4).parent == 3  # the accepted round seeds round 4
