"""The candidate's construction replays the reference's random fills (engine/worker/init_replay.py): the
weights and the generator's state after it are bit for bit those of a construction that drew them, and a
fill whose draws were changed, or that is not the same fill, is drawn. Last, a real evaluation in a worker."""

from __future__ import annotations

import asyncio
from pathlib import Path

import torch
from cudaforge.engine.candidate import load_candidate
from cudaforge.engine.evaluation.evaluator import Evaluator
from cudaforge.engine.task import load_task
from cudaforge.engine.worker import init_replay
from torch import nn


class Wide(nn.Module):
    """nn.Linear's fills (uniform_ in place), a parameter drawn by a factory, a small layer under the bound."""

    def __init__(self, n: int = 2048) -> None:
        super().__init__()
        self.a = nn.Linear(n, n)
        self.p = nn.Parameter(torch.randn(n, 512))
        self.small = nn.Linear(n, 64)  # 128 Ki elements: drawn, never recorded
        self.c = nn.Linear(n, 1024)


class Rewritten(nn.Module):
    """Draws that the construction changes afterwards, in ways version counters do not see."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(2048, 2048)
        self.a.weight.data.mul_(0.5)  # through .data: no version bump
        self.b = nn.Linear(2048, 2048)
        self.b.weight.data[:4].zero_()  # through a view of .data
        self.scaled = nn.Parameter(torch.randn(1024, 1024) * 0.1)  # the draw is a temporary, not the parameter
        self.kept = nn.Parameter(torch.randn(1024, 1024))
        self.last = nn.Linear(2048, 2048)


def _built(cls: type, record: init_replay.ConstructionRecord | None = None, mode: str = "",
           seed: int = 7) -> tuple[nn.Module, torch.Tensor, init_replay.ReplayStats]:
    """A model of `cls` built from `seed` (drawn, recorded into `record` or replayed from it) and the host
    generator's state after it."""
    stats = init_replay.ReplayStats()
    torch.manual_seed(seed)
    if mode == "record":
        assert record is not None
        with init_replay.recording(record):
            model = cls()
        record.keep_only(model)
    elif mode == "replay":
        assert record is not None
        with init_replay.replaying(record, stats):
            model = cls()
    else:
        model = cls()
    return model, torch.get_rng_state(), stats


def _same(a: nn.Module, b: nn.Module) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), name


def test_a_candidate_built_as_the_reference_gets_its_draws_bit_for_bit() -> None:
    drawn, drawn_state, _ = _built(Wide)
    record = init_replay.ConstructionRecord()
    reference, reference_state, _ = _built(Wide, record, "record")
    assert len(record.fills) == 3  # a.weight, p, c.weight (the biases and `small` are under the bound)
    candidate, candidate_state, stats = _built(Wide, record, "replay")
    assert (stats.fills, stats.replayed) == (3, 3)
    assert stats.replayed_bytes == 4 * (2048 * 2048 + 2048 * 512 + 1024 * 2048)
    _same(drawn, reference)
    _same(drawn, candidate)
    assert torch.equal(drawn_state, reference_state) and torch.equal(drawn_state, candidate_state)
    for name, p in candidate.named_parameters():  # copies: nothing is shared with the reference
        assert p.untyped_storage().data_ptr() != dict(reference.named_parameters())[name].untyped_storage().data_ptr()


def test_draws_changed_after_them_or_not_kept_by_the_model_are_drawn_again() -> None:
    drawn, drawn_state, _ = _built(Rewritten)
    record = init_replay.ConstructionRecord()
    _built(Rewritten, record, "record")
    assert len(record.fills) == 2  # `kept` and `last.weight`: a and b were written, `scaled`'s draw is gone
    candidate, candidate_state, stats = _built(Rewritten, record, "replay")
    assert (stats.fills, stats.replayed) == (5, 2)
    _same(drawn, candidate)
    assert torch.equal(drawn_state, candidate_state)


def test_a_change_after_the_construction_is_seen_by_its_version() -> None:
    record = init_replay.ConstructionRecord()
    reference, _, _ = _built(Wide, record, "record")
    with torch.no_grad():
        reference.c.weight.add_(1.0)  # after the recording: the version counter says so
    drawn, _, _ = _built(Wide)
    candidate, _, stats = _built(Wide, record, "replay")
    assert stats.replayed == 2
    _same(drawn, candidate)


def test_another_seed_order_size_or_generator_is_drawn() -> None:
    record = init_replay.ConstructionRecord()
    _built(Wide, record, "record")

    class Reordered(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c = nn.Linear(2048, 1024)  # Wide's last layer first: the generator is elsewhere
            self.a = nn.Linear(2048, 2048)

    class OwnGenerator(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.empty(2048, 2048).uniform_(generator=torch.Generator().manual_seed(7)))

    for cls, seed in ((Wide, 8), (Reordered, 7), (OwnGenerator, 7)):
        drawn, drawn_state, _ = _built(cls, seed=seed)
        candidate, candidate_state, stats = _built(cls, record, "replay", seed=seed)
        assert stats.replayed == 0, cls.__name__
        _same(drawn, candidate)
        assert torch.equal(drawn_state, candidate_state)


WIDE = Path(__file__).parent / "tasks" / "wide_linear"


def test_a_worker_replays_the_fills_at_full_size_and_in_the_shape_check(cpu_options) -> None:
    """A real evaluation (CPU device, worker process): a candidate whose layers have other names than the
    reference's, so it is right only if its weights are the reference's draws, is accepted; its
    construction's fills were replayed (`init.replay`), and so were those of the shape check's smaller
    models (`shapes.replay`)."""
    result = asyncio.run(Evaluator(cpu_options).evaluate(load_task(WIDE / "task.py"),
                                                         load_candidate(WIDE / "sequential.py")))
    # Pure PyTorch: correct, and refused only for having no kernel of its own (as the KernelBench sweep's).
    assert result.outcome == "integrity_failure", result.message + result.traceback + result.stderr_tail
    assert [f.name for f in result.failing_findings()] == ["no_custom_kernel"]
    assert result.correctness is not None and result.correctness.passed
    assert result.phases.get("init.replay", 0) > 0, result.phases
    assert result.phases.get("shapes.replay", 0) > 0, result.phases
    assert not any(f.name == "shape_specialized" for f in result.findings)


def test_a_fill_under_the_bound_is_not_recorded() -> None:
    record = init_replay.ConstructionRecord()
    with init_replay.recording(record):
        t = torch.empty(init_replay.MIN_NUMEL - 1).uniform_()
    record.keep_only(nn.ParameterList([nn.Parameter(t)]))
    assert record.fills == {}
