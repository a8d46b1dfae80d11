"""Transcripts: every prompt and reply kept as data, written to disk, and never holding a key."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from cudaforge.engine.agents import Coder, Judge
from cudaforge.engine.llm import (
    CallRecord,
    LLMSettings,
    UsageLedger,
    make_client,
    read_transcript,
    write_transcript,
)
from llm_server import Fault, Reply, ScriptedLLMServer

SECRET_OPENAI = "sk-proj-SECRET-openai-9f8e7d6c5b4a"
SECRET_ANTHROPIC = "sk-ant-SECRET-anthropic-1a2b3c4d5e"
MODULE = "import torch.nn as nn\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x\n"
JUDGE_JSON = '{"critical_issue": "a", "why_it_matters": "b", "minimal_fix_hint": "c"}'


async def run_session_like_calls(srv: ScriptedLLMServer, ledger: UsageLedger) -> tuple:
    """A Coder on OpenAI and a Judge on Anthropic, with a retry each and a failed call."""
    env = {"OPENAI_API_KEY": SECRET_OPENAI, "ANTHROPIC_API_KEY": SECRET_ANTHROPIC}
    coder_settings = LLMSettings(
        provider="openai", model="gpt-5", base_url=srv.base_url_openai, timeout_s=2, max_retries=0
    )
    judge_settings = LLMSettings(
        provider="anthropic",
        model="claude-sonnet-4",
        base_url=srv.base_url_anthropic,
        timeout_s=2,
        max_retries=0,
    )
    coder = Coder(make_client(coder_settings, env=env), ledger=ledger)
    judge = Judge(make_client(judge_settings, env=env), ledger=ledger)
    srv.push(Fault("no_code"), Reply(text=f"```python\n{MODULE}```"))
    seed = await coder.seed("class Model: pass", round=1)
    srv.push(Fault("bad_json"), Reply(text=JUDGE_JSON))
    verdict = await judge.correct("class Model: pass", candidate_source=MODULE, result=None, round=1)
    srv.push(Fault("401"))
    failed = await coder.repair(
        "class Model: pass", candidate_source=MODULE, result=None, recommendation=verdict, round=2
    )
    await coder.client.aclose()
    await judge.client.aclose()
    return seed, verdict, failed


async def test_transcript_round_trip_and_no_key_anywhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)  # SDK and HTTP debug logs included
    ledger = UsageLedger(cap_usd=5.0)
    with ScriptedLLMServer() as srv:
        seed, verdict, failed = await run_session_like_calls(srv, ledger)
        assert srv.leaks(SECRET_OPENAI) == [] and srv.leaks(SECRET_ANTHROPIC) == []
    assert seed.ok and not verdict.fallback and failed.error is not None and failed.error.kind == "auth"

    records = ledger.records
    assert [(r.agent, r.purpose, r.round) for r in records] == [
        ("coder", "seed", 1),
        ("coder", "seed/retry", 1),
        ("judge", "correct", 1),
        ("judge", "correct/retry", 1),
        ("coder", "repair", 2),
    ]
    # Every prompt and reply is in the records.
    assert records[1].messages[-1].content.startswith("Your last reply could not be used")
    assert records[1].reply_text.startswith("```python")
    assert records[2].system.startswith("You are the Judge")
    assert records[4].error_kind == "auth" and records[4].ok is False
    assert ledger.total(round=1).calls == 4 and ledger.total(round=2).errors == 1

    path = write_transcript(tmp_path / "run" / "transcript.jsonl", records)
    assert read_transcript(path) == records
    (tmp_path / "run" / "coder_reply.json").write_text(json.dumps(seed.to_dict()))
    (tmp_path / "run" / "judge_reply.json").write_text(json.dumps(verdict.to_dict()))
    (tmp_path / "run" / "failed_reply.json").write_text(json.dumps(failed.to_dict()))
    (tmp_path / "run" / "usage.json").write_text(json.dumps(ledger.to_dict()))

    written = sorted(tmp_path.rglob("*"))
    assert len([p for p in written if p.is_file()]) == 5
    for file in written:
        if file.is_file():
            data = file.read_bytes()
            assert SECRET_OPENAI.encode() not in data, file
            assert SECRET_ANTHROPIC.encode() not in data, file
    assert caplog.records, "expected SDK debug logs to be captured"
    assert SECRET_OPENAI not in caplog.text and SECRET_ANTHROPIC not in caplog.text


def test_record_to_dict_is_json_and_round_trips() -> None:
    record = CallRecord(
        call_id="coder-1",
        agent="coder",
        purpose="seed",
        round=1,
        attempt=1,
        provider="openai",
        model="gpt-5",
        started_at=1.0,
        latency_s=2.0,
        system="s",
        messages=(),
        params={"max_completion_tokens": 10},
        notes=("n",),
    )
    data = json.loads(json.dumps(record.to_dict()))
    assert CallRecord.from_dict(data) == record
