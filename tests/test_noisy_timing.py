"""Noisy timing is a finding, never a result (#25): the rule, the re-measuring, a real disturbed evaluation
through the sandboxed worker, and a batch that does not count it as fast."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from adversarial_kit import describe, evaluate, names
from cudaforge.engine.integrity.evidence import is_noisy, noisy_timing_finding
from cudaforge.engine.results import TimingStats
from cudaforge.engine.worker.timing import stats, until_quiet

CORE = Path(__file__).parent / "core_tasks"


def _stats(median: float, iqr: float) -> TimingStats:
    return TimingStats(median_ms=median, iqr_ms=iqr, min_ms=median - iqr, max_ms=median + iqr, mean_ms=median,
                       trials=20, method="perf_counter")


def test_either_side_over_the_threshold_is_noisy_and_zero_turns_the_rule_off() -> None:
    quiet, loud = _stats(1.0, 0.1), _stats(2.81, 2.76)  # the reference: 2.81 ms, IQR 2.76 ms
    assert not is_noisy(quiet, quiet, 0.25)
    assert is_noisy(loud, quiet, 0.25) and is_noisy(quiet, loud, 0.25)
    assert not is_noisy(loud, loud, 0.0)
    f = noisy_timing_finding(loud, quiet, 0.25, 3)
    assert f is not None and f.name == "noisy_timing" and f.severity == "warn"
    assert f.evidence == {"reference_spread": pytest.approx(0.9822, abs=1e-4), "candidate_spread": 0.1,
                          "threshold": 0.25, "measurements": 3}
    assert "reference 0.98, candidate 0.10" in f.message
    assert noisy_timing_finding(quiet, quiet, 0.25, 1) is None


def test_remeasured_while_noisy_up_to_the_bound() -> None:
    steady = [1.0, 1.01, 0.99, 1.0]
    noisy = [1.0, 3.0, 0.5, 2.0]
    windows = iter([{"reference": steady, "candidate": noisy}, {"reference": steady, "candidate": steady},
                    {"reference": noisy, "candidate": noisy}])
    samples, measurements = until_quiet(lambda: next(windows), 0.25, 2)
    assert measurements == 2 and samples["candidate"] == steady  # the first quiet window is kept
    always = until_quiet(lambda: {"reference": steady, "candidate": noisy}, 0.25, 2)
    assert always[1] == 3 and stats(always[0]["candidate"], "").spread > 0.25  # bounded: 1 + 2 retries
    assert until_quiet(lambda: {"reference": steady, "candidate": noisy}, 0.25, 0)[1] == 1


def test_a_disturbed_timing_is_noisy_timing_with_both_spreads_and_pinned_threads(cpu_options) -> None:
    """tests/adversarial/jittery.py waits 3 ms in every other call: a real disturbance of the timed
    calls in the real worker. The timing is measured again (once here), stays noisy and says so."""
    timing = {**cpu_options.timing, "trials": 12, "noise_threshold": 0.25, "noise_retries": 1}
    r = evaluate(replace(cpu_options, timing=timing), "jittery.py")
    assert r.outcome == "ok" and r.accepted and "noisy_timing" in names(r, "warn"), describe(r)
    assert r.noisy
    f = next(f for f in r.findings if f.name == "noisy_timing")
    assert f.evidence["candidate_spread"] > 0.25 and f.evidence["measurements"] == 2
    assert r.timing is not None and r.timing.measurements == 2 and r.timing.noise_threshold == 0.25
    assert r.timing.cpu_threads is not None and r.timing.cpu_threads >= 1
    from cudaforge.engine.result_text import format_result

    text = format_result(r)
    assert "NOISY: over 0.25; measured 2x" in text and f"pinned to {r.timing.cpu_threads}" in text


JITTERY_CORE = (CORE / "correct.py").read_text().replace(
    "        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 0.5, 0.0)",
    "        import time\n\n        self.calls = getattr(self, 'calls', 0) + 1\n        if self.calls % 2:\n"
    "            time.sleep(0.003)\n"
    "        return _ext.relu_scale_bias(x.contiguous(), self.bias.contiguous(), 0.5, 0.0)")


def test_a_batch_counts_a_noisy_result_as_correct_and_never_fast(tmp_path: Path, cache_dir: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """One task, one auto round whose candidate is right but whose timing stays noisy: the round is accepted
    with noisy_timing, is not the session's best, and the batch counts the task correct and not fast."""
    from cudaforge.engine.session.batch import Batch, run_batch
    from cudaforge.engine.session.run_report import best_round, round_rows
    from cudaforge.engine.session.store import RunStore
    from llm_server import ScriptedLLMServer
    from session_kit import KEY, KEY_ENV, coder_reply, session_config

    assert (CORE / "correct.py").read_text() != JITTERY_CORE
    monkeypatch.setenv(KEY_ENV, KEY)
    task = tmp_path / "tasks" / "task.py"
    task.parent.mkdir()
    task.write_text((CORE / "task.py").read_text())
    with ScriptedLLMServer([coder_reply(JITTERY_CORE)]) as server:
        config = session_config(server, cache_dir, judge="heuristic", **{
            "session.rounds": 1, "session.mode": "auto", "timing.trials": 12, "timing.noise_threshold": 0.25,
            "timing.noise_retries": 1})
        batch = Batch.create(tmp_path / "runs", [task], config)
        summary = asyncio.run(run_batch(batch, jobs=1))
    (row,) = summary.rows
    assert row.status == "done" and row.correct and row.best_speedup is None and row.best_round is None, row
    assert summary.correct == 1 and all(v == 0.0 for v in summary.fast_p.values()), summary
    assert summary.geomean_speedup is None
    store = RunStore.open(row.run_dir, read_only=True)
    (rec,) = store.rounds()
    assert rec.result is not None and rec.result.accepted and rec.result.noisy, rec.result
    assert best_round(store.rounds()) is None
    assert round_rows(store.rounds())[0][-1] == "noisy timing"  # `cudaforge runs`' round table says why
