"""KernelBench references evaluated as their own candidates (ModelNew = Model) on the CPU carry no
failing finding other than no_custom_kernel: the integrity checks do not misfire on scalar outputs
(cross-entropy), integer outputs (argmax), integer and boolean inputs, init arguments, parameters or
multi-name size constants. The problems are read from ../shared/kernelbench (skipped where absent)
and shrunk to small sizes (every size constant at most 16) in a temporary copy, so each takes seconds."""

from __future__ import annotations

from pathlib import Path

import pytest
from adversarial_kit import describe, evaluate, names
from cudaforge.engine.candidate import Candidate
from cudaforge.engine.integrity.runtime import load_variant, rewrite_constants, size_constants

KERNELBENCH = Path(__file__).resolve().parent.parent.parent / "shared" / "kernelbench"
PROBLEMS = [
    "level1/19_ReLU.py",
    "level1/51_Argmax_over_a_dimension.py",
    "level1/93_masked_cumsum.py",
    "level1/95_CrossEntropyLoss.py",
    "level2/1_Conv2D_ReLU_BiasAdd.py",
    "level2/12_Gemm_Multiply_LeakyReLU.py",
]


def shrunk(problem: str, tmp_path: Path) -> Path:
    source = (KERNELBENCH / problem).read_text(encoding="utf-8")
    module = load_variant(source, problem, {})
    small = {name: min(value, 16) for name, value in size_constants(module, source).items()}
    path = tmp_path / Path(problem).name
    path.write_text(rewrite_constants(source, small), encoding="utf-8")
    return path


@pytest.mark.skipif(not KERNELBENCH.is_dir(), reason=f"KernelBench problems not found at {KERNELBENCH}")
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: Path(p).stem)
def test_reference_as_candidate_fails_only_no_custom_kernel(cpu_options, tmp_path: Path, problem: str) -> None:
    task = shrunk(problem, tmp_path)
    candidate = Candidate.from_source(task.read_text(encoding="utf-8") + "\n\nModelNew = Model\n",
                                      path=tmp_path / "candidate.py")
    r = evaluate(cpu_options, candidate, task)
    assert r.outcome == "integrity_failure", describe(r)
    assert names(r, "fail") == {"no_custom_kernel"}, describe(r)
    assert "weak_task_check" not in names(r), describe(r)
    assert r.correctness is not None and r.correctness.passed
