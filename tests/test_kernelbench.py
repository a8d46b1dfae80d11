"""KernelBench at its real scale (issue 13): footprints, the CPU sweep, memory rules and messages.

The problems are read from ../shared/kernelbench; tests that need them skip with a message where the
folder is absent (it is never copied into the repository)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch
from cudaforge.engine import observe
from cudaforge.engine.config import load_config
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.integrity.runtime import FixedValueProbe
from cudaforge.engine.worker import memory
from cudaforge.engine.worker.compare import compare_output

REPO = Path(__file__).resolve().parent.parent
KB = REPO.parent / "shared" / "kernelbench"
CPU20 = REPO / "bench" / "kernelbench_cpu20.txt"
needs_kb = pytest.mark.skipif(not KB.is_dir(), reason=f"{KB} is absent (KernelBench problems are read from there)")

# The 4 problems that cannot run on the meta device (../shared/kernelbench/README.md), and why.
META_REASONS = {
    "level3/29_SwinMLP": ".item()",
    "level3/30_SwinTransformerV2": ".item()",
    "level3/48_Mamba2ReturnY": "einops",
    "level3/49_Mamba2ReturnFinalState": "einops",
}


def _load(path: Path):  # -> module
    spec = importlib.util.spec_from_file_location(f"kb_{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def _footprint(path: Path) -> dict:
    try:
        module = _load(path)
    except ModuleNotFoundError as exc:
        return {"reason": f"imports {exc.name}, which is not installed"}
    return memory.meta_footprint(module, list(module.get_init_inputs()), 42)


@needs_kb
def test_every_problem_has_a_footprint_on_the_meta_device_or_a_named_reason() -> None:
    paths = sorted(KB.glob("level[123]/*.py"))
    assert len(paths) == 250
    reasons: dict[str, str] = {}
    sizes: dict[str, int] = {}
    for path in paths:
        fp = _footprint(path)
        name = f"{path.parent.name}/{path.stem}"
        if fp["reason"]:
            reasons[name] = fp["reason"]
        else:
            sizes[name] = fp["footprint_bytes"]
    assert set(reasons) == set(META_REASONS), reasons
    for name, why in META_REASONS.items():
        if why == "einops" and importlib.util.find_spec("einops") is not None:
            continue
        assert why in reasons[name] or (why == ".item()" and "item" in reasons[name]), (name, reasons[name])
    assert all(v > 0 for v in sizes.values())
    # Level 1's largest footprint: level1/76's reference (its dilated conv's intermediates included) peaks
    # at 21.3 GiB on the H200 (2026-12-02), which the meta count of the forward's tensors finds (21.0 GiB).
    level1 = max(v for k, v in sizes.items() if k.startswith("level1/"))
    assert 20.5 < level1 / memory.GIB < 21.5


def test_fit_rule_and_message() -> None:
    footprint = int(24.0 * memory.GIB)
    assert memory.needed_bytes(footprint) == 31 * memory.GIB
    assert not memory.fits(footprint, int(23.6 * memory.GIB), None)
    assert memory.fits(footprint, 120 * memory.GIB, None)
    assert not memory.fits(footprint, 120 * memory.GIB, 24 * memory.GIB)
    msg = memory.fit_message("level1/39_L2Norm_", footprint, int(23.6 * memory.GIB), None)
    assert msg == ("level1/39_L2Norm_ needs about 31 GiB to evaluate (1.25 × 24.0 GiB + 1 GiB; at least "
                   "25.1 GiB under a cap); this card has 23.6 GiB free")
    # Under a cap the evaluation fits wherever the reference alone fits (the compare slices and the CUDA
    # context beside it):
    # level1/76's reference peaks at 21.3 GiB, 1.25x + 1 GiB would be 27.6 GiB.
    ref_alone = int(21.3 * memory.GIB)
    assert memory.fits(ref_alone, 140 * memory.GIB, 24 * memory.GIB)
    assert not memory.fits(ref_alone, int(23.6 * memory.GIB), None)
    assert "the cap ([run] gpu_memory_gb) is 24.0 GiB" in memory.fit_message("x/y", footprint, 120 * memory.GIB,
                                                                            24 * memory.GIB)


def test_oom_message_names_side_asked_in_use_and_total() -> None:
    exc = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.3 GiB")
    assert memory.is_oom(exc)
    assert memory.asked_bytes(str(exc)) == 2 * memory.GIB
    with memory.side("inputs"):
        text = memory.oom_message(exc, "correctness")
    assert text.startswith("out of memory on the inputs side during correctness: asked 2.0 GiB")
    assert "in use" in text and "card total" in text


def test_oom_message_says_which_limit_was_met() -> None:
    """The card's free memory below the request, or the cap's allocator limit with what sat reserved but
    unallocated: PyTorch's own figures, so a sweep row says why (level3/31 on the H200 said neither)."""
    card = ("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
            "3.50 GiB is free. Of the allocated memory 8.10 GiB is allocated by PyTorch, and 0.20 GiB is "
            "reserved by PyTorch but unallocated.")
    assert memory.oom_limit(card, 8 * memory.GIB, 23 * memory.GIB) == (
        "the card had 3.5 GiB free; 0.2 GiB reserved but unallocated")
    capped = card.replace("3.50 GiB is free", "60.00 GiB is free").replace("0.20 GiB is", "7.40 GiB is")
    assert memory.oom_limit(capped, 8 * memory.GIB, 23 * memory.GIB) == (
        "the cap's allocator limit 23.0 GiB (card free 60.0 GiB); 7.4 GiB reserved but unallocated")
    assert memory.oom_limit("CUDA out of memory.", None, None) == ""


