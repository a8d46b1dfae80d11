"""One async interface, `LLMClient.complete`, over the official openai and anthropic SDKs.

Design points (each is a rule from DESIGN.md):
- The SDKs are imported lazily, inside the client, because the GPU worker path has neither.
- Retries on 429/5xx/timeouts/connection errors come only from the SDK (`max_retries`, `timeout`,
  which honour Retry-After); this module never loops on a failed call.
- A failed call is returned as an `LLMError` value; only cancellation propagates.
- OpenAI and OpenAI-compatible servers use Chat Completions (the API every local server speaks);
  Anthropic always streams, so large max_tokens and extended thinking never hit the SDK's
  non-streaming time limit, and the final message is assembled by the SDK's stream helper.
"""

from __future__ import annotations

import abc
import asyncio
import importlib
import inspect
import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cudaforge.engine.errors import ConfigError
from cudaforge.engine.llm.prices import PriceSheet, find_price_sheet, price_of
from cudaforge.engine.llm.settings import PLACEHOLDER_API_KEY, LLMSettings, check_api_key, provider_notice
from cudaforge.engine.llm.types import ErrorKind, LLMError, LLMReply, LLMResult, Message, Usage

_MAX_ERROR_CHARS = 2000
# OpenAI models that reason (refuse temperature), recognised by name when no profile exists.
_OPENAI_REASONING_NAME = re.compile(r"^(o\d|gpt-5)(?!.*-chat)")


@dataclass(frozen=True)
class _Outcome:
    """What a provider call produced before it is judged complete, truncated or refused."""

    text: str
    thinking: str
    finish_reason: str  # normalised: "stop", "length", "refusal", or the provider's word
    raw_finish_reason: str
    usage: Usage
    model: str
    response: dict[str, Any]


