"""Unit tests of the runtime cache-reuse probe (engine/integrity/outputs.py: check_cache_reuse) in this process."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from cudaforge.engine.integrity.outputs import (
    SPARSE_ROUNDS,
    VerifiedCall,
    _flat,
    _mix_in_place,
    check_cache_reuse,
    check_constant_output,
)
from cudaforge.engine.observe import fingerprints, signature
from cudaforge.engine.results import Finding

TOL = {"atol": 1e-4, "rtol": 1e-4}
LAYOUT = {"fresh_beside": True}


@pytest.fixture(autouse=True, params=[True, False], ids=["fresh-beside", "fresh-offset"])
def _new_memory_layout(request: pytest.FixtureRequest) -> None:
    """Every probe test with both layouts of the new-memory probe: its draw made beside the probed inputs
    (a second input set fits the memory rule) or brought back from the host at offset addresses."""
    LAYOUT["fresh_beside"] = request.param


def reference(inputs: list[Any]) -> Any:
    x, w = inputs
    return torch.relu(x) * 2.0 + w


def make_inputs(seed: int) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 16, generator=g), torch.randn(16, generator=g)]


def probe(candidate: Callable[[list[Any]], Any], ref: Callable[[list[Any]], Any] = reference,
          make: Callable[[int], list[Any]] = make_inputs) -> dict[str, Finding]:
    findings = check_cache_reuse(candidate, ref, make, **TOL, fresh_beside=LAYOUT["fresh_beside"])
    return {f.name: f for f in findings}


def test_honest_candidate_has_no_findings() -> None:
    assert probe(lambda inp: reference([t.clone() for t in inp])) == {}


def pointer_keyed_cache() -> Callable[[list[Any]], Any]:
    """A result cache keyed on the first input's address alone."""
    cache: dict[int, torch.Tensor] = {}

    def cand(inp: list[Any]) -> Any:
        key = inp[0].data_ptr()
        if key not in cache:
            cache[key] = reference(inp)
        return cache[key]

    return cand


def test_pointer_keyed_cache_is_caught_in_the_same_memory() -> None:
    f = probe(pointer_keyed_cache())["result_cache"]
    assert f.severity == "fail" and f.evidence["probe"] == "same_memory" and f.evidence["stale"]


def test_pointer_and_version_keyed_cache_is_caught_because_the_probe_keeps_the_version() -> None:
    cache: dict[tuple[int, int], torch.Tensor] = {}

    def cand(inp: list[Any]) -> Any:
        key = (inp[0].data_ptr(), inp[0]._version)
        if key not in cache:
            cache[key] = reference(inp)
        return cache[key]

    assert probe(cand)["result_cache"].evidence["probe"] == "same_memory"


def test_probe_writes_through_data_without_bumping_the_version_counter() -> None:
    x = torch.zeros(4)
    before = x._version
    x.data.copy_(torch.ones(4))
    assert x._version == before and bool((x == 1).all())


def one_sample_cache(position: int, ref: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
    """A result cache keyed on the first input's address and validated by one element at `position`."""
    memo: dict[int, tuple[float, Any]] = {}

    def cand(inp: list[Any]) -> Any:
        x = inp[0]
        key, sample = x.data_ptr(), float(x.reshape(-1)[position])
        hit = memo.get(key)
        if hit is not None and hit[0] == sample:
            return hit[1]
        y = ref(inp)
        memo[key] = (sample, y)
        return y

    return cand


# Probe seeds (job seed + 20 000) whose three independently drawn masks all changed element 0 of a
# 64x256 input: the adversarial suite's cache_evasive.py was accepted at them (CPU, 2026-12-06).
ESCAPED_INDEPENDENT_MASKS = (27_042, 28_306, 33_709)


def test_one_sample_cache_is_caught_at_every_seed() -> None:
    """The sparse rounds' masks are disjoint: a cache validated by one element is caught whatever the seed,
    including the seeds where independent masks let it through, and wherever its sample lies."""
    def one_input(seed: int) -> list[Any]:
        return [torch.randn(64, 256, generator=torch.Generator().manual_seed(seed))]

    def ref(inputs: list[Any]) -> Any:
        return torch.relu(inputs[0]) * 2.0

    seeds = ESCAPED_INDEPENDENT_MASKS + tuple(range(40_000, 40_060))
    for seed in seeds:
        for position in (0, 64 * 256 - 1, 5_000):
            found = check_cache_reuse(one_sample_cache(position, ref), ref, one_input, **TOL, seed=seed,
                                      fresh_beside=LAYOUT["fresh_beside"])
            assert [(f.name, f.evidence["probe"]) for f in found] == [("result_cache", "same_memory_sparse")], \
                (seed, position)


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "tiny"])
def test_sparse_rounds_change_disjoint_elements(layout: str) -> None:
    """Each round of _mix_in_place changes about `fraction` of the elements, at least one, and no two
    rounds share more than the single moving element each adds (independent masks shared about n/256)."""
    shape = {"contiguous": (64, 256), "transposed": (256, 64), "tiny": (8,)}[layout]
    m = torch.arange(float(torch.Size(shape).numel())).reshape(shape)
    if layout == "transposed":
        m = m.t()
        assert not m.is_contiguous()
    gen = torch.Generator().manual_seed(7)
    changed: list[set[int]] = []
    for band in range(SPARSE_ROUNDS):
        before = m.clone()
        _mix_in_place(m, 123, band, gen, 1 / 16)
        changed.append(set((m != before).reshape(-1).nonzero().reshape(-1).tolist()))
    n = m.numel()
    for band, positions in enumerate(changed):
        assert positions, band
        if n >= 1024:
            assert n / 16 * 0.8 < len(positions) < n / 16 * 1.2, (band, len(positions))
        for other in changed[band + 1:]:
            assert len(positions & other) <= 2, (band, sorted(positions & other)[:8])


