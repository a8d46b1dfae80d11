"""The zygote (engine/evaluation/zygote.py): spares forked from one process that imported torch once, kept in
the same sandbox as exec'd ones, and never outliving the app. Real processes throughout (CPU device; the GPU
test runs a forked spare's CUDA evaluation)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.candidate import Candidate, load_candidate
from cudaforge.engine.evaluation import zygote
from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
from cudaforge.engine.gpu.lock import MARKER_VAR, is_cudaforge_process
from cudaforge.engine.task import load_task

HERE = Path(__file__).parent / "core_tasks"
TASK = HERE / "task.py"
REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def _wait(predicate, limit_s: float = 60.0) -> bool:  # noqa: ANN001
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _ppid(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[1])


def _forked_spare(ev: Evaluator) -> dict:
    """Prewarm until the spare kept is one forked from a ready zygote; its ready.json."""
    ev.prewarm()
    zy = zygote.zygote_for(ev.options.python, ev.options.device, ev.worker_env())
    assert zy.wait_ready(120), zy.error or "the zygote never said it was ready"
    for _ in range(3):
        spare = ev.spare
        assert spare is not None
        assert _wait(lambda s=spare: s.ready() is not None or not s.alive(), 60)
        ready = spare.ready()
        if ready is not None and "fork_s" in ready["steps"]:
            return ready
        # the spare was started while the zygote still imported: replace it with a forked one
        for old in ev._pool.clear():
            old.kill()
        ev.prewarm()
    raise AssertionError("no forked spare")


@pytest.fixture
def zygote_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zygote.ENV_SWITCH, "1")


def test_a_forked_spare_is_ready_at_once_and_evaluates_in_the_same_sandbox(cpu_options, zygote_on) -> None:
    ev = Evaluator(cpu_options)
    try:
        ready = _forked_spare(ev)
        spare = ev.spare
        worker, supervisor = ready["pid"], spare.handle.proc.pid
        zy_pid = zygote.zygote_for(ev.options.python, "cpu", ev.worker_env()).proc.pid
        # Nothing was imported again: the warm-up took milliseconds (an exec'd spare imports torch: seconds).
        assert ready["steps"]["import_s"] < 0.5 and ready["warm_s"] < 1.0, ready
        # The tree: app -> zygote -> supervisor -> worker; each sandboxed process in a session of its own.
        assert _ppid(worker) == supervisor and _ppid(supervisor) == zy_pid
        assert os.getsid(worker) == worker and os.getsid(supervisor) == supervisor
        # The worker entered the sandbox as an exec'd one would: its cwd, rlimits and the marker that tells
        # our GPU processes apart (the zygote's, in /proc's environ of everything forked from it).
        assert os.readlink(f"/proc/{worker}/cwd") == str(spare.sandbox_dir)
        limits = Path(f"/proc/{worker}/limits").read_text()
        core = next(line for line in limits.splitlines() if line.startswith("Max core file size"))
        assert core.split()[4] == "0", core
        files = next(line for line in limits.splitlines() if line.startswith("Max open files"))
        assert int(files.split()[3]) == min(cpu_options.open_files, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
        assert is_cudaforge_process(worker) and is_cudaforge_process(supervisor)
        r = asyncio.run(ev.evaluate(load_task(TASK), load_candidate(HERE / "correct.py")))
        assert r.accepted, r.message + r.stderr_tail
        assert "spare_fork" in r.phases and "spare_python_start" not in r.phases and r.phases["spare_wait"] < 0.5
        assert _wait(lambda: not _alive(worker) and not _alive(supervisor), 30)
    finally:
        asyncio.run(ev.aclose())


def test_what_a_forked_worker_starts_carries_its_own_sandbox_marker(cpu_options, zygote_on, tmp_path: Path) -> None:
    """A forked process's /proc environ is the zygote's, so the caller's marker sweep would miss what a candidate
    starts unless the worker's environment is its sandbox's own: a child it execs must carry that marker."""
    seen = tmp_path / "seen.json"
    source = (HERE / "correct.py").read_text() + textwrap.dedent(f"""

        import json as _json, os as _os, subprocess as _subprocess
        _child = _subprocess.run(["sh", "-c", "echo ${MARKER_VAR}; echo $TMPDIR"], capture_output=True, text=True)
        with open({str(seen)!r}, "w") as _fh:
            _json.dump({{"self": _os.environ.get("{MARKER_VAR}"), "child": _child.stdout.split()}}, _fh)
    """)
    ev = Evaluator(cpu_options)
    try:
        _forked_spare(ev)
        spare = ev.spare
        marker = spare.handle.marker
        r = asyncio.run(ev.evaluate(load_task(TASK), Candidate.from_source(source)))
        assert r.outcome == "integrity_failure" and "threads_or_processes" in r.message  # starting one is a finding
        got = json.loads(seen.read_text())
        assert got["self"] == marker and got["child"] == [marker, str(spare.sandbox_dir)], (got, marker)
    finally:
        asyncio.run(ev.aclose())


def test_the_worker_of_a_killed_supervisor_is_killed_by_the_zygote(cpu_options, zygote_on) -> None:
    ev = Evaluator(cpu_options)
    try:
        ready = _forked_spare(ev)
        worker, supervisor = ready["pid"], ev.spare.handle.proc.pid
        os.kill(supervisor, signal.SIGKILL)  # no sweep by it: the worker is re-parented to the zygote
        assert _wait(lambda: not _alive(worker), 10), "the orphaned worker still runs"
    finally:
        asyncio.run(ev.aclose())


def test_closing_kills_the_spares_and_a_retired_zygote_lets_its_jobs_finish(cpu_options, zygote_on) -> None:
    ev = Evaluator(cpu_options)
    ready = _forked_spare(ev)
    worker, supervisor = ready["pid"], ev.spare.handle.proc.pid
    asyncio.run(ev.aclose())  # kills the spare (SIGTERM to its supervisor, which sweeps its tree)
    assert _wait(lambda: not _alive(worker) and not _alive(supervisor), 15)
    zy = zygote.zygote_for(ev.options.python, "cpu", ev.worker_env())
    ev2 = Evaluator(cpu_options)
    try:
        ready = _forked_spare(ev2)
        worker = ready["pid"]
        zy.retire()  # no more forks; the spare it forked keeps its job
        time.sleep(0.5)
        assert _alive(worker) and zy.alive()
        r = asyncio.run(ev2.evaluate(load_task(TASK), load_candidate(HERE / "correct.py")))
        assert r.accepted, r.message + r.stderr_tail
        assert _wait(lambda: not zy.alive(), 15), "a retired zygote ends once its spares have"
        ev2.prewarm()  # a new zygote replaces the retired one (its first spare exec'd while it imports)
        assert _wait(lambda: ev2.spare.ready() is not None, 60)
    finally:
        asyncio.run(ev2.aclose())


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "exec-d"])
def test_the_zygote_and_its_spares_die_with_the_app_and_leave_no_folder(cpu_options, tmp_path: Path,
                                                                        forked: bool) -> None:
    """The app exits without any clean-up (os._exit skips atexit): the zygote sees its parent gone and kills its
    tree; each supervisor sees the zygote (or the app) gone and kills its own. No folder is left in the temp
    folder: the zygote's, and each spare's job folder (removed by the zygote, or by an exec'd supervisor)."""
    script = tmp_path / "app.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        os.environ["{zygote.ENV_SWITCH}"] = "{int(forked)}"
        from cudaforge.engine.evaluation.evaluator import EvalOptions, Evaluator
        from cudaforge.engine.evaluation import zygote
        from test_zygote import _forked_spare, _wait
        ev = Evaluator(EvalOptions(device="cpu", cache_dir=Path({str(cpu_options.cache_dir)!r})))
        if {forked}:
            ready = _forked_spare(ev)
            zy = zygote.zygote_for(ev.options.python, "cpu", ev.worker_env())
            pids, folders = [zy.proc.pid], [str(zy.workdir)]
        else:
            ev.prewarm()
            assert _wait(lambda: ev.spare.ready() is not None, 120)
            ready, pids, folders = ev.spare.ready(), [], []
        pids += [ev.spare.handle.proc.pid, ready["pid"]]
        folders.append(str(ev.spare.workdir))
        print(json.dumps([pids, folders]), flush=True)
        os._exit(0)
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=240, cwd=REPO)
    assert out.returncode == 0, out.stderr[-3000:]
    pids, folders = json.loads(out.stdout.strip().splitlines()[-1])
    assert all(Path(f).name.startswith("cudaforge-") for f in folders) and len(folders) == 1 + forked
    assert _wait(lambda: not any(_alive(p) for p in pids), 15), [p for p in pids if _alive(p)]
    assert _wait(lambda: not any(Path(f).exists() for f in folders), 5), [f for f in folders if Path(f).exists()]


