"""Unit tests of the second round's runtime checks (engine/integrity/runtime.py), the gpu_shared filter
(engine/gpu/lock.py), the result consistency check and the random seed (engine/evaluation/evaluator.py).
Everything here runs in this process in milliseconds; the end-to-end cases are in test_adversarial.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cudaforge.engine.evaluation import result_cache
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator, forgery_finding
from cudaforge.engine.evaluation.sandbox import MARKER_VAR
from cudaforge.engine.gpu.lock import (
    card_share,
    foreign_gpu_processes,
    is_cudaforge_process,
    parse_compute_apps,
    process_command,
)
from cudaforge.engine.integrity.registry import REGISTRY
from cudaforge.engine.integrity.runtime import (
    FixedValueProbe,
    clock_findings,
    fallback_rule,
    load_variant,
    size_constants,
    smaller_size,
)
from cudaforge.engine.worker.job import WorkerReport

# ------------------------------------------------------------------ pytorch_fallback rule

GEMM = "ampere_sgemm_128x64_tn"
RELU = "vectorized_elementwise_kernel<clamp_min>"
BIAS = "vectorized_elementwise_kernel<add>"


def test_token_kernel_with_pytorch_doing_the_work_fires() -> None:
    reference = {GEMM: (1, 900.0), BIAS: (1, 30.0), RELU: (1, 30.0)}
    library = {GEMM: (1, 905.0), BIAS: (1, 31.0), RELU: (1, 29.0)}
    evidence = fallback_rule(reference, library, custom_us=2.0)
    assert evidence is not None and evidence["reference_kernels"] == 3 and evidence["own_share"] < 0.01
    assert fallback_rule(reference, library, custom_us=None) is not None  # the CPU: (3) not measured


def test_keeping_cublas_for_the_gemm_and_fusing_the_rest_is_not_fallback() -> None:
    """The epilogue is a sliver of the time, but the candidate replaced the reference's bias and relu kernels."""
    reference = {GEMM: (1, 900.0), BIAS: (1, 30.0), RELU: (1, 30.0)}
    library = {GEMM: (1, 900.0)}
    assert fallback_rule(reference, library, custom_us=25.0) is None


def test_same_kernel_names_on_a_token_slice_are_not_comparable_time() -> None:
    reference = {RELU: (1, 100.0)}
    assert fallback_rule(reference, {RELU: (1, 3.0)}, custom_us=95.0) is None


def test_fewer_launches_than_the_reference_do_not_cover_it() -> None:
    reference = {RELU: (2, 100.0)}
    assert fallback_rule(reference, {RELU: (1, 60.0)}, custom_us=1.0) is None


def test_own_kernels_doing_most_of_the_time_are_not_a_small_share() -> None:
    reference = {RELU: (1, 100.0)}
    assert fallback_rule(reference, {RELU: (1, 100.0)}, custom_us=400.0) is None


# ------------------------------------------------------------------ weak_task_check


def test_scalar_loss_that_varies_with_the_inputs_is_not_weak() -> None:
    probe = FixedValueProbe(1e-4, 1e-4)
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        logits, target = torch.randn(16, 10, generator=g), torch.randint(0, 10, (16,), generator=g)
        probe.add([torch.nn.functional.cross_entropy(logits, target)])
    assert probe.finding(3) is None


def test_outputs_below_the_tolerance_are_weak_with_zero() -> None:
    probe = FixedValueProbe(1e-4, 1e-4)
    for seed in range(3):
        probe.add([torch.randn(8, 8, generator=torch.Generator().manual_seed(seed)) * 1e-6])
    f = probe.finding(3)
    assert f is not None and f.name == "weak_task_check" and f.evidence["trivial_output"] == "zero"


def test_one_constant_for_every_trial_is_weak() -> None:
    probe = FixedValueProbe(1e-4, 1e-4)
    for _ in range(3):
        probe.add([torch.full((4, 4), 3.0), torch.tensor(7.0)])
    f = probe.finding(3)
    assert f is not None and f.evidence["trivial_output"] == "constant"
    assert f.evidence["values"] == {"0": 3.0, "1": 7.0}