def test_sliced_compare_equals_the_whole_tensor_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compare works in slices (no full-size temporaries); slicing must not change any verdict or number."""
    from cudaforge.engine import observe
    from cudaforge.engine.worker import compare

    g = torch.Generator().manual_seed(0)
    e = torch.randn(37, 29, generator=g)
    got = e.clone()
    got[3, 4] += 1.0
    got[30, 1] = float("nan")
    got[10, 10] += 0.25
    e[5, 5] = float("inf")
    got[5, 5] = float("inf")
    whole = compare_output(0, e, got, 1e-4, 1e-4)
    monkeypatch.setattr(compare, "_CHUNK", 7)
    boundaries: list[int] = []  # a step boundary after each slice: a timed window waiting elsewhere goes first
    monkeypatch.setattr(observe, "_CHECKPOINTS", [lambda: boundaries.append(1)])
    sliced = compare_output(0, e, got, 1e-4, 1e-4)
    assert repr(sliced) == repr(whole)  # repr: a NaN in `worst` is not equal to itself
    assert len(boundaries) == -(-e.numel() // 7)
    assert whole.mismatches == 3 and whole.nonfinite_got == 2  # the NaN and the (matching) inf
    ints = torch.arange(100)
    assert compare_output(0, ints, ints.flip(0), 0, 0).mismatches == 100
    small = torch.full((50,), 1e-6)
    probe = FixedValueProbe(1e-4, 1e-4)
    probe.add([small])
    weak = probe.finding(1)
    assert weak is not None and weak.evidence["trivial_output"] == "zero"
    probe = FixedValueProbe(1e-4, 1e-4)
    probe.add([torch.randn(50, generator=g)])
    assert probe.finding(1) is None


def test_fingerprint_and_bits_equal_see_any_change() -> None:
    x = torch.randn(1000)
    y = x.clone()
    assert observe.fingerprint(x) == observe.fingerprint(y) and observe.bits_equal(x, y)
    y[999] = torch.nextafter(y[999], torch.tensor(10.0))
    assert observe.fingerprint(x) != observe.fingerprint(y) and not observe.bits_equal(x, y)
    n = torch.full((10,), float("nan"))
    assert observe.bits_equal(n, n.clone())  # bitwise: a NaN left alone is unchanged


def test_gpu_memory_gb_key_flag_and_worker_note(tmp_path: Path, cpu_options: EvalOptions) -> None:
    """[run] gpu_memory_gb and --gpu-memory-gb reach the worker; on the CPU device the cap is ignored with a note."""
    (tmp_path / "cudaforge.toml").write_text("[run]\ngpu_memory_gb = 24\n")
    config = load_config(None, {}, cwd=tmp_path, use_user_config=False)
    assert EvalOptions.from_config(config).gpu_memory_gb == 24
    flagged = load_config(None, {"run.gpu_memory_gb": 80.0}, cwd=tmp_path, use_user_config=False)
    assert EvalOptions.from_config(flagged).gpu_memory_gb == 80.0
    from cudaforge.engine.cli import build_parser
    from cudaforge.tui.cli import parse_args

    for cmd in (["eval", "t.py", "c.py"], ["run", "t.py"]):
        assert build_parser().parse_args([*cmd, "--gpu-memory-gb", "24"]).gpu_memory_gb == 24.0
    task = tmp_path / "t.py"  # cudaforge-tui refuses a missing task file before it parses further
    task.write_text("")
    assert parse_args([str(task), "--gpu-memory-gb", "24"]).gpu_memory_gb == 24.0  # type: ignore[union-attr]
    task = REPO / "tests" / "tasks" / "axpy" / "task.py"
    cand = REPO / "tests" / "tasks" / "axpy" / "cpu.py"
    proc = subprocess.run([sys.executable, "-m", "cudaforge.engine.cli", "eval", str(task), str(cand), "--device", "cpu",
                           "--trials", "1", "--timing-trials", "3", "--gpu-memory-gb", "24", "--json"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["memory"]["note"].startswith("gpu_memory_gb = 24 ignored: the cap is CUDA-only"), data["memory"]
    assert data["memory"]["footprint_bytes"] > 0


def test_task_with_missing_module_is_one_line_and_exit_3(tmp_path: Path) -> None:
    """A task importing a module that is not installed (level3/48_Mamba2ReturnY imports einops): exit 3."""
    if importlib.util.find_spec("einops") is None and (KB / "level3" / "48_Mamba2ReturnY.py").is_file():
        task, module = KB / "level3" / "48_Mamba2ReturnY.py", "einops"
    else:
        module = "cudaforge_not_installed_module"
        task = tmp_path / "task.py"
        task.write_text(f"import torch\nimport {module}\n\n\nclass Model(torch.nn.Module):\n"
                        "    def forward(self, x):\n        return x\n\n\ndef get_inputs():\n"
                        "    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n")
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    proc = subprocess.run([sys.executable, "-m", "cudaforge.engine.cli", "eval", str(task), str(cand),
                           "--device", "cpu", "--json"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    message = json.loads(proc.stdout)["message"]
    assert f"imports `{module}`, which is not installed" in message and f"pip install {module}" in message
    assert "\n" not in message


def test_broken_task_is_exit_2_whatever_the_candidate(tmp_path: Path) -> None:
    """get_inputs() raises and ModelNew's constructor fails: the task's fault is said first (exit 2)."""
    task = REPO / "tests" / "tasks" / "bad" / "get_inputs_raises.py"
    cand = tmp_path / "cand.py"
    cand.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self, *a):\n"
                    "        super().__init__()\n        raise RuntimeError('constructor fails')\n")
    proc = subprocess.run([sys.executable, "-m", "cudaforge.engine.cli", "eval", str(task), str(cand),
                           "--device", "cpu", "--json"], capture_output=True, text=True, timeout=600, cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert proc.returncode == 2, data["message"]
    assert data["outcome"] == "task_error" and "get_inputs() raised" in data["message"]


def _sweep_module() -> Any:
    """bench/kernelbench_sweep.py as a module (bench/ is no package: its folder goes on the path for the import)."""
    sys.path.insert(0, str(REPO / "bench"))
    try:
        import kernelbench_sweep
    finally:
        sys.path.pop(0)
    return kernelbench_sweep


@needs_kb
def test_cpu_sweep_of_the_20_fastest_problems_judges_every_one_correct(cpu_options: EvalOptions, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/kernelbench_sweep.py on the CPU device over bench/kernelbench_cpu20.txt: every reference, renamed
    ModelNew, is correct and then not accepted for no_custom_kernel."""
    sweep = _sweep_module()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two workers at once on two cores: one thread each
    paths = sweep.problems(KB, [], CPU20)
    assert len(paths) == 20
    options = sweep.make_options("cpu", 0, None, 1, cpu_options.cache_dir)  # 1 trial + the shifted one
    options = replace(options, timing={**options.timing, "warmup": 1, "trials": 3})  # few timed calls
    rows = asyncio.run(sweep.sweep(paths, options, jobs=2, rows_path=tmp_path / "rows.jsonl", quiet=True))
    assert len(rows) == 20
    bad = [(r["problem"], r["outcome"], r["message"]) for r in rows if not (r["correct"] and r["expected"])]
    assert not bad, bad
    assert len((tmp_path / "rows.jsonl").read_text().splitlines()) == 20  # flushed row by row
    summary = sweep.summarize(rows, 60.0)
    assert sum(lv["expected"] for lv in summary["levels"].values()) == 20
    # Every row says where its seconds went: each check the worker ran has its own phase.
    for r in rows:
        assert set(sweep.CHECK_PHASES) - {"fallback"} <= set(r["phases"]), (r["problem"], r["phases"])
        assert r["gpu_s"] >= r["correctness_s"] > 0
        assert r["exclusive_s"] > 0 and r["shared_s"] >= r["correctness_s"], (r["problem"], r["phases"])
        assert r["estimate_gib"] is not None and r["estimate_gib"] > 0, r["problem"]
        # Correctness says where its own seconds went (its sub-phases, inside it).
        assert {"correctness.reference", "correctness.candidate", "correctness.compare"} <= set(r["phases"])
        # The problems were counted in one process ahead (fit.TaskCounter): no spare imported what counting
        # needs, and the worker took the counts (its footprint estimate is there without counting itself).
        assert "spare_counting" not in r["phases"] and r["counts_wait_s"] >= 0, (r["problem"], r["phases"])
        # What made its timed window as long as it was (measured how often, how many calls, the host's load).
        t = r["timing"]
        assert t["measurements"] >= 1 and t["trials"] >= 3 and t["reference_ms"] > 0, (r["problem"], t)
    assert summary["phase_totals"]["correctness"] > 0
    assert summary["handed_ahead"] == 0  # the CPU device has no card memory to plan for: the sweep's order


