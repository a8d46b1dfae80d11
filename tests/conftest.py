"""Shared fixtures: one build cache for the whole test run (C++ builds are the slow part), fast CPU options."""

from __future__ import annotations

import os
from pathlib import Path

import cudaforge.tui  # noqa: F401 - first, before any test imports textual: the workbench's frame rate
import leftover_processes
import pytest

REPO = Path(__file__).resolve().parent.parent
RUN_TOKEN = leftover_processes.mark_this_run()
LEFT_BEHIND: list[tuple[str, leftover_processes.Leftover]] = []  # (module, process), for the summary


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


HAS_CUDA = _has_cuda()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module", autouse=True)
def _no_process_outlives_its_module(request: pytest.FixtureRequest):  # -> Iterator[None]
    """After each module (its own fixtures torn down first): kill what it left running and name it in the
    summary. A leak is then one module's finding, not a slow machine for every module after it."""
    yield
    for proc in leftover_processes.reap(RUN_TOKEN):
        LEFT_BEHIND.append((request.node.nodeid, proc))


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # noqa: ANN001
    if LEFT_BEHIND:
        terminalreporter.section("processes left running by a test module (killed)", yellow=True)
        for module, proc in LEFT_BEHIND:
            terminalreporter.line(f"{module}: pid {proc.pid}: {proc.command}")


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One build cache per test session; CUDAFORGE_TEST_CACHE reuses one across runs (local speed-up)."""
    fixed = os.environ.get("CUDAFORGE_TEST_CACHE")
    path = Path(fixed) if fixed else tmp_path_factory.mktemp("cudaforge-cache")
    path.mkdir(parents=True, exist_ok=True)
    os.environ["CUDAFORGE_CACHE_DIR"] = str(path)
    return path


@pytest.fixture(scope="session")
def cpu_options(cache_dir: Path):  # -> EvalOptions
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    return EvalOptions(
        device="cpu",
        trials=2,
        timing={"warmup": 1, "trials": 5, "host_trials": 3, "l2_flush": False, "baselines": ["eager"]},
        timeouts={"load_s": 600.0, "correctness_s": 120.0, "timing_s": 120.0, "profile_s": 120.0},
        cache_dir=cache_dir,
        result_cache=False,  # tests exercise real evaluations; the result cache has its own tests
    )


@pytest.fixture(scope="session")
def gpu_options(cache_dir: Path):  # -> EvalOptions
    from cudaforge.engine.evaluation.evaluator import EvalOptions

    return EvalOptions(
        device="cuda",
        trials=3,
        cache_dir=cache_dir,
        timing={"warmup": 5, "warmup_ms": 25.0, "trials": 30, "min_time_ms": 50.0, "max_trials": 500, "host_trials": 10,
                "l2_flush": True, "baselines": ["eager"]},
        result_cache=False,
    )


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process sees no NVML (engine/gpu/nvml.py), as on a machine without the driver: device listings
    come from nvidia-smi (a script on PATH in the tests that use this)."""
    from cudaforge.engine.gpu import nvml

    monkeypatch.setitem(nvml._STATE, "pid", os.getpid())
    monkeypatch.setitem(nvml._STATE, "library", None)
    monkeypatch.setitem(nvml._STATE, "handles", {})
