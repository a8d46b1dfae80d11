"""Batches on a Ray cluster (issue 17), CPU device, through the real `cudaforge` command in
subprocesses and the scripted LLM server through the real SDK.

The module starts one small Ray cluster on this machine (ray.cluster_utils.Cluster: a head and a
second node, each with one CPU; the second node carries the custom resource `cf_second_node` so the
tests can find it). Each node gets one evaluation actor, so work lands on both. Tests: losing the
second node mid-batch (the evaluation in flight there is retried on the head, the batch finishes
with nothing lost); killing the driver, then `resume` (no finished evaluation or LLM call
repeated); a local Ray instance when no address is given; `--ray` without Ray installed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.session.batch import Batch
from llm_server import RecordedRequest, ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, TASK, coder_reply, judge_optimize_reply

pytestmark = pytest.mark.timeout(600)

SECOND = "cf_second_node"  # the second node's custom resource
# Ray's health checks every second, a node missing 5 is dead: a lost node is noticed in ~5-7 s, not ~15 s,
# while a node that is merely starved of CPU for a second or two (2 cores, torch imports) is not declared dead.
FAST_HEALTH = {"health_check_period_ms": 1000, "health_check_failure_threshold": 5, "health_check_timeout_ms": 2000}
NODE = {"num_cpus": 1, "object_store_memory": 100 << 20}


@pytest.fixture(scope="module")
def cluster(cache_dir: Path) -> Iterator[Any]:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    from ray.cluster_utils import Cluster

    tmp = tempfile.mkdtemp(prefix="cfray-")  # short: Ray's socket paths have a length limit
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_TMPDIR", tmp)
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        mp.delenv("RAY_ADDRESS", raising=False)
        c = Cluster(initialize_head=True, head_node_args={**NODE, "include_dashboard": False,
                                                          "_system_config": FAST_HEALTH})
        try:
            yield c
        finally:
            c.shutdown()
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def second_node(cluster: Any) -> Iterator[Any]:
    node = cluster.add_node(**NODE, resources={SECOND: 1})
    yield node
    if node in cluster.worker_nodes:
        cluster.remove_node(node)


@pytest.fixture
def server() -> Iterator[ScriptedLLMServer]:
    with ScriptedLLMServer() as srv:
        yield srv


def _is_judge(req: RecordedRequest) -> bool:
    return "You are the Judge" in req.system


def _script(server: ScriptedLLMServer, count: int, nonce: str) -> None:
    """The Coder answers (after 0.5 s) with a correct module whose import takes 2 s (a long build, so
    an evaluation is still running when its node or the driver is killed), a new text each time so
    no evaluation is answered from the result cache; the Judge answers with an optimization."""
    numbers = itertools.count(1)

    def answer(req: RecordedRequest) -> Any:
        if _is_judge(req):
            return judge_optimize_reply()
        source = CORRECT.replace("import torch\n", "import time\n\nimport torch\n", 1) + \
            f"\ntime.sleep(2.0)  # stands in for a long build; {nonce} #{next(numbers)}\n"
        return replace(coder_reply(source), delay_s=0.5)

    for _ in range(count):
        server.push(answer)


def _tasks(tmp_path: Path, nonce: str) -> Path:
    """Three copies of the CI task; a distinct first line each, so no result is shared through the cache."""
    folder = tmp_path / "level"
    folder.mkdir()
    for name in ("a_relu_bias", "b_relu_bias", "c_relu_bias"):
        (folder / f"{name}.py").write_text(f"# {name} {nonce}\n" + TASK.read_text())
    return folder


def _config(tmp_path: Path, server: ScriptedLLMServer, cache_dir: Path, rounds: int, ray: str = "") -> Path:
    llm = (f'provider = "openai-compatible"\nmodel = "gpt-5"\nbase_url = "{server.base_url_compat}"\n'
           f'api_key_env = "{KEY_ENV}"\ntimeout_s = 20.0\nmax_retries = 0\n')
    path = tmp_path / "cf.toml"
    path.write_text(
        f'[eval]\ndevice = "cpu"\ntrials = 2\n[timing]\nwarmup = 1\ntrials = 5\nhost_trials = 3\nl2_flush = false\nnoise_threshold = 0.0\n'
        f'[session]\nrounds = {rounds}\nformat = "cpu"\n[budget]\ndollars = 100.0\nbatch_dollars = 100.0\n'
        f'[run]\nfolder = "{tmp_path / "runs"}"\ncache_dir = "{cache_dir}"\n{ray}[coder]\n{llm}[judge]\n{llm}')
    return path


def _env() -> dict[str, str]:
    return {**os.environ, KEY_ENV: KEY}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "cudaforge.engine.cli", *args]


def _wait_for(pred: Any, timeout: float, proc: subprocess.Popen[str], log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        if proc.poll() is not None:
            raise AssertionError(f"the driver ended early ({proc.returncode}): {log.read_text()[-3000:]}")
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting; driver output: {log.read_text()[-3000:]}")


def _ray_records(batch_dir: Path) -> dict[str, list[dict[str, Any]]]:
    """Per run folder, the manifest's record of where each evaluation ran."""
    return {row.run_dir: json.loads(Path(row.run_dir, "manifest.json").read_text()).get("ray", {}).get("evaluations", [])
            for row in Batch.open(batch_dir).rows() if row.run_dir}


