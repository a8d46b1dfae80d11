"""A failure that every later LLM call would meet too (a refused key, an unknown model, an SDK
module that cannot be imported) ends the session at its first occurrence, with the message and the
fix, and stops a batch; the exit codes are those of bad configuration (2) and a missing module (3).
The real SDKs talk to the scripted server on 127.0.0.1; nothing is evaluated before the first reply."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.session import RunStore, create_session
from cudaforge.engine.session.batch import Batch
from llm_server import Fault, ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, TASK, coder_reply, session_config

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedLLMServer]:
    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer() as srv:
        yield srv


@pytest.mark.parametrize(("fault", "kind"), [("401", "auth"), ("403", "auth"), ("404", "not_found")])
async def test_refused_key_or_unknown_model_ends_the_session(server: ScriptedLLMServer, cache_dir: Path,
                                                             tmp_path: Path, fault: str, kind: str) -> None:
    server.push(*(Fault(fault) for _ in range(4)))  # type: ignore[arg-type]
    events: list[Any] = []
    config = session_config(server, cache_dir, **{"session.rounds": 4, "session.mode": "auto"})
    session = create_session(TASK, config, on_event=events.append, run_root=tmp_path)
    stopped = await session.run()
    assert stopped.reason == "bad_config", stopped
    assert len(server.requests) == 1  # not repeated round after round
    assert f"{kind} {fault}" in stopped.message and "Coder (openai-compatible gpt-5)" in stopped.message
    assert "cudaforge.toml" in stopped.message or "API key" in stopped.message  # the fix
    # The failed draft is not stored, so a session resumed after the fix asks the Coder again.
    store = RunStore(session.store.path, read_only=True)
    assert store.get(1, "coder-1") is None
    assert store.state.stop_reason == "bad_config"


async def test_missing_sdk_module_ends_the_session(server: ScriptedLLMServer, cache_dir: Path,
                                                   tmp_path: Path) -> None:
    config = session_config(server, cache_dir, **{"session.rounds": 4, "session.mode": "auto"})
    session = create_session(TASK, config, run_root=tmp_path)
    assert session.coder is not None
    session.coder.client._sdk_module = "cudaforge_no_such_sdk"  # as on a machine without the SDK
    stopped = await session.run()
    assert stopped.reason == "unavailable"
    assert "cudaforge_no_such_sdk is not installed" in stopped.message
    assert "pip install cudaforge_no_such_sdk" in stopped.message
    assert server.requests == []


def _config_file(tmp_path: Path, server: ScriptedLLMServer, cache_dir: Path) -> Path:
    llm = (f'provider = "openai-compatible"\nmodel = "gpt-5"\nbase_url = "{server.base_url_compat}"\n'
           f'api_key_env = "{KEY_ENV}"\ntimeout_s = 20.0\nmax_retries = 0\n')
    path = tmp_path / "cf.toml"
    path.write_text(
        f'[eval]\ndevice = "cpu"\ntrials = 2\n[timing]\nwarmup = 1\ntrials = 5\nhost_trials = 3\nl2_flush = false\nnoise_threshold = 0.0\n'
        f'[session]\nrounds = 3\nformat = "cpu"\n[budget]\ndollars = 100.0\nbatch_dollars = 100.0\n'
        f'[run]\nfolder = "{tmp_path / "runs"}"\ncache_dir = "{cache_dir}"\n[coder]\n{llm}[judge]\n{llm}')
    return path


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaforge.engine.cli", *args]


def test_unknown_model_stops_the_batch_with_exit_2(server: ScriptedLLMServer, cache_dir: Path,
                                                    tmp_path: Path) -> None:
    """One task meets the 404; the others are not started, stay pending, and `resume` runs them."""
    folder = tmp_path / "level"
    folder.mkdir()
    for name in ("a_relu", "b_relu", "c_relu"):
        shutil.copy(TASK, folder / f"{name}.py")
    server.push(Fault("404"))
    cfg = _config_file(tmp_path, server, cache_dir)
    env = {**os.environ, KEY_ENV: KEY}
    res = subprocess.run(_cli("run", str(folder), "--auto", "--config", str(cfg), "--jobs", "1", "--json"),
                         env=env, capture_output=True, text=True, timeout=240)
    assert res.returncode == 2, res.stderr[-3000:]
    assert len(server.requests) == 1
    summary = json.loads(res.stdout)
    batch = Batch.open(summary["batch_dir"])
    statuses = sorted(row["status"] for row in batch.data()["tasks"])
    assert statuses == ["pending", "pending", "stopped"]
    # After the fix (here: the server now answers), resume finishes every task.
    server.push(*(coder_reply(CORRECT) for _ in range(3)))
    res = subprocess.run(_cli("resume", summary["batch_dir"], "--json", "--rounds", "1"), env=env,
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(res.stdout)["correct"] == 3
