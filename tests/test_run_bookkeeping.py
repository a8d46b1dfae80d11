"""Run bookkeeping through the real `cudaforge` command (in process), the CPU device and the scripted LLM
server through the real openai SDK: unknown costs stay unknown ("?" in text, null in JSON) in the batch
table, summary.json, `cudaforge runs` and the export report."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cudaforge.engine.cli import main
from cudaforge.engine.llm.prices import format_cost
from llm_server import ScriptedLLMServer
from session_kit import CORRECT, KEY, KEY_ENV, TASK, coder_reply

pytestmark = pytest.mark.timeout(900)


def _config(root: Path, server: ScriptedLLMServer, cache_dir: Path, rounds: int = 1) -> Path:
    # provider "openai" with a model no price sheet knows: its cost is unknown (a remote-style provider
    # is never assumed free, engine/llm/prices.py)
    path = root / "cf.toml"
    path.write_text(
        f'[eval]\ndevice = "cpu"\ntrials = 2\n[timing]\nwarmup = 1\ntrials = 5\nhost_trials = 3\nl2_flush = false\nnoise_threshold = 0.0\n'
        f'[session]\nrounds = {rounds}\nformat = "cpu"\n[budget]\ndollars = 100.0\nbatch_dollars = 100.0\n'
        f'[run]\nfolder = "{root / "runs"}"\ncache_dir = "{cache_dir}"\n'
        f'[coder]\nprovider = "openai"\nmodel = "mystery-model"\nbase_url = "{server.base_url_openai}"\n'
        f'api_key_env = "{KEY_ENV}"\ntimeout_s = 20.0\nmax_retries = 0\n[judge]\nprovider = "heuristic"\n')
    return path


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory, cache_dir: Path) -> Iterator[dict[str, Any]]:
    root = tmp_path_factory.mktemp("bookkeeping")
    tasks = root / "tasks"
    tasks.mkdir()
    for name in ("a_relu", "b_relu"):
        (tasks / f"{name}.py").write_text(f"# {name}\n" + TASK.read_text())
    with ScriptedLLMServer() as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv(KEY_ENV, KEY)
        for _ in range(8):
            server.push(coder_reply(CORRECT))
        cfg = _config(root, server, cache_dir)
        out = root / "out.json"
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            code = main(["run", str(tasks), "--config", str(cfg), "--auto", "--json"])
        out.write_text(buf.getvalue())
        yield {"root": root, "cfg": cfg, "code": code, "json": json.loads(buf.getvalue()), "server": server,
               "mp": mp}


def test_format_cost_never_says_zero_for_unknown() -> None:
    assert format_cost(None) == "?"
    assert format_cost(0.0, known=False) == "?"
    assert format_cost(0.0123, known=False) == "$0.012+?"
    assert format_cost(0.0) == "$0.000" and format_cost(12.5) == "$12.50"


def test_unknown_costs_are_null_in_summary_json_and_the_batch_output(batch: dict[str, Any]) -> None:
    assert batch["code"] == 0, batch["json"]
    doc = batch["json"]
    assert doc["dollars"] is None and all(row["dollars"] is None for row in doc["rows"])
    assert all(row["tokens"] > 0 for row in doc["rows"])  # calls were made and billed tokens
    summary = json.loads((Path(doc["batch_dir"]) / "summary.json").read_text())
    assert summary["dollars"] is None and [r["dollars"] for r in summary["rows"]] == [None, None]


def test_unknown_costs_in_the_batch_table_and_runs(batch: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    from cudaforge.engine.session.batch import Batch, format_summary, summarize

    b = Batch.open(batch["json"]["batch_dir"])
    table = format_summary(summarize(b.rows(), 1.0))
    rows = [line for line in table.splitlines() if "relu" in line]
    assert len(rows) == 2 and all(" ? " in line and "0.000" not in line for line in rows), table
    assert "dollars ?" in table
    for row in batch["json"]["rows"]:
        capsys.readouterr()
        assert main(["runs", "--runs", str(Path(row["run_dir"]).parent), "--json"]) == 0
        listed = json.loads(capsys.readouterr().out)["runs"]
        assert listed and all(r["cost_usd"] is None for r in listed)
        assert main(["runs", "--runs", str(Path(row["run_dir"]).parent)]) == 0
        text = capsys.readouterr().out
        assert "$0.000" not in text and " ? " in text, text


def test_export_of_a_cpu_run_says_how_it_was_timed_and_that_the_cost_is_unknown(batch: dict[str, Any],
                                                                                tmp_path: Path) -> None:
    run_dir = batch["json"]["rows"][0]["run_dir"]
    assert main(["export", run_dir, "--out", str(tmp_path / "best.py")]) == 0
    report = (tmp_path / "best.md").read_text()
    assert "CUDA-event" not in report and "timed by the host clock (CPU device)" in report, report
    usage = next(line for line in report.splitlines() if line.startswith("- LLM usage:"))
    assert "$0.000" not in usage and "?" in usage and "unknown" in usage, usage


async def test_a_repeated_candidate_is_marked_never_best_and_the_coder_is_told(
        cache_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cudaforge.engine.session import Notice, RoundFinished, RunStore, create_session
    from cudaforge.engine.session.console import read_session_log
    from session_kit import session_config

    monkeypatch.setenv(KEY_ENV, KEY)
    with ScriptedLLMServer() as server:
        server.push(coder_reply(CORRECT), coder_reply(CORRECT), coder_reply(CORRECT.replace("CI task", "CI task, v2")))
        events: list[Any] = []
        config = session_config(server, cache_dir, judge="heuristic", **{"session.rounds": 3, "session.mode": "auto",
                                                                         "session.revert_on_regression": False})
        session = create_session(TASK, config, on_event=events.append, run_root=tmp_path)
        stopped = await session.run()
        coder_prompts = [r for r in server.requests if "You are the Judge" not in r.system]
    assert stopped.reason == "max_rounds"
    store = RunStore(Path(session.store.path), read_only=True)
    assert store.get(2, "round")["repeat_of"] == 1 and store.get(3, "round")["repeat_of"] is None
    finished = {e.round: e for e in events if isinstance(e, RoundFinished)}
    assert finished[2].best_round != 2  # served from the cache: however it timed, never a new best
    assert any(isinstance(e, Notice) and "identical to round 1" in e.text for e in events)
    third = json.dumps(coder_prompts[2].body)
    assert "REPEAT: identical to round 1" in third and "Write a different candidate" in third
    # the state says what --open shows: status, best round, round count and the limit in force
    state = store.state
    assert state.status == "finished" and state.rounds_done == 3 and state.max_rounds == 3
    assert state.best_round == stopped.best_round and state.cancelled_round is None
    # the session log is kept in the run folder
    log = read_session_log(store.path)
    assert any(line.endswith("round 1: seed") for line in log), log
    assert any("identical to round 1" in line for line in log)
    assert any("stopped: reached the round limit (3)" in line for line in log)


def test_runs_lists_batches_and_their_runs_and_prunes_them(batch: dict[str, Any], tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    runs_root = batch["root"] / "runs"
    batch_dir = Path(batch["json"]["batch_dir"])
    capsys.readouterr()
    assert main(["runs", "--runs", str(runs_root), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    [listed] = doc["batches"]
    assert listed["path"] == str(batch_dir) and listed["tasks"] == 2 and listed["done"] == 2
    assert sorted(r["path"] for r in listed["runs"]) == sorted(r["run_dir"] for r in batch["json"]["rows"])
    assert listed["cost_usd"] is None
    assert main(["runs", "--runs", str(runs_root)]) == 0
    text = capsys.readouterr().out
    assert "no runs in" not in text and f"{batch_dir.name}/  batch: 2/2 tasks done, 2 runs, cost ?" in text
    assert main(["runs", "--runs", str(runs_root), "--prune", "--keep", "0", "--dry-run"]) == 0
    assert f"would remove {batch_dir}" in capsys.readouterr().out and batch_dir.is_dir()


def test_resume_batch_with_more_rounds_extends_every_run_or_says_why_not(
        batch: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    batch_dir = batch["json"]["batch_dir"]
    server = batch["server"]
    for _ in range(4):
        server.push(coder_reply(CORRECT.replace("CI task", "CI task, round 2")))
    capsys.readouterr()
    code = main(["resume", batch_dir, "--rounds", "2", "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert "extending 2 finished run(s) to 2 rounds" in out.err
    doc = json.loads(out.out)
    assert [row["rounds"] for row in doc["rows"]] == [2, 2]
    # asked again for 2 rounds: nothing to extend, and it says why for every task (exit 2, no silent table)
    code = main(["resume", batch_dir, "--rounds", "2"])
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert "nothing to resume" in out.err and out.err.count("already has 2 rounds (>= 2)") == 2