def test_losing_a_node_mid_batch_retries_its_evaluation_elsewhere(cluster: Any, second_node: Any,
                                                                   server: ScriptedLLMServer, cache_dir: Path,
                                                                   tmp_path: Path) -> None:
    nonce = f"lost-node {time.time_ns()}"
    _script(server, 10, nonce)
    cfg = _config(tmp_path, server, cache_dir, rounds=1)
    log = tmp_path / "driver.log"
    with log.open("w") as out:
        proc = subprocess.Popen(_cli("run", str(_tasks(tmp_path, nonce)), "--auto", "--config", str(cfg), "--json",
                                     "--ray-address", cluster.address),
                                env=_env(), stdout=subprocess.PIPE, stderr=out, text=True)
    second = second_node.node_id[:8]
    try:
        _wait_for(lambda: any("evaluation on node" in line and f" {second} " in line
                              for line in log.read_text().splitlines()), 240, proc, log)
        cluster.remove_node(second_node, allow_graceful=False)  # the node dies: raylet and its workers
        stdout, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    assert proc.returncode == 0, text[-3000:]
    summary = json.loads(stdout)  # stdout holds the JSON document only (Ray's messages went to stderr)
    assert summary["tasks"] == 3 and summary["correct"] == 3 and summary["fast_p"]["fast_0"] == 1.0
    assert "ray: 2 actor(s) on 2 node(s)" in text
    lines = text.splitlines()
    assert any(re.search(f" {second} cpu: node (lost|unreachable).*; retrying on another node \\(retry 1 of 3\\)", line)
               for line in lines)
    assert any("evaluation on node" in line and line.endswith("cpu (retry 1 of 3)") for line in lines)
    records = _ray_records(Path(summary["batch_dir"]))
    entries = [e for run in records.values() for e in run]
    assert len(entries) == 3 and {e["round"] for e in entries} == {1}  # one evaluation per task, all recorded
    retried = [e for e in entries if e["retries"]]
    assert len(retried) == 1 and retried[0]["lost"][0]["node_id"] == second_node.node_id
    assert retried[0]["node_id"] != second_node.node_id and retried[0]["device"] == "cpu"
    assert all(e["node_id"] and e["node_ip"] and e["wall_s"] > 0 for e in entries)
    for run_dir in records:  # nothing lost: each run finished its round with a stored result
        assert json.loads(Path(run_dir, "rounds/001/eval.json").read_text())["accepted"] is True
        manifest = json.loads(Path(run_dir, "manifest.json").read_text())
        assert manifest["ray"]["retries"] == sum(e["retries"] for e in manifest["ray"]["evaluations"])
    assert len(server.requests) == 3  # one Coder call per task, none repeated


