"""Layered configuration: built-in defaults < user config dir < ./cudaforge.toml < --config FILE < flags.

Files are read with tomllib; the settings screen writes them with tomlkit (`save_value`), which keeps
comments. Unknown sections and keys are errors that name the key and the file. The [coder], [judge]
and [ncu] sections are validated by the modules that own them.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from cudaforge.engine.errors import ConfigError, did_you_mean
from cudaforge.engine.integrity.evidence import NOISE_RETRIES, NOISE_THRESHOLD
from cudaforge.engine.integrity.registry import POLICIES, unknown_names

CONFIG_NAME = "cudaforge.toml"


@dataclass(frozen=True)
class Key:
    default: Any
    kind: type | tuple[type, ...]
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    optional: bool = False  # None is allowed (written as a missing key)
    doc: str = ""


MODES = ("review", "auto", "manual")  # review: ask at each decision; auto: approve all; manual: you supply each
# The longest an evaluation (or a profile) waits for its GPU turn, and a pre-warmed spare for its job. Not a
# key: a wait that long means the card is taken, and the message says so.
GPU_WAIT_S = 3600.0
BASELINES = ("eager", "compile")  # what [timing] baselines may list

SCHEMA: dict[str, dict[str, Key]] = {
    "eval": {
        "device": Key("cuda", str, ("cuda", "cpu"), doc="where candidates run"),
        "gpu": Key(0, int, minimum=0, doc="CUDA device index"),
        "precision": Key("fp32", str, ("fp32", "fp16", "bf16"), doc="dtype of the task's float inputs"),
        "trials": Key(5, int, minimum=1, doc="correctness trials, a fresh seeded input draw each"),
        "seed": Key(None, int, optional=True,
                    doc="base seed (trial i uses seed + i); unset: a random one per evaluation, recorded in the "
                        "result; set it to reproduce a run"),
        "atol": Key(None, float, minimum=0, optional=True, doc="absolute tolerance (default by dtype)"),
        "rtol": Key(None, float, minimum=0, optional=True, doc="relative tolerance (default by dtype)"),
        "second_distribution": Key(True, bool, doc="also check on a shifted, scaled input draw"),
        "spares": Key(2, int, minimum=0,
                      doc="warm spare workers kept on CUDA (and as many ncu-wrapped ones for profiles), the oldest "
                          "ready one taken by the next evaluation; each holds a CUDA context. On the CPU device at "
                          "most one, started while the LLM thinks. 0: none"),
        "zygote": Key(True, bool,
                      doc="fork the spares from one process that imported torch once, instead of starting Python "
                          "and importing torch for each (Linux); CUDAFORGE_ZYGOTE=0 turns it off too"),
    },
    "timing": {
        "warmup": Key(10, int, minimum=0, doc="warm-up calls of each callable (at least)"),
        "warmup_ms": Key(25.0, (int, float), minimum=0, doc="warm-up time (at least): lets the GPU clocks settle"),
        "trials": Key(50, int, minimum=3, doc="timed calls of each callable (at least)"),
        "min_time_ms": Key(50.0, (int, float), minimum=0,
                           doc="timed GPU time per callable (at least): more calls for short kernels"),
        "max_trials": Key(1000, int, minimum=3, doc="timed calls of each callable (at most)"),
        "max_time_ms": Key(400.0, (int, float), minimum=0,
                           doc="timed GPU time per callable (about, at most): long kernels get fewer calls than "
                               "`trials` (never under 10) and warm up for a quarter of it; 0 turns it off"),
        "host_trials": Key(20, int, minimum=3),
        "noise_threshold": Key(NOISE_THRESHOLD, (int, float), minimum=0,
                               doc="either side's IQR / median above this is noisy: re-measured, then `noisy_timing` "
                                   "(never best, never fast); 0 turns the rule off"),
        "noise_retries": Key(NOISE_RETRIES, int, minimum=0, doc="re-measurements of a noisy timing"),
        "l2_flush": Key(True, bool),
        "launch_cover": Key(True, bool,
                            doc="on a loaded host, a spin kernel after each timed call's flush, as long as the host's "
                                "recent queueing of the call exceeds its least and the flush, so the events hold what "
                                "they would on an idle machine (timing.LaunchCover); false: the flush alone"),
        "baselines": Key(["eager"], list, doc='"eager" always; add "compile" for torch.compile'),
    },
    "timeouts": {
        "load_s": Key(900.0, (int, float), minimum=1, doc="import + build of task and candidate"),
        "correctness_s": Key(180.0, (int, float), minimum=1),
        "timing_s": Key(300.0, (int, float), minimum=1),
        "profile_s": Key(300.0, (int, float), minimum=1),
        "output_mb": Key(64, int, minimum=1, doc="stdout/stderr a worker may write"),
        "open_files": Key(1024, int, minimum=64),
    },
    "integrity": {
        "policy": Key({}, dict, doc="finding name -> fail | warn | off"),
        "speed_of_light_margin": Key(1.0, (int, float), minimum=0.1),
    },
    "hold": {
        "speedup": Key(10.0, (int, float), minimum=0, doc="hold a passing result this much faster than eager (or more)"),
        "sol": Key(0.9, (int, float), minimum=0, doc="hold a passing result at this fraction of speed of light (or more)"),
        "findings": Key(["side_stream", "shape_specialized", "gpu_shared", "timer_disagreement", "noisy_timing"], list,
                        doc="hold a passing result with a warn finding of one of these names"),
        "every_best": Key(False, bool, doc="hold every new best for a person to rule on"),
    },
    "session": {
        "rounds": Key(10, int, minimum=1),
        "mode": Key("review", str, MODES),
        "format": Key("nvrtc", str, ("nvrtc", "inline", "cpu", "triton")),
        "target_speedup": Key(None, (int, float), optional=True),
        "plateau_rounds": Key(None, int, minimum=1, optional=True),
        "revert_after_failures": Key(3, int, minimum=1, doc="failed rounds in a row before going back to the best"),
        "revert_on_regression": Key(True, bool, doc="build on the best round after a slower one"),
        "regression_tolerance": Key(0.03, (int, float), minimum=0, doc="slower than best by more than this"),
    },
    "budget": {
        "dollars": Key(5.0, (int, float), minimum=0),
        "batch_dollars": Key(50.0, (int, float), minimum=0),
        "tokens": Key(None, int, minimum=0, optional=True),
        "wall_minutes": Key(None, (int, float), minimum=0, optional=True),
    },
    "run": {
        "folder": Key("runs", str),
        "cache_dir": Key(None, str, optional=True, doc="build and result caches (default: user cache dir)"),
        "gpu_memory_gb": Key(None, (int, float), minimum=0, optional=True,
                             doc="cap a worker's device memory (GiB), e.g. 24 to emulate a 24 GB card; CUDA only"),
    },
    "batch": {
        "backend": Key("local", str, ("local", "ray"), doc="where a batch evaluates: this host, or a Ray cluster"),
        "address": Key(None, str, optional=True,
                       doc="the Ray cluster's head, host:port (as `ray start --head` printed); unset: a local instance"),
        "max_retries": Key(3, int, minimum=0, doc="Ray: retries of an evaluation whose node was lost"),
    },
    "keymap": {},  # free-form: action id -> key
}
DELEGATED = ("coder", "judge", "ncu")


@dataclass(frozen=True)
class Config:
    """Merged configuration; `sources` says which file (or 'flag'/'default') set each value."""

    data: Mapping[str, Mapping[str, Any]]
    sources: Mapping[str, str] = field(default_factory=dict)
    files: tuple[Path, ...] = ()
    write_path: Path = Path(CONFIG_NAME)

    def get(self, section: str, key: str) -> Any:
        return self.data[section][key]

    def section(self, name: str) -> Mapping[str, Any]:
        return self.data.get(name, MappingProxyType({}))

    def __getattr__(self, name: str) -> Any:
        data = object.__getattribute__(self, "data")
        if name in data:
            return _Section(data[name])
        raise AttributeError(name)


class _Section:
    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


def default(section: str, key: str) -> Any:
    """The built-in default of one key (a fresh copy of lists and tables)."""
    return _copy(SCHEMA[section][key].default)


def choices(section: str, key: str) -> tuple[Any, ...]:
    """The allowed values of one key, for the command lines' `choices=`."""
    allowed = SCHEMA[section][key].choices
    assert allowed is not None, f"[{section}] {key} has no choices"
    return allowed


