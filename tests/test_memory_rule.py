"""The memory rule on the CPU device (engine/worker/memory.py): an evaluation's peak stays within 1.25 x
the reference's own peak, measured by the worker's CPU accounting (memory.CpuAccounting, every tensor
an aten op returns, counted until its last tensor dies), with the copies that wait on the host (pinned
memory on a GPU) counted apart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.worker import memory

TASKS = Path(__file__).parent / "tasks"
MIB = 1 << 20


def _own_reference_evaluated(name: str, cpu_options: EvalOptions, monkeypatch: pytest.MonkeyPatch) -> Any:
    """tests/tasks/<name>'s own reference as the candidate, evaluated with the CPU accounting on; it must be
    correct and timed."""
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.task import load_task

    monkeypatch.setenv(memory.ACCOUNTING_ENV, "1")
    task = TASKS / name / "task.py"
    cand = Candidate(source=task.read_text().replace("class Model(", "class ModelNew("), format="python")
    result = asyncio.run(Evaluator(cpu_options).evaluate(load_task(task), cand))
    assert result.correctness is not None and result.correctness.passed, result.message
    assert result.timing is not None, result.message
    return result


def test_wide_output_evaluation_peaks_within_the_rule(cpu_options: EvalOptions,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256 KiB input, a 64 MiB output: before, the trials held the reference's output, its clone and the
    candidate's at once (about 2 x the reference's peak); now one output is on the device at a time."""
    result = _own_reference_evaluated("wide_output", cpu_options, monkeypatch)
    m = result.memory
    assert m is not None and m.reference_peak_bytes is not None and m.eval_peak_bytes is not None, m
    output = 64 * 1024 * 256 * 4
    assert output <= m.reference_peak_bytes <= output + 2 * MIB, m  # the reference's output and input
    # The rule with the slice temporaries (memory.SLICE_TEMP_BYTES) in place of its 1 GiB of slack.
    bound = memory.FACTOR * m.reference_peak_bytes + memory.SLICE_TEMP_BYTES
    assert m.eval_peak_bytes <= bound, (m.eval_peak_bytes / MIB, m.reference_peak_bytes / MIB)
    # The fit estimate bounds the measured peak; the host held at most the timed check's two expected outputs.
    assert m.footprint_bytes is not None and memory.tight_bytes(m.footprint_bytes) >= m.eval_peak_bytes
    assert m.needed_bytes is not None and m.needed_bytes >= m.eval_peak_bytes
    assert m.host_peak_bytes is not None and output <= m.host_peak_bytes <= m.host_needed_bytes + 2 * MIB, m


