"""LLMSettings from cudaforge.toml tables: validation messages, key handling, provider notice."""

from __future__ import annotations

import subprocess
import sys

import pytest
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.llm import (
    PLACEHOLDER_API_KEY,
    LLMSettings,
    check_api_key,
    is_loopback_url,
    make_client,
    provider_notice,
)


def test_defaults_from_empty_table() -> None:
    s = LLMSettings.from_table({}, section="coder", source="cudaforge.toml")
    assert s.provider == "openai" and s.model == "gpt-5"
    assert s.resolved_key_env == "OPENAI_API_KEY"
    assert s.resolved_base_url == "https://api.openai.com/v1"


def test_full_table_round_trips() -> None:
    table = {
        "provider": "anthropic",
        "model": "claude-sonnet-4-5",
        "thinking_budget": 4096,
        "max_output_tokens": 16000,
        "timeout_s": 120,
        "max_retries": 3,
    }
    s = LLMSettings.from_table(table, section="coder", source="cudaforge.toml")
    assert s.timeout_s == 120.0 and isinstance(s.timeout_s, float)
    assert LLMSettings.from_table(s.to_table(), section="coder", source="x") == s


def test_unknown_key_names_key_section_and_file() -> None:
    with pytest.raises(ConfigError) as info:
        LLMSettings.from_table({"modle": "gpt-5"}, section="coder", source="cudaforge.toml")
    message = str(info.value)
    assert message.startswith("cudaforge.toml: [coder] unknown key 'modle'")
    assert "did you mean 'model'" in message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_ignored_keys_are_left_to_their_owner() -> None:
    s = LLMSettings.from_table(
        {"model": "o3", "auto_approve": True}, section="judge", source="c.toml", ignore=["auto_approve"]
    )
    assert s.model == "o3"


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"provider": "gemini"}, "provider 'gemini' is not one of"),
        ({"provider": "openai-compatible", "model": "qwen"}, "needs base_url"),
        ({"model": 5}, "model must be a string, got an integer"),
        ({"max_output_tokens": "many"}, "max_output_tokens must be an integer"),
        ({"max_retries": True}, "max_retries must be an integer, got a boolean"),
        ({"temperature": 3.0}, "temperature must be between 0 and 2"),
        ({"timeout_s": 0}, "timeout_s must be positive"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort 'extreme' is not one of"),
        ({"thinking_budget": 2048}, "thinking_budget applies to provider 'anthropic' only"),
        ({"provider": "anthropic", "model": "claude-opus-4", "thinking_budget": 512}, "at least 1024"),
        (
            {
                "provider": "anthropic",
                "model": "claude-opus-4",
                "thinking_budget": 8000,
                "max_output_tokens": 8000,
            },
            "must be less than max_output_tokens (8000)",
        ),
        ({"base_url": "localhost:8000"}, "is not an http(s) URL"),
    ],
)
def test_invalid_values_are_one_line_config_errors(table: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        LLMSettings.from_table(table, section="judge", source="my.toml")
    assert needle in str(info.value)
    assert str(info.value).startswith("my.toml: [judge]")
    assert "\n" not in str(info.value)


def test_heuristic_judge_is_accepted_and_has_no_client() -> None:
    s = LLMSettings.from_table({"provider": "heuristic"}, section="judge", source="cudaforge.toml")
    assert s.provider == "heuristic"
    assert check_api_key(s, {}) is None
    assert "nothing is sent" in provider_notice(s, role="Judge")
    with pytest.raises(ConfigError):
        make_client(s, env={})


def test_missing_key_is_reported_before_any_call() -> None:
    s = LLMSettings(provider="anthropic", model="claude-sonnet-4-5")
    assert check_api_key(s, {}) == (
        "ANTHROPIC_API_KEY is not set (needed for provider 'anthropic', model 'claude-sonnet-4-5')"
    )
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY is not set"):
        make_client(s, env={})
    custom = LLMSettings(
        provider="openai-compatible", model="m", base_url="https://llm.example/v1", api_key_env="MY_KEY"
    )
    with pytest.raises(ConfigError, match="MY_KEY is not set"):
        make_client(custom, env={})


def test_keyless_local_server_gets_placeholder_not_the_openai_key() -> None:
    s = LLMSettings(provider="openai-compatible", model="qwen", base_url="http://localhost:8000/v1")
    client = make_client(s, env={"OPENAI_API_KEY": "sk-real-secret-key"})
    assert client._api_key == PLACEHOLDER_API_KEY


def test_provider_notice_names_the_receiver() -> None:
    openai = LLMSettings(provider="openai", model="gpt-5")
    assert provider_notice(openai, role="Coder") == (
        "Coder: the task and kernel source will be sent to OpenAI (https://api.openai.com/v1), model gpt-5."
    )
    claude = LLMSettings(provider="anthropic", model="claude-opus-4")
    assert "sent to Anthropic (https://api.anthropic.com)" in provider_notice(claude, role="Judge")
    local = LLMSettings(provider="openai-compatible", model="q", base_url="http://127.0.0.1:8000/v1")
    assert "a local OpenAI-compatible server on this machine" in provider_notice(local, role="Coder")
    remote = LLMSettings(provider="openai-compatible", model="q", base_url="https://llm.example.com/v1")
    assert "an OpenAI-compatible server (https://llm.example.com/v1)" in provider_notice(remote, role="Coder")
    # the receiver is named by the base URL's host, not by the provider's name
    openai_local = LLMSettings(provider="openai", model="gpt-5", base_url="http://127.0.0.1:8000/v1")
    notice = provider_notice(openai_local, role="Coder")
    assert "a local OpenAI-compatible server on this machine at 127.0.0.1" in notice and "to OpenAI" not in notice
    assert "at 127.0.0.1" in provider_notice(local, role="Coder")
    proxy = LLMSettings(provider="anthropic", model="claude-opus-4", base_url="https://gateway.corp.example/anthropic")
    assert "sent to a server at gateway.corp.example (speaking Anthropic's API)" in provider_notice(proxy, role="Judge")


def test_loopback_detection() -> None:
    assert is_loopback_url("http://localhost:11434/v1")
    assert is_loopback_url("http://127.0.0.1:8000/v1")
    assert is_loopback_url("http://[::1]:8000/v1")
    assert not is_loopback_url("http://10.0.0.5:8000/v1")
    assert not is_loopback_url("https://api.openai.com/v1")


def test_engine_llm_imports_no_sdk() -> None:
    """The GPU machine has neither SDK: importing the packages must not load them (nor a UI)."""
    code = (
        "import sys, cudaforge.engine.llm, cudaforge.engine.agents\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'openai', 'anthropic', 'pydantic', 'textual', 'rich'})\n"
        "print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