def defaults() -> dict[str, dict[str, Any]]:
    data = {section: {k: _copy(spec.default) for k, spec in keys.items()} for section, keys in SCHEMA.items()}
    for name in DELEGATED:
        data[name] = {}
    return data


def _copy(value: Any) -> Any:
    return list(value) if isinstance(value, list) else dict(value) if isinstance(value, dict) else value


def user_config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "cudaforge" / CONFIG_NAME


def read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: config file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


def validate_value(section: str, key: str, value: Any, source: str) -> Any:
    spec = SCHEMA[section][key]
    where = f"{source}: [{section}] {key}"
    if value is None and spec.optional:
        return None
    kinds = spec.kind if isinstance(spec.kind, tuple) else (spec.kind,)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) and bool not in kinds:
        raise ConfigError(f"{where} must be {_kind_name(kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise ConfigError(f"{where} must be {_kind_name(kinds)}, got {value!r}")
    if spec.choices is not None and value not in spec.choices:
        raise ConfigError(f"{where} must be one of {', '.join(map(str, spec.choices))}, got {value!r}")
    if spec.minimum is not None and value < spec.minimum:
        raise ConfigError(f"{where} must be at least {spec.minimum}, got {value!r}")
    if section == "integrity" and key == "policy":
        for name, policy in value.items():
            if policy not in POLICIES:
                raise ConfigError(f"{where}.{name} must be one of fail, warn, off, got {policy!r}")
        unknown = unknown_names(value)
        if unknown:
            raise ConfigError(f"{where}: unknown finding {unknown[0]!r} (the findings are listed in the README's "
                              "integrity section)")
    if section == "hold" and key == "findings":
        unknown = unknown_names(value)
        if unknown:
            raise ConfigError(f"{where}: unknown finding {unknown[0]!r} (the findings are listed in the README's "
                              "integrity section)")
    if section == "timing" and key == "baselines":
        bad = [b for b in value if b not in BASELINES]
        if bad:
            raise ConfigError(f"{where}: unknown baseline {bad[0]!r} (use {', '.join(BASELINES)})")
    return value


def _kind_name(kinds: tuple[type, ...]) -> str:
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false", list: "a list",
             dict: "a table"}
    return " or ".join(dict.fromkeys(names.get(k, k.__name__) for k in kinds))