def test_a_zygote_that_does_not_answer_is_given_up_at_once_and_closed_off_the_callers_thread(
        cpu_options, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A stopped zygote never answers a fork: the caller (the event loop, in the app) gets None after the reply
    timeout, not after the up-to-20 s close, and the zygote is still closed, its marker swept."""
    monkeypatch.setattr(zygote, "REPLY_TIMEOUT_S", 0.5)
    zy = zygote.Zygote(cpu_options.python, "cpu", Evaluator(cpu_options).worker_env())
    try:
        assert zy.wait_ready(120), zy.error
        os.kill(zy.proc.pid, signal.SIGSTOP)
        started = time.monotonic()
        assert zy.fork(tmp_path / "never-read.json") is None
        assert time.monotonic() - started < 2.0, "the fork waited for the close"
        assert "no answer within 0.5 s" in zy.error
        assert zy.alive()  # its close is under way in a thread: SIGTERM is pending on the stopped zygote
        os.kill(zy.proc.pid, signal.SIGCONT)
        assert _wait(lambda: not zy.alive(), 15), "the zygote was never closed"
        assert _wait(lambda: not zy.workdir.exists(), 15)
        zy.close()  # a second close (at exit) signals no reaped pid and returns at once
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(zy.proc.pid, signal.SIGCONT)
        zy.close()


def test_the_switch_and_the_configuration_turn_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zygote.ENV_SWITCH, "0")
    assert not zygote.enabled(True)
    monkeypatch.setenv(zygote.ENV_SWITCH, "1")
    assert zygote.enabled(False) == sys.platform.startswith("linux")
    monkeypatch.delenv(zygote.ENV_SWITCH)
    assert not zygote.enabled(False)
    from cudaforge.engine.config import load_config

    def no_pidfds(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setenv(zygote.ENV_SWITCH, "1")
    monkeypatch.setattr(zygote, "_PIDFDS", [])
    monkeypatch.setattr(os, "pidfd_open", no_pidfds)
    assert not zygote.enabled(True)  # an old kernel: exec'd spares (the app watches a forked one by pidfd)
    monkeypatch.delenv(zygote.ENV_SWITCH)
    cfg = load_config(None, {"eval.zygote": False}, use_user_config=False)
    assert EvalOptions.from_config(cfg).zygote is False
    assert EvalOptions.from_config(load_config(None, use_user_config=False)).zygote is True


def test_an_exec_d_spare_is_started_while_the_zygote_imports(cpu_options, zygote_on) -> None:
    """The app never waits for the zygote's import: the first spare is started the usual way meanwhile."""
    ev = Evaluator(replace(cpu_options, cache_dir=cpu_options.cache_dir / "fresh-zygote"))
    try:
        started = time.monotonic()
        ev.prewarm()
        assert time.monotonic() - started < 1.0
        spare = ev.spare
        assert _wait(lambda: spare.ready() is not None, 60)
        assert "python_start_s" in spare.ready()["steps"]
    finally:
        asyncio.run(ev.aclose())


@pytest.mark.gpu
def test_a_forked_spare_creates_its_cuda_context_and_evaluates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The zygote imported torch, the evaluation code and triton without touching CUDA: its forked spare creates
    its context and runs a CUDA evaluation."""
    monkeypatch.setenv(zygote.ENV_SWITCH, "1")
    example = REPO / "examples" / "relu"
    ev = Evaluator(EvalOptions(device="cuda", cache_dir=tmp_path / "cache", spares=1))
    try:
        ready = _forked_spare(ev)
        assert ready["steps"]["import_s"] < 0.5, ready
        r = asyncio.run(ev.evaluate(load_task(example / "task.py"), load_candidate(example / "nvrtc.py")))
        assert r.outcome == "ok" and r.accepted, r.message + r.stderr_tail
        assert "spare_fork" in r.phases and r.timing is not None
        assert is_cudaforge_process(ready["pid"]) or not _alive(ready["pid"])
    finally:
        asyncio.run(ev.aclose())


def test_a_caller_that_waits_for_the_zygote_gets_forked_spares_from_the_first(cpu_options, zygote_on) -> None:
    """A sweep's slots start their first spares at once: waiting for the zygote first (Evaluator.zygote_ready),
    even the first spare is forked, not a Python importing torch beside fifteen others."""
    ev = Evaluator(replace(cpu_options, cache_dir=cpu_options.cache_dir / "waited-zygote"))
    try:
        assert asyncio.run(ev.zygote_ready(120.0))
        ev.prewarm()
        spare = ev.spare
        assert spare is not None and _wait(lambda: spare.ready() is not None, 60)
        assert "fork_s" in spare.ready()["steps"] and "python_start_s" not in spare.ready()["steps"]
    finally:
        asyncio.run(ev.aclose())


def test_zygote_ready_is_false_at_once_where_spares_are_exec_d(cpu_options, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(zygote.ENV_SWITCH, "0")
    started = time.monotonic()
    assert asyncio.run(Evaluator(cpu_options).zygote_ready()) is False
    assert time.monotonic() - started < 0.5