def test_sample_validated_cache_is_caught_by_the_sparse_probe() -> None:
    f = probe(one_sample_cache(0, reference))["result_cache"]
    assert f.evidence["probe"] == "same_memory_sparse"


def test_shape_keyed_cache_is_caught() -> None:
    cache: dict[tuple[int, ...], torch.Tensor] = {}

    def cand(inp: list[Any]) -> Any:
        return cache.setdefault(tuple(inp[0].shape), reference(inp))

    assert "result_cache" in probe(cand)


def test_shape_keyed_cache_that_checks_pointers_is_caught_in_new_memory() -> None:
    """Recomputes when the same memory is reused (looks honest there), caches across new allocations."""
    state: dict[str, Any] = {}

    def cand(inp: list[Any]) -> Any:
        ptr = inp[0].data_ptr()
        if state.get("ptr") == ptr or "out" not in state:
            state["out"] = reference(inp)
            state["ptr"] = ptr
        return state["out"]

    f = probe(cand)["result_cache"]
    assert f.evidence["probe"] == "new_memory"


def test_candidate_that_degrades_after_a_few_calls_is_inconsistent() -> None:
    calls = [0]

    def cand(inp: list[Any]) -> Any:
        calls[0] += 1
        y = reference(inp)
        return y if calls[0] < 2 else y + 1.0

    f = probe(cand)["inconsistent_output"]
    assert f.severity == "fail" and not f.evidence["stale"]


def test_reused_output_buffer_written_every_call_is_fine() -> None:
    buf: dict[str, torch.Tensor] = {}

    def cand(inp: list[Any]) -> Any:
        out = buf.setdefault("y", torch.empty(8, 16))
        out.copy_(reference(inp))
        return out

    assert probe(cand) == {}


def test_wrong_from_the_start_is_left_to_the_correctness_trials() -> None:
    assert probe(lambda inp: reference(inp) + 1.0) == {}


def test_mixed_inputs_integer_and_scalar() -> None:
    def make(seed: int) -> list[Any]:
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(5, 3, generator=g), torch.randint(0, 5, (7,), generator=g), 3]

    def ref(inp: list[Any]) -> Any:
        table, idx, k = inp
        return table[idx] * k, idx.sum()

    assert check_cache_reuse(lambda inp: ref(inp), ref, make, **TOL) == []
    cache: dict[int, Any] = {}

    def cand(inp: list[Any]) -> Any:
        return cache.setdefault(inp[1].data_ptr(), ref(inp))

    assert {f.name for f in check_cache_reuse(cand, ref, make, **TOL)} == {"result_cache"}


def test_constant_output_where_the_reference_varies() -> None:
    def tiny(inp: list[Any]) -> Any:
        return inp[0] * 1e-6

    def make(seed: int) -> list[Any]:
        return [torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))]

    found = {f.name: f for f in check_cache_reuse(lambda inp: torch.zeros_like(inp[0]), tiny, make, **TOL)}
    assert set(found) == {"constant_output"}
    assert found["constant_output"].evidence["outputs"][0]["value"] == 0.0
    assert check_cache_reuse(lambda inp: tiny([t.clone() for t in inp]), tiny, make, **TOL) == []


