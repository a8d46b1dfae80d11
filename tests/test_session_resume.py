"""Crash safety and batches through the real `cudaforge` command in subprocesses, with the scripted
LLM server in this process: `kill -9` mid-round then `resume` (no finished round lost, no completed
call repeated), a batch of 3 tasks with its summary, a batch killed and resumed, export and runs."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from cudaforge.engine.session import RunStore
from cudaforge.engine.session.batch import Batch, summarize
from llm_server import RecordedRequest, ScriptedLLMServer
from session_kit import (
    CORRECT,
    KEY,
    KEY_ENV,
    SLOW,
    TASK,
    WRONG,
    coder_reply,
    judge_correct_reply,
    judge_optimize_reply,
)

pytestmark = pytest.mark.timeout(900)


def _is_judge(req: RecordedRequest) -> bool:
    return "You are the Judge" in req.system


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as srv:
        yield srv


def _config_file(tmp_path: Path, server: ScriptedLLMServer, cache_dir: Path, rounds: int) -> Path:
    llm = (f'provider = "openai-compatible"\nmodel = "gpt-5"\nbase_url = "{server.base_url_compat}"\n'
           f'api_key_env = "{KEY_ENV}"\ntimeout_s = 20.0\nmax_retries = 0\n')
    path = tmp_path / "cf.toml"
    path.write_text(
        "# test configuration\n"
        f'[eval]\ndevice = "cpu"\ntrials = 2\n[timing]\nwarmup = 1\ntrials = 5\nhost_trials = 3\nl2_flush = false\nnoise_threshold = 0.0\n'
        f'[session]\nrounds = {rounds}\nformat = "cpu"\n[budget]\ndollars = 100.0\nbatch_dollars = 100.0\n'
        f'[run]\nfolder = "{tmp_path / "runs"}"\ncache_dir = "{cache_dir}"\n[coder]\n{llm}[judge]\n{llm}')
    return path


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env[KEY_ENV] = KEY
    return env


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaforge.engine.cli", *args]


def _wait_for(pred, timeout: float, proc: subprocess.Popen | None = None) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"the process ended early ({proc.returncode}): {out[-3000:]}")
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def _kill_tree(proc: subprocess.Popen) -> None:
    """kill -9 the cudaforge process itself (the crash), then reap what it left in its group."""
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(0.5)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def test_kill_9_mid_round_then_resume(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    # round 1: wrong -> round 2: Judge + correct -> round 3: Judge + slow. Kill during round 2's evaluation.
    nonce = f"\n# run {time.time_ns()}: a new candidate text, so no cached result short-cuts the evaluation\n"
    server.push(coder_reply(WRONG + nonce), judge_correct_reply("adds 0.01"), coder_reply(CORRECT + nonce),
                judge_optimize_reply(), coder_reply(SLOW + nonce))
    cfg = _config_file(tmp_path, server, cache_dir, rounds=3)
    proc = subprocess.Popen(_cli("run", str(TASK), "--auto", "--config", str(cfg)), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    runs = tmp_path / "runs"
    try:
        _wait_for(lambda: any(runs.glob("*/rounds/002/candidate.py")), 300, proc)
        _kill_tree(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    [run_dir] = list(runs.iterdir())
    store = RunStore(run_dir, read_only=True)
    assert store.state.status == "running" and not store.is_live()  # crashed, not stopped
    assert len(server.requests) == 3
    round1_eval = (run_dir / "rounds/001/eval.json").read_bytes()
    assert (run_dir / "rounds/001/round.json").exists() and store.get(1, "round")["finished"]

    listing = subprocess.run(_cli("runs", "--config", str(cfg), "--json"), env=_env(), capture_output=True,
                             text=True, timeout=60)
    assert json.loads(listing.stdout)["runs"][0]["status"] == "interrupted"

    done = subprocess.run(_cli("resume", str(run_dir), "--json"), env=_env(), capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert [r["round"] for r in report["rounds"]] == [1, 2, 3]
    assert [r["outcome"] for r in report["rounds"]] == ["wrong_result", "ok", "ok"]
    # no completed call repeated: 3 before the crash, then the Judge and Coder of round 3 only
    assert len(server.requests) == 5 and server.remaining == 0
    assert (run_dir / "rounds/001/eval.json").read_bytes() == round1_eval  # not re-evaluated
    assert len(RunStore(run_dir, read_only=True).calls()) == 5
    assert "resuming run" in done.stderr

    out = tmp_path / "best.py"
    exported = subprocess.run(_cli("export", str(run_dir), "--out", str(out)), env=_env(), capture_output=True,
                              text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    text = out.read_text()
    assert "class ModelNew" in text and "cudaforge" not in text.split('"""', 2)[2]  # only the header names us
    md = out.with_suffix(".md").read_text()
    assert "| round | kind |" in md and "## Speedup per round" in md and "Best: round 2" in md


def _batch_tasks(tmp_path: Path, n: int = 3) -> Path:
    folder = tmp_path / "level"
    folder.mkdir()
    for name in ("a_relu_bias", "b_relu_bias", "c_relu_bias")[:n]:
        shutil.copy(TASK, folder / f"{name}.py")
    return folder


def _batch_script(server: ScriptedLLMServer, count: int) -> None:
    """Replies chosen by who asks: the Coder gets the correct module (after 1 s), the Judge an optimization."""
    slow_coder = replace(coder_reply(CORRECT), delay_s=1.0)
    for _ in range(count):
        server.push(lambda req: judge_optimize_reply() if _is_judge(req) else slow_coder)