def test_estimate_under_a_cap_and_the_host_message() -> None:
    gib = memory.GIB
    # Room to spare: 1.25 x footprint + 1 GiB; under a cap that leaves no such room, the tight figure.
    assert memory.estimate_bytes(8 * gib, None) == 11 * gib
    assert memory.estimate_bytes(8 * gib, 24 * gib) == 11 * gib
    assert memory.estimate_bytes(20 * gib, 24 * gib) == memory.tight_bytes(20 * gib) < 24 * gib
    assert memory.host_needed_bytes(2 * gib, 3 * gib) == 6 * gib  # timing's two expected outputs
    assert memory.host_needed_bytes(4 * gib, gib) == 5 * gib  # one input set and one output
    assert memory.host_needed_bytes(gib // 4, 3 * gib) == 6 * gib  # timing: the two contents' expected outputs
    assert memory.host_message("level1/45_x", 8 * gib, 5 * gib) == (
        "level1/45_x needs about 8.0 GiB of host memory to evaluate (its inputs and outputs, kept on the host); "
        "the host has 5.0 GiB available")


def test_fused_compare_keeps_its_verdicts() -> None:
    """compare_output in one pass per slice (statistics on the device, one host sync per output): the
    same mismatches, worst elements and non-finite rules as before, over several slices."""
    import torch
    from cudaforge.engine.worker.compare import compare_output

    e = torch.randn(3000, 1000)  # about three slices of observe.CHUNK_ELEMENTS
    g = e.clone()
    assert compare_output(0, e, g, 1e-4, 1e-4).passed
    g.view(-1)[2_500_005] += 1.0
    c = compare_output(0, e, g, 1e-4, 1e-4)
    assert not c.passed and c.mismatches == 1 and c.worst[0].index == (2500, 5) and abs(c.max_abs_err - 1.0) < 1e-5
    nan_e = e.clone()
    nan_e.view(-1)[7] = float("nan")
    assert compare_output(0, nan_e, nan_e.clone(), 1e-4, 1e-4).passed  # the very same NaN passes
    nan_g = nan_e.clone()
    nan_g.view(-1)[7] = 1.0
    c = compare_output(0, nan_e, nan_g, 1e-4, 1e-4)
    assert not c.passed and c.mismatches == 1 and c.max_abs_err == float("inf")
    inf_g = e.clone()
    inf_g.view(-1)[9] = float("inf")
    c = compare_output(0, e, inf_g, 1e-4, 1e-4)
    assert not c.passed and c.nonfinite_got == 1 and c.max_rel_err == float("inf")
    ints = torch.arange(10)
    assert compare_output(0, ints, ints.clone(), 0, 0).passed and compare_output(0, ints, ints + 1, 0, 0).mismatches == 10


def test_wide_input_evaluation_peaks_within_the_rule(cpu_options: EvalOptions,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A 64 MiB input, a 16 KiB output (a row sum, like KernelBench's reductions at 3.87x before): a second
    timing draw would double the reference's own peak, so timing alternates one draw in place
    (runtime.FlippingDraw), and the timed outputs are still checked against the reference on the same
    content."""
    result = _own_reference_evaluated("wide_input", cpu_options, monkeypatch)
    assert "flipped in place" in str(result.timing.settings.get("input_rotation")), result.timing.settings
    load = result.timing.settings["host_load"]  # what the timing thread's host did in the window (timing.HostLoad)
    assert load["wall_s"] > 0 and load["cpu_s"] >= 0 and load["involuntary_switches"] >= 0, load
    assert not [f for f in result.findings if f.name == "timing_output_mismatch"], result.findings
    m = result.memory
    assert m is not None and m.reference_peak_bytes is not None and m.eval_peak_bytes is not None, m
    # No step adds an input set: timing flips its one draw, the kernel and fallback checks draw afresh
    # instead of cloning, and the cache probes bring their other draws back from the host (new tensors at
    # offset addresses for the new-memory probe). The rule, with the slices' temporaries for its slack.
    bound = memory.FACTOR * m.reference_peak_bytes + memory.SLICE_TEMP_BYTES
    assert m.eval_peak_bytes <= bound, (m.eval_peak_bytes / MIB, m.reference_peak_bytes / MIB)


def test_weight_dominated_evaluation_peaks_within_the_rule(cpu_options: EvalOptions,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """128 MiB of weights, a 256 KiB input: the candidate's parameters are views of the reference's
    (engine/worker/shared_weights.py), so the checks hold the weights once, not twice (level2/55 on the H200:
    8.34 GiB for a reference peak of 4.09 GiB before)."""
    result = _own_reference_evaluated("wide_weights", cpu_options, monkeypatch)
    assert not [f for f in result.findings if f.name == "weights_mutation"], result.findings
    # the fingerprints' cost is its own sub-phase wherever the candidate is called
    assert {"correctness.shared_weights", "cache_probes.shared_weights"} <= set(result.phases), result.phases
    # and the cache probes say where their own seconds went, step by step
    probe_steps = {f"cache_probes.{step}" for step in ("draw", "mix", "reference", "fingerprint", "spreads", "park",
                                                       "candidate", "compare")}
    assert probe_steps <= set(result.phases), result.phases
    assert sum(result.phases[k] for k in probe_steps) <= result.phases["cache_probes"] + 0.05, result.phases
    # as do the timed check's expected outputs, made before the window
    assert {"timing.expected_reference", "timing.expected_off_device"} <= set(result.phases), result.phases
    m = result.memory
    assert m is not None and m.reference_peak_bytes is not None and m.eval_peak_bytes is not None, m
    weights = 8192 * 4096 * 4
    assert weights <= m.reference_peak_bytes <= weights + 4 * MIB, m
    bound = memory.FACTOR * m.reference_peak_bytes + memory.SLICE_TEMP_BYTES
    # Every check from the reference's call on holds the weights once (before: about 2 x 128 MiB in each).
    # On the CPU device ModelNew(...) itself makes the candidate's own weights on the device ('init',
    # 'place', until they are shared); on a GPU it is built on the host and `place` moves what is not shared.
    checks = {k: v for k, v in m.phase_peak_bytes.items() if k not in ("start", "load_task", "build", "init", "place")}
    assert set(checks) >= {"reference", "correctness", "cache_probes", "timing", "shapes"}, m.phase_peak_bytes
    assert max(checks.values()) <= bound, ({k: v / MIB for k, v in checks.items()}, m.reference_peak_bytes / MIB)


def test_shared_weights_are_views_and_a_change_is_found() -> None:
    """share(): same name and shape (and the dtype the candidate will be placed in) become views of the
    reference's tensors; other names, shapes and a tensor the candidate put on a GPU itself stay its own. A
    rebinding (`p.data = t`) leaves the reference's alone; an in-place change is a weights_mutation, and it
    stands once found."""
    import torch
    from cudaforge.engine.worker import shared_weights
    from torch import nn

    class Ref(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)
            self.norm = nn.BatchNorm1d(4)

    class Cand(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(8, 4)
            self.norm = nn.BatchNorm1d(4)
            self.extra = nn.Parameter(torch.zeros(3))
            self.other = nn.Linear(4, 8)  # different names

    ref, cand = Ref().eval(), Cand().eval()
    shared = shared_weights.share(ref, cand)
    assert set(shared.tensors) == {"lin.weight", "lin.bias", "norm.weight", "norm.bias", "norm.running_mean",
                                   "norm.running_var", "norm.num_batches_tracked"}
    assert cand.lin.weight.data_ptr() == ref.lin.weight.data_ptr()
    assert cand.norm.running_mean.data_ptr() == ref.norm.running_mean.data_ptr()
    assert cand.extra.data_ptr() != 0 and shared_weights.mutation_finding("x") is None
    cand.lin.bias.data = torch.ones(4)  # rebinding its own: the reference's stays
    assert shared_weights.mutation_finding("x") is None and not torch.equal(ref.lin.bias, torch.ones(4))
    with torch.no_grad():
        cand.lin.weight.mul_(0)  # in place: the reference's too
    found = shared_weights.mutation_finding("ModelNew.forward")
    assert found is not None and found.name == "weights_mutation" and found.severity == "fail"
    assert "lin.weight" in found.message and found.evidence["tensors"] == ["lin.weight"]
    shared_weights.SHARED.clear()
    assert shared_weights.mutation_finding("later") is found  # it stands
    shared_weights.SHARED.found = None
    # fp16 placement: an fp32 candidate tensor is shared with an fp16 reference's
    ref16 = Ref().half()
    again = shared_weights.share(ref16, Cand(), torch.float16)
    assert "lin.weight" in again.tensors
    shared_weights.SHARED.clear()


def test_flipping_draw_alternates_two_contents_in_place() -> None:
    import torch
    from cudaforge.engine.integrity.runtime import FlippingDraw, Rotation

    x = torch.randn(3, 5)
    drawn, idx = x.clone(), torch.arange(7)
    draw = FlippingDraw([x, idx])
    seen = []
    rot = Rotation(lambda a, b: a.clone(), draw)
    for _ in range(4):
        seen.append(rot())
    assert torch.equal(seen[0], drawn) and torch.equal(seen[2], drawn)
    assert torch.equal(seen[1], drawn.flip(0).flip(1)) and torch.equal(seen[3], seen[1])
    assert x.data_ptr() == draw.inputs[0].data_ptr() and torch.equal(idx, torch.arange(7))  # ints stay
    draw.frozen = True
    before = x.clone()
    rot.peek(), rot()
    assert torch.equal(x, before)  # frozen: the content it holds stays, no flip


def test_footprint_counts_the_forward_passes_intermediates_and_both_parameter_copies() -> None:
    """An attention-like task: its scores (batch x n x n) dwarf its output (batch x n x d); the footprint
    the estimate is made from counts them (on the meta device), and the parameters twice (the reference's
    and the candidate's)."""
    import types

    import torch
    from torch import nn

    batch, n, d = 4, 512, 16

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = nn.Linear(d, d, bias=False)

        def forward(self, q: torch.Tensor) -> torch.Tensor:
            scores = torch.softmax(q @ q.transpose(1, 2), dim=-1)  # batch x n x n
            return self.proj(scores @ q)

    task = types.SimpleNamespace(Model=Model, get_inputs=lambda: [torch.randn(batch, n, d)], get_init_inputs=lambda: [])
    fp = memory.meta_footprint(task, [], seed=0)
    scores = batch * n * n * 4
    inputs = outputs = batch * n * d * 4
    params = d * d * 4
    assert fp["input_bytes"] == inputs and fp["output_bytes"] == outputs and fp["param_bytes"] == params, fp
    assert scores <= fp["forward_peak_bytes"] <= 3 * scores, fp  # the scores and their softmax, at most
    assert fp["footprint_bytes"] == inputs + fp["forward_peak_bytes"] + 2 * params, fp


def test_the_timed_checks_tolerance_scale_makes_no_output_sized_temporary() -> None:
    """TimedOutputCheck scales its atol by the expected output's largest magnitude (TF32 tolerance): read
    with one fused min/max, not through `abs()`, which put a second output beside the expected one on the
    H200 (a 2 GiB softmax's timing at 1.28x the reference's own peak)."""
    import torch
    from cudaforge.engine.integrity.runtime import largest_magnitude

    values = torch.randn(256, 1024)
    values[3, 7] = -50.0
    assert largest_magnitude(values) == 50.0 == float(values.abs().max())
    counter = memory.CpuAccounting()
    counter.start()
    try:
        largest_magnitude(values)
    finally:
        counter.stop()
    assert counter.top < values.numel() * values.element_size() // 64, counter.top


def test_workers_get_expandable_segments_unless_the_user_set_the_allocator(cpu_options: EvalOptions,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker's allocator grows one mapping (no cached block split short of a large request under a cap);
    the user's own PYTORCH_CUDA_ALLOC_CONF is passed on as it is."""
    from cudaforge.engine.evaluation.evaluator import ALLOC_CONF

    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    assert Evaluator(cpu_options).worker_env()["PYTORCH_CUDA_ALLOC_CONF"] == ALLOC_CONF == "expandable_segments:True"
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "max_split_size_mb:512")
    assert Evaluator(cpu_options).worker_env()["PYTORCH_CUDA_ALLOC_CONF"] == "max_split_size_mb:512"


def test_the_shape_check_shares_the_smaller_models_weights_too() -> None:
    """At the second set of sizes the new candidate's matching weights are views of the new reference's
    (level3/2_ShallowWideMLP, 8 GiB of weights, peaked at 1.5x its reference in this check with two copies),
    and a candidate changing them there is still found."""
    import torch
    from cudaforge.engine.integrity import runtime
    from cudaforge.engine.worker import shared_weights
    from cudaforge.engine.worker.harness import import_file
    from cudaforge.engine.worker.pipeline import copy_parameters

    path = TASKS / "wide_weights" / "task.py"
    module = import_file(str(path), "wide_weights_task")
    init = list(module.get_init_inputs())
    seen: dict[str, Any] = {}

    def run_candidate(cand: Any, inputs: list[Any]) -> Any:
        seen["candidate"] = cand.projection.untyped_storage().data_ptr()
        with torch.no_grad():
            out = cand(*inputs)
            cand.projection.mul_(2)  # changes what it shares
        return out

    def run_reference(ref: Any, inputs: list[Any]) -> Any:
        seen["reference"] = ref.projection.untyped_storage().data_ptr()
        with torch.no_grad():
            return ref(*inputs)

    try:
        findings = runtime.shape_findings(
            module, path.read_text(), str(path), init, module.Model(*init), module.Model(*init), module.Model,
            prepare=lambda m: m, inputs_for=lambda variant: (torch.manual_seed(1), variant.get_inputs())[1],
            run_reference=run_reference, run_candidate=run_candidate,
            compare=lambda expected, got: "", copy_parameters=copy_parameters, seed=3,
            share=lambda ref, cand: shared_weights.share(ref, cand))
        assert findings == [], findings
        assert seen["candidate"] == seen["reference"], "the smaller candidate holds its own copy of the weights"
        assert shared_weights.SHARED.changed() == ["projection"]
    finally:
        shared_weights.SHARED.clear()


def test_a_transposed_output_is_compared_and_checked_without_full_size_copies(
        cpu_options: EvalOptions, monkeypatch: pytest.MonkeyPatch) -> None:
    """An output dense in memory but not contiguous (level1/97's attention output on the H200 peaked at
    1.63x its reference: each cache probe's compare flattened both outputs with reshape(-1), a copy of
    each). The compares, fingerprints and checks read it in memory order, as views: within the rule."""
    result = _own_reference_evaluated("transposed_output", cpu_options, monkeypatch)
    m = result.memory
    assert m is not None and m.reference_peak_bytes is not None and m.eval_peak_bytes is not None, m
    output = 64 * 256 * 256 * 4
    assert 2 * output <= m.reference_peak_bytes <= 2 * output + 2 * MIB, m  # its input and its output
    bound = memory.FACTOR * m.reference_peak_bytes + memory.SLICE_TEMP_BYTES
    phases = {k: round(v / MIB) for k, v in (m.phase_peak_bytes or {}).items()}
    assert m.eval_peak_bytes <= bound, (m.eval_peak_bytes / MIB, m.reference_peak_bytes / MIB, phases)