def test_the_sweep_sums_what_the_launch_cover_added_to_the_timed_windows() -> None:
    """Each row's timing record carries the cover's spins per side (timing.settings `launch_cover_total_ms`); the
    summary sums them over the sweep, so a cover that lengthens the windows shows beside the exclusive seconds."""
    sweep = _sweep_module()

    def row(problem: str, cover_ms: dict[str, float] | None) -> dict:
        return {"problem": problem, "level": "level1", "correct": True, "expected": True, "does_not_fit": False,
                "outcome": "no_custom_kernel", "bound_ok": True, "ratio": 1.1, "exclusive_s": 0.3, "shared_s": 1.0,
                "phases": {"timing": 0.4},
                "timing": None if cover_ms is None else {"late_launches": {}, "launch_cover_ms": cover_ms}}

    summary = sweep.summarize([row("a", {"reference": 120.5, "candidate": 30.0}), row("b", {}), row("c", None)], 60.0)
    assert summary["launch_cover_s"] == pytest.approx(0.15)
    assert "launch cover: 0.15 s of spins in the timed windows, summed" in sweep.format_summary(summary)
    assert "launch cover" not in sweep.format_summary(sweep.summarize([row("b", {})], 60.0))


def test_the_sweep_shows_the_timed_windows_own_parts_and_their_slow_cupti_starts() -> None:
    """The summary's line of what the windows held alone: their events, CUPTI starts (with the windows where the
    start ran over SLOW_CUPTI_START_S, the sign of another process's context creation beside it) and host-timed
    calls, summed from the rows' phases."""
    sweep = _sweep_module()

    def row(problem: str, start_s: float) -> dict:
        return {"problem": problem, "level": "level1", "correct": True, "expected": True, "does_not_fit": False,
                "outcome": "no_custom_kernel", "bound_ok": True, "ratio": 1.1, "exclusive_s": 0.3, "shared_s": 1.0,
                "phases": {"timing.events": 0.25, "timing.cupti_start": start_s, "timing.host_calls": 0.02},
                "timing": None}

    summary = sweep.summarize([row("a", 0.009), row("b", 0.35), row("c", 0.01)], 60.0)
    assert summary["slow_cupti_starts"] == 1
    assert ("inside the timed windows, summed: events 0.8 s, CUPTI start 0.4 s (1 windows over 100 ms), "
            "host-timed calls 0.1 s") in sweep.format_summary(summary)