def merge_layer(data: dict[str, dict[str, Any]], sources: dict[str, str], layer: Mapping[str, Any],
                source: str) -> None:
    for section, table in layer.items():
        if section not in SCHEMA and section not in DELEGATED:
            raise ConfigError(f"{source}: unknown section [{section}]{did_you_mean(section, [*SCHEMA, *DELEGATED])}")
        if not isinstance(table, Mapping):
            raise ConfigError(f"{source}: [{section}] must be a table")
        for key, value in table.items():
            if section in DELEGATED or section == "keymap":
                if section == "keymap" and not isinstance(value, str):
                    raise ConfigError(f"{source}: [keymap] {key} must be a key name string")
                data[section][key] = value
            elif key not in SCHEMA[section]:
                raise ConfigError(f"{source}: [{section}] unknown key '{key}'{did_you_mean(key, SCHEMA[section])}")
            else:
                data[section][key] = validate_value(section, key, value, source)
            sources[f"{section}.{key}"] = source


DelegateValidator = Callable[[Mapping[str, Any], str, str], None]


def _validate_delegated(data: dict[str, dict[str, Any]], sources: Mapping[str, str]) -> None:
    """Let the owning modules check [coder], [judge] and [ncu]; skipped where they are absent."""
    for section in DELEGATED:
        table = data.get(section) or {}
        if not table:
            continue
        source = next((sources[f"{section}.{k}"] for k in table if f"{section}.{k}" in sources), "config")
        try:
            if section in ("coder", "judge"):
                from cudaforge.engine.llm import LLMSettings

                LLMSettings.from_table(dict(table), section=section, source=source)
            else:
                from cudaforge.engine.profiling.settings import NcuSettings

                NcuSettings.from_table(dict(table), source=source)
        except ImportError:
            continue