class LLMClient(abc.ABC):
    """Sends one conversation to one model and returns `LLMReply` or `LLMError`, never raises."""

    def __init__(self, settings: LLMSettings, *, api_key: str) -> None:
        self.settings = settings
        self._api_key = api_key  # kept only here and inside the SDK client; never recorded
        self.price_sheet: PriceSheet | None = find_price_sheet(settings.model)
        self._sdk: Any = None
        self._sdk_loop: asyncio.AbstractEventLoop | None = None

    @property
    def provider(self) -> str:
        return self.settings.provider

    @property
    def model(self) -> str:
        return self.settings.model

    def notice(self, role: str) -> str:
        """The one-line 'who receives your code' notice for this client."""
        return provider_notice(self.settings, role=role)

    async def complete(
        self,
        system: str,
        messages: Sequence[Message | Mapping[str, str]],
        *,
        max_output_tokens: int | None = None,
    ) -> LLMResult:
        """Run one call (with the SDK's own retries) and return its reply or its error value."""
        msgs = [m if isinstance(m, Message) else Message(m["role"], m["content"]) for m in messages]  # type: ignore[arg-type]
        params, notes = self._build_params(system, msgs, max_output_tokens or self.settings.max_output_tokens)
        try:
            sdk = await self._ensure_sdk()
        except Exception as exc:  # not installed, or broken: an error value like any other
            missing = isinstance(exc, ImportError)
            module = (getattr(exc, "name", None) or self._sdk_module).split(".")[0]
            needed_by = "" if module == self._sdk_module else f" (the {self._sdk_module} SDK needs it)"
            return LLMError(
                kind="not_installed" if missing else "unknown",
                message=f"the Python module {module} is not installed{needed_by}: pip install {module}"
                if missing
                else f"could not set up the {self._sdk_module} client: {self._scrub(_exception_message(exc))}",
                provider=self.provider,
                model=self.settings.model,
                request=self._scrub({"url": self.settings.resolved_base_url, **params}),
            )
        kwargs, body = _fit_to_signature(self._sdk_method(sdk), params, notes)
        request = self._scrub({"url": self.settings.resolved_base_url, **body})
        start = time.monotonic()
        try:
            outcome = await self._call(sdk, kwargs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # every SDK/transport failure becomes a value
            return self._error_from_exception(exc, request, time.monotonic() - start)
        latency = time.monotonic() - start
        cost = price_of(
            self.settings.model,
            outcome.usage,
            provider=self.provider,
            base_url=self.settings.resolved_base_url,
        )
        response = self._scrub(outcome.response)
        # A server that echoes the key back must not get it into a transcript.
        text, thinking = self._scrub(outcome.text), self._scrub(outcome.thinking)
        if outcome.finish_reason == "length":
            limit = params.get("max_tokens") or params.get("max_completion_tokens")
            hint = ""
            if not text.strip() and (outcome.usage.reasoning_tokens or outcome.thinking):
                hint = "; reasoning used it all: raise max_output_tokens or lower the reasoning effort"
            return LLMError(
                kind="truncated",
                message=f"the reply was cut off at the output limit ({limit} tokens, "
                f"finish reason '{outcome.raw_finish_reason}'){hint}",
                provider=self.provider,
                model=outcome.model,
                latency_s=latency,
                partial_text=text,
                usage=outcome.usage,
                cost_usd=cost,
                request=request,
                response=response,
            )
        if outcome.finish_reason == "refusal":
            return LLMError(
                kind="refused",
                message=f"the model refused or was filtered (finish reason '{outcome.raw_finish_reason}')",
                provider=self.provider,
                model=outcome.model,
                latency_s=latency,
                partial_text=text,
                usage=outcome.usage,
                cost_usd=cost,
                request=request,
                response=response,
            )
        return LLMReply(
            text=text,
            usage=outcome.usage,
            cost_usd=cost,
            latency_s=latency,
            finish_reason=outcome.finish_reason,
            provider=self.provider,
            model=outcome.model,
            thinking=thinking,
            request=request,
            response=response,
            notes=tuple(notes),
        )

    async def _ensure_sdk(self) -> Any:
        """Build the SDK client once; its import and its construction run in a thread so a UI's
        event loop never freezes: importing openai/anthropic takes a second or two, and building the
        client another 60-100 ms on a 2-core machine (its HTTP client loads the CA certificates)."""
        loop = asyncio.get_running_loop()
        if self._sdk is not None and self._sdk_loop is not loop:
            # Made under an earlier asyncio.run(): its connections belong to a closed loop.
            self._sdk = None
        if self._sdk is None:
            module = await asyncio.to_thread(importlib.import_module, self._sdk_module)
            sdk = await asyncio.to_thread(self._make_sdk, module)  # binds to no loop until its first request
            if self._sdk is None:  # a concurrent first call may have built it meanwhile
                self._sdk = sdk
                self._sdk_loop = loop
        return self._sdk

    async def aclose(self) -> None:
        """Close the SDK's HTTP connections (the client can be rebuilt by the next call)."""
        sdk, self._sdk = self._sdk, None
        if sdk is not None:
            await sdk.close()

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _output_limit(self, requested: int, notes: list[str]) -> int:
        """Clamp to the model's known output limit so a too-large setting is not a 400."""
        limit = self.price_sheet.max_output_tokens if self.price_sheet else None
        if limit is not None and requested > limit:
            notes.append(f"max_output_tokens {requested} clamped to the model's limit {limit}")
            return limit
        return requested

    def _scrub(self, value: Any) -> Any:
        """Remove the API key from anything that will be stored (a server could echo it)."""
        key = self._api_key
        if not key or key == PLACEHOLDER_API_KEY or len(key) < 8:
            return value
        if isinstance(value, str):
            return value.replace(key, "***")
        if isinstance(value, dict):
            return {k: self._scrub(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._scrub(v) for v in value]
        return value

    def _error_from_exception(self, exc: Exception, request: dict[str, Any], latency: float) -> LLMError:
        kind, status = classify_exception(exc)
        message = self._scrub(_exception_message(exc))[:_MAX_ERROR_CHARS]
        body = getattr(exc, "body", None)
        return LLMError(
            kind=kind,
            message=message,
            provider=self.provider,
            model=self.settings.model,
            status=status,
            latency_s=latency,
            request=request,
            response=self._scrub(body) if isinstance(body, dict) else {},
        )

    @abc.abstractmethod
    def _build_params(
        self, system: str, messages: list[Message], max_output_tokens: int
    ) -> tuple[dict[str, Any], list[str]]:
        """The request body (as SDK keyword arguments) and notes on what was adjusted."""

    _sdk_module: str = ""

    @abc.abstractmethod
    def _make_sdk(self, module: Any) -> Any:
        """The SDK's async client, configured from settings (timeout, max_retries, base_url)."""

    @abc.abstractmethod
    def _sdk_method(self, sdk: Any) -> Any:
        """The SDK method `_call` uses (its signature decides which parameters go by name)."""

    @abc.abstractmethod
    async def _call(self, sdk: Any, params: dict[str, Any]) -> _Outcome: ...


class OpenAIChatClient(LLMClient):
    """OpenAI and any OpenAI-compatible server (vLLM, SGLang, Ollama, llama.cpp) via Chat Completions."""

    _sdk_module = "openai"  # imported lazily: not installed on the GPU machine

    def _make_sdk(self, module: Any) -> Any:
        client = module.AsyncOpenAI(
            api_key=self._api_key,
            base_url=self.settings.resolved_base_url,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
        )
        if self.provider == "openai-compatible":
            # The SDK fills these from OPENAI_ORG_ID / OPENAI_PROJECT_ID; they are OpenAI's
            # business, not a third-party server's.
            client.organization = None
            client.project = None
        return client

    def _reasoning(self) -> bool:
        if self.price_sheet is not None:
            return self.price_sheet.reasoning
        return self.provider == "openai" and bool(_OPENAI_REASONING_NAME.match(self.settings.model))

    def _accepts_temperature(self) -> bool:
        if self.price_sheet is not None:
            return self.price_sheet.accepts_temperature
        return not (self.provider == "openai" and self._reasoning())

    def _build_params(
        self, system: str, messages: list[Message], max_output_tokens: int
    ) -> tuple[dict[str, Any], list[str]]:
        notes: list[str] = []
        s = self.settings
        params: dict[str, Any] = {
            "model": s.model,
            "messages": [{"role": "system", "content": system}, *(m.to_dict() for m in messages)],
        }
        limit = self._output_limit(max_output_tokens, notes)
        # OpenAI counts reasoning tokens in max_completion_tokens; local servers know max_tokens.
        params["max_completion_tokens" if s.provider == "openai" else "max_tokens"] = limit
        if s.temperature is not None:
            if self._accepts_temperature():
                params["temperature"] = s.temperature
            else:
                notes.append(f"temperature left out: {s.model} does not accept one")
        if s.reasoning_effort is not None:
            if self._reasoning() or s.provider == "openai-compatible" or self.price_sheet is None:
                params["reasoning_effort"] = s.reasoning_effort
            else:
                notes.append(f"reasoning_effort left out: {s.model} is not a reasoning model")
        return params, notes

    def _sdk_method(self, sdk: Any) -> Any:
        return sdk.chat.completions.create

    async def _call(self, sdk: Any, params: dict[str, Any]) -> _Outcome:
        response = await sdk.chat.completions.create(**params)
        if not response.choices:
            raise _EmptyReply("the server returned no choices")
        choice = response.choices[0]
        message = choice.message
        raw_finish = choice.finish_reason or ""
        finish = {"stop": "stop", "length": "length", "content_filter": "refusal"}.get(raw_finish, raw_finish)
        if getattr(message, "refusal", None) and not message.content:
            finish = "refusal"
        extra = getattr(message, "model_extra", None) or {}
        thinking = extra.get("reasoning_content") or extra.get("reasoning") or ""
        return _Outcome(
            text=message.content or "",
            thinking=thinking if isinstance(thinking, str) else "",
            finish_reason=finish,
            raw_finish_reason=raw_finish,
            usage=_openai_usage(getattr(response, "usage", None)),
            model=response.model or self.settings.model,
            response=_jsonable(response),
        )


class AnthropicClient(LLMClient):
    """Claude through the Messages API, always streamed (see the module docstring)."""

    _sdk_module = "anthropic"  # imported lazily: not installed on the GPU machine

    def _make_sdk(self, module: Any) -> Any:
        return module.AsyncAnthropic(
            api_key=self._api_key,
            base_url=self.settings.resolved_base_url,
            timeout=self.settings.timeout_s,
            max_retries=self.settings.max_retries,
        )

    def _build_params(
        self, system: str, messages: list[Message], max_output_tokens: int
    ) -> tuple[dict[str, Any], list[str]]:
        notes: list[str] = []
        s = self.settings
        limit = self._output_limit(max_output_tokens, notes)
        params: dict[str, Any] = {
            "model": s.model,
            "max_tokens": limit,
            "system": system,
            "messages": [m.to_dict() for m in messages],
        }
        thinking = False
        if s.thinking_budget is not None:
            budget = s.thinking_budget
            if budget >= limit:  # only after clamping: keep the API's budget < max_tokens rule
                budget = max(1024, limit // 2)
                notes.append(f"thinking_budget lowered to {budget} to stay below max_tokens {limit}")
            params["thinking"] = {"type": "enabled", "budget_tokens": budget}
            thinking = True
        elif s.reasoning_effort is not None:
            # Newer Claude models: adaptive thinking steered by an effort level.
            params["thinking"] = {"type": "adaptive"}
            params["output_config"] = {"effort": s.reasoning_effort}
            thinking = True
        if s.temperature is not None:
            if thinking:
                notes.append("temperature left out: Claude refuses it while thinking is on")
            else:
                params["temperature"] = s.temperature
        return params, notes

    def _sdk_method(self, sdk: Any) -> Any:
        return sdk.messages.stream

    async def _call(self, sdk: Any, params: dict[str, Any]) -> _Outcome:
        async with sdk.messages.stream(**params) as stream:
            message = await stream.get_final_message()
        text = "".join(b.text for b in message.content if getattr(b, "type", "") == "text")
        thinking = "".join(b.thinking for b in message.content if getattr(b, "type", "") == "thinking")
        raw_finish = message.stop_reason or ""
        finish = {
            "end_turn": "stop",
            "stop_sequence": "stop",
            "max_tokens": "length",
            "model_context_window_exceeded": "length",
            "refusal": "refusal",
        }.get(raw_finish, raw_finish)
        return _Outcome(
            text=text,
            thinking=thinking,
            finish_reason=finish,
            raw_finish_reason=raw_finish,
            usage=_anthropic_usage(message.usage),
            model=message.model or self.settings.model,
            response=_jsonable(message),
        )


def _fit_to_signature(
    method: Any, params: dict[str, Any], notes: list[str]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Adapt the request to the installed SDK version: (keyword arguments, body as sent).

    SDKs change which parameters a method takes: newer anthropic SDKs dropped `temperature`
    (the API no longer takes it), older ones predate `thinking`/`output_config`. A parameter the
    method does not name goes through `extra_body`, except temperature, which is left out.
    """
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return params, params
    accepted = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in accepted.values()):
        return params, params
    kwargs: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    body: dict[str, Any] = {}
    for key, value in params.items():
        if key in accepted:
            kwargs[key] = value
        elif key == "temperature":
            notes.append("temperature left out: the installed SDK's API version does not take one")
            continue
        else:
            extra[key] = value
        body[key] = value
    if extra:
        kwargs["extra_body"] = extra
    return kwargs, body


class _EmptyReply(Exception):
    """The server answered 200 without any choice to read."""


def _openai_usage(usage: Any) -> Usage:
    if usage is None:
        return Usage()
    prompt_details = getattr(usage, "prompt_tokens_details", None)
    completion_details = getattr(usage, "completion_tokens_details", None)
    return Usage(
        input_tokens=usage.prompt_tokens or 0,
        cached_input_tokens=(getattr(prompt_details, "cached_tokens", None) or 0),
        cache_write_tokens=(getattr(prompt_details, "cache_write_tokens", None) or 0),
        output_tokens=usage.completion_tokens or 0,
        reasoning_tokens=getattr(completion_details, "reasoning_tokens", None),
    )


def _anthropic_usage(usage: Any) -> Usage:
    # Anthropic's input_tokens excludes cache reads and writes; ours is the whole prompt.
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    write = getattr(usage, "cache_creation_input_tokens", None) or 0
    details = getattr(usage, "output_tokens_details", None)
    return Usage(
        input_tokens=(usage.input_tokens or 0) + read + write,
        cached_input_tokens=read,
        cache_write_tokens=write,
        output_tokens=usage.output_tokens or 0,
        reasoning_tokens=getattr(details, "thinking_tokens", None),
    )


def _jsonable(obj: Any) -> dict[str, Any]:
    """An SDK response object as plain JSON data for the transcript."""
    for attr in ("model_dump", "to_dict"):
        method = getattr(obj, attr, None)
        if method is not None:
            try:
                data = method(mode="json") if attr == "model_dump" else method()
            except TypeError:
                data = method()
            if isinstance(data, dict):
                return data
    return {}


_STATUS_KIND: dict[int, ErrorKind] = {401: "auth", 403: "auth", 404: "not_found", 408: "timeout", 429: "rate_limited"}
_BODY_KIND: dict[str, ErrorKind] = {
    "rate_limit_error": "rate_limited",
    "overloaded_error": "server_error",
    "api_error": "server_error",
    "authentication_error": "auth",
    "permission_error": "auth",
    "not_found_error": "not_found",
    "invalid_request_error": "bad_request",
}


def classify_exception(exc: BaseException) -> tuple[ErrorKind, int | None]:
    """Map an SDK or transport exception to an error kind, by class name so it holds for both
    SDKs (and their httpx flavours) without importing them."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    status = getattr(exc, "status_code", None)
    if isinstance(status, int) and "APIStatusError" in names:
        if status == 200:  # an error event inside a stream: the body says what went wrong
            body = getattr(exc, "body", None)
            err = body.get("error", {}) if isinstance(body, dict) else {}
            kind = _BODY_KIND.get(err.get("type", "") if isinstance(err, dict) else "", "server_error")
            return kind, None
        if status in _STATUS_KIND:
            return _STATUS_KIND[status], status
        return ("server_error" if status >= 500 else "bad_request"), status
    if names & {"APITimeoutError", "TimeoutException", "TimeoutError"}:
        return "timeout", None
    if names & {
        "APIConnectionError",
        "TransportError",
        "NetworkError",
        "RemoteProtocolError",
        "ConnectionError",
    }:
        return "connection", None
    if "_EmptyReply" in names or "APIResponseValidationError" in names:
        return "server_error", None
    return "unknown", None


def _exception_message(exc: BaseException) -> str:
    text = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    if "timeout" in type(exc).__name__.lower() and "timed out" not in text.lower():
        text = f"request timed out ({text})"
    return f"{type(exc).__name__}: {text}"


def make_client(settings: LLMSettings, *, env: Mapping[str, str] | None = None) -> LLMClient:
    """The client for one agent's settings; a missing API key is a ConfigError raised here,
    before any call, so the user hears about it at start-up and not mid-session."""
    if settings.provider == "heuristic":
        raise ConfigError("the heuristic Judge runs offline and has no LLM client (see engine/agents/offline_judge.py)")
    problem = check_api_key(settings, env)
    if problem is not None:
        raise ConfigError(problem)
    key_env = settings.resolved_key_env
    environ = os.environ if env is None else env
    api_key = environ.get(key_env, "") if key_env else PLACEHOLDER_API_KEY
    if settings.provider == "anthropic":
        return AnthropicClient(settings, api_key=api_key)
    if settings.provider in ("openai", "openai-compatible"):
        return OpenAIChatClient(settings, api_key=api_key)
    raise ConfigError(f"unknown provider '{settings.provider}'")
