"""bench/gpu_check.sh, the one GPU proof script: it parses, and its step list names every step.

The steps themselves need a GPU (the lead runs them on the H200); here: the script is valid bash, `--list`
names the steps the docs promise, an unknown step is bad input (exit 2) before anything is installed, and
every bench script a step calls exists."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "bench" / "gpu_check.sh"
STEPS = ("tests", "tests-integrity", "examples", "latency", "spares", "fidelity", "fidelity-nocover", "cover", "adversarial", "triton",
         "sweep-level1", "sweep-level2", "sweep-level3", "sweep-all", "sweep-recheck", "rnn-alone", "window-stacks", "batch", "tui",
         "sol", "host-copy", "peak-trace", "ncu-cost", "event-gap", "disturbance", "launch-path", "ncu-spares")
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="needs bash")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    assert BASH is not None
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True, timeout=60, cwd=REPO)


def test_gpu_check_parses() -> None:
    assert BASH is not None
    done = subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_gpu_check_lists_every_step_with_its_question() -> None:
    done = _run("--list")
    assert done.returncode == 0, done.stderr
    listed = [line.split()[0] for line in done.stdout.splitlines()[1:] if line.strip()]
    assert tuple(listed) == STEPS
    for line in done.stdout.splitlines()[1:]:
        minutes = line.split()[1]
        assert minutes.isdigit() and int(minutes) <= 9, f"a step must fit one 9-minute device call: {line}"


def test_gpu_check_refuses_an_unknown_step_before_installing_anything() -> None:
    done = _run("tests", "no-such-step")
    assert done.returncode == 2
    assert "unknown step 'no-such-step'" in done.stderr
    assert done.stdout == ""


def test_every_bench_script_a_step_calls_exists_and_the_history_scripts_are_gone() -> None:
    text = SCRIPT.read_text(encoding="utf-8")
    called = set(re.findall(r"bench/([a-z_]+\.py)", text))
    assert {"round_latency.py", "kernelbench_sweep.py", "batch_largest.py", "workbench_session.py"} <= called
    missing = {name for name in called if not (REPO / "bench" / name).is_file()} - {"speed_of_light.py"}
    assert not missing, f"gpu_check.sh calls bench scripts that do not exist: {sorted(missing)}"
    history = sorted(p.name for p in (REPO / "bench").glob("gpu_*") if p.name not in ("gpu_check.sh", "gpu_examples.py"))
    assert history == [], f"history-named bench scripts left: {history}"


def test_the_docs_name_each_step() -> None:
    docs = (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for step in STEPS:
        if not step.startswith("sweep-level"):
            assert f"`{step}`" in docs, f"docs/ARCHITECTURE.md does not name the step {step}"
