"""Typed results of one Nsight Compute run: per-kernel metric rows with units, and what went wrong.

Frozen dataclasses, so a result can cross threads and be stored as JSON (`to_dict`/`from_dict`
round-trip). A failed profile is a normal value (`ok=False`, an `error_kind`, a one-line `message`
saying how to fix it), never an exception: profiling is evidence, not a gate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

ErrorKind = Literal[
    "none",
    "ncu_missing",  # no ncu executable
    "permission_denied",  # ERR_NVGPUCTRPERM: counters restricted to admin users
    "target_failed",  # the profiled program failed (or ncu refused to run it)
    "timeout",  # the whole ncu run exceeded its wall-clock limit and was killed
    "parse_error",  # ncu printed something we could not read as its raw CSV
    "no_kernels",  # ran, but no kernel inside the NVTX range was profiled
]
ERROR_KINDS: tuple[str, ...] = (
    "none",
    "ncu_missing",
    "permission_denied",
    "target_failed",
    "timeout",
    "parse_error",
    "no_kernels",
)


@dataclass(frozen=True)
class MetricValue:
    """One metric of one kernel: the value in its canonical unit, and the cell as ncu printed it."""

    value: float | None  # None when ncu printed n/a or a non-numeric value
    unit: str  # canonical: "us", "byte", "GB/s", "%", "cycle", ... (see units.py)
    raw: str  # the CSV cell, e.g. "2,306,380,462,724.94"
    raw_unit: str = ""  # the unit row's cell, e.g. "byte/s"

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "unit": self.unit, "raw": self.raw, "raw_unit": self.raw_unit}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricValue:
        return cls(
            value=data.get("value"),
            unit=data.get("unit", ""),
            raw=data.get("raw", ""),
            raw_unit=data.get("raw_unit", ""),
        )


@dataclass(frozen=True)
class KernelProfile:
    """One profiled kernel launch (one CSV row of `--page raw`)."""

    launch_id: int  # ncu's "ID" column: the order of profiled launches
    name: str  # demangled, as ncu prints it
    grid: tuple[int, int, int] | None = None
    block: tuple[int, int, int] | None = None
    metrics: dict[str, MetricValue] = field(default_factory=dict)
    stream: str = ""
    context: str = ""
    device: str = ""
    cc: str = ""
    nvtx: str = ""

    @property
    def short_name(self) -> str:
        """Function name without return type, template arguments or parameters (for tables)."""
        return short_kernel_name(self.name)

    def value(self, *names: str) -> float | None:
        """The first of `names` that this kernel has a numeric value for (fallback chains)."""
        for name in names:
            mv = self.metrics.get(name)
            if mv is not None and mv.value is not None:
                return mv.value
        return None

    def which(self, *names: str) -> str | None:
        """The first of `names` with a numeric value: the metric that `value(*names)` used."""
        for name in names:
            mv = self.metrics.get(name)
            if mv is not None and mv.value is not None:
                return name
        return None

    @property
    def duration_us(self) -> float | None:
        return self.value("gpu__time_duration.sum", "gpu__time_duration.avg")

    def to_dict(self) -> dict[str, Any]:
        return {
            "launch_id": self.launch_id,
            "name": self.name,
            "grid": list(self.grid) if self.grid else None,
            "block": list(self.block) if self.block else None,
            "metrics": {k: v.to_dict() for k, v in self.metrics.items()},
            "stream": self.stream,
            "context": self.context,
            "device": self.device,
            "cc": self.cc,
            "nvtx": self.nvtx,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> KernelProfile:
        grid = data.get("grid")
        block = data.get("block")
        return cls(
            launch_id=int(data.get("launch_id", 0)),
            name=data.get("name", ""),
            grid=(int(grid[0]), int(grid[1]), int(grid[2])) if grid else None,
            block=(int(block[0]), int(block[1]), int(block[2])) if block else None,
            metrics={k: MetricValue.from_dict(v) for k, v in (data.get("metrics") or {}).items()},
            stream=data.get("stream", ""),
            context=data.get("context", ""),
            device=data.get("device", ""),
            cc=data.get("cc", ""),
            nvtx=data.get("nvtx", ""),
        )


@dataclass(frozen=True)
class ProfileResult:
    """Everything one ncu run produced. Kernels may be present even when `ok` is False (a target
    that failed after some launches were profiled): use them as partial evidence."""

    ok: bool
    error_kind: ErrorKind = "none"
    message: str = ""  # one line; for failures it says how to fix it
    kernels: tuple[KernelProfile, ...] = ()
    requested_metrics: tuple[str, ...] = ()  # the metric set as configured (paper names)
    collected_metrics: tuple[str, ...] = ()  # what was passed to --metrics after substitution
    substitutions: dict[str, str] = field(default_factory=dict)  # requested -> used instead
    absent_metrics: tuple[str, ...] = ()  # requested, with no equivalent on this chip / not reported
    absent_reasons: dict[str, str] = field(default_factory=dict)
    device: dict[str, str] = field(default_factory=dict)  # device__attribute_* of the first row
    chip: str = ""
    wall_s: float = 0.0
    command: tuple[str, ...] = ()
    returncode: int | None = None
    log_tail: str = ""  # last lines of ncu's own output (==PROF==/==ERROR==) for the user
    target_stderr: str = ""  # a failed target's own last stderr lines (not ncu's): why it failed
    cached: bool = False  # served from the profile cache (an identical candidate was profiled before)
    worker_phases: dict[str, float] = field(default_factory=dict)  # the profiled worker's own phases (s)

    @property
    def total_time_us(self) -> float:
        return sum(k.duration_us or 0.0 for k in self.kernels)

    def kernel_time_shares(self) -> list[float]:
        """Each kernel's share of the profiled GPU time, in `kernels` order (0..1)."""
        total = self.total_time_us
        return [((k.duration_us or 0.0) / total if total > 0 else 0.0) for k in self.kernels]

    def used_name(self, requested: str) -> str:
        """The metric actually collected for a requested (paper) name."""
        return self.substitutions.get(requested, requested)

    def to_dict(self) -> dict[str, Any]:
        data = {
            "ok": self.ok,
            "error_kind": self.error_kind,
            "message": self.message,
            "kernels": [k.to_dict() for k in self.kernels],
            "requested_metrics": list(self.requested_metrics),
            "collected_metrics": list(self.collected_metrics),
            "substitutions": dict(self.substitutions),
            "absent_metrics": list(self.absent_metrics),
            "absent_reasons": dict(self.absent_reasons),
            "device": dict(self.device),
            "chip": self.chip,
            "wall_s": self.wall_s,
            "command": list(self.command),
            "returncode": self.returncode,
            "log_tail": self.log_tail,
            "cached": self.cached,
        }
        if self.target_stderr:  # absent from records written before it existed
            data["target_stderr"] = self.target_stderr
        if self.worker_phases:  # absent from records written before it existed
            data["worker_phases"] = dict(self.worker_phases)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProfileResult:
        kind = data.get("error_kind", "none")
        return cls(
            ok=bool(data.get("ok", False)),
            error_kind=kind if kind in ERROR_KINDS else "parse_error",
            message=data.get("message", ""),
            kernels=tuple(KernelProfile.from_dict(k) for k in data.get("kernels") or ()),
            requested_metrics=tuple(data.get("requested_metrics") or ()),
            collected_metrics=tuple(data.get("collected_metrics") or ()),
            substitutions=dict(data.get("substitutions") or {}),
            absent_metrics=tuple(data.get("absent_metrics") or ()),
            absent_reasons=dict(data.get("absent_reasons") or {}),
            device=dict(data.get("device") or {}),
            chip=data.get("chip", ""),
            wall_s=float(data.get("wall_s", 0.0)),
            command=tuple(data.get("command") or ()),
            returncode=data.get("returncode"),
            log_tail=data.get("log_tail", ""),
            target_stderr=data.get("target_stderr", ""),
            cached=bool(data.get("cached", False)),
            worker_phases={str(k): float(v) for k, v in (data.get("worker_phases") or {}).items()},
        )


def short_kernel_name(name: str, limit: int = 80) -> str:
    """`void ns::kern<T, 4>(int, float*)` -> `ns::kern<T, 4>`; template arguments are elided to
    `<...>` only when the name would exceed `limit` characters (cuBLAS names live in them)."""
    text = name.strip()
    # Drop the parameter list: the last top-level "(...)".
    if text.endswith(")"):
        depth = 0
        for i in range(len(text) - 1, -1, -1):
            ch = text[i]
            if ch == ")":
                depth += 1
            elif ch == "(":
                depth -= 1
                if depth == 0:
                    if i > 0:
                        text = text[:i]
                    break
    if text.startswith("void "):
        text = text[5:]
    text = text.strip()
    if len(text) > limit:
        out = []
        depth = 0
        for ch in text:
            if ch == "<":
                if depth == 0:
                    out.append("<...>")
                depth += 1
            elif ch == ">":
                depth = max(0, depth - 1)
            elif depth == 0:
                out.append(ch)
        text = "".join(out)
    return text or name