def test_a_constant_that_differs_between_trials_is_not_weak() -> None:
    probe = FixedValueProbe(1e-4, 1e-4)
    for v in (1.0, 2.0, 3.0):
        probe.add([torch.full((4, 4), v)])
    assert probe.finding(3) is None


def test_integer_outputs_only_are_never_weak() -> None:
    probe = FixedValueProbe(1e-4, 1e-4)
    for _ in range(2):
        probe.add([torch.zeros(4, dtype=torch.int64)])
    assert probe.finding(2) is None


# ------------------------------------------------------------------ shape constants

KB_LIKE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, in_features, out_features, kernel_size):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
    def forward(self, x):
        return self.linear(x)

batch_size = 128
in_features = 1024
out_features = 512
kernel_size = 3
stride = 16
dim = 1
input_shape = (in_features,)
UNUSED = 4096

def get_inputs():
    return [torch.randn(batch_size, *input_shape)]

def get_init_inputs():
    return [in_features, out_features, kernel_size]
'''


def test_size_constants_are_the_sizes_that_build_the_inputs() -> None:
    module = load_variant(KB_LIKE, "kb.py", {})
    assert size_constants(module, KB_LIKE) == {"batch_size": 128, "in_features": 1024, "out_features": 512}


def test_the_variant_recomputes_derived_constants() -> None:
    values = {"batch_size": smaller_size(128), "in_features": smaller_size(1024)}
    module = load_variant(KB_LIKE, "kb.py", values)
    assert values == {"batch_size": 127, "in_features": 513}
    assert module.input_shape == (513,) and module.get_inputs()[0].shape == (127, 513)
    assert module.get_init_inputs() == [513, 512, 3]


def test_smaller_sizes_are_odd_and_no_larger() -> None:
    for v in (8, 9, 64, 255, 256, 1000, 16384, 393216):
        s = smaller_size(v)
        assert s < v and s % 2 == 1 and s >= 7


def test_no_size_constants_in_a_task_without_module_level_sizes() -> None:
    source = "import torch\ndef get_inputs():\n    return [torch.randn(64, 64)]\ndef get_init_inputs():\n    return []\n"
    assert size_constants(load_variant(source, "t.py", {}), source) == {}


# ------------------------------------------------------------------ clocks, result forgery, seed, policy


def test_clocks_that_agree_raise_nothing_and_a_frozen_timer_is_tampering() -> None:
    assert clock_findings({"candidate": (0.0105, 0.0107), "reference": (0.2, 0.2004)}) == []
    (f,) = clock_findings({"candidate": (0.0001, 0.05)})
    assert f.name == "harness_tampering" and f.severity == "fail" and "candidate" in f.evidence["clocks"]


def test_an_ok_result_without_the_worker_records_is_forged() -> None:
    f = forgery_finding(WorkerReport.from_dict({"outcome": "ok", "phases": {}, "message": "correct, 100x"}))
    assert f is not None and f.name == "result_forgery" and "correctness" in f.evidence["missing"]
    assert forgery_finding(WorkerReport.from_dict({"outcome": "wrong_result"})) is None
    assert forgery_finding(None) is None


def test_new_finding_names_have_default_severities() -> None:
    assert REGISTRY["pytorch_fallback"].severity == "fail"
    assert REGISTRY["timing_output_mismatch"].severity == "fail"
    assert REGISTRY["shape_specialized"].severity == "warn"
    assert "pytorch_time_share" not in REGISTRY


def test_random_seed_per_evaluation_and_a_fixed_one_on_request(tmp_path) -> None:
    from cudaforge.engine.task import Task

    task = Task(path=tmp_path / "task.py", source="", name="t", constants=())
    random_opts = EvalOptions(device="cpu", cache_dir=tmp_path)
    seeds = {Evaluator(random_opts).worker_job(task, tmp_path / "c.py", tmp_path).seed for _ in range(5)}
    assert len(seeds) > 1
    fixed = EvalOptions(device="cpu", cache_dir=tmp_path, seed=7)
    assert Evaluator(fixed).worker_job(task, tmp_path / "c.py", tmp_path).seed == 7


def test_result_cache_key_does_not_depend_on_the_drawn_seed_but_on_a_fixed_one(tmp_path) -> None:
    """A random seed is keyed as None: an identical candidate reuses a result measured on another random
    draw (it could not predict that one either); a fixed seed keys by value, so a reproduction with
    `[eval] seed` never gets a result of a random draw."""
    env = {"device": "cpu"}
    key = lambda o: result_cache.eval_cache_key("c", "t", result_cache.eval_settings(o), env)  # noqa: E731
    random_opts = EvalOptions(device="cpu", cache_dir=tmp_path)
    assert key(random_opts) == key(EvalOptions(device="cpu", cache_dir=tmp_path))
    assert key(random_opts) != key(EvalOptions(device="cpu", cache_dir=tmp_path, seed=42))
    assert key(EvalOptions(device="cpu", cache_dir=tmp_path, seed=42)) != key(EvalOptions(device="cpu", cache_dir=tmp_path, seed=43))


# ------------------------------------------------------------------ gpu_shared


def test_compute_apps_rows_are_parsed() -> None:
    rows = parse_compute_apps("1234, 10240, python\n99, [N/A], /usr/bin/foo\nNo running processes found\n")
    assert rows == [{"pid": 1234, "memory_mib": 10240, "name": "python"},
                    {"pid": 99, "memory_mib": None, "name": "/usr/bin/foo"}]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_our_workers_are_told_apart_by_the_sandbox_marker() -> None:
    """A process with the sandbox marker in its environment is ours (a worker or spare of any session of
    this user); one without it is foreign and is named by its command line."""
    code = "import time; time.sleep(30)"
    ours = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARKER_VAR: "test-marker"})
    foreign = subprocess.Popen([sys.executable, "-c", code], env={k: v for k, v in os.environ.items() if k != MARKER_VAR})
    try:
        time.sleep(0.2)
        assert is_cudaforge_process(ours.pid)
        assert not is_cudaforge_process(foreign.pid)
        assert "time.sleep(30)" in process_command(foreign.pid)
    finally:
        ours.kill()
        foreign.kill()
        ours.wait()
        foreign.wait()


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs /proc")
def test_memory_our_other_workers_hold_counts_as_free_for_the_fit_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                        no_nvml: None) -> None:
    """A batch runs sessions side by side: the memory another session's worker holds now is freed before
    it gives the GPU lock up, so the fit check counts it as free; a foreign process's memory is not.
    nvidia-smi is a script here (CI has no GPU) that answers both queries the fit check makes."""
    from cudaforge.engine.evaluation.fit import card_free_bytes

    code = "import time; time.sleep(30)"
    ours = subprocess.Popen([sys.executable, "-c", code], env={**os.environ, MARKER_VAR: "test-marker"})
    foreign = subprocess.Popen([sys.executable, "-c", code], env={k: v for k, v in os.environ.items() if k != MARKER_VAR})
    try:
        smi = tmp_path / "nvidia-smi"
        smi.write_text("#!/bin/sh\ncase \"$1\" in\n"
                       f"  --query-compute-apps=*) printf '{ours.pid}, 30000, python\\n{foreign.pid}, 5000, other\\n' ;;\n"
                       "  --query-gpu=*) echo 'NVIDIA H200, 9.0, 143771, 1980, 580.00, 20000' ;;\n"
                       "esac\n")
        smi.chmod(0o755)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        time.sleep(0.2)
        assert card_share(0, lambda: 0).free_with_ours == 30000 << 20  # ours only, the foreign one left out
        assert [p["pid"] for p in foreign_gpu_processes(0)] == [foreign.pid]
        assert card_free_bytes(0) == (20000 + 30000) << 20
    finally:
        for proc in (ours, foreign):
            proc.kill()
            proc.wait()
