"""Price sheets, cost arithmetic and the usage ledger (per round, per session, dollar cap)."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.llm import CallRecord, Usage, UsageLedger, find_price_sheet, load_price_sheets, price_of
from cudaforge.engine.llm.prices import parse_price_sheets

REQUIRED_MODELS = [
    "gpt-5",
    "gpt-5-mini",
    "o3",
    "o4-mini",
    "gpt-4.1",
    "claude-opus-4",
    "claude-sonnet-4",
    "claude-sonnet-4-5",
    "claude-haiku-4-5",
    "local",
]


def test_shipped_profiles_load_with_dated_sources() -> None:
    profiles = load_price_sheets()
    for name in REQUIRED_MODELS:
        p = profiles[name]
        assert p.priced, name
        assert p.price_date and p.price_source, name
        assert p.output_per_mtok is not None
    # Reasoning models refuse temperature; gpt-4.1 takes one.
    assert not profiles["gpt-5"].accepts_temperature and profiles["gpt-5"].reasoning
    assert not profiles["o3"].accepts_temperature
    assert profiles["gpt-4.1"].accepts_temperature


def test_find_profile_by_snapshot_alias_and_router_prefix() -> None:
    assert find_price_sheet("claude-sonnet-4-5-20250929").name == "claude-sonnet-4-5"
    assert find_price_sheet("claude-sonnet-4-20250514").name == "claude-sonnet-4"
    assert find_price_sheet("gpt-5-mini-2025-08-07").name == "gpt-5-mini"
    assert find_price_sheet("claude-opus-4-0").name == "claude-opus-4"
    assert find_price_sheet("openai/gpt-5").name == "gpt-5"
    assert find_price_sheet("gpt-5-turbo-ultra") is None  # not a dated snapshot of gpt-5


def test_cost_arithmetic_matches_profile_prices() -> None:
    p = load_price_sheets()["claude-sonnet-4-5"]
    usage = Usage(
        input_tokens=100_000,
        cached_input_tokens=20_000,
        cache_write_tokens=10_000,
        output_tokens=5_000,
        reasoning_tokens=3_000,
    )
    expected = (
        70_000 * p.input_per_mtok
        + 20_000 * p.cached_input_per_mtok
        + 10_000 * p.cache_write_per_mtok
        + 5_000 * p.output_per_mtok  # reasoning is part of output: not billed twice
    ) / 1e6
    assert price_of("claude-sonnet-4-5", usage) == pytest.approx(expected)
    # With the 2025 prices in the profile: 0.21 + 0.006 + 0.0375 + 0.075
    assert expected == pytest.approx(0.3285)


def test_openai_cost_with_cached_input() -> None:
    p = load_price_sheets()["gpt-5"]
    usage = Usage(input_tokens=10_000, cached_input_tokens=4_000, output_tokens=2_000, reasoning_tokens=1_500)
    expected = (6_000 * p.input_per_mtok + 4_000 * p.cached_input_per_mtok + 2_000 * p.output_per_mtok) / 1e6
    assert price_of("gpt-5", usage) == pytest.approx(expected)


def test_unknown_model_costs_unknown_not_zero() -> None:
    usage = Usage(input_tokens=1000, output_tokens=1000)
    assert price_of("some-new-model", usage) is None
    assert (
        price_of("qwen3-coder", usage, provider="openai-compatible", base_url="https://llm.example.com/v1")
        is None
    )


def test_local_server_model_is_free() -> None:
    usage = Usage(input_tokens=1000, output_tokens=1000)
    assert (
        price_of("qwen3-coder", usage, provider="openai-compatible", base_url="http://127.0.0.1:8000/v1")
        == 0.0
    )


def test_profile_file_errors_name_the_file() -> None:
    with pytest.raises(ConfigError, match=r"x.toml: \[models.\"m\"\] unknown key 'input'"):
        parse_price_sheets('[models."m"]\nprovider = "openai"\ninput = 1.0\n', "x.toml")
    with pytest.raises(ConfigError, match="must be a non-negative number"):
        parse_price_sheets('[models."m"]\nprovider = "openai"\ninput_per_mtok = -1\n', "x.toml")


def _record(
    round: int | None, agent: str, cost: float | None, tokens: int = 100, error: str | None = None
) -> CallRecord:
    return CallRecord(
        call_id=f"{agent}-{round}",
        agent=agent,
        purpose="seed",
        round=round,
        attempt=1,
        provider="openai",
        model="gpt-5",
        started_at=0.0,
        latency_s=1.5,
        system="s",
        messages=(),
        params={},
        usage=Usage(input_tokens=tokens, output_tokens=tokens),
        cost_usd=cost,
        error_kind=error,
    )


def test_ledger_sums_per_round_agent_and_session() -> None:
    ledger = UsageLedger(cap_usd=1.0)
    ledger.add(_record(1, "coder", 0.10))
    ledger.add(_record(1, "judge", 0.05))
    ledger.add(_record(2, "coder", 0.20, error="truncated"))
    assert ledger.total(round=1).cost_usd == pytest.approx(0.15)
    assert ledger.total(round=1).calls == 2
    assert ledger.total(agent="coder").cost_usd == pytest.approx(0.30)
    assert ledger.total().usage.input_tokens == 300
    assert ledger.total().errors == 1
    assert ledger.total().latency_s == pytest.approx(4.5)
    assert set(ledger.by_round()) == {1, 2}
    assert ledger.remaining_usd() == pytest.approx(0.65)
    assert not ledger.exceeded()
    ledger.add(_record(3, "coder", 0.70))
    assert ledger.exceeded()
    assert ledger.to_dict()["by_round"]["3"]["cost_usd"] == pytest.approx(0.70)


def test_ledger_flags_unpriced_calls() -> None:
    ledger = UsageLedger(cap_usd=0.5)
    ledger.add(_record(1, "coder", None))
    ledger.add(_record(1, "coder", None, tokens=0))  # nothing billed: not counted as unpriced
    ledger.add(_record(1, "judge", 0.1))
    total = ledger.total()
    assert total.unpriced_calls == 1 and not total.cost_known
    assert total.cost_usd == pytest.approx(0.1)
    assert not ledger.exceeded()


def test_no_cap_never_exceeded() -> None:
    ledger = UsageLedger()
    ledger.add(_record(1, "coder", 100.0))
    assert not ledger.exceeded() and ledger.remaining_usd() is None


@pytest.mark.parametrize(
    ("model", "per_round"),
    [
        ("gpt-5-mini", 0.038),
        ("gpt-5", 0.19),
        ("o3", 0.168),
        ("claude-sonnet-4-5", 0.303),
        ("claude-opus-4", 1.515),
    ],
)
def test_round_estimate_in_the_readme_matches_the_profiles(model: str, per_round: float) -> None:
    """docs/README-providers.md's table: Coder 8k in + 12k out, Judge 8k in + 5k out."""
    coder = price_of(model, Usage(input_tokens=8000, output_tokens=12000))
    judge = price_of(model, Usage(input_tokens=8000, output_tokens=5000))
    assert coder is not None and judge is not None
    assert coder + judge == pytest.approx(per_round)