def test_the_sweep_hands_a_slot_a_problem_that_fits_before_one_that_would_wait_for_memory(tmp_path: Path) -> None:
    """ProblemQueue: the next problem in order unless its estimate does not fit beside what is in flight (or
    what the ledger holds, whichever is more); then the first of the next ones that fits, and where none
    does, the next in order anyway (it waits for memory in its worker). An uncounted problem fits."""
    sweep = _sweep_module()
    gib = sweep.GIB
    paths = [tmp_path / "level1" / f"{k}_p.py" for k in range(1, 7)]
    need = {paths[0]: 20 * gib, paths[1]: 20 * gib, paths[2]: 20 * gib, paths[3]: 4 * gib, paths[4]: None,
            paths[5]: 30 * gib}
    queue = sweep.ProblemQueue(paths, need.get, budget=50 * gib)
    assert queue.take() == (paths[0], 0) and queue.take() == (paths[1], 0)
    assert queue.take() == (paths[3], 1)  # 20 GiB more would not fit beside 40: the 4 GiB one goes first
    assert queue.take() == (paths[4], 1)  # not counted yet: it fits
    assert queue.take() == (paths[2], 0)  # none of the rest fits beside 44 GiB: the next in order anyway
    for path in paths[:5]:
        queue.done(path)
    assert queue.take(reserved_now=35 * gib) == (paths[5], 0) and queue.take() is None and len(queue) == 0
    # What the ledger holds counts where it is more than the estimates in flight (a grown reservation).
    grown = sweep.ProblemQueue([paths[5], paths[3]], need.get, budget=50 * gib)
    assert grown.take(reserved_now=25 * gib) == (paths[3], 1)
    # No budget (the CPU device): always the order.
    plain = sweep.ProblemQueue(paths, need.get, budget=None)
    assert [plain.take() for _ in paths] == [(p, 0) for p in paths]


