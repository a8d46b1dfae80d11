"""The Coder through real SDK clients and the scripted server: modes, retry-once, errors, budget."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cudaforge.engine.agents import Coder, CoderReply, JudgeReply, RoundNote
from cudaforge.engine.llm import (
    CallRecord,
    LLMError,
    LLMReply,
    LLMSettings,
    Message,
    Usage,
    UsageLedger,
    make_client,
)
from cudaforge.engine.results import CompileResult, EvalResult
from llm_server import NO_CODE_TEXT, Fault, Reply, ScriptedLLMServer

KEY = "sk-test-coder-0123456789abcdef"
ENV = {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY}
TASK = "import torch\nimport torch.nn as nn\n\nclass Model(nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
MODULE = (
    "import torch\nimport torch.nn as nn\nfrom cudaforge.engine.nvrtc import load_kernel\n\n"
    "class ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
)
GOOD = f"I wrote an element-wise kernel.\n\n```python\n{MODULE}```\n"


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as srv:
        yield srv


@pytest.fixture(params=["openai", "anthropic"])
def provider(request: pytest.FixtureRequest) -> str:
    return request.param


def coder_for(
    srv: ScriptedLLMServer, provider: str = "openai", ledger: UsageLedger | None = None, **kw: object
) -> Coder:
    if provider == "anthropic":
        settings = LLMSettings(
            provider="anthropic",
            model="claude-sonnet-4-5",
            base_url=srv.base_url_anthropic,
            max_output_tokens=8000,
        )
    else:
        settings = LLMSettings(provider="openai", model="gpt-5", base_url=srv.base_url_openai)
    settings = LLMSettings(**{**settings.__dict__, "timeout_s": 2.0, "max_retries": 2, **kw})  # type: ignore[arg-type]
    return Coder(make_client(settings, env=ENV), gpu_summary="NVIDIA H200", ledger=ledger)


async def test_seed_returns_the_module_and_records_the_call(server: ScriptedLLMServer, provider: str) -> None:
    server.push(Reply(text=GOOD))
    ledger = UsageLedger()
    seen: list[CallRecord] = []
    coder = coder_for(server, provider, ledger)
    coder.on_record = seen.append
    reply = await coder.seed(TASK, round=1)
    assert reply.ok and reply.source == MODULE and reply.error is None
    assert reply.explanation == "I wrote an element-wise kernel."
    assert [r.purpose for r in reply.records] == ["seed"] and reply.records[0].round == 1
    assert ledger.records == list(reply.records) == seen
    assert reply.cost_usd is not None and reply.cost_usd > 0
    (req,) = server.requests
    assert "Candidate format: nvrtc" in req.system
    assert TASK.strip() in req.last_user_text and "NVIDIA H200" in req.last_user_text
    assert coder.notice().startswith("Coder: the task and kernel source will be sent to")


async def test_reply_without_code_is_retried_once_with_the_reason(
    server: ScriptedLLMServer, provider: str
) -> None:
    server.push(Fault("no_code"), Reply(text=GOOD))
    reply = await coder_for(server, provider).seed(TASK)
    assert reply.ok and reply.source == MODULE
    assert [r.purpose for r in reply.records] == ["seed", "seed/retry"]
    retry = server.requests[1].messages
    assert [m["role"] for m in retry] == ["user", "assistant", "user"]
    assert retry[1]["content"] == NO_CODE_TEXT
    assert "could not be used: the reply contains no code" in retry[2]["content"]


async def test_no_code_twice_is_an_error_value(server: ScriptedLLMServer) -> None:
    server.push(Fault("no_code"), Fault("no_code"))
    reply = await coder_for(server).seed(TASK)
    assert not reply.ok and reply.source is None
    assert reply.error is not None and reply.error.kind == "no_module"
    assert "after 2 replies: the reply contains no code" in reply.error.message
    assert len(server.requests) == 2 and len(reply.records) == 2


async def test_syntax_error_is_sent_back_as_the_reason(server: ScriptedLLMServer) -> None:
    broken = "```python\nclass ModelNew(nn.Module):\n    def forward(self, x)\n        return x\n```"
    server.push(Reply(text=broken), Reply(text=GOOD))
    reply = await coder_for(server).seed(TASK)
    assert reply.ok
    assert "syntax error at line 2" in server.requests[1].last_user_text


async def test_empty_reply_retry_folds_the_note_into_the_prompt(server: ScriptedLLMServer) -> None:
    server.push(Reply(text=""), Reply(text=GOOD))
    reply = await coder_for(server, "anthropic").seed(TASK)
    assert reply.ok
    retry = server.requests[1].messages
    assert len(retry) == 1 and "the reply was empty" in retry[0]["content"]


async def test_truncated_reply_is_retried_with_a_brevity_note(
    server: ScriptedLLMServer, provider: str
) -> None:
    server.push(Fault("truncated"), Reply(text=GOOD))
    reply = await coder_for(server, provider).seed(TASK)
    assert reply.ok
    assert [r.error_kind for r in reply.records] == ["truncated", None]
    assert reply.records[0].usage.output_tokens > 0  # a truncated call still costs
    retry = server.requests[1].messages
    assert len(retry) == 1 and "cut off at the output limit" in retry[0]["content"]


async def test_truncated_twice_is_a_truncated_error(server: ScriptedLLMServer) -> None:
    server.push(Fault("truncated"), Fault("truncated"))
    reply = await coder_for(server).seed(TASK)
    assert reply.error is not None and reply.error.kind == "truncated"


async def test_truncated_after_a_complete_module_is_accepted(server: ScriptedLLMServer) -> None:
    server.push(Fault("truncated", text=GOOD + "\nThis works because the kernel is element-wise and"))
    reply = await coder_for(server).seed(TASK)
    assert reply.ok and reply.source == MODULE and len(server.requests) == 1


async def test_transport_errors_are_not_retried_by_the_coder(server: ScriptedLLMServer) -> None:
    server.push(Fault("401"))
    reply = await coder_for(server).seed(TASK)
    assert reply.error is not None and reply.error.kind == "auth"
    assert len(server.requests) == 1
    server.push(*[Fault("429", retry_after=0.01)] * 3)
    reply = await coder_for(server, max_retries=2).seed(TASK)
    assert reply.error is not None and reply.error.kind == "rate_limited"
    assert len(server.requests) == 1 + 3  # the SDK's 1 + max_retries, nothing more


async def test_budget_cap_stops_before_the_call(server: ScriptedLLMServer) -> None:
    ledger = UsageLedger(cap_usd=0.01)
    spent = CallRecord.from_result(
        (await _paid_reply(server)),
        agent="coder",
        purpose="seed",
        round=1,
        attempt=1,
        system="s",
        messages=(),
    )
    ledger.add(spent)
    assert ledger.exceeded()
    before = len(server.requests)
    reply = await coder_for(server, ledger=ledger).seed(TASK, round=2)
    assert reply.error is not None and reply.error.kind == "budget"
    assert "dollar cap ($0.01) is reached" in reply.error.message
    assert len(server.requests) == before and reply.records == ()


async def _paid_reply(srv: ScriptedLLMServer) -> LLMReply | LLMError:  # costs ~$0.02 at gpt-5 prices
    srv.push(Reply(text="x", input_tokens=1000, output_tokens=2000))
    async with make_client(
        LLMSettings(provider="openai", model="gpt-5", base_url=srv.base_url_openai), env=ENV
    ) as c:
        return await c.complete("s", [Message("user", "u")])


async def test_repair_and_optimize_prompts_carry_judge_and_measurement(server: ScriptedLLMServer) -> None:
    server.push(Reply(text=GOOD), Reply(text=GOOD))
    result = EvalResult(
        outcome="compile_error",
        accepted=False,
        task_path="t.py",
        candidate_hash="h",
        format="nvrtc",
        device="cuda:0",
        compile=CompileResult(ok=False, format="nvrtc", log="k.cu(3): error: expected a ';'"),
    )
    judge = JudgeReply(
        mode="correct", critical_issue="missing ';'", why_it_matters="no build", minimal_fix_hint="add it"
    )
    coder = coder_for(server)
    history = [RoundNote(1, "seed", "compile_error", detail="expected a ';'")]
    reply = await coder.repair(
        TASK, candidate_source=MODULE, result=result, recommendation=judge, history=history, round=2
    )
    assert reply.ok and reply.purpose == "repair"
    text = server.requests[0].last_user_text
    assert "Critical issue: missing ';'" in text and "k.cu(3): error: expected a ';'" in text
    assert "- round 1 [seed]: compile_error" in text
    reply = await coder.optimize(
        TASK, candidate_source=MODULE, result=None, recommendation="use float4 loads", round=3
    )
    assert reply.ok and "use float4 loads" in server.requests[1].last_user_text
    assert reply.usage.total_tokens > 0


async def test_cpu_format_prompt(server: ScriptedLLMServer) -> None:
    server.push(Reply(text=GOOD))
    coder = coder_for(server)
    coder.format = "cpu"
    await coder.seed(TASK)
    assert "Candidate format: cpu" in server.requests[0].system


def test_reply_usage_sums_records() -> None:
    rec = CallRecord(
        call_id="c",
        agent="coder",
        purpose="seed",
        round=1,
        attempt=1,
        provider="openai",
        model="m",
        started_at=0,
        latency_s=0,
        system="",
        messages=(),
        params={},
        usage=Usage(input_tokens=10, output_tokens=5),
        cost_usd=None,
    )
    reply = CoderReply(purpose="seed", source=None, records=(rec, rec))
    assert reply.usage.total_tokens == 30 and reply.cost_usd is None  # unknown, not zero
