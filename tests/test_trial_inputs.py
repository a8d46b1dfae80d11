"""A correctness trial keeps no copy of its inputs (engine/worker/pipeline.py `_trial`): each side's
changes are seen by fingerprint against the draw, and the side that runs second gets the draw itself or
a fresh draw of the same seed. The GPU fingerprint's sums (engine/observe.py `word_sums`) are checked
here on host tensors: the same torch arithmetic runs on both devices."""

from __future__ import annotations

import subprocess
import sys
import types
from typing import Any

import pytest
import torch
from cudaforge.engine import observe
from cudaforge.engine.observe import signature
from cudaforge.engine.worker import memory, pipeline

ORDERS = ("reference_first", "candidate_first")
ROWS, COLS = 64, 32


def _task() -> types.ModuleType:
    task = types.ModuleType("trial_task")
    task.get_inputs = lambda: [torch.randn(ROWS, COLS)]  # type: ignore[attr-defined]
    return task


class RowSum(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sum(dim=1)


class DoublesItsInput(torch.nn.Module):
    """Right answer, then its input doubled in place."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = x.sum(dim=1)
        x.mul_(2.0)
        return out


class InPlaceReference(torch.nn.Module):
    """An in-place task: the reference's answer is its input, changed."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mul_(3.0)


def _run(candidate: torch.nn.Module, order: str, monkeypatch: pytest.MonkeyPatch,
         reference: torch.nn.Module | None = None) -> tuple[Any, list[tuple[int, ...]]]:
    parked: list[tuple[int, ...]] = []
    real = memory.host_copy

    def spy(values: list[Any], wait: bool = True) -> list[Any]:
        parked.extend(tuple(v.shape) for v in values if isinstance(v, torch.Tensor))
        return real(values, wait)

    monkeypatch.setattr(memory, "host_copy", spy)
    out = pipeline._trial(_task(), reference or RowSum(), candidate, torch.device("cpu"), None, 11, "task", order, None)
    return out, parked


def _original(seed: int = 11) -> torch.Tensor:
    torch.manual_seed(seed)
    return _task().get_inputs()[0]


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("fits", [True, False], ids=["output-fits-beside", "output-to-host"])
def test_an_honest_trial_copies_no_inputs_and_passes(order: str, fits: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first side's output waits on the device where a second output fits the memory rule beside the
    reference's peak (memory.park), else on the host; the inputs are never copied."""
    monkeypatch.setattr(memory, "second_draw_fits", lambda nbytes: fits)
    (expected, got, mutated, aliased, ref_changed, _), parked = _run(RowSum(), order, monkeypatch)
    assert parked == ([] if fits else [(ROWS,)])
    assert not mutated and not aliased and not ref_changed
    assert torch.equal(expected[0], got[0]) and torch.equal(expected[0], _original().sum(dim=1))


@pytest.mark.parametrize("order", ORDERS)
def test_a_trial_is_recorded_as_the_cache_probes_recognise_it(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The trial's signatures (outputs.VerifiedCall) are those of its draw and of each side's output: a probe
    drawing at the trial's seed finds them, and the candidate's output is told apart from the reference's
    layout-for-layout (a transposed copy of the same values is another signature)."""
    (expected, got, _, _, _, verified), _ = _run(RowSum(), order, monkeypatch)
    again = _original()
    assert verified.inputs == signature([again], observe.fingerprints([again]))
    assert verified.candidate == signature(got, observe.fingerprints(got))
    assert verified.reference == tuple(observe.fingerprints(expected))
    wide = torch.randn(4, 6)
    other_layout = wide.t().contiguous().t()  # the same values, the memory transposed
    assert signature([wide], observe.fingerprints([wide])) != \
        signature([other_layout], observe.fingerprints([other_layout]))


def test_an_output_that_shares_memory_with_the_inputs_goes_to_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """Kept on the device it would keep the inputs' memory alive when they are drawn again."""
    monkeypatch.setattr(memory, "second_draw_fits", lambda nbytes: True)
    x = torch.randn(4, 4)
    parked, copied = memory.park([x.view(-1)], beside=[x])
    assert copied and parked[0].data_ptr() != x.data_ptr() and torch.equal(parked[0], x.view(-1))
    y = torch.randn(4)
    parked, copied = memory.park([y], beside=[x])
    assert not copied and parked[0] is y


@pytest.mark.parametrize("order", ORDERS)
def test_a_candidate_that_changes_its_input_is_seen_and_the_reference_gets_the_draw(
        order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (expected, got, mutated, _, ref_changed, _), parked = _run(DoublesItsInput(), order, monkeypatch)
    assert mutated == {0} and not ref_changed
    assert (ROWS, COLS) not in parked
    # Whichever side ran first, the reference computed on the values drawn, not on the doubled ones.
    assert torch.allclose(expected[0], _original().sum(dim=1)) and torch.allclose(got[0], expected[0])


@pytest.mark.parametrize("order", ORDERS)
def test_an_in_place_reference_is_not_the_candidates_mutation(order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    (expected, got, mutated, _, ref_changed, _), _ = _run(InPlaceReference(), order, monkeypatch,
                                                       reference=InPlaceReference())
    assert ref_changed and not mutated
    assert torch.allclose(expected[0], 3.0 * _original()) and torch.allclose(got[0], expected[0])


def test_word_sums_see_single_changes_swaps_and_changes_that_keep_the_plain_sum() -> None:
    words = torch.randint(-(2**31), 2**31 - 1, (10_000,), dtype=torch.int32, generator=torch.Generator().manual_seed(3))
    base = observe.word_sums(words)
    assert base == observe.word_sums(words.clone())
    one = words.clone()
    one[1234] += 1
    swapped = words.clone()
    swapped[[10, 20]] = words[[20, 10]]
    balanced = words.clone()  # + d here, - d there: the plain sum stays, the weighted one moves
    balanced[5] += 7
    balanced[9_000] -= 7
    for changed in (one, swapped, balanced):
        assert observe.word_sums(changed) != base
    assert observe.word_sums(balanced)[0] == base[0]


def test_the_fingerprint_key_is_drawn_per_process() -> None:
    code = "from cudaforge.engine import observe; print(observe._KEY)"
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    assert len(keys) == 2