def test_the_sweep_looks_past_its_lookahead_for_a_counted_problem_that_fits(tmp_path: Path) -> None:
    """Where none of the next `lookahead` problems fits, a slot takes the first counted one further on that does
    (the small problems at the end of a longest-first order), never an uncounted one there; the counter counts
    from both ends of the order, so the first slots know the small ones."""
    sweep = _sweep_module()
    gib = sweep.GIB
    paths = [tmp_path / "level1" / f"{k}_p.py" for k in range(1, 8)]
    need = {paths[0]: 20 * gib, paths[1]: 20 * gib, paths[2]: 20 * gib, paths[3]: 20 * gib, paths[4]: None,
            paths[5]: 2 * gib, paths[6]: 1 * gib}
    queue = sweep.ProblemQueue(paths, need.get, budget=45 * gib, lookahead=2)
    assert queue.take() == (paths[0], 0) and queue.take() == (paths[1], 0)
    # 5 GiB free: paths[2], paths[3] (the lookahead) do not fit, paths[4] is not counted, paths[5] fits
    assert queue.take() == (paths[5], 3)
    assert queue.take() == (paths[6], 3)
    assert queue.take() == (paths[2], 0)  # nothing counted fits any more: the next in order (it waits in its worker)
    assert sweep.count_order(paths) == [paths[0], paths[6], paths[1], paths[5], paths[2], paths[4], paths[3]]
    assert sweep.count_order(paths[:2]) == paths[:2] and sweep.count_order([]) == []