def test_driver_killed_then_resume_repeats_nothing(cluster: Any, second_node: Any, server: ScriptedLLMServer,
                                                   cache_dir: Path, tmp_path: Path) -> None:
    nonce = f"killed-driver {time.time_ns()}"
    _script(server, 20, nonce)
    # the backend and the address from the configuration file this time
    cfg = _config(tmp_path, server, cache_dir, rounds=2,
                  ray=f'[batch]\nbackend = "ray"\naddress = "{cluster.address}"\n')
    log = tmp_path / "driver.log"
    runs = tmp_path / "runs"

    def round_two_evaluating() -> bool:  # a run whose round 1 is stored and whose round 2 is being evaluated
        return any(not (cand.parent / "eval.json").exists() for cand in runs.glob("batch-*/*/rounds/002/candidate.py"))

    with log.open("w") as out:
        proc = subprocess.Popen(_cli("run", str(_tasks(tmp_path, nonce)), "--auto", "--config", str(cfg),
                                     "--jobs", "2"),
                                env=_env(), stdout=out, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        _wait_for(round_two_evaluating, 300, proc, log)
        os.kill(proc.pid, signal.SIGKILL)  # the driver dies; its actors die with it (Ray's fate sharing)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    [batch_dir] = list(runs.glob("batch-*"))
    finished = {r.run_dir: Path(r.run_dir, "state.json").read_bytes() for r in Batch.open(batch_dir).rows()
                if r.status == "done"}
    evaluated = {p: p.read_bytes() for p in batch_dir.glob("*/rounds/*/eval.json")}
    assert len(finished) < 3 and evaluated
    records_before = _ray_records(batch_dir)
    calls_before = len(server.requests)

    res = subprocess.run(_cli("resume", str(batch_dir), "--json"), env=_env(), capture_output=True, text=True,
                         timeout=400)
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads(res.stdout)
    assert summary["tasks"] == 3 and summary["correct"] == 3
    assert "ray: 2 actor(s) on 2 node(s)" in res.stderr and "resuming run" in res.stderr
    for run_dir, state in finished.items():  # finished tasks were skipped, untouched
        assert Path(run_dir, "state.json").read_bytes() == state
    for path, data in evaluated.items():  # finished evaluations were loaded, not sent again
        assert path.read_bytes() == data
    records = _ray_records(batch_dir)
    for run_dir, before in records_before.items():
        assert records[run_dir][:len(before)] == before
        assert len(records[run_dir]) == 2 and sorted(e["round"] for e in records[run_dir]) == [1, 2]
    # no completed LLM call repeated: each run has Coder, Judge, Coder; at most the calls in flight at
    # the kill (one per session in flight, --jobs 2) were lost and made again
    for row in Batch.open(batch_dir).rows():
        calls = [json.loads(line) for line in Path(row.run_dir, "calls.jsonl").read_text().splitlines()]
        assert len(calls) == 3, row.run_dir
    assert len(server.requests) <= 9 + 2 and len(server.requests) > calls_before


def test_without_an_address_a_local_ray_instance_is_started(server: ScriptedLLMServer, cache_dir: Path,
                                                            tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", tempfile.mkdtemp(prefix="cfray-"))
    nonce = f"local {time.time_ns()}"
    _script(server, 2, nonce)
    cfg = _config(tmp_path, server, cache_dir, rounds=1)
    task = _tasks(tmp_path, nonce) / "a_relu_bias.py"
    res = subprocess.run(_cli("run", str(task), "--auto", "--config", str(cfg), "--json", "--ray"), env=_env(),
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "ray: started a local Ray instance" in res.stderr and "ray: 1 actor(s) on 1 node(s)" in res.stderr
    summary = json.loads(res.stdout)
    assert summary["tasks"] == 1 and summary["correct"] == 1
    [entries] = _ray_records(Path(summary["batch_dir"])).values()
    assert len(entries) == 1 and entries[0]["device"] == "cpu" and entries[0]["retries"] == 0
    shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)


def test_ray_flag_without_ray_installed_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    from cudaforge.engine.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError, as without the extra
    monkeypatch.setenv(KEY_ENV, KEY)
    cfg = tmp_path / "cf.toml"
    cfg.write_text(f'[eval]\ndevice = "cpu"\n[run]\nfolder = "{tmp_path / "runs"}"\n[coder]\nprovider = "openai"\n'
                   f'model = "gpt-5"\napi_key_env = "{KEY_ENV}"\n')
    folder = _tasks(tmp_path, "missing")
    assert main(["run", str(folder), "--auto", "--config", str(cfg), "--ray"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["cudaforge: error: --ray needs Ray, which is not installed here: pip install 'cudaforge-tui[ray]'"]
    assert not (tmp_path / "runs").exists()  # no half-made batch folder


def test_unreachable_cluster_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray", reason="the [ray] extra is not installed")
    from cudaforge.engine.config import load_config
    from cudaforge.engine.errors import ToolUnavailable
    from cudaforge.engine.session.ray_backend import RayPool

    cfg = load_config(None, {"eval.device": "cpu", "batch.backend": "ray", "batch.address": "127.0.0.1:1"},
                      cwd=tmp_path, use_user_config=False)
    started, stdout = time.monotonic(), sys.stdout
    with pytest.raises(ToolUnavailable) as err:
        asyncio.run(RayPool.start(cfg))
    assert time.monotonic() - started < 15  # not Ray's own minutes of retrying
    assert err.value.exit_code == 3 and err.value.message.startswith("cannot reach the Ray cluster at 127.0.0.1:1")
    assert sys.stdout is stdout  # given back


def test_spare_whose_supervisor_is_killed_while_warming_up_exits(cpu_options: Any) -> None:
    """Ray kills an actor's child processes with SIGKILL (its sandbox supervisors); a spare still
    warming up then must not wait for a job forever."""
    from cudaforge.engine.evaluation.evaluator import Evaluator

    evaluator = Evaluator(cpu_options)
    evaluator.prewarm()
    spare = evaluator.spare
    assert spare is not None
    deadline = time.monotonic() + 120
    while not (spare.sandbox_dir / "progress.json").exists():  # the worker has started its warm-up
        assert time.monotonic() < deadline, "the spare worker did not start"
        time.sleep(0.01)
    assert spare.ready() is None  # still importing torch
    os.kill(spare.handle.proc.pid, signal.SIGKILL)
    spare.handle.proc.wait(timeout=10)
    while spare.ready() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    ready = spare.ready()
    assert ready is not None, "the spare never finished warming up"
    while time.monotonic() < deadline:
        try:
            os.kill(int(ready["pid"]), 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(int(ready["pid"]), signal.SIGKILL)
        raise AssertionError("the orphaned spare kept waiting for a job")
    spare.kill()
