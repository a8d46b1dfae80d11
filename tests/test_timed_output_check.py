"""The timed-output check (integrity/runtime.py TimedOutputCheck) driven as Timer.event_times drives it, on
the CPU device: the expected outputs of the two input contents are computed once before the timed window
where the reference leaves its inputs alone, per sampled call where it changes them; either way a timed
call that returns the other content's output, or a stale one, fails."""

from __future__ import annotations

from typing import Any

import torch
from cudaforge.engine.integrity.runtime import FlippingDraw, Rotation, TimedOutputCheck
from cudaforge.engine.worker import memory
from cudaforge.engine.worker.compare import compare_output


class CountingScale(torch.nn.Module):
    """y = 2x, counting its calls; with `mutates`, it also adds one to its input in place."""

    def __init__(self, mutates: bool = False) -> None:
        super().__init__()
        self.calls = 0
        self.mutates = mutates

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = x * 2
        if self.mutates:
            x.add_(1)
        return y


class StaleAfter(torch.nn.Module):
    """Right for its first `honest` calls, then returns its first output again."""

    def __init__(self, honest: int) -> None:
        super().__init__()
        self.calls, self.honest, self.first = 0, honest, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        y = x * 2
        if self.first is None:
            self.first = y.clone()
        return y if self.calls <= self.honest else self.first


def _check(candidate: Rotation, reference: torch.nn.Module, mutates: bool) -> TimedOutputCheck:
    return TimedOutputCheck(candidate, reference, torch.device("cpu"), atol=1e-5, rtol=1e-5, compare=compare_output,
                            protected=set(), sync=lambda: None, numerics=(lambda: None, lambda: None),
                            samples=3, to_host=memory.host_copy, reference_mutates=mutates)


def _timed_window(check: TimedOutputCheck, candidate: Rotation, trials: int) -> None:
    """What Timer.event_times does with its hooks around the candidate's timed calls."""
    check.begin(trials)
    for _ in range(trials):
        check.before("candidate")
        out: Any = candidate()
        check.after("candidate", out)


def test_the_expected_outputs_are_computed_once_per_input_content_before_the_window() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    reference = CountingScale()
    candidate = Rotation(CountingScale(), draws)
    check = _check(candidate, reference, mutates=False)
    assert check.prepare() == 2 and reference.calls == 2
    for _ in range(3):  # a noisy timing is measured again: the same expected outputs serve every window
        _timed_window(check, candidate, trials=20)
    assert reference.calls == 2, "no reference call inside the timed windows"
    assert len(check.checked) == 3 * 4 and check.findings() == []
    assert torch.equal(check.prepared[0][0][0], draws[0][0] * 2) and torch.equal(check.prepared[1][0][0], draws[1][0] * 2)


def test_a_flipping_draw_gets_the_expected_output_of_the_content_each_call_gets() -> None:
    x = torch.arange(64, dtype=torch.float32)
    draw = FlippingDraw([x])
    reference = CountingScale()
    candidate = Rotation(CountingScale(), draw)
    check = _check(candidate, reference, mutates=False)
    assert check.prepare() == 2
    assert torch.equal(check.prepared[0][0][0], torch.arange(64.0) * 2)
    assert torch.equal(check.prepared[1][0][0], torch.arange(64.0).flip(0) * 2)
    for _ in range(2):
        _timed_window(check, candidate, trials=15)  # the candidate's Rotation flips the draw itself
    assert check.findings() == [] and len(check.checked) == 8


def test_a_reference_that_changes_its_inputs_computes_each_sampled_calls_own() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    reference = CountingScale(mutates=True)
    candidate = Rotation(CountingScale(mutates=True), draws)
    check = _check(candidate, reference, mutates=True)
    assert check.prepare() == 0 and reference.calls == 0
    _timed_window(check, candidate, trials=20)
    # One reference call per sampled call, on a copy of that call's inputs (the draws change call by call).
    assert reference.calls == 4 and check.findings() == []


