"""The Judge through real SDK clients and the scripted server: schema, retry once, fallback."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cudaforge.engine.agents import (
    FALLBACK_MARK,
    Judge,
    OfflineJudge,
    offline_fallback,
    parse_judge_reply,
    validate_judge_json,
)
from cudaforge.engine.llm import LLMSettings, make_client
from cudaforge.engine.results import CompileResult, EvalResult
from llm_server import Fault, Reply, ScriptedLLMServer

KEY = "sk-test-judge-0123456789abcdef"
ENV = {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
TASK = "import torch.nn as nn\n\nclass Model(nn.Module):\n    pass\n"
CANDIDATE = "class ModelNew:\n    pass\n"
FAILED = EvalResult(
    outcome="compile_error",
    accepted=False,
    task_path="t.py",
    candidate_hash="h",
    format="nvrtc",
    device="cuda:0",
    compile=CompileResult(
        ok=False, format="nvrtc", log='note: in kernel k\nk.cu(7): error: identifier "n" is undefined'
    ),
)
CORRECT_JSON = json.dumps(
    {
        "critical_issue": "n is not a kernel parameter",
        "why_it_matters": "NVRTC stops",
        "minimal_fix_hint": "pass n",
    }
)
METRICS = {
    "k": {
        "dram__throughput.avg.pct_of_peak_sustained_elapsed": (91.0, "%"),
        "gpu__time_duration.sum": (12.0, "us"),
    }
}
OPTIMIZE = {
    "bottleneck": "DRAM bandwidth: 91% of peak",
    "method": "fuse the two passes",
    "plan": "read x once, keep the row in shared memory",
    "evidence": ["dram__throughput.avg.pct_of_peak_sustained_elapsed", "made_up__metric.sum"],
}


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as srv:
        yield srv


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return request.param


def judge_for(srv: ScriptedLLMServer, provider: str = "openai", **kw: object) -> Judge:
    if provider == "anthropic":
        base = {
            "provider": "anthropic",
            "model": "claude-haiku-4-5",
            "base_url": srv.base_url_anthropic,
            "max_output_tokens": 4000,
        }
    else:
        base = {"provider": "openai", "model": "o4-mini", "base_url": srv.base_url_openai}
    settings = LLMSettings(**{**base, "timeout_s": 2.0, "max_retries": 1, **kw})  # type: ignore[arg-type]
    return Judge(make_client(settings, env=ENV), gpu_summary="NVIDIA H200")


async def test_correction_mode_valid_reply(server: ScriptedLLMServer, provider: str) -> None:
    server.push(Reply(text=CORRECT_JSON))
    reply = await judge_for(server, provider).correct(
        TASK, candidate_source=CANDIDATE, result=FAILED, round=2
    )
    assert not reply.fallback and reply.error is None
    assert reply.critical_issue == "n is not a kernel parameter" and reply.minimal_fix_hint == "pass n"
    assert reply.as_text().startswith("Critical issue: n is not a kernel parameter")
    assert [r.purpose for r in reply.records] == ["correct"] and reply.records[0].round == 2
    text = server.requests[0].last_user_text
    assert 'k.cu(7): error: identifier "n" is undefined' in text and "Mode: correction" in text


async def test_fenced_json_with_prose_is_accepted(server: ScriptedLLMServer) -> None:
    server.push(Reply(text=f"Here is my diagnosis.\n```json\n{CORRECT_JSON}\n```"))
    reply = await judge_for(server).correct(TASK, candidate_source=CANDIDATE, result=FAILED)
    assert not reply.fallback and len(server.requests) == 1


async def test_invalid_json_is_retried_once_with_the_error(server: ScriptedLLMServer, provider: str) -> None:
    server.push(Fault("bad_json"), Reply(text=CORRECT_JSON))
    reply = await judge_for(server, provider).correct(TASK, candidate_source=CANDIDATE, result=FAILED)
    assert not reply.fallback and reply.critical_issue
    assert [r.purpose for r in reply.records] == ["correct", "correct/retry"]
    retry = server.requests[1].messages
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert "could not be used: the JSON does not parse" in retry[2]["content"]
    assert '"critical_issue", "why_it_matters", "minimal_fix_hint"' in retry[2]["content"]


async def test_invalid_twice_gives_a_marked_fallback(server: ScriptedLLMServer, provider: str) -> None:
    server.push(Fault("bad_json"), Fault("bad_json"))
    reply = await judge_for(server, provider).correct(TASK, candidate_source=CANDIDATE, result=FAILED)
    assert reply.fallback and reply.error is None
    assert reply.fallback_reason.startswith("invalid reply twice: the JSON does not parse")
    assert reply.as_text().startswith(FALLBACK_MARK)
    assert 'k.cu(7): error: identifier "n" is undefined' in reply.critical_issue  # first error from the log
    assert len(reply.records) == 2


async def test_missing_key_is_named_in_the_retry(server: ScriptedLLMServer) -> None:
    partial = {k: v for k, v in OPTIMIZE.items() if k != "plan"}
    server.push(Reply(text=json.dumps(partial)), Reply(text=json.dumps(OPTIMIZE)))
    reply = await judge_for(server).optimize(TASK, candidate_source=CANDIDATE, result=None, metrics=METRICS)
    assert not reply.fallback and reply.plan
    assert "missing key(s) 'plan'" in server.requests[1].last_user_text


async def test_optimization_mode_flags_evidence_not_in_the_metrics(
    server: ScriptedLLMServer, provider: str
) -> None:
    server.push(Reply(text=json.dumps(OPTIMIZE)))
    reply = await judge_for(server, provider).optimize(
        TASK, candidate_source=CANDIDATE, result=None, metrics=METRICS, findings=["DRAM-bound"], round=3
    )
    assert not reply.fallback
    assert reply.method == "fuse the two passes"
    assert reply.evidence == ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "made_up__metric.sum")
    assert reply.unknown_evidence == ("made_up__metric.sum",)
    text = server.requests[0].last_user_text
    assert "dram__throughput.avg.pct_of_peak_sustained_elapsed = 91 %" in text and "- DRAM-bound" in text
    assert "NVIDIA H200" in text
    assert reply.fields()["evidence"] == list(reply.evidence)


async def test_failed_call_gives_a_fallback_carrying_the_error(server: ScriptedLLMServer) -> None:
    server.push(Fault("500"), Fault("500"))
    reply = await judge_for(server, max_retries=1).optimize(TASK, candidate_source=CANDIDATE, result=None)
    assert reply.fallback and reply.error is not None and reply.error.kind == "server_error"
    assert reply.fallback_reason.startswith("the call failed: server_error 500")
    assert reply.as_text().startswith(FALLBACK_MARK)
    # the offline Judge answered, in the LLM Judge's mode (no profile: the usual first step)
    assert reply.bottleneck.startswith("unknown: no hardware metrics") and reply.plan
    assert len(server.requests) == 2  # the SDK's retry only; the Judge does not retry transport errors


async def test_truncated_json_is_retried_then_accepted(server: ScriptedLLMServer) -> None:
    server.push(Fault("truncated", text='{"critical_issue": "n is'), Reply(text=CORRECT_JSON))
    reply = await judge_for(server).correct(TASK, candidate_source=CANDIDATE, result=FAILED)
    assert not reply.fallback
    assert "cut off at the output limit" in server.requests[1].last_user_text


def test_schema_validation_rules() -> None:
    assert validate_judge_json(
        {"critical_issue": "a", "why_it_matters": "b", "minimal_fix_hint": "c", "extra": 1}, "correct"
    )[0]
    assert validate_judge_json(
        {"critical_issue": "a", "why_it_matters": "", "minimal_fix_hint": "c"}, "correct"
    ) == (
        None,
        "'why_it_matters' is empty",
    )
    assert validate_judge_json(
        {"critical_issue": 1, "why_it_matters": "b", "minimal_fix_hint": "c"}, "correct"
    )[1] == ("'critical_issue' must be a string, got int")
    bad = {**OPTIMIZE, "evidence": [1, 2]}
    assert validate_judge_json(bad, "optimize")[1] == "'evidence' must be a list of metric-name strings"
    one = validate_judge_json(
        {**OPTIMIZE, "evidence": "sm__throughput.avg.pct_of_peak_sustained_elapsed"}, "optimize"
    )[0]
    assert one is not None and one["evidence"] == ("sm__throughput.avg.pct_of_peak_sustained_elapsed",)
    assert parse_judge_reply("nothing", "optimize") == (None, "the reply contains no JSON object")


def test_fallback_is_the_offline_judge() -> None:
    opt = offline_fallback("optimize", "x")
    assert opt.fallback and opt.method and opt.plan and opt.evidence == ()
    assert opt.fields() == OfflineJudge().optimize(None).fields()
    cor = offline_fallback("correct", "x", error_log="")
    assert "(none found)" in cor.critical_issue
    assert cor.to_dict()["fallback"] is True
    with_result = offline_fallback("correct", "x", result=FAILED)
    assert with_result.fields() == OfflineJudge().correct(FAILED).fields()
    assert with_result.critical_issue.startswith("the candidate does not compile")


async def test_invalid_twice_falls_back_to_the_offline_judge_on_the_result(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="no json"), Reply(text="still none"))
    reply = await judge_for(server).correct(TASK, candidate_source=CANDIDATE, result=FAILED)
    assert reply.fallback and reply.mode == "correct"
    assert reply.fields() == OfflineJudge().correct(FAILED).fields()
