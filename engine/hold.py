"""Held for review: a result that passed every check but looks too good waits for a person's ruling.

A passing result is held when its speedup is at least `[hold] speedup`, its `sol_fraction` at least
`[hold] sol`, it carries a warn finding of a class `[hold] findings` lists, or `[hold] every_best` asks
for a ruling on every new best. A held result is never the session's best, never seeds an optimize round
and never counts as fast in a batch until a person accepts it (engine/session/rulings.py records the
ruling). `[hold]` and `cudaforge rule` are apart from `--mode review`, which is about approving drafts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from cudaforge.engine.results import EvalResult

HoldKind = Literal["speedup", "sol", "finding", "every_best"]


@dataclass(frozen=True)
class HoldSettings:
    """`[hold]` of cudaforge.toml (engine/config.py holds the defaults)."""

    speedup: float = 10.0
    sol: float = 0.9
    findings: tuple[str, ...] = ("side_stream", "shape_specialized", "gpu_shared", "timer_disagreement",
                                 "noisy_timing")
    every_best: bool = False

    @classmethod
    def from_config(cls, config: Any) -> HoldSettings:
        h = config.section("hold")
        return cls(speedup=float(h["speedup"]), sol=float(h["sol"]), findings=tuple(h["findings"]),
                   every_best=bool(h["every_best"]))


@dataclass(frozen=True)
class HoldReason:
    kind: HoldKind
    message: str


def hold_reasons(result: EvalResult | None, settings: HoldSettings, *, new_best: bool = True) -> tuple[HoldReason, ...]:
    """Why `result` is held (empty: it is not). Only results that passed every check are held;
    `new_best` says whether it would become the best (for `every_best`)."""
    if result is None or not result.accepted:
        return ()
    reasons: list[HoldReason] = []
    speedup = result.speedup
    if speedup is not None and speedup >= settings.speedup:
        reasons.append(HoldReason("speedup", f"speedup {speedup:.2f}x is at or above [hold] speedup "
                                             f"{settings.speedup:g}x"))
    sol = result.sol_fraction
    if sol is not None and sol >= settings.sol:
        reasons.append(HoldReason("sol", f"{sol:.0%} of speed of light is at or above [hold] sol {settings.sol:.0%}"))
    for f in result.findings:
        if f.severity == "warn" and f.name in settings.findings:
            reasons.append(HoldReason("finding", f"warn finding {f.name}: {f.message}"))
    if settings.every_best and new_best:
        reasons.append(HoldReason("every_best", "[hold] every_best: a person rules on every new best"))
    return tuple(reasons)


def hold_lines(reasons: tuple[HoldReason, ...]) -> list[str]:
    """What `cudaforge eval`, `cudaforge rule` and the Review pane print about a hold."""
    if not reasons:
        return []
    return ["HELD FOR REVIEW (a person rules before it counts):", *(f"  - {r.message}" for r in reasons)]
