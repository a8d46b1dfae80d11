"""The scripted test server itself: what later session and TUI tests rely on."""

from __future__ import annotations

import json
import urllib.request

import openai
from cudaforge.engine.llm import LLMError, LLMReply, LLMSettings, Message, make_client
from llm_server import Fault, RecordedRequest, Reply, ScriptedLLMServer


async def test_callable_entries_answer_from_the_request() -> None:
    def echo(request: RecordedRequest) -> Reply | Fault:
        return Reply(text=f"you said: {request.last_user_text}")

    with ScriptedLLMServer([echo]) as srv:
        settings = LLMSettings(
            provider="openai-compatible", model="m", base_url=srv.base_url_compat, timeout_s=2
        )
        async with make_client(settings) as client:
            reply = await client.complete("s", [Message("user", "ping")])
        assert isinstance(reply, LLMReply) and reply.text == "you said: ping"
        assert srv.remaining == 0


async def test_exhausted_script_fails_loudly_without_retries() -> None:
    with ScriptedLLMServer() as srv:
        settings = LLMSettings(
            provider="openai-compatible", model="m", base_url=srv.base_url_compat, max_retries=3
        )
        async with make_client(settings) as client:
            result = await client.complete("s", [Message("user", "x")])
        assert isinstance(result, LLMError) and "script exhausted" in result.message
        assert len(srv.requests) == 1  # x-should-retry: false


async def test_openai_streaming_is_served_for_clients_that_stream() -> None:
    with ScriptedLLMServer([Reply(text="streamed " * 20, output_tokens=40)]) as srv:
        client = openai.AsyncOpenAI(api_key="k", base_url=srv.base_url_openai, max_retries=0)
        stream = await client.chat.completions.create(
            model="gpt-5",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        parts, usage, finish = [], None, None
        async for chunk in stream:
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish
            if chunk.usage:
                usage = chunk.usage
        await client.close()
    assert "".join(parts) == "streamed " * 20 and finish == "stop"
    assert usage is not None and usage.completion_tokens == 40


def test_models_endpoint_and_recorded_requests() -> None:
    with ScriptedLLMServer() as srv:
        with urllib.request.urlopen(f"{srv.base_url_compat}/models") as resp:
            assert json.load(resp)["data"][0]["id"] == "scripted"
        srv.push(Reply(text="x"))
        body = json.dumps(
            {"model": "m", "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]}
        )
        req = urllib.request.Request(
            f"{srv.base_url_openai}/chat/completions",
            data=body.encode(),
            headers={"content-type": "application/json", "authorization": "Bearer secret-key-123"},
        )
        with urllib.request.urlopen(req) as resp:
            assert json.load(resp)["choices"][0]["message"]["content"] == "x"
        (rec,) = srv.requests
        assert (rec.api, rec.model, rec.system, rec.last_user_text) == ("openai", "m", "S", "U")
        assert rec.answered_with == "reply" and srv.leaks("secret-key-123") == []
