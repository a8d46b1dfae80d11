"""LLMClient over the real openai/anthropic SDKs, against the scripted server on 127.0.0.1.

Each provider round-trips; each fault ends in its documented behaviour; request parameters
follow the model's rules (temperature, reasoning effort, thinking budget); keys stay in auth
headers only. Timeouts and Retry-After are small so the whole file runs in a few seconds.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterator

import pytest
from cudaforge.engine.llm import LLMError, LLMReply, LLMSettings, Message, make_client, price_of
from llm_server import TRUNCATED_TEXT, Fault, Reply, ScriptedLLMServer

OPENAI_KEY = "sk-test-openai-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-test-0123456789abcdef"
ENV = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
HELLO = [Message("user", "Say hello.")]
SettingsFor = Callable[..., LLMSettings]


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as srv:
        yield srv


def openai_settings(srv: ScriptedLLMServer, **kw: object) -> LLMSettings:
    base = {
        "provider": "openai",
        "model": "gpt-5",
        "base_url": srv.base_url_openai,
        "timeout_s": 2.0,
        "max_retries": 2,
    }
    return LLMSettings(**{**base, **kw})  # type: ignore[arg-type]


def anthropic_settings(srv: ScriptedLLMServer, **kw: object) -> LLMSettings:
    base = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-6",
        "base_url": srv.base_url_anthropic,
        "timeout_s": 2.0,
        "max_retries": 2,
        "max_output_tokens": 8000,
    }
    return LLMSettings(**{**base, **kw})  # type: ignore[arg-type]


def compat_settings(srv: ScriptedLLMServer, **kw: object) -> LLMSettings:
    base = {
        "provider": "openai-compatible",
        "model": "qwen3-coder",
        "base_url": srv.base_url_compat,
        "timeout_s": 2.0,
    }
    return LLMSettings(**{**base, **kw})  # type: ignore[arg-type]


async def complete(
    settings: LLMSettings, messages: list[Message] = HELLO, system: str = "You are terse."
) -> LLMReply | LLMError:
    async with make_client(settings, env=ENV) as client:
        return await client.complete(system, messages)


# -- round trips -------------------------------------------------------------------------------------


async def test_openai_round_trip(server: ScriptedLLMServer) -> None:
    server.push(
        Reply(
            text="hello", input_tokens=1000, cached_input_tokens=400, output_tokens=300, reasoning_tokens=200
        )
    )
    reply = await complete(openai_settings(server))
    assert isinstance(reply, LLMReply), reply
    assert reply.text == "hello" and reply.finish_reason == "stop"
    assert reply.usage.input_tokens == 1000 and reply.usage.cached_input_tokens == 400
    assert reply.usage.output_tokens == 300 and reply.usage.reasoning_tokens == 200
    assert reply.cost_usd == pytest.approx(price_of("gpt-5", reply.usage))
    assert reply.cost_usd == pytest.approx((600 * 1.25 + 400 * 0.125 + 300 * 10.0) / 1e6)
    assert reply.latency_s > 0
    (req,) = server.requests
    assert req.path == "/openai/v1/chat/completions"
    assert req.system == "You are terse."
    assert req.messages == [{"role": "user", "content": "Say hello."}]
    assert req.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    # gpt-5 is a reasoning model: the output limit is max_completion_tokens, no temperature.
    assert req.body["max_completion_tokens"] == 32000
    assert "temperature" not in req.body and "max_tokens" not in req.body
    assert reply.request["model"] == "gpt-5" and reply.response["choices"][0]["message"]["content"] == "hello"


async def test_anthropic_round_trip_streams_with_thinking(server: ScriptedLLMServer) -> None:
    server.push(
        Reply(
            text="hello",
            thinking="let me think",
            input_tokens=2000,
            cached_input_tokens=500,
            cache_write_tokens=300,
            output_tokens=900,
            reasoning_tokens=600,
        )
    )
    reply = await complete(anthropic_settings(server, thinking_budget=2048, temperature=0.2))
    assert isinstance(reply, LLMReply), reply
    assert reply.text == "hello" and reply.thinking == "let me think"
    assert reply.usage.input_tokens == 2000  # normalised: includes cache reads and writes
    assert reply.usage.cached_input_tokens == 500 and reply.usage.cache_write_tokens == 300
    assert reply.usage.output_tokens == 900 and reply.usage.reasoning_tokens == 600
    expected = (1200 * 3.0 + 500 * 0.30 + 300 * 3.75 + 900 * 15.0) / 1e6  # thinking billed as output
    assert reply.cost_usd == pytest.approx(expected)
    (req,) = server.requests
    assert req.path == "/anthropic/v1/messages"
    assert req.body["stream"] is True
    assert req.body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert req.body["max_tokens"] == 8000
    assert "temperature" not in req.body  # refused while thinking
    assert any("temperature left out" in n for n in reply.notes)
    assert ANTHROPIC_KEY in (
        req.headers.get("x-api-key", ""),
        req.headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert req.system == "You are terse."


async def test_anthropic_temperature_follows_the_installed_sdk(server: ScriptedLLMServer) -> None:
    """Older anthropic SDKs take temperature; the installed one may not (its API dropped it)."""
    import anthropic

    server.push(Reply(text="hi"))
    reply = await complete(anthropic_settings(server, temperature=0.3))
    assert isinstance(reply, LLMReply), reply
    (req,) = server.requests
    assert "thinking" not in req.body
    if "temperature" in inspect.signature(anthropic.AsyncAnthropic(api_key="x").messages.stream).parameters:
        assert req.body["temperature"] == 0.3
    else:
        assert "temperature" not in req.body and "temperature" not in reply.request
        assert any("temperature left out" in n for n in reply.notes)


async def test_anthropic_reasoning_effort_uses_adaptive_thinking(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="hi"))
    await complete(anthropic_settings(server, reasoning_effort="high"))
    body = server.requests[0].body
    assert body["thinking"] == {"type": "adaptive"} and body["output_config"] == {"effort": "high"}


async def test_openai_compatible_keyless_round_trip(
    server: ScriptedLLMServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_ORG_ID", "org-private")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-private")
    server.push(Reply(text="hi from vllm", thinking="reasoning text"))
    reply = await complete(compat_settings(server, temperature=0.7, reasoning_effort="low"))
    assert isinstance(reply, LLMReply), reply
    assert reply.text == "hi from vllm" and reply.thinking == "reasoning text"
    assert reply.cost_usd == 0.0  # a model on this machine: the "local" profile
    (req,) = server.requests
    assert req.path == "/compat/v1/chat/completions"
    assert req.headers["authorization"] == "Bearer cudaforge-no-key"
    assert OPENAI_KEY not in str(req.headers)  # the real key is never sent to a third party
    assert "openai-organization" not in req.headers and "openai-project" not in req.headers
    assert req.body["max_tokens"] == 32000 and req.body["temperature"] == 0.7
    assert req.body["reasoning_effort"] == "low"


async def test_openai_non_reasoning_model_takes_temperature(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="hi"))
    reply = await complete(openai_settings(server, model="gpt-4.1", temperature=0.1, reasoning_effort="high"))
    body = server.requests[0].body
    assert body["temperature"] == 0.1 and "reasoning_effort" not in body
    assert body["max_completion_tokens"] == 32000  # below gpt-4.1's limit of 32768: unchanged
    assert isinstance(reply, LLMReply) and any("reasoning_effort left out" in n for n in reply.notes)


async def test_reasoning_effort_and_output_limit_clamp(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="hi"), Reply(text="hi"))
    reply = await complete(
        openai_settings(
            server, model="o3", reasoning_effort="high", temperature=0.5, max_output_tokens=200_000
        )
    )
    body = server.requests[0].body
    assert body["reasoning_effort"] == "high" and "temperature" not in body
    assert body["max_completion_tokens"] == 100_000  # o3's output limit
    assert isinstance(reply, LLMReply) and any("clamped" in n for n in reply.notes)
    # An unknown OpenAI o-series name is still treated as a reasoning model.
    await complete(openai_settings(server, model="o9-preview", temperature=0.5))
    assert "temperature" not in server.requests[1].body


# -- faults --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_429_with_retry_after_is_retried_by_the_sdk(
    server: ScriptedLLMServer, settings_for: SettingsFor
) -> None:
    server.push(Fault("429", retry_after=0.05), Reply(text="after the wait"))
    start = time.monotonic()
    reply = await complete(settings_for(server))
    assert isinstance(reply, LLMReply) and reply.text == "after the wait"
    assert [r.answered_with for r in server.requests] == ["fault:429", "reply"]
    assert server.requests[1].headers.get("x-stainless-retry-count") == "1"  # the SDK's own retry
    assert time.monotonic() - start >= 0.05


@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_500_is_retried_then_succeeds(server: ScriptedLLMServer, settings_for: SettingsFor) -> None:
    server.push(Fault("500", retry_after=0.01), Reply(text="ok"))
    reply = await complete(settings_for(server))
    assert isinstance(reply, LLMReply) and reply.text == "ok"
    assert len(server.requests) == 2


async def test_persistent_429_becomes_rate_limited_after_sdk_retries(server: ScriptedLLMServer) -> None:
    server.push(*[Fault("429", retry_after=0.01)] * 3)
    result = await complete(openai_settings(server, max_retries=2))
    assert isinstance(result, LLMError) and result.kind == "rate_limited" and result.status == 429
    assert len(server.requests) == 3  # 1 + max_retries: no second retry layer on top of the SDK


async def test_overloaded_anthropic_is_server_error(server: ScriptedLLMServer) -> None:
    server.push(Fault("529", retry_after=0.01), Fault("529", retry_after=0.01))
    result = await complete(anthropic_settings(server, max_retries=1))
    assert isinstance(result, LLMError) and result.kind == "server_error" and result.status == 529


@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_stall_past_timeout_is_a_timeout_error(
    server: ScriptedLLMServer, settings_for: SettingsFor
) -> None:
    server.push(Fault("stall", stall_s=10))
    start = time.monotonic()
    result = await complete(settings_for(server, timeout_s=0.3, max_retries=0))
    assert isinstance(result, LLMError) and result.kind == "timeout", result
    assert time.monotonic() - start < 3
    assert "timed out" in result.message.lower()


@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_truncated_reply_is_an_error_value_with_billed_usage(
    server: ScriptedLLMServer, settings_for
) -> None:
    server.push(Fault("truncated"))
    result = await complete(settings_for(server))
    assert isinstance(result, LLMError) and result.kind == "truncated"
    assert result.partial_text == TRUNCATED_TEXT
    assert result.usage is not None and result.usage.output_tokens > 0
    assert result.cost_usd is not None and result.cost_usd > 0
    assert "output limit" in result.message
    assert len(server.requests) == 1  # not a transport failure: the SDK does not retry it


@pytest.mark.parametrize(
    ("fault", "kind"),
    [("401", "auth"), ("403", "auth"), ("404", "not_found"), ("400", "bad_request"), ("disconnect", "connection")],
)
@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_other_failures_become_error_values(
    server: ScriptedLLMServer, settings_for: SettingsFor, fault: str, kind: str
) -> None:
    server.push(Fault(fault))  # type: ignore[arg-type]
    result = await complete(settings_for(server, max_retries=0))
    assert isinstance(result, LLMError) and result.kind == kind, result
    assert result.provider == settings_for(server).provider
    assert result.one_line().startswith(kind)


async def test_error_event_inside_anthropic_stream(server: ScriptedLLMServer) -> None:
    server.push(Fault("stream_error"))
    result = await complete(anthropic_settings(server, max_retries=0))
    assert isinstance(result, LLMError) and result.kind == "server_error"
    assert "overload" in result.message


async def test_unreachable_server_is_a_connection_error() -> None:
    with ScriptedLLMServer() as srv:
        url = srv.base_url_openai
    settings = LLMSettings(provider="openai", model="gpt-5", base_url=url, timeout_s=1.0, max_retries=0)
    result = await complete(settings)
    assert isinstance(result, LLMError) and result.kind == "connection"


async def test_refusal_is_an_error_value(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="", finish="refusal"))
    result = await complete(anthropic_settings(server))
    assert isinstance(result, LLMError) and result.kind == "refused"


@pytest.mark.parametrize("settings_for", [openai_settings, anthropic_settings])
async def test_cancellation_propagates_promptly(server: ScriptedLLMServer, settings_for: SettingsFor) -> None:
    server.push(Fault("stall", stall_s=10))
    client = make_client(settings_for(server, timeout_s=30), env=ENV)
    task = asyncio.create_task(client.complete("s", HELLO))
    for _ in range(100):  # wait until the request reached the server
        if server.requests:
            break
        await asyncio.sleep(0.02)
    start = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert time.monotonic() - start < 1.0
    await client.aclose()


async def test_key_never_in_reply_request_or_error(server: ScriptedLLMServer) -> None:
    # A hostile or buggy server echoing the key back must not get it into our records.
    server.push(Reply(text=f"your key is {OPENAI_KEY}"), Fault("401"))
    async with make_client(openai_settings(server, max_retries=0), env=ENV) as client:
        reply = await client.complete("s", HELLO)
        error = await client.complete("s", HELLO)
    assert isinstance(reply, LLMReply) and isinstance(error, LLMError)
    assert OPENAI_KEY not in str(reply.to_dict())
    assert OPENAI_KEY not in str(error.to_dict())
    assert server.leaks(OPENAI_KEY) == []


async def test_reasoning_that_eats_the_whole_limit_says_so(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="", finish="length", output_tokens=500, reasoning_tokens=500))
    result = await complete(openai_settings(server, max_output_tokens=500))
    assert isinstance(result, LLMError) and result.kind == "truncated"
    assert "reasoning used it all" in result.message


async def test_concurrent_calls_share_one_client(server: ScriptedLLMServer) -> None:
    server.push(Reply(text="a"), Reply(text="a"))
    async with make_client(compat_settings(server), env=ENV) as client:
        replies = await asyncio.gather(client.complete("s", HELLO), client.complete("s", HELLO))
    assert all(isinstance(r, LLMReply) and r.text == "a" for r in replies)


def test_client_survives_a_new_event_loop(server: ScriptedLLMServer) -> None:
    """The CLI may call asyncio.run more than once with the same client."""
    server.push(Reply(text="first"), Reply(text="second"))
    client = make_client(compat_settings(server), env=ENV)
    first = asyncio.run(client.complete("s", HELLO))
    second = asyncio.run(client.complete("s", HELLO))
    assert isinstance(first, LLMReply) and isinstance(second, LLMReply), second
    assert (first.text, second.text) == ("first", "second")


async def test_missing_sdk_is_an_error_value(server: ScriptedLLMServer) -> None:
    """On a machine without the SDK (the GPU worker's), a call is an error, not an ImportError."""
    client = make_client(compat_settings(server), env=ENV)
    client._sdk_module = "cudaforge_no_such_sdk"
    result = await client.complete("s", HELLO)
    assert isinstance(result, LLMError) and result.kind == "not_installed" and result.repeats
    assert "cudaforge_no_such_sdk is not installed" in result.message
    assert "pip install cudaforge_no_such_sdk" in result.message
    assert server.requests == []
