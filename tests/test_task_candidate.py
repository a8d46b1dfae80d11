"""Static loading of tasks and candidates: one-line errors that name the file, line and cause."""

from __future__ import annotations

from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate, detect_format, load_candidate
from cudaforge.engine.errors import CandidateError, TaskError
from cudaforge.engine.task import load_task

CORE = Path(__file__).parent / "core_tasks"


def test_loads_a_task_and_lists_its_constants() -> None:
    task = load_task(CORE / "task.py")
    assert set(task.constants) == {"ROWS", "COLS", "SCALE"}
    assert len(task.sha256) == 64


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("import torch\n", "no `class Model(nn.Module)`"),
        (
            "class Model:\n    def forward(self, x):\n        return x\ndef get_init_inputs():\n    return []\n",
            "missing module-level function `get_inputs()`",
        ),
        (
            "class Model:\n    def forward(self, x):\n        return x\ndef get_inputs():\n    return []\n",
            "missing module-level function `get_init_inputs()`",
        ),
        (
            "class Model:\n    pass\ndef get_inputs():\n    return []\ndef get_init_inputs():\n    return []\n",
            "class Model has no forward() method",
        ),
        ("import torch\n\ndef f(:\n    pass\n", ":3: syntax error in task file"),
    ],
)
def test_bad_tasks_name_the_problem(tmp_path: Path, source: str, expected: str) -> None:
    path = tmp_path / "task.py"
    path.write_text(source)
    with pytest.raises(TaskError) as info:
        load_task(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_task_file() -> None:
    with pytest.raises(TaskError, match="task file not found"):
        load_task("/nonexistent/task.py")


def test_candidate_without_model_new(tmp_path: Path) -> None:
    path = tmp_path / "c.py"
    path.write_text("class Model: pass\n")
    with pytest.raises(CandidateError, match="no `class ModelNew`"):
        load_candidate(path)


@pytest.mark.parametrize(
    ("source", "fmt"),
    [
        ("from cudaforge.engine.nvrtc import load_kernel\nk = load_kernel(S, 'k')\n", "nvrtc"),
        (
            "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='a', cpp_sources=c, cuda_sources=s)\n",
            "inline",
        ),
        (
            "from torch.utils.cpp_extension import load_inline\nm = load_inline(name='a', cpp_sources=c, functions=['f'])\n",
            "cpu",
        ),
        ("import torch\nclass ModelNew: pass\n", "python"),
        ("import triton\nimport triton.language as tl\n@triton.jit\ndef k(x_ptr):\n    pass\n", "triton"),
        ("from triton import jit\n@jit\ndef k(x_ptr):\n    pass\n", "triton"),
        ("import triton\nimport torch\nn = triton.cdiv(10, 4)\n", "python"),
    ],
)
def test_format_detection(source: str, fmt: str) -> None:
    assert detect_format(source) == fmt
    assert Candidate.from_source(source).format == fmt


def test_examples_load() -> None:
    examples = Path(__file__).parent.parent / "examples"
    for task_path in examples.glob("*/task.py"):
        load_task(task_path)
        for cand in task_path.parent.glob("*.py"):
            if cand.name != "task.py":
                assert load_candidate(cand).format in ("nvrtc", "inline", "cpu", "triton", "python")