@pytest.mark.gpu
def test_gpu_memory_bound_on_a_large_softmax(tmp_path: Path, gpu_options: EvalOptions) -> None:
    """(evaluation peak - 1 GiB) <= 1.25 x the reference's own peak, read from PyTorch's allocator; the
    estimate bounds the peak, and NVML's process figure (context included) is recorded beside it."""
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.task import load_task

    task = tmp_path / "task.py"
    task.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return torch.softmax(x, dim=1)\n\n\ndef get_inputs():\n"
                    "    return [torch.randn(4096, 131072)]\n\n\ndef get_init_inputs():\n    return []\n")
    source = task.read_text().replace("class Model(", "class ModelNew(")
    result = asyncio.run(Evaluator(gpu_options).evaluate(load_task(task), Candidate(source=source, format="python")))
    m = result.memory
    assert m is not None and m.reference_peak_bytes and m.eval_peak_bytes, result.message
    assert m.eval_peak_bytes - memory.GIB <= memory.FACTOR * m.reference_peak_bytes, m
    assert m.needed_bytes is not None and m.needed_bytes >= m.eval_peak_bytes, m
    assert result.correctness is not None and result.correctness.passed


@pytest.mark.gpu
def test_gpu_memory_bound_on_weights_that_dominate(tmp_path: Path, gpu_options: EvalOptions) -> None:
    """tests/tasks/wide_weights at 4 GiB of weights (level2/55 on the H200: 8.34 GiB for a 4.09 GiB
    reference, before the candidate's weights became views of the reference's): the rule holds, the weights
    are shared, and the worker's reservation after the reference bounds the peak."""
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.task import load_task

    source = (Path(__file__).parent / "tasks" / "wide_weights" / "task.py").read_text()
    source = source.replace("IN_FEATURES = 4096", "IN_FEATURES = 32768").replace("OUT_FEATURES = 8192", "OUT_FEATURES = 32768")
    (tmp_path / "task.py").write_text(source)
    task = load_task(tmp_path / "task.py")
    cand = Candidate(source=source.replace("class Model(", "class ModelNew("), format="python")
    result = asyncio.run(Evaluator(gpu_options).evaluate(task, cand))
    assert result.correctness is not None and result.correctness.passed, result.message
    assert not [f for f in result.findings if f.name == "weights_mutation"], result.findings
    m = result.memory
    assert m is not None and m.reference_peak_bytes and m.eval_peak_bytes, result.message
    assert m.reference_peak_bytes >= 4 * memory.GIB, m
    assert m.eval_peak_bytes - memory.GIB <= memory.FACTOR * m.reference_peak_bytes, m
    assert m.reserved_bytes is None or m.reserved_bytes >= m.eval_peak_bytes, m


@pytest.mark.gpu
def test_gpu_allocator_bound_holds_within_and_gives_the_fraction_back() -> None:
    """memory.allocator_bound (the shape check's calls): an allocation over the bound fails inside it, the
    same allocation succeeds once it is left."""
    from cudaforge.engine.worker import memory

    device = torch.device("cuda")
    memory.release()
    with memory.allocator_bound(device, memory.GIB), pytest.raises(torch.OutOfMemoryError):
        torch.empty(2 * memory.GIB, dtype=torch.uint8, device=device)
    memory.release()
    big = torch.empty(2 * memory.GIB, dtype=torch.uint8, device=device)
    assert big.numel() == 2 * memory.GIB
    del big
    memory.release()


