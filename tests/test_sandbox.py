"""The sandbox on its own: scrubbed env, per-phase limits, output limit, descendants swept."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import textwrap
import time
from pathlib import Path

from cudaforge.engine.evaluation.sandbox import run_sandboxed, scrub_env


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