def test_a_stale_timed_output_fails_with_the_prepared_outputs() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    check = _check(candidate := Rotation(StaleAfter(honest=5), draws), CountingScale(), mutates=False)
    check.prepare()
    _timed_window(check, candidate, trials=30)
    (finding,) = check.findings()
    assert finding.name == "timing_output_mismatch" and check.failures, check.failures
    assert 29 in [f["call"] for f in check.failures]  # the last timed call is always checked


def test_a_large_outputs_compare_runs_side_by_side_and_still_fails_a_stale_output() -> None:
    """Compares of at least `side_by_side_bytes` of expected output run inside `side_by_side` (the worker:
    the window's exclusive hold let go) once one of them, timed in the window, took over `side_by_side_s`;
    smaller ones never do, nor large ones that are fast; the verdict is the same either way."""
    entered: list[int] = []

    class Recording:
        def __enter__(self) -> None:
            entered.append(1)

        def __exit__(self, *exc: object) -> None:
            return None

    draws = [[torch.randn(64)], [torch.randn(64)]]  # 256-byte outputs
    # (bytes threshold, seconds threshold, the window's drain, compares side by side: all but the first
    # compared, timed in the window). A compare shorter than the window's own drain stays in the window.
    for threshold, seconds, drain, side_by_side in ((256, 0.0, 0.0, True), (257, 0.0, 0.0, False),
                                                    (256, 60.0, 0.0, False), (256, 0.0, 60.0, False)):
        entered.clear()
        candidate = Rotation(StaleAfter(honest=5), draws)
        check = TimedOutputCheck(candidate, CountingScale(), torch.device("cpu"), atol=1e-5, rtol=1e-5,
                                 compare=compare_output, protected=set(), sync=lambda: None,
                                 numerics=(lambda: None, lambda: None), samples=3, to_host=memory.host_copy,
                                 reference_mutates=False, side_by_side=Recording, side_by_side_bytes=threshold,
                                 side_by_side_s=seconds, pause_cost_s=lambda drain=drain: drain)
        check.prepare()
        _timed_window(check, candidate, trials=30)
        compared = len(check.checked) - check.repeats  # repeats of a passed call are not compared again
        assert len(entered) == (compared - 1 if side_by_side else 0) == check.compared_side_by_side
        (finding,) = check.findings()
        assert finding.name == "timing_output_mismatch" and 29 in [f["call"] for f in check.failures]


class HandsBackExpected(torch.nn.Module):
    """Finds the expected outputs the check keeps (as a candidate could through gc) and returns the one of
    the content it was given: right in value, the check's own memory."""

    def __init__(self, check: list[TimedOutputCheck], draws: list[list[torch.Tensor]]) -> None:
        super().__init__()
        self.check, self.draws = check, draws

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        prepared = self.check[0].prepared if self.check else {}
        index = next(i for i, d in enumerate(self.draws) if d[0].data_ptr() == x.data_ptr())
        return prepared[index][0][0] if index in prepared else x * 2