@pytest.mark.gpu
def test_gpu_task_that_cannot_fit_the_cap_is_said_before_the_build(tmp_path: Path, gpu_options: EvalOptions) -> None:
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.task import load_task

    task = tmp_path / "task.py"
    task.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return x * 2\n\n\ndef get_inputs():\n    return [torch.randn(1024, 1024, 1024)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    cand = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n" \
           "        raise RuntimeError('never built')\n"
    options = replace(gpu_options, gpu_memory_gb=8.0)
    result = asyncio.run(Evaluator(options).evaluate(load_task(task), Candidate(source=cand, format="python")))
    assert result.outcome == "oom", result.message
    assert "needs about 11 GiB to evaluate (1.25 × 8.0 GiB + 1 GiB" in result.message
    assert result.memory is not None and result.memory.fits is False


BIG_TASK = ("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n\n\n"
            "def get_inputs():\n    return [torch.randn(1024, 1024, 1024)]\n\n\ndef get_init_inputs():\n    return []\n")


def test_batch_says_once_that_a_task_does_not_fit_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task whose footprint + 1.1 GiB exceeds the cap: the session stops before the Coder is asked, the
    batch shows `skipped: does not fit this card`, and the summary counts it as not correct."""
    from cudaforge.engine.session.batch import Batch, format_summary, run_batch
    from llm_server import ScriptedLLMServer
    from session_kit import KEY, KEY_ENV, session_config

    monkeypatch.setenv(KEY_ENV, KEY)
    task = tmp_path / "big" / "task.py"
    task.parent.mkdir()
    task.write_text(BIG_TASK)
    with ScriptedLLMServer([]) as server:
        config = session_config(server, tmp_path / "cache", **{"eval.device": "cuda", "run.gpu_memory_gb": 4.0,
                                                               "session.format": "nvrtc"})
        batch = Batch.create(tmp_path / "runs", [task], config)
        summary = asyncio.run(run_batch(batch, jobs=2))
        assert not server.requests  # said before any candidate was written, let alone built
    (row,) = summary.rows
    assert row.status == "skipped" and not row.correct, row.message
    assert "skipped: does not fit this card" in row.message
    assert "big/task needs about 11 GiB to evaluate (1.25 × 8.0 GiB + 1 GiB" in row.message
    assert "the cap ([run] gpu_memory_gb) is 4.0 GiB" in row.message
    assert summary.correct == 0 and summary.tasks == 1 and all(v == 0 for v in summary.fast_p.values())
    assert "skipped: does not fit this card" in format_summary(summary)


COUNTING_TASK = '''import gc
import torch

N = 1 << 16
LOG = {log!r}


class Model(torch.nn.Module):
    def forward(self, x):
        # How many input-sized tensors are alive while this side runs (the harness's copies of the inputs).
        live = len({{o.untyped_storage().data_ptr() for o in gc.get_objects()
                     if isinstance(o, torch.Tensor) and o.numel() == N and o.device.type != "meta"}})
        with open(LOG, "a") as f:
            f.write(f"{{type(self).__name__}} {{live}}\\n")
        return x.sum(dim=0)


def get_inputs():
    return [torch.randn(256, 256)]


def get_init_inputs():
    return []
'''


def test_cpu_accounting_at_most_three_copies_of_the_inputs_are_alive_during_any_call(
        tmp_path: Path, cpu_options: EvalOptions) -> None:
    """CPU-side accounting of the memory rule (the allocator's peak is CUDA-only): during every reference
    and candidate call of a whole evaluation (reference peak, correctness trials, kernel check, cache probes,
    timing), at most two input-sized storages are alive: the draw and one clone (before: up to four)."""
    from cudaforge.engine.candidate import Candidate
    from cudaforge.engine.task import load_task

    log = tmp_path / "live.txt"
    task = tmp_path / "task.py"
    task.write_text(COUNTING_TASK.format(log=str(log)))
    cand = Candidate(source=task.read_text().replace("class Model(", "class ModelNew("), format="python")
    result = asyncio.run(Evaluator(cpu_options).evaluate(load_task(task), cand))
    assert result.correctness is not None and result.correctness.passed, result.message
    assert result.timing is not None and result.memory is not None and result.memory.footprint_bytes > 0
    counts = [(side, int(n)) for side, n in (ln.split() for ln in log.read_text().splitlines())]
    assert {s for s, _ in counts} == {"Model", "ModelNew"} and len(counts) > 20
    assert max(n for _, n in counts) <= 3, " ".join(f"{s[-3:]}{n}" for s, n in counts)


def test_memory_section_is_printed_by_eval_and_shown_in_the_correctness_pane() -> None:
    from cudaforge.engine.result_text import format_result
    from cudaforge.engine.results import EvalResult, Memory
    from cudaforge.tui.widgets.correctness import render_correctness
    from rich.console import Console

    mem = Memory(reference_peak_bytes=4 * memory.GIB, eval_peak_bytes=9 * memory.GIB, ratio=2.0,
                 total_bytes=140 * memory.GIB, cap_bytes=24 * memory.GIB)
    result = EvalResult(outcome="integrity_failure", accepted=False, task_path="t.py", candidate_hash="x",
                        format="python", device="cuda", memory=mem)
    line = ("memory: reference peak 4.00 GiB, evaluation peak 9.00 GiB, (peak - 1 GiB) / reference 2.00x "
            "(bound 1.25x), card 140.00 GiB, cap 24.00 GiB")
    assert line in format_result(result)
    console = Console(width=200, record=True)
    console.print(render_correctness(result))
    assert line in console.export_text()
    assert EvalResult.from_dict(result.to_dict()).memory == mem


def test_the_reservation_after_the_reference_counts_what_was_on_the_device_at_its_peak(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The device's peak during the reference call (both models' parameters, library workspaces the meta
    estimate cannot see) plus the rule's room beside the reference's own peak, under the cap."""
    monkeypatch.setattr(memory, "REFERENCE_IO", {})
    assert memory.reservation_after_reference() is None  # not measured yet
    # level1/64 on the H200: a 4 GiB meta footprint (estimate 6 GiB), 8 GiB measured with cuDNN's workspace
    monkeypatch.setattr(memory, "REFERENCE_IO", {"peak_bytes": 8 * memory.GIB, "held_peak_bytes": 8 * memory.GIB})
    monkeypatch.setattr(memory, "CAP", {})
    assert memory.reservation_after_reference() == 11 * memory.GIB  # 8 + 0.25 x 8 + 1
    # a parameter-heavy task: the candidate's copy of 4 GiB of weights was on the device beside the reference's
    monkeypatch.setattr(memory, "REFERENCE_IO", {"peak_bytes": 4 * memory.GIB, "held_peak_bytes": 8 * memory.GIB})
    assert memory.reservation_after_reference() == 10 * memory.GIB
    monkeypatch.setattr(memory, "CAP", {"bytes": 9 * memory.GIB})
    assert memory.reservation_after_reference() == 9 * memory.GIB


def test_the_sweep_runs_the_longest_problems_first_by_earlier_rows(tmp_path: Path) -> None:
    """--order-from: problems an earlier sweep timed go longest first (its wall less its spare wait); ones
    it never timed go before them, in their own order; a line that is no row is skipped."""
    sweep = _sweep_module()
    paths = [tmp_path / "level1" / f"{k}_p.py" for k in range(1, 6)]
    rows = tmp_path / "rows.jsonl"
    rows.write_text("\n".join([
        json.dumps({"problem": "level1/1_p", "wall_s": 10.0, "phases": {"spare_wait": 0.0}}),
        json.dumps({"problem": "level1/2_p", "wall_s": 40.0, "phases": {"spare_wait": 35.0}}),  # 5 s of work
        "not a row",
        json.dumps({"problem": "level1/4_p", "wall_s": 70.0, "phases": {}}),
        json.dumps({"problem": "level1/5_p", "wall_s": 10.0}),
    ]) + "\n")
    order = [sweep.name_of(p) for p in sweep.longest_first(paths, [rows])]
    assert order == ["level1/3_p", "level1/4_p", "level1/1_p", "level1/5_p", "level1/2_p"]
