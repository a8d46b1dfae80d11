"""The one registry of integrity findings: every finding any check raises is registered with a severity
and a message, the policy applies its defaults, and a policy naming an unknown finding is refused."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cudaforge.engine.config import load_config
from cudaforge.engine.errors import ConfigError
from cudaforge.engine.integrity.registry import REGISTRY, apply_policy, finding, unknown_names
from cudaforge.engine.results import Finding

ROOT = Path(__file__).resolve().parent.parent
RAISED = re.compile(r'\bfinding\(\s*"(\w+)"')


def test_every_name_has_a_severity_and_a_message() -> None:
    for name, kind in REGISTRY.items():
        assert kind.name == name
        assert kind.severity in ("fail", "warn", "info"), name
        assert kind.message.strip(), name
        assert kind.where in ("static", "runtime", "app"), name


def test_every_finding_the_engine_raises_is_registered_and_built_through_the_registry() -> None:
    raised: set[str] = set()
    for path in (ROOT / "engine").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        raised |= set(RAISED.findall(text))
        # No check builds a Finding by hand any more (results.py defines it; analyzer has its own kind).
        if path.name not in ("results.py", "registry.py"):
            assert not re.search(r'\bFinding\(\s*"', text), f"{path} builds a Finding without the registry"
    assert raised, "no finding(...) call found"
    assert unknown_names(sorted(raised)) == []
    # The README documents every registered name.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert [n for n in REGISTRY if f"`{n}`" not in readme] == []


def test_finding_uses_the_default_severity_and_message_unless_told() -> None:
    f = finding("side_stream")
    assert (f.severity, f.message, f.evidence) == ("warn", REGISTRY["side_stream"].message, {})
    assert finding("constant_output", "output 0 is constant", {"outputs": [0]}).message == "output 0 is constant"
    assert finding("inconsistent_output", severity="warn").severity == "warn"  # evidence decides this one
    with pytest.raises(ValueError, match="fixed severity"):
        finding("harness_tampering", severity="warn")
    with pytest.raises(KeyError):
        finding("no_such_finding")


def test_policy_overrides_and_fixed_defaults() -> None:
    forged = Finding("pytorch_fallback", "warn", "m", {})  # a forged severity does not stand
    mixed = Finding("inconsistent_output", "warn", "m", {})  # severity by evidence: kept
    side = finding("side_stream")
    out = apply_policy((forged, mixed, side), {})
    assert [f.severity for f in out] == ["fail", "warn", "warn"]
    out = apply_policy((forged, mixed, side), {"side_stream": "fail", "pytorch_fallback": "off"})
    assert [(f.name, f.severity) for f in out] == [("inconsistent_output", "warn"), ("side_stream", "fail")]


def test_unknown_policy_name_is_a_config_error_naming_it_and_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cudaforge.toml"
    path.write_text("[integrity]\npolicy = { side_stream = 'fail', harness_tamper = 'off' }\n")
    with pytest.raises(ConfigError) as info:
        load_config(path, cwd=tmp_path, use_user_config=False)
    assert "harness_tamper" in str(info.value) and str(path) in str(info.value)
    path.write_text("[integrity]\npolicy = { side_stream = 'fail', harness_tampering = 'off' }\n")
    assert load_config(path, cwd=tmp_path, use_user_config=False).get("integrity", "policy") == {
        "side_stream": "fail", "harness_tampering": "off"}
