"""Helpers for the adversarial suite (tests/adversarial/): assemble candidates and evaluate them.

Every CPU candidate there starts with the line `# @include _ext.py`, replaced here by the contents
of tests/adversarial/_ext.py: one C++ extension (same name, same source) shared by all of them, so
the engine's content-keyed build cache builds it once per test session.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from cudaforge.engine.candidate import Candidate, check_candidate_source
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.results import EvalResult, Finding
from cudaforge.engine.task import load_task

ADV = Path(__file__).parent / "adversarial"
TASK = ADV / "task.py"
TINY_TASK = ADV / "tiny_task.py"
INCLUDE = "# @include _ext.py"


def candidate_source(name: str, **substitutions: str) -> str:
    """The source of tests/adversarial/NAME with the shared extension included and placeholders filled."""
    path = ADV / name
    source = path.read_text(encoding="utf-8")
    if INCLUDE in source:
        source = source.replace(INCLUDE, (ADV / "_ext.py").read_text(encoding="utf-8"), 1)
    for key, value in substitutions.items():
        source = source.replace(key, value)
    check_candidate_source(source, str(path))
    return source


def candidate(name: str, **substitutions: str) -> Candidate:
    return Candidate.from_source(candidate_source(name, **substitutions), path=ADV / name)


def evaluate(options: EvalOptions, name: str | Candidate, task: Path = TASK, **substitutions: str) -> EvalResult:
    cand = name if isinstance(name, Candidate) else candidate(name, **substitutions)

    async def run() -> EvalResult:
        evaluator = Evaluator(options)
        try:
            return await evaluator.evaluate(load_task(task), cand)
        finally:
            await evaluator.aclose()  # as every caller does: the worker's exit, reaped in the background, is over

    return asyncio.run(run())


def names(result: EvalResult, severity: str | None = None) -> set[str]:
    """Names of the result's findings (of one severity, if given)."""
    return {f.name for f in result.findings if severity is None or f.severity == severity}


def describe(result: EvalResult) -> str:
    """One block of text for assertion messages."""
    found = ", ".join(f"{f.name}:{f.severity}" for f in result.findings) or "none"
    return (f"outcome={result.outcome} message={result.message!r} findings=[{found}]\n"
            f"{result.traceback[-1500:]}\n{result.stderr_tail[-1500:]}")


def the_finding(result: EvalResult, name: str) -> Finding:
    """The result's finding called `name`; where there is none, an assertion that describes the result."""
    found = next((f for f in result.findings if f.name == name), None)
    assert found is not None, f"no {name} finding: {describe(result)}"
    return found


def source_findings_of(name: str) -> set[str]:
    """Names of the static findings for one adversarial candidate."""
    from cudaforge.engine.integrity.static import source_findings

    task = TINY_TASK if "tiny" in name else TASK
    return {f.name for f in source_findings(candidate_source(name), task.read_text())}
