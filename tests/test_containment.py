"""Containment: hostile candidates (exit, fork + setsid, hang, output flood, secret hunting, fd
exhaustion) are contained by the sandbox, and leave neither the app process nor the next evaluation
affected. Every test ends by evaluating the honest candidate."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from adversarial_kit import describe, evaluate


def _children() -> set[int]:
    kids: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            kids.update(int(p) for p in (task / "children").read_text().split())
    return kids


def _alive(pid: int) -> bool:
    """True while `pid` is a live (not zombie) process that came from a cudaforge worker."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return False
    return state != "Z" and b"cudaforge.engine.worker" in cmdline


@pytest.fixture
def app_unaffected(cpu_options) -> Iterator[None]:
    """Snapshot this process (fds, children, cwd, environment); after the test, compare and run an honest
    evaluation that must be accepted."""
    fds = len(os.listdir("/proc/self/fd"))
    kids = _children()
    cwd = os.getcwd()
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
    yield
    assert os.getcwd() == cwd
    assert {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"} == env
    assert _children() <= kids, "the evaluation left child processes behind"
    assert len(os.listdir("/proc/self/fd")) <= fds + 2, "the evaluation leaked file descriptors"
    nxt = evaluate(cpu_options, "honest.py")
    assert nxt.accepted and nxt.findings == (), "the next evaluation was affected: " + describe(nxt)


def test_os_exit_in_forward_is_a_crash(cpu_options, app_unaffected) -> None:
    r = evaluate(cpu_options, "containment/os_exit.py")
    assert r.outcome == "crash", describe(r)
    assert r.exit is not None and r.exit.returncode == 0 and r.exit.phase == "correctness"
    assert "without a result" in r.message


def test_sys_exit_in_forward_is_a_crash(cpu_options, app_unaffected) -> None:
    r = evaluate(cpu_options, "containment/sys_exit.py")
    assert r.outcome == "crash", describe(r)
    assert "sys.exit(3)" in r.message


def test_forked_setsid_grandchild_is_killed(cpu_options, app_unaffected, tmp_path: Path) -> None:
    r = evaluate(cpu_options, "containment/fork_setsid.py", __PID_DIR__=str(tmp_path))
    assert r.outcome == "integrity_failure" and "threads_or_processes" in {f.name for f in r.failing_findings()}, \
        describe(r)
    pids = [int((tmp_path / f).read_text()) for f in ("child.pid", "grandchild.pid")]
    deadline = time.monotonic() + 5
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), f"orphans still running: {pids}"


def test_sleep_forever_is_killed_at_its_phase_limit(cpu_options, app_unaffected) -> None:
    opts = replace(cpu_options, timeouts={**cpu_options.timeouts, "correctness_s": 5.0})
    start = time.monotonic()
    r = evaluate(opts, "containment/sleep_forever.py")
    elapsed = time.monotonic() - start
    assert r.outcome == "timeout", describe(r)
    assert r.exit is not None and r.exit.phase == "correctness"
    assert "5 s" in r.message and elapsed < 30


def test_stdout_flood_is_killed_at_the_output_limit(cpu_options, app_unaffected) -> None:
    opts = replace(cpu_options, output_limit_bytes=1 << 20)
    start = time.monotonic()
    r = evaluate(opts, "containment/flood_stdout.py")
    assert r.outcome == "crash" and "output" in r.message, describe(r)
    assert time.monotonic() - start < 30
    assert len(r.stdout_tail) <= 4001 and "flood" in r.stdout_tail


def test_secrets_are_not_in_the_candidates_environment(cpu_options, app_unaffected, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-adversarial-must-not-leak")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-adversarial-must-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-adversarial-must-not-leak")
    spy = tmp_path / "spy.txt"
    r = evaluate(cpu_options, "containment/reads_secrets.py", __SPY_PATH__=str(spy))
    assert r.accepted, describe(r)
    seen = spy.read_text().splitlines()
    own_env = [line for line in seen if line.startswith("env ")]
    assert not any("must-not-leak" in line for line in own_env), own_env
    # its parent is the sandbox supervisor, whose environment is scrubbed as well
    supervisor = [line for line in seen if line.startswith("proc ")][:1]
    assert supervisor and "sandbox" in supervisor[0] and "must-not-leak" not in supervisor[0], seen
    assert any(line.startswith("cwd=") and "cudaforge-evaluate-" in line for line in seen)


def test_open_files_are_limited(cpu_options, app_unaffected, tmp_path: Path) -> None:
    spy = tmp_path / "spy.txt"
    opts = replace(cpu_options, open_files=128)
    r = evaluate(opts, "containment/many_files.py", __SPY_PATH__=str(spy))
    assert r.outcome == "runtime_error" and "Too many open files" in r.message, describe(r)
    opened = int(spy.read_text().split()[0])
    assert 0 < opened < 128