def load_config(config_file: str | Path | None = None, overrides: Mapping[str, Any] | None = None, *,
                cwd: Path | None = None, use_user_config: bool = True) -> Config:
    """Merge all layers. `overrides` maps "section.key" to values from command-line flags."""
    data = defaults()
    sources: dict[str, str] = {}
    files: list[Path] = []
    cwd = cwd or Path.cwd()
    candidates = []
    if use_user_config:
        candidates.append(user_config_path())
    candidates.append(cwd / CONFIG_NAME)
    for path in candidates:
        if path.is_file():
            merge_layer(data, sources, read_toml(path), str(path))
            files.append(path)
    if config_file is not None:
        path = Path(config_file)
        merge_layer(data, sources, read_toml(path), str(path))
        files.append(path)
    _apply_overrides(data, sources, overrides)
    _validate_delegated(data, sources)
    write_path = Path(config_file) if config_file is not None else cwd / CONFIG_NAME
    return Config(data=data, sources=sources, files=tuple(files), write_path=write_path)


def _apply_overrides(data: dict[str, dict[str, Any]], sources: dict[str, str],
                     overrides: Mapping[str, Any] | None) -> None:
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        section, _, key = dotted.partition(".")
        merge_layer(data, sources, {section: {key: value}}, "command line")


def config_from_data(stored: Mapping[str, Any], overrides: Mapping[str, Any] | None = None, *,
                     source: str = "run manifest") -> Config:
    """A Config rebuilt from a stored `config_to_data` dump (a run's manifest), validated like a file."""
    data = defaults()
    sources: dict[str, str] = {}
    merge_layer(data, sources, {k: dict(v) for k, v in stored.items() if isinstance(v, Mapping)}, source)
    _apply_overrides(data, sources, overrides)
    _validate_delegated(data, sources)
    return Config(data=data, sources=sources)


def config_to_data(config: Config) -> dict[str, dict[str, Any]]:
    """Plain, JSON-ready sections; values left at None are dropped (TOML has no null)."""
    return {name: {k: _copy(v) for k, v in values.items() if v is not None} for name, values in config.data.items()}


def save_value(path: Path, section: str, key: str, value: Any) -> None:
    """Set one value in a TOML file with tomlkit, keeping its comments and layout; atomic write."""
    import tomlkit

    if section in SCHEMA and section != "keymap":
        if key not in SCHEMA[section]:
            raise ConfigError(f"{path}: [{section}] unknown key '{key}'{did_you_mean(key, SCHEMA[section])}")
        value = validate_value(section, key, value, str(path))
    doc = tomlkit.parse(path.read_text(encoding="utf-8")) if path.exists() else tomlkit.document()
    if section not in doc:
        doc[section] = tomlkit.table()
    if value is None:
        doc[section].pop(key, None)  # type: ignore[union-attr]
    else:
        doc[section][key] = value  # type: ignore[index]
    from cudaforge.engine.fsutil import atomic_write_text

    atomic_write_text(path, tomlkit.dumps(doc))