class ReturnsItsInput(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _kept_check(candidate: Rotation, reference: torch.nn.Module) -> tuple[TimedOutputCheck, list[int]]:
    kept: list[int] = []

    def keep(values: list[Any]) -> list[Any]:  # as memory.ExpectedPlace does on a GPU while they are small
        kept.append(len(values))
        return list(values)

    check = TimedOutputCheck(candidate, reference, torch.device("cpu"), atol=1e-5, rtol=1e-5, compare=compare_output,
                             protected=set(), sync=lambda: None, numerics=(lambda: None, lambda: None),
                             samples=3, to_host=memory.host_copy, reference_mutates=False, keep=keep)
    return check, kept


def test_expected_outputs_kept_where_they_are_are_not_poisoned_and_still_catch_the_other_content() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    candidate = Rotation(CountingScale(), draws)
    check, kept = _kept_check(candidate, CountingScale())
    assert check.prepare() == 2 and kept == [1, 1]
    assert torch.equal(check.prepared[0][0][0], draws[0][0] * 2)  # kept as computed, not overwritten with NaN
    _timed_window(check, candidate, trials=20)
    assert check.findings() == []
    stale = Rotation(StaleAfter(honest=1), draws)
    check, _ = _kept_check(stale, CountingScale())
    check.prepare()
    _timed_window(check, stale, trials=20)
    assert [f.name for f in check.findings()] == ["timing_output_mismatch"]


def test_a_candidate_handing_back_a_kept_expected_output_fails() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    holder: list[TimedOutputCheck] = []
    candidate = Rotation(HandsBackExpected(holder, draws), draws)
    check, _ = _kept_check(candidate, CountingScale())
    holder.append(check)
    check.prepare()
    _timed_window(check, candidate, trials=20)
    [found] = check.findings()
    assert found.name == "timing_output_mismatch" and "expected output itself" in found.message
    assert len(check.failures) == len(check.checked) == 4


def test_a_reference_output_that_is_its_input_is_copied_not_kept() -> None:
    draws = [[torch.randn(64)], [torch.randn(64)]]
    candidate = Rotation(ReturnsItsInput(), draws)
    check, kept = _kept_check(candidate, ReturnsItsInput())
    check.prepare()
    assert kept == []  # aliases its input: the rotation rewrites that memory, so the check holds a copy
    assert check.prepared[0][0][0].untyped_storage().data_ptr() != draws[0][0].untyped_storage().data_ptr()


def test_expected_outputs_stay_on_the_device_only_within_the_memory_rule_and_the_cap(monkeypatch: Any) -> None:
    gib = 1 << 30
    monkeypatch.setattr(memory, "REFERENCE_IO", {"peak_bytes": gib, "input_bytes": gib // 2})
    monkeypatch.setattr(memory, "held_allocated", lambda: 0)
    monkeypatch.setattr(memory, "CAP", {})
    # now (0) + one call beyond its inputs (0.5 GiB) + kept <= 1.25 x 1 GiB + 1 GiB - 0.25 GiB
    assert memory.expected_fits(int(1.5 * gib)) and not memory.expected_fits(int(1.51 * gib))
    monkeypatch.setattr(memory, "CAP", {"bytes": gib})
    assert memory.expected_fits(gib // 4) and not memory.expected_fits(gib // 4 + (1 << 20))
    monkeypatch.setattr(memory, "REFERENCE_IO", {})
    assert not memory.expected_fits(1)  # no measured reference peak: nothing stays


def test_a_sampled_call_repeating_a_passed_one_bit_for_bit_is_not_compared_again() -> None:
    """Per input content, the first sampled call is compared; later ones whose inputs and output are that
    call's, bit for bit, pass on their fingerprints. A wrong output among them is still compared, and fails."""
    compares: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        compares.append(1)
        return compare_output(*args, **kwargs)

    draws = [[torch.randn(64)], [torch.randn(64)]]
    candidate = Rotation(CountingScale(), draws)
    check = TimedOutputCheck(candidate, CountingScale(), torch.device("cpu"), atol=1e-5, rtol=1e-5, compare=counted,
                             protected=set(), sync=lambda: None, numerics=(lambda: None, lambda: None), samples=3,
                             to_host=memory.host_copy, reference_mutates=False)
    check.prepare()
    for _ in range(3):
        _timed_window(check, candidate, trials=20)
    assert check.findings() == [] and len(check.checked) == 12
    assert len(compares) == 2 and check.repeats == 10, "one compare per input content"

    stale = Rotation(StaleAfter(honest=6), draws)  # the first content's output from its 7th call on
    check = _check(stale, CountingScale(), mutates=False)
    check.prepare()
    for _ in range(4):
        _timed_window(check, stale, trials=20)
    assert check.repeats > 0
    (found,) = check.findings()
    assert found.name == "timing_output_mismatch"
    assert {f["call"] % 2 for f in found.evidence["failures"]} == {1}, "only the other content's calls are wrong"