@pytest.mark.parametrize("expected, got, flagged", [
    (torch.arange(6.0), torch.zeros(6), True),
    (torch.arange(6.0), torch.full((6,), 2.5), True),
    (torch.zeros(6), torch.zeros(6), False),  # the reference is constant too
    (torch.full((6,), 1e-40).index_fill(0, torch.tensor([0]), 0.0), torch.zeros(6), False),  # denormal spread
    (torch.arange(6.0), torch.arange(6.0), False),
    (torch.tensor([1.0]), torch.tensor([0.0]), False),  # one element says nothing
    (torch.arange(6), torch.zeros(6, dtype=torch.long), False),  # integers are compared exactly elsewhere
])
def test_check_constant_output(expected: torch.Tensor, got: torch.Tensor, flagged: bool) -> None:
    assert (check_constant_output([expected], [got]) is not None) is flagged


def test_new_memory_draw_never_lands_on_the_probed_addresses() -> None:
    """Where the allocator hands the freed memory back (simulated: the draw returns tensors over the old
    storage), the draw comes back from the host into new tensors at other addresses, with its values."""
    from cudaforge.engine.integrity.outputs import _addresses, _draw_elsewhere

    storage = torch.randn(1024)
    work = [storage[:512].view(16, 32), 3]
    old = _addresses(work)
    fresh = _draw_elsewhere(work, lambda: [storage[:512].view(16, 32), 3], lambda v: [
        t.clone() if isinstance(t, torch.Tensor) else t for t in v])
    assert work == [] and not (_addresses(fresh) & old)
    assert torch.equal(fresh[0], storage[:512].view(16, 32)) and fresh[1] == 3
    elsewhere = torch.randn(16, 32)
    assert _draw_elsewhere([torch.randn(4)], lambda: [elsewhere], lambda v: v)[0] is elsewhere  # no copy needed


def test_a_second_host_input_set_asks_for_host_room_first() -> None:
    """Where B cannot be the probed draw flipped in place (an integer input) and no second set fits beside
    it, B waits on the host; a reference that changes its inputs in place also needs a snapshot of them
    there each probe: two input sets on the host, beyond memory.host_needed_bytes. The probes ask for the
    room first (the worker grows its host reservation), and only in that case."""
    def in_place(inputs: list[Any]) -> Any:
        x, idx = inputs
        x.add_(1.0)  # the reference changes its input in place
        return x[idx] * 2.0

    def make(seed: int) -> list[Any]:
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(64, generator=g), torch.randint(0, 64, (8,), generator=g)]

    asked: list[int] = []
    kwargs: dict[str, Any] = {**TOL, "fresh_beside": False, "host_input_room": asked.append}
    assert check_cache_reuse(in_place, in_place, make, reference_mutates=True, **kwargs) == []
    assert asked == [64 * 4 + 8 * 8]  # the input set's bytes, asked for once
    asked.clear()
    assert check_cache_reuse(in_place, in_place, make, reference_mutates=False, **kwargs) == []
    assert asked == []  # one input set on the host: within the estimate


