"""Per-agent LLM settings (`[coder]` / `[judge]` in cudaforge.toml) and their validation.

Kept free of SDK imports so configuration can be read and checked on a machine without
openai/anthropic installed (the GPU worker path never needs them).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, fields
from typing import Any
from urllib.parse import urlsplit

from cudaforge.engine.errors import ConfigError, did_you_mean

PROVIDERS = ("openai", "anthropic", "openai-compatible", "heuristic")
REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")

DEFAULT_BASE_URLS = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
}
DEFAULT_KEY_ENVS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}

# Sent to keyless local servers: the SDKs insist on some key, and a placeholder makes sure the
# user's real OPENAI_API_KEY is never picked up from the environment and sent to a third party.
PLACEHOLDER_API_KEY = "cudaforge-no-key"

MIN_THINKING_BUDGET = 1024  # Anthropic's documented minimum for budget_tokens


@dataclass(frozen=True)
class LLMSettings:
    """How one agent reaches its model. API keys are never stored here, only the env var's name."""

    provider: str = "openai"
    model: str = "gpt-5"
    base_url: str | None = None
    api_key_env: str | None = None
    reasoning_effort: str | None = None
    thinking_budget: int | None = None
    max_output_tokens: int = 32000
    temperature: float | None = None
    timeout_s: float = 600.0
    max_retries: int = 2

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        """The keys a `[coder]`/`[judge]` table may hold."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def from_table(
        cls,
        table: Mapping[str, Any],
        *,
        section: str,
        source: str,
        ignore: Collection[str] = (),
    ) -> LLMSettings:
        """Build and validate settings from a TOML table; any problem is a one-line ConfigError.

        `ignore` lists keys another part of the config owns in the same table (left unchecked).
        """
        where = f"{source}: [{section}]"
        known = cls.keys()
        for key in table:
            if key in ignore:
                continue
            if key not in known:
                raise ConfigError(f"{where} unknown key '{key}'{did_you_mean(key, known)}")
        values: dict[str, Any] = {k: v for k, v in table.items() if k in known}
        for key, value in values.items():
            values[key] = _check_type(where, key, value)
        settings = cls(**values)
        settings._validate(where)
        return settings

    def _validate(self, where: str) -> None:
        """Cross-field rules that the APIs would otherwise reject at the first (paid) call."""
        if self.provider not in PROVIDERS:
            raise ConfigError(f"{where} provider '{self.provider}' is not one of {', '.join(PROVIDERS)}")
        if self.provider == "heuristic":
            return
        if not self.model.strip():
            raise ConfigError(f"{where} model must not be empty")
        if self.provider == "openai-compatible" and not self.base_url:
            raise ConfigError(
                f"{where} provider 'openai-compatible' needs base_url (e.g. http://localhost:8000/v1)"
            )
        if self.base_url is not None:
            parts = urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise ConfigError(f"{where} base_url '{self.base_url}' is not an http(s) URL")
        if self.reasoning_effort is not None and self.reasoning_effort not in REASONING_EFFORTS:
            raise ConfigError(
                f"{where} reasoning_effort '{self.reasoning_effort}' is not one of {', '.join(REASONING_EFFORTS)}"
            )
        if self.max_output_tokens < 1:
            raise ConfigError(f"{where} max_output_tokens must be at least 1")
        if self.timeout_s <= 0:
            raise ConfigError(f"{where} timeout_s must be positive")
        if self.max_retries < 0:
            raise ConfigError(f"{where} max_retries must be 0 or more")
        if self.temperature is not None and not 0.0 <= self.temperature <= 2.0:
            raise ConfigError(f"{where} temperature must be between 0 and 2")
        if self.thinking_budget is not None:
            if self.provider != "anthropic":
                raise ConfigError(
                    f"{where} thinking_budget applies to provider 'anthropic' only; use reasoning_effort"
                )
            if self.thinking_budget < MIN_THINKING_BUDGET:
                raise ConfigError(f"{where} thinking_budget must be at least {MIN_THINKING_BUDGET} tokens")
            if self.thinking_budget >= self.max_output_tokens:
                raise ConfigError(
                    f"{where} thinking_budget ({self.thinking_budget}) must be less than "
                    f"max_output_tokens ({self.max_output_tokens})"
                )
            if self.reasoning_effort is not None:
                raise ConfigError(f"{where} set either thinking_budget or reasoning_effort, not both")

    def validate(self, *, section: str = "llm", source: str = "settings") -> LLMSettings:
        """Check settings built in code (not from a table); returns self for chaining."""
        self._validate(f"{source}: [{section}]")
        return self

    @property
    def resolved_base_url(self) -> str:
        """Where requests go. Resolved here, not by the SDK, so the user notice is always true."""
        if self.base_url:
            return self.base_url
        return DEFAULT_BASE_URLS.get(self.provider, "")

    @property
    def resolved_key_env(self) -> str | None:
        """The env var holding the key; None means a keyless server (placeholder key sent)."""
        if self.api_key_env:
            return self.api_key_env
        return DEFAULT_KEY_ENVS.get(self.provider)

    def to_table(self) -> dict[str, Any]:
        """The non-default-None values, in the shape `from_table` reads (for writing config)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def _check_type(where: str, key: str, value: Any) -> Any:
    """Coerce one TOML value to its field type or raise a ConfigError naming the key."""
    str_keys = ("provider", "model", "base_url", "api_key_env", "reasoning_effort")
    int_keys = ("thinking_budget", "max_output_tokens", "max_retries")
    float_keys = ("temperature", "timeout_s")
    if key in str_keys:
        if not isinstance(value, str):
            raise ConfigError(f"{where} {key} must be a string, got {_type_name(value)}")
        return value
    if key in int_keys:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where} {key} must be an integer, got {_type_name(value)}")
        return value
    if key in float_keys:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"{where} {key} must be a number, got {_type_name(value)}")
        return float(value)
    return value


def _type_name(value: Any) -> str:
    return {bool: "a boolean", str: "a string", int: "an integer", float: "a number"}.get(
        type(value), type(value).__name__
    )


def check_api_key(settings: LLMSettings, env: Mapping[str, str] | None = None) -> str | None:
    """A one-line problem with the API key (missing env var), or None when calls can be made."""
    if settings.provider == "heuristic":
        return None
    key_env = settings.resolved_key_env
    if key_env is None:
        return None
    environ = os.environ if env is None else env
    if not environ.get(key_env):
        return f"{key_env} is not set (needed for provider '{settings.provider}', model '{settings.model}')"
    return None


def is_loopback_url(url: str) -> bool:
    """True for a server on this machine: nothing leaves it, and nothing is billed."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def provider_notice(settings: LLMSettings, *, role: str) -> str:
    """The one line shown before the first call: who receives the task and the kernel source."""
    if settings.provider == "heuristic":
        return f"{role}: offline heuristic Judge; nothing is sent anywhere."
    url = settings.resolved_base_url
    host = urlsplit(url).hostname or url
    api = "Anthropic" if settings.provider == "anthropic" else "OpenAI"
    if is_loopback_url(url):  # by the base URL's host, whatever the provider is called
        who = f"a local {api}-compatible server on this machine at {host}"
    elif settings.provider in ("openai", "anthropic") and url.rstrip("/") == DEFAULT_BASE_URLS[settings.provider]:
        who = api
    elif settings.provider in ("openai", "anthropic"):
        who = f"a server at {host} (speaking {api}'s API)"
    else:
        who = "an OpenAI-compatible server"
    return f"{role}: the task and kernel source will be sent to {who} ({url}), model {settings.model}."
