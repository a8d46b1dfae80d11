"""The case of a held round, as a person reads it before ruling: why it was held, its findings with
their evidence, the speed-of-light arithmetic, the timers, the output comparison and the re-run in a
fresh worker beside the first run. `cudaforge rule` prints it; the workbench's Review pane shows it.
`rule_offline` records a ruling on a run no session holds (a finished headless run or batch task).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from cudaforge.engine.hold import hold_lines
from cudaforge.engine.profiling.result import ProfileResult
from cudaforge.engine.results import EvalResult, TimingStats
from cudaforge.engine.session.rulings import Ruling, RulingKind
from cudaforge.engine.session.store import RoundRecord, RunStore
from cudaforge.engine.speed_of_light import describe

_DRAM = (("dram__bytes_read.sum",), ("dram__bytes_write.sum",))


def measured_dram_bytes(profile: ProfileResult | None) -> float | None:
    """DRAM bytes ncu measured over the profiled forward (read + write, every kernel); None unprofiled."""
    if profile is None or not profile.kernels:
        return None
    total, seen = 0.0, False
    for k in profile.kernels:
        for names in _DRAM:
            v = k.value(*names)
            if v is not None:
                total, seen = total + v, True
    return total if seen else None


def _timers(label: str, r: EvalResult) -> list[str]:
    t = r.timing
    if t is None:
        return [f"{label}: {r.outcome} — {r.message}"]
    speed = f"{t.speedup:.2f}x" if t.speedup is not None else "no speed claim"
    line = (f"{label}: {r.outcome}, {speed}; {t.candidate.method} candidate {t.candidate.median_ms * 1e3:.1f} µs "
            f"(IQR {t.candidate.iqr_ms * 1e3:.1f}), reference {t.reference.median_ms * 1e3:.1f} µs")
    out = [line]
    if t.host_candidate is not None and t.host_reference is not None:
        out.append(f"  device-synchronized host: candidate {t.host_candidate.median_ms * 1e3:.1f} µs, "
                   f"reference {t.host_reference.median_ms * 1e3:.1f} µs")
    for f in dataclasses.fields(t):  # the CUPTI kernel-time timer, in whatever fields the result has it
        value = getattr(t, f.name)
        if "cupti" in f.name and value is not None:
            shown = f"{value.median_ms * 1e3:.1f} µs" if isinstance(value, TimingStats) else \
                f"{value * 1e3:.1f} µs" if isinstance(value, float) and f.name.endswith("_ms") else str(value)
            out.append(f"  CUPTI {f.name.replace('_', ' ')}: {shown}")
    if r.seeds:
        out.append(f"  seeds {', '.join(map(str, r.seeds))}")
    return out


def case_lines(rec: RoundRecord | None, *, result: EvalResult | None = None, hold: tuple = (),
               rerun: EvalResult | None = None, ruling: Ruling | None = None,
               profile: ProfileResult | None = None) -> list[str]:
    """The case of one round, line by line (a RoundRecord, or its parts from a live view)."""
    if rec is not None:
        result, hold, rerun, ruling, profile = rec.result, rec.hold, rec.rerun, rec.ruling, rec.profile
    if result is None:
        return ["no result yet"]
    lines = hold_lines(hold) or ["not held for review"]
    if ruling is not None:
        lines.append(f"RULED: {ruling.ruling} by {ruling.who}" + (f" — {ruling.reason}" if ruling.reason else ""))
    lines += ["", "findings:"]
    lines += [f"  [{f.severity}] {f.name}: {f.message}"
              + (f"\n      evidence: {json.dumps(f.evidence, default=str)[:300]}" if f.evidence else "")
              for f in result.findings] or ["  none"]
    lines += ["", "speed of light:"]
    if result.speed_of_light is not None:
        lines += ["  " + x for x in describe(result.speed_of_light, measured_dram_bytes(profile))]
    else:
        lines.append("  not recorded for this result")
    lines += ["", "timers (first run and the re-run in a fresh worker, new seeds):"]
    lines += ["  " + x for x in _timers("first ", result)]
    if rerun is not None:
        lines += ["  " + x for x in _timers("re-run", rerun)]
        if result.speedup and rerun.speedup:
            lines.append(f"  re-run / first speedup: {rerun.speedup / result.speedup:.2f}")
    elif hold:
        lines.append("  re-run: running…")
    lines += ["", "output comparison:"]
    k = result.correctness
    if k is None:
        lines.append("  none")
    else:
        lines.append(f"  {k.trials_passed}/{k.trials} trials passed (atol {k.atol:g}, rtol {k.rtol:g})")
        for o in k.outputs:
            lines.append(f"  output {o.index}: shape {list(o.shape_got)} {o.dtype_got}, max abs {o.max_abs_err:.3g}, "
                         f"max rel {o.max_rel_err:.3g}, mismatches {o.mismatches}/{o.numel}")
        if rerun is not None and rerun.correctness is not None:
            rk = rerun.correctness
            lines.append(f"  re-run: {rk.trials_passed}/{rk.trials} trials passed"
                         + "".join(f"; output {o.index} max abs {o.max_abs_err:.3g}" for o in rk.outputs))
    return lines


def rule_offline(run_dir: str | Path, n: int, ruling: RulingKind, reason: str = "", who: str | None = None) -> Ruling:
    """Record a ruling on a run no session holds, and its best round after it (state.json)."""
    from cudaforge.engine.session.run_report import best_round

    store = RunStore.open(run_dir)  # takes run.lock: refused while a session drives the folder
    try:
        made = store.add_ruling(n, ruling, reason, who)
        best = best_round(store.rounds())
        store.save_state(best_round=best.round if best else None, best_speedup=best.speedup if best else None)
    finally:
        store.close()
    return made
