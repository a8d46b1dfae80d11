"""The `[ncu]` section of cudaforge.toml: whether and how candidates are profiled.

Validated here so engine/config.py only has to hand over the table and the file it came from; every
error is one line naming the file and the key (unknown keys are errors, never ignored).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from cudaforge.engine.errors import ConfigError, did_you_mean
from cudaforge.engine.profiling.metrics import METRIC_SETS


@dataclass(frozen=True)
class NcuSettings:
    """How to run Nsight Compute. Defaults are the built-in configuration."""

    enabled: bool = True
    path: str = "ncu"  # executable name (looked up on PATH) or a path
    metric_set: str = "cudaforge"  # "cudaforge" (paper's 24 + duration + SM throughput + FLOPs) | "minimal"
    extra_metrics: tuple[str, ...] = field(default_factory=tuple)
    launch_count: int = 20  # at most this many kernel launches are profiled per run
    timeout_s: float = 120.0  # wall-clock limit for the whole ncu run

    @classmethod
    def from_table(cls, table: Mapping[str, Any], *, source: str) -> NcuSettings:
        """Build from a parsed `[ncu]` table; `source` is the file name used in error messages."""
        known = {f.name for f in fields(cls)}
        for key in table:
            if key not in known:
                raise ConfigError(f"{source}: [ncu] unknown key '{key}'{did_you_mean(key, known)} "
                                  f"(known: {', '.join(sorted(known))})")
        values: dict[str, Any] = {}
        if "enabled" in table:
            if not isinstance(table["enabled"], bool):
                raise ConfigError(f"{source}: [ncu] 'enabled' must be true or false")
            values["enabled"] = table["enabled"]
        if "path" in table:
            if not isinstance(table["path"], str) or not table["path"].strip():
                raise ConfigError(f"{source}: [ncu] 'path' must be a non-empty string")
            values["path"] = table["path"].strip()
        if "metric_set" in table:
            ms = table["metric_set"]
            if ms not in METRIC_SETS:
                choices = " | ".join(f'"{k}"' for k in METRIC_SETS)
                raise ConfigError(f"{source}: [ncu] 'metric_set' must be {choices}, not {ms!r}")
            values["metric_set"] = ms
        if "extra_metrics" in table:
            extra = table["extra_metrics"]
            if not isinstance(extra, list) or not all(isinstance(m, str) and m.strip() for m in extra):
                raise ConfigError(f"{source}: [ncu] 'extra_metrics' must be a list of metric names")
            for m in extra:
                if "," in m or " " in m.strip():
                    raise ConfigError(f"{source}: [ncu] 'extra_metrics' entry {m!r} must be one metric name")
            values["extra_metrics"] = tuple(m.strip() for m in extra)
        if "launch_count" in table:
            lc = table["launch_count"]
            if isinstance(lc, bool) or not isinstance(lc, int) or lc < 1:
                raise ConfigError(f"{source}: [ncu] 'launch_count' must be a positive integer")
            values["launch_count"] = lc
        if "timeout_s" in table:
            t = table["timeout_s"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
                raise ConfigError(f"{source}: [ncu] 'timeout_s' must be a positive number of seconds")
            values["timeout_s"] = float(t)
        return cls(**values)

    def metrics(self) -> tuple[str, ...]:
        """The metric names to request: the chosen set plus extras, without duplicates."""
        return tuple(dict.fromkeys(METRIC_SETS[self.metric_set] + self.extra_metrics))

    def to_table(self) -> dict[str, Any]:
        """The inverse of `from_table`, for writing the config back."""
        return {
            "enabled": self.enabled,
            "path": self.path,
            "metric_set": self.metric_set,
            "extra_metrics": list(self.extra_metrics),
            "launch_count": self.launch_count,
            "timeout_s": self.timeout_s,
        }
