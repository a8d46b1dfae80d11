"""The sandbox on its own: scrubbed env, per-phase limits, output limit, descendants swept."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
import time
from pathlib import Path

from cudaforge.engine.evaluation.sandbox import (
    ReportFile,
    live_sandbox_pids,
    run_sandboxed,
    scrub_env,
    start_sandboxed,
    wait_sandboxed,
)


def test_scrub_env_drops_credentials() -> None:
    env = scrub_env({"OPENAI_API_KEY": "x", "GITHUB_TOKEN": "y", "MY_SECRET": "z", "DB_PASSWORD": "p",
                     "PATH": "/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"})
    assert env == {"PATH": "/bin", "HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}


def _run(tmp_path: Path, code: str, **kw):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    return asyncio.run(run_sandboxed([sys.executable, str(script)], workdir=tmp_path / "w", **kw))


def test_setsid_grandchild_is_killed_on_timeout(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    code = f"""
        import os, time, json
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                open({str(pidfile)!r}, "w").write(str(os.getpid()))
                while True:
                    time.sleep(1)
            os._exit(0)
        json.dump({{"phase": "correctness", "since": time.time()}}, open("progress.json", "w"))
        while True:
            time.sleep(1)
    """
    start = time.monotonic()
    outcome, _, _ = _run(tmp_path, code, phase_limits={"correctness": 1.5}, default_limit_s=30)
    assert outcome.reason == "timeout" and outcome.phase == "correctness"
    assert time.monotonic() - start < 20
    grandchild = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{grandchild}").exists() or "Z" in Path(f"/proc/{grandchild}/stat").read_text().split()[2]


def test_orphan_left_behind_after_normal_exit_is_swept(tmp_path: Path) -> None:
    pidfile = tmp_path / "orphan.pid"
    code = f"""
        import os, time
        if os.fork() == 0:
            os.setsid()
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(600)
        time.sleep(0.5)
    """
    outcome, _, _ = _run(tmp_path, code)
    assert outcome.reason == "exited" and outcome.returncode == 0
    assert outcome.swept >= 1
    pid = int(pidfile.read_text())
    time.sleep(0.2)
    assert not Path(f"/proc/{pid}").exists()


def test_output_flood_is_stopped(tmp_path: Path) -> None:
    code = """
        import sys
        while True:
            sys.stdout.write("x" * 65536)
    """
    outcome, out, _ = _run(tmp_path, code, output_limit_bytes=1 << 20)
    assert outcome.reason == "output_limit"
    assert out.stat().st_size <= 256 << 20  # bounded by the file-size rlimit at worst


def test_signal_death_is_reported(tmp_path: Path) -> None:
    outcome, _, _ = _run(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    assert outcome.reason == "signal" and outcome.signal == "SIGSEGV"


def test_child_sees_no_secret_and_has_its_own_cwd(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    code = """
        import os
        print("KEY=" + os.environ.get("ANTHROPIC_API_KEY", "<none>"))
        print("CWD=" + os.getcwd())
    """
    outcome, out, _ = _run(tmp_path, code)
    text = out.read_text()
    assert "KEY=<none>" in text
    assert f"CWD={tmp_path / 'w'}" in text
    assert outcome.reason == "exited"


def test_cancellation_kills_the_tree(tmp_path: Path) -> None:
    script = tmp_path / "child.py"
    pidfile = tmp_path / "pid"
    script.write_text(f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")

    async def go() -> None:
        task = asyncio.create_task(run_sandboxed([sys.executable, str(script)], workdir=tmp_path / "w"))
        for _ in range(100):
            await asyncio.sleep(0.05)
            if pidfile.exists() and pidfile.read_text():
                break
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(go())
    pid = int(pidfile.read_text())
    time.sleep(0.3)
    alive = Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text().split()[2]
    assert not alive


# ------------------------------------------------------------------ read-back at the report (issue #22)


def _reporter(tmp_path: Path, after: str) -> tuple[list[str], Path, Path]:
    """A child that writes a partial report by hand (not taken), then its real one atomically (temp file
    renamed), its pid beside it, and then does `after`."""
    report, pidfile = tmp_path / "result.json", tmp_path / "pid"
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(f"""
        import json, os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        open({str(report)!r}, "w").write('{{"outcome": ')  # half a file: never taken for the report
        time.sleep(0.3)
        tmp = {str(report)!r} + ".tmp"
        open(tmp, "w").write(json.dumps({{"outcome": "ok"}}))
        os.replace(tmp, {str(report)!r})
    """) + textwrap.dedent(after))
    return [sys.executable, str(script)], report, pidfile


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return False


def test_the_report_is_taken_before_the_exit_and_the_process_is_reaped_after(tmp_path: Path) -> None:
    argv, report, pidfile = _reporter(tmp_path, "time.sleep(2.0)\n")
    handle = start_sandboxed(argv, workdir=tmp_path / "w")
    watch = ReportFile(report)
    start = time.monotonic()
    outcome, _, _ = asyncio.run(wait_sandboxed(handle, 0.005, reported=watch))
    pid = int(pidfile.read_text())
    assert outcome.reason == "reported" and watch.data == {"outcome": "ok"}
    assert _alive(pid), "waited for the exit instead of taking the report"
    reap = handle.reap
    assert reap is not None and not reap.done
    cleaned: list[float] = []
    reap.then(lambda: cleaned.append(time.monotonic()))
    assert reap.join(20) and not reap.killed
    assert reap.outcome is not None and reap.outcome.reason == "exited" and reap.outcome.returncode == 0
    assert reap.outcome.ended_at - watch.written_at >= 1.5  # where the exit's seconds went
    assert not _alive(pid) and cleaned and cleaned[0] - start >= 2.0  # the clean-up ran after the exit
    assert handle.proc.pid not in live_sandbox_pids()


def test_a_worker_that_hangs_after_its_report_is_killed_after_the_grace(tmp_path: Path) -> None:
    argv, report, pidfile = _reporter(tmp_path, "while True:\n    time.sleep(1)\n")
    handle = start_sandboxed(argv, workdir=tmp_path / "w")
    outcome, _, _ = asyncio.run(wait_sandboxed(handle, 0.005, reported=ReportFile(report), exit_grace_s=1.0))
    assert outcome.reason == "reported"
    pid = int(pidfile.read_text())
    reap = handle.reap
    assert reap is not None and reap.join(20)
    assert reap.killed and 1.0 <= reap.seconds < 10
    assert not _alive(pid) and not handle.alive()


def test_without_a_report_the_wait_is_for_the_exit(tmp_path: Path) -> None:
    """No report (a crash, say): the outcome is the process's, with nothing left in the background."""
    handle = start_sandboxed([sys.executable, "-c", "import os; os.kill(os.getpid(), 11)"], workdir=tmp_path / "w")
    outcome, _, _ = asyncio.run(wait_sandboxed(handle, 0.005, reported=ReportFile(tmp_path / "none.json")))
    assert outcome.reason == "signal" and outcome.signal == "SIGSEGV" and outcome.ended_at > 0
    assert handle.reap is None
