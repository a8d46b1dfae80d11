"""The layered configuration: defaults, files, flags, validation and comment-preserving writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudaforge.engine.config import defaults, load_config, read_toml, save_value
from cudaforge.engine.errors import ConfigError

REPO = Path(__file__).resolve().parent.parent


def test_shipped_default_file_equals_built_in_defaults() -> None:
    shipped = read_toml(REPO / "cudaforge.toml")
    built_in = defaults()
    for section, table in shipped.items():
        for key, value in table.items():
            assert built_in[section][key] == value, (section, key)


def test_packaged_default_is_the_same_file() -> None:
    from importlib.resources import files

    assert (files("cudaforge.profiles") / "cudaforge.toml").read_text() == (REPO / "cudaforge.toml").read_text()


def test_layers_later_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    user = tmp_path / "xdg" / "cudaforge"
    user.mkdir(parents=True)
    (user / "cudaforge.toml").write_text("[eval]\ntrials = 7\nseed = 1\n[timing]\ntrials = 11\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    work = tmp_path / "work"
    work.mkdir()
    (work / "cudaforge.toml").write_text("[eval]\ntrials = 8\n")
    extra = tmp_path / "extra.toml"
    extra.write_text("[eval]\nseed = 3\n")
    cfg = load_config(extra, {"timing.trials": 99}, cwd=work)
    assert cfg.eval.trials == 8
    assert cfg.eval.seed == 3
    assert cfg.timing.trials == 99
    assert cfg.sources["timing.trials"] == "command line"
    assert cfg.sources["eval.trials"] == str(work / "cudaforge.toml")
    assert cfg.write_path == extra


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[eval]\ntrails = 3\n", "[eval] unknown key 'trails'"),
        ("[evaluation]\ntrials = 3\n", "unknown section [evaluation]"),
        ("[eval]\ntrials = 'five'\n", "[eval] trials must be an integer"),
        ("[eval]\ndevice = 'tpu'\n", "[eval] device must be one of cuda, cpu"),
        ("[timing]\nbaselines = ['eager', 'tensorrt']\n", "unknown baseline 'tensorrt'"),
        ("[integrity]\npolicy = { no_custom_kernel = 'maybe' }\n", "policy.no_custom_kernel must be one of"),
        ("[integrity]\npolicy = { side_steam = 'fail' }\n", "[integrity] policy: unknown finding 'side_steam'"),
        ("[eval\n", "invalid TOML"),
        # a misspelt key or section gets a "did you mean" in every section
        ("[eval]\ntrails = 3\n", "[eval] unknown key 'trails' (did you mean 'trials'?)"),
        ("[timing]\nwarmpu = 3\n", "[timing] unknown key 'warmpu' (did you mean 'warmup'?)"),
        ("[sesion]\nrounds = 3\n", "unknown section [sesion] (did you mean 'session'?)"),
        ("[ncu]\nenable = true\n", "[ncu] unknown key 'enable' (did you mean 'enabled'?)"),
        ("[judge]\nmodle = 'x'\n", "[judge] unknown key 'modle' (did you mean 'model'?)"),
    ],
)
def test_bad_config_names_file_and_key(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(path, cwd=tmp_path, use_user_config=False)
    assert message in str(info.value)
    assert str(path) in str(info.value)


def test_missing_config_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.toml", cwd=tmp_path, use_user_config=False)


def test_save_value_keeps_comments(tmp_path: Path) -> None:
    path = tmp_path / "cudaforge.toml"
    path.write_text((REPO / "cudaforge.toml").read_text())
    save_value(path, "eval", "trials", 9)
    text = path.read_text()
    assert "# correctness trials, each on a fresh seeded draw" in text
    assert read_toml(path)["eval"]["trials"] == 9
    with pytest.raises(ConfigError, match="unknown key"):
        save_value(path, "eval", "trails", 9)


def _keys_in_file(text: str) -> dict[str, set[str]]:
    """Section -> the keys the file names, set or commented out ("# key = ...")."""
    import re

    out: dict[str, set[str]] = {}
    section = ""
    for line in text.splitlines():
        head = re.match(r"^\[(\w+)\]", line)
        if head:
            section = head.group(1)
            out[section] = set()
            continue
        key = re.match(r"^#?\s?(\w+)\s*=", line)
        if key and section:
            out[section].add(key.group(1))
    return out


def test_shipped_file_names_every_key_the_schema_knows() -> None:
    from cudaforge.engine.config import DELEGATED, SCHEMA
    from cudaforge.engine.llm import LLMSettings
    from cudaforge.engine.profiling.settings import NcuSettings

    named = _keys_in_file((REPO / "cudaforge.toml").read_text())
    known = {section: set(keys) for section, keys in SCHEMA.items() if section != "keymap"}
    known |= {"coder": set(LLMSettings.keys()), "judge": set(LLMSettings.keys()),
              "ncu": {f for f in NcuSettings.__dataclass_fields__}}
    assert set(DELEGATED) <= set(named)
    for section, keys in known.items():
        assert section in named, f"[{section}] is missing from cudaforge.toml"
        assert keys == named[section], (section, keys ^ named[section])
