"""KernelBench idioms through the real CLI on the CPU device: constants, int and non-tensor inputs,
init args, tuple outputs, parameters; bad tasks rejected with exit 2 and a one-line message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TASKS = Path(__file__).parent / "tasks"
GOOD = sorted(p.name for p in TASKS.iterdir() if (p / "task.py").exists() and (p / "cpu.py").exists())


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUDAFORGE_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "cudaforge.engine.cli", *args], capture_output=True, text=True,
                          env=env, timeout=900, check=False)


@pytest.mark.parametrize("name", GOOD)
def test_idiom_task_accepted_via_cli_json(name: str, cache_dir: Path) -> None:
    proc = cli("eval", str(TASKS / name / "task.py"), str(TASKS / name / "cpu.py"), "--device", "cpu", "--json",
               "--trials", "2", "--timing-trials", "5", cache=cache_dir)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(proc.stdout)  # stdout holds exactly one JSON document
    assert doc["outcome"] == "ok" and doc["accepted"] is True
    assert doc["correctness"]["passed"] and doc["timing"]["speedup"] > 0
    assert "evaluating" in proc.stderr  # messages go to stderr


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing_model.py", "no `class Model"),
        ("syntax_error.py", ":14: syntax error"),
        ("get_inputs_raises.py", "get_inputs() raised"),
        ("get_inputs_not_sequence.py", "get_inputs() must return a list or tuple"),
        ("model_init_fails.py", "Model(*get_init_inputs()) raised"),
        ("missing_get_init_inputs.py", "get_init_inputs"),
    ],
)
def test_bad_task_exit_2_with_one_line(name: str, message: str, cache_dir: Path) -> None:
    candidate = TASKS / "axpy" / "cpu.py"
    proc = cli("eval", str(TASKS / "bad" / name), str(candidate), "--device", "cpu", cache=cache_dir)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    text = proc.stdout + proc.stderr
    assert message in text
    assert "Traceback" not in proc.stderr


def test_usage_errors_exit_2(cache_dir: Path) -> None:
    assert cli("eval", "only-one-arg", cache=cache_dir).returncode == 2
    proc = cli("eval", "/nonexistent/task.py", "x.py", "--device", "cpu", cache=cache_dir)
    assert proc.returncode == 2 and "task file not found" in proc.stderr


def test_wrong_result_exits_1(cache_dir: Path) -> None:
    core = Path(__file__).parent / "core_tasks"
    proc = cli("eval", str(core / "task.py"), str(core / "wrong.py"), "--device", "cpu", "--trials", "1",
               cache=cache_dir)
    assert proc.returncode == 1
    assert "wrong result" in proc.stdout and "expected" in proc.stdout