def test_each_probe_lets_a_waiting_window_go_before_its_candidate_and_between_compared_slices(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The probes' step boundaries (observe.checkpoint, where the worker lets a waiting timed window go): one
    between the reference's part and the candidate's call, none between that call and its compare's first
    slice, and one after every slice of the compare (a 6 GiB output's compare was one step before)."""
    from cudaforge.engine import observe
    from cudaforge.engine.integrity import outputs

    log: list[str] = []
    monkeypatch.setattr(observe, "_CHECKPOINTS", [lambda: log.append("step")])
    monkeypatch.setattr(outputs, "slice_elements", lambda _device: 40)  # 8 x 16 outputs: 4 slices each

    def ref(inputs: list[Any]) -> Any:
        log.append("reference")
        return reference(inputs)

    def cand(inputs: list[Any]) -> Any:
        log.append("candidate")
        return reference([t.clone() for t in inputs])

    assert probe(cand, ref) == {}
    calls = [k for k, entry in enumerate(log) if entry == "candidate"]
    assert len(calls) == 3 + SPARSE_ROUNDS  # baseline, same memory, the sparse rounds, new memory
    for k in calls:
        assert log[k - 1] == "step" and "reference" in log[:k - 1]  # a boundary between the two parts
        after = log[k + 1:]
        until_next = after[:after.index("reference")] if "reference" in after else after
        # one per compared slice, then (but for the last probe) the next probe's own boundary
        assert until_next.count("step") == (4 if k == calls[-1] else 5), (k, until_next)


# ---------------------------------------------------------------- probes judged by the correctness trials


def _verified(candidate: Callable[[list[Any]], Any], ref: Callable[[list[Any]], Any] = reference,
              make: Callable[[int], list[Any]] = make_inputs, seeds: range = range(20_000, 20_005)
              ) -> tuple[VerifiedCall, ...]:
    """What the worker's correctness trials record (pipeline._trial) at the probes' seeds: the draw's, the
    reference's and the candidate's signatures. Each trial's candidate runs on a copy: the probes see a
    candidate with no memory of these calls."""
    out = []
    for seed in seeds:
        inputs = make(seed)
        expected = _flat(ref([t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]))
        got = _flat(candidate([t.clone() if isinstance(t, torch.Tensor) else t for t in inputs]))
        out.append(VerifiedCall(inputs=signature(inputs, fingerprints(inputs)),
                                reference=tuple(fingerprints(expected)), candidate=signature(got, fingerprints(got))))
    return tuple(out)


def _counted(fn: Callable[[list[Any]], Any], calls: list[int]) -> Callable[[list[Any]], Any]:
    def wrapped(inp: list[Any]) -> Any:
        calls.append(1)
        return fn(inp)

    return wrapped


def test_probes_at_the_trials_values_skip_the_reference_where_the_candidate_repeats_a_trial() -> None:
    """Baseline and new memory (and, where a second set fits, same memory) draw a trial's values; an honest
    candidate hands back that trial's output, so only the sparse rounds (and the flipped same-memory probe)
    still call the reference, and nothing is found, as without the trials."""
    honest = lambda inp: reference([t.clone() for t in inp])  # noqa: E731
    ref_calls: list[int] = []
    found = check_cache_reuse(honest, _counted(reference, ref_calls), make_inputs, **TOL,
                              fresh_beside=LAYOUT["fresh_beside"], verified=_verified(honest))
    assert found == []
    assert len(ref_calls) == SPARSE_ROUNDS + (0 if LAYOUT["fresh_beside"] else 1)
    without: list[int] = []
    check_cache_reuse(honest, _counted(reference, without), make_inputs, **TOL, fresh_beside=LAYOUT["fresh_beside"])
    assert len(without) == SPARSE_ROUNDS + 3


def test_caches_are_caught_as_before_with_the_trials_recorded() -> None:
    """A stale output is no trial's: the whole probe runs and finds it, at the probe it did before."""
    trials = _verified(lambda inp: reference(inp))
    found = {f.name: f for f in check_cache_reuse(pointer_keyed_cache(), reference, make_inputs, **TOL,
                                                  fresh_beside=LAYOUT["fresh_beside"], verified=trials)}
    assert found["result_cache"].evidence["probe"] == "same_memory" and found["result_cache"].evidence["stale"]

    def one_input(seed: int) -> list[Any]:
        return [torch.randn(64, 256, generator=torch.Generator().manual_seed(seed))]

    def ref(inputs: list[Any]) -> Any:
        return torch.relu(inputs[0]) * 2.0

    for seed in ESCAPED_INDEPENDENT_MASKS:
        trials = _verified(ref, ref, one_input, range(seed, seed + 5))
        found_sparse = check_cache_reuse(one_sample_cache(0, ref), ref, one_input, **TOL, seed=seed,
                                         fresh_beside=LAYOUT["fresh_beside"], verified=trials)
        assert [(f.name, f.evidence["probe"]) for f in found_sparse] == [("result_cache", "same_memory_sparse")]


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_same_bytes_in_another_layout_or_a_constant_get_the_whole_probe(device: str) -> None:
    """A probe's output whose memory holds a trial's bytes but reads as other values (other strides) is
    compared in full, and so is a constant output equal to a trial's: each is found as without the trials.
    On a GPU the fingerprint reads memory order, so there only the strides in the signature tell the two
    apart (the host's hash reads the values in order)."""
    calls: list[int] = []

    def make_on(seed: int) -> list[Any]:
        return [t.to(device) for t in make_inputs(seed)]

    def relaid_after_the_trials(inp: list[Any]) -> Any:
        out = reference(inp)
        calls.append(1)
        if len(calls) == 1:  # the baseline probe's first call: right
            return out
        # the right bytes, read with the strides of the transpose: other values
        return torch.as_strided(out.contiguous().clone(), out.shape, (1, out.shape[0]))

    trials = _verified(reference, reference, make_on)
    found = {f.name: f for f in check_cache_reuse(relaid_after_the_trials, reference, make_on, **TOL,
                                                  fresh_beside=LAYOUT["fresh_beside"], verified=trials)}
    wrong = found["inconsistent_output"]  # at the first probe after the baseline, a failing one
    assert wrong.evidence["probe"] == "same_memory" and wrong.severity == "fail"

    def tiny(inp: list[Any]) -> Any:
        return inp[0] * 1e-6

    def make(seed: int) -> list[Any]:
        return [torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))]

    zeros = lambda inp: torch.zeros_like(inp[0])  # noqa: E731
    found_constant = check_cache_reuse(zeros, tiny, make, **TOL, fresh_beside=LAYOUT["fresh_beside"],
                                       verified=_verified(zeros, tiny, make))
    assert {f.name for f in found_constant} == {"constant_output"}