def test_batch_of_three_with_summary(server: ScriptedLLMServer, cache_dir: Path, tmp_path: Path) -> None:
    _batch_script(server, 20)
    cfg = _config_file(tmp_path, server, cache_dir, rounds=2)
    folder = _batch_tasks(tmp_path)
    res = subprocess.run(_cli("run", str(folder), "--auto", "--config", str(cfg), "--json"), env=_env(),
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "estimate: 3 tasks x 2 rounds" in res.stderr
    summary = json.loads(res.stdout)
    assert summary["tasks"] == 3 and summary["correct"] == 3 and summary["correct_pct"] == 100.0
    assert set(summary["fast_p"]) == {"fast_0", "fast_0.5", "fast_0.8", "fast_1", "fast_1.5", "fast_2"}
    assert summary["fast_p"]["fast_0"] == 1.0 and summary["geomean_speedup"] > 0
    assert len(server.requests) == 9  # per task: coder, judge, coder
    assert summary["tokens"] > 0 and summary["dollars"] > 0
    batch_dir = Path(summary["batch_dir"])
    assert json.loads((batch_dir / "summary.json").read_text())["correct"] == 3
    assert all(row["status"] == "done" for row in Batch.open(batch_dir).data()["tasks"])


def test_batch_killed_and_resumed_skips_finished_tasks(server: ScriptedLLMServer, cache_dir: Path,
                                                       tmp_path: Path) -> None:
    _batch_script(server, 30)
    cfg = _config_file(tmp_path, server, cache_dir, rounds=1)
    folder = _batch_tasks(tmp_path)
    proc = subprocess.Popen(_cli("run", str(folder), "--auto", "--config", str(cfg), "--jobs", "1"), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    runs = tmp_path / "runs"

    def one_done() -> bool:
        for b in runs.glob("batch-*/batch.json"):
            rows = json.loads(b.read_text())["tasks"]
            if sum(r["status"] == "done" for r in rows) >= 1:
                return True
        return False

    try:
        _wait_for(one_done, 300, proc)
        _kill_tree(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    [batch_dir] = list(runs.glob("batch-*"))
    before = Batch.open(batch_dir).rows()
    finished = [r for r in before if r.status == "done"]
    assert 1 <= len(finished) < 3
    calls_before = len(server.requests)
    finished_dirs = {r.run_dir: (Path(r.run_dir) / "state.json").read_bytes() for r in finished}

    res = subprocess.run(_cli("resume", str(batch_dir), "--json"), env=_env(), capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["tasks"] == 3 and summary["correct"] == 3
    for run_dir, state in finished_dirs.items():  # finished tasks were skipped, untouched
        assert (Path(run_dir) / "state.json").read_bytes() == state
    # at most one Coder call per unfinished task (a call in flight at the kill may be lost and remade)
    unfinished = 3 - len(finished)
    assert len(server.requests) - calls_before <= unfinished
    assert len(server.requests) <= 3 + 1


def test_summary_arithmetic() -> None:
    from cudaforge.engine.session.batch import TaskOutcome

    rows = [TaskOutcome("a", "done", correct=True, best_speedup=2.0),
            TaskOutcome("b", "done", correct=True, best_speedup=0.5),
            TaskOutcome("c", "done", correct=False),
            TaskOutcome("d", "done", correct=True, best_speedup=1.0)]
    s = summarize(rows, 10.0)
    assert s.correct == 3 and s.correct_pct == 75.0
    # strictly greater than p, over all four tasks
    assert s.fast_p == {"fast_0": 0.75, "fast_0.5": 0.5, "fast_0.8": 0.5, "fast_1": 0.25, "fast_1.5": 0.25,
                        "fast_2": 0.0}
    assert s.geomean_speedup == pytest.approx(1.0)


def test_cost_estimate_uses_model_prices(tmp_path: Path) -> None:
    from cudaforge.engine.config import load_config
    from cudaforge.engine.session.batch import estimate_cost

    cfg = load_config(None, {"coder.provider": "openai", "coder.model": "gpt-5", "session.rounds": 3},
                      cwd=tmp_path, use_user_config=False)
    dollars, text = estimate_cost(cfg, 4)
    assert dollars is not None and dollars > 0 and "4 tasks x 3 rounds" in text
    unpriced = load_config(None, {"coder.provider": "openai", "coder.model": "mystery-model"}, cwd=tmp_path,
                           use_user_config=False)
    assert estimate_cost(unpriced, 4)[0] is None


def test_calls_of_a_stored_draft_are_restored_to_the_call_log(tmp_path: Path) -> None:
    """A crash between storing an agent's draft and appending its calls: opening the run puts the calls
    back into calls.jsonl (once), so their cost counts and the call is not made again."""
    from cudaforge.engine.llm.types import CallRecord, Message, Usage
    from cudaforge.engine.task import load_task

    store = RunStore.create(tmp_path, load_task(TASK), config={}, mode="auto")
    record = CallRecord(call_id="coder-abc", agent="coder", purpose="seed", round=1, attempt=1, provider="openai",
                        model="gpt-5", started_at=1.0, latency_s=0.5, system="s", messages=(Message("user", "u"),),
                        params={}, reply_text="r", usage=Usage(input_tokens=10, output_tokens=5), cost_usd=0.01)
    store.put(1, "coder-1", {"source": None, "records": [record.to_dict()]})
    store.put(1, "judge-1", {"reply": {"records": []}})
    assert store.calls() == []
    assert store.reconcile_calls() == 1 and store.reconcile_calls() == 0
    [restored] = store.calls()
    assert restored.call_id == "coder-abc" and restored.cost_usd == 0.01
