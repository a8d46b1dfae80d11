"""A round's profile runs beside its evaluation (Session._start_profile), on the GPU with the real ncu: the
profile of a wrong candidate is cancelled and never shown or stored; a correct candidate's profile is kept,
and it began before its evaluation ended."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.gpu
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
KEY_ENV = "CF_PROFILE_BESIDE_KEY"


def _coder(source: str) -> Any:
    from llm_server import Reply

    return Reply(text=f"Here is the module.\n\n```python\n{source}```\n")


def _judge_wrong() -> Any:
    """The Judge's reply after a wrong result: the issue to repair (not an optimization)."""
    from llm_server import Reply

    return Reply(text=json.dumps({"critical_issue": "positive inputs are doubled", "why_it_matters": "wrong result",
                                  "minimal_fix_hint": "return the value itself"}))


def _judge() -> Any:
    from llm_server import Reply

    return Reply(text=json.dumps({"bottleneck": "memory bound", "method": "tune the block size",
                                  "plan": "keep the kernel", "evidence": []}))


def test_a_wrong_candidates_profile_is_cancelled_and_a_correct_ones_kept(tmp_path: Path) -> None:
    if shutil.which("ncu") is None:
        pytest.skip("no ncu on PATH")
    from cudaforge.engine.config import load_config
    from cudaforge.engine.session import (
        CandidateEvaluated,
        CoderFailed,
        Notice,
        ProfileReady,
        RoundFinished,
        create_session,
    )
    from llm_server import ScriptedLLMServer

    correct = (EXAMPLES / "relu" / "nvrtc.py").read_text()
    wrong = correct.replace("return v < 0.f ? 0.f : v;", "return v < 0.f ? 0.f : 2.f * v;")
    assert wrong != correct
    os.environ[KEY_ENV] = "scripted-not-a-key"
    seen: list[tuple[float, str, int]] = []

    said: list[str] = []  # what the session said, for a failure's message

    def on_event(e: Any) -> None:
        if isinstance(e, (CandidateEvaluated, ProfileReady, RoundFinished)):
            seen.append((time.time(), type(e).__name__, e.round))
        if isinstance(e, (RoundFinished, Notice, CoderFailed)):
            said.append(repr(e)[:400])

    llm = {"provider": "openai-compatible", "model": "scripted", "api_key_env": KEY_ENV, "timeout_s": 60.0,
           "max_retries": 0}
    # Round 1 wrong (a repair follows), round 2 correct. Each reply is chosen by the request it answers (the
    # Judge's repair or optimization prompt, the Coder's first call or a later one), not by its place in a
    # list: a call the session adds or retries cannot shift the Coder's code into the Judge's turn.
    coder_calls = [0]

    def answer(req: Any) -> Any:
        if "You are the Judge" in req.system:
            return _judge_wrong() if "critical_issue" in req.system + req.last_user_text else _judge()
        coder_calls[0] += 1
        return _coder(wrong if coder_calls[0] == 1 else correct)

    with ScriptedLLMServer([answer] * 8) as server:
        flat: dict[str, Any] = {"eval.device": "cuda", "session.rounds": 2, "session.mode": "auto",
                                "session.format": "nvrtc", "run.folder": str(tmp_path / "runs"),
                                "run.cache_dir": str(tmp_path / "cache"), "budget.dollars": 10.0,
                                "eval.trials": 2, "budget.wall_minutes": 5.0}
        for role in ("coder", "judge"):
            flat.update({f"{role}.{k}": v for k, v in llm.items()} | {f"{role}.base_url": server.base_url_compat})
        session = create_session(EXAMPLES / "relu" / "task.py", load_config(None, flat, use_user_config=False),
                                 on_event=on_event)
        asyncio.run(session.run())
    kinds = [(name, n) for _, name, n in seen]
    asked = [(r.answered_with, r.system[:60]) for r in server.requests]  # which LLM calls the session made
    assert ("CandidateEvaluated", 1) in kinds and ("CandidateEvaluated", 2) in kinds, (kinds, said, asked)
    assert ("ProfileReady", 1) not in kinds, kinds  # the wrong candidate's profile: cancelled, never shown
    assert session.store.profile(1) is None
    assert ("ProfileReady", 2) in kinds, kinds
    stored = session.store.profile(2)
    assert stored is not None and stored[0] is not None
    profile = stored[0]
    if profile.error_kind in ("ncu_missing", "permission_denied"):
        pytest.skip(profile.message)
    assert profile.ok, profile.message
    # Its worker had its job before the evaluation's verdict (sequential, it would start after it), and its
    # result came in a moment after the verdict, besides the seconds its worker waited: for the GPU (its replay
    # holds the GPU alone: behind this round's timed window, and under pytest-xdist other tests' windows and
    # replays too; sequential, it took the whole ncu run after the verdict: 0.6-0.9 s on the H200), and for its
    # spare to finish warming up. The scripted replies come at once, so round 2's profile follows round 1's
    # cancelled one by a few seconds; under pytest-xdist the refilled spare's import took 3.8 s (H100, session
    # 26) and the job waited 3.0 s for it. That wait is the spare pool's, not the profile's (bench/spare_wait.py
    # measures it per round, alone on the GPU): it is counted here as the GPU wait is.
    evaluated = next(t for t, name, n in seen if name == "CandidateEvaluated" and n == 2)
    profiled = next(t for t, name, n in seen if name == "ProfileReady" and n == 2)
    waited = profile.worker_phases.get("gpu_wait", 0.0) + profile.worker_phases.get("spare_wait", 0.0)
    take = getattr(session.profiler, "last_take", None)  # what round 2's profile found in the spare pool
    figures = {"profile_after_evaluation_s": round(profiled - evaluated, 3), "profile_wall_s": round(profile.wall_s, 3),
               "profile_waited_s": waited, "profile_worker_phases": profile.worker_phases,
               "spare_take": dataclasses.asdict(take) if take is not None else None}
    print(json.dumps(figures), file=sys.stderr)
    assert profiled - profile.wall_s < evaluated, figures
    assert profiled - evaluated < 0.5 + waited, figures