def test_current_models_are_priced_with_date_and_source() -> None:
    """The models the README's examples name are in the price sheets, each with its date and source."""
    profiles = load_price_sheets()
    for name in ("gpt-5.5", "claude-sonnet-4-6", "gpt-5", "gpt-5-mini"):
        p = profiles[name]
        assert p.priced and p.price_date and p.price_source, name


def test_deprecated_model_gets_a_startup_notice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A model injected into the anthropic SDK's own deprecation table gets one line at start-up;
    a model not in it gets none."""
    from anthropic import _data
    from cudaforge.engine.config import load_config
    from cudaforge.engine.llm.prices import deprecation_notice
    from cudaforge.engine.session.factory import build_parts

    monkeypatch.setitem(_data.DEPRECATED_MODELS, "claude-cudaforge-test", "January 2nd, 2027")
    line = deprecation_notice("claude-cudaforge-test", role="Coder")
    assert line is not None and "\n" not in line
    assert "claude-cudaforge-test" in line and "January 2nd, 2027" in line and "[coder] model" in line
    assert deprecation_notice("claude-cudaforge-current", role="Coder") is None
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    config = load_config(None, {"eval.device": "cpu", "coder.provider": "anthropic",
                                "coder.model": "claude-cudaforge-test", "judge.provider": "heuristic",
                                "run.cache_dir": str(tmp_path)}, cwd=tmp_path, use_user_config=False)
    parts = build_parts(config, mode="auto")
    assert "Coder: model claude-cudaforge-test is deprecated" in parts.notice



README = Path(__file__).resolve().parent.parent / "README.md"
PROVIDERS_DOC = README.parent / "docs" / "README-providers.md"


def _providers_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("## LLM providers: the Coder and the Judge")
    return text[start:text.index("\n## ", start + 3) + 1].rstrip() + "\n"


def test_the_providers_doc_is_the_readmes_section() -> None:
    """One source for model names: docs/README-providers.md is the README's section, word for word."""
    doc = PROVIDERS_DOC.read_text(encoding="utf-8")
    body = doc.split("-->\n\n", 1)[1] if doc.startswith("<!--") else doc
    assert body == _providers_section()


def test_every_model_and_price_the_docs_name_comes_from_the_profiles() -> None:
    import re

    section = _providers_section()
    profiles = load_price_sheets()
    named = [m for m in re.findall(r'^model = "([^"]+)"(.*)$', section, re.M) if "server names it" not in m[1]]
    assert named and all(profiles.get(name) is not None and profiles[name].priced for name, _ in named), named
    rows = re.findall(r"^\| ([\w.-]+) \| \$([\d.]+) \| \$([\d.]+) \|", section, re.M)
    assert len(rows) >= 5
    for name, coder_text, judge_text in rows:
        coder = price_of(name, Usage(input_tokens=8000, output_tokens=12000))
        judge = price_of(name, Usage(input_tokens=8000, output_tokens=5000))
        assert coder is not None and judge is not None, f"{name} in the README's cost table has no price sheet"
        for shown, value in ((coder_text, coder), (judge_text, judge)):  # equal to the digits shown
            places = len(shown.partition(".")[2])
            assert abs(float(shown) - value) <= 0.5 * 10 ** -places + 1e-9, (name, shown, value)
